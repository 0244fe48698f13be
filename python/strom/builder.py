"""StreamsBuilder: the entry point of the DSL."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from strom.errors import TopologyError
from strom.kstream import GlobalKTable, KStream, KTable
from strom.kstream.internals import processors as p
from strom.kstream.internals.names import check_name
from strom.kstream.internals.table_processors import KTableSource, table_source
from strom.kstream.internals.table_suppliers import SourceSupplier
from strom.kstream.materialized import Materialized
from strom.offset_reset import OffsetReset
from strom.processor.api import Partitioner, Processor
from strom.processor.internals.nodes import PassThrough
from strom.processor.internals.topology_builder import (
    InternalTopologyBuilder,
    StoreDef,
    store_def,
)
from strom.serdes import Serde
from strom.state.stores import StoreBuilder
from strom.topology import Topology

# A prefix Kafka takes for one of its own generated names: its repartition
# nodes then get generated names too.
_GENERATED_STREAM_NAME = re.compile(r"KSTREAM.*-[0-9]{10}")

__all__ = ["StreamsBuilder"]


class StreamsBuilder:
    """Builds a topology with the DSL: ``stream(...)``, operations, ``build()``.

    Generated node names follow Kafka's (``KSTREAM-SOURCE-0000000000``, …), one
    counter per builder, so ``Topology.describe()`` reads like Kafka's.
    """

    def __init__(self) -> None:
        self.internal = InternalTopologyBuilder()
        self._index = 0
        # Join processors that take records with a null key (Kafka's
        # NULL_KEY_RELAXED_JOIN label: left stream-table joins, left and
        # outer stream-stream joins).
        self._null_key_joins: set[str] = set()
        # Each repartition's null-key filter: whether it lets null keys
        # through (decided by build()), and the source behind its topic.
        self._null_key_filters: dict[str, bool] = {}
        self._repartition_sources: dict[str, str] = {}

    def new_name(self, prefix: str) -> str:
        name = f"{prefix}{self._index:010d}"
        self._index += 1
        return name

    def processor_name(self, name: str | None, prefix: str, suffix: str = "") -> str:
        """``name`` + ``suffix`` when the user named the operation, else a
        generated name; an index is spent either way (Kafka's
        ``NamedInternal.orElseGenerateWithPrefix`` and
        ``suffixWithOrElseGet``), so the names generated after a named
        operation are Kafka's too."""
        generated = self.new_name(prefix)
        return f"{check_name(name)}{suffix}" if name is not None else generated

    def stream(
        self,
        topics: str | list[str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        offset_reset: OffsetReset | None = None,
        name: str | None = None,
    ) -> KStream:
        """A KStream over one or more topics.

        ``timestamp_extractor(record, partition_time) -> int`` replaces the
        record's own timestamp; records whose timestamp is negative are dropped.
        ``name`` (Kafka's ``Consumed.as``) names the source processor.
        ``offset_reset`` (Kafka's ``AutoOffsetReset``: a policy, ``"earliest"``,
        ``"latest"``, ``"none"``, ``"by_duration:PT1H"`` or a timedelta) says
        where partitions without a committed offset start, instead of
        ``auto.offset.reset``.
        """
        source = self.processor_name(name, "KSTREAM-SOURCE-")
        return self._source(
            source, topics, key_serde, value_serde, timestamp_extractor, offset_reset
        )

    def _source(
        self,
        name: str,
        topics: str | list[str],
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        timestamp_extractor: Callable[[Any, int], int] | None,
        offset_reset: OffsetReset | None,
    ) -> KStream:
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        self.internal.add_source(
            name, topic_list, key_serde, value_serde, timestamp_extractor, offset_reset
        )
        return KStream(self, name, key_serde, value_serde)

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        materialized: Materialized | str | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        offset_reset: OffsetReset | None = None,
        name: str | None = None,
    ) -> KTable:
        """A KTable over ``topic``: the latest value per key, None deletes
        (records with a null key are skipped). It is kept in a store when
        ``materialized`` names one, or once an operation needs to read it
        (a join) or to know old values (an aggregation, a filter that would
        otherwise forward needless deletes); the store is then named
        ``<topic>-STATE-STORE-…``. Without a store (as in Kafka) each update
        goes downstream at once, whatever the record cache. ``name``
        (Kafka's ``Consumed.as``) names the table's processor, and its
        source ``<name>-source``."""
        mat = Materialized.of(materialized)
        store_name = mat.store_name or self.new_name(f"{topic}-STATE-STORE-")
        keys, values = mat.key_serde or key_serde, mat.value_serde or value_serde
        source = self._source(
            self.processor_name(name, "KSTREAM-SOURCE-", "-source"),
            topic,
            keys,
            values,
            timestamp_extractor,
            offset_reset,
        )
        table = self.processor_name(name, "KTABLE-SOURCE-")
        return self.table_source(table, source._node, mat, store_name, keys, values)

    def table_source(
        self,
        name: str,
        parent: str,
        mat: Materialized,
        store_name: str,
        keys: Serde[Any] | None,
        values: Serde[Any] | None,
    ) -> KTable:
        """Adds a source table's node (Kafka's KTableSource) under ``parent``:
        materialized now if ``mat`` names its store, else when needed."""
        supplier = SourceSupplier(self.internal, name, mat.store_def(store_name, keys, values))
        versioned = mat.versioned
        self.internal.add_processor(
            name, lambda: table_source(supplier.store_name, versioned), parent
        )
        if mat.store_name is not None:
            supplier.materialize()
        return KTable(self, name, keys, values, supplier, store_name=mat.store_name)

    def global_table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        materialized: Materialized | str | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        name: str | None = None,
    ) -> GlobalKTable:
        """A GlobalKTable over every partition of ``topic``, kept in the store
        ``materialized`` names (else ``<topic>-STATE-STORE-…``). ``name``
        (Kafka's ``Consumed.as``) names its processor, and its source
        ``<name>-source``; ``timestamp_extractor`` gives the timestamps its
        store keeps, as on ``stream``. It always reads the topic from its
        start (no ``offset_reset``, as Kafka's)."""
        mat = Materialized.of(materialized)
        if mat.versioned:
            raise TopologyError(
                f"store {mat.store_name!r}: a GlobalKTable cannot be versioned (as in Kafka)"
            )
        store_name = mat.store_name or self.new_name(f"{topic}-STATE-STORE-")
        keys, values = mat.key_serde or key_serde, mat.value_serde or value_serde
        source_name = self.processor_name(name, "KSTREAM-SOURCE-", "-source")
        processor_name = self.processor_name(name, "KTABLE-SOURCE-")
        self.internal.add_global_store(
            StoreDef(store_name, keys, values, persistent=not mat.in_memory, timestamped=True),
            source_name,
            topic,
            keys,
            values,
            processor_name,
            lambda: KTableSource(store_name),
            timestamp_extractor,
        )
        return GlobalKTable(store_name, keys, values)

    def repartition(
        self,
        prefix: str,
        parent: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        num_partitions: int | None = None,
        partitioner: Partitioner | None = None,
    ) -> str:
        """Inserts ``<prefix>-repartition``: a null-key filter and a sink in
        the parent's sub-topology, a source in a new one; returns the source.
        The filter drops records with a null key unless ``build`` finds a
        join downstream that takes them. Named as Kafka's
        ``createRepartitionedSource`` names them: generated names when the
        prefix is a generated ``KSTREAM-…`` name, else after the topic."""
        topic = f"{prefix}-repartition"
        sink_name = self.new_name("KSTREAM-SINK-")
        filter_name = self.new_name("KSTREAM-FILTER-")
        source_name = self.new_name("KSTREAM-SOURCE-")
        if not _GENERATED_STREAM_NAME.fullmatch(prefix):
            filter_name, sink_name, source_name = (
                f"{topic}-filter",
                f"{topic}-sink",
                f"{topic}-source",
            )
        self._null_key_filters[filter_name] = False
        self.internal.add_processor(
            filter_name,
            lambda: PassThrough() if self._null_key_filters[filter_name] else p.DropNullKeys(),
            parent,
        )
        self._repartition_sources[sink_name] = source_name
        self.internal.add_sink(
            sink_name,
            topic,
            filter_name,
            key_serde=key_serde,
            value_serde=value_serde,
            partitioner=partitioner,
            internal=True,
        )
        self.internal.add_source(source_name, [topic], key_serde, value_serde, internal=True)
        if num_partitions is not None:
            self.internal.repartition_partitions[topic] = num_partitions
        return source_name

    def table_repartition(
        self,
        prefix: str,
        parent: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any],
        name: str | None = None,
    ) -> str:
        """Inserts ``<prefix>-repartition`` behind a ``KTable.group_by``: a
        sink and a source (Kafka's GroupedTableOperationRepartitionNode,
        with no null-key filter: its re-keying drops null keys, and named
        ``<name>-sink``/``-source`` after a named aggregation); returns the
        source."""
        topic = f"{prefix}-repartition"
        sink_name = self.processor_name(name, "KSTREAM-SINK-", "-sink")
        source_name = self.processor_name(name, "KSTREAM-SOURCE-", "-source")
        self.internal.add_sink(
            sink_name, topic, parent, key_serde=key_serde, value_serde=value_serde, internal=True
        )
        self.internal.add_source(source_name, [topic], key_serde, value_serde, internal=True)
        return source_name

    def add_state_store(self, builder: StoreBuilder) -> StreamsBuilder:
        """Adds a store that ``KStream.process`` calls can name."""
        self.internal.add_store(store_def(builder))
        return self

    def add_global_store(
        self,
        store_builder: StoreBuilder,
        topic: str,
        state_update_supplier: Callable[[], Processor[Any, Any]],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        name: str | None = None,
    ) -> StreamsBuilder:
        """A global store fed from every partition of ``topic`` by the
        processor ``state_update_supplier()`` makes (Kafka's
        ``StreamsBuilder.addGlobalStore``; see ``Topology.add_global_store``).
        Its source is named ``<name>-source`` and its processor ``name``, or
        both generated as a global table's are."""
        source = self.processor_name(name, "KSTREAM-SOURCE-", "-source")
        processor = self.processor_name(name, "KTABLE-SOURCE-")
        Topology(self.internal).add_global_store(
            store_builder,
            source,
            topic,
            processor,
            state_update_supplier,
            key_serde=key_serde,
            value_serde=value_serde,
            timestamp_extractor=timestamp_extractor,
        )
        return self

    def relax_null_keys(self, *join_nodes: str) -> None:
        """Marks join processors that take records with a null key: the
        repartition topics upstream of them keep such records."""
        self._null_key_joins.update(join_nodes)

    def build(self) -> Topology:
        """The topology to run; sub-topologies split at repartition topics.
        A repartition drops records with a null key unless a join that takes
        them lies downstream (Kafka's InternalStreamsBuilder.rewriteRepartitionNodes)."""
        for name in self._null_key_filters:
            self._null_key_filters[name] = self._reaches_null_key_join(name)
        return Topology(self.internal)

    def _reaches_null_key_join(self, start: str) -> bool:
        nodes, seen, todo = self.internal.nodes, set(), [start]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in self._null_key_joins:
                return True
            if name in self._repartition_sources:
                todo.append(self._repartition_sources[name])
            node = nodes[name]
            todo.extend(getattr(node, "children", ()))
        return False
