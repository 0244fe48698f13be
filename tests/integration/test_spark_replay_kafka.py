"""A Spark replay reading a Kafka cluster's offset ranges (the strom-kafka
Python Data Source, confluent-kafka in the Spark tasks) gives what the same
records give from a DataFrame, also over a bounded range (markers kafka and
spark)."""

from __future__ import annotations

import functools
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession
from tests.integration.kafka_support import TIMEOUT, create_topics, unique
from tests.kafka_harness import KafkaCluster
from tests.spark.conftest import spark  # noqa: F401 - the Spark session fixture
from tests.spark.support import Scenario, replay_results, source_frame
from tests.spark.test_replay import page_views, views

from strom import serdes
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
    producer = Producer({"bootstrap.servers": servers})
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
