"""The run loop shared by the transports.

:class:`Runtime` is what every transport shares: sizing the internal topics,
making tasks (one per partition per sub-topology, the same ``StreamTask``
everywhere), and the loop that feeds them: poll a batch per partition into its
task's queue ─► each task processes in timestamp order across its partitions
(Kafka's PartitionGroup) ─► punctuate ─► maybe commit. A transport supplies
the I/O: topics, polling, the fetch lag, commits: ``strom.embedded.runtime``
for the embedded log, ``strom.kafka.runtime`` for Kafka.
"""

from __future__ import annotations

import functools
import logging
import time
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from strom import _core
from strom.errors import TopologyError
from strom.processor.internals.task import RecordCollector, StreamTask
from strom.processor.internals.topology_builder import StoreDef

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.processor.internals.state_manager import ChangelogRange
    from strom.processor.internals.task import InputRecords
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, Subtopology

log = logging.getLogger("strom.runtime")


# Kafka's windowstore.changelog.additional.retention.ms default.
CHANGELOG_ADDITIONAL_RETENTION_MS = 24 * 60 * 60 * 1000


def changelog_config(store: StoreDef) -> dict[str, str]:
    """Kafka's changelog topic configs: compacted for key-value stores;
    compacted and deleted after the store's retention (plus a day) for window
    and session stores; then the store's own ``log_config``."""
    config = {"cleanup.policy": "compact"}
    if store.kind != "key_value" and store.retention_ms is not None:
        config = {
            "cleanup.policy": "compact,delete",
            "retention.ms": str(store.retention_ms + CHANGELOG_ADDITIONAL_RETENTION_MS),
        }
    return config | store.log_config


REPARTITION_CONFIG = {
    # Kafka's RepartitionTopicConfig: kept until the app itself purges what it read.
    "cleanup.policy": "delete",
    "segment.bytes": "52428800",
    "retention.ms": "-1",
}


class Runtime(ABC):
    """Tasks and the loop that feeds them, over a transport the subclass supplies."""

    def __init__(self, builder: InternalTopologyBuilder, config: StreamsConfig) -> None:
        self.builder = builder
        self.config = config
        self.app_id = config.application_id
        self.state_dir = config.state_dir / self.app_id
        self.subtopologies = builder.subtopologies()
        self.tasks: dict[str, StreamTask] = {}
        self._task_by_input: dict[tuple[str, int], StreamTask] = {}
        self._last_commit = time.monotonic()
        # The thread's record cache, shared by its tasks' caching stores; with
        # 0 bytes none at all (Kafka's InternalTopologyBuilder.rewriteTopology
        # strips the caching layers then).
        cache_bytes = config["statestore.cache.max.bytes"]
        self.cache = _core.NativeThreadCache(cache_bytes) if cache_bytes > 0 else None
        self.global_task: StreamTask | None = None
        self._idle_since: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self.collector: RecordCollector  # set by the transport

    # --- transport hooks --------------------------------------------------------
    @abstractmethod
    def partition_count(self, topic: str) -> int:
        """Partitions of a (physical) topic."""

    @abstractmethod
    def _poll_batches(self, timeout: float) -> list[InputRecords]:
        """Records polled from the task inputs, one batch per partition with data."""

    @abstractmethod
    def _has_unfetched(self, topic: str, partition: int) -> bool | None:
        """Whether an input partition has records not fetched yet (None: not known yet)."""

    @abstractmethod
    def commit(self) -> None:
        """Flush, make output and changelogs durable, commit stores and offsets."""

    def poll_global(self) -> int:
        """Applies what arrived on the global topics since the last call."""
        return 0

    # --- topics ---------------------------------------------------------------
    def topic_name(self, topic: str) -> str:
        return self.builder.physical_topic(self.app_id, topic)

    def _input_topics(self) -> set[str]:
        return {self.topic_name(t) for sub in self.subtopologies for t in sub.source_topics}

    def _external_topics(self) -> list[str]:
        """Topics the app reads or writes that it does not create (logical names)."""
        return sorted(
            {
                t
                for sub in self.subtopologies
                for t in sub.source_topics + sub.sink_topics
                if t not in self.builder.repartition_topics
            }
            | set(self.builder.global_topics)
        )

    def _size_topics(self, external: dict[str, int]) -> dict[str, int]:
        """Partition counts of every topic by logical name, given the external
        ones. Repartition topics feeding a join take the partition count of the
        join's other inputs (Kafka's CopartitionedTopicsEnforcer); sizing them
        may size others downstream, so repeat until it settles."""
        fixed = dict(external)
        fixed.update(self.builder.repartition_partitions)
        counts = self._size_repartition_topics(fixed)
        for _ in range(len(self.subtopologies)):
            wanted = self._co_partition_sizes(counts, fixed)
            if not wanted:
                break
            fixed.update(wanted)
            counts = self._size_repartition_topics(fixed)
        return counts

    def _size_repartition_topics(self, fixed: dict[str, int]) -> dict[str, int]:
        """A repartition topic gets as many partitions as the largest input of
        the sub-topology that writes it, unless fixed; resolved until nothing
        changes, since that input may itself be a repartition topic."""
        counts = dict(fixed)
        writers = {t: sub for sub in self.subtopologies for t in sub.sink_topics}
        pending = set(self.builder.repartition_topics) - set(counts)
        while pending:
            progressed = False
            for topic in sorted(pending):
                inputs = self._partitioned_like(topic) or writers[topic].source_topics
                if all(t in counts for t in inputs):
                    counts[topic] = max(counts[t] for t in inputs)
                    pending.discard(topic)
                    progressed = True
            if not progressed:
                raise TopologyError(f"cannot size repartition topics {sorted(pending)}: a cycle")
        return counts

    def _co_partition_sizes(self, counts: dict[str, int], fixed: dict[str, int]) -> dict[str, int]:
        """Counts for the not-yet-fixed repartition topics that feed a join:
        the largest of the join's fixed inputs, else of all its inputs."""
        wanted: dict[str, int] = {}
        for sub in self.subtopologies:
            if not any(n in sub.nodes for n in self.builder.co_partitioned):
                continue
            free = [t for t in sub.source_topics if t not in fixed]
            if not free:
                continue
            known = [t for t in sub.source_topics if t in fixed] or sub.source_topics
            size = max(counts[t] for t in known)
            wanted.update({t: size for t in free})
        return wanted

    def _partitioned_like(self, topic: str) -> list[str]:
        """The topics whose partition count ``topic`` takes when it must be
        co-partitioned with the inputs of another node's sub-topology (a
        foreign-key join's subscription and response topics)."""
        node = self.builder.partitions_like.get(topic)
        if node is None:
            return []
        sub = next(s for s in self.subtopologies if node in s.nodes)
        return [t for t in sub.source_topics if t not in self.builder.partitions_like]

    def _internal_topics(
        self, counts: dict[str, int], repartition_config: dict[str, str]
    ) -> list[tuple[str, int, dict[str, str]]]:
        """(physical name, partitions, config) of the repartition and changelog topics."""
        out = [
            (self.topic_name(topic), counts[topic], dict(repartition_config))
            for topic in sorted(self.builder.repartition_topics)
        ]
        for sub in self.subtopologies:
            tasks = self._task_count(sub, counts)
            for store in sub.stores:
                store_def = self.builder.stores[store]
                if store_def.logged:
                    out.append((self.changelog_topic(store), tasks, changelog_config(store_def)))
        return out

    def changelog_topic(self, store: str) -> str:
        return f"{self.app_id}-{store}-changelog"

    def _check_co_partitioning(self, counts: dict[str, int]) -> None:
        """Inputs of a join must have equal partition counts (Kafka's rule),
        checked before anything is processed."""
        for sub in self.subtopologies:
            joins = [n for n in self.builder.co_partitioned if n in sub.nodes]
            sizes = {t: counts[t] for t in sub.source_topics}
            if joins and len(set(sizes.values())) > 1:
                listed = ", ".join(f"{t} ({n})" for t, n in sorted(sizes.items()))
                raise TopologyError(
                    f"join {joins[0]!r} needs co-partitioned inputs, but the topics "
                    f"have different partition counts: {listed}; repartition one side"
                )

    @staticmethod
    def _task_count(sub: Subtopology, counts: dict[str, int]) -> int:
        return max(counts[t] for t in sub.source_topics)

    # --- tasks ------------------------------------------------------------------
    def _new_task(
        self, sub: Subtopology, partition: int, changelog_range: ChangelogRange
    ) -> StreamTask:
        """A task with its stores opened as of their last commit (not restored)."""
        global_stores = {} if self.global_task is None else self.global_task.stores
        return StreamTask(
            sub,
            partition,
            self.builder,
            self.config,
            self.collector,
            self.topic_name,
            self.state_dir,
            global_stores=global_stores,
            changelog_range=changelog_range,
            cache=self.cache,
        )

    def _add_task(self, task: StreamTask, sub: Subtopology) -> None:
        self.tasks[task.task_id] = task
        for name in self.task_inputs(sub, task.partition):
            self._task_by_input[name] = task

    def _remove_task(self, task: StreamTask) -> None:
        self.tasks.pop(task.task_id, None)
        for key in [k for k, t in self._task_by_input.items() if t is task]:
            del self._task_by_input[key]
        self._idle_since.pop(task.task_id, None)

    def task_inputs(self, sub: Subtopology, partition: int) -> list[tuple[str, int]]:
        """The input partitions of task ``partition`` of ``sub`` (a smaller
        topic may lack that partition)."""
        out = []
        for topic in sub.source_topics:
            name = self.topic_name(topic)
            if partition < self.partition_count(name):
                out.append((name, partition))
        return out

    # --- the loop -------------------------------------------------------------
    def poll_once(self, timeout: float) -> int:
        """Polls once and processes what came; returns the number of records."""
        self.poll_global()
        for records in self._poll_batches(timeout):
            task = self._task_by_input.get((records.topic, records.partition))
            if task is not None:  # else: revoked meanwhile; its new owner reads it
                task.add_records(records)
        count = 0
        for task in list(self.tasks.values()):
            if task.all_inputs_queued():
                self._idle_since.pop(task.task_id, None)  # the idle wait is over
            count += task.process_ready(functools.partial(self._must_wait, task))
        for task in list(self.tasks.values()):
            task.maybe_punctuate_wall_clock()
        if any(task.commit_requested for task in self.tasks.values()):
            self.commit()
        return count

    def _must_wait(self, task: StreamTask, topic: str, partition: int) -> bool:
        """Kafka's ``max.task.idle.ms`` for an input partition with nothing
        queued: -1 never waits; otherwise wait while the partition has data
        not fetched yet (or its lag is not known yet), and (when > 0) up to
        that long for new data."""
        idle_ms = self.config["max.task.idle.ms"]
        if idle_ms < 0 or partition >= self.partition_count(topic):
            return False
        if self._has_unfetched(topic, partition) is not False:
            return True
        if idle_ms == 0:
            return False
        now = time.monotonic()
        since = self._idle_since.setdefault(task.task_id, now)
        if (now - since) * 1000 >= idle_ms:
            del self._idle_since[task.task_id]
            return False
        return True

    def maybe_commit(self) -> None:
        interval = self.config["commit.interval.ms"] / 1000
        if time.monotonic() - self._last_commit >= interval:
            self.commit()

    def _fed_by_the_app(self) -> set[str]:
        """Input topics this app also writes (repartition topics, and user
        topics used with ``through``): consumed to their current end."""
        sources = {t for sub in self.subtopologies for t in sub.source_topics}
        sinks = {t for sub in self.subtopologies for t in sub.sink_topics}
        return {self.topic_name(t) for t in sources & sinks}

    def metrics(self) -> dict[str, Any]:
        totals = {
            "records-processed": 0,
            "dropped-records": 0,
            "skipped-records": 0,
            "restored-records": 0,
        }
        for task in self.tasks.values():
            totals["records-processed"] += task.metrics.records_processed
            totals["dropped-records"] += task.metrics.dropped_records
            totals["skipped-records"] += task.metrics.skipped_records
            totals["restored-records"] += task.state.restored_records
        return totals

    @abstractmethod
    def run_until_end(self, deadline: float | None) -> None:
        """Processes up to the input end offsets as of the call, then commits."""

    @abstractmethod
    def close(self) -> None:
        """Commits and releases everything."""

    @abstractmethod
    def abort(self) -> None:
        """Releases tasks and clients without committing."""
