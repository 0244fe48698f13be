"""Kafka's PartitionGroup: a task with several input partitions processes
records in timestamp order across them, waiting for partitions with data
not fetched yet (max.task.idle.ms), and commits only what it processed."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog

S = serdes.String()


def produce(log: EmbeddedLog, topic: str, records: list[tuple[str, str, int]]) -> None:
    with log.producer() as producer:
        for key, value, ts in records:
            producer.produce(topic, key.encode(), value.encode(), timestamp=ts, partition=0)


def read(log: EmbeddedLog, topic: str = "out") -> list[tuple[str, int]]:
    end = log.end_offsets(topic)[0]
    return [((r.value or b"").decode(), r.timestamp) for r in log.read(topic, 0, 0, max(end, 1))]


def run(log_path: str, builder: StreamsBuilder, **config: Any) -> None:
    props = {"application.id": "pg", "bootstrap.servers": f"embedded:{log_path}", **config}
    with KafkaStreams(builder.build(), props) as app:
        app.run_until_end(timeout=60)


@pytest.mark.parametrize("max_records", [1, 2, 10_000])
def test_merged_topics_are_processed_in_timestamp_order(
    log: EmbeddedLog, log_path: str, max_records: int
) -> None:
    for topic in ("a", "b", "out"):
        log.create_topic(topic)
    produce(log, "a", [("k", "a1", 1), ("k", "a5", 5), ("k", "a9", 9)])
    produce(log, "b", [("k", "b2", 2), ("k", "b3", 3), ("k", "b10", 10)])
    builder = StreamsBuilder()
    builder.stream(["a", "b"], key_serde=S, value_serde=S).to("out")
    # Even when a poll brings only one record, the task waits for the other
    # partition's unfetched data before going on.
    run(log_path, builder, **{"poll.max.records": max_records})
    assert [ts for _, ts in read(log)] == [1, 2, 3, 5, 9, 10]


def test_stream_table_join_sees_the_table_as_of_each_stream_record(
    log: EmbeddedLog, log_path: str
) -> None:
    for topic in ("table", "stream", "out"):
        log.create_topic(topic)
    # The stream was written first, the table later, but the timestamps
    # interleave: processing follows the timestamps, not the write order.
    produce(log, "stream", [("k", "s5", 5), ("k", "s15", 15)])
    produce(log, "table", [("k", "t1", 1), ("k", "t10", 10)])
    builder = StreamsBuilder()
    table = builder.table("table", key_serde=S, value_serde=S)
    builder.stream("stream", key_serde=S, value_serde=S).left_join(
        table, lambda s, t: f"{s}+{t}"
    ).to("out", value_serde=S)
    run(log_path, builder, **{"poll.max.records": 1})
    assert read(log) == [("s5+t1", 5), ("s15+t10", 15)]


def test_partition_time_is_committed_as_offset_metadata(log: EmbeddedLog, log_path: str) -> None:
    for topic in ("a", "out"):
        log.create_topic(topic)
    produce(log, "a", [("k", "x", 40), ("k", "y", 30)])
    builder = StreamsBuilder()
    builder.stream("a", key_serde=S, value_serde=S).to("out")
    run(log_path, builder)
    committed = log.committed_offsets("pg")[("a", 0)]
    assert (committed.offset, committed.metadata) == (2, "40")
