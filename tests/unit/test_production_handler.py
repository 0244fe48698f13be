"""The production exception handler on the embedded log and in the test
driver, and KIP-1034 dead-letter headers (Kafka's RecordCollectorImpl:
serialization errors go to the handler, KIP-399; ExceptionHandlerUtils'
``__streams.errors.*`` header names)."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import (
    ConfigError,
    DeadLetterRecord,
    ErrorHandlerContext,
    FailedRecord,
    ProductionError,
    Response,
    SerializationError,
)
from strom.testing import TopologyTestDriver

S = serdes.String()


class FailingString(serdes.Serde[str]):
    """Cannot serialize ``"boom"``."""

    def serialize(self, topic: str, data: str | None) -> bytes | None:
        if data == "boom":
            raise SerializationError("boom is not serializable")
        return None if data is None else data.encode()

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        return None if data is None else data.decode()


def _topology() -> Topology:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(str.lower).to(
        "out", key_serde=S, value_serde=FailingString()
    )
    return builder.build()


def _embedded(log: EmbeddedLog, log_path: str, values: list[str], **config: Any) -> KafkaStreams:
    for topic in ("in", "out", "dlq"):
        log.create_topic(topic)
    with log.producer() as producer:
        producer.produce_batch("in", [(b"k", v.encode(), 1000 + i) for i, v in enumerate(values)])
    props = {"application.id": "prod", "bootstrap.servers": f"embedded:{log_path}"}
    return KafkaStreams(_topology(), props | config)


def _headers(record: Any) -> dict[str, bytes | None]:
    return dict(record.headers)


def test_serialization_error_fails_by_default_naming_topic_and_source(
    log: EmbeddedLog, log_path: str
) -> None:
    app = _embedded(log, log_path, ["a", "BOOM", "c"])
    with pytest.raises(ProductionError, match=r"value of a record for topic out \(from in-0@1\)"):
        app.run_until_end(timeout=30)
    app.close()
    assert log.committed_offsets("prod") == {}  # nothing committed past it


def test_log_and_continue_drops_counts_and_dead_letters(log: EmbeddedLog, log_path: str) -> None:
    app = _embedded(
        log,
        log_path,
        ["a", "BOOM", "c"],
        **{"production.exception.handler": "log_and_continue"},
        **{"errors.dead.letter.queue.topic.name": "dlq"},
    )
    with app:
        app.run_until_end(timeout=30)
        assert app.metrics()["dropped-records"] == 1
    assert [r.value for r in log.read("out", 0, 0, 10)] == [b"a", b"c"]
    [letter] = log.read("dlq", 0, 0, 10)
    headers = _headers(letter)
    assert (headers["__streams.errors.topic"], headers["__streams.errors.offset"]) == (b"in", b"1")
    assert headers["__streams.errors.partition"] == b"0"
    assert headers["__streams.errors.message"] == b"boom is not serializable"
    assert headers["__streams.errors.exception"] == (
        b"strom.errors.SerializationError: boom is not serializable"
    )
    assert b'boom is not serializable")' in (headers["__streams.errors.stacktrace"] or b"")
    assert letter.timestamp == 1001  # the input record's


def test_a_handler_response_sends_its_own_dead_letters(log: EmbeddedLog, log_path: str) -> None:
    # Kafka's ProductionExceptionHandler.Response.resume(records) (KIP-1034):
    # the handler's dead letter, and not the default one, though a topic is set.
    def handler(context: ErrorHandlerContext, record: FailedRecord, exc: Exception) -> Response:
        return Response.resume([DeadLetterRecord("dlq", b"k", str(record.value).encode())])

    app = _embedded(
        log,
        log_path,
        ["a", "BOOM", "c"],
        **{"production.exception.handler": handler, "errors.dead.letter.queue.topic.name": "dlq"},
    )
    with app:
        app.run_until_end(timeout=30)
        assert app.metrics()["dropped-records"] == 1
    assert [r.value for r in log.read("out", 0, 0, 10)] == [b"a", b"c"]
    [letter] = log.read("dlq", 0, 0, 10)
    assert (letter.key, letter.value, letter.timestamp, letter.headers) == (
        b"k",
        b"boom",
        1001,
        [],
    )


def test_deserialization_dead_letter_keeps_the_raw_record_and_headers(
    log: EmbeddedLog, log_path: str
) -> None:
    for topic in ("numbers", "out", "dlq"):
        log.create_topic(topic)
    with log.producer() as producer:
        producer.produce_batch("numbers", [(b"a", (1).to_bytes(8, "big")), (b"b", b"bad")])
    builder = StreamsBuilder()
    builder.stream("numbers", key_serde=S, value_serde=serdes.Long()).to(
        "out", value_serde=serdes.Long()
    )
    config = {
        "application.id": "deser",
        "bootstrap.servers": f"embedded:{log_path}",
        "deserialization.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end(timeout=30)
    [letter] = log.read("dlq", 0, 0, 10)
    assert (letter.key, letter.value) == (b"b", b"bad")
    headers = _headers(letter)
    assert headers["__streams.errors.topic"] == b"numbers"
    assert headers["__streams.errors.offset"] == b"1"
    assert (headers["__streams.errors.exception"] or b"").startswith(
        b"strom.errors.SerializationError: "
    )


def test_driver_callable_handler_sees_context_and_record() -> None:
    seen: list[tuple[ErrorHandlerContext, FailedRecord, BaseException]] = []

    def handler(context: ErrorHandlerContext, record: FailedRecord, exc: BaseException) -> str:
        seen.append((context, record, exc))
        return "continue"

    config = {"production.exception.handler": handler}
    with TopologyTestDriver(_topology(), config) as driver:
        src = driver.create_input_topic("in", S, S)
        src.pipe_input("k", "x", timestamp=5)
        src.pipe_input("k", "BOOM", timestamp=6)
        src.pipe_input("k", "y", timestamp=7)
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["x", "y"]
    [(context, record, exc)] = seen
    assert (context.topic, context.partition, context.offset, context.timestamp) == (
        "in",
        0,
        1,
        6,
    )
    assert context.task_id == "0_0"
    assert (record.topic, record.key, record.value) == ("out", "k", "boom")
    assert isinstance(exc, SerializationError)


def test_driver_handler_saying_fail_or_raising_fails() -> None:
    for handler in (lambda *_: "fail", lambda *_: 1 / 0):
        config = {"production.exception.handler": handler}
        with TopologyTestDriver(_topology(), config) as driver, pytest.raises(ProductionError):
            driver.create_input_topic("in", S, S).pipe_input("k", "boom")


def test_bad_handler_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"production\.exception\.handler"):
        TopologyTestDriver(_topology(), {"production.exception.handler": "ignore"})


def test_dead_letters_are_written_under_log_and_fail_too(log: EmbeddedLog, log_path: str) -> None:
    """KIP-1034: the default handlers dead-letter on FAIL as well as CONTINUE."""
    app = _embedded(log, log_path, ["a", "BOOM"], **{"errors.dead.letter.queue.topic.name": "dlq"})
    with pytest.raises(ProductionError):
        app.run_until_end(timeout=30)
    app.close()
    [letter] = log.read("dlq", 0, 0, 10)
    assert _headers(letter)["__streams.errors.offset"] == b"1"
    assert log.committed_offsets("prod") == {}
