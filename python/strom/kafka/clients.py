"""Kafka clients as the runtime uses them: their configs, the columnar
producer (``strom._core.KafkaProducer``: librdkafka driven from Rust,
partitioning as Kafka's Java client does), the errors they raise and the
relay of their log lines into Python logging. The consumer is in
``strom.kafka.consumer``; the admin client is confluent-kafka's."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from strom._core import KafkaConsumer
from strom._core import KafkaProducer as NativeProducer
from strom.config import EXACTLY_ONCE_V2
from strom.errors import ConfigError, FailedRecord, ProductionError, StromError
from strom.processor.internals.error_handling import (
    UNKNOWN_CONTEXT,
    continue_after,
    dead_letter_headers,
)

if TYPE_CHECKING:
    from strom.config import StreamsConfig

log = logging.getLogger("strom.kafka")
# librdkafka's own log lines.
client_log = logging.getLogger("strom.kafka.client")

# How long a client call that should be quick (metadata, committed offsets) may take.
REQUEST_TIMEOUT_S = 60.0
# One attempt of such a call inside ``retrying``: after a broker stops, a call
# can wait out its whole timeout on stale metadata where a new try succeeds.
ATTEMPT_TIMEOUT_S = 10.0


class KafkaClientError(StromError):
    """A Kafka client call failed (the cause is chained)."""


T = TypeVar("T")


# Commit errors that mean the group rebalanced under the committer (Kafka's
# CommitFailedException), not that the cluster failed.
REBALANCED = frozenset(
    {
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError._ASSIGNMENT_LOST,
    }
)


def retrying(
    call: Callable[[], T],
    what: str,
    refresh: Callable[[], object] | None = None,
    also: frozenset[int] = frozenset(),
) -> T:
    """``call()``, again while it fails with a retriable error (a leader that
    moved, metadata not yet propagated, a coordinator still loading) or one
    of the error codes ``also`` names.
    ``refresh`` runs before each new try: librdkafka keeps sending a
    partition's requests to a stopped leader until its metadata is refreshed,
    which for a partition it does not fetch from happens only every
    ``topic.metadata.refresh.interval.ms`` (5 minutes)."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while True:
        try:
            return call()
        except KafkaException as exc:  # noqa: PERF203 - a retry loop
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and (
                error.retriable()
                or error.code() in also
                or error.code()
                in (
                    KafkaError.NOT_LEADER_FOR_PARTITION,
                    KafkaError.LEADER_NOT_AVAILABLE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError._UNKNOWN_PARTITION,  # local metadata lags a new leader
                    KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.COORDINATOR_NOT_AVAILABLE,
                    KafkaError._TIMED_OUT,
                )
            )
            if not retriable or time.monotonic() > deadline:
                raise KafkaClientError(f"{what} failed: {exc}") from exc
            log.debug("%s: %s (retrying)", what, exc)
            time.sleep(0.1)
            if refresh is not None:
                try:
                    refresh()
                except KafkaException as refresh_exc:
                    log.debug("%s: refreshing metadata: %s", what, refresh_exc)


def _common(config: StreamsConfig) -> dict[str, Any]:
    return {"bootstrap.servers": config["bootstrap.servers"]}


def consumer_config(
    config: StreamsConfig, client_id: str, *, group: bool, prefix: str = "main.consumer."
) -> dict[str, Any]:
    """A consumer that never commits by itself; read_committed under EOS.
    ``consumer.``-prefixed and plain client keys pass through, then the more
    specific ``main.consumer.``/``restore.consumer.`` ones."""
    out = _common(config) | {
        "client.id": client_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": config["auto.offset.reset"],
        "isolation.level": (
            "read_committed"
            if config["processing.guarantee"] == EXACTLY_ONCE_V2
            else "read_uncommitted"
        ),
        # Fetch in large steps and keep a deep prefetch queue, so a poll
        # finds records waiting (librdkafka's 1 MiB per partition and fetch
        # queue of 100,000 records kept the stream thread waiting on fetches;
        # queued.max.messages.kbytes still caps the queue at 64 MiB).
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "queued.min.messages": 1_000_000,
    }
    if group:
        out |= {
            "group.id": config.application_id,
            "partition.assignment.strategy": "cooperative-sticky",
        }
    else:
        # Read by assignment: no group.id, so it joins no group and asks no
        # coordinator (Kafka Streams' restore and global consumers have none).
        out |= {"enable.partition.eof": True}
    out |= config.client_config("consumer.")
    out |= {k.removeprefix(prefix): v for k, v in config.items() if k.startswith(prefix)}
    return out


# librdkafka's batch.size default (bytes per batch, framing included).
_DEFAULT_BATCH_BYTES = 1_000_000


def producer_config(
    config: StreamsConfig,
    client_id: str,
    transactional_id: str | None,
    max_message_bytes: int | None = None,
) -> dict[str, Any]:
    """``max_message_bytes``: the smallest ``max.message.bytes`` of the topics
    the app writes. The broker rejects a whole batch over it and librdkafka
    does not split it (the Java producer does), so batches are kept under
    it: a record too large for its topic then fails alone, and the production
    exception handler drops it without taking others with it."""
    out = _common(config) | {
        "client.id": client_id,
        # Kafka Streams' producer defaults: no loss, order kept per partition.
        "acks": "all",
        "enable.idempotence": True,
        # librdkafka's default, not Kafka Streams' 100 ms: a record leaves
        # within 5 ms (batches still fill at high rates), and a commit's
        # flush waits at most that long for what lingers.
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
    }
    if max_message_bytes is not None and max_message_bytes < _DEFAULT_BATCH_BYTES:
        out["batch.size"] = max_message_bytes
    if transactional_id is not None:
        out |= {"transactional.id": transactional_id, "transaction.timeout.ms": 10_000}
    out |= config.client_config("producer.")
    return out


def admin_config(config: StreamsConfig) -> dict[str, Any]:
    # librdkafka's admin client is a producer underneath, whose metadata
    # requests would have the broker create a topic they name (with the
    # broker's defaults) where the app only looks it up.
    return (
        _common(config)
        # librdkafka's log lines go to Python logging, not to stderr.
        | {"allow.auto.create.topics": False, "logger": client_log}
        | config.client_config("admin.")
    )


def native_config(conf: Mapping[str, Any]) -> dict[str, str]:
    """librdkafka settings as the native clients take them: strings, with
    booleans as librdkafka spells them. Python callbacks cannot be passed."""
    out = {}
    for key, value in conf.items():
        if callable(value):
            raise ConfigError(
                f"Kafka client setting {key!r} is a Python callable; strom's clients run in "
                "native code and take only values"
            )
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


# librdkafka's syslog levels as logging's.
_LEVELS = {
    0: logging.CRITICAL,
    1: logging.CRITICAL,
    2: logging.CRITICAL,
    3: logging.ERROR,
    4: logging.WARNING,
    5: logging.INFO,
    6: logging.INFO,
    7: logging.DEBUG,
}
# At most one line per client and facility this often (a broker that is down
# is reported once a second); the suppressed ones are counted.
_LOG_EVERY_S = 10.0
_last_logged: dict[tuple[str, str], tuple[float, int]] = {}


def relay_client_events(native: KafkaConsumer | NativeProducer, client_id: str) -> None:
    """Passes a native client's log lines to the ``strom.kafka.client``
    logger, rate-limited per facility."""
    lines, dropped = native.take_logs()
    now = time.monotonic()
    for level, facility, message in lines:
        key = (client_id, facility)
        last, suppressed = _last_logged.get(key, (-_LOG_EVERY_S, 0))
        if now - last < _LOG_EVERY_S:
            _last_logged[key] = (last, suppressed + 1)
            continue
        _last_logged[key] = (now, 0)
        more = f" ({suppressed} similar line(s) suppressed)" if suppressed else ""
        client_log.log(
            _LEVELS.get(level, logging.DEBUG), "%s: %s: %s%s", client_id, facility, message, more
        )
    if dropped:
        client_log.debug("%s: %d log line(s) dropped", client_id, dropped)


# Errors the handler never sees (Kafka's RecordCollectorImpl): a fenced
# producer (its tasks migrate), and fatal ones (security, invalid topic).
_FENCED = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError.INVALID_PRODUCER_ID_MAPPING,
}
_FATAL = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION,
    KafkaError.TOPIC_EXCEPTION,
    KafkaError.UNKNOWN,
}
# Records purged when a transaction is aborted: a follow-up of the real error.
_PURGED = {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}


class DeliveryFailures:
    """Applies ``production.exception.handler`` to records the producer could
    not write. Outlives a replaced producer (its counts are the thread's).

    ``errors`` are failures to raise and forget (the caller may retry, e.g.
    a fenced producer reopens its tasks); ``fatal`` is sticky, so no later
    commit covers a failed record."""

    def __init__(self, config: StreamsConfig) -> None:
        self.handler = config["production.exception.handler"]
        self.dead_letters: str | None = config["errors.dead.letter.queue.topic.name"]
        self.eos = config["processing.guarantee"] == EXACTLY_ONCE_V2
        self.dropped = 0
        self.errors: list[str] = []
        self.fatal: ProductionError | None = None
        # Dead letters to produce once the client call that found them returns.
        self.pending: list[tuple[str, bytes | None, bytes | None, int, Any]] = []

    def failed(
        self,
        error: KafkaError,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        *,
        queued: bool,
    ) -> None:
        """A record for ``topic-partition`` failed with ``error``; ``queued``:
        the client had accepted it (a delivery report), else ``produce``
        refused it outright."""
        where = f"{topic}-{partition}" if partition >= 0 else topic
        code = error.code()
        if code in _PURGED:
            return
        message = f"producing to {where} failed: {error.str()}"
        if code in _FENCED or error.fatal() or code in _FATAL:
            self.errors.append(message)
            return
        exc = KafkaClientError(message)
        record = FailedRecord(topic, partition, key, value, timestamp)
        context = UNKNOWN_CONTEXT
        try:
            go_on = continue_after(self.handler, context, record, exc)
        except ProductionError as user_error:
            self._fail(str(user_error))
            return
        if self.dead_letters is not None and topic != self.dead_letters:
            self.pending.append(
                (self.dead_letters, key, value, timestamp, dead_letter_headers(exc, context))
            )
        if go_on and queued and self.eos:
            # librdkafka aborts the open transaction on any failed record.
            self._fail(
                f"{message}; under exactly_once_v2 a record the broker rejects aborts the "
                "transaction, so the production.exception.handler cannot skip it"
            )
        elif go_on:
            self.dropped += 1
            log.warning("%s; dropping the record (production.exception.handler)", message)
        else:
            self._fail(f"{message} (production.exception.handler: fail)")

    def _fail(self, message: str) -> None:
        log.error("%s", message)
        if self.fatal is None:
            self.fatal = ProductionError(message)


class KafkaProducer:
    """The thread's producer behind ``RecordCollector``: columns in, records
    out, keyed records on ``murmur2(key) % partitions`` like Kafka's Java
    producer (so strom and Kafka Streams apps agree on co-partitioning).

    Remembers, per partition, the offset after the last record it wrote (the
    changelog offsets a store commit reflects). With a ``transactional_id``
    it runs transactions: one is begun before the first record after a commit.
    """

    def __init__(
        self,
        conf: dict[str, Any],
        partition_count: Callable[[str], int],
        transactional: bool,
        failures: DeliveryFailures,
    ) -> None:
        self._partition_count = partition_count
        self.transactional = transactional
        self.in_transaction = False
        self.written: dict[tuple[str, int], int] = {}
        self.failures = failures
        self.client_id = str(conf.get("client.id", "producer"))
        # Past it the coordinator aborts an open transaction on its own.
        self.transaction_timeout_s = int(conf.get("transaction.timeout.ms", 60_000)) / 1000
        self._producer: NativeProducer | None = NativeProducer(native_config(conf))
        if transactional:
            self.native.init_transactions(REQUEST_TIMEOUT_S)

    @property
    def native(self) -> NativeProducer:
        if self._producer is None:
            raise StromError("the producer is closed")
        return self._producer

    def begin(self) -> None:
        if self.transactional and not self.in_transaction:
            self.native.begin_transaction()
            self.in_transaction = True

    def produce_columns(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int] | None = None,
        partitions: Sequence[int] | None = None,
    ) -> None:
        self.begin()
        count = self._partition_count(topic) if partitions is None else 1
        self.native.produce_columns(
            topic,
            keys,
            values,
            None if timestamps is None else list(timestamps),
            None if partitions is None else list(partitions),
            count,
        )
        self._collect()
        self.raise_errors()

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        timestamp: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> None:
        """One record with headers (a dead letter), on the client's partitioner."""
        self.begin()
        self.native.produce(topic, key, value, timestamp or 0, list(headers or []))
        self._collect()

    def _collect(self) -> None:
        """Takes in what the client reported: acknowledged ends, failed records, log lines."""
        native = self.native
        written = self.written
        for topic, partition, end in native.take_written():
            if end > written.get((topic, partition), -1):
                written[(topic, partition)] = end
        for topic, partition, key, value, timestamp, error, queued in native.take_failures():
            self.failures.failed(error, topic, partition, key, value, timestamp, queued=queued)
        relay_client_events(native, self.client_id)

    def forget(self, topic: str, partition: int) -> None:
        """Forgets what was written to a partition (a changelog being restored)."""
        self.written.pop((topic, partition), None)
        self.native.forget_written(topic, partition)

    def _produce_dead_letters(self) -> None:
        pending, self.failures.pending = self.failures.pending, []
        for topic, key, value, timestamp, headers in pending:
            self.produce(topic, key, value, timestamp=max(timestamp, 0), headers=headers)

    def raise_errors(self) -> None:
        self._produce_dead_letters()
        if self.failures.fatal is not None:
            raise self.failures.fatal  # sticky: nothing commits past a failed record
        errors = self.failures.errors
        if errors:
            self.failures.errors = []
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise KafkaClientError(errors[0] + more)

    def flush(self) -> None:
        """Waits until every record is acknowledged (or failed: raises)."""
        while True:
            while self.native.flush(REQUEST_TIMEOUT_S) > 0:
                self._collect()
                log.warning("producer: records still unacknowledged after %.0fs", REQUEST_TIMEOUT_S)
            self._collect()
            if not self.failures.pending:
                break
            self._produce_dead_letters()
        self.raise_errors()

    def send_offsets(
        self, offsets: Sequence[TopicPartition], consumer: KafkaConsumer, timeout: float
    ) -> None:
        """Adds the input offsets (with their metadata) to the open transaction."""
        self.native.send_offsets_to_transaction(
            [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets], consumer, timeout
        )

    def commit_transaction(self) -> None:
        self.native.commit_transaction(REQUEST_TIMEOUT_S)
        self.in_transaction = False

    def abort_transaction(self) -> None:
        try:
            self.native.abort_transaction(REQUEST_TIMEOUT_S)
        finally:
            self.in_transaction = False
            self._collect()

    def abandon(self) -> None:
        """Drops the client without touching it (a call on it is stuck)."""
        self._producer = None
        self.in_transaction = False

    def close(self) -> None:
        """Flushes what it can and releases the client (idempotent)."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.flush(5.0)
        except KafkaException:
            log.debug("producer flush on close failed", exc_info=True)
