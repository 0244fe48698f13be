"""A Spark replay reading a Kafka cluster's offset ranges (the strom-kafka
Python Data Source, confluent-kafka in the Spark tasks) gives what the same
records give from a DataFrame, also over a bounded range (markers kafka and
spark)."""

from __future__ import annotations

import functools
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession
from tests.integration.kafka_support import (
    TIMEOUT,
    create_topics,
    ordered_producer,
    read_all,
    unique,
)
from tests.kafka_harness import KafkaCluster
from tests.spark.conftest import spark  # noqa: F401 - the Spark session fixture
from tests.spark.support import Scenario, replay_results, source_frame
from tests.spark.test_bootstrap import WINDOWED, _typed_key, late_record_after_half
from tests.spark.test_replay import out_of_order_events, page_views, views

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.errors import StromError
from strom.kstream import Materialized, TimeWindows
from strom.spark import replay

pytestmark = pytest.mark.spark

S, L = serdes.String(), serdes.Long()


def test_replay_from_kafka_offset_ranges(
    spark: SparkSession,  # noqa: F811 - the imported fixture
    kafka: KafkaCluster,
) -> None:
    topic = unique("views")
    # Recent timestamps: the broker's retention would delete 1970's records.
    now = int(time.time() * 1000) - 60_000
    records = [(k, v, now + ts) for k, v, ts in page_views(400, seed=9)]
    scenario = Scenario(
        functools.partial(views, topic),
        {topic: records},
        {topic: (S, S), "view-counts": (S, L)},
        ["view-counts"],
        stores=["counts"],
    )
    servers = kafka.bootstrap_servers
    create_topics(servers, {topic: 3})
    producer = ordered_producer(servers)
    for _t, partition, _o, key, value, timestamp in scenario.rows():
        producer.produce(topic, value, key, partition=partition, timestamp=timestamp)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    del producer  # its client would outlive the broker
    per_partition = Counter(row[1] for row in scenario.rows())

    config = {"application.id": unique("replay"), "statestore.cache.max.bytes": 0}
    frame = source_frame(spark, scenario)
    end = {(topic, p): 50 for p in range(3)}
    for end_offsets in (None, end):
        with replay(
            scenario.build(), spark, source=frame, config=config, end_offsets=end_offsets
        ) as result:
            expected = replay_results(result, scenario)
        with replay(
            scenario.build(), spark, source=servers, config=config, end_offsets=end_offsets
        ) as result:
            read = result.metrics()["records-processed"]
            if end_offsets is None:
                assert read == 400
            else:
                assert read == sum(min(50, n) for n in per_partition.values()) < 400
            got = replay_results(result, scenario)
        assert expected.tables["counts"]
        assert got.tables == expected.tables
        assert got.streams == expected.streams


def _windowed_count(source: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10_000, 2_000))
        .count(Materialized("window-counts"))
        .to_stream()
        .to(sink, key_serde=WINDOWED[0], value_serde=L)
    )
    return builder.build()


def _latest(servers: str, topic: str) -> dict[Any, int]:
    out = {}
    for message in read_all(servers, topic, committed_only=False):
        key = WINDOWED[0].deserialize(topic, message.key())
        out[key] = L.deserialize(topic, message.value())
    return out


def test_replay_then_bootstrap_on_kafka_then_stream_equals_one_streaming_run(
    spark: SparkSession,  # noqa: F811 - the imported fixture
    kafka: KafkaCluster,
    tmp_path: Path,
) -> None:
    """tests/spark/test_bootstrap.py on a Kafka cluster: the first half of
    each partition replayed from Kafka, cut just before a record the whole
    run drops as too late; bootstrap; KafkaStreams streams the rest. The
    final windows equal one streaming run's, late drops included."""
    servers = kafka.bootstrap_servers
    source, whole_sink, split_sink = unique("events"), unique("whole"), unique("split")
    # Recent timestamps: the broker's retention would delete older records.
    shift = int(time.time() * 1000) // 10_000 * 10_000 - 3_600_000
    records = [(k, v, shift + ts) for k, v, ts in out_of_order_events(600, seed=6)]
    scenario = Scenario(
        functools.partial(_windowed_count, source, whole_sink),
        {source: records},
        {source: (S, S)},
        [],
    )
    create_topics(servers, {source: 3, whole_sink: 3, split_sink: 3})
    producer = ordered_producer(servers)
    for _t, partition, _o, key, value, timestamp in scenario.rows():
        producer.produce(source, value, key, partition=partition, timestamp=timestamp)
    assert producer.flush(TIMEOUT) == 0
    del producer

    base = {"bootstrap.servers": servers, "statestore.cache.max.bytes": 0}
    whole = {**base, "application.id": unique("whole"), "state.dir": str(tmp_path / "whole")}
    with KafkaStreams(_windowed_count(source, whole_sink), whole) as app:
        app.run_until_end(timeout=120)
    expected = _latest(servers, whole_sink)
    assert expected

    half = {(source, p): late_record_after_half(scenario, p) for p in range(3)}
    split = {**base, "application.id": unique("split"), "state.dir": str(tmp_path / "split")}
    topology = _windowed_count(source, split_sink)
    with replay(
        topology, spark, source=servers, config=split, end_offsets=half, changelogs=True
    ) as result:
        first = {
            _typed_key(row["key"]): row["value"]
            for row in result.output(split_sink).orderBy("partition", "offset").collect()
        }
        result.bootstrap(split)
        with pytest.raises(StromError, match="already committed offsets"):
            result.bootstrap(split)  # only once: the app has offsets now

    group = Consumer({"bootstrap.servers": servers, "group.id": split["application.id"]})
    try:
        committed = group.committed([TopicPartition(source, p) for p in range(3)], timeout=30)
    finally:
        group.close()
    assert {(tp.topic, tp.partition): tp.offset for tp in committed} == half

    with KafkaStreams(topology, split) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["records-processed"] == len(records) - sum(half.values())
    second = _latest(servers, split_sink)
    assert {**first, **second} == expected
