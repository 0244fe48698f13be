"""KStream and BranchedKStream: the DSL's record streams.

The DSL's classes return one another (a stream becomes a table and a table a
stream), so their modules import one another as modules and look the classes
up when a method runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.expr import Expr
from strom.kstream import kgrouped_stream, ktable
from strom.kstream.global_ktable import GlobalKTable
from strom.kstream.internals import batch_functions as bf
from strom.kstream.internals import native_expr as ne
from strom.kstream.internals import processors as p
from strom.kstream.internals import stream_joins as sj
from strom.kstream.internals import table_processors as tp
from strom.kstream.internals.names import check_name
from strom.kstream.join_windows import JoinWindows
from strom.kstream.materialized import Materialized
from strom.processor.internals.nodes import Node, PassThrough
from strom.processor.internals.processor_node import ProcessorAdapter
from strom.processor.internals.topology_builder import StoreDef, declared_stores
from strom.state.stores import to_millis

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.kgrouped_stream import KGroupedStream
    from strom.kstream.ktable import KTable
    from strom.processor.api import FixedKeyProcessor, Partitioner, Processor, RecordContext
    from strom.serdes import Serde


def _refuse(what: str, why: str, **given: Any) -> None:
    """A TopologyError naming the arguments given (not None) that ``what`` takes no part of."""
    named = [arg for arg, value in given.items() if value is not None]
    if named:
        raise TopologyError(f"{what} takes no {', '.join(named)}: {why}")


def _no_key_for_expressions(with_key: bool) -> None:
    if with_key:
        raise TopologyError(
            "with_key=True takes a Python function mapper(key, value); an expression "
            "reads the value's fields (strom.col) and has no key"
        )


class KStream:
    """An unbounded stream of records (Kafka's ``KStream``).

    Every operation returns a new KStream (or KGroupedStream / KTable) and
    adds a node to the builder's topology.
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool = False,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_required = repartition_required

    def _then(
        self,
        prefix: str,
        node: Callable[[], Node],
        *,
        key_changed: bool = False,
        value_serde_kept: bool = True,
        name: str | None = None,
        native: object = None,
    ) -> KStream:
        """``native``: the expression the node runs natively (for describe())."""
        node_name = self._builder.processor_name(name, prefix)
        described = None if native is None else repr(native)
        self._builder.internal.add_processor(node_name, node, self._node, native=described)
        return KStream(
            self._builder,
            node_name,
            None if key_changed else self._key_serde,
            self._value_serde if value_serde_kept else None,
            self._repartition_required or key_changed,
        )

    # --- stateless ------------------------------------------------------------
    def filter(
        self, predicate: Callable[[Any, Any], bool] | Expr, *, name: str | None = None
    ) -> KStream:
        """Keeps the records for which ``predicate(key, value)`` is true (an
        expression runs natively over the batch)."""
        return self._then(
            "KSTREAM-FILTER-",
            _filter(predicate, negate=False),
            name=name,
            native=_native(predicate),
        )

    def filter_not(
        self, predicate: Callable[[Any, Any], bool] | Expr, *, name: str | None = None
    ) -> KStream:
        """Drops the records for which ``predicate(key, value)`` is true."""
        return self._then(
            "KSTREAM-FILTER-", _filter(predicate, negate=True), name=name, native=_native(predicate)
        )

    def map(
        self, mapper: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None
    ) -> KStream:
        """``mapper(key, value) -> (new_key, new_value)``; marks the stream for repartitioning."""
        return self._then(
            "KSTREAM-MAP-",
            lambda: p.KStreamMap(mapper, key_only=False),
            key_changed=True,
            value_serde_kept=False,
            name=name,
        )

    def map_values(
        self,
        mapper: Callable[[Any], Any] | Callable[[Any, Any], Any] | Expr,
        *,
        with_key: bool = False,
        name: str | None = None,
    ) -> KStream:
        """``mapper(value) -> new_value`` (``with_key=True``: ``mapper(key,
        value)``, Kafka's ``ValueMapperWithKey``); the key is kept (an
        expression runs natively over the batch; a ``strom.struct`` result is
        written as JSON)."""
        if isinstance(mapper, Expr):
            _no_key_for_expressions(with_key)
        node: Callable[[], Node] = (
            (lambda: ne.ExprMapValues(mapper))
            if isinstance(mapper, Expr)
            else (lambda: p.KStreamMapValues(mapper, with_key=with_key))
        )
        return self._then(
            "KSTREAM-MAPVALUES-", node, value_serde_kept=False, name=name, native=_native(mapper)
        )

    def map_batches(
        self,
        fn: Callable[[Any], Any],
        *,
        fields: Sequence[str] = (),
        name: str | None = None,
    ) -> KStream:
        """``fn(pyarrow.RecordBatch) -> pyarrow.RecordBatch`` over whole batches:
        the input has the columns ``key``, ``value``, ``timestamp``,
        ``partition``, ``offset`` and the JSON ``fields`` asked for; the
        output's ``key`` and ``value`` (and ``timestamp``, needed if the row
        count changes) are the new records. Marks the stream for
        repartitioning. Needs pyarrow."""
        return self._then(
            "KSTREAM-MAPBATCHES-",
            lambda: bf.KStreamMapBatches(fn, fields),
            key_changed=True,
            value_serde_kept=False,
            name=name,
        )

    def filter_batches(
        self,
        fn: Callable[[Any], Any],
        *,
        fields: Sequence[str] = (),
        name: str | None = None,
    ) -> KStream:
        """Keeps the rows of each batch where ``fn(pyarrow.RecordBatch)``'s
        boolean mask is true (see :meth:`map_batches` for the columns).
        Needs pyarrow."""
        return self._then(
            "KSTREAM-FILTERBATCHES-", lambda: bf.KStreamFilterBatches(fn, fields), name=name
        )

    def flat_map(
        self,
        mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]]],
        *,
        name: str | None = None,
    ) -> KStream:
        """``mapper(key, value) -> iterable of (key, value)``; marks for repartitioning."""
        return self._then(
            "KSTREAM-FLATMAP-",
            lambda: p.KStreamFlatMap(mapper, values_only=False),
            key_changed=True,
            value_serde_kept=False,
            name=name,
        )

    def flat_map_values(
        self,
        mapper: Callable[[Any], Iterable[Any]] | Callable[[Any, Any], Iterable[Any]],
        *,
        with_key: bool = False,
        name: str | None = None,
    ) -> KStream:
        """``mapper(value) -> iterable of values`` (``with_key=True``:
        ``mapper(key, value)``), each with the record's key."""
        return self._then(
            "KSTREAM-FLATMAPVALUES-",
            lambda: p.KStreamFlatMap(mapper, values_only=True, with_key=with_key),
            value_serde_kept=False,
            name=name,
        )

    def select_key(
        self, mapper: Callable[[Any, Any], Any] | Expr, *, name: str | None = None
    ) -> KStream:
        """``mapper(key, value) -> new_key``; marks the stream for repartitioning
        (an expression runs natively over the batch)."""
        node: Callable[[], Node] = (
            (lambda: ne.ExprSelectKey(mapper))
            if isinstance(mapper, Expr)
            else (lambda: p.KStreamMap(mapper, key_only=True))
        )
        return self._then(
            "KSTREAM-KEY-SELECT-", node, key_changed=True, name=name, native=_native(mapper)
        )

    def peek(self, action: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """Calls ``action(key, value)`` for each record and passes it on."""
        return self._then("KSTREAM-PEEK-", lambda: p.KStreamPeek(action), name=name)

    def foreach(self, action: Callable[[Any, Any], Any], *, name: str | None = None) -> None:
        """Calls ``action(key, value)`` for each record (a terminal operation)."""
        self._then("KSTREAM-FOREACH-", lambda: p.KStreamPeek(action), name=name)

    def print(
        self,
        *,
        label: str | None = None,
        name: str | None = None,
        mapper: Callable[[Any, Any], Any] | None = None,
        file_path: str | None = None,
    ) -> None:
        """Prints ``[label]: key, value`` for each record (for debugging), or
        ``[label]: mapper(key, value)`` (Kafka's ``Printed.withKeyValueMapper``);
        the label is this stream's node name unless given. ``file_path``
        (Kafka's ``Printed.toFile``) writes to that file, created or
        truncated now, instead of standard output."""
        file = None
        if file_path is not None:
            if not file_path.strip():
                raise TopologyError("print(file_path=) cannot be an empty string")
            try:
                file = p.PrintFile(file_path)
            except OSError as e:
                raise TopologyError(f"print: cannot write to {file_path!r}: {e}") from e
        node_name = self._builder.processor_name(name, "KSTREAM-PRINTER-")
        text = label or self._node
        self._builder.internal.add_processor(
            node_name, lambda: p.KStreamPrint(text, mapper, file), self._node
        )

    def merge(self, other: KStream, *, name: str | None = None) -> KStream:
        """The records of both streams (no order between them is promised)."""
        node_name = self._builder.processor_name(name, "KSTREAM-MERGE-")
        self._builder.internal.add_processor(node_name, PassThrough, self._node, other._node)
        return KStream(
            self._builder,
            node_name,
            self._key_serde if self._key_serde == other._key_serde else None,
            self._value_serde if self._value_serde == other._value_serde else None,
            self._repartition_required or other._repartition_required,
        )

    def split(self, name: str | None = None) -> BranchedKStream:
        """Routes each record to the first branch whose predicate matches:
        ``split().branch(pred).branch(pred2).default_branch()``."""
        return BranchedKStream(self, self._builder.processor_name(name, "KSTREAM-BRANCH-"))

    def through(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
    ) -> KStream:
        """Writes to ``topic`` (which must exist) and reads it back as a new
        stream: a user-managed repartition.

        Deprecated, as in Kafka Streams 3.x (4.0 removed it): use
        :meth:`repartition`, or ``to(topic)`` then ``builder.stream(topic)``
        for a topic of your own.
        """
        warnings.warn(
            "KStream.through() is deprecated (Kafka Streams 4.0 removed it): use "
            "repartition(), or to(topic) then builder.stream(topic) for a topic of your own",
            DeprecationWarning,
            stacklevel=2,
        )
        self.to(topic, key_serde=key_serde, value_serde=value_serde, partitioner=partitioner)
        return self._builder.stream(
            topic,
            key_serde=key_serde or self._key_serde,
            value_serde=value_serde or self._value_serde,
        )

    def repartition(
        self,
        *,
        num_partitions: int | None = None,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
    ) -> KStream:
        """Goes through the internal topic ``<application.id>-<name>-repartition``
        (partitioned by key with murmur2, or by ``partitioner``, Kafka's
        ``Repartitioned.streamPartitioner``: a ``StreamPartitioner`` or
        ``fn(key, value, num_partitions)`` returning a partition, a
        collection of them or None), starting a new sub-topology."""
        if num_partitions is not None and num_partitions < 1:
            raise TopologyError(f"num_partitions must be at least 1, got {num_partitions}")
        prefix = (
            check_name(name) if name is not None else self._builder.new_name("KSTREAM-REPARTITION-")
        )
        keys, values = key_serde or self._key_serde, value_serde or self._value_serde
        source = self._builder.repartition(
            prefix, self._node, keys, values, num_partitions, partitioner
        )
        return KStream(self._builder, source, keys, values)

    def to(
        self,
        topic: str | Callable[[Any, Any, RecordContext], str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
        name: str | None = None,
    ) -> None:
        """Writes the stream to ``topic`` (which must exist), or to the topic
        ``topic(key, value, record_context)`` returns for each record.
        ``partitioner`` (Kafka's ``Produced.streamPartitioner``): a
        ``StreamPartitioner``, whose ``partitions(topic, key, value,
        num_partitions)`` is given the topic, or ``fn(key, value,
        num_partitions)``; either returns a partition, a collection of them
        (a copy to each; empty drops the record) or None (murmur2 of the key)."""
        extractor = None if isinstance(topic, str) else topic
        self._builder.internal.add_sink(
            self._builder.processor_name(name, "KSTREAM-SINK-"),
            topic if isinstance(topic, str) else "",
            self._node,
            key_serde=key_serde or self._key_serde,
            value_serde=value_serde or self._value_serde,
            partitioner=partitioner,
            topic_extractor=extractor,
        )

    def to_table(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        """The stream as a table: the latest value per key, None deletes
        (kept in a store as ``StreamsBuilder.table`` keeps one). ``name``
        names the table's processor and, when the key changed, its
        repartition topic (``<name>-repartition``), as Kafka's ``Named``."""
        builder = self._builder
        mat = Materialized.of(materialized)
        name = builder.processor_name(name, "KSTREAM-TOTABLE-")
        store_name = mat.store_name or builder.new_name("KSTREAM-TOTABLE-STATE-STORE-")
        keys, values = mat.key_serde or self._key_serde, mat.value_serde or self._value_serde
        parent = self._node
        if self._repartition_required:
            parent = builder.repartition(name, parent, keys, values)
        return builder.table_source(name, parent, mat, store_name, keys, values)

    def process(
        self,
        supplier: Callable[[], Processor[Any, Any]],
        *store_names: str,
        name: str | None = None,
    ) -> KStream:
        """Runs a Processor API ``Processor`` on each record, with access to
        ``store_names`` (added with ``StreamsBuilder.add_state_store``) and
        to the stores the supplier declares (a ``ConnectedStoreProvider``'s
        ``stores()``, added here); what it forwards is the new stream (keys
        may have changed)."""
        node_name = self._builder.processor_name(name, "KSTREAM-PROCESSOR-")
        self._builder.internal.add_processor(
            node_name,
            lambda: ProcessorAdapter(supplier),
            self._node,
            stores=declared_stores(supplier),
        )
        if store_names:
            self._builder.internal.connect_processor_and_stores([node_name], list(store_names))
        return KStream(self._builder, node_name, None, None, repartition_required=True)

    def process_values(
        self,
        supplier: Callable[[], FixedKeyProcessor[Any, Any]],
        *store_names: str,
        name: str | None = None,
    ) -> KStream:
        """``process`` for a ``FixedKeyProcessor`` (Kafka's
        ``processValues``): it forwards ``FixedKeyRecord``s, which keep their
        keys, so the key serde stays and no repartition follows. Stores the
        supplier declares are added and connected, as for ``process``."""
        node_name = self._builder.processor_name(name, "KSTREAM-PROCESSVALUES-")
        self._builder.internal.add_processor(
            node_name,
            lambda: ProcessorAdapter(supplier, fixed_key=True),
            self._node,
            stores=declared_stores(supplier),
        )
        if store_names:
            self._builder.internal.connect_processor_and_stores([node_name], list(store_names))
        return KStream(self._builder, node_name, self._key_serde, None, self._repartition_required)

    # --- joins ----------------------------------------------------------------
    def join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner_or_key_selector: Callable[[Any, Any], Any],
        joiner_or_windows: Callable[[Any, Any], Any] | JoinWindows | None = None,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
        logging: bool | Mapping[str, str] = True,
        store_suppliers: sj.JoinStoreSuppliers | None = None,
        in_memory: bool = False,
        with_key: bool = False,
        grace: int | timedelta | None = None,
    ) -> KStream:
        """Inner join, in Kafka's argument order:

        - ``join(other_stream, joiner, join_windows)``: ``joiner(value,
          other_value)`` for every pair of records with the same key whose
          timestamps are within the join windows (see ``JoinWindows``);
        - ``join(table, joiner)``: ``joiner(value, table_value)`` for each
          stream record whose key is in the table (as of that record);
        - ``join(global_table, key_selector, joiner)``: looks up
          ``key_selector(key, value)`` in the global table.

        For stream-stream joins, ``key_serde``, ``value_serde`` and
        ``other_value_serde`` (Kafka's ``StreamJoined``) serialize the join's
        stores and repartition topics, ``store_name`` names its stores,
        ``logging=False`` turns their changelogs off and a mapping for
        ``logging`` gives their topic configs; ``store_suppliers=(this,
        other)`` (window store suppliers, either may be None) name and place
        the sides' stores, and ``in_memory=True`` keeps the others in memory. For a join with a
        KTable, ``key_serde`` and ``value_serde`` (Kafka's ``Joined``)
        serialize the repartition topic that a key change before the join
        needs, and ``key_serde`` is the result's key serde
        (``other_value_serde`` is taken, as ``Joined`` has it, and unused:
        the table reads its own store). A join with a GlobalKTable takes
        none of them (it has no stores or repartition topic of its own).
        ``with_key=True`` gives the joiner the key first, ``joiner(key, value,
        other_value)`` (Kafka's ``ValueJoinerWithKey``; with a GlobalKTable,
        the stream record's key).

        A versioned table (see ``Materialized``) is read as of each stream
        record's timestamp; ``grace`` (Kafka's ``Joined.withGracePeriod``,
        versioned tables only) holds stream records back until stream time
        is that far past them, then joins them in timestamp order, so that
        table updates arriving late within it are seen.
        """
        return self._join(
            other,
            joiner_or_key_selector,
            joiner_or_windows,
            left=False,
            name=name,
            serdes=(key_serde, value_serde, other_value_serde),
            store_name=store_name,
            logging=logging,
            store_suppliers=store_suppliers,
            in_memory=in_memory,
            with_key=with_key,
            grace=grace,
        )

    def left_join(
        self,
        other: KStream | KTable | GlobalKTable,
        joiner_or_key_selector: Callable[[Any, Any], Any],
        joiner_or_windows: Callable[[Any, Any], Any] | JoinWindows | None = None,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
        logging: bool | Mapping[str, str] = True,
        store_suppliers: sj.JoinStoreSuppliers | None = None,
        in_memory: bool = False,
        with_key: bool = False,
        grace: int | timedelta | None = None,
    ) -> KStream:
        """Left join: like ``join``, but a record with no match is joined
        with None. With another KStream that result comes only once the
        record's join window has closed (stream time passed its timestamp
        plus ``after`` plus grace), and never if a match arrived before."""
        return self._join(
            other,
            joiner_or_key_selector,
            joiner_or_windows,
            left=True,
            name=name,
            serdes=(key_serde, value_serde, other_value_serde),
            store_name=store_name,
            logging=logging,
            store_suppliers=store_suppliers,
            in_memory=in_memory,
            with_key=with_key,
            grace=grace,
        )

    def outer_join(
        self,
        other: KStream,
        joiner: Callable[[Any, Any], Any],
        join_windows: JoinWindows,
        *,
        name: str | None = None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        other_value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
        logging: bool | Mapping[str, str] = True,
        store_suppliers: sj.JoinStoreSuppliers | None = None,
        in_memory: bool = False,
        with_key: bool = False,
    ) -> KStream:
        """Outer join with another KStream: like ``left_join``, and records
        of the other stream without a match are joined as
        ``joiner(None, other_value)`` once their window has closed."""
        if not isinstance(other, KStream):
            raise TopologyError(
                f"outer_join takes another KStream, not {type(other).__name__} "
                "(a stream has no outer join with a table)"
            )
        return sj.stream_stream_join(
            self,
            other,
            joiner,
            join_windows,
            left_outer=True,
            right_outer=True,
            name=name,
            serdes=(key_serde, value_serde, other_value_serde),
            store_name=store_name,
            logging=logging,
            suppliers=store_suppliers or (None, None),
            in_memory=in_memory,
            with_key=with_key,
        )

    def _join(
        self,
        other: KStream | KTable | GlobalKTable,
        first: Callable[[Any, Any], Any],
        second: Callable[[Any, Any], Any] | JoinWindows | None,
        *,
        left: bool,
        name: str | None,
        serdes: tuple[Serde[Any] | None, Serde[Any] | None, Serde[Any] | None],
        store_name: str | None,
        logging: bool | Mapping[str, str],
        store_suppliers: sj.JoinStoreSuppliers | None,
        in_memory: bool,
        with_key: bool,
        grace: int | timedelta | None = None,
    ) -> KStream:
        if grace is not None and not isinstance(other, ktable.KTable):
            raise TopologyError(
                "grace= is a stream-table join's (Kafka's Joined.withGracePeriod); "
                "a stream-stream join's grace belongs to its JoinWindows"
            )
        if isinstance(other, KStream):
            return sj.stream_stream_join(
                self,
                other,
                first,
                second,
                left_outer=left,
                right_outer=False,
                name=name,
                serdes=serdes,
                store_name=store_name,
                logging=logging,
                suppliers=store_suppliers or (None, None),
                in_memory=in_memory,
                with_key=with_key,
            )
        if isinstance(second, JoinWindows):
            raise TopologyError("JoinWindows belong to a join with another KStream")
        key_serde, value_serde, other_value_serde = serdes
        if isinstance(other, GlobalKTable):
            _refuse(
                "a join with a GlobalKTable",
                "it has no stores or repartition topic of its own (as Kafka's join with a "
                "GlobalKTable, which takes no Joined)",
                key_serde=key_serde,
                value_serde=value_serde,
                other_value_serde=other_value_serde,
                store_name=store_name,
                logging=None if logging is True else logging,
                store_suppliers=store_suppliers,
                in_memory=in_memory or None,
            )
            if second is None:
                raise TopologyError(
                    "a join with a GlobalKTable takes (table, key_selector, joiner)"
                )
            # Kafka names both global-table joins KSTREAM-LEFTJOIN-.
            node_name = self._builder.processor_name(name, "KSTREAM-LEFTJOIN-")
            store = other.queryable_store_name
            self._builder.internal.add_processor(
                node_name,
                lambda: tp.KStreamGlobalKTableJoin(store, first, second, left, with_key),
                self._node,
            )
            if left:
                self._builder.relax_null_keys(node_name)
            return KStream(
                self._builder, node_name, self._key_serde, None, self._repartition_required
            )
        if second is not None:
            raise TopologyError("a join with a KTable takes (table, joiner)")
        _refuse(
            "a join with a KTable",
            "it has no store of its own and reads the table's (key_serde and value_serde "
            "serialize its repartition topic)",
            store_name=store_name,
            logging=None if logging is True else logging,
            store_suppliers=store_suppliers,
            in_memory=in_memory or None,
        )
        return self._table_join(
            other,
            first,
            left=left,
            name=name,
            key_serde=key_serde,
            value_serde=value_serde,
            with_key=with_key,
            grace=grace,
        )

    def _table_join(
        self,
        table: KTable,
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
        name: str | None,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        with_key: bool = False,
        grace: int | timedelta | None = None,
    ) -> KStream:
        if not isinstance(table, ktable.KTable):
            raise TopologyError(f"a KStream joins a KTable here, not {type(table).__name__}")
        view = table._view()
        if view is None:
            raise TopologyError(
                f"table {table._node!r} cannot be joined: it has no value getter "
                "(join before suppressing)"
            )
        grace_ms = None if grace is None else to_millis(grace, "grace")
        if grace_ms is not None and not view.versioned:
            raise TopologyError(
                "a stream-table join takes a grace period only with a versioned table "
                "(as Kafka's: 'KTable must be versioned to use a grace period')"
            )
        builder = self._builder
        parent = self._node
        # Kafka's Joined: its serdes, where given, for the repartition topic
        # and the result's keys.
        key_serde = key_serde or self._key_serde
        if self._repartition_required:
            # Named after the join's name, else the stream's node (Kafka's
            # repartitionForJoin), before the join is named.
            parent = builder.repartition(
                name or parent, parent, key_serde, value_serde or self._value_serde
            )
        node_name = builder.processor_name(name, "KSTREAM-LEFTJOIN-" if left else "KSTREAM-JOIN-")
        buffer = None if grace_ms is None else f"{node_name}-Buffer"
        builder.internal.add_processor(
            node_name,
            lambda: tp.KStreamKTableJoin(
                view.getter, joiner, left, with_key, view.versioned, grace_ms or 0, buffer
            ),
            parent,
        )
        if buffer is not None:
            # The stream records held back, in a changelogged store of their
            # own (Kafka's <join>-Buffer), by the stream's serdes.
            buffered_values = value_serde or self._value_serde
            builder.internal.add_store(StoreDef(buffer, key_serde, buffered_values), node_name)
        if left:
            builder.relax_null_keys(node_name)  # KIP-962: it joins null keys
        builder.internal.connect_processor_and_stores([node_name], list(view.stores))
        builder.internal.co_partition(node_name)
        return KStream(builder, node_name, key_serde, None)

    # --- grouping -------------------------------------------------------------
    def group_by(
        self,
        key_selector: Callable[[Any, Any], Any] | Expr,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        name: str | None = None,
    ) -> KGroupedStream:
        """Groups by ``key_selector(key, value)``; aggregating then goes through
        a repartition topic, as in Kafka Streams. ``name`` (Kafka's
        ``Grouped.as``) names the key selector and the repartition topic,
        ``<name>-repartition``."""
        selected = self.select_key(key_selector, name=name)
        return kgrouped_stream.KGroupedStream(
            self._builder,
            selected._node,
            key_serde,
            value_serde or self._value_serde,
            repartition_required=True,
            repartition_name=name,
        )

    def group_by_key(
        self,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        name: str | None = None,
    ) -> KGroupedStream:
        """Groups by the current key (repartitioning only if a key-changing
        operation came before; ``name``, Kafka's ``Grouped.as``, then names
        the repartition topic ``<name>-repartition``)."""
        return kgrouped_stream.KGroupedStream(
            self._builder,
            self._node,
            key_serde or self._key_serde,
            value_serde or self._value_serde,
            self._repartition_required,
            repartition_name=name,
        )


def _native(fn: object) -> Expr | None:
    return fn if isinstance(fn, Expr) else None


def _filter(predicate: Callable[[Any, Any], bool] | Expr, negate: bool) -> Callable[[], Node]:
    if isinstance(predicate, Expr):
        return lambda: ne.ExprFilter(predicate, negate=negate)
    return lambda: p.KStreamFilter(predicate, negate=negate)


class BranchedKStream:
    """The branches of ``KStream.split()``, keyed as Kafka keys them: the
    split's name followed by the branch name (or its 1-based index; the
    default branch's index is 0)."""

    def __init__(self, stream: KStream, name: str) -> None:
        self._stream = stream
        self._name = name
        self._predicates: list[Callable[[Any, Any], bool]] = []
        self._branches: dict[str, KStream] = {}
        self._done = False
        builder = stream._builder
        builder.internal.add_processor(
            name, lambda: p.KStreamBranch(self._predicates), stream._node
        )

    def _add(
        self, name: str | None, index: int, chain: Callable[[KStream], KStream | None] | None
    ) -> None:
        if self._done:
            raise TopologyError(
                f"split {self._name!r} is closed; it already has its default branch"
            )
        child = self._name + (check_name(name) if name is not None else str(index))
        builder = self._stream._builder
        builder.new_name("")  # Kafka spends an index per branch
        builder.internal.add_processor(child, PassThrough, self._name)
        stream = self._stream
        branch = KStream(
            builder, child, stream._key_serde, stream._value_serde, stream._repartition_required
        )
        # Kafka applies the chain at once, so that what it adds is named
        # before the next branch.
        result = branch if chain is None else chain(branch)
        if result is not None and not isinstance(result, KStream):
            raise TopologyError(
                f"the chain of branch {child!r} returned a {type(result).__name__}: "
                "a chain returns a KStream, or None to leave the branch out"
            )
        if result is not None:
            self._branches[child] = result

    def branch(
        self,
        predicate: Callable[[Any, Any], bool],
        name: str | None = None,
        *,
        chain: Callable[[KStream], KStream | None] | None = None,
    ) -> BranchedKStream:
        """Records for which ``predicate(key, value)`` holds (and no earlier one did).

        ``chain(branch)``, Kafka's ``Branched.withFunction`` or
        ``withConsumer``, is applied to the branch at once; the stream it
        returns takes the branch's place in the result, and a chain that
        returns None (one that ends in ``to``, say) leaves the branch out.
        """
        self._predicates.append(predicate)
        self._add(name, len(self._predicates), chain)
        return self

    def default_branch(
        self,
        name: str | None = None,
        *,
        chain: Callable[[KStream], KStream | None] | None = None,
    ) -> dict[str, KStream]:
        """The records no predicate matched, and the finished branches
        (``chain`` as for :meth:`branch`)."""
        self._add(name, 0, chain)
        self._done = True
        return dict(self._branches)

    def no_default_branch(self) -> dict[str, KStream]:
        """Finishes the split; records no predicate matched are dropped."""
        self._done = True
        return dict(self._branches)
