"""Kafka clients as the runtime uses them: their configs, the columnar
producer (``strom._core.KafkaProducer``: librdkafka driven from Rust,
partitioning as Kafka's Java client does), the errors they raise and the
relay of their log lines into Python logging. The consumer is in
``strom.kafka.consumer``; the admin client is confluent-kafka's (``Admin``
keeps the errors it reports on the side)."""

from __future__ import annotations

import concurrent.futures
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from strom._core import ExprPipeline, KafkaConsumer, RecordBatch
from strom._core import KafkaProducer as NativeProducer
from strom.config import EXACTLY_ONCE_V2
from strom.errors import ConfigError, FailedRecord, ProductionError, StromError
from strom.kafka.security import (
    AUTHENTICATION,
    AUTHORIZATION,
    KafkaSecurityError,
    authentication_error,
    authorization_error,
    principal_of,
    topic_denied,
)
from strom.metadata import HostInfo
from strom.processor.internals.error_handling import (
    UNKNOWN_CONTEXT,
    handler_verdict,
)
from strom.processor.internals.internal_topics import is_internal_topic

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


def _librdkafka_offset_reset(policy: str) -> str:
    """librdkafka's reset for a committed offset out of range (strom places
    partitions without one itself): ``none`` is its ``error``; it has no
    reset by duration, so that one reads from the log start and loses nothing."""
    return {"none": "error", "latest": "latest"}.get(policy, "earliest")


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
        "auto.offset.reset": _librdkafka_offset_reset(config["auto.offset.reset"]),
        "isolation.level": (
            "read_committed"
            if config["processing.guarantee"] == EXACTLY_ONCE_V2
            else "read_uncommitted"
        ),
        # Fetch in large steps and keep a deep prefetch queue, so a poll
        # finds records waiting (librdkafka's 1 MiB per partition and fetch
        # queue of 100,000 records kept the stream thread waiting on fetches;
        # queued.max.messages.kbytes still caps the queue at 64 MiB). A
        # response holds at most 16 MiB (not librdkafka's 50): the first
        # records arrive sooner, and the consumer spends less CPU-time on
        # memory for the same throughput (benches/kafka_throughput.py).
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        "fetch.max.bytes": 16 * 1024 * 1024,
        "queued.min.messages": 1_000_000,
    }
    if group:
        out |= {
            "group.id": config.application_id,
            "partition.assignment.strategy": "cooperative-sticky",
            # A member learns of a rebalance from its next heartbeat, and the
            # cooperative protocol takes two: with librdkafka's 3 s a stream
            # thread (or instance) that joins a running group got work ~6 s later.
            "heartbeat.interval.ms": 500,
        }
    else:
        # Read by assignment: no group.id, so it joins no group and asks no
        # coordinator (Kafka Streams' restore and global consumers have none).
        out |= {"enable.partition.eof": True}
    out |= config.client_config("consumer.")
    out |= {k.removeprefix(prefix): v for k, v in config.items() if k.startswith(prefix)}
    # As Kafka Streams: the id is the thread's, whatever the settings say
    # (instances find each other by the group consumers' ids).
    out["client.id"] = client_id
    return own_group(out, config.application_id if group else None)


_ignored_groups: set[str] = set()


def own_group(conf: Mapping[str, Any], group: str | None) -> dict[str, Any]:
    """``conf`` in consumer group ``group`` (None: in none), whatever
    ``group.id`` the user's settings gave: as in Kafka Streams, the only group
    is ``application.id``, so no setting can make a consumer commit for
    another group or look one up (a lookup asks for the group's ACL)."""
    out = {k: v for k, v in conf.items() if k != "group.id"}
    given = conf.get("group.id")
    if given is not None and given != group and given not in _ignored_groups:
        _ignored_groups.add(given)
        log.warning(
            "ignoring the consumer setting group.id=%s: strom's only consumer group is the "
            "application.id, and its other consumers read by assignment in no group",
            given,
        )
    if group is not None:
        out["group.id"] = group
    return out


# One attempt of init_transactions (the client's errors are looked at between two).
_INIT_ATTEMPT_S = 1.0

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
        # Not Kafka Streams' 100 ms nor librdkafka's 5: a record leaves within
        # 1 ms (p50 2 ms end to end at 2,000 records/s, docs/kafka.md), and at
        # high rates batches still fill while requests are in flight
        # (throughput measured no lower than with 5 ms).
        "linger.ms": 1,
        "queue.buffering.max.messages": 1_000_000,
    }
    if max_message_bytes is not None and max_message_bytes < _DEFAULT_BATCH_BYTES:
        out["batch.size"] = max_message_bytes
    if transactional_id is not None:
        out |= {"transactional.id": transactional_id, "transaction.timeout.ms": 10_000}
    out |= config.client_config("producer.")
    out["client.id"] = client_id
    return out


def admin_client(config: StreamsConfig) -> Admin:
    """The app's admin client."""
    return Admin(admin_config(config), config.application_id)


def describe_group(admin: AdminClient, group: str, purpose: str) -> Any | None:
    """The consumer group's description (its state, and each member's client
    id and assignment); None when it cannot be had now."""
    try:
        futures = admin.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
        return futures[group].result()
    except KafkaException as exc:
        log.debug("%s: cannot describe the group (%s)", purpose, exc)
        return None


# An instance's application.server travels in its stream threads' group
# consumer client ids: how instances learn each other's (strom.kafka.instances).
SERVER_MARK = "@"
THREAD_MARK = "-StreamThread-"


def main_consumer_client_id(thread_name: str, server: HostInfo | None) -> str:
    """The client id of a stream thread's group consumer, carrying the
    instance's ``application.server`` when it has one."""
    client_id = f"{thread_name}-consumer"
    return client_id if server is None else f"{client_id}{SERVER_MARK}{server.endpoint()}"


# A process id as strom.kafka.runtime.process_id makes them, just before the
# thread mark: found whatever client.id heads the client id.
_PROCESS_ID = re.compile(r"-(\d+-[0-9a-f]{8})" + re.escape(THREAD_MARK))


def member_instance(client_id: str, application_id: str) -> tuple[str, HostInfo | None] | None:
    """The process id and endpoint in a stream thread consumer's client id
    (None: not one of this application's stream threads)."""
    found = _PROCESS_ID.search(client_id)
    if found is not None:
        process_id, thread = found.group(1), client_id[found.end() :]
    else:
        prefix = f"{application_id}-"
        if not client_id.startswith(prefix) or THREAD_MARK not in client_id:
            return None
        process_id, _, thread = client_id[len(prefix) :].partition(THREAD_MARK)
    _, mark, endpoint = thread.partition(SERVER_MARK)
    if not mark:
        return process_id, None
    try:
        return process_id, HostInfo.build_from_endpoint(endpoint)
    except ValueError:
        return process_id, None


def admin_config(config: StreamsConfig) -> dict[str, Any]:
    # librdkafka's admin client is a producer underneath, whose metadata
    # requests would have the broker create a topic they name (with the
    # broker's defaults) where the app only looks it up.
    ids = {} if config["client.id"] is None else {"client.id": f"{config['client.id']}-admin"}
    return (
        _common(config)
        # librdkafka's log lines go to Python logging, not to stderr.
        | {"allow.auto.create.topics": False, "logger": client_log}
        | ids
        | config.client_config("admin.")
    )


# How often a wait on the admin client looks at the errors it reported.
_ADMIN_CHECK_S = 0.2


class Admin(AdminClient):
    """confluent-kafka's AdminClient, keeping the client-level errors it
    reports (``error_cb``). librdkafka reports a failed authentication or
    TLS handshake only there and keeps retrying, while the requests wait out
    their timeouts: ``result`` waits for a request's answer but raises such
    an error within moments."""

    def __init__(self, conf: Mapping[str, Any], application_id: str | None = None) -> None:
        self.servers = str(conf.get("bootstrap.servers"))
        self.principal = principal_of(conf)
        # Whose internal topics it looks at (for the ACLs an error asks for).
        self.application_id = application_id
        self._reported: list[KafkaError] = []
        # librdkafka's log lines go to Python logging, not to stderr.
        super().__init__({"logger": client_log} | dict(conf) | {"error_cb": self._reported.append})

    def check(self) -> None:
        """Raises the authentication or TLS failure reported so far, if any;
        other client errors are logged (rate-limited): librdkafka retries them."""
        self.poll(0)  # serves error_cb and the log lines
        reported, self._reported[:] = self._reported[:], []
        for error in reported:
            if error.code() in AUTHENTICATION:
                raise authentication_error(error, self.servers)
            transient.warn("admin client", None, error)

    def result(self, future: concurrent.futures.Future[T], timeout: float = REQUEST_TIMEOUT_S) -> T:
        """The request's answer (its error raised as ``KafkaException``), or
        the authentication/TLS failure that keeps it from being sent."""
        deadline = time.monotonic() + timeout + 1.0  # the request times itself out
        while True:
            self.check()
            try:
                return future.result(timeout=_ADMIN_CHECK_S)
            except concurrent.futures.TimeoutError:
                if time.monotonic() > deadline:
                    raise KafkaClientError(
                        f"the Kafka cluster at {self.servers} did not answer within {timeout:.0f} s"
                    ) from None


class Transient:
    """Logs transient client errors (the client retries them) at most once
    per ``every`` seconds per kind: a broker that is down reports itself
    every second."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self._last: dict[tuple[str, int], float] = {}

    def warn(self, client: str, where: tuple[str, int] | None, error: KafkaError) -> None:
        now = time.monotonic()
        key = (client, error.code())
        if now - self._last.get(key, -self.every) < self.every:
            return
        self._last[key] = now
        place = f" ({where[0]}-{where[1]})" if where else ""
        log.warning("%s%s: %s (retrying)", client, place, error.str())


transient = Transient()


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
# producer (its tasks migrate), and fatal ones (an invalid topic; security
# errors are KafkaSecurityErrors, see DeliveryFailures.failed).
_FENCED = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER,
    KafkaError.INVALID_PRODUCER_ID_MAPPING,
}
_FATAL = {KafkaError.TOPIC_EXCEPTION, KafkaError.UNKNOWN}
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
        # Whose resources an authorization error names, and how to grant them.
        self.application_id = config.application_id
        self.servers = str(config["bootstrap.servers"])
        self.principal = principal_of(config.client_config("producer."))
        self.dropped = 0
        self.errors: list[str] = []
        self.fatal: StromError | None = None
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
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> None:
        """A record for ``topic-partition`` failed with ``error``; ``queued``:
        the client had accepted it (a delivery report), else ``produce``
        refused it outright. Its ``headers`` go to the handler's context and
        head its dead letter."""
        where = f"{topic}-{partition}" if partition >= 0 else topic
        code = error.code()
        if code in _PURGED:
            return
        message = f"producing to {where} failed: {error.str()}"
        # Retrying cannot help: sticky, so the thread stops (no transaction redone).
        if code in AUTHORIZATION:
            self.deny(code, topic, message)
            return
        if code in AUTHENTICATION and self.fatal is None:
            self.fatal = authentication_error(error, self.servers)
            return
        if code in _FENCED or error.fatal() or code in _FATAL:
            self.errors.append(message)
            return
        exc = KafkaClientError(message)
        record = FailedRecord(topic, partition, key, value, timestamp)
        context = replace(UNKNOWN_CONTEXT, headers=list(headers or ()))
        try:
            verdict = handler_verdict(self.handler, context, record, exc)
        except ProductionError as user_error:
            self._fail(str(user_error))
            return
        go_on = verdict.go_on
        # A dead letter that failed itself is not dead-lettered again.
        default_topic = None if topic == self.dead_letters else self.dead_letters
        for letter in verdict.letters(default_topic, key, value, context, exc):
            stamp = timestamp if letter.timestamp is None else letter.timestamp
            self.pending.append((letter.topic, letter.key, letter.value, stamp, letter.headers))
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

    def deny(self, code: int, name: str, detail: str) -> None:
        """The producer was denied ``code`` (an authorization error) on topic
        or transactional id ``name``: fatal, with the ACL that grants it."""
        if self.fatal is not None:
            return
        if code == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            denied = authorization_error(
                "Write", "transactional id", name, detail, self.principal,
                grant=("Write", "Describe"), grant_name=f"{self.application_id}-",
            )  # fmt: skip
        elif code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            # Offsets sent to the transaction are committed for the group.
            denied = authorization_error("Read", "group", name, detail, self.principal)
        elif code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            # Brokers before Kafka 2.8 (KIP-679) ask idempotent producers for it.
            denied = authorization_error("IdempotentWrite", "cluster", "", detail, self.principal)
        else:
            denied = topic_denied("Write", name, detail, self.principal, self.application_id)
        log.error("%s", denied)
        self.fatal = denied


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
        # The topics written in the open transaction.
        self._transaction_topics: set[str] = set()
        self.written: dict[tuple[str, int], int] = {}
        self.failures = failures
        self.client_id = str(conf.get("client.id", "producer"))
        self.servers = str(conf.get("bootstrap.servers"))
        # Past it the coordinator aborts an open transaction on its own.
        self.transaction_timeout_s = int(conf.get("transaction.timeout.ms", 60_000)) / 1000
        self._producer: NativeProducer | None = NativeProducer(native_config(conf))
        self.transactional_id = str(conf.get("transactional.id"))
        if transactional:
            self._init_transactions()

    @property
    def native(self) -> NativeProducer:
        if self._producer is None:
            raise StromError("the producer is closed")
        return self._producer

    def _init_transactions(self) -> None:
        """Registers the transactional id, in short attempts (librdkafka lets
        a timed-out call be repeated) between which the client's errors are
        looked at: a failed authentication is raised at once, not after the
        whole timeout."""
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        while True:
            try:
                self.native.init_transactions(_INIT_ATTEMPT_S)
                return
            except KafkaException as exc:
                self._raise_denial(exc)
                # A repeated call returns what held the last one up (e.g.
                # a coordinator still loading): retriable, like a timeout.
                error = exc.args[0]
                again = error.code() == KafkaError._TIMED_OUT or error.retriable()
                if not again or time.monotonic() > deadline:
                    raise
            self.native.poll(0.1)  # takes in the client's errors (and backs off)
            self._collect()

    def begin(self) -> None:
        if self.transactional and not self.in_transaction:
            self.native.begin_transaction()
            self.in_transaction = True
            self._transaction_topics.clear()

    def produce_columns(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int] | None = None,
        partitions: Sequence[int] | None = None,
        headers: Sequence[list[tuple[str, bytes | None]] | None] | None = None,
    ) -> None:
        """Queues records given as columns; ``headers``: per record None or
        a list of ``(str, bytes | None)`` pairs (None: no record has any)."""
        self.begin()
        self._transaction_topics.add(topic)
        count = self._partition_count(topic) if partitions is None else 1
        self.native.produce_columns(
            topic,
            keys,
            values,
            None if timestamps is None else list(timestamps),
            None if partitions is None else list(partitions),
            count,
            headers,
        )
        self._collect()
        self.raise_errors()

    def produce_fused(
        self, topic: str, records: RecordBatch, pipeline: ExprPipeline
    ) -> tuple[int, int] | None:
        """Queues for ``topic`` what a task's fused expression steps let
        through of ``records``: the batch's largest timestamp and the offset
        after it, or None (nothing queued) when the batch must take the
        ordinary path."""
        self.begin()
        self._transaction_topics.add(topic)
        done = self.native.produce_fused(topic, records, pipeline, self._partition_count(topic))
        self._collect()
        self.raise_errors()
        return done

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
        self._transaction_topics.add(topic)
        self.native.produce(topic, key, value, timestamp or 0, list(headers or []))
        self._collect()

    def _collect(self) -> None:
        """Takes in what the client reported: acknowledged ends, failed records, log lines."""
        native = self.native
        written = self.written
        for topic, partition, end in native.take_written():
            if end > written.get((topic, partition), -1):
                written[(topic, partition)] = end
        for (
            topic,
            partition,
            key,
            value,
            timestamp,
            error,
            queued,
            headers,
        ) in native.take_failures():
            self.failures.failed(
                error, topic, partition, key, value, timestamp, queued=queued, headers=headers
            )
        relay_client_events(native, self.client_id)
        for error in native.take_errors():
            if error.code() in AUTHENTICATION:
                raise authentication_error(error, self.servers)
            transient.warn(self.client_id, None, error)

    def reported_through(self) -> tuple[int, bool]:
        """Serves the client's reports and returns how many epochs (from the
        first, see ``native.mark``) have every record reported, and whether
        failures among them sent dead letters (not reported yet). Raises as
        ``flush`` does when a failure is fatal."""
        native = self.native
        native.poll(0)
        done = native.reported_through()
        self._collect()  # the failures of those epochs are in by now
        dead_letters = bool(self.failures.pending)
        self.raise_errors()
        return done, dead_letters

    def forget(self, topic: str, partition: int) -> None:
        """Forgets what was written to a partition (a changelog being restored)."""
        self.written.pop((topic, partition), None)
        self.native.forget_written(topic, partition)

    def _produce_dead_letters(self) -> None:
        pending, self.failures.pending = self.failures.pending, []
        for topic, key, value, timestamp, headers in pending:
            self.produce(topic, key, value, timestamp=max(timestamp, 0), headers=headers)

    def raise_errors(self) -> None:
        fatal = self.failures.fatal
        if isinstance(fatal, KafkaSecurityError):
            # Denied: the open transaction is aborted once, here, and the
            # stream thread stops (nothing would let it commit).
            if self.in_transaction:
                try:
                    self.abort_transaction()
                except KafkaException as exc:
                    log.warning("%s: aborting the transaction failed: %s", self.client_id, exc)
            raise fatal
        self._produce_dead_letters()
        if fatal is not None:
            raise fatal  # sticky: nothing commits past a failed record
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
        try:
            self.native.send_offsets_to_transaction(
                [(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets],
                consumer,
                timeout,
            )
        except KafkaException as exc:
            self._raise_denial(exc)
            raise

    def commit_transaction(self) -> None:
        try:
            self.native.commit_transaction(REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            self._raise_denial(exc)
            raise
        self.in_transaction = False

    def _raise_denial(self, exc: KafkaException) -> None:
        """An authorization error is fatal (retrying the transaction cannot
        help): raised as one that names the denied resource."""
        error = exc.args[0] if exc.args else None
        if not isinstance(error, KafkaError) or error.code() not in AUTHORIZATION:
            return
        code, detail = error.code(), error.str()
        app = self.failures.application_id
        if code == KafkaError.GROUP_AUTHORIZATION_FAILED:
            name = app  # the offsets sent to the transaction are the group's
        elif code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            # The broker does not say which partition it could not add to
            # the transaction: the one topic written that is not the app's
            # own is the suspect.
            topics = sorted(self._transaction_topics)
            external = [t for t in topics if not is_internal_topic(app, t)]
            name = external[0] if len(external) == 1 else "<one of them>"
            detail += f"; the transaction wrote to {', '.join(topics)}"
        else:
            name = self.transactional_id
        self.failures.deny(code, name, detail)
        self.raise_errors()

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
