"""Which instance hosts which store partition (Kafka's StreamsMetadataState),
from the group's assignment as a transport reads it.

A task is a sub-topology and a partition; the instance running it hosts the
partition of every store of that sub-topology. A key's partition is Kafka's
default partitioner's (murmur2 of the serialized key over the largest
partition count of the store's sub-topology's source topics), the code the
sinks partition with, so a key is found where the app wrote it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from strom import _core
from strom.errors import StoreError
from strom.metadata import HostInfo, KeyQueryMetadata, StreamsMetadata, TopicPartition
from strom.processor.internals.nodes import one_partition, partitions_function

if TYPE_CHECKING:
    from strom.processor.api import Partitioner
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, Subtopology
    from strom.serdes import Serde

# (sub-topology id, partition): a task.
TaskKey = tuple[int, int]


@dataclass(frozen=True)
class GroupAssignment:
    """The tasks of every instance that has an ``application.server``:
    active and standby, by host."""

    active: Mapping[HostInfo, frozenset[TaskKey]]
    standby: Mapping[HostInfo, frozenset[TaskKey]]


class InstanceDirectory(Protocol):
    """What a transport tells of the application's instances."""

    def assignment(self, refresh: bool = False) -> GroupAssignment | None:
        """The group's assignment as last read (``refresh``: read it again
        now); None while it cannot be known (a rebalance in progress)."""

    def close(self) -> None: ...


def task_key(task_id: str) -> TaskKey:
    sub, partition = task_id.split("_")
    return int(sub), int(partition)


class StreamsMetadataState:
    """Answers where stores live, over one reading of the assignment."""

    def __init__(
        self,
        builder: InternalTopologyBuilder,
        this_host: HostInfo,
        physical: Callable[[str], str],
        partition_count: Callable[[str], int],
    ) -> None:
        self.builder = builder
        self.this_host = this_host
        self._physical = physical
        self._partition_count = partition_count
        self._subs = {sub.id: sub for sub in builder.subtopologies()}

    def _sub_of(self, store: str) -> Subtopology | None:
        return next((s for s in self._subs.values() if store in s.stores), None)

    def _partitions(self, tasks: frozenset[TaskKey]) -> frozenset[TopicPartition]:
        return frozenset(
            TopicPartition(self._physical(topic), partition)
            for sub_id, partition in tasks
            for topic in self._subs[sub_id].source_topics
        )

    def _stores(self, tasks: frozenset[TaskKey]) -> frozenset[str]:
        return frozenset(store for sub_id, _ in tasks for store in self._subs[sub_id].stores)

    def all_metadata(self, assignment: GroupAssignment | None) -> list[StreamsMetadata]:
        """Every instance with an ``application.server``, ordered by host."""
        if assignment is None:
            return []
        hosts = sorted(set(assignment.active) | set(assignment.standby))
        out = []
        for host in hosts:
            active = assignment.active.get(host, frozenset())
            standby = assignment.standby.get(host, frozenset())
            out.append(
                StreamsMetadata(
                    host,
                    self._stores(active) | frozenset(self.builder.global_stores),
                    self._partitions(active),
                    self._stores(standby),
                    self._partitions(standby),
                )
            )
        return out

    def metadata_for_store(
        self, store: str, assignment: GroupAssignment | None
    ) -> list[StreamsMetadata]:
        """The instances hosting ``store`` (active or standby); every
        instance for a global store."""
        self._check_store(store)
        every = self.all_metadata(assignment)
        if store in self.builder.global_stores:
            return every
        return [
            m for m in every if store in m.state_store_names or store in m.standby_state_store_names
        ]

    def key_query_metadata(
        self,
        store: str,
        key: Any,
        key_serde: Serde[Any] | None,
        assignment: GroupAssignment | None,
        partitioner: Partitioner | None = None,
    ) -> KeyQueryMetadata:
        """Where ``key`` of ``store`` lives: NOT_AVAILABLE while the
        assignment is not known."""
        self._check_store(store)
        if key is None:
            raise StoreError(f"store {store!r}: a query key must not be None")
        if assignment is None or not (assignment.active or assignment.standby):
            return KeyQueryMetadata.NOT_AVAILABLE
        if store in self.builder.global_stores:
            # On every instance: this one, if it serves queries.
            host = self.this_host
            if host == HostInfo.unavailable():
                host = min(set(assignment.active) | set(assignment.standby))
            return KeyQueryMetadata(host, frozenset(), -1)
        sub = self._sub_of(store)
        assert sub is not None  # _check_store
        partition = self.partition_for(sub, store, key, key_serde, partitioner)
        task = (sub.id, partition)
        active = next((h for h, tasks in assignment.active.items() if task in tasks), None)
        standbys = frozenset(h for h, tasks in assignment.standby.items() if task in tasks)
        return KeyQueryMetadata(active or HostInfo.unavailable(), standbys, partition)

    def partition_for(
        self,
        sub: Subtopology,
        store: str,
        key: Any,
        key_serde: Serde[Any] | None,
        partitioner: Partitioner | None = None,
    ) -> int:
        """The key's partition: by ``partitioner`` (Kafka's StreamPartitioner
        overload: given the source topic with the most partitions, the key
        and None for the value, it must name one partition), else murmur2 of
        the key serialized with ``key_serde``."""
        if partitioner is not None:
            topic = max((self._physical(t) for t in sub.source_topics), key=self._partition_count)
            count = self._task_count(sub)
            answer = partitions_function(partitioner)(topic, key, None, count)
            chosen = one_partition(answer, count, f"store {store!r}, key {key!r}")
            if chosen is not None:
                return chosen
        if key_serde is None:
            raise StoreError(f"store {store!r}: a key's partition needs its key serde")
        raw = key_serde.serialize(self._physical(sub.source_topics[0]), key)
        if raw is None:
            raise StoreError(f"store {store!r}: the key serde turned {key!r} into None")
        return int(_core.partition_for_key(raw, self._task_count(sub)))

    def _task_count(self, sub: Subtopology) -> int:
        return max(self._partition_count(self._physical(t)) for t in sub.source_topics)

    def store_partition_count(self, store: str) -> int:
        """How many tasks hold a partition of ``store`` (1 for a global store)."""
        self._check_store(store)
        sub = self._sub_of(store)
        return 1 if sub is None else self._task_count(sub)

    def _check_store(self, store: str) -> None:
        if store not in self.builder.stores:
            known = ", ".join(sorted(self.builder.stores)) or "none"
            raise StoreError(f"no state store named {store!r} in this topology (stores: {known})")


class LocalDirectory:
    """An instance that is the whole application (the embedded log): every
    task is local."""

    def __init__(self, host: HostInfo | None, local_tasks: Callable[[], list[str]]) -> None:
        self.host = host
        self._local_tasks = local_tasks

    def assignment(self, refresh: bool = False) -> GroupAssignment | None:
        if self.host is None:
            return GroupAssignment({}, {})  # no application.server: no host to name
        tasks = frozenset(task_key(t) for t in self._local_tasks())
        return GroupAssignment({self.host: tasks}, {})

    def close(self) -> None:
        """Nothing to release."""
