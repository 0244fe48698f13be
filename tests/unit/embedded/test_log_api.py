"""EmbeddedLog through its Python API: topics, produce/flush/read, errors."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import pytest
from tests.unit.embedded.logtools import release, run_python

from strom.embedded import (
    ConsumedRecord,
    EmbeddedLog,
    RecordBatch,
)
from strom.errors import (
    ConfigError,
    OffsetOutOfRangeError,
    StromError,
    UnknownTopicError,
)


def test_create_topic_lists_it_with_its_partitions(log: EmbeddedLog) -> None:
    assert log.topics() == []
    log.create_topic("b-topic", partitions=3)
    log.create_topic("a-topic")
    assert log.topics() == ["a-topic", "b-topic"]
    assert log.partitions("b-topic") == 3
    assert log.partitions("a-topic") == 1
    assert log.end_offsets("b-topic") == {0: 0, 1: 0, 2: 0}
    assert log.log_start_offsets("b-topic") == {0: 0, 1: 0, 2: 0}


def test_topic_config_round_trips_kafka_keys(log: EmbeddedLog) -> None:
    log.create_topic(
        "configured",
        config={"cleanup.policy": "compact", "segment.bytes": 4096, "retention.ms": 60_000},
    )
    config = log.topic_config("configured")
    assert config["cleanup.policy"] == "compact"
    assert config["segment.bytes"] == "4096"
    assert config["retention.ms"] == "60000"
    # The embedded log keeps data forever unless told otherwise.
    assert log.topic_config(_topic(log, "defaults"))["retention.ms"] == "-1"


def _topic(log: EmbeddedLog, name: str, partitions: int = 1) -> str:
    log.create_topic(name, partitions)
    return name


def test_bad_topic_config_is_a_config_error(log: EmbeddedLog) -> None:
    with pytest.raises(ConfigError, match=r"segment\.bites"):
        log.create_topic("t", config={"segment.bites": "1024"})
    with pytest.raises(ConfigError, match=r"cleanup\.policy"):
        log.create_topic("t", config={"cleanup.policy": "shred"})
    with pytest.raises(ConfigError, match="partitions"):
        log.create_topic("t", partitions=0)
    # Nothing was created by the failed calls.
    assert log.topics() == []


def test_creating_an_existing_topic_fails(log: EmbeddedLog) -> None:
    log.create_topic("once")
    with pytest.raises(ConfigError, match="already exists"):
        log.create_topic("once", partitions=2)
    assert log.partitions("once") == 1


def test_produce_flush_read_round_trip(log: EmbeddedLog) -> None:
    log.create_topic("events")
    with log.producer() as producer:
        producer.produce("events", b"k1", b"v1", timestamp=1_000)
        producer.produce("events", None, b"null key", timestamp=2_000)
        producer.produce("events", b"tombstone", None, timestamp=3_000)
        producer.produce(
            "events",
            b"k2",
            b"with headers",
            timestamp=4_000,
            headers=[("trace", b"abc"), ("empty", None), ("trace", b"again")],
        )
        producer.produce("events", b"", b"", timestamp=5_000, headers={"h": b"v"})
    records = log.read("events", 0, 0, 100)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (0, 1_000, b"k1", b"v1"),
        (1, 2_000, None, b"null key"),
        (2, 3_000, b"tombstone", None),
        (3, 4_000, b"k2", b"with headers"),
        (4, 5_000, b"", b""),
    ]
    assert all(r.topic == "events" and r.partition == 0 for r in records)
    assert records[0].headers == []
    assert records[3].headers == [("trace", b"abc"), ("empty", None), ("trace", b"again")]
    assert records[4].headers == [("h", b"v")]
    assert log.end_offsets("events") == {0: 5}


def test_default_timestamp_is_the_wall_clock(log: EmbeddedLog) -> None:
    log.create_topic("t")
    before = time.time_ns() // 1_000_000
    with log.producer() as producer:
        producer.produce("t", b"k", b"v")
        producer.produce_batch("t", [(b"k", b"v")])
    after = time.time_ns() // 1_000_000
    for record in log.read("t", 0, 0, 10):
        assert before <= record.timestamp <= after


def test_records_are_not_visible_before_they_are_appended(log: EmbeddedLog) -> None:
    log.create_topic("t")
    producer = log.producer()
    producer.produce("t", b"k", b"v")
    assert log.end_offsets("t") == {0: 0}
    producer.flush()
    assert log.end_offsets("t") == {0: 1}


def test_read_from_an_offset_and_at_the_end(log: EmbeddedLog) -> None:
    log.create_topic("t")
    with log.producer() as producer:
        producer.produce_batch("t", [(None, str(i).encode()) for i in range(10)])
    assert [r.value for r in log.read("t", 0, 7, 100)] == [b"7", b"8", b"9"]
    assert [r.offset for r in log.read("t", 0, 2, 3)] == [2, 3, 4]
    assert log.read("t", 0, 10, 100) == []
    with pytest.raises(OffsetOutOfRangeError, match="11"):
        log.read("t", 0, 11, 100)


def test_read_batch_is_columnar(log: EmbeddedLog) -> None:
    log.create_topic("t")
    with log.producer() as producer:
        producer.produce_batch(
            "t", [(b"a", b"1", 10), (None, b"2", 20), (b"c", None, 30), (b"d", b"4", 40)]
        )
    batch = log.read_batch("t", 0, 1, 2)
    assert isinstance(batch, RecordBatch)
    assert (batch.topic, batch.partition, len(batch), batch.next_offset) == ("t", 0, 2, 3)
    assert batch.offsets() == [1, 2]
    assert batch.timestamps() == [20, 30]
    assert batch.keys() == [None, b"c"]
    assert batch.values() == [b"2", None]
    assert batch.headers() == [[], []]
    assert batch.records() == log.read("t", 0, 1, 2)
    # Columns are fresh lists each time: mutating one does not touch the batch.
    batch.values().clear()
    assert batch.values() == [b"2", None]
    empty = log.read_batch("t", 0, 4, 10)
    assert (len(empty), empty.next_offset, empty.values()) == (0, 4, [])


HEADERS_COLUMN: list[list[tuple[str, bytes | None]] | None] = [
    [("trace", b"abc"), ("empty", None)],
    None,
    [],
    [("dup", b"1"), ("dup", b""), ("\u00e9t\u00e9", b"\x00\xff")],
    None,
]


def test_produce_columns_carries_headers_record_for_record(log: EmbeddedLog) -> None:
    log.create_topic("t", 2)
    keys: list[bytes | None] = [b"a", b"b", None, b"d", b"e"]
    values: list[bytes | None] = [b"1", None, b"3", b"4", b"5"]
    with log.producer() as producer:
        producer.produce_columns(
            "t",
            keys,
            values,
            timestamps=[10, 20, 30, 40, 50],
            partitions=[0, 1, 0, 0, 1],
            headers=HEADERS_COLUMN,
        )
    got = {(r.partition, r.offset): r for p in (0, 1) for r in log.read("t", p, 0, 100)}
    where = [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]
    for i, at in enumerate(where):
        record = got.pop(at)
        assert (record.key, record.value, record.timestamp) == (keys[i], values[i], 10 * (i + 1))
        assert record.headers == (HEADERS_COLUMN[i] or [])
    assert got == {}
    # The consumer's records carry them as well.
    consumer = log.consumer("g", ["t"])
    polled = {(r.partition, r.offset): r.headers for r in consumer.poll(100, 1.0)}
    assert polled == {at: HEADERS_COLUMN[i] or [] for i, at in enumerate(where)}
    consumer.close()


def test_record_batch_has_headers(log: EmbeddedLog) -> None:
    log.create_topic("t")
    with log.producer() as producer:
        producer.produce_columns("t", [b"k"] * 5, [b"v"] * 5, headers=HEADERS_COLUMN)
        producer.produce_columns("t", [b"k"] * 2, [b"v"] * 2)  # offsets 5 and 6: none
    assert log.read_batch("t", 0, 0, 100).has_headers()
    assert log.read_batch("t", 0, 0, 1).has_headers()
    assert not log.read_batch("t", 0, 1, 2).has_headers()  # None, then []
    assert log.read_batch("t", 0, 3, 1).has_headers()
    assert not log.read_batch("t", 0, 4, 100).has_headers()
    assert not log.read_batch("t", 0, 7, 100).has_headers()  # empty
    batch = log.read_batch("t", 0, 0, 100)
    assert batch.headers() == [h or [] for h in HEADERS_COLUMN] + [[], []]
    consumer = log.consumer("g", ["t"])
    batches = consumer.poll_batches(100, 1.0)
    assert [b.has_headers() for b in batches] == [True]
    consumer.seek("t", 0, 4)
    assert [b.has_headers() for b in consumer.poll_batches(100, 1.0)] == [False]
    consumer.close()


def test_produce_columns_with_bad_headers_buffers_nothing(log: EmbeddedLog) -> None:
    log.create_topic("t")
    producer = log.producer()
    with pytest.raises(ConfigError, match=r"headers \(1\) must have the same length"):
        producer.produce_columns("t", [b"a", b"b"], [b"1", b"2"], headers=[None])
    with pytest.raises(ValueError, match="same length"):
        producer.produce_columns("t", [b"a"], [b"1"], headers=[None, None])
    bad: list[object] = [None, [("h", "not bytes")]]
    with pytest.raises(TypeError, match=r"headers\[1\] must be None or a list"):
        producer.produce_columns("t", [b"a", b"b"], [b"1", b"2"], headers=bad)  # type: ignore[arg-type]
    producer.flush()
    assert log.end_offsets("t") == {0: 0}


def test_consumed_record_is_an_immutable_value() -> None:
    a = ConsumedRecord("t", 1, 5, 100, b"k", b"v", [("h", b"x")])
    same = ConsumedRecord("t", 1, 5, 100, b"k", b"v", [("h", b"x")])
    assert a == same
    assert hash(a) == hash(same)
    assert a != ConsumedRecord("t", 1, 5, 100, b"k", b"other", [("h", b"x")])
    assert a != ConsumedRecord("t", 1, 5, 100, b"k", b"v")
    assert a != ConsumedRecord("t", 1, 5, 100, None, b"v", [("h", b"x")])
    assert a != ("t", 1, 5)
    assert repr(a) == (
        "ConsumedRecord(topic='t', partition=1, offset=5, timestamp=100, key=b'k', "
        "value=b'v', headers=[('h', b'x')])"
    )
    with pytest.raises(AttributeError):
        a.value = b"changed"  # type: ignore[misc]
    a.headers.append(("mutated", None))
    assert a.headers == [("h", b"x")]


def test_two_handles_in_one_process_share_the_log(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("shared")
    other = EmbeddedLog(Path(log_path))
    assert other.topics() == ["shared"]
    with other.producer() as producer:
        producer.produce("shared", b"k", b"from the other handle")
    assert [r.value for r in log.read("shared", 0, 0, 10)] == [b"from the other handle"]
    other.close()
    # Closing one handle leaves the others working.
    assert log.end_offsets("shared") == {0: 1}


def test_closed_handles_refuse_work(log: EmbeddedLog) -> None:
    log.create_topic("t")
    producer = log.producer()
    consumer = log.consumer("g", ["t"])
    producer.close()
    consumer.close()
    with pytest.raises(StromError, match="closed"):
        producer.produce("t", None, b"v")
    with pytest.raises(StromError, match="closed"):
        consumer.poll(timeout=0)
    log.close()
    with pytest.raises(StromError, match="closed"):
        log.topics()
    assert "closed" in repr(log)


def test_unknown_topic_and_partition_errors(log: EmbeddedLog) -> None:
    log.create_topic("two", partitions=2)
    producer = log.producer()
    with pytest.raises(UnknownTopicError, match="nope"):
        producer.produce("nope", b"k", b"v")
    with pytest.raises(UnknownTopicError, match="nope"):
        producer.produce_batch("nope", [(b"k", b"v")])
    with pytest.raises(UnknownTopicError, match="partition 2"):
        producer.produce("two", b"k", b"v", partition=2)
    with pytest.raises(UnknownTopicError, match="partition -1"):
        producer.produce("two", b"k", b"v", partition=-1)
    with pytest.raises(UnknownTopicError, match="partition 5"):
        producer.produce_columns("two", [b"k"], [b"v"], partitions=[5])
    with pytest.raises(UnknownTopicError, match="nope"):
        log.read("nope", 0, 0, 1)
    with pytest.raises(UnknownTopicError, match="partition 3"):
        log.read("two", 3, 0, 1)
    with pytest.raises(UnknownTopicError, match="nope"):
        log.end_offsets("nope")
    with pytest.raises(UnknownTopicError, match="nope"):
        log.partitions("nope")
    with pytest.raises(UnknownTopicError, match="nope"):
        log.consumer("g", ["nope"])
    # UnknownTopicError is a KeyError whose message reads well.
    with pytest.raises(KeyError) as info:
        log.partitions("nope")
    assert str(info.value) == "unknown topic 'nope'"
    producer.flush()
    assert log.end_offsets("two") == {0: 0, 1: 0}


def test_a_bad_batch_buffers_nothing(log: EmbeddedLog) -> None:
    log.create_topic("t")
    producer = log.producer()
    with pytest.raises(TypeError, match="value must be bytes or None, not str"):
        producer.produce_batch("t", [(b"k", b"ok"), (b"k", "not bytes")])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="same length"):
        producer.produce_columns("t", [b"a", b"b"], [b"1"])
    with pytest.raises(ConfigError, match="tuple of 4"):
        producer.produce_batch("t", [(b"k", b"v", 1, 2)])  # type: ignore[list-item]
    producer.flush()
    assert log.end_offsets("t") == {0: 0}


def test_produce_batch_counts_and_keeps_order(log: EmbeddedLog) -> None:
    log.create_topic("t")
    with log.producer() as producer:
        assert producer.produce_batch("t", ((None, bytes([i])) for i in range(200))) == 200
    assert [r.value for r in log.read("t", 0, 0, 1000)] == [bytes([i]) for i in range(200)]


def test_large_produce_is_appended_in_several_batches_in_order(log: EmbeddedLog) -> None:
    # ~3 MiB through one producer crosses the 1 MiB append threshold a few times.
    log.create_topic("big")
    value = b"x" * 1000
    with log.producer() as producer:
        for chunk in range(3):
            producer.produce_batch(
                "big",
                [
                    (None, value + i.to_bytes(4, "big"))
                    for i in range(chunk * 1000, (chunk + 1) * 1000)
                ],
            )
    offset, seen = 0, list[int]()
    while offset < log.end_offsets("big")[0]:
        batch = log.read_batch("big", 0, offset, 500)
        seen.extend(int.from_bytes(v[-4:], "big") for v in batch.values() if v is not None)
        offset = batch.next_offset
    assert seen == list(range(3000))


def test_flush_makes_data_visible_to_a_new_process(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("durable")
    producer = log.producer()
    producer.produce("durable", b"k", b"v", timestamp=42)
    producer.flush()
    release(producer, log)
    out = run_python(
        """
        from strom.embedded import EmbeddedLog
        log = EmbeddedLog(sys.argv[1])
        return [[r.offset, r.timestamp, r.value.decode()] for r in log.read("durable", 0, 0, 10)]
        """,
        log_path,
    )
    assert out == [[0, 42, "v"]]


def test_a_producer_shared_by_threads_keeps_each_threads_order(log: EmbeddedLog) -> None:
    log.create_topic("t", partitions=2)
    producer = log.producer()
    per_thread, threads = 3000, 4
    value = b"x" * 500  # enough bytes to cross the append threshold while threads race
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            for i in range(per_thread):
                producer.produce("t", None, value + f"{n}:{i}".encode(), partition=i % 2)
                if i % 500 == 0:
                    producer.flush()
        except BaseException as e:  # surfaced below
            errors.append(e)

    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    producer.flush()
    assert errors == []
    for partition in range(2):
        seen: dict[int, list[int]] = {n: [] for n in range(threads)}
        offset = 0
        while offset < log.end_offsets("t")[partition]:
            batch = log.read_batch("t", partition, offset, 5000)
            for v in batch.values():
                assert v is not None
                n, i = v[len(value) :].decode().split(":")
                seen[int(n)].append(int(i))
            offset = batch.next_offset
        expected = [i for i in range(per_thread) if i % 2 == partition]
        assert seen == {n: expected for n in range(threads)}


def test_reading_leaves_the_garbage_collector_as_it_was(log: EmbeddedLog) -> None:
    # Large reads pause the cyclic GC while they build records; it must come back.
    log.create_topic("t")
    with log.producer() as producer:
        producer.produce_batch("t", [(None, b"v", 1)] * 1000)
    assert gc.isenabled()
    assert len(log.read("t", 0, 0, 1000)) == 1000
    assert len(log.read_batch("t", 0, 0, 1000).headers()) == 1000
    assert gc.isenabled()
    gc.disable()
    try:
        assert len(log.read("t", 0, 0, 1000)) == 1000
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_io_errors_are_oserrors_with_errno_and_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with pytest.raises(NotADirectoryError) as info:
        EmbeddedLog(blocker / "log")
    assert info.value.filename == str(blocker / "log")
