"""Topics on the cluster: partition counts, and the internal topics an app
needs (created with the AdminClient, validated when they already exist).

Topics are described by name (DescribeTopics), so a topic the principal may
not describe is told apart from one that does not exist (a metadata request
for all topics silently leaves out the ones it may not see). With each
description comes what the principal may do with the topic: configs are
only asked for where ``DescribeConfigs`` is allowed, which Kafka Streams'
documented ACLs do not grant."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from strom.errors import TopologyError
from strom.kafka.clients import REQUEST_TIMEOUT_S, Admin, KafkaClientError
from strom.kafka.security import (
    KafkaAuthorizationError,
    authorization_error,
    topic_denied,
)
from strom.processor.internals.internal_topics import is_internal_topic

log = logging.getLogger("strom.kafka")


class Topics:
    """Partition counts by topic, cached; internal topic creation."""

    def __init__(self, admin: Admin, servers: str) -> None:
        self.admin = admin
        self.servers = servers
        self._counts: dict[str, int] = {}
        # What the principal may do per topic (None: the broker did not say).
        self._operations: dict[str, frozenset[AclOperation] | None] = {}
        self._led: dict[str, bool] = {}  # whether every partition has a leader

    def describe(self, topics: list[str]) -> dict[str, int]:
        """Partition counts of the existing topics among ``topics``; raises
        ``KafkaAuthorizationError`` for one the principal may not describe
        (the cluster does not tell whether it exists)."""
        if not topics:
            return {}
        try:
            futures = self.admin.describe_topics(
                TopicCollection(list(topics)),
                request_timeout=REQUEST_TIMEOUT_S,
                include_authorized_operations=True,
            )
        except KafkaException as exc:
            raise self._unreachable(exc) from exc
        found = {}
        for name, future in futures.items():
            try:
                description = self.admin.result(future)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise self._denied("Describe", name, error.str()) from None
                raise self._unreachable(exc) from exc
            found[name] = len(description.partitions)
            operations = description.authorized_operations
            self._operations[name] = None if operations is None else frozenset(operations)
            self._led[name] = all(p.leader is not None for p in description.partitions)
        self._counts.update(found)
        return found

    def _unreachable(self, exc: KafkaException) -> KafkaClientError:
        return KafkaClientError(f"cannot reach the Kafka cluster at {self.servers}: {exc}")

    def _denied(self, operation: str, topic: str, detail: str) -> KafkaAuthorizationError:
        app, principal = self.admin.application_id, self.admin.principal
        if operation == "Describe" and not (app is not None and is_internal_topic(app, topic)):
            return authorization_error(
                operation, "topic", topic, detail, principal, grant=("Read",),
                hint="; an input topic needs Read and an output topic Write, either of which "
                "implies Describe (the command is for an input: use --operation Write for an "
                "output)",
            )  # fmt: skip
        return topic_denied(operation, topic, detail, principal, app)

    def check_access(self, reads: Iterable[str], writes: Iterable[str]) -> None:
        """Raises ``KafkaAuthorizationError``, naming the topic and the ACL,
        if the principal may not read one of ``reads`` or write one of
        ``writes`` (as the broker said with the topics' descriptions): at
        startup, rather than at the first fetch or inside a transaction."""
        reads, writes = sorted(set(reads)), sorted(set(writes))
        self.describe([t for t in {*reads, *writes} if t not in self._operations])
        for operation, needed, topics in (
            ("Read", AclOperation.READ, reads),
            ("Write", AclOperation.WRITE, writes),
        ):
            for topic in topics:
                if topic in self._operations and not self.may(topic, needed):
                    allowed = sorted(_acl_name(op) for op in self._operations[topic] or ())
                    detail = f"it may {', '.join(allowed) or 'nothing'}; checked at startup"
                    raise self._denied(operation, topic, detail)

    def may(self, topic: str, operation: AclOperation) -> bool:
        """Whether the principal may do ``operation`` on ``topic`` (True when
        the broker did not say: the request then decides)."""
        operations = self._operations.get(topic)
        return operations is None or operation in operations or AclOperation.ALL in operations

    def partition_count(self, topic: str) -> int:
        if topic not in self._counts:
            self.describe([topic])
            if topic not in self._counts:
                raise TopologyError(
                    f"topic {topic!r} does not exist on the Kafka cluster at {self.servers}"
                )
        return self._counts[topic]

    def smallest_max_message_bytes(self, topics: list[str]) -> int | None:
        """The smallest ``max.message.bytes`` among ``topics`` (None: none
        known). Only topics whose configs the principal may describe are
        asked about; for the others the broker decides record by record."""
        self.describe([t for t in topics if t not in self._operations])
        resources = [
            ConfigResource(ConfigResource.Type.TOPIC, name)
            for name in topics
            if self.may(name, AclOperation.DESCRIBE_CONFIGS)
        ]
        if not resources:
            return None
        futures = self.admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
        found = []
        for future in futures.values():
            try:
                entry = self.admin.result(future).get("max.message.bytes")
            except KafkaException:
                continue  # e.g. deleted meanwhile: the broker decides
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
                self._created(name, future)
            self._await_leaders([t.topic for t in to_create])
        self._validate([w for w in wanted if w[0] in existing], existing)

    def _created(self, name: str, future: concurrent.futures.Future[None]) -> None:
        try:
            self.admin.result(future)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise self._denied("Create", name, error.str()) from None
            # Another instance may have created it meanwhile: that one is fine.
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaClientError(f"cannot create internal topic {name}: {exc}") from exc
            return
        log.info("created internal topic %s", name)

    def _await_leaders(self, names: list[str]) -> None:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            self.describe(names)
            waiting = sorted(n for n in names if not self._led.get(n, False))
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise KafkaClientError(f"internal topics {waiting} have no leaders")
            time.sleep(0.1)

    def _validate(
        self, existing: list[tuple[str, int, dict[str, str]]], counts: dict[str, int]
    ) -> None:
        """Checks internal topics that existed before: their partition
        counts, and their cleanup policy where the principal may read it."""
        for name, partitions, _ in existing:
            found = counts.get(name)
            if found != partitions:
                raise TopologyError(
                    f"internal topic {name} has {found} partition(s) but the topology needs "
                    f"{partitions}; reset the application (strom reset) to recreate it"
                )
        checked = [
            (name, config["cleanup.policy"])
            for name, _, config in existing
            if "cleanup.policy" in config and self.may(name, AclOperation.DESCRIBE_CONFIGS)
        ]
        if not checked:
            return
        resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name, _ in checked]
        futures = self.admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
        policies = {r.name: self.admin.result(f).get("cleanup.policy") for r, f in futures.items()}
        for name, expected in checked:
            entry = policies.get(name)
            found = None if entry is None else entry.value
            if found is not None and set(found.split(",")) != set(expected.split(",")):
                raise TopologyError(
                    f"internal topic {name} has cleanup.policy={found} but needs {expected}; "
                    "fix the topic config or reset the application (strom reset)"
                )


def _acl_name(operation: AclOperation) -> str:
    """Kafka's name of an ACL operation (DESCRIBE_CONFIGS: DescribeConfigs)."""
    return "".join(word.title() for word in operation.name.split("_"))
