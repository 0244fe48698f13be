"""The run loop over Apache Kafka: one stream thread, a member of the
consumer group ``application.id``.

Tasks follow the group's assignment. Each sub-topology has an anchor topic
(its source topic with the most partitions, the one that sets its task count);
the main consumer subscribes to the anchor topics with the cooperative-sticky
assignor, so partition p of an anchor assigned to this member is task p of its
sub-topology. The task's other source partitions (partition p of the
sub-topology's other topics, e.g. a join's other side) are read by a second,
manually assigned consumer, so a task's inputs always stay together (Kafka's
own assignor does that in the JVM; librdkafka's cannot be replaced). Offsets
of both are committed for the group through the main consumer.

on assign: committed offsets (with the partition times in their metadata) ─►
open the tasks' stores as of their last commit ─► restore the changelog tails,
batched across tasks ─► assign the inputs at their committed offsets.
on revoke: commit everything, close the revoked tasks.
commit (at_least_once): flush caches and nodes ─► commit the stores with the
changelog offsets acknowledged so far ─► close the producer's epoch, keeping
the input offsets with it ─► commit them once every record sent in it and
before is acknowledged (checked each loop; the thread does not wait). On a
revoke or close the commit is synchronous: flush the producer, then commit.
(Kafka Streams flushes the producer at every commit; waiting for the same
acknowledgements without stopping keeps the guarantee, docs/kafka.md.)
commit (exactly_once_v2): flush caches and nodes ─► flush the producer ─►
send the input offsets to the transaction ─► commit it ─► commit the stores.
A failed transaction closes every task dirty (stores reopen as of their last
commit, uncommitted writes dropped) and reopens them from the changelogs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, ClassVar

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition

from strom.config import EXACTLY_ONCE_V2
from strom.errors import ConfigError, StromError, TaskError, TopologyError
from strom.kafka.clients import (
    ATTEMPT_TIMEOUT_S,
    REBALANCED,
    REQUEST_TIMEOUT_S,
    DeliveryFailures,
    KafkaClientError,
    KafkaProducer,
    admin_client,
    consumer_config,
    main_consumer_client_id,
    producer_config,
    retrying,
)
from strom.kafka.consumer import Consumer
from strom.kafka.global_thread import GlobalStreamThread
from strom.kafka.instances import GroupDirectory
from strom.kafka.shutdown import ApplicationShutdown
from strom.kafka.standby import StandbyTasks
from strom.kafka.topics import Topics
from strom.offset_reset import EARLIEST, AutoOffsetReset
from strom.processor.api import SuspendReason
from strom.processor.internals.runtime import REPARTITION_CONFIG, EndTargets, Runtime, Transport
from strom.processor.internals.task import RecordCollector, StreamTask

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.metrics import Metric
    from strom.processor.internals.global_state import GlobalStores
    from strom.processor.internals.task import InputRecords
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, Subtopology

log = logging.getLogger("strom.kafka")

# Input offsets to commit, with the partition time as their metadata.
Committable = dict[tuple[str, int], tuple[int, str]]

RESTORE_BATCH = 10_000
# The longest a poll waits while committed offsets wait for acknowledgements.
UNREPORTED_POLL_S = 0.005


class TaskMigratedError(StromError):
    """The producer was fenced or a transaction failed: tasks must be reopened."""


class KafkaRuntime(Runtime):
    """One stream thread on Kafka: a member of the group ``application.id``."""

    repartition_config: ClassVar[dict[str, str]] = REPARTITION_CONFIG

    def __init__(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        *,
        process_id: str | None = None,
        thread_index: int = 1,
        on_rebalance: Callable[[bool], None] | None = None,
        global_thread: GlobalStreamThread | None = None,
    ) -> None:
        super().__init__(builder, config)
        if config["num.standby.replicas"] and config["num.stream.threads"] > 1:
            # A task moving to another thread of this instance would open the
            # state its standby on this thread holds open.
            raise ConfigError(
                "num.standby.replicas needs num.stream.threads = 1 for now "
                f"(got {config['num.stream.threads']} threads)"
            )
        self.standbys: StandbyTasks | None = None
        if (
            builder.global_subtopology() is not None
            and config["num.stream.threads"] > 1
            and global_thread is None
        ):
            raise ConfigError(
                "with num.stream.threads > 1 the stream threads share one GlobalStreamThread: "
                "pass global_thread (KafkaStreams does)"
            )
        # The instance's global stores: shared (several threads) or our own.
        self.global_stores = global_thread
        self._owns_global = False
        self.eos = config["processing.guarantee"] == EXACTLY_ONCE_V2
        self.transactional = self.eos
        self.process_id = process_id or str(uuid.uuid4())
        self.thread_index = thread_index
        self.thread_name = f"{config.client_id_prefix(self.process_id)}-StreamThread-{thread_index}"
        self._on_rebalance = on_rebalance
        self.admin = admin_client(config)
        self.topics = Topics(self.admin, config["bootstrap.servers"])
        self._prepare_topics()
        self.topics.check_access(
            self._input_topics() | set(builder.global_topics), self._output_topics()
        )
        transactional_id = f"{self.app_id}-{self.process_id}-{thread_index}" if self.eos else None
        # The production exception handler's state: it outlives a replaced producer.
        self.delivery_failures = DeliveryFailures(config)
        self._max_message_bytes = self.topics.smallest_max_message_bytes(self._output_topics())
        self.producer = KafkaProducer(
            producer_config(
                config, f"{self.thread_name}-producer", transactional_id, self._max_message_bytes
            ),
            self.partition_count,
            transactional=self.eos,
            failures=self.delivery_failures,
        )
        self._init_tasks(RecordCollector(self.producer, self.partition_count), self._watermarks)
        # Anchor topic (physical) -> its sub-topology; other inputs -> side consumer.
        self._anchors: dict[str, Subtopology] = {}
        self._side_topics: set[str] = set()
        for sub in self.subtopologies:
            names = sorted(self.topic_name(t) for t in sub.source_topics)
            anchor = max(names, key=lambda n: (self.partition_count(n), -names.index(n)))
            self._anchors[anchor] = sub
            self._side_topics.update(n for n in names if n != anchor)
        self.consumer = Consumer(
            consumer_config(
                config,
                main_consumer_client_id(self.thread_name, config.application_server),
                group=True,
            ),
        )
        self.side: Consumer | None = None
        if self._side_topics:
            self.side = Consumer(
                consumer_config(config, f"{self.thread_name}-side-consumer", group=False)
                | {"enable.partition.eof": False},
            )
        self.restore_consumer = Consumer(
            consumer_config(
                config,
                f"{self.thread_name}-restore-consumer",
                group=False,
                prefix="restore.consumer.",
            ),
            headers=False,
        )
        # Next offset to read per input partition we own (our own bookkeeping:
        # librdkafka reports no position before the first record).
        self._positions: dict[tuple[str, int], int] = {}
        self._committed: dict[tuple[str, int], int] = {}
        # at_least_once: input offsets per closed producer epoch, committed
        # once the epoch's records are all reported (see maybe_commit).
        self._unreported: list[tuple[int, Committable]] = []
        self._pipelined = False
        # Changelog partitions' end offsets as of their restore.
        self._changelog_ends: dict[tuple[str, int], int] = {}
        self._purged: dict[tuple[str, int], int] = {}
        self._purge_failures: set[tuple[str, str]] = set()
        self._last_purge = time.monotonic()
        self.assigned_once = False
        self.rebalancing = False
        self._failure: BaseException | None = None
        try:
            self._open_global_stores()
        except BaseException:
            self.abort()
            raise
        replicas = config["num.standby.replicas"]
        if replicas:
            self.standbys = StandbyTasks(self, replicas)
        self._subscribed = False  # see join_group

    # --- what standby tasks need ----------------------------------------------
    def anchor_topic(self, sub: Subtopology) -> str:
        """The input topic whose partitions assign ``sub``'s tasks."""
        return next(topic for topic, anchored in self._anchors.items() if anchored is sub)

    def anchor_subtopology(self, topic: str) -> Subtopology | None:
        """The sub-topology whose tasks a partition of ``topic`` assigns."""
        return self._anchors.get(topic)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self._watermarks(topic, partition)

    def standby_task(self, sub: Subtopology, partition: int) -> StreamTask:
        """A task with its stores open, to be kept current, never processed."""
        return self.factory.task(sub, partition)

    def local_task_ids(self) -> set[str]:
        return set(self.tasks)

    # --- topics ---------------------------------------------------------------
    def partition_count(self, topic: str) -> int:
        return self.topics.partition_count(topic)

    def _describe_topics(self, topics: list[str]) -> dict[str, int]:
        return self.topics.describe(topics)

    def _missing_topics_error(self, missing: list[str]) -> TopologyError:
        return TopologyError(
            f"topic(s) {', '.join(missing)} do not exist on the Kafka cluster at "
            f"{self.config['bootstrap.servers']}; create them first"
        )

    def _create_internal_topics(self, topics: list[tuple[str, int, dict[str, str]]]) -> None:
        # topic.* settings apply to every internal topic, under the ones its kind needs.
        extra = self.config.topic_config()
        self.topics.ensure_internal(
            [(name, partitions, extra | config) for name, partitions, config in topics],
            self.config["replication.factor"],
        )

    def _output_topics(self) -> list[str]:
        """Every topic this thread's producer writes (physical names)."""
        sinks = {self.topic_name(t) for sub in self.subtopologies for t in sub.sink_topics}
        changelogs = {
            self.changelog_topic(store)
            for sub in self.subtopologies
            for store in sub.stores
            if self.builder.stores[store].logged
        }
        dead_letters = self.config["errors.dead.letter.queue.topic.name"]
        return sorted(sinks | changelogs | ({dead_letters} if dead_letters else set()))

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        low, high = retrying(
            lambda: self.restore_consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=ATTEMPT_TIMEOUT_S
            ),
            f"reading the offsets of {topic}-{partition}",
            lambda: self.restore_consumer.refresh_metadata(topic, ATTEMPT_TIMEOUT_S),
        )
        return low, high

    # --- global stores --------------------------------------------------------
    def _new_global_stores(self, subtopology: Subtopology) -> GlobalStores:
        """Our own global stores (one stream thread), polled in our loop;
        several stream threads share the instance's GlobalStreamThread."""
        self._owns_global = True
        return GlobalStreamThread(
            self.builder,
            self.config,
            self.partition_count,
            self.state_dir,
            f"{self.thread_name}-global-consumer",
            subtopology,
        )

    def _close_global_stores(self) -> None:
        if self._owns_global:
            super()._close_global_stores()
        self.global_stores = None

    # --- rebalancing ----------------------------------------------------------
    def _guard(self, fn: Callable[[], None]) -> None:
        """Rebalance callbacks run inside ``consume``; an error there is kept
        and raised by the loop (librdkafka would swallow it)."""
        if self._failure is not None:
            return
        try:
            fn()
        except BaseException as exc:
            self._failure = exc

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._guard(lambda: self._assign(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._guard(lambda: self._revoke(partitions, lost=False))

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._guard(lambda: self._revoke(partitions, lost=True))

    def _set_rebalancing(self, value: bool) -> None:
        self.rebalancing = value
        if self._on_rebalance is not None:
            self._on_rebalance(value)

    def _assign(self, partitions: list[TopicPartition]) -> None:
        self._set_rebalancing(True)
        try:
            created, starts = self.open_tasks(partitions)
        except (KafkaException, KafkaClientError) as exc:
            # Tasks that cannot open (restore) are no failed transaction for
            # _recover to redo: it would reopen only the others and leave
            # these partitions without a task. The thread stops (as in Kafka).
            raise TaskError(f"{self.thread_name}: opening tasks failed: {exc}") from exc
        every = list(starts)
        main = [TopicPartition(t, p, starts[(t, p)]) for t, p in every if t in self._anchors]
        side = [TopicPartition(t, p, starts[(t, p)]) for t, p in every if t not in self._anchors]
        self.consumer.incremental_assign(main)
        if side:
            assert self.side is not None
            self.side.incremental_assign(side)
        if self._inputs_paused:  # assigned while paused: they wait too
            self.consumer.pause(main)
            if side and self.side is not None:
                self.side.pause(side)
        for key in every:
            self._positions[key] = starts[key]
        self.assigned_once = True
        self._set_rebalancing(False)
        log.info("%s: assigned tasks %s", self.thread_name, sorted(t.task_id for t in created))

    def open_tasks(
        self, partitions: list[TopicPartition]
    ) -> tuple[list[StreamTask], dict[tuple[str, int], int]]:
        """Opens the tasks of ``partitions`` (of anchor topics) as an
        assignment does, their stores restored from the changelogs, and
        returns them with where each of their inputs starts. ``_assign`` then
        consumes them; ``strom.spark``'s bootstrap only commits them."""
        specs = [(self._anchors[tp.topic], tp.partition) for tp in partitions]
        every = [key for spec in specs for key in self.task_inputs(*spec)]
        if self.standbys is not None:
            for sub, partition in specs:
                self.standbys.release(f"{sub.id}_{partition}", SuspendReason.PROMOTED)
        starts, times = self._start_offsets(every)
        created = []
        try:
            for sub, partition in specs:
                task = self.factory.task(sub, partition)
                created.append(task)
                task.restore_partition_times(times)
                # Read-only stores restore from their source up to where it
                # is processed from (committed, or the reset's start).
                task.state.limit_source_restores(starts)
                self._add_task(task, sub)
            self._restore(created)
        except BaseException:
            for task in created:
                self._close_task(task, clean=False)
            raise
        return created, {key: starts[key] for key in every}

    def _start_offsets(
        self, keys: list[tuple[str, int]]
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], str]]:
        """Where each input partition starts: the committed offset, else the
        source's (or the app's) offset reset policy; and the committed
        partition times. Under EOS this waits for pending transactional
        offset commits of the previous owner to resolve."""
        if not keys:
            return {}, {}
        committed = retrying(
            lambda: self.consumer.committed(
                [TopicPartition(t, p) for t, p in keys], timeout=ATTEMPT_TIMEOUT_S
            ),
            "reading the committed offsets",
        )
        starts: dict[tuple[str, int], int] = {}
        times: dict[tuple[str, int], str] = {}
        fresh = []
        for tp in committed:
            key = (tp.topic, tp.partition)
            if tp.error is not None:
                raise KafkaClientError(f"cannot fetch the committed offset of {key}: {tp.error}")
            if tp.offset >= 0:
                starts[key] = tp.offset
                times[key] = tp.metadata or ""
            else:
                fresh.append(key)
        starts |= self._reset_offsets(self._reset_policies(fresh))
        self._committed.update(starts)
        return starts, times

    def _reset_offsets(
        self, policies: dict[tuple[str, int], AutoOffsetReset]
    ) -> dict[tuple[str, int], int]:
        """Where each partition starts by its policy: the log start, the end,
        or the first record of the policy's duration (the end when none)."""
        now = int(time.time() * 1000)
        by_time = {
            key: policy.start_timestamp(now)
            for key, policy in policies.items()
            if policy.duration_ms is not None
        }
        found = (
            retrying(
                lambda: self.consumer.offsets_for_times(by_time, ATTEMPT_TIMEOUT_S),
                "looking up offsets by timestamp",
            )
            if by_time
            else {}
        )
        starts = {}
        for key, policy in policies.items():
            low, high = self._watermarks(*key)
            at = found.get(key, -1)
            starts[key] = low if policy.strategy == EARLIEST else at if at >= 0 else high
        return starts

    def _restore(self, tasks: list[StreamTask]) -> None:
        """Replays the changelogs of ``tasks``' stores from the offsets their
        stores committed (or the start) to their current end (a read-only
        store's source topic: to the task's start on it), in one pass of the
        restore consumer over all of them."""
        plan: dict[tuple[str, int], tuple[StreamTask, str]] = {}
        assign = []
        for task in tasks:
            for store, (topic, start) in task.state.restore_positions().items():
                key = (topic, task.partition)
                low, high = self._watermarks(topic, task.partition)
                high = task.state.restore_end(store, high)
                offset = low if start is None else max(start, low)
                self._changelog_ends[key] = high
                self.producer.forget(*key)
                if offset < high:
                    task.state.restore_remaining += high - offset
                    plan[key] = (task, store)
                    assign.append(TopicPartition(topic, task.partition, offset))
                    if self.restore_listener is not None:
                        self.restore_listener.on_restore_start(key, store, offset, high)
        if not assign:
            return
        listener = self.restore_listener
        totals = dict.fromkeys(plan, 0)
        started = time.monotonic()
        consumer = self.restore_consumer
        consumer.assign(assign)
        pending = set(plan)
        started_keys: set[tuple[str, int]] = set()
        restored = 0
        try:
            while pending:
                batches = consumer.poll_batches(RESTORE_BATCH, 0.1)
                done = pending & set(consumer.eofs)
                for batch in batches:
                    key = (batch.topic, batch.partition)
                    task, store = plan[key]
                    # A partition's first batch tells the store what is to come.
                    remaining = 0
                    if key not in started_keys:
                        started_keys.add(key)
                        remaining = max(0, self._changelog_ends[key] - batch.next_offset)
                    task.state.restore_batch(store, batch, remaining)
                    restored += len(batch)
                    totals[key] += len(batch)
                    if listener is not None and len(batch):
                        listener.on_batch_restored(key, store, batch.next_offset - 1, len(batch))
                    if batch.next_offset >= self._changelog_ends[key]:
                        done.add(key)
                for key in sorted(done & pending):
                    pending.discard(key)
                    if listener is not None:
                        listener.on_restore_end(key, plan[key][1], totals[key])
                if time.monotonic() - started > 10 * REQUEST_TIMEOUT_S:
                    raise KafkaClientError(f"restoring {sorted(pending)} did not finish in time")
        finally:
            consumer.unassign()
        log.info(
            "%s: restored %d record(s) of %d changelog partition(s) in %.1fs",
            self.thread_name,
            restored,
            len(plan),
            time.monotonic() - started,
        )

    def _revoke(self, partitions: list[TopicPartition], lost: bool) -> None:
        revoked = [
            t
            for tp in partitions
            if (t := self._task_by_input.get((tp.topic, tp.partition))) is not None
        ]
        if not revoked:
            return
        self._set_rebalancing(True)
        if not lost:
            self.commit()
        elif self.eos:
            self._abort_transaction()
        else:  # lost: their offsets are no longer ours to commit
            gone = {(tp.topic, tp.partition) for tp in partitions}
            for _, offsets in self._unreported:
                for key in gone.intersection(offsets):
                    del offsets[key]
        side = []
        for task in revoked:
            for key in self.task_inputs(*self._spec(task)):
                self._positions.pop(key, None)
                if key[0] not in self._anchors:
                    side.append(TopicPartition(*key))
            # Lost partitions may already be someone else's: drop what is not committed.
            self._close_task(task, clean=not lost)
        if side and self.side is not None:
            self.side.incremental_unassign(side)
        log.info(
            "%s: %s tasks %s",
            self.thread_name,
            "lost" if lost else "revoked",
            sorted(t.task_id for t in revoked),
        )

    def _spec(self, task: StreamTask) -> tuple[Subtopology, int]:
        sub_id = int(task.task_id.split("_")[0])
        sub = next(s for s in self.subtopologies if s.id == sub_id)
        return sub, task.partition

    # --- the loop -------------------------------------------------------------
    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    def join_group(self) -> None:
        # The instance subscribes all its threads' consumers back to back, so
        # their joins reach the coordinator within one rebalance: a thread that
        # joined later would get work only after the others' next heartbeats and a
        # second (cooperative) rebalance, seconds later, while the first did all.
        if not self._subscribed:
            self.consumer.subscribe(
                sorted(self._anchors),
                on_assign=self._on_assign,
                on_revoke=self._on_revoke,
                on_lost=self._on_lost,
            )
            self._subscribed = True

    def _poll_batches(self, timeout: float) -> list[InputRecords]:
        self.join_group()  # a replaced thread's runtime joins at its first poll
        max_records = self.config["poll.max.records"]
        batches = self.consumer.poll_batches(max_records, timeout)
        self._raise_failure()
        self._take_commit_results()
        if self.side is not None:
            batches += self.side.poll_batches(max_records, 0)
        positions = self._positions
        for batch in batches:
            key = (batch.topic, batch.partition)
            if key in positions:
                positions[key] = batch.next_offset
        return list(batches)

    def _consumer_for(self, topic: str) -> Consumer:
        if topic in self._anchors or self.side is None:
            return self.consumer
        return self.side

    def _position(self, topic: str, partition: int) -> int:
        """The next offset to read (past transaction markers, which librdkafka skips)."""
        own = self._positions.get((topic, partition), -1)
        return max(own, self._consumer_for(topic).position(TopicPartition(topic, partition)))

    def _has_unfetched(self, topic: str, partition: int) -> bool | None:
        _, high = self._consumer_for(topic).get_watermark_offsets(
            TopicPartition(topic, partition), cached=True
        )
        if high < 0:
            return None
        return self._position(topic, partition) < high

    def _pause_inputs(self, paused: bool) -> bool:
        """Pauses (resumes) fetching every assigned input partition; the
        consumer goes on polling, so the group keeps this member."""
        for consumer, partitions in (
            (self.consumer, [tp for tp in self._positions if tp[0] in self._anchors]),
            (self.side, [tp for tp in self._positions if tp[0] not in self._anchors]),
        ):
            if consumer is not None and partitions:
                chosen = [TopicPartition(t, p) for t, p in partitions]
                (consumer.pause if paused else consumer.resume)(chosen)
        return True

    def poll_once(self, timeout: float) -> int:
        if self._unreported:
            # Offsets wait for acknowledgements that come within milliseconds:
            # look again soon rather than wait out a long poll with no records.
            timeout = min(timeout, UNREPORTED_POLL_S)
        try:
            processed = super().poll_once(timeout)
            if self.standbys is not None and not self.paused:
                self.standbys.refresh()
                self.standbys.poll()
            return processed
        except (KafkaException, KafkaClientError) as exc:
            if self.eos:  # the transaction cannot commit: redo it from the last commit
                self._recover(exc)
                return 0
            if isinstance(exc, KafkaClientError):
                raise
            raise KafkaClientError(str(exc)) from exc
        except TaskMigratedError as exc:
            self._recover(exc)
            return 0

    def commit(self) -> None:
        if not self.eos:
            super().commit()
            return
        try:
            super().commit()
        except KafkaException as exc:
            self._recover(exc)

    def maybe_commit(self) -> None:
        """at_least_once: the interval's commit does not flush the producer;
        its input offsets are committed once all records sent before them are
        reported, looked at here on every round."""
        if self.eos:
            super().maybe_commit()
            return
        self._pipelined = True
        try:
            super().maybe_commit()
        finally:
            self._pipelined = False
        self._commit_reported()

    def _flush_output(self) -> None:
        if not self._pipelined:
            self.producer.flush()

    def _commit_reported(self) -> None:
        """Commits the input offsets of the epochs whose records are all
        reported (acknowledged, or failed and handed to the
        production.exception.handler, which raises here if it fails)."""
        if not self._unreported:
            return
        done, dead_letters = self.producer.reported_through()
        if dead_letters:
            # Failed records went to the dead-letter queue in the open epoch:
            # wait for them, as a flushing commit would (then all are done).
            self.producer.flush()
            done = self.producer.native.reported_through()
        ready = [offsets for epoch, offsets in self._unreported if epoch < done]
        if not ready:
            return
        self._unreported = self._unreported[len(ready) :]
        merged: Committable = {}
        for offsets in ready:
            merged |= offsets
        self._commit_group_offsets(merged, wait=False)

    def _take_commit_results(self) -> None:
        """Notes the offsets the asynchronous commits committed; a failed
        one is sent again by the next commit (not noted as committed)."""
        results = self.consumer.commits
        if not results:
            return
        for topic, partition, offset, error in results:
            if error is None:
                self._committed[(topic, partition)] = offset
            else:
                self.consumer.commit_failed(topic, error)
        self._maybe_purge()

    def _commit_offsets(self, committable: Committable) -> None:
        if self.eos:
            offsets = self._changed(committable)
            if offsets or self.producer.in_transaction:
                self.producer.begin()
                self.producer.flush()
                if offsets:
                    self._send_offsets(offsets)
                self.producer.commit_transaction()
                self._note_committed(offsets)
                self._maybe_purge()
            return
        if self._pipelined:
            self._unreported.append((self.producer.native.mark(), committable))
            return
        # Flushed: every epoch is reported.
        merged: Committable = {}
        for _, pending in self._unreported:
            merged |= pending
        self._unreported.clear()
        self._commit_group_offsets(merged | committable, wait=True)

    def _changed(self, committable: Committable) -> list[TopicPartition]:
        """The offsets that differ from those last committed."""
        return [
            TopicPartition(topic, partition, offset, metadata=partition_time)
            for (topic, partition), (offset, partition_time) in committable.items()
            if self._committed.get((topic, partition)) != offset
        ]

    def _commit_group_offsets(self, committable: Committable, *, wait: bool) -> None:
        """at_least_once: commits the input offsets for the group; ``wait``:
        for the answer, else it comes with a later poll (``_take_commit_results``)."""
        offsets = self._changed(committable)
        if not offsets:
            return
        try:
            self.consumer.commit(offsets, wait=wait)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() not in REBALANCED:
                raise KafkaClientError(f"committing offsets failed: {exc}") from exc
            # Kafka's CommitFailedException: the group moved on. The
            # rebalance callbacks hand the partitions over; what was
            # processed since the last commit may be processed again
            # (at_least_once allows it).
            log.warning("%s: offset commit rejected by a rebalance (%s)", self.thread_name, exc)
            return
        if wait:
            self._note_committed(offsets)
            self._maybe_purge()

    def _send_offsets(self, offsets: list[TopicPartition]) -> None:
        """send_offsets_to_transaction with its timeout enforced here:
        librdkafka may wait forever when the group coordinator's broker has
        gone (confluentinc/librdkafka#5456, #5511). The wait is bounded by
        twice the transaction timeout (the coordinator has aborted the
        transaction by then, so a later success could not commit it). Past
        it the producer is abandoned (its call never returns) and the error
        is fatal, so ``_recover`` opens a new producer, which fences the old."""
        producer = self.producer
        timeout = min(REQUEST_TIMEOUT_S, 2 * producer.transaction_timeout_s)
        done, failure = threading.Event(), []

        def call() -> None:
            try:
                producer.send_offsets(offsets, self.consumer.native, timeout)
            except BaseException as exc:  # handed to the stream thread
                failure.append(exc)
            finally:
                done.set()

        threading.Thread(target=call, name=f"{self.thread_name}-offsets", daemon=True).start()
        if not done.wait(timeout + 5.0):
            producer.abandon()
            raise KafkaException(
                KafkaError(
                    KafkaError._TIMED_OUT,
                    f"send_offsets_to_transaction did not return within {timeout:.0f} s",
                    fatal=True,
                )
            )
        if failure:
            raise failure[0]

    def _commit_stores(self) -> None:
        if self.standbys is not None:
            self.standbys.commit()
        super()._commit_stores()

    def client_ids(self) -> tuple[str, str, frozenset[str]]:
        return (
            self.consumer.client_id,
            self.restore_consumer.client_id,
            frozenset({self.producer.client_id}),
        )

    def standby_tasks(self) -> list[StreamTask]:
        return [] if self.standbys is None else list(self.standbys.tasks.values())

    def committed_offsets(self) -> dict[tuple[str, int], int]:
        """Those the group coordinator acknowledged (commits are asynchronous)."""
        return dict(self._committed)

    def store_partition_lags(self) -> list[tuple[str, int, int, int]]:
        standbys = [] if self.standbys is None else self.standbys.store_positions()
        return super().store_partition_lags() + standbys

    def _changelog_end(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        return max(self.producer.written.get(key, -1), self._changelog_ends.get(key, 0))

    def _maybe_purge(self) -> None:
        """Deletes the records of repartition topics that the app has
        committed past (Kafka's repartition.purge.interval.ms): the app is
        their only reader. Fire and forget; a failure is only logged."""
        now = time.monotonic()
        if (now - self._last_purge) * 1000 < self.config["repartition.purge.interval.ms"]:
            return
        self._last_purge = now
        purge = [
            TopicPartition(topic, partition, offset)
            for (topic, partition), offset in self._committed.items()
            if topic in self._repartition_inputs
            and offset > self._purged.get((topic, partition), 0)
        ]
        if not purge:
            return
        for tp in purge:
            self._purged[(tp.topic, tp.partition)] = tp.offset
        for tp, future in self.admin.delete_records(purge).items():
            future.add_done_callback(self._purge_done(tp))

    def _purge_done(self, tp: TopicPartition) -> Callable[[Future[Any]], None]:
        """Logs a failed purge at warning the first time per topic and kind of
        error, then at debug: the next interval tries again (Kafka Streams
        logs every failure at debug; a denied Delete should be seen once, not
        every interval for the app's lifetime)."""

        def done(future: Future[Any]) -> None:
            failure = future.exception()
            if failure is None:
                return
            error = failure.args[0] if failure.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            kind = error.name() if isinstance(error, KafkaError) else type(failure).__name__
            first = (tp.topic, kind) not in self._purge_failures
            self._purge_failures.add((tp.topic, kind))
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                hint = (
                    f"; its consumed records are kept until Delete on {tp.topic} is granted"
                    " (the repartition topic grows without bound meanwhile)"
                )
            else:
                hint = "; retried every repartition.purge.interval.ms"
            level = logging.WARNING if first else logging.DEBUG
            log.log(level, "purging %s-%d failed: %s%s", tp.topic, tp.partition, failure, hint)

        return done

    def _note_committed(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            self._committed[(tp.topic, tp.partition)] = tp.offset

    def _abort_transaction(self) -> None:
        if self.producer.in_transaction:
            try:
                self.producer.abort_transaction()
            except KafkaException:
                log.warning("aborting the transaction failed", exc_info=True)

    def _recover(self, cause: BaseException) -> None:
        """After a failed transaction: abort it (or, fenced, replace the
        producer), close every task dirty and reopen them from their last
        commit and the changelogs, inputs from the committed offsets."""
        error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
        fatal = error is not None and hasattr(error, "fatal") and error.fatal()
        log.warning("%s: transaction failed (%s); reopening the tasks", self.thread_name, cause)
        if not fatal:
            self._abort_transaction()
        else:
            self.producer.close()
            transactional_id = f"{self.app_id}-{self.process_id}-{self.thread_index}"
            self.producer = KafkaProducer(
                producer_config(
                    self.config,
                    f"{self.thread_name}-producer",
                    transactional_id,
                    self._max_message_bytes,
                ),
                self.partition_count,
                transactional=True,
                failures=self.delivery_failures,
            )
            self.collector.producer = self.producer
        owned = [TopicPartition(*key) for key in self._positions if key[0] in self._anchors]
        for task in list(self.tasks.values()):
            self._close_task(task, clean=False)
        self._positions.clear()
        self._committed.clear()
        self.consumer.incremental_unassign(owned)
        if self.side is not None:
            self.side.unassign()
        self._assign(owned)

    # --- bounded runs -------------------------------------------------------
    def _end_offset(self, topic: str, partition: int) -> int:
        return self._watermarks(topic, partition)[1]

    def _owned_inputs(self) -> list[tuple[str, int]]:
        return list(self._positions)

    def _ready_to_end(self) -> bool:
        return self.assigned_once and not self.rebalancing

    def _caught_up(self, end: EndTargets) -> bool:
        return super()._caught_up(end) and self._group_covers_all()

    def _group_covers_all(self) -> bool:
        """Whether the group is stable with every anchor partition owned by a
        member: in a cooperative rebalance a partition is unowned for a while,
        and a bounded run must not end while its records wait for an owner."""
        try:
            future = self.admin.describe_consumer_groups(
                [self.app_id], request_timeout=REQUEST_TIMEOUT_S
            )[self.app_id]
            group = future.result()
        except KafkaException:
            return False  # ask again in the next round
        if group.state != ConsumerGroupState.STABLE:
            return False
        owned = {
            (tp.topic, tp.partition)
            for member in group.members
            for tp in member.assignment.topic_partitions
        }
        return all(
            (topic, p) in owned
            for topic in self._anchors
            for p in range(self.partition_count(topic))
        )

    def _lag_report(self, end: EndTargets) -> str:
        return f"{super()._lag_report(end)}; rebalancing: {self.rebalancing}"

    def records_lag(self, topic: str, partition: int) -> int | None:
        """As librdkafka's consumer_lag: the high watermark of the last
        fetch minus the position (no request to the broker)."""
        if (topic, partition) not in self._positions:
            return None  # revoked meanwhile
        _, high = self._consumer_for(topic).get_watermark_offsets(
            TopicPartition(topic, partition), cached=True
        )
        return None if high < 0 else max(0, high - self._position(topic, partition))

    def _metered_tasks(self) -> list[StreamTask]:
        standbys = [] if self.standbys is None else list(self.standbys.tasks.values())
        return super()._metered_tasks() + standbys

    def metric_list(self) -> list[Metric]:
        out = super().metric_list()
        if self.standbys is not None:
            for task in list(self.standbys.tasks.values()):
                out += self.sensors.task_metrics(self.thread_name, task, None, standby=True)
        return out

    def metrics(self) -> dict[str, Any]:
        totals = super().metrics()
        totals["dropped-records"] += self.delivery_failures.dropped
        totals["assigned-tasks"] = len(self.tasks)
        if self.standbys is not None:
            totals["standby-tasks"] = len(self.standbys.tasks)
            totals["standby-records"] = self.standbys.records
        return totals

    def assigned_tasks(self) -> list[str]:
        return sorted(self.tasks)

    def _may_commit_on_close(self) -> bool:
        return self._failure is None

    def abort(self, committed: bool = False) -> None:
        if not committed and self.eos:
            self._abort_transaction()
        super().abort(committed)

    def _close_clients(self) -> None:
        if self.standbys is not None:
            self.standbys.close()
        for consumer in (self.consumer, self.side, self.restore_consumer):
            if consumer is None:
                continue
            try:
                consumer.close()
            except (KafkaException, RuntimeError):
                log.debug("closing a consumer failed", exc_info=True)
        self.producer.close()


def process_id() -> str:
    """A process id for ``transactional.id``s: unique per KafkaStreams instance."""
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class KafkaTransport(Transport):
    """Apache Kafka: ``num.stream.threads`` stream threads of one process id,
    sharing a GlobalStreamThread when there are several and global stores."""

    def __init__(self) -> None:
        self.process_id = process_id()
        self._global_thread: GlobalStreamThread | None = None

    def stream_threads(self, config: StreamsConfig) -> int:
        return int(config["num.stream.threads"])

    def why_no_more_threads(self, config: StreamsConfig, builder: InternalTopologyBuilder) -> str:
        if config["num.standby.replicas"]:
            return "num.standby.replicas needs one stream thread for now"
        if builder.global_subtopology() is not None and self._global_thread is None:
            # A single thread keeps the global stores itself; a second one
            # would open them again.
            return "the global stores belong to the one stream thread it started with"
        return ""

    def runtime(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        index: int,
        on_rebalance: Callable[[bool], None],
    ) -> Runtime:
        self._open_global_thread(builder, config)
        runtime = KafkaRuntime(
            builder,
            config,
            process_id=self.process_id,
            thread_index=index,
            on_rebalance=on_rebalance,
            global_thread=self._global_thread,
        )
        # Restores start with assignments, after the runtime is made.
        runtime.restore_listener = self.restore_listener
        runtime.standby_listener = self.standby_listener
        return runtime

    def _open_global_thread(self, builder: InternalTopologyBuilder, config: StreamsConfig) -> None:
        """With several stream threads, one global thread for all: bootstrapped
        before any stream thread starts (Kafka's GlobalStreamThread)."""
        sub = builder.global_subtopology()
        if self._global_thread is not None or config["num.stream.threads"] < 2 or sub is None:
            return
        thread_name = f"{config.client_id_prefix(self.process_id)}-GlobalStreamThread"
        topics = Topics(admin_client(config), config["bootstrap.servers"])
        self._global_thread = GlobalStreamThread(
            builder,
            config,
            topics.partition_count,
            config.state_dir / config.application_id,
            f"{thread_name}-global-consumer",
            sub,
        )
        self._global_thread.start(thread_name)

    def application_shutdown(self, config: StreamsConfig) -> ApplicationShutdown:
        return ApplicationShutdown(config, f"{config.application_id}-{self.process_id}")

    def shared_failure(self) -> BaseException | None:
        return None if self._global_thread is None else self._global_thread.failure

    def instance_directory(
        self, config: StreamsConfig, runtimes: Callable[[], list[Runtime]]
    ) -> GroupDirectory:
        """The group's members and assignments (strom.kafka.instances)."""
        first = runtimes()[0]
        assert isinstance(first, KafkaRuntime)
        return GroupDirectory(config, first)

    def close(self) -> None:
        if self._global_thread is not None:
            self._global_thread.close()
            self._global_thread = None
