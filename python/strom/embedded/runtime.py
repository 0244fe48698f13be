"""The run loop over the embedded log: one stream thread that owns every task.

Start: create internal topics ─► bootstrap global stores ─► open each task's
stores as of their last commit and replay the changelog tails.
Commit: flush nodes ─► append and fsync output and changelogs ─► commit each
store with the changelog offset it reflects ─► commit the processed input
offsets with their partition times.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from strom.embedded.consumer import EmbeddedConsumer, OffsetAndMetadata
from strom.embedded.log import EmbeddedLog
from strom.errors import TopologyError
from strom.processor.internals.runtime import Runtime
from strom.processor.internals.task import RecordCollector, StreamTask
from strom.processor.internals.topology_builder import SourceDef

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.processor.internals.task import InputRecords
    from strom.processor.internals.topology_builder import InternalTopologyBuilder

log = logging.getLogger("strom.runtime")


class EmbeddedRuntime(Runtime):
    """The embedded log: one stream thread that owns every task."""

    def __init__(self, builder: InternalTopologyBuilder, config: StreamsConfig, path: str) -> None:
        super().__init__(builder, config)
        self.log = EmbeddedLog(path)
        self._partitions: dict[str, int] = {}
        self._prepare_topics()
        self.producer = self.log.producer()
        self.collector = RecordCollector(self.producer, self.partition_count)
        self.consumer: EmbeddedConsumer | None = None
        self._global_positions: dict[tuple[str, int], int] = {}
        try:
            self._create_tasks()
            self.consumer = self.log.consumer(
                self.app_id,
                sorted(self._input_topics()),
                offset_reset=config["auto.offset.reset"],
            )
            self._apply_source_offset_resets()
            committed = self.log.committed_offsets(self.app_id)
            times = {key: c.metadata for key, c in committed.items()}
            for task in self.tasks.values():
                task.restore_partition_times(times)
        except BaseException:
            self.abort()  # release the stores opened so far
            raise

    # --- topics ---------------------------------------------------------------
    def partition_count(self, topic: str) -> int:
        if topic not in self._partitions:
            self._partitions[topic] = self.log.partitions(topic)
        return self._partitions[topic]

    def _apply_source_offset_resets(self) -> None:
        """``stream(..., offset_reset=…)`` overrides ``auto.offset.reset`` for
        that source's partitions that have no committed offset yet."""
        committed = self.log.committed_offsets(self.app_id)
        for node in self.builder.nodes.values():
            if not isinstance(node, SourceDef) or node.offset_reset is None:
                continue
            for topic in node.topics:
                name = self.topic_name(topic)
                ends = self.log.end_offsets(name)
                starts = self.log.log_start_offsets(name)
                for partition in ends:
                    if (name, partition) not in committed:
                        target = ends if node.offset_reset == "latest" else starts
                        self.input.seek(name, partition, target[partition])

    # --- global stores --------------------------------------------------------
    def _create_global_task(self) -> None:
        """Opens the global stores and bootstraps them to the end of their
        topics before any task processes a record."""
        sub = self.builder.global_subtopology()
        if sub is None:
            return
        self.global_task = StreamTask(
            sub,
            0,
            self.builder,
            self.config,
            self.collector,
            self.topic_name,
            self.state_dir,
            task_id="global",
        )
        for store in self.global_task.stores.values():
            store.native.clear()  # rebuilt from its topic on every start
        for topic in sub.source_topics:
            for partition, start in self.log.log_start_offsets(topic).items():
                self._global_positions[(topic, partition)] = start
        self.poll_global()

    def poll_global(self) -> int:
        if self.global_task is None:
            return 0
        applied = 0
        for (topic, partition), start in self._global_positions.items():
            position, end = start, self.log.end_offsets(topic)[partition]
            while position < end:
                records = self.log.read_batch(topic, partition, position, 10_000)
                if not len(records):
                    break
                self.global_task.process(records)
                applied += len(records)
                position = records.next_offset
            self._global_positions[(topic, partition)] = position
        return applied

    def _prepare_topics(self) -> None:
        existing = set(self.log.topics())
        external = self._external_topics()
        missing = [t for t in external if t not in existing]
        if missing:
            raise TopologyError(
                f"topic(s) {', '.join(missing)} do not exist in the embedded log at "
                f"{self.log.path}; create them first (EmbeddedLog.create_topic)"
            )
        counts = self._size_topics({t: self.log.partitions(t) for t in external})
        for topic, partitions, config in self._internal_topics(counts, {}):
            self._ensure_internal(topic, partitions, config)
        self._check_co_partitioning(counts)
        self._counts = counts

    def _changelog_range(self, topic: str, partition: int) -> tuple[int, int]:
        return (
            self.log.log_start_offsets(topic)[partition],
            self.log.end_offsets(topic)[partition],
        )

    def _ensure_internal(self, topic: str, partitions: int, config: dict[str, str]) -> None:
        if topic in self.log.topics():
            found = self.log.partitions(topic)
            if found != partitions:
                raise TopologyError(
                    f"internal topic {topic} has {found} partition(s) but the topology needs "
                    f"{partitions}; reset the application (strom reset) to recreate it"
                )
            return
        self.log.create_topic(topic, partitions, config)
        log.info("created internal topic %s with %d partition(s)", topic, partitions)

    # --- tasks ------------------------------------------------------------------
    def _create_tasks(self) -> None:
        self._create_global_task()
        for sub in self.subtopologies:
            for partition in range(self._task_count(sub, self._counts)):
                task = self._new_task(sub, partition, self._changelog_range)
                self._add_task(task, sub)
                task.state.restore(self.log)

    # --- the loop -------------------------------------------------------------
    @property
    def input(self) -> EmbeddedConsumer:
        assert self.consumer is not None, "the runtime is closed"
        return self.consumer

    def _poll_batches(self, timeout: float) -> list[InputRecords]:
        return list(self.input.poll_batches(self.config["poll.max.records"], timeout))

    def _has_unfetched(self, topic: str, partition: int) -> bool | None:
        return self.input.position(topic, partition) < self.log.end_offsets(topic)[partition]

    def commit(self) -> None:
        """Flush nodes, make output and changelogs durable, commit the stores
        with the changelog offsets they reflect, then the input offsets."""
        for task in self.tasks.values():
            task.flush()
        self.collector.flush()
        for task in self.tasks.values():
            if task.changelogs or task.state.stores:
                ends = {
                    topic: self.log.end_offsets(topic)[task.partition]
                    for topic in task.changelogs.values()
                }
                task.commit_state(ends)
            task.commit_requested = False
        # Only what was processed: queued records are fetched again after a
        # restart. The partition time travels as offset metadata.
        offsets = {
            key: OffsetAndMetadata(offset, partition_time)
            for task in self.tasks.values()
            for key, (offset, partition_time) in task.committable_offsets().items()
        }
        if offsets:
            self.input.commit(offsets)
        self._last_commit = time.monotonic()

    def caught_up(self, targets: dict[tuple[str, int], int]) -> bool:
        """True once every external input is consumed up to ``targets`` (its
        end as of the start) and every topic the app feeds itself to its end."""
        for (topic, partition), end in targets.items():
            if self.input.position(topic, partition) < end:
                return False
        for name in self._fed_by_the_app():
            for partition, end in self.log.end_offsets(name).items():
                if self.input.position(name, partition) < end:
                    return False
        return not any(task.has_queued() for task in self.tasks.values())

    def end_targets(self) -> dict[tuple[str, int], int]:
        fed = self._fed_by_the_app()
        targets = {}
        for name in self._input_topics() - fed:
            for partition, end in self.log.end_offsets(name).items():
                targets[(name, partition)] = end
        return targets

    def run_until_end(self, deadline: float | None) -> None:
        targets = self.end_targets()
        while True:
            if self.poll_once(0.05) == 0:
                # Output still buffered in the producer may feed repartition topics.
                self.collector.flush()
                if self.caught_up(targets):
                    # The commit flushes the record caches, whose output may
                    # feed repartition topics again: done once it feeds none.
                    self.commit()
                    if self.caught_up(targets):
                        return
            else:
                self.maybe_commit()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("run_until_end did not reach the end offsets in time")

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self.abort()

    def abort(self) -> None:
        """Releases tasks and clients without committing (after a failure:
        uncommitted work is redone from the last commit on restart)."""
        for task in self.tasks.values():
            task.close()
        self.tasks.clear()
        if self.global_task is not None:
            self.global_task.close()
            self.global_task = None
        if self.consumer is not None:
            self.consumer.close()
