"""The physical topology: source, processor and sink nodes, state stores, and
their split into sub-topologies (Kafka's InternalTopologyBuilder)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.errors import TopologyError
from strom.offset_reset import AutoOffsetReset, OffsetReset
from strom.processor.api import ConnectedStoreProvider
from strom.processor.internals.describe_order import describe_order, java_hash_order
from strom.state.stores import KEY_VALUE, StoreBuilder

if TYPE_CHECKING:
    from strom.processor.api import Partitioner
    from strom.processor.internals.nodes import Node
    from strom.serdes import Serde

NodeSupplier = Callable[[], "Node"]


@dataclass
class SourceDef:
    name: str
    topics: list[str]
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    timestamp_extractor: Callable[[Any, int], int] | None = None
    offset_reset: AutoOffsetReset | None = None
    children: list[str] = field(default_factory=list)


@dataclass
class ProcessorDef:
    name: str
    supplier: NodeSupplier
    parents: list[str]
    stores: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    # What the node runs natively, for describe() (None: Python per record).
    native: str | None = None


@dataclass
class SinkDef:
    name: str
    topic: str
    parents: list[str]
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    partitioner: Partitioner | None = None
    # Picks the topic per record; ``topic`` is then empty.
    topic_extractor: Callable[..., str] | None = None


@dataclass
class StoreDef:
    """A store: its kind, serdes, flavour, and whether it has a changelog."""

    name: str
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    logged: bool = True
    persistent: bool = True
    processors: list[str] = field(default_factory=list)
    # Its kind, a name in strom.state.internals.registry.KINDS.
    kind: str = KEY_VALUE
    retention_ms: int | None = None
    window_size_ms: int | None = None
    retain_duplicates: bool = False
    log_config: dict[str, str] = field(default_factory=dict)
    caching: bool = False
    # Values stored with their timestamp (Kafka's timestamped stores).
    timestamped: bool = False
    # An LRU map's bound: the entries it keeps.
    max_cache_size: int | None = None
    # A versioned store's segment interval (None: Kafka's default).
    segment_interval_ms: int | None = None
    # The Processor API's StoreBuilder it was made from: adding an equal
    # builder again only connects the store (Kafka's isCompatibleWith).
    builder: StoreBuilder | None = field(default=None, compare=False, repr=False)


def store_def(builder: StoreBuilder) -> StoreDef:
    """The topology's description of the store a ``Stores`` builder makes."""
    supplier = builder.supplier
    return StoreDef(
        builder.name,
        builder.key_serde,
        builder.value_serde,
        logged=builder.logging,
        persistent=supplier.persistent,
        kind=supplier.kind,
        retention_ms=supplier.retention_ms,
        window_size_ms=supplier.window_size_ms,
        retain_duplicates=supplier.retain_duplicates,
        log_config=dict(builder.log_config),
        caching=builder.caching,
        timestamped=builder.timestamped,
        segment_interval_ms=supplier.segment_interval,
        max_cache_size=supplier.max_cache_size,
        builder=builder,
    )


def declared_stores(supplier: object) -> list[StoreDef]:
    """The stores a processor supplier declares with ``stores()`` (Kafka's
    ``ConnectedStoreProvider``), which the topology adds and connects to its
    processor; none for a supplier that is not a ``ConnectedStoreProvider``."""
    if not isinstance(supplier, ConnectedStoreProvider):
        return []
    builders = supplier.stores()
    if builders is None:
        return []
    stores = []
    for builder in builders:
        if not isinstance(builder, StoreBuilder):
            raise TopologyError(
                f"{supplier!r}.stores() returned {builder!r}: it returns the StoreBuilders "
                "(Stores.key_value_store_builder(...), …) of the stores its processors use"
            )
        stores.append(store_def(builder))
    return stores


@dataclass
class Subtopology:
    id: int
    nodes: list[str]
    source_topics: list[str]
    sink_topics: list[str]
    stores: list[str]
    repartition_sources: list[str]


NodeDef = SourceDef | ProcessorDef | SinkDef


@dataclass(frozen=True)
class DescribedNode:
    """A node as ``describe()`` shows it, with its neighbours' names."""

    node: NodeDef
    successors: tuple[str, ...]
    predecessors: tuple[str, ...]


@dataclass(frozen=True)
class DescribedSubtopology:
    id: int
    is_global: bool
    nodes: tuple[DescribedNode, ...]


class InternalTopologyBuilder:
    """Nodes and stores in insertion order; topics of internal (repartition)
    topics are kept without the application-id prefix, as in Kafka."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeDef] = {}
        self.stores: dict[str, StoreDef] = {}
        self.repartition_topics: set[str] = set()
        # Repartition topics with a partition count chosen by the user.
        self.repartition_partitions: dict[str, int] = {}
        # Join nodes whose sub-topology's inputs must be co-partitioned.
        self.co_partitioned: list[str] = []
        # Internal topics partitioned like the other inputs of the
        # sub-topology of a node (a foreign-key join's subscription and
        # response topics follow the table they are joined with).
        self.partitions_like: dict[str, str] = {}
        # Global stores and the topics that feed them: no tasks, every task
        # reads them.
        self.global_stores: set[str] = set()
        self.global_topics: set[str] = set()
        # Stores restored from a source topic instead of a changelog of
        # their own (read-only stores): store name -> logical topic (Kafka's
        # storeToChangelogTopic for source stores).
        self.source_changelogs: dict[str, str] = {}
        self._topic_to_source: dict[str, str] = {}

    # --- building ----------------------------------------------------------
    def _check_new_name(self, name: str) -> None:
        if not name:
            raise TopologyError("node names must be non-empty")
        if name in self.nodes:
            raise TopologyError(f"a node named {name!r} was already added to the topology")

    def _check_parents(self, name: str, parents: tuple[str, ...] | list[str]) -> None:
        if not parents:
            raise TopologyError(f"node {name!r} needs at least one parent")
        for parent in parents:
            if parent == name:
                raise TopologyError(f"node {name!r} cannot be its own parent")
            node = self.nodes.get(parent)
            if node is None:
                raise TopologyError(f"parent {parent!r} of node {name!r} is not in the topology")
            if isinstance(node, SinkDef):
                raise TopologyError(f"sink {parent!r} cannot be the parent of {name!r}")

    def add_source(
        self,
        name: str,
        topics: list[str],
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        offset_reset: OffsetReset | None = None,
        internal: bool = False,
    ) -> None:
        self._check_new_name(name)
        if not topics:
            raise TopologyError(f"source {name!r} needs at least one topic")
        try:
            policy = None if offset_reset is None else AutoOffsetReset.of(offset_reset)
        except ValueError as exc:
            raise TopologyError(f"source {name!r}: {exc}") from None
        for topic in topics:
            if topic in self._topic_to_source:
                raise TopologyError(
                    f"topic {topic!r} is already read by source "
                    f"{self._topic_to_source[topic]!r}; a topic can have one source"
                )
        self.nodes[name] = SourceDef(
            name, list(topics), key_serde, value_serde, timestamp_extractor, policy
        )
        for topic in topics:
            self._topic_to_source[topic] = name
            if internal:
                self.repartition_topics.add(topic)

    def add_processor(
        self,
        name: str,
        supplier: NodeSupplier,
        *parents: str,
        native: str | None = None,
        stores: Sequence[StoreDef] = (),
    ) -> None:
        """A processor node; ``stores`` (those its supplier declares, see
        ``declared_stores``) are added and connected to it."""
        self._check_new_name(name)
        self._check_parents(name, parents)
        for store in stores:
            self._check_store(store)
        self.nodes[name] = ProcessorDef(name, supplier, list(parents), native=native)
        self._link(name, parents)
        for store in stores:
            self.add_store(store, name)

    def add_sink(
        self,
        name: str,
        topic: str,
        *parents: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Partitioner | None = None,
        internal: bool = False,
        topic_extractor: Callable[..., str] | None = None,
    ) -> None:
        self._check_new_name(name)
        self._check_parents(name, parents)
        self.nodes[name] = SinkDef(
            name, topic, list(parents), key_serde, value_serde, partitioner, topic_extractor
        )
        self._link(name, parents)
        if internal:
            self.repartition_topics.add(topic)

    def _link(self, name: str, parents: tuple[str, ...] | list[str]) -> None:
        for parent in parents:
            node = self.nodes[parent]
            assert not isinstance(node, SinkDef)
            node.children.append(name)

    def add_store(self, store: StoreDef, *processor_names: str) -> None:
        """Adds ``store`` and connects it to ``processor_names``. A store
        made from a builder equal to the one an added store was made from is
        that store (only connected); any other name taken is an error."""
        self._check_store(store)
        self.stores.setdefault(store.name, store)
        self.connect_processor_and_stores(processor_names, [store.name])

    def _check_store(self, store: StoreDef) -> None:
        added = self.stores.get(store.name)
        if added is not None and (
            store.builder is None
            or added.builder != store.builder
            or store.name in self.global_stores
        ):
            different = "" if store.builder is None else " from a different builder"
            raise TopologyError(f"a state store named {store.name!r} was already added{different}")

    def add_global_store(
        self,
        store: StoreDef,
        source_name: str,
        topic: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        processor_name: str,
        supplier: NodeSupplier,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
    ) -> None:
        """A store fed by every partition of ``topic`` through a processor of
        its own; the topic is its changelog, so the store is not logged."""
        store.logged = False
        self.add_source(source_name, [topic], key_serde, value_serde, timestamp_extractor)
        self.add_processor(processor_name, supplier, source_name)
        self.add_store(store, processor_name)
        self.global_stores.add(store.name)
        self.global_topics.add(topic)

    def add_read_only_store(
        self,
        store: StoreDef,
        source_name: str,
        topic: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        processor_name: str,
        supplier: NodeSupplier,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
    ) -> None:
        """A store of the tasks of ``topic``'s partitions, fed by a processor
        of its own that reads ``topic`` from its start (Kafka's
        ``addReadOnlyStateStore``). The topic is its changelog: the store is
        not logged, and is restored from the topic (see
        ``connect_source_store_and_topic``). Checked before anything is added."""
        self._check_new_name(source_name)
        self._check_new_name(processor_name)
        if source_name == processor_name:
            raise TopologyError(
                f"read-only store {store.name!r}: its source and processor need different "
                f"names, both are {source_name!r}"
            )
        if topic in self._topic_to_source:
            raise TopologyError(
                f"topic {topic!r} is already read by source {self._topic_to_source[topic]!r}; "
                "a topic can have one source"
            )
        if store.name in self.stores:
            raise TopologyError(f"a state store named {store.name!r} was already added")
        store.logged = False
        store.log_config = {}
        self.add_source(
            source_name,
            [topic],
            key_serde,
            value_serde,
            timestamp_extractor,
            AutoOffsetReset.earliest(),
        )
        self.add_processor(processor_name, supplier, source_name)
        self.add_store(store, processor_name)
        self.connect_source_store_and_topic(store.name, topic)

    def connect_source_store_and_topic(self, store_name: str, topic: str) -> None:
        """Makes source topic ``topic`` the changelog ``store_name`` is
        restored from, up to the offset its task committed."""
        if store_name in self.source_changelogs:
            raise TopologyError(f"source store {store_name!r} is already added")
        self.source_changelogs[store_name] = topic

    def connect_processor_and_stores(
        self, processor_names: tuple[str, ...] | list[str], store_names: list[str]
    ) -> None:
        for processor in processor_names:
            node = self.nodes.get(processor)
            if not isinstance(node, ProcessorDef):
                raise TopologyError(f"{processor!r} is not a processor of this topology")
            for store in store_names:
                if store in self.global_stores:
                    continue  # every processor may read a global store
                if store not in self.stores:
                    raise TopologyError(
                        f"processor {processor!r} uses state store {store!r}, "
                        "which was never added to the topology"
                    )
                if store not in node.stores:
                    node.stores.append(store)
                if processor not in self.stores[store].processors:
                    self.stores[store].processors.append(processor)

    def source_of(self, topic: str) -> str | None:
        """The source node that reads ``topic``, if one does."""
        return self._topic_to_source.get(topic)

    def co_partition(self, node: str) -> None:
        """Marks a join: its sub-topology's source topics need equal partition counts."""
        self.co_partitioned.append(node)

    def physical_topic(self, application_id: str, topic: str) -> str:
        """Internal topics carry the application id as prefix, as in Kafka."""
        if topic in self.repartition_topics:
            return f"{application_id}-{topic}"
        return topic

    # --- compiling ---------------------------------------------------------
    def subtopologies(self) -> list[Subtopology]:
        """The sub-topologies that make tasks (global ones excluded)."""
        return [sub for sub in self._all_subtopologies() if not self._is_global(sub)]

    def global_subtopology(self) -> Subtopology | None:
        """All global stores' sources and processors, run by one global task."""
        parts = [sub for sub in self._all_subtopologies() if self._is_global(sub)]
        if not parts:
            return None
        return Subtopology(
            -1,
            [n for sub in parts for n in sub.nodes],
            [t for sub in parts for t in sub.source_topics],
            [],
            [s for sub in parts for s in sub.stores],
            [],
        )

    def _is_global(self, sub: Subtopology) -> bool:
        return any(t in self.global_topics for t in sub.source_topics)

    def _all_subtopologies(self) -> list[Subtopology]:
        """Connected groups of nodes (joined by edges and shared stores),
        numbered in the order of their first node, as Kafka numbers them."""
        parent: dict[str, str] = {name: name for name in self.nodes}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[rb] = ra

        for node in self.nodes.values():
            if isinstance(node, ProcessorDef | SinkDef):
                for p in node.parents:
                    union(p, node.name)
        for store in self.stores.values():
            for a, b in zip(store.processors, store.processors[1:], strict=False):
                union(a, b)

        groups: dict[str, list[str]] = {}
        for name in self.nodes:
            groups.setdefault(find(name), []).append(name)
        result = []
        for index, names in enumerate(groups.values()):
            sources = [n for n in names if isinstance(self.nodes[n], SourceDef)]
            if not sources:
                raise TopologyError(f"nodes {names} are not connected to any source")
            topics = [t for s in sources for t in self._source(s).topics]
            sinks = [
                self._sink(n).topic
                for n in names
                if isinstance(self.nodes[n], SinkDef) and self._sink(n).topic_extractor is None
            ]
            stores: list[str] = []
            for n in names:
                node = self.nodes[n]
                if isinstance(node, ProcessorDef):
                    stores.extend(s for s in node.stores if s not in stores)
            repartition = [t for t in topics if t in self.repartition_topics]
            result.append(Subtopology(index, names, topics, sinks, stores, repartition))
        return result

    def _source(self, name: str) -> SourceDef:
        node = self.nodes[name]
        assert isinstance(node, SourceDef)
        return node

    def _sink(self, name: str) -> SinkDef:
        node = self.nodes[name]
        assert isinstance(node, SinkDef)
        return node

    def described(self) -> list[DescribedSubtopology]:
        """The sub-topologies as Kafka's ``TopologyDescription`` shows them:
        global stores' with their nodes in insertion order, the others' in
        Kafka's order (see ``describe_order``), each node with its
        neighbours in the order Kafka prints them."""
        described = []
        for sub in self._all_subtopologies():
            is_global = self._is_global(sub)
            members = set(sub.nodes)
            order = describe_order(
                {
                    name: [p for p in getattr(self.nodes[name], "parents", ()) if p in members]
                    for name in self.nodes
                    if name in members
                }
            )
            nodes = []
            for name in sub.nodes if is_global else order.nodes:
                node = self.nodes[name]
                successors: list[str] = []
                predecessors: list[str] = []
                if not isinstance(node, SinkDef):
                    successors = node.children if is_global else order.successors[name]
                if not isinstance(node, SourceDef) and node.parents:
                    predecessors = node.parents if is_global else order.predecessors[name]
                nodes.append(DescribedNode(node, tuple(successors), tuple(predecessors)))
            described.append(DescribedSubtopology(sub.id, is_global, tuple(nodes)))
        return described

    def describe(self) -> str:
        """Kafka's ``TopologyDescription`` text, to the character: each
        sub-topology behind two spaces (the first behind three), all but
        global stores' followed by an empty line."""
        parts = []
        for sub in self.described():
            suffix = " for global store (will not generate tasks)" if sub.is_global else ""
            lines = [f"  Sub-topology: {sub.id}{suffix}"]
            for described in sub.nodes:
                node, name = described.node, described.node.name
                if isinstance(node, SourceDef):
                    lines.append(f"    Source: {name} (topics: [{', '.join(node.topics)}])")
                elif isinstance(node, ProcessorDef):
                    native = "" if node.native is None else f" (native: {node.native})"
                    stores = ", ".join(java_hash_order(node.stores, copied=True))
                    lines.append(f"    Processor: {name} (stores: [{stores}]){native}")
                elif node.topic_extractor is not None:
                    lines.append(f"    Sink: {name} (extractor: {node.topic_extractor!r})")
                else:
                    lines.append(f"    Sink: {name} (topic: {node.topic})")
                if not isinstance(node, SinkDef):
                    lines.append(f"      --> {', '.join(described.successors) or 'none'}")
                if described.predecessors:
                    lines.append(f"      <-- {', '.join(described.predecessors)}")
            parts.append("\n".join(lines) + ("\n" if sub.is_global else "\n\n"))
        return "Topologies:\n " + "".join(parts)
