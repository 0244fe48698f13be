"""strom's Kafka producer sends record headers given as a column (one call
per batch), on both paths of ``produce_columns``: holding the GIL, and from
a copy when the client's queue may fill up."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TopicPartition
from tests.integration.kafka_support import create_topics, unique
from tests.kafka_harness import KafkaCluster

from strom._core import KafkaProducer as NativeKafkaProducer
from strom.config import StreamsConfig
from strom.kafka.clients import DeliveryFailures, KafkaProducer, producer_config
from strom.kafka.consumer import Consumer

Headers = list[tuple[str, bytes | None]]
Row = tuple[bytes | None, bytes | None, Headers]

HEADERS: list[Headers | None] = [
    [("trace", b"abc"), ("empty", None)],
    None,
    [],
    [("dup", b"1"), ("dup", b""), ("\u00e9t\u00e9", b"\x00\xff")],
    None,
]


# 100,000 records queued before them in the same call: more than the binding
# copies holding the GIL, so that call takes the path without it.
@pytest.mark.parametrize("filler", [0, 100_000])
def test_produce_columns_sends_each_records_headers(kafka: KafkaCluster, filler: int) -> None:
    boot = kafka.bootstrap_servers
    topic = unique("produce-headers")
    create_topics(boot, {topic: 2})
    config = StreamsConfig({"application.id": unique("app"), "bootstrap.servers": boot})
    producer = KafkaProducer(
        producer_config(config, "headers-producer", None),
        lambda _topic: 2,
        transactional=False,
        failures=DeliveryFailures(config),
    )
    keys: list[bytes | None] = [*([None] * filler), b"a", b"b", None, b"d", b"e"]
    values: list[bytes | None] = [*([b""] * filler), b"1", None, b"3", b"4", b"5"]
    partitions = [1] * filler + [0, 1, 0, 0, 1]
    all_headers: list[Headers | None] = [*([None] * filler), *HEADERS]
    try:
        producer.produce_columns(
            topic,
            keys,
            values,
            partitions=partitions,
            headers=all_headers,
        )
        producer.flush()
    finally:
        producer.close()
    consumer = Consumer({"bootstrap.servers": boot, "client.id": "reader"}, headers=True)
    got: dict[int, list[Row]] = {0: [], 1: []}
    any_headers: dict[int, bool] = {0: False, 1: False}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        deadline = time.monotonic() + 60
        while sum(map(len, got.values())) < len(keys) and time.monotonic() < deadline:
            for batch in consumer.poll_batches(50_000, 0.5):
                got[batch.partition] += zip(
                    batch.keys(), batch.values(), batch.headers(), strict=True
                )
                any_headers[batch.partition] |= batch.has_headers()
    finally:
        consumer.close()
    expected: dict[int, list[Row]] = {0: [], 1: []}
    for key, value, partition, headers in zip(keys, values, partitions, all_headers, strict=True):
        expected[partition].append((key, value, headers or []))
    assert got == expected
    assert any_headers == {0: True, 1: False}


def test_headers_survive_waiting_for_room_in_a_full_queue(kafka: KafkaCluster) -> None:
    """A queue of 10 records refuses most of a batch of 500 at first: each
    refused record is sent again, with its headers, once there is room."""
    boot = kafka.bootstrap_servers
    topic = unique("full-queue-headers")
    create_topics(boot, {topic: 1})
    native = NativeKafkaProducer(
        {"bootstrap.servers": boot, "queue.buffering.max.messages": "10", "linger.ms": "0"}
    )
    n = 500
    headers: list[Headers | None] = [[("i", str(i).encode())] if i % 3 else None for i in range(n)]
    native.produce_columns(topic, [None] * n, [b"v"] * n, None, [0] * n, 1, headers)
    assert native.flush(30) == 0
    assert native.take_failures() == []
    consumer = Consumer({"bootstrap.servers": boot, "client.id": "reader"}, headers=True)
    got: list[Headers] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            for batch in consumer.poll_batches(1000, 0.5):
                got += batch.headers()
    finally:
        consumer.close()
    assert got == [h or [] for h in headers]
