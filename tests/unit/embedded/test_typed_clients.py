"""Typed clients on the embedded log (issue #23 point 2): a producer with
serdes, partitioned by the serialized key as Kafka's default partitioner
does, and ``records()`` reading every partition back, deserialized when
serdes are given; without serdes both keep the bytes behaviour."""

from __future__ import annotations

import pytest
from tests.unit.embedded.logtools import kafka_partition

from strom import serdes
from strom._core import ConsumedRecord
from strom.embedded import EmbeddedLog, TypedRecord
from strom.errors import SerializationError, UnknownTopicError

S, L = serdes.String(), serdes.Long()


def test_typed_keys_land_on_kafkas_partition_of_the_serialized_key(log: EmbeddedLog) -> None:
    log.create_topic("by-name", partitions=7)
    log.create_topic("by-id", partitions=7)
    names = [f"user-{i}" for i in range(60)]
    ids = [i * 7919 - 100_000 for i in range(60)]
    with log.producer(S, L) as producer:
        for i, name in enumerate(names[:30]):
            producer.produce("by-name", name, i)
        producer.produce_batch("by-name", [(name, i) for i, name in enumerate(names[30:])])
    with log.producer(L, S) as producer:
        for i in ids:
            producer.produce("by-id", i, str(i))
    landed_names = {r.key: r.partition for r in log.records("by-name", key_serde=S)}
    landed_ids = {r.key: r.partition for r in log.records("by-id", key_serde=L)}
    assert landed_names == {n: kafka_partition(S.serialize("", n) or b"", 7) for n in names}
    assert landed_ids == {i: kafka_partition(L.serialize("", i) or b"", 7) for i in ids}
    # A partitioner that ignored keys would fail the above only by chance.
    assert len(set(landed_names.values())) == 7


def test_records_reads_every_partition_in_order_as_typed_values(log: EmbeddedLog) -> None:
    log.create_topic("events", partitions=3)
    sent = [(f"k{i % 5}", i, 1_000 + i) for i in range(40)]
    with log.producer(S, L) as producer:
        producer.produce_batch("events", sent[:20])
        for key, value, ts in sent[20:]:
            producer.produce("events", key, value, timestamp=ts, headers={"n": str(value).encode()})
    records = list(log.records("events", key_serde=S, value_serde=L))
    assert all(isinstance(r, TypedRecord) for r in records)
    assert sorted((r.key, r.value, r.timestamp) for r in records) == sorted(sent)
    # Partition by partition, each in offset order, offsets 0..n-1 of a fresh topic.
    order = [(r.partition, r.offset) for r in records]
    assert order == sorted(order)
    for partition in range(3):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(log.end_offsets("events")[partition]))
    assert {r.value: r.headers for r in records if r.value >= 20} == {
        v: [("n", str(v).encode())] for v in range(20, 40)
    }


def test_without_serdes_records_are_the_bytes_records_of_read(log: EmbeddedLog) -> None:
    log.create_topic("raw", partitions=2)
    with log.producer() as producer:
        producer.produce_batch("raw", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(10)])
        with pytest.raises(TypeError):
            producer.produce("raw", "not bytes", b"v")  # type: ignore[arg-type]
    records = list(log.records("raw"))
    assert all(type(r) is ConsumedRecord for r in records)
    assert records == log.read("raw", 0, 0, 100) + log.read("raw", 1, 0, 100)
    assert len(records) == 10


def test_one_serde_types_its_side_and_leaves_the_other_bytes(log: EmbeddedLog) -> None:
    log.create_topic("half")
    with log.producer(value_serde=serdes.Json()) as producer:
        producer.produce("half", b"raw-key", {"qty": 2})
    (record,) = log.records("half", value_serde=serdes.Json())
    assert (record.key, record.value) == (b"raw-key", {"qty": 2})
    (record,) = log.records("half", key_serde=S)
    assert (record.key, record.value) == ("raw-key", serdes.Json().serialize("half", {"qty": 2}))


def test_records_ends_at_the_end_offsets_as_of_the_call(log: EmbeddedLog) -> None:
    """Also across compaction gaps, where one read could run past them."""
    log.create_topic("table", config={"cleanup.policy": "compact"})
    with log.producer(S, L) as producer:
        producer.produce_batch("table", [(f"k{i % 3}", i) for i in range(30)])
    log.roll("table", 0)
    log.compact("table")
    kept = log.read("table", 0, 0, 100)
    assert len(kept) < 30  # the test needs gaps
    pending = log.records("table", key_serde=S, value_serde=L)
    with log.producer(S, L) as producer:
        producer.produce_batch("table", [("late", i) for i in range(30)])
    assert [(r.offset, r.key, r.value) for r in pending] == [
        (r.offset, S.deserialize("", r.key), L.deserialize("", r.value)) for r in kept
    ]
    assert len(list(log.records("table"))) == len(kept) + 30


def test_a_record_a_serde_cannot_read_is_named(log: EmbeddedLog) -> None:
    log.create_topic("mixed", partitions=1)
    with log.producer(S, L) as producer:
        producer.produce_batch("mixed", [("a", 1), ("b", 2)])
    with log.producer() as producer:
        producer.produce("mixed", b"c", b"three")
    with pytest.raises(SerializationError, match=r"value of record mixed-0@2"):
        list(log.records("mixed", key_serde=S, value_serde=L))


def test_an_object_a_serde_cannot_write_is_an_error_naming_topic_and_side(
    log: EmbeddedLog,
) -> None:
    log.create_topic("counts")
    with log.producer(S, L) as producer:
        with pytest.raises(SerializationError, match=r"'counts': cannot serialize the value"):
            producer.produce("counts", "a", "not a number")  # type: ignore[arg-type]
        with pytest.raises(SerializationError, match=r"cannot serialize the key"):
            producer.produce_batch("counts", [("a", 1), (2, 2)])  # type: ignore[list-item]
    assert list(log.records("counts")) == []  # all or nothing


def test_records_of_an_unknown_topic_raise_at_the_call(log: EmbeddedLog) -> None:
    with pytest.raises(UnknownTopicError):
        log.records("nope")


def test_delete_topic_drops_records_and_offsets_and_a_new_topic_starts_empty(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("gone", partitions=2)
    log.create_topic("kept")
    with log.producer(S, S) as producer:
        producer.produce_batch("gone", [(f"k{i}", "v") for i in range(10)])
        producer.produce("kept", "k", "v")
    log.commit_offsets("app", {("gone", 0): 3, ("kept", 0): 1})
    log.delete_topic("gone")
    assert log.topics() == ["kept"]
    assert list(log.committed_offsets("app")) == [("kept", 0)]
    with pytest.raises(UnknownTopicError):
        log.delete_topic("gone")
    log.create_topic("gone", partitions=3)
    assert log.end_offsets("gone") == {0: 0, 1: 0, 2: 0}
    log.close()
    reopened = EmbeddedLog(log_path)
    assert reopened.topics() == ["gone", "kept"]
    assert list(reopened.committed_offsets("app")) == [("kept", 0)]
