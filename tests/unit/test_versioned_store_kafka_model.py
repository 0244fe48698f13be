"""The versioned store's rows are Kafka's (RocksDBVersionedStore): a latest
value apart, older records in segments by their validTo, degenerate rows for
lone tombstones, whole segments expiring. Each expected value is worked out
from Kafka's put procedure (latest value store, then segments newest first,
then finishPut); the comments give the steps."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, cast

from strom import Topology, _core, serdes
from strom.processor import Processor, ProcessorContext, Record
from strom.state import Stores, VersionedRecord
from strom.state.versioned import (
    NOT_PUT,
    VALID_TO_UNDEFINED,
    VersionedBytesStore,
    VersionedKeyValueStore,
)
from strom.testing import TopologyTestDriver

S = serdes.String()


def store(history: int = 1_000, segment: int | None = None) -> VersionedKeyValueStore[str, str]:
    native, _ = VersionedBytesStore.open(None, history, segment)
    return VersionedKeyValueStore("versioned", S, S, native=native)


def at(s: VersionedKeyValueStore[str, str], as_of: int, key: str = "k") -> Any:
    found = s.get(key, as_of)
    return None if found is None else (found.value, found.timestamp, found.valid_to)


def versions(
    s: VersionedKeyValueStore[str, str], lo: int | None = None, hi: int | None = None
) -> list[tuple[str, int, int | None]]:
    return [(r.value, r.timestamp, r.valid_to) for r in s.versions("k", lo, hi)]


def segments(s: VersionedKeyValueStore[str, str], key: str = "k") -> dict[int, Any]:
    raw = s.native.inner.get(key.encode())
    assert raw is not None
    return {i: (row.next_timestamp, row.records) for i, row in s.native._history(raw).rows.items()}


class Batch:
    """A changelog batch as restore_records reads it."""

    def __init__(self, records: list[tuple[str, str | None, int]]) -> None:
        self.records = records

    def keys(self) -> list[bytes]:
        return [k.encode() for k, _, _ in self.records]

    def values(self) -> list[bytes | None]:
        return [None if v is None else v.encode() for _, v, _ in self.records]

    def timestamps(self) -> list[int]:
        return [t for _, _, t in self.records]


def restore(
    s: VersionedKeyValueStore[str, str], records: list[tuple[str, str | None, int]]
) -> None:
    s.native.restore_records(cast(_core.RecordBatch, Batch(records)))


def test_an_out_of_order_tombstone_still_bounds_after_the_latest_is_deleted() -> None:
    # The differential test's case 631 (seed a3679daa). v@20 is the latest.
    # The tombstone @0 finds the latest later (foundTs 20) and no segment, so
    # finishPut writes it into segment(20) as a record valid [0, 20). The
    # tombstone @20 equals the latest's time: the latest is just dropped. v@16
    # then falls inside that row (min 0 <= 16 < next 20): inserted there,
    # valid to 20, not the latest.
    s = store()
    assert s.put("k", "v20", 20) == VALID_TO_UNDEFINED
    assert s.put("k", None, 0) == 20
    assert s.put("k", None, 20) == VALID_TO_UNDEFINED
    assert s.put("k", "v16", 16) == 20
    assert s.get("k") is None
    assert at(s, 17) == ("v16", 16, 20)
    assert at(s, 10) is None
    assert at(s, 20) is None
    assert versions(s) == [("v16", 16, 20)]


def test_a_tombstone_on_the_latest_at_its_time_leaves_no_bound() -> None:
    # Nothing was ever moved to a segment, so dropping the latest leaves the
    # key empty: v@16 finds nothing later and becomes the latest.
    s = store()
    s.put("k", "v20", 20)
    assert s.put("k", None, 20) == VALID_TO_UNDEFINED
    assert s.put("k", "v16", 16) == VALID_TO_UNDEFINED
    assert s.get("k") == VersionedRecord("v16", 16)


def test_a_value_moved_out_of_the_latest_still_bounds() -> None:
    # v@20 moved v@10 into segment(20) valid [10, 20); dropping v@20 leaves
    # that row, so v@16 lands in it, valid to 20.
    s = store()
    s.put("k", "v10", 10)
    s.put("k", "v20", 20)
    s.put("k", None, 20)
    assert s.put("k", "v16", 16) == 20
    assert s.get("k") is None
    assert at(s, 12) == ("v10", 10, 16)
    assert at(s, 18) == ("v16", 16, 20)


def test_a_lone_tombstone_is_a_degenerate_row() -> None:
    # A tombstone on an empty key: finishPut with nothing found writes a
    # degenerate row (min = next = 50). An older value is then the row's
    # earliest record, valid to the tombstone (insertAsEarliest replaces the
    # degenerate record; the row still ends at 50).
    s = store(segment=100)
    assert s.put("k", None, 50) == VALID_TO_UNDEFINED
    assert segments(s) == {0: (50, [(50, None)])}
    assert s.put("k", "v30", 30) == 50
    assert segments(s) == {0: (50, [(30, b"v30")])}
    assert at(s, 40) == ("v30", 30, 50)
    assert at(s, 50) is None
    assert s.get("k") is None


def test_a_tombstone_after_a_lone_tombstone_extends_its_row() -> None:
    # None@10 is degenerate [10, 10]; None@30 finds that row ending at 10 <= 30
    # and nothing later: insertAsLatest(10, 30, None) turns the row into a
    # tombstone valid [10, 30). v@20 then falls inside it, valid to 30.
    s = store(segment=100)
    s.put("k", None, 10)
    assert s.put("k", None, 30) == VALID_TO_UNDEFINED
    assert segments(s) == {0: (30, [(10, None)])}
    assert s.put("k", "v20", 20) == 30
    assert s.get("k") is None
    assert at(s, 25) == ("v20", 20, 30)
    assert at(s, 15) is None


def test_a_put_after_a_degenerate_rows_gap() -> None:
    # None@50 is degenerate; v@90 is the latest. v@70: the latest is later
    # (foundTs 90); the row ends at 50 <= 70, so the search stops. finishPut
    # puts into segment(90) = that row, as its latest record after a gap:
    # a tombstone [50, 70), then v@70 valid to 90.
    s = store(segment=100)
    s.put("k", None, 50)
    s.put("k", "v90", 90)
    assert s.put("k", "v70", 70) == 90
    assert segments(s) == {0: (90, [(50, None), (70, b"v70")])}
    assert at(s, 60) is None
    assert at(s, 75) == ("v70", 70, 90)
    assert s.get("k") == VersionedRecord("v90", 90)


def test_records_move_between_segments() -> None:
    # Segments of 10 ms. v@25 moves a@5 into segment(25) = 2. c@12 falls in
    # that row (min 5 <= 12 < 25) but belongs to segment(12) = 1: a now ends
    # at 12 and moves to segment 1; c takes its place in segment 2.
    s = store(segment=10)
    s.put("k", "a", 5)
    s.put("k", "b", 25)
    assert segments(s) == {2: (25, [(5, b"a")])}
    assert s.put("k", "c", 12) == 25
    assert segments(s) == {1: (12, [(5, b"a")]), 2: (25, [(12, b"c")])}
    assert at(s, 7) == ("a", 5, 12)
    assert at(s, 20) == ("c", 12, 25)
    assert versions(s) == [("a", 5, 12), ("c", 12, 25), ("b", 25, None)]
    # d@3: rows 2 and 1 start later (foundTs 12, then 5); it goes into
    # segment(5) = 0, valid to 5.
    assert s.put("k", "d", 3) == 5
    assert at(s, 4) == ("d", 3, 5)
    # Kafka reads rows up to to_time's segment only: a (in segment 1, valid
    # [5, 12)) is not found for [0, 9].
    assert versions(s, 0, 9) == [("d", 3, 5)]
    assert versions(s, 0, 10) == [("d", 3, 5), ("a", 5, 12)]


def test_segments_expire_whole() -> None:
    # History 20, segments of 10. b@15 moves a@5 into segment 1. c@40: the
    # live segments start at segment(40 - 20) = 2, so segment 1 (a) is gone,
    # and b moves into segment(40) = 4.
    s = store(history=20, segment=10)
    s.put("k", "a", 5)
    s.put("k", "b", 15)
    s.put("k", "c", 40)
    assert segments(s) == {4: (40, [(15, b"b")])}
    assert at(s, 20) == ("b", 15, 40)
    assert at(s, 19) is None  # older than the history (40 - 20); the latest is later
    assert versions(s) == [("b", 15, 40), ("c", 40, None)]
    assert s.put("k", "x", 12) == NOT_PUT
    assert s.delete("k", 12) is None


def test_an_expired_row_is_not_read_before_the_key_is_written_again() -> None:
    # Another key moves stream time on; k's segment 0 row is dead, which a
    # read sees though k's entry was not rewritten.
    s = store(history=20, segment=10)
    s.put("k", "a", 1)
    s.put("k", "b", 5)
    s.put("o", "x", 40)
    assert versions(s) == [("b", 5, None)]
    assert at(s, 3) is None


def test_restore_puts_a_batch_as_of_its_end() -> None:
    # History 20, one segment (100 ms). In order: c@35 finds a's row (min 40)
    # later, then goes in as its earliest record. Restored, the batch ends at
    # stream time 100: that row starts before 100 - 20, so c would not change
    # the history kept and is not put (Kafka's restore short-cut).
    records: list[tuple[str, str | None, int]] = [
        ("k", "a", 40),
        ("k", "b", 50),
        ("k", "c", 35),
        ("o", "x", 100),
    ]
    put = store(history=20, segment=100)
    for key, value, timestamp in records:
        put.put(key, value, timestamp)
    assert versions(put) == [("c", 35, 40), ("a", 40, 50), ("b", 50, None)]
    restored = store(history=20, segment=100)
    restore(restored, records)
    assert versions(restored) == [("a", 40, 50), ("b", 50, None)]
    assert restored.native.observed_stream_time == 100
    assert at(put, 37) is None and at(restored, 37) is None


def test_restore_replays_the_changelog() -> None:
    s = store(segment=10)
    s.native.enable_changelog()
    for value, timestamp in [("a", 5), ("b", 25), ("c", 12), (None, 30), ("d", 28)]:
        s.put("k", value, timestamp)
    keys, values, stamps = s.native.take_changelog()
    assert stamps == [5, 25, 12, 30, 28]
    restored = store(segment=10)
    restore(
        restored,
        [
            (k.decode(), None if v is None else v.decode(), t)
            for k, v, t in zip(keys, values, stamps, strict=True)
        ],
    )
    assert (
        versions(restored)
        == versions(s)
        == [
            ("a", 5, 12),
            ("c", 12, 25),
            ("b", 25, 28),
            ("d", 28, 30),
        ]
    )
    assert restored.get("k") is None


def _old_entry(versions: list[tuple[int, bytes | None]]) -> bytes:
    parts = []
    for timestamp, value in versions:
        parts.append(struct.pack(">qi", timestamp, -1 if value is None else len(value)))
        parts.append(value or b"")
    return b"".join(parts)


def test_an_entry_of_the_former_format_is_converted() -> None:
    # Read as the puts in time order: a@5 latest, None@10 moves it into
    # segment 1 (valid [5, 10)), b@20 is the latest again.
    inner = _core.NativeKeyValueStore()
    inner.put(b"k", _old_entry([(5, b"a"), (10, None), (20, b"b")]))
    native = VersionedBytesStore(inner, 1_000, 10)
    s = VersionedKeyValueStore("versioned", S, S, native=native)
    assert native.observed_stream_time == 20
    assert s.get("k") == VersionedRecord("b", 20)
    assert at(s, 7) == ("a", 5, 10)
    assert at(s, 15) is None
    assert native.latest_entries() == [(b"k", b"b")]
    # c@12: the latest is later (foundTs 20), segment 1's row ends at 10 <=
    # 12, so c goes into segment(20) valid to 20; the entry is rewritten.
    assert s.put("k", "c", 12) == 20
    assert at(s, 15) == ("c", 12, 20)
    raw = inner.get(b"k")
    assert raw is not None and raw[0] == 0xFF


def test_a_former_entry_ending_in_a_tombstone_keeps_its_bound() -> None:
    # a@5 then None@10: a is in segment 1 valid [5, 10), no latest. v@8 falls
    # in that row but belongs to segment 0: a moves there ending at 8, v
    # takes its place, valid to 10.
    inner = _core.NativeKeyValueStore()
    inner.put(b"k", _old_entry([(5, b"a"), (10, None)]))
    s = VersionedKeyValueStore("versioned", S, S, native=VersionedBytesStore(inner, 1_000, 10))
    assert s.get("k") is None
    assert at(s, 7) == ("a", 5, 10)
    assert s.put("k", "v", 8) == 10
    assert at(s, 6) == ("a", 5, 8)
    assert at(s, 9) == ("v", 8, 10)
    assert s.get("k") is None


def test_a_persistent_store_reopens_with_its_stream_time(tmp_path: Path) -> None:
    native, meta = VersionedBytesStore.open(tmp_path / "v", 1_000, 10)
    assert meta is None
    s = VersionedKeyValueStore("versioned", S, S, native=native)
    s.put("k", "a", 5)
    s.put("k", None, 30)
    s.put("j", "b", 12)
    native.commit(b"meta")
    native.close()
    again, meta = VersionedBytesStore.open(tmp_path / "v", 1_000, 10)
    assert meta == b"meta"
    assert again.observed_stream_time == 30  # the tombstone's time, kept as a row's end
    reopened = VersionedKeyValueStore("versioned", S, S, native=again)
    assert at(reopened, 20) == ("a", 5, 30)
    assert reopened.get("k") is None
    assert again.latest_entries() == [(b"j", b"b")]
    again.close()


class Put(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.store: VersionedKeyValueStore[str, str] = context.get_state_store("v")

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, record.value, record.timestamp)


def test_the_segment_interval_reaches_the_store() -> None:
    # Kafka's default for a history of at most a minute: max(history / 3, 2 s).
    assert Stores.persistent_versioned_key_value_store("v", 1_000).segment_interval_ms == 2_000
    assert (
        Stores.persistent_versioned_key_value_store("v", 3_600_000).segment_interval_ms == 300_000
    )
    given = Stores.persistent_versioned_key_value_store("v", 1_000, segment_interval=10)
    assert given.segment_interval_ms == 10

    topology = Topology()
    topology.add_source("src", "in", key_serde=S, value_serde=S)
    topology.add_processor("put", Put, "src")
    topology.add_state_store(Stores.versioned_key_value_store_builder(given, S, S), "put")
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "a", 5)
        source.pipe_input("k", "b", 25)
        source.pipe_input("k", "c", 12)  # moves a into segment 1 (see above)
        v = driver.get_versioned_key_value_store("v")
        assert v.native.segment_interval_ms == 10
        assert segments(v) == {1: (12, [(5, b"a")]), 2: (25, [(12, b"c")])}
