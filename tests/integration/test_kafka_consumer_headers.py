"""strom's Kafka consumer hands records over with their headers, or without
(the restore consumer: changelog records' headers are not read)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from tests.integration.kafka_support import create_topics, ordered_producer, unique
from tests.kafka_harness import KafkaCluster

from strom.kafka.consumer import Consumer


@pytest.mark.parametrize("headers", [True, False])
def test_records_carry_their_headers_only_when_asked(kafka: KafkaCluster, headers: bool) -> None:
    boot = kafka.bootstrap_servers
    topic = unique("headers")
    create_topics(boot, {topic: 1})
    producer = ordered_producer(boot)
    producer.produce(topic, b"v1", b"k", headers=[("trace", b"abc"), ("empty", None)])
    producer.produce(topic, b"v2", b"k")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": boot, "client.id": "reader"}, headers=headers)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[list[tuple[str, bytes | None]]] = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            for batch in consumer.poll_batches(10, 0.5):
                assert batch.values() == [b"v1", b"v2"][len(got) : len(got) + len(batch)]
                got += batch.headers()
        expected = [[("trace", b"abc"), ("empty", None)], []] if headers else [[], []]
        assert got == expected
    finally:
        consumer.close()
