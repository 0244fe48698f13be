"""Topics as the topic verbs (``topics``, ``produce``, ``tail``) see them, on
the embedded log (``embedded:PATH``) or on Kafka (``host:port,…``, through
confluent-kafka's public clients: ``pip install 'strom[kafka]'``)."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import click

from strom.cli.common import (
    BadInput,
    CommandError,
    check_bootstrap,
    merged_settings,
    settings_options,
)
from strom.embedded import EmbeddedLog

EMBEDDED = "embedded:"
# How long a Kafka request of these verbs may take before it is reported.
REQUEST_TIMEOUT_S = 30.0

Headers = list[tuple[str, bytes | None]]


class Consumed(NamedTuple):
    """A record read back, whatever the cluster."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers


class Outgoing(NamedTuple):
    """A record to write; ``partition`` None: the key's partition (murmur2, as
    Kafka's Java producer), ``timestamp`` None: now."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    partition: int | None = None
    headers: Headers | None = None


@dataclass
class PartitionInfo:
    partition: int
    start: int  # log start offset
    end: int  # end offset: the next record's offset
    leader: int | None = None
    replicas: list[int] = field(default_factory=list)
    in_sync: list[int] = field(default_factory=list)


@dataclass
class TopicInfo:
    name: str
    partitions: list[PartitionInfo]
    config: dict[str, str]  # the embedded log: every key; Kafka: the topic's own settings


@dataclass(frozen=True)
class Start:
    """Where reading begins in each partition: its first record, or ``last``
    records before its end (0: only what arrives from now on)."""

    from_beginning: bool = False
    last: int = 0

    def offset(self, start: int, end: int) -> int:
        return start if self.from_beginning else max(start, end - self.last)


class Cluster(ABC):
    """What the topic verbs do with topics; one implementation per transport."""

    where: str

    @abstractmethod
    def topics(self) -> list[str]: ...

    @abstractmethod
    def describe(self, topic: str) -> TopicInfo: ...

    @abstractmethod
    def create(
        self, topic: str, partitions: int, replication_factor: int | None, config: dict[str, str]
    ) -> None: ...

    @abstractmethod
    def delete(self, topic: str) -> None: ...

    @abstractmethod
    def produce(self, topic: str, records: Iterable[Outgoing], done: Callable[[int], None]) -> int:
        """Writes ``records``, calling ``done(n)`` as they are accepted;
        returns how many were written."""

    @abstractmethod
    def read(
        self,
        topic: str,
        start: Start,
        *,
        follow: bool,
        stopped: Callable[[], bool],
        started: Callable[[], None] = lambda: None,
    ) -> Iterator[Consumed]:
        """Records from ``start`` to the end offsets; with ``follow``, then
        every record that arrives, until ``stopped()``. ``started()`` is
        called once the start offsets are fixed: what is written after it
        is read."""

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def cluster_options(command: Any) -> Any:
    """``--bootstrap-servers`` (or $STROM_BOOTSTRAP_SERVERS) and the client settings."""
    command = settings_options("the Kafka clients' settings (security.protocol, sasl.*, ssl.*, …)")(
        command
    )
    return click.option(
        "--bootstrap-servers",
        "--bootstrap-server",
        "-b",
        required=True,
        envvar="STROM_BOOTSTRAP_SERVERS",
        show_envvar=True,
        help="host:port,… of a Kafka cluster, or embedded:PATH (the embedded log)",
    )(command)


def embedded_path(servers: str) -> Path | None:
    """The log directory of ``embedded:PATH``; None for a Kafka list."""
    if not servers.startswith(EMBEDDED):
        return None
    path = servers.removeprefix(EMBEDDED)
    if not path:
        raise BadInput(f"bootstrap servers {servers!r}: the embedded log is embedded:PATH")
    return Path(path)


def open_cluster(
    servers: str,
    config_file: Path | None,
    settings: dict[str, str],
    *,
    must_exist: bool = True,
) -> Cluster:
    """The cluster at ``servers``; an embedded log must exist unless
    ``must_exist`` is False (``topics create`` makes one)."""
    path = embedded_path(servers)
    if path is not None:
        if settings or config_file is not None:
            raise BadInput(
                "--config-file and --set are Kafka client settings; the embedded log takes none"
            )
        if must_exist and not path.is_dir():
            raise CommandError(f"there is no embedded log at {path}")
        return EmbeddedCluster(path)
    check_bootstrap(servers)
    return KafkaCluster(servers, merged_settings(config_file, settings))


# --- the embedded log -------------------------------------------------------------


class EmbeddedCluster(Cluster):
    def __init__(self, path: Path) -> None:
        self.where = f"{EMBEDDED}{path}"
        self.log = EmbeddedLog(path)

    def topics(self) -> list[str]:
        return self.log.topics()

    def describe(self, topic: str) -> TopicInfo:
        starts = self.log.log_start_offsets(topic)
        ends = self.log.end_offsets(topic)
        partitions = [PartitionInfo(p, starts[p], ends[p]) for p in sorted(ends)]
        return TopicInfo(topic, partitions, self.log.topic_config(topic))

    def create(
        self, topic: str, partitions: int, replication_factor: int | None, config: dict[str, str]
    ) -> None:
        if replication_factor not in (None, 1):
            raise BadInput("the embedded log keeps one copy: --replication-factor must be 1")
        self.log.create_topic(topic, partitions, config)

    def delete(self, topic: str) -> None:
        self.log.delete_topic(topic)

    def produce(self, topic: str, records: Iterable[Outgoing], done: Callable[[int], None]) -> int:
        self.log.partitions(topic)  # an unknown topic is refused before any record is read
        count = 0
        with self.log.producer() as producer:
            for record in records:
                producer.produce(
                    topic,
                    record.key,
                    record.value,
                    timestamp=record.timestamp,
                    partition=record.partition,
                    headers=record.headers,
                )
                count += 1
                done(1)
        return count

    def read(
        self,
        topic: str,
        start: Start,
        *,
        follow: bool,
        stopped: Callable[[], bool],
        started: Callable[[], None] = lambda: None,
    ) -> Iterator[Consumed]:
        if follow:
            raise BadInput(
                "--follow needs Kafka: the embedded log is open in one process at a time, "
                "so nothing else can write to it while strom tail reads it"
            )
        starts = self.log.log_start_offsets(topic)
        ends = self.log.end_offsets(topic)
        started()
        for partition, end in sorted(ends.items()):
            offset = start.offset(starts[partition], end)
            while offset < end and not stopped():
                batch = self.log.read_batch(topic, partition, offset, min(500, end - offset))
                for r in batch.records():
                    yield Consumed(
                        topic, partition, r.offset, r.timestamp, r.key, r.value, r.headers or []
                    )
                offset = batch.next_offset

    def close(self) -> None:
        self.log.close()


# --- Kafka ---------------------------------------------------------------------------


def confluent_kafka() -> Any:
    """The confluent_kafka module, or a one-line error saying how to install it."""
    try:  # an optional dependency, with its admin module (not imported by the package)
        import confluent_kafka as module  # noqa: PLC0415
        import confluent_kafka.admin  # noqa: PLC0415
    except ImportError:
        raise CommandError(
            "talking to Kafka needs confluent-kafka: pip install 'strom[kafka]'"
        ) from None
    return module


class KafkaCluster(Cluster):
    def __init__(self, servers: str, settings: dict[str, Any]) -> None:
        self.where = servers
        self.kafka = confluent_kafka()
        self.conf = {
            **{k: str(v) for k, v in settings.items()},
            "bootstrap.servers": servers,
            # librdkafka's own lines go through logging, not straight to stderr.
            "logger": logging.getLogger("strom.cli.kafka"),
        }
        self._admin: Any = None

    def _client_error(self, what: str, exc: Exception) -> CommandError:
        error = exc.args[0] if exc.args else exc
        reason = error.str() if hasattr(error, "str") else str(error)
        return CommandError(f"{what} failed: {reason}")

    @property
    def admin(self) -> Any:
        if self._admin is None:
            try:
                self._admin = self.kafka.admin.AdminClient(self.conf)
            except self.kafka.KafkaException as exc:  # a setting librdkafka rejects
                raise self._client_error("creating the admin client", exc) from exc
        return self._admin

    def _metadata(self) -> Any:
        # Every topic: a metadata request naming a topic would have a broker
        # with auto.create.topics.enable (its default) create a mistyped name.
        try:
            return self.admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        except self.kafka.KafkaException as exc:
            raise self._client_error(f"listing the topics of {self.where}", exc) from exc

    def _topic(self, topic: str) -> Any:
        found = self._metadata().topics.get(topic)
        if found is None:
            raise CommandError(f"there is no topic {topic!r} at {self.where}")
        if found.error is not None:
            raise CommandError(f"topic {topic!r} at {self.where}: {found.error.str()}")
        return found

    def topics(self) -> list[str]:
        return sorted(self._metadata().topics)

    def describe(self, topic: str) -> TopicInfo:
        meta = self._topic(topic)
        consumer = self._consumer()
        try:
            partitions = []
            for p in sorted(meta.partitions.values(), key=lambda m: m.id):
                low, high = consumer.get_watermark_offsets(
                    self.kafka.TopicPartition(topic, p.id), timeout=REQUEST_TIMEOUT_S
                )
                partitions.append(
                    PartitionInfo(p.id, low, high, p.leader, list(p.replicas), list(p.isrs))
                )
        finally:
            consumer.close()
        return TopicInfo(topic, partitions, self._own_config(topic))

    def _own_config(self, topic: str) -> dict[str, str]:
        resource = self.kafka.admin.ConfigResource(self.kafka.admin.ResourceType.TOPIC, topic)
        try:
            (future,) = self.admin.describe_configs([resource]).values()
            entries = future.result(timeout=REQUEST_TIMEOUT_S)
        except self.kafka.KafkaException as exc:
            raise self._client_error(f"describing the config of {topic!r}", exc) from exc
        # The topic's own settings, as kafka-topics --describe shows them
        # (not the broker's, which every topic inherits).
        own = self.kafka.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        return {
            name: str(entry.value)
            for name, entry in sorted(entries.items())
            if entry.source == own and entry.value is not None
        }

    def create(
        self, topic: str, partitions: int, replication_factor: int | None, config: dict[str, str]
    ) -> None:
        new = self.kafka.admin.NewTopic(
            topic,
            num_partitions=partitions,
            replication_factor=-1 if replication_factor is None else replication_factor,
            config=config,
        )
        self._await(self.admin.create_topics([new]), f"creating topic {topic!r}")

    def delete(self, topic: str) -> None:
        self._await(self.admin.delete_topics([topic]), f"deleting topic {topic!r}")

    def _await(self, futures: dict[str, Any], what: str) -> None:
        try:
            for future in futures.values():
                future.result(timeout=REQUEST_TIMEOUT_S)
        except self.kafka.KafkaException as exc:
            raise self._client_error(what, exc) from exc

    def produce(self, topic: str, records: Iterable[Outgoing], done: Callable[[int], None]) -> int:
        self._topic(topic)  # an unknown topic is refused before any record is read
        # Java's default partitioner (murmur2 of the serialized key), where
        # Kafka Streams and the embedded log put a key; librdkafka's differs.
        producer = self.kafka.Producer({**self.conf, "partitioner": "murmur2_random"})
        failures: list[str] = []

        def delivered(error: Any, _message: Any) -> None:
            if error is not None:
                failures.append(error.str())
            else:
                done(1)

        count = 0
        for record in records:
            extra: dict[str, Any] = {}
            if record.partition is not None:
                extra["partition"] = record.partition
            if record.timestamp is not None:
                extra["timestamp"] = record.timestamp
            if record.headers:
                extra["headers"] = record.headers
            while True:
                try:
                    producer.produce(
                        topic, record.value, record.key, on_delivery=delivered, **extra
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
            if failures:
                break
        left = producer.flush(REQUEST_TIMEOUT_S)
        if failures:
            raise CommandError(
                f"writing to {topic!r} failed: {failures[0]} "
                f"({len(failures)} record(s) not written)"
            )
        if left:
            raise CommandError(
                f"writing to {topic!r}: {left} record(s) not acknowledged "
                f"within {REQUEST_TIMEOUT_S:.0f} s"
            )
        return count

    def _consumer(self, **extra: Any) -> Any:
        # confluent-kafka wants a group.id even for a consumer that only assigns
        # partitions; nothing is ever committed for it.
        conf = {
            **self.conf,
            "group.id": "strom-cli",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            **extra,
        }
        try:
            return self.kafka.Consumer(conf)
        except self.kafka.KafkaException as exc:
            raise self._client_error("creating the consumer", exc) from exc

    def read(
        self,
        topic: str,
        start: Start,
        *,
        follow: bool,
        stopped: Callable[[], bool],
        started: Callable[[], None] = lambda: None,
    ) -> Iterator[Consumed]:
        meta = self._topic(topic)
        consumer = self._consumer(**{"enable.partition.eof": True})
        tp = self.kafka.TopicPartition
        try:
            assignment = []
            for partition in sorted(meta.partitions):
                low, high = consumer.get_watermark_offsets(
                    tp(topic, partition), timeout=REQUEST_TIMEOUT_S
                )
                assignment.append(tp(topic, partition, start.offset(low, high)))
            consumer.assign(assignment)
            started()
            # Without --follow: until every partition reported reaching its end.
            pending = {p.partition for p in assignment}
            eof = self.kafka.KafkaError._PARTITION_EOF
            while (follow or pending) and not stopped():
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is not None and error.code() == eof:
                    pending.discard(message.partition())
                    continue
                if error is not None:
                    raise CommandError(f"reading {topic!r} failed: {error.str()}")
                _, timestamp = message.timestamp()
                yield Consumed(
                    topic,
                    message.partition(),
                    message.offset(),
                    timestamp,
                    message.key(),
                    message.value(),
                    list(message.headers() or []),
                )
        finally:
            consumer.close()

    def close(self) -> None:
        self._admin = None
