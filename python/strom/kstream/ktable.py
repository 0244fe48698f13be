"""KTable: a changelog stream, the latest value per key.

The DSL's classes return one another, so their modules import one another as
modules (see strom.kstream.kstream).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.kstream import kgrouped_table, kstream
from strom.kstream.internals import suppress as suppress_processor
from strom.kstream.internals import table_joins as tj
from strom.kstream.internals import table_processors as tp
from strom.kstream.internals import table_suppliers as ts
from strom.kstream.materialized import Materialized
from strom.processor.api import Partitioner
from strom.processor.internals.topology_builder import StoreDef

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.kgrouped_table import KGroupedTable
    from strom.kstream.kstream import KStream
    from strom.kstream.suppressed import Suppressed
    from strom.processor.api import ValueTransformerWithKey
    from strom.processor.internals.nodes import Node
    from strom.serdes import Serde


class KTable:
    """A changelog stream: the latest value per key (Kafka's ``KTable``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        supplier: ts.TableSupplier,
        *,
        store_name: str | None = None,
        window_grace_ms: int | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        # The store the user named, if any (Kafka's queryableStoreName).
        self.queryable_store_name = store_name
        # Old values and value getters, as the processor behind the table gives them.
        self._supplier = supplier
        self._sending_old_values = False
        # The grace period of the windows a windowed table comes from.
        self._window_grace_ms = window_grace_ms

    def _enable_sending_old_values(self, force_materialization: bool) -> bool:
        """Asks the processor behind this table for old values (Kafka's
        ``KTableImpl.enableSendingOldValues``): True once it sends them."""
        if not self._sending_old_values:
            if not self._supplier.enable_sending_old_values(force_materialization):
                return False
            self._sending_old_values = True
        return True

    def _view(self) -> ts.TableView | None:
        """How joins read this table by key (Kafka's ``valueGetterSupplier``;
        an unmaterialized source table gets its store here)."""
        return self._supplier.view()

    def _then(
        self,
        prefix: str,
        supplier: ts.TableSupplier,
        node: Callable[[], Node],
        name: str | None,
        value_serde_kept: bool,
    ) -> KTable:
        node_name = self._builder.processor_name(name, prefix)
        self._builder.internal.add_processor(node_name, node, self._node)
        return KTable(
            self._builder,
            node_name,
            self._key_serde,
            self._value_serde if value_serde_kept else None,
            supplier,
            window_grace_ms=self._window_grace_ms,
        )

    def filter(
        self,
        predicate: Callable[[Any, Any], bool],
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """Keeps entries for which ``predicate(key, value)`` holds; an update
        that fails it deletes the key downstream (a tombstone).
        ``materialized`` keeps the result in a queryable store."""
        return self._filter(predicate, False, materialized, name)

    def filter_not(
        self,
        predicate: Callable[[Any, Any], bool],
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        return self._filter(predicate, True, materialized, name)

    def _filter(
        self,
        predicate: Callable[[Any, Any], bool],
        negate: bool,
        materialized: Materialized | str | None,
        name: str | None,
    ) -> KTable:
        supplier = ts.FilterSupplier(self, predicate, negate)
        versioned_parent = self._supplier.versioned
        if materialized is not None:

            def keep(key: Any, value: Any) -> Any:
                return value if bool(predicate(key, value)) is not negate else None

            # Kafka's filter under versioned semantics forwards every update.
            skip_both_absent = not versioned_parent
            return self._then_materialized(
                "KTABLE-FILTER-", supplier, keep, skip_both_absent, materialized, name, True
            )
        return self._then(
            "KTABLE-FILTER-",
            supplier,
            lambda: tp.KTableFilter(predicate, negate, supplier, versioned_parent),
            name,
            True,
        )

    def _then_materialized(
        self,
        prefix: str,
        supplier: ts.FilterSupplier | ts.MapValuesSupplier,
        compute: Callable[[Any, Any], Any],
        skip_both_absent: bool,
        materialized: Materialized | str,
        name: str | None,
        value_serde_kept: bool,
    ) -> KTable:
        """A filter or value mapper whose result is kept in a store of its
        own (Kafka's queryable name): it reads its old values there, and
        readers by key read it."""
        builder = self._builder
        mat = Materialized.of(materialized)
        # Kafka names the store first (MaterializedInternal), then the processor.
        store_name = mat.store_name or builder.new_name(f"{prefix}STATE-STORE-")
        node_name = builder.processor_name(name, prefix)
        supplier.materialize(store_name, mat.versioned)
        key_serde = mat.key_serde or self._key_serde
        value_serde = mat.value_serde or (self._value_serde if value_serde_kept else None)
        builder.internal.add_processor(
            node_name,
            lambda: tp.KTableMaterializedChange(store_name, compute, supplier, skip_both_absent),
            self._node,
        )
        builder.internal.add_store(mat.store_def(store_name, key_serde, value_serde), node_name)
        return KTable(
            builder,
            node_name,
            key_serde,
            value_serde,
            supplier,
            window_grace_ms=self._window_grace_ms,
            store_name=mat.store_name,
        )

    def map_values(
        self,
        mapper: Callable[[Any], Any] | Callable[[Any, Any], Any],
        *,
        with_key: bool = False,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """``mapper(value)`` for every entry (``with_key=True``: ``mapper(key,
        value)``, Kafka's ``ValueMapperWithKey``); deletes stay deletes.
        ``materialized`` keeps the result in a queryable store."""
        supplier = ts.MapValuesSupplier(self, mapper, with_key)
        if materialized is not None:

            def compute(key: Any, value: Any) -> Any:
                return mapper(key, value) if with_key else mapper(value)  # type: ignore[call-arg]

            return self._then_materialized(
                "KTABLE-MAPVALUES-", supplier, compute, False, materialized, name, False
            )
        return self._then(
            "KTABLE-MAPVALUES-",
            supplier,
            lambda: tp.KTableMapValues(mapper, supplier, with_key),
            name,
            False,
        )

    def transform_values(
        self,
        supplier: Callable[[], ValueTransformerWithKey[Any, Any]],
        *store_names: str,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """Each entry's new value from ``supplier()``'s
        ``ValueTransformerWithKey.transform(key, value)`` (Kafka's
        ``transformValues``), which may use the state stores named (added
        with ``StreamsBuilder.add_state_store``). It is called for deletes
        too (value None), and may make a value of them. ``materialized``
        with a store name keeps the result in a queryable store."""
        if not callable(supplier):
            raise TopologyError("transform_values takes a supplier of ValueTransformerWithKey")
        builder = self._builder
        mat = None if materialized is None else Materialized.of(materialized)
        # Kafka materializes only a store with a name (a queryable one).
        store_name = None if mat is None else mat.store_name
        node_name = builder.processor_name(name, "KTABLE-TRANSFORMVALUES-")
        table_supplier = ts.TransformValuesSupplier(self, node_name, supplier, store_names)
        key_serde = self._key_serde
        value_serde = None
        if mat is not None:
            key_serde = mat.key_serde or key_serde
            value_serde = mat.value_serde
        node: Callable[[], Node]
        if store_name is None:
            node = functools.partial(tp.KTableTransformValues, supplier, table_supplier)
        else:
            assert mat is not None
            table_supplier.materialize(store_name, mat.versioned)
            node = functools.partial(tp.KTableTransformValuesMaterialized, store_name, supplier)
        builder.internal.add_processor(node_name, node, self._node)
        if store_name is not None:
            assert mat is not None
            builder.internal.add_store(mat.store_def(store_name, key_serde, value_serde), node_name)
        builder.internal.connect_processor_and_stores([node_name], list(store_names))
        return KTable(
            builder,
            node_name,
            key_serde,
            value_serde,
            table_supplier,
            window_grace_ms=self._window_grace_ms,
            store_name=store_name,
        )

    def to_stream(
        self, mapper: Callable[[Any, Any], Any] | None = None, *, name: str | None = None
    ) -> KStream:
        """The table's updates as a stream (deletes as None values);
        ``mapper(key, value)`` gives each record a new key (Kafka's
        ``toStream(KeyValueMapper)``: ``to_stream().select_key(mapper)``)."""
        node_name = self._builder.processor_name(name, "KTABLE-TOSTREAM-")
        self._builder.internal.add_processor(node_name, tp.KTableToStream, self._node)
        stream = kstream.KStream(self._builder, node_name, self._key_serde, self._value_serde)
        return stream if mapper is None else stream.select_key(mapper)

    def suppress(self, suppressed: Suppressed) -> KTable:
        """Holds updates back: ``Suppressed.until_window_closes(...)`` emits
        only each window's final result; ``Suppressed.until_time_limit(...)``
        the latest update per key once the time limit has passed."""
        builder = self._builder
        by_window_end = suppressed.kind == "window_closes"
        if by_window_end and self._window_grace_ms is None:
            raise TopologyError("until_window_closes needs a windowed table (from windowed_by)")
        duration = self._window_grace_ms if by_window_end else suppressed.time_limit_ms
        name = suppressed.name or builder.new_name("KTABLE-SUPPRESS-")
        store_name = (
            f"{suppressed.name}-store"
            if suppressed.name
            else builder.new_name("KTABLE-SUPPRESS-STATE-STORE-")
        )
        supplier = ts.SuppressSupplier(self)
        buffer = suppressed.buffer
        builder.internal.add_processor(
            name,
            lambda: suppress_processor.KTableSuppress(
                store_name,
                duration or 0,
                by_window_end,
                buffer.record_limit,
                buffer.byte_limit,
                buffer.when_full == "emit_early",
            ),
            self._node,
        )
        # Entries go through the table's value serde, else the default one.
        value_serde = suppress_processor.BufferedSerde(self._value_serde)
        # Without a changelog the buffer is in memory only, as Kafka's: a
        # restart starts it empty.
        store = StoreDef(
            store_name,
            self._key_serde,
            value_serde,
            logged=buffer.logging,
            persistent=buffer.logging,
            log_config=buffer.log_config,
        )
        builder.internal.add_store(store, name)
        return KTable(
            builder,
            name,
            self._key_serde,
            self._value_serde,
            supplier,
            window_grace_ms=self._window_grace_ms,
        )

    def group_by(
        self,
        selector: Callable[[Any, Any], tuple[Any, Any]],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        name: str | None = None,
    ) -> KGroupedTable:
        """Re-keys the table with ``selector(key, value) -> (new_key, new_value)``
        for an aggregation that retracts old values and adds new ones.
        ``name`` (Kafka's ``Grouped.as``) names the selector and the
        repartition topic, ``<name>-repartition``."""
        # The aggregation retracts old values: they must come (Kafka's groupBy).
        self._enable_sending_old_values(True)
        node_name = self._builder.processor_name(name, "KTABLE-SELECT-")
        self._builder.internal.add_processor(
            node_name, lambda: tp.KTableRepartitionMap(selector), self._node
        )
        return kgrouped_table.KGroupedTable(
            self._builder, node_name, key_serde, value_serde, repartition_name=name
        )

    # --- joins ----------------------------------------------------------------
    def join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key: Callable[..., Any] | None = None,
        materialized: Materialized | str | None = None,
        name: str | None = None,
        with_key: bool = False,
        foreign_key_with_key: bool = False,
        partitioner: Partitioner | None = None,
        other_partitioner: Partitioner | None = None,
    ) -> KTable:
        """Inner join with another table: ``joiner(value, other_value)`` for
        every key in both, updated when either side changes, deleted when
        either side is. With ``foreign_key=fn(value)`` each entry joins the
        ``other`` entry whose key is ``fn(value)`` (no co-partitioning needed);
        with ``foreign_key_with_key=True`` too, ``fn(key, value)`` (Kafka's
        ``BiFunction`` extractor). ``materialized`` keeps the result in a
        queryable store. ``with_key``: ``joiner(key, value, other_value)``
        (Kafka's ``ValueJoinerWithKey``; the key is this table's).
        ``partitioner`` and ``other_partitioner`` (Kafka's ``TableJoined``,
        foreign-key joins only) say how this table's and the other table's
        topics are partitioned, when not by the default partitioner: called
        with a key and None for the value, each returns one partition (or
        None for the default)."""
        return self._table_join(
            other,
            joiner,
            "inner",
            foreign_key,
            materialized,
            name,
            with_key,
            foreign_key_with_key,
            (partitioner, other_partitioner),
        )

    def left_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        foreign_key: Callable[..., Any] | None = None,
        materialized: Materialized | str | None = None,
        name: str | None = None,
        with_key: bool = False,
        foreign_key_with_key: bool = False,
        partitioner: Partitioner | None = None,
        other_partitioner: Partitioner | None = None,
    ) -> KTable:
        """Left join: like ``join``, but every entry of this table is in the
        result, joined with None while ``other`` has no match."""
        return self._table_join(
            other,
            joiner,
            "left",
            foreign_key,
            materialized,
            name,
            with_key,
            foreign_key_with_key,
            (partitioner, other_partitioner),
        )

    def outer_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
        with_key: bool = False,
    ) -> KTable:
        """Outer join: every key of either table, with None for a missing side."""
        return self._table_join(other, joiner, "outer", None, materialized, name, with_key)

    def _table_join(
        self,
        other: KTable,
        joiner: Callable[[Any, Any], Any],
        kind: str,
        foreign_key: Callable[..., Any] | None,
        materialized: Materialized | str | None,
        name: str | None,
        with_key: bool = False,
        foreign_key_with_key: bool = False,
        partitioners: tuple[Partitioner | None, Partitioner | None] = (None, None),
    ) -> KTable:
        if foreign_key_with_key and foreign_key is None:
            raise TopologyError("foreign_key_with_key=True needs a foreign_key extractor")
        if partitioners != (None, None) and foreign_key is None:
            raise TopologyError(
                "partitioner= and other_partitioner= belong to a foreign-key join (Kafka's "
                "TableJoined): a primary-key join reads co-partitioned tables"
            )
        if not isinstance(other, KTable):
            raise TopologyError(f"a KTable joins a KTable here, not {type(other).__name__}")
        for table in (self, other):
            if table._view() is None:
                raise TopologyError(
                    f"table {table._node!r} cannot be joined: it has no value getter "
                    "(join before suppressing; give a foreign-key join materialized=)"
                )
        if foreign_key is not None:
            return tj.foreign_key_join(
                self,
                other,
                joiner,
                kind,
                foreign_key,
                materialized,
                name,
                with_key,
                foreign_key_with_key,
                partitioners,
            )
        return tj.primary_key_join(self, other, joiner, kind, materialized, name, with_key)
