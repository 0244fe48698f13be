"""Segments, retention and compaction through the Python API (explicit clocks)."""

from __future__ import annotations

import pytest
from tests.unit.embedded.logtools import segment_files

from strom.embedded import CompactionStats, EmbeddedLog
from strom.embedded.log import now_ms
from strom.errors import OffsetOutOfRangeError

VALUE = b"v" * 100
Record = tuple[bytes | None, bytes | None, int]


def _produce(log: EmbeddedLog, topic: str, records: list[Record]) -> None:
    with log.producer() as producer:
        producer.produce_batch(topic, records)


def test_small_segments_roll_on_size(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("rolling", config={"segment.bytes": 1024})
    for batch in range(10):
        _produce(log, "rolling", [(None, VALUE, batch)] * 5)  # ~600 bytes per append
    assert len(segment_files(log_path, "rolling")) >= 5
    # Reading across segment boundaries sees every record once, in order.
    records = log.read("rolling", 0, 0, 1000)
    assert [r.offset for r in records] == list(range(50))
    assert [r.timestamp for r in records] == [b for b in range(10) for _ in range(5)]


def test_roll_starts_a_new_segment(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("t")
    _produce(log, "t", [(None, VALUE, 1)])
    assert len(segment_files(log_path, "t")) == 1
    log.roll("t", 0)
    _produce(log, "t", [(None, VALUE, 2)])
    assert len(segment_files(log_path, "t")) == 2
    assert [r.timestamp for r in log.read("t", 0, 0, 10)] == [1, 2]


def test_retention_by_time_deletes_old_closed_segments(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("events", config={"retention.ms": 10_000})
    _produce(log, "events", [(None, VALUE, 1_000)] * 5)  # old
    log.roll("events", 0)
    _produce(log, "events", [(None, VALUE, 95_000)] * 5)  # recent
    log.roll("events", 0)
    _produce(log, "events", [(None, VALUE, 99_000)] * 5)  # active segment

    # At t=5s nothing is old enough yet.
    assert log.enforce_retention(now_ms=5_000) == 0
    assert log.log_start_offsets("events") == {0: 0}

    assert log.enforce_retention(now_ms=100_000) == 1
    assert log.log_start_offsets("events") == {0: 5}
    assert log.end_offsets("events") == {0: 15}
    assert [r.offset for r in log.read("events", 0, 5, 100)] == list(range(5, 15))
    with pytest.raises(OffsetOutOfRangeError):
        log.read("events", 0, 0, 100)
    assert len(segment_files(log_path, "events")) == 2
    # A consumer from the earliest offset starts at the new log start.
    assert log.consumer("g", ["events"]).position("events", 0) == 5


def test_the_active_segment_is_never_deleted(log: EmbeddedLog) -> None:
    log.create_topic("events", config={"retention.ms": 1})
    _produce(log, "events", [(None, VALUE, 1_000)] * 3)
    assert log.enforce_retention(now_ms=10**12) == 0
    assert len(log.read("events", 0, 0, 10)) == 3


def test_compact_topics_are_not_deleted_by_retention(log: EmbeddedLog) -> None:
    log.create_topic("table", config={"retention.ms": 1, "cleanup.policy": "compact"})
    _produce(log, "table", [(b"k", VALUE, 1_000)])
    log.roll("table", 0)
    _produce(log, "table", [(b"k", VALUE, 2_000)])
    assert log.enforce_retention(now_ms=10**12) == 0
    assert log.log_start_offsets("table") == {0: 0}


def test_compaction_keeps_the_latest_value_per_key(log: EmbeddedLog) -> None:
    hour = 3_600_000
    log.create_topic("table", config={"cleanup.policy": "compact", "delete.retention.ms": hour})
    records: list[Record] = []
    for round_ in range(3):
        records += [(f"k{k}".encode(), f"v{round_}".encode(), 100) for k in range(4)]
    records.append((b"k1", None, 100))  # a tombstone for k1
    _produce(log, "table", records)  # offsets 0..12
    log.roll("table", 0)
    _produce(log, "table", [(b"k0", b"active", 200)])  # offset 13, in the active segment

    stats = log.compact("table", now_ms=now_ms())
    assert isinstance(stats, CompactionStats)
    # Of 13 closed records, the latest of k2, k3 and k1 (the tombstone) stay;
    # k0's latest is in the active segment, which shadows its older values.
    assert stats == CompactionStats(segments_cleaned=1, records_removed=10, tombstones_removed=0)
    survivors = [(r.offset, r.key, r.value) for r in log.read("table", 0, 0, 100)]
    # Offsets keep their values (with gaps); the tombstone is still within delete.retention.ms.
    assert survivors == [
        (10, b"k2", b"v2"),
        (11, b"k3", b"v2"),
        (12, b"k1", None),
        (13, b"k0", b"active"),
    ]
    assert log.end_offsets("table") == {0: 14}

    # Past delete.retention.ms (counted from the segment's last write) the tombstone goes too.
    later = log.compact("table", now_ms=now_ms() + 2 * hour)
    assert later.tombstones_removed == 1
    assert [r.key for r in log.read("table", 0, 0, 100)] == [b"k2", b"k3", b"k0"]


def test_compacted_offsets_survive_a_consumer(log: EmbeddedLog) -> None:
    log.create_topic("table", config={"cleanup.policy": "compact"})
    _produce(log, "table", [(b"a", b"1", 1), (b"a", b"2", 2), (b"b", b"3", 3)])
    log.roll("table", 0)
    log.compact("table", now_ms=10)
    consumer = log.consumer("g", ["table"])
    values = []
    for _ in range(20):
        values += [r.value for r in consumer.poll(timeout=0.1)]
        if len(values) >= 2:
            break
    assert values == [b"2", b"3"]
    assert consumer.position("table", 0) == 3
