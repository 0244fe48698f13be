"""Topic-choosing sinks, to_table, timestamps, and bad input."""

from __future__ import annotations

import time
from typing import Any

import pytest

from strom import KafkaStreams, KeyValue, StreamsBuilder, StreamsConfig, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import (
    ConfigError,
    DeadLetterRecord,
    ErrorHandlerContext,
    FailedRecord,
    Response,
    SerializationError,
    TaskError,
    TopologyError,
)
from strom.processor import (
    RecordContext,
    fail_on_invalid_timestamp,
    log_and_skip_on_invalid_timestamp,
    use_partition_time_on_invalid_timestamp,
    wallclock_timestamp_extractor,
)
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def test_to_with_a_topic_choosing_function() -> None:
    seen: list[RecordContext] = []

    def choose(key: str, value: str, context: RecordContext) -> str:
        seen.append(context)
        return "long" if len(value) > 3 else "short"

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to(choose)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "hi"), ("b", "hello")])
        assert driver.create_output_topic("short", S, S).read_values_to_list() == ["hi"]
        assert driver.create_output_topic("long", S, S).read_values_to_list() == ["hello"]
    assert [(c.topic, c.offset) for c in seen] == [("in", 0), ("in", 1)]


def test_a_topic_chooser_reads_the_input_records_raw_bytes() -> None:
    # Kafka's RecordContext.sourceRawKey() and sourceRawValue(): the input
    # record's bytes as read, though the written record's value was mapped.
    raw: list[tuple[bytes | None, bytes | None]] = []

    def choose(key: str, value: str, context: RecordContext) -> str:
        raw.append((context.source_raw_key(), context.source_raw_value()))
        return "out"

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(str.upper).to(choose, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("a", "hi"), ("b", "yo")])
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["HI", "YO"]
    assert raw == [(b"a", b"hi"), (b"b", b"yo")]


def test_to_table_keeps_the_latest_value_and_deletes_on_none() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to_table("latest").to_stream().to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list(
            [("a", "1"), ("a", "2"), ("b", "3"), ("a", None)]
        )
        store = driver.get_key_value_store("latest")
        assert (store.get("a"), store.get("b")) == (None, "3")
        assert driver.create_output_topic("out", S, S).read_key_values_to_map() == {
            "b": "3",
            "a": None,
        }


def test_timestamp_extractor_gets_partition_time_and_negative_ones_are_dropped() -> None:
    calls: list[tuple[Any, int]] = []

    def from_value(record: Any, partition_time: int) -> int:
        calls.append((record.value, partition_time))
        return int(record.value)

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S, timestamp_extractor=from_value).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_value_list(["10", "-5", "7", "20"])
        out = driver.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.value, r.timestamp) for r in out] == [("10", 10), ("7", 7), ("20", 20)]
    # Partition time is the largest valid timestamp seen so far.
    assert calls == [("10", -1), ("-5", 10), ("7", 10), ("20", 10)]


def test_default_timestamp_extractor_serves_sources_without_their_own() -> None:
    """Kafka's ``default.timestamp.extractor``, as a Python function: used
    by every source that names no extractor of its own."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    builder.stream("own", key_serde=S, value_serde=S, timestamp_extractor=lambda r, _t: 5).to("out")
    config = {"default.timestamp.extractor": lambda record, _time: 1000 + int(record.value)}
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "7", timestamp=1)
        driver.create_input_topic("own", S, S).pipe_input("k", "8", timestamp=2)
        out = driver.create_output_topic("out", S, S).read_records_to_list()
    assert [(r.value, r.timestamp) for r in out] == [("7", 1007), ("8", 5)]
    # A Java class name cannot run here: said so at once; Kafka's own
    # extractors' names stand for strom's.
    with pytest.raises(ConfigError, match="takes a Python function"):
        StreamsConfig({"default.timestamp.extractor": "org.example.EventTime"})
    java_name = "org.apache.kafka.streams.processor.LogAndSkipOnInvalidTimestamp"
    chosen = StreamsConfig({"default.timestamp.extractor": java_name})
    assert chosen["default.timestamp.extractor"] is log_and_skip_on_invalid_timestamp


def test_wallclock_timestamp_extractor() -> None:
    builder = StreamsBuilder()
    builder.stream(
        "in", key_serde=S, value_serde=S, timestamp_extractor=wallclock_timestamp_extractor
    ).to("out")
    before = time.time_ns() // 1_000_000
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=1)
        stamp = driver.create_output_topic("out", S, S).read_record().timestamp
    assert before <= stamp <= time.time_ns() // 1_000_000


def poison_app(log: EmbeddedLog, log_path: str, **config: Any) -> KafkaStreams:
    log.create_topic("numbers")
    log.create_topic("out")
    with log.producer() as producer:
        producer.produce_batch(
            "numbers",
            [(b"a", (1).to_bytes(8, "big")), (b"b", b"bad"), (b"c", (3).to_bytes(8, "big"))],
        )
    builder = StreamsBuilder()
    builder.stream("numbers", key_serde=S, value_serde=L).map_values(lambda v: v * 2).to(
        "out", value_serde=L
    )
    return KafkaStreams(
        builder.build(),
        {"application.id": "poison", "bootstrap.servers": f"embedded:{log_path}", **config},
    )


def test_undeserializable_record_fails_naming_topic_partition_offset(
    log: EmbeddedLog, log_path: str
) -> None:
    app = poison_app(log, log_path)
    with pytest.raises(SerializationError, match=r"value of record numbers-0@1.*not 8"):
        app.run_until_end(timeout=30)
    app.close()
    # Nothing was committed past the poison record's batch: a rerun fails the same way.
    assert log.committed_offsets("poison") == {}


def test_log_and_continue_skips_and_counts_the_bad_record(log: EmbeddedLog, log_path: str) -> None:
    with poison_app(
        log, log_path, **{"deserialization.exception.handler": "log_and_continue"}
    ) as app:
        app.run_until_end(timeout=30)
        assert app.metrics()["skipped-records"] == 1
    values = [int.from_bytes(r.value or b"", "big") for r in log.read("out", 0, 0, 10)]
    assert values == [2, 6]


def test_a_deserialization_handler_of_the_error_only_still_decides(
    log: EmbeddedLog, log_path: str
) -> None:
    errors: list[SerializationError] = []

    def decide(error: SerializationError) -> str:
        errors.append(error)
        return "continue"

    with poison_app(log, log_path, **{"deserialization.exception.handler": decide}) as app:
        app.run_until_end(timeout=30)
        assert app.metrics()["skipped-records"] == 1
    [error] = errors
    assert str(error).startswith("cannot deserialize the value of record numbers-0@1 in task 0_0")


def test_a_deserialization_handler_gets_kafkas_arguments_and_may_send_dead_letters(
    log: EmbeddedLog, log_path: str
) -> None:
    # Kafka's DeserializationExceptionHandler.handleError(context, record,
    # exception) with a Response of its own dead letters (KIP-1034).
    log.create_topic("bad-numbers")
    seen: list[tuple[Any, ...]] = []

    def handle(context: ErrorHandlerContext, record: FailedRecord, exc: Exception) -> Response:
        seen.append((context.topic, context.offset, record.key, record.value, type(exc)))
        return Response.resume([DeadLetterRecord("bad-numbers", record.key, record.value)])

    with poison_app(log, log_path, **{"deserialization.exception.handler": handle}) as app:
        app.run_until_end(timeout=30)
        assert app.metrics()["skipped-records"] == 1
    assert seen == [("numbers", 1, b"b", b"bad", SerializationError)]
    assert [(r.key, r.value) for r in log.read("bad-numbers", 0, 0, 10)] == [(b"b", b"bad")]
    values = [int.from_bytes(r.value or b"", "big") for r in log.read("out", 0, 0, 10)]
    assert values == [2, 6]


def test_duplicate_and_dangling_names_are_build_time_errors() -> None:
    topology = Topology().add_source("S", "t", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="already added"):
        topology.add_source("S", "u")
    with pytest.raises(TopologyError, match="already read by source"):
        topology.add_source("S2", "t")
    with pytest.raises(TopologyError, match="parent 'nope'"):
        topology.add_sink("K", "out", "nope")
    builder = StreamsBuilder()
    stream = builder.stream("x", key_serde=S, value_serde=S)
    stream.filter(lambda k, v: True, name="f")
    with pytest.raises(TopologyError, match="'f' was already added"):
        stream.map_values(str.upper, name="f")


def test_driver_serialization_error_names_the_record() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=L).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        with pytest.raises(SerializationError, match=r"record in-0@0"):
            src.pipe_input("k", "text")
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == []
        driver.create_input_topic("in", S, L).pipe_input("k", 5)
        assert driver.create_output_topic("out", S, L).read_key_value() == KeyValue("k", 5)


def test_source_offset_reset_overrides_the_app_default(log: EmbeddedLog, log_path: str) -> None:
    for topic in ("old", "new", "out"):
        log.create_topic(topic)
    with log.producer() as producer:
        producer.produce("old", b"k", b"before-old")
        producer.produce("new", b"k", b"before-new")
    builder = StreamsBuilder()
    builder.stream("old", key_serde=S, value_serde=S).to("out")
    builder.stream("new", key_serde=S, value_serde=S, offset_reset="latest").to("out")
    config = {"application.id": "reset", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end(timeout=30)
        with log.producer() as producer:
            producer.produce("new", b"k", b"after-new")
        app.run_until_end(timeout=30)
    assert sorted((r.value or b"").decode() for r in log.read("out", 0, 0, 10)) == [
        "after-new",
        "before-old",
    ]


def _timestamps_through(extractor: Any) -> tuple[list[tuple[str, int]], int]:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S, timestamp_extractor=extractor).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for value, ts in (("a", 5), ("b", -1), ("c", 3)):
            src.pipe_input("k", value, ts)
        out = driver.create_output_topic("out", S, S).read_records_to_list()
        return [(r.value, r.timestamp) for r in out], driver.metrics()["dropped-records"]


def test_the_built_in_extractors_for_negative_timestamps() -> None:
    # Kafka's LogAndSkipOnInvalidTimestamp and UsePartitionTimeOnInvalidTimestamp.
    assert _timestamps_through(log_and_skip_on_invalid_timestamp) == ([("a", 5), ("c", 3)], 1)
    assert _timestamps_through(use_partition_time_on_invalid_timestamp) == (
        [("a", 5), ("b", 5), ("c", 3)],
        0,
    )
    # Kafka's FailOnInvalidTimestamp names the record.
    with pytest.raises(TaskError, match=r"input record in-0@1 has an invalid \(negative\)"):
        _timestamps_through(fail_on_invalid_timestamp)


def test_partition_time_cannot_stand_in_before_there_is_one() -> None:
    builder = StreamsBuilder()
    extractor = use_partition_time_on_invalid_timestamp
    builder.stream("in", key_serde=S, value_serde=S, timestamp_extractor=extractor).to("out")
    with (
        TopologyTestDriver(builder.build()) as driver,
        pytest.raises(TaskError, match="no partition time is known yet"),
    ):
        driver.create_input_topic("in", S, S).pipe_input("k", "v", -1)
