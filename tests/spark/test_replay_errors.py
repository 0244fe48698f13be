"""What a replay refuses, and bad input records handled as the streaming app
handles them (its ``deserialization.exception.handler``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark.support import Scenario, run_replay, run_streaming, source_frame, write_log

from strom import StreamsBuilder, Topology, serdes
from strom.errors import SerializationError, TopologyError
from strom.processor import Processor, ProcessorContext, PunctuationType, Record
from strom.spark import replay

S, L = serdes.String(), serdes.Long()


class Heartbeat(Processor[str, str]):
    """Forwards a heartbeat every second of wall-clock time."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        context.schedule(1_000, PunctuationType.WALL_CLOCK_TIME, self.beat)

    def beat(self, timestamp: int) -> None:
        self.context.forward(Record("beat", "", timestamp))

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record)


def frame(spark: SparkSession, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(
        rows, "topic string, partition int, offset long, key binary, value binary, timestamp long"
    )


def test_wall_clock_punctuation_is_refused_naming_the_processor(spark: SparkSession) -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).process(Heartbeat, name="heartbeat").to(
        "out", key_serde=S, value_serde=S
    )
    with pytest.raises(TopologyError, match=r"'heartbeat'.*WALL_CLOCK_TIME"):
        replay(builder.build(), spark, source=frame(spark, [("in", 0, 0, b"k", b"v", 1)]))


def test_a_global_table_is_refused_naming_its_store(spark: SparkSession) -> None:
    builder = StreamsBuilder()
    users = builder.global_table("users", key_serde=S, value_serde=S, materialized="users-store")
    builder.stream("in", key_serde=S, value_serde=S).join(
        users, lambda _k, v: v, lambda v, user: f"{v}/{user}"
    ).to("out")
    with pytest.raises(TopologyError, match="'users-store'"):
        replay(builder.build(), spark, source=frame(spark, [("in", 0, 0, b"k", b"v", 1)]))


def test_a_source_frame_without_the_needed_columns_is_refused(spark: SparkSession) -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    bad = spark.createDataFrame([("in", b"v")], "topic string, value binary")
    with pytest.raises(Exception, match="key, timestamp, partition, offset"):
        replay(builder.build(), spark, source=bad)


def totals() -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream("amounts", key_serde=S, value_serde=L)
        .group_by_key()
        .reduce(lambda a, b: a + b, materialized="totals")
        .to_stream()
        .to("running-totals", key_serde=S, value_serde=L)
    )
    return builder.build()


class Garbled(serdes.Serde[Any]):
    """Writes Longs, but ``"bad"`` as three bytes no LongDeserializer reads."""

    def serialize(self, topic: str, data: Any) -> bytes | None:
        return b"bad" if data == "bad" else L.serialize(topic, data)

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        return L.deserialize(topic, data)


def garbled_scenario() -> Scenario:
    records = [(f"k{i % 4}", "bad" if i in (3, 17) else i, 1_000 + i) for i in range(40)]
    return Scenario(
        totals,
        {"amounts": records},
        {"amounts": (S, Garbled()), "running-totals": (S, L)},
        ["running-totals"],
        stores=["totals"],
    )


def test_undeserializable_records_are_skipped_under_log_and_continue(
    spark: SparkSession, tmp_path: Path
) -> None:
    config = {
        "application.id": "bad-input",
        "statestore.cache.max.bytes": 0,
        "deserialization.exception.handler": "log_and_continue",
    }
    scenario = garbled_scenario()
    servers = write_log(scenario, tmp_path / "log")
    streaming = run_streaming(scenario, servers, config)
    replayed = run_replay(spark, scenario, source_frame(spark, scenario), config)
    assert replayed.streams == streaming.streams
    assert replayed.tables == streaming.tables
    assert sum(streaming.tables["totals"].values()) == sum(range(40)) - 3 - 17
    with replay(totals(), spark, source=source_frame(spark, scenario), config=config) as result:
        assert result.metrics()["skipped-records"] == 2


def test_undeserializable_records_fail_the_replay_under_log_and_fail(
    spark: SparkSession,
) -> None:
    scenario = garbled_scenario()
    with pytest.raises(
        SerializationError, match=r"cannot deserialize the value of record amounts-"
    ):
        replay(totals(), spark, source=source_frame(spark, scenario))
