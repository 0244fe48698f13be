"""The stream thread, written once for every transport.

:class:`Runtime` is what the transports share: sizing and creating the
internal topics, making tasks (through one :class:`TaskFactory`), the global
stores' bootstrap, the loop that feeds the tasks (poll a batch per partition
into its task's queue ─► each task processes in timestamp order across its
partitions, Kafka's PartitionGroup ─► punctuate ─► maybe commit), the commit
sequence and the bounded run. A transport supplies only the I/O: which topics
exist, fetching, producing, offsets, assignment and transactions
(``strom.embedded.runtime`` for the embedded log, ``strom.kafka.runtime`` for
Kafka). :class:`Transport` is what ``KafkaStreams`` asks of one.
"""

from __future__ import annotations

import functools
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from strom import _core
from strom.errors import ConfigError, TopologyError
from strom.offset_reset import NONE, AutoOffsetReset
from strom.processor.internals.global_state import GlobalStores
from strom.processor.internals.metrics import ThreadMetrics, lag_metrics
from strom.processor.internals.streams_metadata import InstanceDirectory, LocalDirectory
from strom.processor.internals.task import RecordCollector, StreamTask, TaskFactory
from strom.processor.internals.topology_builder import (
    InternalTopologyBuilder,
    SourceDef,
    Subtopology,
)
from strom.state.internals.registry import store_kind

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.metrics import Metric
    from strom.processor.api import StandbyUpdateListener, StateRestoreListener
    from strom.processor.internals.state_manager import ChangelogRange
    from strom.processor.internals.task import InputRecords

log = logging.getLogger("strom.runtime")

# How long a paused thread that does not poll waits between looks at its flag.
PAUSED_WAIT_S = 0.05


REPARTITION_CONFIG = {
    # Kafka's RepartitionTopicConfig: kept until the app itself purges what it read.
    "cleanup.policy": "delete",
    "segment.bytes": "52428800",
    "retention.ms": "-1",
}


@dataclass(frozen=True)
class EndTargets:
    """What a bounded run reads up to: the external inputs' end offsets as of
    its start, and the topics the app feeds itself (read to their end
    whenever checked)."""

    targets: dict[tuple[str, int], int]
    fed: set[str]


class Runtime(ABC):
    """One stream thread: its tasks and the loop that feeds them, over the
    transport a subclass supplies (the hooks below)."""

    # Told as this thread restores local stores (KafkaStreams'
    # set_global_state_restore_listener), and as standbys update theirs.
    restore_listener: StateRestoreListener | None = None
    standby_listener: StandbyUpdateListener | None = None

    # Topic configs of the repartition topics this transport creates.
    repartition_config: ClassVar[dict[str, str]] = {}
    # Whether offsets commit in a transaction with the output: the stores
    # then commit after it, only what it made durable.
    transactional = False

    def __init__(self, builder: InternalTopologyBuilder, config: StreamsConfig) -> None:
        self.builder = builder
        self.config = config
        self.app_id = config.application_id
        self.state_dir = config.state_dir / self.app_id
        self.subtopologies = builder.subtopologies()
        # Offset reset policies of sources that set their own (physical topics).
        self._source_resets = {
            self.topic_name(topic): node.offset_reset
            for node in builder.nodes.values()
            if isinstance(node, SourceDef) and node.offset_reset is not None
            for topic in node.topics
        }
        self._repartition_inputs = {self.topic_name(t) for t in builder.repartition_topics}
        self.tasks: dict[str, StreamTask] = {}
        self._task_by_input: dict[tuple[str, int], StreamTask] = {}
        self._last_commit = time.monotonic()
        # The thread's record cache, shared by its tasks' caching stores; with
        # 0 bytes none at all (Kafka's InternalTopologyBuilder.rewriteTopology
        # strips the caching layers then).
        cache_bytes = config["statestore.cache.max.bytes"]
        self.cache = _core.NativeThreadCache(cache_bytes) if cache_bytes > 0 else None
        self.global_stores: GlobalStores | None = None
        self.global_task: StreamTask | None = None
        self._idle_since: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        # Metrics of the tasks closed so far (a rebalance moved them away).
        self._closed_totals: dict[str, int] = {}
        # Whether records were fetched since the last commit.
        self._dirty = False
        # Whether anything a commit writes may have changed since the last
        # one: records fetched, a wall-clock punctuation, a task assigned.
        self._uncommitted = True
        self.collector: RecordCollector  # set by ``_init_tasks``
        self.factory: TaskFactory
        # Kafka's thread-id tag (a transport with several threads names each).
        self.thread_name = f"{self.app_id}-StreamThread-1"
        self.sensors = ThreadMetrics(config)
        # KafkaStreams.pause(): while set, no task processes or punctuates,
        # and the inputs are not fetched (applied on the thread's own poll).
        self.paused = False
        self._inputs_paused = self._polls_while_paused = False
        self.paused_polls = 0  # polls made while paused
        self._last_committed: dict[tuple[str, int], int] = {}

    # --- transport hooks --------------------------------------------------------
    @abstractmethod
    def partition_count(self, topic: str) -> int:
        """Partitions of a (physical) topic."""

    @abstractmethod
    def _describe_topics(self, topics: list[str]) -> dict[str, int]:
        """Partition counts of those of ``topics`` that exist."""

    @abstractmethod
    def _create_internal_topics(self, topics: list[tuple[str, int, dict[str, str]]]) -> None:
        """Creates the missing ones of ``(name, partitions, config)`` and checks
        the partition counts of those that exist."""

    @abstractmethod
    def _missing_topics_error(self, missing: list[str]) -> TopologyError:
        """The error for input or output topics the app does not create."""

    @abstractmethod
    def _poll_batches(self, timeout: float) -> list[InputRecords]:
        """Records fetched from the task inputs, one batch per partition with data."""

    @abstractmethod
    def _has_unfetched(self, topic: str, partition: int) -> bool | None:
        """Whether an input partition has records not fetched yet (None: not known yet)."""

    @abstractmethod
    def _position(self, topic: str, partition: int) -> int:
        """The next offset to fetch of an input partition."""

    @abstractmethod
    def _end_offset(self, topic: str, partition: int) -> int:
        """A partition's end offset now."""

    @abstractmethod
    def _owned_inputs(self) -> list[tuple[str, int]]:
        """The input partitions this thread reads now."""

    @abstractmethod
    def _flush_output(self) -> None:
        """Makes what the tasks sent durable and readable (a commit's first step)."""

    @abstractmethod
    def _commit_offsets(self, offsets: dict[tuple[str, int], tuple[int, str]]) -> None:
        """Commits the processed input offsets with their partition times as
        metadata (under exactly-once: with the output, in one transaction)."""

    @abstractmethod
    def _changelog_end(self, topic: str, partition: int) -> int:
        """The end offset of a changelog partition once the output is durable."""

    @abstractmethod
    def _new_global_stores(self, subtopology: Subtopology) -> GlobalStores:
        """The global stores, bootstrapped from their topics."""

    @abstractmethod
    def _close_clients(self) -> None:
        """Releases the transport's clients."""

    def _ready_to_end(self) -> bool:
        """Whether a bounded run may end now (not while a rebalance is going on)."""
        return True

    def _lag_report(self, end: EndTargets) -> str:
        """What a bounded run that timed out was waiting for."""
        behind = []
        for topic, partition in sorted(self._owned_inputs()):
            target = self._target(end, topic, partition)
            position = self._position(topic, partition)
            if target is not None and position < target:
                behind.append(f"{topic}-{partition} at {position} of {target}")
        queued = [t.task_id for t in self.tasks.values() if t.has_queued()]
        return (
            f"behind: {', '.join(behind) or 'none'}; tasks with queued records: {queued}; "
            f"assigned: {sorted(self.tasks)}"
        )

    # --- topics ---------------------------------------------------------------
    def topic_name(self, topic: str) -> str:
        return self.builder.physical_topic(self.app_id, topic)

    def _input_topics(self) -> set[str]:
        return {self.topic_name(t) for sub in self.subtopologies for t in sub.source_topics}

    def _reset_policies(
        self, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], AutoOffsetReset]:
        """The offset reset policy of each input partition that has no
        committed offset: its source's, else ``auto.offset.reset``; the
        app's own repartition topics always from their start, as Kafka's.
        Kafka's error, naming every topic, when any of them has none."""
        default = AutoOffsetReset.of(self.config["auto.offset.reset"])
        policies = {
            (topic, partition): (
                AutoOffsetReset.earliest()
                if topic in self._repartition_inputs
                else self._source_resets.get(topic, default)
            )
            for topic, partition in partitions
        }
        refused = sorted({t for (t, _), policy in policies.items() if policy.strategy == NONE})
        if refused:
            raise ConfigError(
                f"no committed offset for input topic(s) {', '.join(refused)} and no offset "
                "reset policy: set auto.offset.reset, or offset_reset on their source"
            )
        return policies

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

    def _prepare_topics(self) -> None:
        """Checks the external topics exist, sizes the internal ones (and
        checks co-partitioning) before creating them."""
        external = self._external_topics()
        found = self._describe_topics(external)
        missing = [t for t in external if t not in found]
        if missing:
            raise self._missing_topics_error(missing)
        counts = self._size_topics(found)
        self._check_co_partitioning(counts)
        self._create_internal_topics(self._internal_topics(counts, self.repartition_config))
        self._counts = counts

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
                    config = store_kind(store_def).changelog_config(
                        store_def, self.config["windowstore.changelog.additional.retention.ms"]
                    )
                    out.append((self.changelog_topic(store), tasks, config))
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
                    f"{joins[0]!r} (a join or cogroup) needs co-partitioned inputs, but the topics "
                    f"have different partition counts: {listed}; repartition one side"
                )

    @staticmethod
    def _task_count(sub: Subtopology, counts: dict[str, int]) -> int:
        return max(counts[t] for t in sub.source_topics)

    # --- tasks ------------------------------------------------------------------
    def _init_tasks(self, collector: RecordCollector, changelog_range: ChangelogRange) -> None:
        """Sets the thread's collector and its task factory (once the transport
        has its producer)."""
        self.collector = collector
        self.factory = TaskFactory(
            self.builder,
            self.config,
            collector,
            self.topic_name,
            self.state_dir,
            cache=self.cache,
            changelog_range=changelog_range,
        )

    def _open_global_stores(self) -> None:
        """The global stores, bootstrapped before any task is made."""
        sub = self.builder.global_subtopology()
        if self.global_stores is None and sub is not None:
            self.global_stores = self._new_global_stores(sub)
        if self.global_stores is not None:
            self.global_task = self.global_stores.task
            if self.global_task is not None:
                self.factory.global_stores = self.global_task.stores

    def poll_global(self) -> None:
        """Applies what arrived on the global topics since the last call."""
        if self.global_stores is not None:
            self.global_stores.poll()

    def _add_task(self, task: StreamTask, sub: Subtopology) -> None:
        self.tasks[task.task_id] = task
        self._uncommitted = True
        self.sensors.task_sensors(task)
        for name in self.task_inputs(sub, task.partition):
            self._task_by_input[name] = task

    def _remove_task(self, task: StreamTask) -> None:
        self.tasks.pop(task.task_id, None)
        for key in [k for k, t in self._task_by_input.items() if t is task]:
            del self._task_by_input[key]
        self._idle_since.pop(task.task_id, None)
        self.sensors.drop_task(task.task_id)

    def _close_task(self, task: StreamTask, clean: bool) -> None:
        """Closes a task, keeping its metrics; ``clean=False`` (a failure, a
        lost partition) drops what it did not commit and only logs an error
        in closing it."""
        for name, value in _task_totals(task).items():
            self._closed_totals[name] = self._closed_totals.get(name, 0) + value
        self._remove_task(task)
        try:
            task.close()
        except Exception:
            if clean:
                raise
            log.warning("closing task %s dirty failed", task.task_id, exc_info=True)

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
    @abstractmethod
    def join_group(self) -> None:
        """Joins the application's group, once, before the first poll. The
        instance calls it for all its stream threads back to back, so that they
        join together."""

    def _pause_inputs(self, paused: bool) -> bool:
        """Transport hook: stops (or resumes) fetching the owned inputs while
        the thread keeps polling (a group member must); False when the
        transport does not poll at all while paused."""
        return False

    def poll_once(self, timeout: float) -> int:
        """Polls once and processes what came; returns the number of records."""
        sensors = self.sensors
        self.poll_global()
        if self.paused != self._inputs_paused:
            self._inputs_paused = self.paused
            self._polls_while_paused = self._pause_inputs(self.paused)
        if self.paused:
            self.paused_polls += 1
            if not self._polls_while_paused:
                time.sleep(min(timeout, PAUSED_WAIT_S))
                return 0
        started = time.perf_counter()
        batches = self._poll_batches(timeout)
        polled = time.perf_counter()
        sensors.poll.record((polled - started) * 1000)
        if batches:
            self._dirty = self._uncommitted = True
            sensors.poll_records.record(sum(map(len, batches)))
        for records in batches:
            task = self._task_by_input.get((records.topic, records.partition))
            if task is not None:  # else: revoked meanwhile; its new owner reads it
                task.add_records(records)
        if self.paused:  # what was fetched before the pause waits for resume()
            return 0
        count = 0
        for task in list(self.tasks.values()):
            if task.all_inputs_queued():
                self._idle_since.pop(task.task_id, None)  # the idle wait is over
            if sensors.debug:
                count += self._process_timed(task)
            else:
                count += task.process_ready(functools.partial(self._must_wait, task))
        processed = time.perf_counter()
        if count:
            sensors.process.record(count)
            spent = (processed - polled) * 1000
            # Per record on average, and the time spent (process-ratio).
            sensors.process_latency.record(spent, count, peak=spent / count)
        for task in list(self.tasks.values()):
            if task.maybe_punctuate_wall_clock():
                self._uncommitted = True
                sensors.punctuate.record((time.perf_counter() - processed) * 1000)
        sensors.sync(self._metered_tasks())
        if any(task.commit_requested for task in self.tasks.values()):
            self.commit()
        return count

    def _process_timed(self, task: StreamTask) -> int:
        """``process_ready`` with the task's process latency (DEBUG)."""
        started = time.perf_counter()
        count = task.process_ready(functools.partial(self._must_wait, task))
        latency = self.sensors.task_sensors(task).process_latency
        if count and latency is not None:
            spent = (time.perf_counter() - started) * 1000
            latency.record(spent, count, peak=spent / count)
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

    # --- commit -------------------------------------------------------------------
    def commit(self) -> None:
        """Kafka's commit: flush the tasks (caches write out, nodes flush,
        changelog records are sent) ─► make the output and changelogs durable
        ─► commit the stores with the changelog offsets they reflect and the
        input offsets with their partition times (under exactly-once the
        offsets go with the output in one transaction, and the stores commit
        after it)."""
        started = time.perf_counter()
        for task in self.tasks.values():
            task.flush()
        # Only what was processed: queued records are fetched again after a
        # restart. The partition time travels as offset metadata.
        offsets = {
            key: committable
            for task in self.tasks.values()
            for key, committable in task.committable_offsets().items()
        }
        self._flush_output()
        if not self.transactional:
            self._commit_stores()
        self._commit_offsets(offsets)
        self._last_committed.update((key, offset) for key, (offset, _) in offsets.items())
        if self.transactional:
            self._commit_stores()
        self._dirty = self._uncommitted = False
        self._last_commit = time.monotonic()
        self.sensors.commit.record((time.perf_counter() - started) * 1000)
        # A commit is rare enough to sample every task's counters: what a
        # bounded run ends with is then in the rates and buffer sizes.
        self.sensors.sync(self._metered_tasks(), force=True)

    def _commit_stores(self) -> None:
        for task in self.tasks.values():
            if task.changelogs or task.state.stores:
                task.commit_state(
                    {
                        topic: self._changelog_end(topic, task.partition)
                        for topic in task.changelogs.values()
                    }
                )
            task.commit_requested = False

    # --- bounded runs -------------------------------------------------------
    def _fed_by_the_app(self) -> set[str]:
        """Input topics this app also writes (repartition topics, and user
        topics used with ``through``): consumed to their current end."""
        sources = {t for sub in self.subtopologies for t in sub.source_topics}
        sinks = {t for sub in self.subtopologies for t in sub.sink_topics}
        return {self.topic_name(t) for t in sources & sinks}

    def end_targets(self) -> EndTargets:
        """The external inputs' end offsets as of now, and the topics the app
        feeds itself."""
        fed = self._fed_by_the_app()
        targets = {
            (name, p): self._end_offset(name, p)
            for name in self._input_topics() - fed
            for p in range(self.partition_count(name))
        }
        return EndTargets(targets, fed)

    def _target(self, end: EndTargets, topic: str, partition: int) -> int | None:
        target = end.targets.get((topic, partition))
        if target is None and topic in end.fed:
            return self._end_offset(topic, partition)
        return target

    def _caught_up(self, end: EndTargets) -> bool:
        """Whether every input partition this thread reads is consumed up to
        its target and no task has records queued."""
        if any(task.has_queued() for task in self.tasks.values()):
            return False
        for topic, partition in self._owned_inputs():
            target = self._target(end, topic, partition)
            if target is not None and self._position(topic, partition) < target:
                return False
        return True

    def step_until_end(self, end: EndTargets, deadline: float | None) -> bool:
        """One round of a bounded run: True when nothing was processed and
        this thread's inputs are at their targets."""
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(
                "run_until_end did not reach the end offsets in time: " + self._lag_report(end)
            )
        if self.poll_once(self._bounded_poll_timeout(end)) > 0:
            self.maybe_commit()
            return False
        if not self._ready_to_end():
            return False
        # Output may feed repartition topics: make it readable (under
        # exactly-once, only a commit does). Once what is readable is
        # processed, a commit flushes the record caches, whose output may
        # feed them too; commits in between would only add fsyncs.
        if self._dirty and self.transactional:
            self.commit()
        else:
            self._flush_output()
            if self._dirty and self._caught_up(end):
                self.commit()
        return self._caught_up(end)

    def _bounded_poll_timeout(self, end: EndTargets) -> float:
        """How long a bounded run's poll waits for records to come."""
        return 0.05

    def run_until_end(self, deadline: float | None) -> None:
        """Processes up to the input end offsets as of the call, then commits."""
        end = self.end_targets()
        while not self.step_until_end(end, deadline):
            continue
        if self._commit_needed():
            self.commit()

    # --- metrics ------------------------------------------------------------------
    def records_lag(self, topic: str, partition: int) -> int | None:
        """An input partition's end offset minus this thread's position
        (None: not known)."""
        return max(0, self._end_offset(topic, partition) - self._position(topic, partition))

    def _metered_tasks(self) -> list[StreamTask]:
        """The tasks whose counters the thread's metrics follow."""
        return list(self.tasks.values())

    def client_ids(self) -> tuple[str, str, frozenset[str]]:
        """The ids of this thread's consumer, restore consumer and producers
        (a transport without clients has none)."""
        return "", "", frozenset()

    def standby_tasks(self) -> list[StreamTask]:
        return []

    def end_offset(self, topic: str, partition: int) -> int:
        """An input partition's end offset, as the transport last saw it."""
        return self._end_offset(topic, partition)

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """The input offsets committed last, by partition."""
        return dict(self._last_committed)

    def store_partition_lags(self) -> list[tuple[str, int, int, int]]:
        """(store, partition, position, changelog end) of every logged store
        this thread has: an active task's stores are restored before it
        runs, so they are at their changelog's end."""
        lags = []
        for task in list(self.tasks.values()):
            for store, topic in task.changelogs.items():
                end = self._changelog_end(topic, task.partition)
                lags.append((store, task.partition, end, end))
        return lags

    def metric_list(self) -> list[Metric]:
        """Kafka Streams' metrics of this thread, its tasks and its consumer."""
        sensors, thread = self.sensors, self.thread_name
        out = sensors.thread_metrics(thread)
        for task in list(self.tasks.values()):
            out += sensors.task_metrics(thread, task, self.cache)
        out += lag_metrics(f"{thread}-consumer", self._owned_inputs(), self.records_lag)
        return out

    # --- the end ------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        totals = {
            "records-processed": 0,
            "dropped-records": 0,
            "skipped-records": 0,
            "restored-records": 0,
        }
        for name, value in self._closed_totals.items():
            totals[name] += value
        for task in self.tasks.values():
            for name, value in _task_totals(task).items():
                totals[name] += value
        return totals

    def _may_commit_on_close(self) -> bool:
        return True

    def _commit_needed(self) -> bool:
        """Whether a commit now may write anything the last one did not
        (a transport whose commits can leave work pending says always)."""
        return True

    def close(self) -> None:
        """Commits and releases everything."""
        try:
            if self._may_commit_on_close() and self._commit_needed():
                self.commit()
        finally:
            self.abort(committed=True)

    def abort(self, committed: bool = False) -> None:
        """Releases tasks and clients; what was not committed is redone from
        the last commit on restart."""
        for task in list(self.tasks.values()):
            self._close_task(task, clean=False)
        self._close_global_stores()
        self.global_task = None
        self._close_clients()

    def _close_global_stores(self) -> None:
        if self.global_stores is not None:
            self.global_stores.close()
            self.global_stores = None


def _task_totals(task: StreamTask) -> dict[str, int]:
    return {
        "records-processed": task.metrics.records_processed,
        "dropped-records": task.metrics.dropped_records,
        "skipped-records": task.metrics.skipped_records,
        "restored-records": task.state.restored_records,
    }


class ShutdownSignal(Protocol):
    """Application-wide shutdown across the instances of an application."""

    def requested(self) -> bool:
        """Whether an instance asked the application to shut down."""

    def request(self, reason: str) -> None:
        """Asks every instance to shut down."""

    def close(self) -> None: ...


class Transport(ABC):
    """What ``KafkaStreams`` asks of a transport: the runtime of each stream
    thread, and what the threads of one instance share."""

    # Told as the runtimes restore local stores, and as standbys update
    # theirs (set before they are made).
    restore_listener: StateRestoreListener | None = None
    standby_listener: StandbyUpdateListener | None = None

    @abstractmethod
    def stream_threads(self, config: StreamsConfig) -> int:
        """How many stream threads the instance runs."""

    def why_no_more_threads(self, config: StreamsConfig, builder: InternalTopologyBuilder) -> str:
        """Why ``KafkaStreams.add_stream_thread`` cannot add one here ('' if it can)."""
        return "this transport runs one stream thread"

    @abstractmethod
    def runtime(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        index: int,
        on_rebalance: Callable[[bool], None],
    ) -> Runtime:
        """The runtime of stream thread ``index`` (from 1). It calls
        ``on_rebalance(True)`` when an assignment starts and
        ``on_rebalance(False)`` once its tasks are open (the first one too)."""

    def application_shutdown(self, config: StreamsConfig) -> ShutdownSignal | None:
        """The signal across the application's instances (None: this
        instance is the whole application)."""
        return None

    def shared_failure(self) -> BaseException | None:
        """A failure of what the stream threads share (Kafka's global stream
        thread): replacing a stream thread cannot mend it."""
        return None

    def instance_directory(
        self, config: StreamsConfig, runtimes: Callable[[], list[Runtime]]
    ) -> InstanceDirectory:
        """How this instance learns every instance's ``application.server``
        and tasks (interactive queries); by default it is the whole
        application."""
        return LocalDirectory(
            config.application_server,
            lambda: [task for runtime in runtimes() for task in runtime.tasks],
        )

    def close(self) -> None:  # noqa: B027 - most transports share nothing
        """Releases what the stream threads share."""
