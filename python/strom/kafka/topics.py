"""Topics on the cluster: partition counts, and the internal topics an app
needs (created with the AdminClient, validated when they already exist)."""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from strom.errors import TopologyError
from strom.kafka.clients import REQUEST_TIMEOUT_S, KafkaClientError

log = logging.getLogger("strom.kafka")


class Topics:
    """Partition counts by topic, cached; internal topic creation."""

    def __init__(self, admin: AdminClient, servers: str) -> None:
        self.admin = admin
        self.servers = servers
        self._counts: dict[str, int] = {}

    def describe(self, topics: list[str] | None = None) -> dict[str, int]:
        """Partition counts of the existing topics among ``topics`` (all when None)."""
        try:
            metadata = self.admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaClientError(
                f"cannot reach the Kafka cluster at {self.servers}: {exc}"
            ) from exc
        found = {
            name: len(t.partitions)
            for name, t in metadata.topics.items()
            if t.error is None and t.partitions
        }
        self._counts.update(found)
        if topics is None:
            return found
        return {t: found[t] for t in topics if t in found}

    def partition_count(self, topic: str) -> int:
        if topic not in self._counts:
            self.describe()
            if topic not in self._counts:
                raise TopologyError(
                    f"topic {topic!r} does not exist on the Kafka cluster at {self.servers}"
                )
        return self._counts[topic]

    def smallest_max_message_bytes(self, topics: list[str]) -> int | None:
        """The smallest ``max.message.bytes`` among ``topics`` (None: none known)."""
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in topics]
        if not resources:
            return None
        futures = self.admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
        found = []
        for future in futures.values():
            try:
                entry = future.result().get("max.message.bytes")
            except KafkaException:
                continue  # e.g. not allowed to describe it: the broker decides
            if entry is not None and entry.value is not None:
                found.append(int(entry.value))
        return min(found, default=None)

    def ensure_internal(
        self, wanted: list[tuple[str, int, dict[str, str]]], replication_factor: int
    ) -> None:
        """Creates the missing internal topics; checks the partition count and
        cleanup policy of those that exist."""
        existing = self.describe([name for name, _, _ in wanted])
        to_create = [
            NewTopic(name, partitions, replication_factor, config=dict(config))
            for name, partitions, config in wanted
            if name not in existing
        ]
        if to_create:
            futures = self.admin.create_topics(to_create, request_timeout=REQUEST_TIMEOUT_S)
            for name, future in futures.items():
                error = future.exception()
                if error is None:
                    log.info("created internal topic %s", name)
                elif not (
                    isinstance(error, KafkaException)
                    and error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
                ):
                    # Another instance may have created it meanwhile: that one is fine.
                    raise KafkaClientError(f"cannot create internal topic {name}: {error}")
            self._await_metadata([t.topic for t in to_create])
        self._validate(wanted)

    def _await_metadata(self, names: list[str]) -> None:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            metadata = self.admin.list_topics(timeout=REQUEST_TIMEOUT_S)
            ready = [
                n
                for n in names
                if n in metadata.topics
                and metadata.topics[n].error is None
                and all(p.leader >= 0 for p in metadata.topics[n].partitions.values())
            ]
            if len(ready) == len(names):
                break
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"internal topics {sorted(set(names) - set(ready))} have no leaders"
                )
            time.sleep(0.1)
        self.describe()

    def _validate(self, wanted: list[tuple[str, int, dict[str, str]]]) -> None:
        counts = self.describe([name for name, _, _ in wanted])
        for name, partitions, _ in wanted:
            found = counts.get(name)
            if found != partitions:
                raise TopologyError(
                    f"internal topic {name} has {found} partition(s) but the topology needs "
                    f"{partitions}; reset the application (strom reset) to recreate it"
                )
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name, _, _ in wanted]
        if not resources:
            return
        futures = self.admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
        policies = {r.name: f.result().get("cleanup.policy") for r, f in futures.items()}
        for name, _, config in wanted:
            expected = config.get("cleanup.policy")
            entry = policies.get(name)
            found = None if entry is None else entry.value
            if (
                expected is not None
                and found is not None
                and set(found.split(",")) != set(expected.split(","))
            ):
                raise TopologyError(
                    f"internal topic {name} has cleanup.policy={found} but needs {expected}; "
                    "fix the topic config or reset the application (strom reset)"
                )
