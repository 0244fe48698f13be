"""The embedded log's transport: one stream thread that owns every task.

Start: create internal topics ─► bootstrap global stores ─► open each task's
stores as of their last commit and replay the changelog tails. Output is
appended (and fsynced) on flush; a commit then commits each store with the
changelog offset it reflects, then the processed input offsets with their
partition times (``strom.processor.internals.runtime`` writes the sequence).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from strom.embedded.consumer import EmbeddedConsumer, OffsetAndMetadata
from strom.embedded.log import EmbeddedLog, now_ms
from strom.errors import TopologyError
from strom.offset_reset import EARLIEST, LATEST, NONE, AutoOffsetReset
from strom.processor.internals.global_state import GlobalStores
from strom.processor.internals.runtime import EndTargets, Runtime, Transport
from strom.processor.internals.task import RecordCollector

if TYPE_CHECKING:
    from strom._core import RecordBatch
    from strom.config import StreamsConfig
    from strom.processor.api import StateRestoreListener
    from strom.processor.internals.task import InputRecords
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, Subtopology

log = logging.getLogger("strom.runtime")

GLOBAL_BATCH = 10_000


class EmbeddedRuntime(Runtime):
    """The embedded log: one stream thread that owns every task."""

    def __init__(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        path: str,
        on_rebalance: Callable[[bool], None] | None = None,
        restore_listener: StateRestoreListener | None = None,
    ) -> None:
        super().__init__(builder, config)
        self.restore_listener = restore_listener
        self.log = EmbeddedLog(path)
        self._partitions: dict[str, int] = {}
        self._prepare_topics()
        self.producer = self.log.producer()
        collector = RecordCollector(self.producer, self.partition_count)
        self._init_tasks(collector, self._changelog_range)
        self.consumer: EmbeddedConsumer | None = None
        try:
            self._open_global_stores()
            committed = self.log.committed_offsets(self.app_id)
            self._create_tasks({key: c.offset for key, c in committed.items()})
            self.consumer = self._open_input(committed)
            times = {key: c.metadata for key, c in committed.items()}
            for task in self.tasks.values():
                task.restore_partition_times(times)
        except BaseException:
            self.abort()  # release the stores opened so far
            raise
        if on_rebalance is not None:
            on_rebalance(False)  # every task is assigned at once

    # --- topics ---------------------------------------------------------------
    def partition_count(self, topic: str) -> int:
        if topic not in self._partitions:
            self._partitions[topic] = self.log.partitions(topic)
        return self._partitions[topic]

    def _describe_topics(self, topics: list[str]) -> dict[str, int]:
        existing = set(self.log.topics())
        return {t: self.log.partitions(t) for t in topics if t in existing}

    def _missing_topics_error(self, missing: list[str]) -> TopologyError:
        return TopologyError(
            f"topic(s) {', '.join(missing)} do not exist in the embedded log at "
            f"{self.log.path}; create them first (EmbeddedLog.create_topic)"
        )

    def _create_internal_topics(self, topics: list[tuple[str, int, dict[str, str]]]) -> None:
        existing = set(self.log.topics())
        for topic, partitions, config in topics:
            if topic in existing:
                found = self.log.partitions(topic)
                if found != partitions:
                    raise TopologyError(
                        f"internal topic {topic} has {found} partition(s) but the topology "
                        f"needs {partitions}; reset the application (strom reset) to recreate it"
                    )
                continue
            self.log.create_topic(topic, partitions, config)
            log.info("created internal topic %s with %d partition(s)", topic, partitions)

    def _open_input(self, committed: Mapping[tuple[str, int], Any]) -> EmbeddedConsumer:
        """The input consumer, each partition with no committed offset placed
        by its reset policy (a committed offset out of range falls back to
        ``auto.offset.reset``, or to the log start when that is by duration)."""
        topics = sorted(self._input_topics())
        fresh = [
            (topic, partition)
            for topic in topics
            for partition in range(self.partition_count(topic))
            if (topic, partition) not in committed
        ]
        policies = self._reset_policies(fresh)
        # What the consumer does with a committed offset out of range. It
        # would refuse the fresh partitions under "none": they have sources'
        # own policies (or _reset_policies raised) and are placed below.
        default = AutoOffsetReset.of(self.config["auto.offset.reset"])
        unplaced = default.duration_ms is not None or (default.strategy == NONE and fresh)
        fallback = EARLIEST if unplaced else default.strategy
        consumer = self.log.consumer(self.app_id, topics, offset_reset=fallback)
        now = now_ms()
        for (topic, partition), policy in policies.items():
            if policy.strategy == EARLIEST:
                offset: int | None = self.log.log_start_offsets(topic)[partition]
            elif policy.strategy == LATEST:
                offset = None
            else:
                offset = self.log.offsets_for_times(topic, policy.start_timestamp(now))[partition]
            if offset is None:
                offset = self.log.end_offsets(topic)[partition]
            consumer.seek(topic, partition, offset)
        return consumer

    def _changelog_range(self, topic: str, partition: int) -> tuple[int, int]:
        return (
            self.log.log_start_offsets(topic)[partition],
            self.log.end_offsets(topic)[partition],
        )

    # --- global stores and tasks -----------------------------------------------
    def _new_global_stores(self, subtopology: Subtopology) -> GlobalStores:
        return GlobalStores(
            self.factory, subtopology, EmbeddedGlobalSource(self.log), self.partition_count
        )

    def _create_tasks(self, committed: dict[tuple[str, int], int]) -> None:
        """Every task, its stores restored (read-only stores' up to the
        ``committed`` offsets of their source topics)."""
        for sub in self.subtopologies:
            for partition in range(self._task_count(sub, self._counts)):
                task = self.factory.task(sub, partition)
                self._add_task(task, sub)
                task.state.limit_source_restores(committed)
                task.state.restore(self.log, self.restore_listener)

    # --- fetching, offsets, output --------------------------------------------------
    @property
    def input(self) -> EmbeddedConsumer:
        assert self.consumer is not None, "the runtime is closed"
        return self.consumer

    def join_group(self) -> None:
        """The embedded log has no group protocol: this process owns every
        task from the start (``_create_tasks``)."""

    def _poll_batches(self, timeout: float) -> list[InputRecords]:
        return list(self.input.poll_batches(self.config["poll.max.records"], timeout))

    def _has_unfetched(self, topic: str, partition: int) -> bool | None:
        return self.input.position(topic, partition) < self._end_offset(topic, partition)

    def _position(self, topic: str, partition: int) -> int:
        return self.input.position(topic, partition)

    def _end_offset(self, topic: str, partition: int) -> int:
        return self.log.end_offsets(topic)[partition]

    def _bounded_poll_timeout(self, end: EndTargets) -> float:
        # The log's end offsets cost nothing to read: once the inputs are at
        # their targets nothing is to come, so the poll need not wait (the
        # run then makes buffered output readable and checks again).
        return 0.0 if self._caught_up(end) else super()._bounded_poll_timeout(end)

    def records_lag(self, topic: str, partition: int) -> int | None:
        if self.consumer is None:  # closed
            return None
        return super().records_lag(topic, partition)

    def _owned_inputs(self) -> list[tuple[str, int]]:
        return [
            (name, partition)
            for name in sorted(self._input_topics())
            for partition in range(self.partition_count(name))
        ]

    def _flush_output(self) -> None:
        self.collector.flush()

    def _commit_needed(self) -> bool:
        # Every commit here is whole (no offsets wait for acknowledgements):
        # with nothing fetched, punctuated or assigned since, it would only
        # fsync what is already durable again.
        return self._uncommitted

    def _changelog_end(self, topic: str, partition: int) -> int:
        return self._end_offset(topic, partition)

    def _commit_offsets(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        if offsets:
            self.input.commit(
                {key: OffsetAndMetadata(offset, time) for key, (offset, time) in offsets.items()}
            )

    def _close_clients(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


class EmbeddedGlobalSource:
    """The global topics read straight from the log, each partition from its
    log start offset; every read goes to the end."""

    def __init__(self, log: EmbeddedLog) -> None:
        self.log = log
        self._positions: dict[tuple[str, int], int] = {}

    def start(self, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        for topic, partition in partitions:
            self._positions[(topic, partition)] = self.log.log_start_offsets(topic)[partition]
        return {
            (topic, partition)
            for topic, partition in partitions
            if self._positions[(topic, partition)] < self.log.end_offsets(topic)[partition]
        }

    def read(self, timeout: float) -> Iterator[RecordBatch]:
        for (topic, partition), start in self._positions.items():
            position, end = start, self.log.end_offsets(topic)[partition]
            while position < end:
                records = self.log.read_batch(topic, partition, position, GLOBAL_BATCH)
                if not len(records):
                    break
                yield records
                position = records.next_offset
                self._positions[(topic, partition)] = position

    def ended(self) -> set[tuple[str, int]]:
        return set(self._positions)

    def close(self) -> None:
        """Nothing to release: the log belongs to the runtime."""


class EmbeddedTransport(Transport):
    """The embedded log at ``path``: one stream thread, and this client is
    the whole application."""

    def __init__(self, path: str) -> None:
        self.path = path

    def stream_threads(self, config: StreamsConfig) -> int:
        return 1

    def runtime(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        index: int,
        on_rebalance: Callable[[bool], None],
    ) -> Runtime:
        return EmbeddedRuntime(builder, config, self.path, on_rebalance, self.restore_listener)
