"""Standby tasks (``num.standby.replicas``): warm copies of other
instances' task state, kept current from the changelogs, so that a task
moving to this instance restores only what its standby had not read yet.

librdkafka's assignor places active tasks only, so standbys are placed
here: every instance reads the group's members and their assignments with
the AdminClient and applies the same deterministic rule. Instances (not
threads: a process's threads share its state directory) are ordered by
their process id; a task's standbys are the next ``num.standby.replicas``
instances after its active one, in that order, wrapping around, never the
active one itself. Each instance keeps its standbys on its first stream
thread, which reads their changelogs between batches and commits the
stores' offsets with its own commits, so a restart or a promotion resumes
from there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, TopicPartition

from strom.kafka.clients import consumer_config, describe_group, member_instance
from strom.kafka.consumer import Consumer
from strom.processor.api import SuspendReason

if TYPE_CHECKING:
    from strom.kafka.runtime import KafkaRuntime
    from strom.processor.internals.task import StreamTask
    from strom.processor.internals.topology_builder import Subtopology

log = logging.getLogger("strom.kafka")

# How often the group's assignment is read again (a rebalance also triggers it).
REFRESH_S = 1.0
STANDBY_BATCH = 10_000


def place_standbys(
    active: Mapping[str, str], instances: Sequence[str], replicas: int
) -> dict[str, list[str]]:
    """Per task id (``active`` maps each to the instance running it), the
    instances that keep a standby of it: the next ``replicas`` instances
    after its active one in sorted order, wrapping around, never the active
    one (fewer when there are not enough instances)."""
    ordered = sorted(set(instances) | set(active.values()))
    placement: dict[str, list[str]] = {}
    for task, owner in active.items():
        at = ordered.index(owner)
        others = ordered[at + 1 :] + ordered[:at]
        placement[task] = others[: max(0, replicas)]
    return placement


class StandbyTasks:
    """The standby tasks of one instance, kept by its stream thread."""

    def __init__(self, runtime: KafkaRuntime, replicas: int) -> None:
        self.runtime = runtime
        self.replicas = replicas
        self.tasks: dict[str, StreamTask] = {}
        # Changelog partition -> (standby task, store); and the next offset to read.
        self._plan: dict[tuple[str, int], tuple[StreamTask, str]] = {}
        self._positions: dict[tuple[str, int], int] = {}
        self.records = 0
        self._next_refresh = 0.0
        self.stateful = {
            sub.id
            for sub in runtime.subtopologies
            if any(
                runtime.builder.stores[name].logged and runtime.builder.stores[name].persistent
                for name in sub.stores
            )
        }
        self.consumer = Consumer(
            consumer_config(
                runtime.config,
                f"{runtime.thread_name}-standby-consumer",
                group=False,
                prefix="restore.consumer.",
            )
            | {"enable.partition.eof": False}
        )

    # --- placement -------------------------------------------------------------
    def _instance(self, client_id: str) -> str | None:
        """The process id in a stream thread's consumer client id."""
        found = member_instance(client_id, self.runtime.app_id)
        return None if found is None else found[0]

    def _group_assignment(self) -> dict[str, str] | None:
        """Task id -> the instance running it, from the group's members; None
        while the group is rebalancing or cannot be described."""
        runtime = self.runtime
        group = describe_group(runtime.admin, runtime.app_id, "standby placement")
        if group is None:
            return None
        active: dict[str, str] = {}
        for member in group.members:
            instance = self._instance(member.client_id)
            if instance is None or member.assignment is None:
                continue
            for tp in member.assignment.topic_partitions:
                sub = runtime.anchor_subtopology(tp.topic)
                if sub is not None and sub.id in self.stateful:
                    active[f"{sub.id}_{tp.partition}"] = instance
        return active

    def refresh(self, force: bool = False) -> None:
        """Opens the standbys this instance should keep and closes the others."""
        now = time.monotonic()
        if not force and now < self._next_refresh:
            return
        self._next_refresh = now + REFRESH_S
        active = self._group_assignment()
        if active is None:
            return
        me = self.runtime.process_id
        placement = place_standbys(active, [*active.values(), me], self.replicas)
        running = self.runtime.local_task_ids()
        wanted = {task for task, hosts in placement.items() if me in hosts and task not in running}
        for task_id in sorted(set(self.tasks) - wanted):
            self.release(task_id)
        for task_id in sorted(wanted - set(self.tasks)):
            self._open(task_id)

    # --- keeping them current ----------------------------------------------------
    def _open(self, task_id: str) -> None:
        sub_id, partition = (int(part) for part in task_id.split("_"))
        sub: Subtopology = next(s for s in self.runtime.subtopologies if s.id == sub_id)
        task = self.runtime.standby_task(sub, partition)
        self.tasks[task_id] = task
        assign = []
        for store, (topic, start) in task.state.restore_positions().items():
            if task.state.restores_from_source(store):
                continue  # a read-only store: its active task restores it from its source
            key = (topic, partition)
            low, _high = self.runtime.watermarks(topic, partition)
            offset = low if start is None else max(start, low)
            self._plan[key] = (task, store)
            self._positions[key] = offset
            assign.append(TopicPartition(topic, partition, offset))
            if self.runtime.standby_listener is not None:
                self.runtime.standby_listener.on_update_start(key, store, offset)
        if assign:
            self.consumer.incremental_assign(assign)
        log.info("%s: standby task %s opened", self.runtime.thread_name, task_id)

    def poll(self) -> int:
        """Applies what the standbys' changelogs have gained (no waiting)."""
        if not self._plan:
            return 0
        applied = 0
        for batch in self.consumer.poll_batches(STANDBY_BATCH, 0):
            key = (batch.topic, batch.partition)
            if key not in self._plan:
                continue  # a standby closed since the fetch
            task, store = self._plan[key]
            task.state.restore_batch(store, batch)
            self._positions[key] = batch.next_offset
            applied += len(batch)
            if (listener := self.runtime.standby_listener) is not None and len(batch):
                _low, high = self.runtime.watermarks(*key)
                last = batch.offsets()[-1]
                listener.on_batch_loaded(key, store, task.task_id, last, len(batch), high)
        self.records += applied
        return applied

    def store_positions(self) -> list[tuple[str, int, int, int]]:
        """(store, partition, position, changelog end) of every standby store."""
        out = []
        for (topic, partition), (_task, store) in list(self._plan.items()):
            _low, high = self.runtime.watermarks(topic, partition)
            out.append((store, partition, self._positions[(topic, partition)], high))
        return out

    def lag(self) -> int:
        """Changelog records the standbys have not read yet."""
        behind = 0
        for (topic, partition), position in self._positions.items():
            _low, high = self.runtime.watermarks(topic, partition)
            behind += max(0, high - position)
        return behind

    def commit(self) -> None:
        """Commits each standby's stores at the changelog offsets they reflect."""
        for task in self.tasks.values():
            ends = {
                topic: self._positions[(topic, task.partition)]
                for topic in task.changelogs.values()
            }
            task.commit_state(ends)

    def release(self, task_id: str, reason: SuspendReason = SuspendReason.MIGRATED) -> None:
        """Commits and closes a standby (before it becomes active here:
        ``PROMOTED``, or when it is placed elsewhere); its local state stays
        for later."""
        task = self.tasks.pop(task_id, None)
        if task is None:
            return
        keys = [key for key, (t, _) in self._plan.items() if t is task]
        ends = {topic: self._positions[(topic, task.partition)] for topic, _ in keys}
        task.commit_state(ends)
        listener = self.runtime.standby_listener
        for key in keys:
            if listener is not None:
                _low, high = self.runtime.watermarks(*key)
                listener.on_update_suspended(
                    key, self._plan[key][1], self._positions[key], high, reason
                )
            del self._plan[key]
            del self._positions[key]
        if keys:
            self.consumer.incremental_unassign([TopicPartition(t, p) for t, p in keys])
        task.close()
        log.info("%s: standby task %s closed", self.runtime.thread_name, task_id)

    def close(self) -> None:
        for task_id in sorted(self.tasks):
            self.release(task_id)
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError):
            log.debug("closing the standby consumer failed", exc_info=True)
