"""Every instance's ``application.server`` and tasks, for interactive queries
across instances (Kafka's StreamsMetadataState over the group's assignment).

Kafka Streams' assignor carries each member's ``application.server`` in the
group protocol's user data, and every member learns all hosts from the
assignment. librdkafka's assignors carry no user data, so strom puts the
endpoint where the group already shows it: in the client id of each stream
thread's main consumer, ``<application.id>-<process id>-StreamThread-<n>-
consumer@<host>:<port>`` (brokers take any client id since Kafka 1.0,
KIP-190). ``AdminClient.describe_consumer_groups`` then
gives, in one answer, every member, its endpoint and its assigned
partitions (partition p of a sub-topology's anchor topic is task p, see
strom.kafka.runtime), so:

- the host and the tasks always come from the same membership: no side
  topic to keep in step, nothing left behind by an instance that crashed
  (it leaves the group, and the description, once its session times out);
- standby hosts follow from the same description by the rule the instances
  place their standbys with (strom.kafka.standby.place_standbys);
- it is read again after each rebalance of this instance, at most every
  ``REFRESH_S`` otherwise, and on demand: a query that lands on an instance
  that no longer hosts the key is answered as misdirected (the HTTP
  endpoint), and the asker reads the group again before it retries.

While the group rebalances its description is not trusted (members may
still show what they are giving up): the assignment is unknown, and key
queries answer ``KeyQueryMetadata.NOT_AVAILABLE`` as Kafka's do while
metadata is (re)initializing.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from confluent_kafka import ConsumerGroupState

from strom.kafka.clients import admin_client, describe_group, member_instance
from strom.kafka.standby import place_standbys
from strom.metadata import HostInfo
from strom.processor.internals.streams_metadata import GroupAssignment, TaskKey, task_key

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.kafka.runtime import KafkaRuntime

# How long a reading of the group is reused (a rebalance of this instance,
# or a misdirected query, reads it again at once).
REFRESH_S = 1.0


class GroupDirectory:
    """The group's assignment as this instance last read it."""

    def __init__(self, config: StreamsConfig, runtime: KafkaRuntime) -> None:
        self.app_id = config.application_id
        self.admin = admin_client(config)
        self.runtime = runtime
        self.replicas = int(config["num.standby.replicas"])
        self._lock = threading.Lock()
        self._read: GroupAssignment | None = None
        self._read_at = 0.0

    def assignment(self, refresh: bool = False) -> GroupAssignment | None:
        with self._lock:
            now = time.monotonic()
            if refresh or self._read is None or now - self._read_at >= REFRESH_S:
                self._read = self._describe()
                self._read_at = now
            return self._read

    def _describe(self) -> GroupAssignment | None:
        group = describe_group(self.admin, self.app_id, "interactive queries")
        if group is None or group.state != ConsumerGroupState.STABLE:
            return None
        hosts: dict[str, HostInfo] = {}
        active: dict[str, str] = {}  # task id -> process id
        for member in group.members:
            found = member_instance(member.client_id, self.app_id)
            if found is None or member.assignment is None:
                continue
            process_id, host = found
            if host is not None:
                hosts[process_id] = host
            for tp in member.assignment.topic_partitions:
                sub = self.runtime.anchor_subtopology(tp.topic)
                if sub is not None:
                    active[f"{sub.id}_{tp.partition}"] = process_id
        return self._by_host(hosts, active)

    def _by_host(self, hosts: dict[str, HostInfo], active: dict[str, str]) -> GroupAssignment:
        """Tasks per host; standbys where each instance places its own: the
        rule of StandbyTasks.refresh, applied as that instance applies it."""
        by_host: dict[HostInfo, set[TaskKey]] = {h: set() for h in hosts.values()}
        for task_id, process_id in active.items():
            if process_id in hosts:
                by_host[hosts[process_id]].add(task_key(task_id))
        standby: dict[HostInfo, set[TaskKey]] = {}
        standbys = self.runtime.standbys
        if self.replicas and standbys is not None:
            stateful = {t: p for t, p in active.items() if task_key(t)[0] in standbys.stateful}
            for process_id, host in hosts.items():
                placement = place_standbys(
                    stateful, [*stateful.values(), process_id], self.replicas
                )
                standby[host] = {
                    task_key(task)
                    for task, keepers in placement.items()
                    if process_id in keepers and stateful[task] != process_id
                }
        return GroupAssignment(
            {h: frozenset(t) for h, t in by_host.items()},
            {h: frozenset(t) for h, t in standby.items() if t},
        )

    def close(self) -> None:
        """Nothing to release: the admin client goes with its last reference."""
