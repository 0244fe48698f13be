"""The runtime's Kafka consumer: ``strom._core.KafkaConsumer`` (librdkafka,
driven from Rust) behind the calls the runtime makes, in confluent-kafka's
terms (``TopicPartition``, ``KafkaException``).

Records come as one columnar ``RecordBatch`` per partition, the embedded
log's batch type: no Python object per record until a node needs one.

A consumer with a ``group.id`` is a group member; rebalances it meets while
polling are handed to the callbacks given to ``subscribe``, which assign or
unassign before ``poll_batches`` returns (as confluent-kafka's callbacks do
inside ``consume``). Without a ``group.id`` it is read by assignment and
joins no group at all (no coordinator lookup, so no group ACL).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from strom._core import KafkaConsumer, RecordBatch
from strom.kafka.clients import KafkaClientError, native_config, relay_client_events, transient
from strom.kafka.security import (
    AUTHENTICATION,
    AUTHORIZATION,
    KafkaSecurityError,
    authentication_error,
    authorization_error,
    principal_of,
    topic_denied,
)

log = logging.getLogger("strom.kafka")

Rebalanced = Callable[["Consumer", list[TopicPartition]], None]

# Errors of a partition that retrying cannot mend: the runtime stops.
_STOPPING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._AUTO_OFFSET_RESET})


@dataclass(frozen=True)
class Committed:
    """A partition's committed offset (negative: none) and its metadata."""

    topic: str
    partition: int
    offset: int
    metadata: str
    error: KafkaError | None


class Consumer:
    """``headers``: whether polled records carry their headers (they travel
    from input records to output records; the restore consumer, reading
    changelogs, reads none: parsing them costs an allocation per record
    that has any)."""

    def __init__(self, conf: Mapping[str, Any], *, headers: bool = True) -> None:
        self.client_id = str(conf.get("client.id", "consumer"))
        self.servers = str(conf.get("bootstrap.servers"))
        group = conf.get("group.id")
        self.group = None if group is None else str(group)
        self.principal = principal_of(conf)
        self.native = KafkaConsumer(native_config(conf))
        self.native.read_headers(headers)
        self._on_assign: Rebalanced | None = None
        self._on_revoke: Rebalanced | None = None
        self._on_lost: Rebalanced | None = None
        self._applied = False  # whether a rebalance callback (un)assigned
        # Partitions whose end the last poll reached (``enable.partition.eof``).
        self.eofs: list[tuple[str, int]] = []
        # Results of asynchronous commits the last poll met: ``(topic,
        # partition, offset, error or None)``.
        self.commits: list[tuple[str, int, int, KafkaError | None]] = []

    def subscribe(
        self,
        topics: list[str],
        *,
        on_assign: Rebalanced,
        on_revoke: Rebalanced,
        on_lost: Rebalanced,
    ) -> None:
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self.native.subscribe(topics)

    def unsubscribe(self) -> None:
        self.native.unsubscribe()

    def poll_batches(self, max_records: int, timeout: float) -> list[RecordBatch]:
        """Records polled (waiting up to ``timeout`` for the first), one batch
        per partition; a rebalance met is applied first."""
        batches: list[RecordBatch]
        batches, eofs, errors, rebalance, commits = self.native.poll(max_records, timeout)
        relay_client_events(self.native, self.client_id)
        self.eofs = eofs
        self.commits = commits
        if rebalance is not None:
            self._rebalance(*rebalance)
        for where, error in errors:
            self._check(where, error)
        return batches

    def _check(self, where: tuple[str, int] | None, error: KafkaError) -> None:
        """Raises on errors that stop the app; logs (rate-limited) the rest,
        which the client retries by itself."""
        code = error.code()
        if code in AUTHENTICATION:
            raise authentication_error(error, self.servers)
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise self.denied_group(error.str())
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise self.denied_topic(where[0] if where else None, error.str())
        if error.fatal() or code in _STOPPING:
            raise KafkaClientError(error.str())
        transient.warn(self.client_id, where, error)

    def denied_group(self, detail: str) -> KafkaSecurityError:
        return authorization_error("Read", "group", str(self.group), detail, self.principal)

    def denied_topic(self, topic: str | None, detail: str) -> KafkaSecurityError:
        """Read denied on ``topic`` (None: a topic the client did not name);
        a group member's group is its application.id."""
        return topic_denied("Read", topic or "<the topic>", detail, self.principal, self.group)

    def commit_failed(self, topic: str, error: KafkaError) -> None:
        """An asynchronous commit of ``topic``'s offset failed: raises if
        retrying cannot help (denied), else logs it (rate-limited); the
        next commit sends the offset again."""
        self._raise_denial(KafkaException(error), [topic])
        transient.warn(self.client_id, None, error)

    def _raise_denial(self, exc: KafkaException, topics: list[str]) -> None:
        """Raises the authorization error ``exc`` is, if it is one (a commit,
        committed offsets, watermarks), naming the group or the topics."""
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError):
            return
        if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise self.denied_group(error.str()) from exc
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise self.denied_topic(", ".join(sorted(set(topics))), error.str()) from exc

    def _rebalance(self, kind: str, detail: Any) -> None:
        if kind == "error":
            if detail.code() in AUTHENTICATION | AUTHORIZATION:
                self._check(None, detail)  # raises
            log.warning("%s: rebalance failed: %s", self.client_id, detail.str())
            return
        partitions = [TopicPartition(topic, partition) for topic, partition in detail]
        callback = {"assign": self._on_assign, "revoke": self._on_revoke, "lost": self._on_lost}[
            kind
        ]
        self._applied = False
        if callback is not None:
            callback(self, partitions)
        # As confluent-kafka does: what the callback did not apply is applied
        # here (the group waits for it before the next round).
        if not self._applied:
            if kind == "assign":
                self.incremental_assign(partitions)
            else:
                self.incremental_unassign(partitions)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._applied = True
        self.native.assign(_with_offsets(partitions))

    def incremental_assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._applied = True
        self.native.incremental_assign(_with_offsets(partitions))

    def incremental_unassign(self, partitions: Iterable[TopicPartition]) -> None:
        self._applied = True
        self.native.incremental_unassign([(tp.topic, tp.partition) for tp in partitions])

    def unassign(self) -> None:
        self._applied = True
        self.native.unassign()

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stops fetching from assigned ``partitions`` (they stay assigned)."""
        self.native.pause([(tp.topic, tp.partition) for tp in partitions])

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self.native.resume([(tp.topic, tp.partition) for tp in partitions])

    def commit(self, offsets: Iterable[TopicPartition], *, wait: bool = True) -> None:
        """Commits the offsets with their metadata; ``wait``: for the group
        coordinator's answer, else it comes in ``commits`` after a later poll."""
        rows = [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]
        try:
            self.native.commit(rows, wait)
        except KafkaException as exc:
            self._raise_denial(exc, [row[0] for row in rows])
            raise

    def committed(self, partitions: Iterable[TopicPartition], timeout: float) -> list[Committed]:
        keys = [(tp.topic, tp.partition) for tp in partitions]
        try:
            rows = self.native.committed(keys, timeout)
        except KafkaException as exc:
            self._raise_denial(exc, [key[0] for key in keys])
            raise
        return [Committed(*row) for row in rows]

    def offsets_for_times(
        self, wanted: Mapping[tuple[str, int], int], timeout: float
    ) -> dict[tuple[str, int], int]:
        """Per partition, the first offset whose record's timestamp is at
        least the one asked (epoch ms); -1 where there is none."""
        rows = [(topic, partition, ts) for (topic, partition), ts in wanted.items()]
        try:
            found = self.native.offsets_for_times(rows, timeout)
        except KafkaException as exc:
            self._raise_denial(exc, [row[0] for row in rows])
            raise
        return {(topic, partition): offset for topic, partition, offset in found}

    def position(self, partition: TopicPartition) -> int:
        """The next offset to fetch (negative when not known yet)."""
        return int(self.native.position([(partition.topic, partition.partition)])[0])

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = 10.0, cached: bool = False
    ) -> tuple[int, int]:
        try:
            low, high = self.native.get_watermark_offsets(
                partition.topic, partition.partition, cached=cached, timeout=timeout
            )
        except KafkaException as exc:
            self._raise_denial(exc, [partition.topic])
            raise
        return int(low), int(high)

    def refresh_metadata(self, topic: str | None, timeout: float) -> None:
        """Asks the cluster for metadata again (a moved leader, a new topic)."""
        self.native.partition_counts(topic, timeout)

    def close(self) -> None:
        """Leaves the group (or stops reading); idempotent."""
        self.native.close()
        relay_client_events(self.native, self.client_id)


def _with_offsets(partitions: Iterable[TopicPartition]) -> list[tuple[str, int, int]]:
    return [(tp.topic, tp.partition, tp.offset) for tp in partitions]
