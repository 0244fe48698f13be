"""Topology: the compiled graph of source, processor and sink nodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.errors import TopologyError
from strom.offset_reset import OffsetReset
from strom.processor.api import Partitioner, Processor, RecordContext
from strom.processor.internals.describe_order import java_hash_order
from strom.processor.internals.processor_node import ProcessorAdapter
from strom.processor.internals.topology_builder import (
    DescribedNode,
    InternalTopologyBuilder,
    ProcessorDef,
    SourceDef,
    declared_stores,
    store_def,
)
from strom.serdes import Serde
from strom.state.stores import KEY_VALUE, KEY_VALUE_KINDS, StoreBuilder

__all__ = ["Topology", "TopologyDescription"]


class Topology:
    """A processor topology: built by ``StreamsBuilder.build()``, or by hand
    with the Processor API (``add_source``, ``add_processor``, ``add_sink``,
    ``add_state_store``, ``add_global_store``, ``add_read_only_state_store``)."""

    def __init__(self, internal: InternalTopologyBuilder | None = None) -> None:
        self._internal = internal if internal is not None else InternalTopologyBuilder()

    def add_source(
        self,
        name: str,
        *topics: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        offset_reset: OffsetReset | None = None,
    ) -> Topology:
        """A source node reading ``topics``; ``offset_reset`` (Kafka's
        ``AutoOffsetReset``) overrides ``auto.offset.reset`` for them."""
        self._internal.add_source(
            name, list(topics), key_serde, value_serde, timestamp_extractor, offset_reset
        )
        return self

    def add_processor(
        self, name: str, supplier: Callable[[], Processor[Any, Any]], *parents: str
    ) -> Topology:
        """A processor node; ``supplier()`` makes a new ``Processor`` for each
        task. A supplier that is a ``ConnectedStoreProvider`` (a
        ``ProcessorSupplier``, say) has the stores its ``stores()`` returns
        added and connected to the processor, as Kafka's ``addProcessor``."""
        if not callable(supplier):
            raise TopologyError(
                f"processor {name!r} needs a supplier: a callable returning a Processor"
            )
        self._internal.add_processor(
            name, lambda: ProcessorAdapter(supplier), *parents, stores=declared_stores(supplier)
        )
        return self

    def add_sink(
        self,
        name: str,
        topic: str | Callable[[Any, Any, RecordContext], str],
        *parents: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
    ) -> Topology:
        """A sink node writing to ``topic``, or to the topic
        ``topic(key, value, record_context)`` returns for each record
        (Kafka's ``TopicNameExtractor``). ``partitioner`` picks the
        partitions (see ``StreamPartitioner``); else the key's murmur2 does."""
        if not isinstance(topic, str) and not callable(topic):
            raise TopologyError(
                f"sink {name!r} needs a topic name or a function choosing one, got {topic!r}"
            )
        self._internal.add_sink(
            name,
            topic if isinstance(topic, str) else "",
            *parents,
            key_serde=key_serde,
            value_serde=value_serde,
            partitioner=partitioner,
            topic_extractor=None if isinstance(topic, str) else topic,
        )
        return self

    def add_state_store(self, builder: StoreBuilder, *processor_names: str) -> Topology:
        """Adds a store (from ``Stores.key_value_store_builder(...)``, or the
        window and session builders) and connects it to the named processors."""
        self._internal.add_store(store_def(builder), *processor_names)
        return self

    def add_global_store(
        self,
        builder: StoreBuilder,
        source_name: str,
        topic: str,
        processor_name: str,
        state_update_supplier: Callable[[], Processor[Any, Any]],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
    ) -> Topology:
        """A global store: ``state_update_supplier()`` makes the processor that
        writes every record of every partition of ``topic`` into it (with the
        timestamps ``timestamp_extractor`` gives, as a source's); every
        processor may read it with ``get_state_store``."""
        if builder.supplier.kind != KEY_VALUE:
            raise TopologyError(f"global store {builder.name!r} must be a key-value store")
        self._internal.add_global_store(
            store_def(builder),
            source_name,
            topic,
            key_serde,
            value_serde,
            processor_name,
            lambda: ProcessorAdapter(state_update_supplier),
            timestamp_extractor,
        )
        return self

    def add_read_only_state_store(
        self,
        builder: StoreBuilder,
        source_name: str,
        topic: str,
        processor_name: str,
        state_update_supplier: Callable[[], Processor[Any, Any]],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
    ) -> Topology:
        """A read-only key-value store (Kafka's ``addReadOnlyStateStore``,
        KIP-813): source ``source_name`` reads ``topic`` from its start
        (``auto.offset.reset`` earliest, timestamps from
        ``timestamp_extractor``) into processor ``processor_name``, which
        ``state_update_supplier()`` makes for each task and which alone
        writes the store. One store per partition of ``topic``, as any
        task's; other processors may read it once connected
        (``connect_processor_and_state_stores``), and interactive queries
        see it. The topic is the store's changelog: the store is not
        logged, and is restored from the topic up to the offset its task
        committed, the records put in as they are on the topic (so the
        topic should be compacted, and the processor should put what it
        reads unchanged)."""
        if not isinstance(builder, StoreBuilder):
            raise TopologyError(
                f"read-only store: expected a StoreBuilder "
                f"(Stores.key_value_store_builder(...)), got {builder!r}"
            )
        if builder.supplier.kind not in KEY_VALUE_KINDS:
            raise TopologyError(
                f"read-only store {builder.name!r} must be a key-value store, "
                f"not a {builder.supplier.kind} store"
            )
        unlogged = builder.with_logging_disabled()
        if not isinstance(unlogged, StoreBuilder) or unlogged.logging:
            raise TopologyError(
                f"read-only store {builder.name!r}: its builder cannot disable logging "
                "(its topic is its changelog)"
            )
        if not callable(state_update_supplier):
            raise TopologyError(
                f"processor {processor_name!r} needs a supplier: a callable returning a Processor"
            )
        self._internal.add_read_only_store(
            store_def(unlogged),
            source_name,
            topic,
            key_serde,
            value_serde,
            processor_name,
            lambda: ProcessorAdapter(state_update_supplier),
            timestamp_extractor,
        )
        return self

    def connect_processor_and_state_stores(
        self, processor_name: str, *store_names: str
    ) -> Topology:
        """Gives a processor access to stores added before."""
        self._internal.connect_processor_and_stores([processor_name], list(store_names))
        return self

    def describe(self) -> TopologyDescription:
        """Sub-topologies with their sources, processors (and stores) and
        sinks: Kafka's ``TopologyDescription``, whose text (the description
        as a ``str``) is Kafka's to the character."""
        return TopologyDescription.of(self._internal)

    def __str__(self) -> str:
        return self.describe()


class TopologyDescription(str):
    """What ``Topology.describe()`` returns (Kafka's ``TopologyDescription``):
    a ``str``, Kafka's text, with the same contents as objects. Its
    ``subtopologies`` (those that make tasks) and ``global_stores`` hold
    :class:`Source`, :class:`Processor` and :class:`Sink` nodes, each with
    the names of its neighbours."""

    subtopologies: tuple[TopologyDescription.Subtopology, ...]
    global_stores: tuple[TopologyDescription.GlobalStore, ...]

    @dataclass(frozen=True)
    class Source:
        name: str
        topics: tuple[str, ...]
        successors: tuple[str, ...]
        predecessors: tuple[str, ...] = ()

    @dataclass(frozen=True)
    class Processor:
        name: str
        stores: tuple[str, ...]
        successors: tuple[str, ...]
        predecessors: tuple[str, ...]

    @dataclass(frozen=True)
    class Sink:
        """``topic`` is None where ``topic_name_extractor`` picks one per record."""

        name: str
        topic: str | None
        topic_name_extractor: Callable[..., str] | None
        predecessors: tuple[str, ...]
        successors: tuple[str, ...] = ()

    Node = Source | Processor | Sink

    @dataclass(frozen=True)
    class Subtopology:
        id: int
        nodes: tuple[TopologyDescription.Node, ...]

    @dataclass(frozen=True)
    class GlobalStore:
        """A global store's source and the processor that updates it."""

        id: int
        source: TopologyDescription.Source
        processor: TopologyDescription.Processor

    @staticmethod
    def of(internal: InternalTopologyBuilder) -> TopologyDescription:
        subtopologies, global_stores = [], []
        for sub in internal.described():
            nodes = tuple(_described_node(d) for d in sub.nodes)
            if not sub.is_global:
                subtopologies.append(TopologyDescription.Subtopology(sub.id, nodes))
                continue
            source, processor = nodes[0], nodes[1]
            assert isinstance(source, TopologyDescription.Source)
            assert isinstance(processor, TopologyDescription.Processor)
            global_stores.append(TopologyDescription.GlobalStore(sub.id, source, processor))
        description = TopologyDescription(internal.describe())
        description.subtopologies = tuple(subtopologies)
        description.global_stores = tuple(global_stores)
        return description


def _described_node(described: DescribedNode) -> TopologyDescription.Node:
    node, after, before = described.node, described.successors, described.predecessors
    if isinstance(node, SourceDef):
        return TopologyDescription.Source(node.name, tuple(node.topics), after)
    if isinstance(node, ProcessorDef):
        stores = tuple(java_hash_order(node.stores, copied=True))
        return TopologyDescription.Processor(node.name, stores, after, before)
    topic = None if node.topic_extractor is not None else node.topic
    return TopologyDescription.Sink(node.name, topic, node.topic_extractor, before)
