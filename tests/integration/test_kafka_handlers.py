"""The production and processing exception handlers and dead-letter records
on a real broker.

Semantics follow Kafka Streams 4.x RecordCollectorImpl (records the broker
rejects and, per KIP-399, records a sink cannot serialize go to the
ProductionExceptionHandler; CONTINUE drops and counts them, FAIL stops the
thread without committing past them) and KIP-1034's ``__streams.errors.*``
headers on dead-letter records (ExceptionHandlerUtils). A record whose
processing fails at a node goes to the ProcessingExceptionHandler (KIP-1033):
CONTINUE skips exactly that record, FAIL stops the app naming it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    ordered_producer,
    produce,
    read_all,
    unique,
)
from tests.kafka_harness import KafkaCluster
from tests.support import wait_until

from strom import KafkaStreams, State, StreamsBuilder, StreamsConfig, serdes
from strom.errors import (
    ApplicationShutdownRequested,
    DeadLetterRecord,
    ErrorHandlerContext,
    FailedRecord,
    ProductionError,
    Response,
    SerializationError,
    TaskError,
)
from strom.kafka.shutdown import ApplicationShutdown
from strom.kstream import Materialized

# The output topic's limit; the big record is well over it, the others far under.
MAX_MESSAGE_BYTES = 2000
BIG = "x" * 5000


class FailingString(serdes.Serde[str]):
    """A value serde that cannot serialize ``"boom"``."""

    def serialize(self, topic: str, data: str | None) -> bytes | None:
        if data == "boom":
            raise SerializationError("boom is not serializable")
        return None if data is None else data.encode()

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        return None if data is None else data.decode()


def _copy_topology(source: str, sink: str, value_serde: Any = None) -> Any:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
        .map_values(lambda v: v)
        .to(sink, key_serde=serdes.String(), value_serde=value_serde or serdes.String())
    )
    return builder.build()


def _records(values: list[str]) -> list[tuple[bytes | None, bytes | None, int]]:
    return [(b"k", v.encode(), BASE_TS + i) for i, v in enumerate(values)]


def _headers(message: Any) -> dict[str, bytes | None]:
    return dict(message.headers() or [])


def _origin(headers: dict[str, bytes | None]) -> tuple[bytes | None, ...]:
    """The input record a dead letter names: topic, partition, offset."""
    return tuple(headers[f"__streams.errors.{name}"] for name in ("topic", "partition", "offset"))


def _committed(boot: str, app_id: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": app_id})
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return int(tp.offset)
    finally:
        consumer.close()


def test_too_large_record_log_and_continue_goes_to_dead_letters(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("large")
    create_topics(boot, {source: 1, dead: 1})
    create_topics(boot, {sink: 1}, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    values = [f"v{i}" for i in range(40)]
    values.insert(15, BIG)
    producer = ordered_producer(boot)
    for key, value, timestamp in _records(values):
        # The big record's headers travel to its output record, which the
        # broker rejects: its dead letter starts with them.
        headers = [("trace", b"big")] if value == BIG.encode() else None
        producer.produce(source, value, key, timestamp=timestamp, headers=headers)
    assert producer.flush(30) == 0
    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{
            "production.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    with KafkaStreams(_copy_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["dropped-records"] == 1
    # Nothing else lost, in order: the records around it were not in its
    # batch (the producer keeps batches under the topic's limit).
    assert [m.value().decode() for m in read_all(boot, sink)] == [f"v{i}" for i in range(40)]
    [letter] = read_all(boot, dead)
    assert letter.value() == BIG.encode()
    assert letter.headers()[0] == ("trace", b"big")
    headers = _headers(letter)
    assert b"too large" in (headers["__streams.errors.message"] or b"").lower()
    assert (headers["__streams.errors.exception"] or b"").startswith(b"strom.")
    assert b"Traceback" in (headers["__streams.errors.stacktrace"] or b"")
    # The broker's rejection does not say which input record caused it.
    assert headers["__streams.errors.offset"] == b"-1"
    assert _committed(boot, app_id, source) == len(values)


def test_a_broker_rejection_handler_response_sends_its_own_dead_letter(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    # Kafka's ProductionExceptionHandler.Response.resume(records): the
    # handler's dead letter, not the default one.
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("own")
    create_topics(boot, {source: 1, dead: 1})
    create_topics(boot, {sink: 1}, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    values = ["a", BIG, "c"]
    produce(boot, source, _records(values))

    def handler(context: ErrorHandlerContext, record: FailedRecord, exc: Exception) -> Response:
        size = str(len(record.value or b"")).encode()
        return Response.resume([DeadLetterRecord(dead, record.key, size, timestamp=1)])

    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{"production.exception.handler": handler, "errors.dead.letter.queue.topic.name": dead},
    )
    with KafkaStreams(_copy_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["dropped-records"] == 1
    assert [m.value().decode() for m in read_all(boot, sink)] == ["a", "c"]
    [letter] = read_all(boot, dead)
    assert (letter.key(), letter.value(), letter.timestamp()[1]) == (
        b"k",
        str(len(BIG)).encode(),
        1,
    )


def test_too_large_record_log_and_fail_commits_nothing_past_it(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("large-fail")
    create_topics(boot, {source: 1})
    create_topics(boot, {sink: 1}, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    values = [f"v{i}" for i in range(30)]
    big_at = 10
    values.insert(big_at, BIG)
    produce(boot, source, _records(values))
    config = app_config(boot, app_id, str(tmp_path))
    app = KafkaStreams(_copy_topology(source, sink), config)
    with app, pytest.raises(ProductionError, match=rf"producing to {sink}-0 failed"):
        app.run_until_end(timeout=120)
    assert app.state is State.ERROR
    # No commit covers the failed record (a negative offset: none committed).
    assert _committed(boot, app_id, source) <= big_at


def test_serialization_error_through_the_handler(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("ser")
    create_topics(boot, {source: 1, sink: 1, dead: 1})
    values = [f"v{i}" for i in range(20)]
    values.insert(7, "boom")
    produce(boot, source, _records(values))
    seen: list[tuple[Any, Any]] = []

    def handler(context: Any, record: Any, exc: BaseException) -> str:
        seen.append((context, record))
        return "continue"

    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{"production.exception.handler": handler, "errors.dead.letter.queue.topic.name": dead},
    )
    with KafkaStreams(_copy_topology(source, sink, FailingString()), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["dropped-records"] == 1
    assert [m.value().decode() for m in read_all(boot, sink)] == [f"v{i}" for i in range(20)]
    [(context, record)] = seen
    assert (context.topic, context.partition, context.offset) == (source, 0, 7)
    assert (record.topic, record.value) == (sink, "boom")
    [letter] = read_all(boot, dead)
    headers = _headers(letter)
    assert _origin(headers) == (source.encode(), b"0", b"7")
    assert headers["__streams.errors.message"] == b"boom is not serializable"
    assert headers["__streams.errors.exception"] == (
        b"strom.errors.SerializationError: boom is not serializable"
    )


def test_serialization_error_log_and_fail_stops_the_app(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("ser-fail")
    create_topics(boot, {source: 1, sink: 1})
    values = [f"v{i}" for i in range(10)]
    values.insert(4, "boom")
    produce(boot, source, _records(values))
    app = KafkaStreams(
        _copy_topology(source, sink, FailingString()), app_config(boot, app_id, str(tmp_path))
    )
    with app, pytest.raises(ProductionError, match=rf"topic {sink} \(from {source}-0@4\)"):
        app.run_until_end(timeout=120)
    assert app.state is State.ERROR
    assert _committed(boot, app_id, source) <= 4


def _dividing_topology(source: str, sink: str) -> Any:
    """10 // value, per record, then a running sum per key: record "0" fails."""
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
        .map_values(lambda v: 10 // int(v))
        .group_by_key()
        .aggregate(
            lambda: 0,
            lambda k, v, total: total + v,
            Materialized("sums", value_serde=serdes.Long(), caching=False),
        )
        .to_stream()
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


def test_processing_error_log_and_continue_skips_exactly_that_record(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("proc")
    create_topics(boot, {source: 1, sink: 1, dead: 1})
    values = [str(1 + i % 5) for i in range(20)]
    values.insert(7, "0")
    produce(boot, source, _records(values))
    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{
            "processing.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    with KafkaStreams(_dividing_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["dropped-records"] == 1
    sums, total = [], 0
    for value in values[:7] + values[8:]:
        total += 10 // int(value)
        sums.append(total)
    longs = serdes.Long()
    assert [longs.deserialize(sink, m.value()) for m in read_all(boot, sink)] == sums
    [letter] = read_all(boot, dead)
    assert (letter.key(), letter.value()) == (b"k", b"0")
    assert letter.timestamp()[1] == BASE_TS + 7
    headers = _headers(letter)
    assert _origin(headers) == (source.encode(), b"0", b"7")
    assert headers["__streams.errors.message"] == b"integer division or modulo by zero"
    assert (headers["__streams.errors.exception"] or b"").startswith(b"builtins.ZeroDivisionError")
    assert b"ZeroDivisionError" in (headers["__streams.errors.stacktrace"] or b"")


def test_processing_error_log_and_fail_names_the_record_and_stops(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("proc-fail")
    create_topics(boot, {source: 1, sink: 1, dead: 1})
    values = [str(1 + i % 5) for i in range(10)]
    values.insert(4, "0")
    produce(boot, source, _records(values))
    config = app_config(
        boot, app_id, str(tmp_path), **{"errors.dead.letter.queue.topic.name": dead}
    )
    app = KafkaStreams(_dividing_topology(source, sink), config)
    with (
        app,
        pytest.raises(
            TaskError,
            match=rf"node 'KSTREAM-MAPVALUES-\d+' failed on record {source}-0@4 \(key='k'\)",
        ),
    ):
        app.run_until_end(timeout=120)
    assert app.state is State.ERROR
    assert _committed(boot, app_id, source) <= 4
    assert [(m.key(), m.value()) for m in read_all(boot, dead)] == [(b"k", b"0")]


def test_deserialization_dead_letters_carry_error_headers(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("deser")
    create_topics(boot, {source: 1, sink: 1, dead: 1})
    longs = serdes.Long()
    values = [longs.serialize(source, n) for n in range(10)]
    values.insert(3, b"bad")
    produce(boot, source, [(b"k", v, BASE_TS + i) for i, v in enumerate(values)])
    builder = StreamsBuilder()
    builder.stream(source, key_serde=serdes.String(), value_serde=serdes.Long()).to(
        sink, key_serde=serdes.String(), value_serde=serdes.Long()
    )
    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{
            "deserialization.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["skipped-records"] == 1
    [letter] = read_all(boot, dead)
    assert (letter.key(), letter.value()) == (b"k", b"bad")
    headers = _headers(letter)
    assert _origin(headers) == (source.encode(), b"0", b"3")
    assert (headers["__streams.errors.exception"] or b"").startswith(
        b"strom.errors.SerializationError: "
    )
    assert headers["__streams.errors.message"]
    assert headers["__streams.errors.stacktrace"]


def test_shutdown_application_stops_every_instance(kafka: KafkaCluster, tmp_path: Path) -> None:
    """Kafka's SHUTDOWN_APPLICATION: the instance whose thread failed and the
    other one both end in ERROR (KafkaStreams#setUncaughtExceptionHandler)."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("shutdown")
    create_topics(boot, {source: 2, sink: 2})
    builder = StreamsBuilder()

    def check(value: str) -> str:
        if value == "poison":
            raise ValueError("poison pill")
        return value

    builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String()).map_values(
        check
    ).to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    topology = builder.build()
    apps = [KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / name))) for name in "ab"]
    for app in apps:
        app.set_uncaught_exception_handler(lambda _exc: "shutdown_application")
    with apps[0], apps[1]:
        for app in apps:
            app.start()
        wait_until(
            lambda: all(
                app.state is State.RUNNING and app._local_tasks()["StreamThread-1"] for app in apps
            ),
            timeout=60,
            what="both instances to own a task",
        )
        # One partition gets the poison pill; both partitions get ordinary records.
        produce(boot, source, [(f"k{i}".encode(), b"ok", BASE_TS + i) for i in range(20)])
        produce(boot, source, [(b"k3", b"poison", BASE_TS + 20)])
        wait_until(
            lambda: all(app.state is State.ERROR for app in apps),
            timeout=60,
            what="both instances to stop",
        )
        failed = [app for app in apps if "poison pill" in str(app.exception)]
        assert len(failed) == 1
        [other] = [app for app in apps if app is not failed[0]]
        assert isinstance(other.exception, ApplicationShutdownRequested)
    # A later run is not stopped by the old request: it only watches for new ones.
    watcher = ApplicationShutdown(StreamsConfig(app_config(boot, app_id, str(tmp_path))), "probe")
    try:
        assert watcher.baseline == 1
        assert not watcher.requested()
    finally:
        watcher.close()


def test_run_until_end_stops_on_a_shutdown_application_request(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    """A bounded run watches for "shutdown_application" requests of other
    instances as a started app does, and stops before its end offsets."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("bounded-shutdown")
    create_topics(boot, {source: 1, sink: 1})
    produce(boot, source, _records([f"v{i}" for i in range(1000)]))
    builder = StreamsBuilder()
    # 10 ms a record: the whole input would take 10 s.
    builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String()).peek(
        lambda _k, _v: time.sleep(0.01)
    ).to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    config = app_config(boot, app_id, str(tmp_path), **{"poll.max.records": 10})
    outcome: list[BaseException | None] = []

    def run(app: KafkaStreams) -> None:
        try:
            app.run_until_end(timeout=120)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    with KafkaStreams(builder.build(), config) as app:
        runner = threading.Thread(target=run, args=(app,))
        runner.start()
        wait_until(
            lambda: app.metrics().get("records-processed", 0) > 0 or bool(outcome),
            timeout=60,
            what="the bounded run to process records",
        )
        other = ApplicationShutdown(StreamsConfig(config), "other-instance")
        try:
            other.request("a test asks")
        finally:
            other.close()
        runner.join(60)
        assert not runner.is_alive()
        [stopped] = outcome
        assert isinstance(stopped, ApplicationShutdownRequested), stopped
        assert app.state is State.ERROR
        assert app.metrics()["records-processed"] < 1000


def test_too_large_record_under_exactly_once_cannot_be_skipped(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    """librdkafka aborts the open transaction on a record the broker rejects,
    so log_and_continue cannot drop it under exactly_once_v2: the app stops
    with an error saying so instead of retrying the transaction forever."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("large-eos")
    create_topics(boot, {source: 1})
    create_topics(boot, {sink: 1}, config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    values = [f"v{i}" for i in range(10)]
    values.insert(5, BIG)
    produce(boot, source, _records(values))
    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{
            "processing.guarantee": "exactly_once_v2",
            "production.exception.handler": "log_and_continue",
        },
    )
    app = KafkaStreams(_copy_topology(source, sink), config)
    with app, pytest.raises(ProductionError, match="exactly_once_v2"):
        app.run_until_end(timeout=120)
    assert app.state is State.ERROR
    # Only transactions before the big record's committed (its own never did).
    output = [m.value().decode() for m in read_all(boot, sink)]
    assert output == [f"v{i}" for i in range(len(output))] and len(output) <= 5
