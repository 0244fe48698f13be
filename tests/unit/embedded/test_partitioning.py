"""Kafka's default partitioner: murmur2 vectors, a Python reference, and where records land."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.unit.embedded.logtools import kafka_murmur2, kafka_partition

from strom._core import murmur2, partition_for_key
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError

# org.apache.kafka.common.utils.UtilsTest.testMurmur2
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert kafka_murmur2(data) == expected  # the reference below is right too


@given(st.binary(max_size=64))
def test_murmur2_matches_the_python_reference(data: bytes) -> None:
    assert murmur2(data) == kafka_murmur2(data)


@given(st.binary(max_size=40), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_matches_the_python_reference(key: bytes, partitions: int) -> None:
    assert partition_for_key(key, partitions) == kafka_partition(key, partitions)


def test_partition_for_key_needs_a_partition() -> None:
    with pytest.raises(ConfigError):
        partition_for_key(b"k", 0)


def test_keyed_records_land_on_kafkas_partition(log: EmbeddedLog) -> None:
    log.create_topic("keyed", partitions=7)
    keys = [f"user-{i}".encode() for i in range(100)]
    with log.producer() as producer:
        for key in keys[:50]:
            producer.produce("keyed", key, b"single")
        producer.produce_batch("keyed", [(key, b"batch") for key in keys[50:]])
    landed = {}
    for partition in range(7):
        for record in log.read("keyed", partition, 0, 1000):
            landed[record.key] = partition
    assert landed == {key: kafka_partition(key, 7) for key in keys}
    # 100 keys over 7 partitions: a partitioner that ignored keys would fail the above;
    # this guards against a degenerate test where every key hashes alike.
    assert len(set(landed.values())) == 7


def test_an_explicit_partition_wins(log: EmbeddedLog) -> None:
    log.create_topic("t", partitions=3)
    key = b"21"
    target = (kafka_partition(key, 3) + 1) % 3
    with log.producer() as producer:
        producer.produce("t", key, b"v", partition=target)
        producer.produce_columns("t", [key, key], [b"a", b"b"], partitions=[target, target])
    assert log.end_offsets("t") == {p: (3 if p == target else 0) for p in range(3)}


def test_null_keys_go_round_robin(log: EmbeddedLog) -> None:
    log.create_topic("t", partitions=3)
    with log.producer() as producer:
        for _ in range(4):
            producer.produce("t", None, b"single")
        producer.produce_batch("t", [(None, b"batch")] * 5)
    assert log.end_offsets("t") == {0: 3, 1: 3, 2: 3}
