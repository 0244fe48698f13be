"""The key-value store over both native flavours (in memory, persistent):
every operation and its ordering, the batch calls (``put_all``, ``get_all``,
``count``) on both their small-batch and their sorted large-batch paths, the
native restore from the embedded log, commit and reopen, the typed layer, and
property tests against a dict model, with reopen for the persistent flavour."""

from __future__ import annotations

import random
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom import _core, serdes
from strom.embedded import EmbeddedLog
from strom.errors import OffsetOutOfRangeError, StoreError, UnknownTopicError
from strom.keyvalue import KeyValue
from strom.state.key_value import KeyValueStore

Store = _core.NativeKeyValueStore
Make = Callable[[], Store]

# Batches of at least this many writes take the sorted path in the bindings.
LARGE = 1000


@pytest.fixture(params=["memory", "persistent"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(flavour: str, tmp_path: Path) -> Iterator[Make]:
    """Opens fresh stores of the test's flavour and closes them afterwards."""
    opened: list[Store] = []

    def build() -> Store:
        if flavour == "memory":
            store = Store()
        else:
            store, committed = Store.open(tmp_path / f"store-{len(opened)}")
            assert committed is None
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


@pytest.fixture
def store(make: Make) -> Store:
    return make()


def contents(store: Store) -> dict[bytes, bytes]:
    return dict(store.range())


def apply_in_order(
    model: dict[bytes, bytes], keys: list[bytes], values: list[bytes | None]
) -> None:
    for k, v in zip(keys, values, strict=True):
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v


# --- single-key operations ---------------------------------------------------------


def test_get_of_an_absent_key_is_none(store: Store) -> None:
    assert store.get(b"nope") is None
    assert len(store) == 0


def test_put_get_overwrite(store: Store) -> None:
    store.put(b"k", b"v1")
    assert store.get(b"k") == b"v1"
    store.put(b"k", b"value two")
    assert store.get(b"k") == b"value two"
    assert len(store) == 1


def test_put_none_deletes(store: Store) -> None:
    store.put(b"k", b"v")
    store.put(b"k", None)
    assert store.get(b"k") is None
    assert len(store) == 0
    # Deleting an absent key is fine.
    store.put(b"k", None)
    assert len(store) == 0


def test_empty_key_and_empty_value_are_ordinary(store: Store) -> None:
    store.put(b"", b"empty key")
    store.put(b"x", b"")
    assert store.get(b"") == b"empty key"
    assert store.get(b"x") == b""  # an empty value is a value, not a delete
    assert store.range() == [(b"", b"empty key"), (b"x", b"")]


def test_delete_returns_the_old_value(store: Store) -> None:
    store.put(b"k", b"v")
    assert store.delete(b"k") == b"v"
    assert store.get(b"k") is None
    assert store.delete(b"k") is None


def test_put_if_absent(store: Store) -> None:
    assert store.put_if_absent(b"k", b"first") is None
    assert store.put_if_absent(b"k", b"second") == b"first"
    assert store.get(b"k") == b"first"
    store.delete(b"k")
    assert store.put_if_absent(b"k", b"third") is None
    assert store.get(b"k") == b"third"


def test_large_values(store: Store) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    store.put(b"big", big)
    store.put(b"small", b"s")
    assert store.get(b"big") == big
    assert store.get_all([b"small", b"big"]) == [b"s", big]


def test_len_and_approximate_num_entries_count_live_keys(store: Store) -> None:
    for i in range(10):
        store.put(b"%d" % i, b"v")
    store.put(b"3", b"again")
    store.delete(b"4")
    assert len(store) == 9
    assert store.approximate_num_entries() == 9


def test_clear(store: Store) -> None:
    store.put_all([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    store.clear()
    assert store.range() == []
    assert len(store) == 0
    store.put(b"a", b"after")
    assert contents(store) == {b"a": b"after"}


# --- ordering --------------------------------------------------------------------

KEYS = [b"\xff", b"b", b"\x80", b"a", b"", b"ab", b"\x00", b"\x7f", b"a\x00", b"\xff\x00"]
# Unsigned byte order, as in Kafka's stores (a signed order would put \x80 first).
ORDERED = [b"", b"\x00", b"a", b"a\x00", b"ab", b"b", b"\x7f", b"\x80", b"\xff", b"\xff\x00"]


def test_range_follows_unsigned_byte_order(store: Store) -> None:
    for k in KEYS:
        store.put(k, k + b"!")
    assert sorted(KEYS) == ORDERED
    assert [k for k, _ in store.range()] == ORDERED
    assert all(v == k + b"!" for k, v in store.range())


def test_range_bounds_are_inclusive_and_open_when_none(store: Store) -> None:
    for k in KEYS:
        store.put(k, b"v")
    assert [k for k, _ in store.range(b"a", b"b")] == [b"a", b"a\x00", b"ab", b"b"]
    assert [k for k, _ in store.range(b"ab", None)] == ORDERED[4:]
    assert [k for k, _ in store.range(None, b"\x00")] == [b"", b"\x00"]
    # Bounds need not be keys of the store.
    assert [k for k, _ in store.range(b"aa", b"az")] == [b"ab"]
    assert store.range(b"c", b"d") == []


def test_inverted_range_is_empty(store: Store) -> None:
    store.put_all([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    assert store.range(b"c", b"a") == []
    assert store.range(b"c", b"a", reverse=True) == []


def test_reverse_range(store: Store) -> None:
    for k in KEYS:
        store.put(k, b"v")
    assert [k for k, _ in store.range(reverse=True)] == ORDERED[::-1]
    assert [k for k, _ in store.range(b"a", b"b", reverse=True)] == [b"b", b"ab", b"a\x00", b"a"]


def test_prefix_scan(store: Store) -> None:
    for k in [b"ab", b"a", b"abc", b"b", b"aa\xff", b"ac", b"\xff", b"\xff\xff", b"\xfe"]:
        store.put(k, k)
    assert [k for k, _ in store.prefix_scan(b"ab")] == [b"ab", b"abc"]
    assert [k for k, _ in store.prefix_scan(b"a")] == [b"a", b"aa\xff", b"ab", b"abc", b"ac"]
    assert [k for k, _ in store.prefix_scan(b"\xff")] == [b"\xff", b"\xff\xff"]
    assert store.prefix_scan(b"z") == []
    assert [k for k, _ in store.prefix_scan(b"")] == [k for k, _ in store.range()]


def test_scans_are_snapshots(store: Store) -> None:
    store.put_all([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    seen = []
    for k, v in store.range():
        seen.append((k, v))
        store.delete(b"c")
        store.put(b"d", b"4")
        store.put(b"b", b"changed")
    assert seen == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert contents(store) == {b"a": b"1", b"b": b"changed", b"d": b"4"}


# --- batch calls ------------------------------------------------------------------


@pytest.mark.parametrize("size", [5, LARGE * 3])
def test_put_all_equals_writes_applied_in_order(store: Store, size: int) -> None:
    """Repeated keys, deletes of present and absent keys, re-puts after
    deletes: on the large path the bindings sort the batch by key, and the
    result must still be the in-order one."""
    rng = random.Random(size)
    pool = [rng.randbytes(rng.randint(0, 4)) for _ in range(max(3, size // 10))]
    model: dict[bytes, bytes] = {}
    for _ in range(3):
        keys = [rng.choice(pool) for _ in range(size)]
        values = [None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 20)) for _ in keys]
        store.put_all(keys, values)
        apply_in_order(model, keys, values)
        assert contents(store) == model
        assert len(store) == len(model)


def test_put_all_of_one_key_keeps_the_last_write(store: Store) -> None:
    keys = [b"k"] * LARGE
    values: list[bytes | None] = [b"%d" % i for i in range(LARGE)]
    store.put_all(keys, values)
    assert store.get(b"k") == b"%d" % (LARGE - 1)
    values[-1] = None
    store.put_all(keys, values)
    assert store.get(b"k") is None


def test_put_all_checks_its_arguments_before_writing(store: Store) -> None:
    store.put(b"a", b"old")
    with pytest.raises(ValueError, match="2 keys and 1 values"):
        store.put_all([b"a", b"b"], [b"1"])
    with pytest.raises(TypeError, match=r"values\[1\] must be bytes or None, not int"):
        store.put_all([b"a", b"b"], [b"new", 5])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"keys\[0\] must be bytes, not str"):
        store.put_all(["a"], [b"x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"keys\[1\] must be bytes, not NoneType"):
        store.put_all([b"a", None], [b"x", b"y"])  # type: ignore[list-item]
    assert contents(store) == {b"a": b"old"}
    store.put_all([], [])
    assert contents(store) == {b"a": b"old"}


@pytest.mark.parametrize("size", [4, LARGE * 2])
def test_get_all_answers_in_the_order_asked(store: Store, size: int) -> None:
    rng = random.Random(size)
    present = {rng.randbytes(8): rng.randbytes(rng.randint(0, 30)) for _ in range(size)}
    store.put_all(list(present), list(present.values()))
    asked = [
        rng.choice(list(present)) if rng.random() < 0.7 else rng.randbytes(9) for _ in range(size)
    ]
    asked += asked[: size // 4]  # repeats
    assert store.get_all(asked) == [present.get(k) for k in asked]
    assert store.get_all([]) == []


def test_get_all_rejects_non_bytes(store: Store) -> None:
    with pytest.raises(TypeError, match=r"keys\[1\] must be bytes"):
        store.get_all([b"a", "b"])  # type: ignore[list-item]


@pytest.mark.parametrize("size", [6, LARGE * 2])
def test_count_kernel_counts_in_record_order(store: Store, size: int) -> None:
    rng = random.Random(size)
    pool = [b"w%d" % i for i in range(max(2, size // 20))]
    store.put(pool[0], (41).to_bytes(8, "big"))
    keys = [rng.choice(pool) for _ in range(size)]
    counts, encoded = store.count(keys)
    model = {pool[0]: 41}
    expected = []
    for k in keys:
        model[k] = model.get(k, 0) + 1
        expected.append(model[k])
    assert counts == expected
    assert encoded == [c.to_bytes(8, "big") for c in expected]
    assert {k: int.from_bytes(v, "big") for k, v in store.range()} == model


def test_count_rejects_a_value_that_is_not_a_long(store: Store) -> None:
    store.put(b"k", b"abc")
    with pytest.raises(Exception, match="not 8"):
        store.count([b"k"])


def test_batch_calls_let_other_threads_run(store: Store) -> None:
    """put_all runs detached: another thread gets through single calls."""
    keys = [b"%08d" % i for i in range(200_000)]
    values: list[bytes | None] = [b"v"] * len(keys)
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(200):
                store.get(b"00000001")
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    store.put_all(keys, values)
    t.join(timeout=60)
    assert not t.is_alive()
    assert errors == []
    assert store.get_all([keys[0], keys[-1]]) == [b"v", b"v"]


# --- closed stores ----------------------------------------------------------------


def test_every_call_on_a_closed_store_raises(store: Store) -> None:
    store.put(b"k", b"v")
    store.close()
    store.close()  # closing twice is fine
    calls: list[Callable[[], object]] = [
        lambda: store.get(b"k"),
        lambda: store.get_all([b"k"]),
        lambda: store.put(b"k", b"v"),
        lambda: store.put_all([b"k"], [b"v"]),
        lambda: store.put_if_absent(b"k", b"v"),
        lambda: store.delete(b"k"),
        store.range,
        lambda: store.prefix_scan(b"k"),
        lambda: len(store),
        store.clear,
        lambda: store.commit(b"m"),
        lambda: store.count([b"k"]),
        lambda: store.persistent,
    ]
    for call in calls:
        with pytest.raises(StoreError, match="closed"):
            call()


# --- commit and reopen (persistent) -------------------------------------------------


def test_flavour_flag(flavour: str, store: Store) -> None:
    assert store.persistent == (flavour == "persistent")


def test_commit_is_a_no_op_in_memory() -> None:
    store = Store()
    store.put(b"k", b"v")
    store.commit(b"meta")
    assert store.get(b"k") == b"v"


def test_reopen_returns_the_state_and_metadata_of_the_last_commit(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store, committed = Store.open(path)
    assert committed is None
    store.put_all([b"a", b"b"], [b"1", b"2"])
    store.commit(b"first")
    store.put(b"a", b"uncommitted")
    store.delete(b"b")
    store.put(b"c", b"3")
    store.close()

    store, committed = Store.open(path)
    assert committed == b"first"
    assert contents(store) == {b"a": b"1", b"b": b"2"}
    store.delete(b"a")
    store.commit(b"second")
    store.close()

    store, committed = Store.open(path)
    assert committed == b"second"
    assert contents(store) == {b"b": b"2"}
    store.close()


def test_writes_without_any_commit_are_gone_after_reopen(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "s")
    store.put(b"a", b"1")
    store.close()
    store, committed = Store.open(tmp_path / "s")
    assert committed is None
    assert len(store) == 0
    store.close()


def test_a_store_directory_opens_once(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "s")
    with pytest.raises(StoreError, match="locked"):
        Store.open(tmp_path / "s")
    with pytest.raises(StoreError, match="locked"):
        Store.destroy(tmp_path / "s")
    store.close()
    again, _ = Store.open(tmp_path / "s")
    again.close()


def test_destroy_removes_the_store(tmp_path: Path) -> None:
    store, _ = Store.open(tmp_path / "s")
    store.put(b"a", b"1")
    store.commit(b"m")
    store.close()
    Store.destroy(tmp_path / "s")
    assert not (tmp_path / "s").exists()
    Store.destroy(tmp_path / "s")  # absent: fine
    store, committed = Store.open(tmp_path / "s")
    assert committed is None
    assert len(store) == 0
    store.close()


def test_many_commits_and_a_large_batch_survive_reopen(tmp_path: Path) -> None:
    rng = random.Random(7)
    store, _ = Store.open(tmp_path / "s")
    model: dict[bytes, bytes] = {}
    for round_ in range(20):
        keys = [rng.randbytes(2) for _ in range(LARGE)]
        values = [None if rng.random() < 0.2 else rng.randbytes(50) for _ in keys]
        store.put_all(keys, values)
        apply_in_order(model, keys, values)
        store.commit(b"%d" % round_)
    store.close()
    store, committed = Store.open(tmp_path / "s")
    assert committed == b"19"
    assert contents(store) == model
    store.close()


# --- native restore from the embedded log ---------------------------------------------


def fill_changelog(
    log: EmbeddedLog, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> None:
    producer = log.producer()
    producer.produce_columns(
        topic, [k for k, _ in records], [v for _, v in records], partitions=[0] * len(records)
    )
    producer.flush()


def test_restore_from_log_applies_puts_and_tombstones(store: Store, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1)
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"a", b"3"),
        (b"b", None),
        (b"c", b""),
    ]
    fill_changelog(log, "cl", records)
    store.put(b"b", b"stale")
    store.put(b"z", b"kept")
    assert store.restore_from_log(log.native, "cl", 0, 0) == (5, 5)
    assert contents(store) == {b"a": b"3", b"c": b"", b"z": b"kept"}
    # At the end: nothing to do.
    assert store.restore_from_log(log.native, "cl", 0, 5) == (0, 5)


def test_restore_from_log_stops_at_to_offset_and_resumes(store: Store, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1)
    rng = random.Random(3)
    records: list[tuple[bytes | None, bytes | None]] = [
        (rng.randbytes(1), None if rng.random() < 0.2 else rng.randbytes(10)) for _ in range(50_000)
    ]
    fill_changelog(log, "cl", records)
    model: dict[bytes, bytes] = {}
    applied, next_offset = store.restore_from_log(log.native, "cl", 0, 0, 20_000)
    assert (applied, next_offset) == (20_000, 20_000)
    apply_in_order(model, [k for k, _ in records[:20_000]], [v for _, v in records[:20_000]])  # type: ignore[misc]
    assert contents(store) == model
    applied, next_offset = store.restore_from_log(log.native, "cl", 0, next_offset)
    assert (applied, next_offset) == (30_000, 50_000)
    apply_in_order(model, [k for k, _ in records[20_000:]], [v for _, v in records[20_000:]])  # type: ignore[misc]
    assert contents(store) == model


def test_restore_from_log_across_compaction_gaps(store: Store, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1, {"cleanup.policy": "compact"})
    fill_changelog(log, "cl", [(b"k%d" % (i % 3), b"%d" % i) for i in range(30)])
    log.roll("cl", 0)
    fill_changelog(log, "cl", [(b"tail", b"t")])
    log.compact("cl")
    offsets = [r.offset for r in log.read("cl", 0, 0, 100)]
    assert len(offsets) < 31  # compaction left gaps
    # A to_offset that falls into a gap: everything below it is applied.
    applied, next_offset = store.restore_from_log(log.native, "cl", 0, 0, 29)
    assert next_offset == 29
    assert applied == sum(o < 29 for o in offsets)
    applied, next_offset = store.restore_from_log(log.native, "cl", 0, next_offset)
    assert next_offset == 31
    assert contents(store) == {b"k0": b"27", b"k1": b"28", b"k2": b"29", b"tail": b"t"}


def test_restore_from_log_refuses_a_record_without_a_key(store: Store, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1)
    fill_changelog(log, "cl", [(b"a", b"1"), (None, b"2")])
    with pytest.raises(StoreError, match=r"cl-0 holds a record without a key at offset 1"):
        store.restore_from_log(log.native, "cl", 0, 0)


def test_restore_records_applies_a_read_batch_as_restore_from_log_does(
    store: Store, make: Make, log: EmbeddedLog
) -> None:
    log.create_topic("cl", 1)
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"k%d" % (i % 7), None if i % 5 == 4 else b"v%d" % i) for i in range(40)
    ]
    fill_changelog(log, "cl", records)
    batch = log.read_batch("cl", 0, 0, 100)
    # With and without what is still to come (the index sizing is invisible).
    assert store.restore_records(batch, 1000) == 40
    other = make()
    assert other.restore_records(batch) == 40
    reference = make()
    reference.restore_from_log(log.native, "cl", 0, 0)
    model: dict[bytes, bytes] = {}
    for k, v in records:
        assert k is not None
        model.pop(k, None) if v is None else model.__setitem__(k, v)
    assert contents(store) == contents(other) == contents(reference) == model


def test_restore_records_refuses_a_record_without_a_key(store: Store, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1)
    fill_changelog(log, "cl", [(b"a", b"1"), (None, b"2")])
    batch = log.read_batch("cl", 0, 0, 100)
    with pytest.raises(
        StoreError, match=r"changelog cl-0 holds a record without a key at offset 1"
    ):
        store.restore_records(batch)
    assert contents(store) == {}  # nothing applied from a refused batch


def test_restore_from_log_errors(store: Store, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1)
    fill_changelog(log, "cl", [(b"a", b"1")])
    with pytest.raises(UnknownTopicError):
        store.restore_from_log(log.native, "missing", 0, 0)
    with pytest.raises(UnknownTopicError):
        store.restore_from_log(log.native, "cl", 1, 0)
    with pytest.raises(OffsetOutOfRangeError):
        store.restore_from_log(log.native, "cl", 0, 5, 10)


def test_restore_then_commit_then_reopen(tmp_path: Path, log: EmbeddedLog) -> None:
    log.create_topic("cl", 1)
    fill_changelog(log, "cl", [(b"%05d" % (i % 700), b"%d" % i) for i in range(5000)])
    store, _ = Store.open(tmp_path / "s")
    assert store.restore_from_log(log.native, "cl", 0, 0) == (5000, 5000)
    store.commit(b"5000")
    store.close()
    store, committed = Store.open(tmp_path / "s")
    assert committed == b"5000"
    assert len(store) == 700
    assert store.get(b"00699") == b"4899"
    store.close()


# --- the typed layer ------------------------------------------------------------------


def test_typed_store_get_all_and_changelog(make: Make) -> None:
    native = make()
    native.enable_changelog()
    typed: KeyValueStore[str, int] = KeyValueStore(
        "counts", serdes.String(), serdes.Long(), clock=lambda: 99, native=native
    )
    typed.put_all([("b", 2), ("a", 1), ("c", None)])
    typed.put("d", 4)
    assert typed.get_all(["a", "x", "d", "b"]) == [1, None, 4, 2]
    assert list(typed.all()) == [KeyValue("a", 1), KeyValue("b", 2), KeyValue("d", 4)]
    assert list(typed.range("b", "c")) == [KeyValue("b", 2)]
    assert typed.delete("d") == 4
    assert typed.put_if_absent("a", 9) == 1  # present: nothing written, nothing logged
    assert typed.delete("never") is None
    # Every write in order (put_all's batch in its own order), each with the
    # clock's timestamp; a delete logs its tombstone even for an absent key.
    keys, values, timestamps = native.take_changelog()
    one, two, four = ((n).to_bytes(8, "big") for n in (1, 2, 4))
    assert list(zip(keys, values, strict=True)) == [
        (b"b", two),
        (b"a", one),
        (b"c", None),
        (b"d", four),
        (b"d", None),
        (b"never", None),
    ]
    assert timestamps == [99] * 6
    assert native.take_changelog() == ([], [], [])
    native.restore([b"z"], [one])  # a restore is not logged
    assert native.take_changelog() == ([], [], []) and typed.get("z") == 1
    with pytest.raises(StoreError, match="keys must not be None"):
        typed.get_all([None])  # type: ignore[list-item]


# --- property tests -------------------------------------------------------------------

KEY = st.binary(max_size=2)
VALUE = st.binary(max_size=6)

OPS = st.one_of(
    st.tuples(st.just("put"), KEY, st.one_of(st.none(), VALUE)),
    st.tuples(st.just("delete"), KEY),
    st.tuples(st.just("put_if_absent"), KEY, VALUE),
    st.tuples(
        st.just("put_all"), st.lists(st.tuples(KEY, st.one_of(st.none(), VALUE)), max_size=8)
    ),
    # A large batch from a seed: the bindings' sorted path.
    st.tuples(st.just("big_put_all"), st.integers(0, 2**32)),
    st.tuples(
        st.just("range"), st.one_of(st.none(), KEY), st.one_of(st.none(), KEY), st.booleans()
    ),
    st.tuples(st.just("prefix_scan"), st.binary(max_size=1)),
    st.tuples(st.just("get_all"), st.lists(KEY, max_size=8)),
    st.tuples(st.just("count"), st.lists(KEY, max_size=5)),
    st.tuples(st.just("commit")),
    st.tuples(st.just("reopen")),
)


def big_batch(seed: int) -> tuple[list[bytes], list[bytes | None]]:
    rng = random.Random(seed)
    keys = [rng.randbytes(rng.randint(0, 2)) for _ in range(rng.randint(256, 700))]
    values = [None if rng.random() < 0.25 else rng.randbytes(rng.randint(0, 6)) for _ in keys]
    return keys, values


def expected_range(
    model: dict[bytes, bytes], lo: bytes | None, hi: bytes | None, reverse: bool
) -> list[tuple[bytes, bytes]]:
    items = sorted(
        (k, v) for k, v in model.items() if (lo is None or k >= lo) and (hi is None or k <= hi)
    )
    return items[::-1] if reverse else items


def run_ops(ops: list[tuple[Any, ...]], path: Path | None) -> None:
    """Runs ``ops`` on a store (persistent in ``path`` when given) and on a
    dict model; for the persistent store, reopen reverts the model to the
    last commit."""
    if path is None:
        store = Store()
    else:
        store, _ = Store.open(path)
    model: dict[bytes, bytes] = {}
    committed: dict[bytes, bytes] = {}
    commits = 0
    try:
        for op in ops:
            name = op[0]
            if name == "put":
                _, k, v = op
                store.put(k, v)
                apply_in_order(model, [k], [v])
            elif name == "delete":
                _, k = op
                assert store.delete(k) == model.pop(k, None)
            elif name == "put_if_absent":
                _, k, v = op
                assert store.put_if_absent(k, v) == model.get(k)
                model.setdefault(k, v)
            elif name in {"put_all", "big_put_all"}:
                if name == "put_all":
                    pairs = op[1]
                    keys = [k for k, _ in pairs]
                    values = [v for _, v in pairs]
                else:
                    keys, values = big_batch(op[1])
                store.put_all(keys, values)
                apply_in_order(model, keys, values)
            elif name == "range":
                _, lo, hi, rev = op
                assert store.range(lo, hi, rev) == expected_range(model, lo, hi, rev)
            elif name == "prefix_scan":
                _, prefix = op
                assert store.prefix_scan(prefix) == [
                    (k, v) for k, v in sorted(model.items()) if k.startswith(prefix)
                ]
            elif name == "get_all":
                _, keys = op
                assert store.get_all(keys) == [model.get(k) for k in keys]
            elif name == "count":
                _, keys = op
                # Counting needs Long values: start each counted key afresh.
                for k in keys:
                    store.put(k, None)
                    model.pop(k, None)
                counts, _ = store.count(keys)
                expected = []
                for k in keys:
                    n = int.from_bytes(model.get(k, bytes(8)), "big") + 1
                    model[k] = n.to_bytes(8, "big")
                    expected.append(n)
                assert counts == expected
            elif name == "commit":
                commits += 1
                store.commit(b"%d" % commits)
                committed = dict(model)
            elif name == "reopen":
                if path is None:
                    continue
                store.close()
                store, meta = Store.open(path)
                assert meta == (None if commits == 0 else b"%d" % commits)
                model = dict(committed)
            assert len(store) == len(model)
        assert dict(store.range()) == model
    finally:
        store.close()


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, max_size=40))
def test_in_memory_store_matches_a_dict(ops: list[tuple[Any, ...]]) -> None:
    run_ops(ops, None)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, max_size=40))
def test_persistent_store_matches_a_dict_across_commits_and_reopens(
    ops: list[tuple[Any, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_ops(ops, Path(tmp) / "store")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(st.tuples(KEY, st.one_of(st.none(), VALUE)), max_size=60),
    split=st.integers(0, 60),
)
def test_restore_from_log_matches_a_dict(
    records: list[tuple[bytes, bytes | None]], split: int
) -> None:
    """Restoring in two steps (any split point) equals applying the
    changelog in order, on both flavours."""
    with tempfile.TemporaryDirectory() as tmp:
        log = EmbeddedLog(Path(tmp) / "log")
        log.create_topic("cl", 1)
        if records:
            fill_changelog(log, "cl", list(records))
        model: dict[bytes, bytes] = {}
        apply_in_order(model, [k for k, _ in records], [v for _, v in records])
        end = len(records)
        split = min(split, end)
        persistent, _ = Store.open(Path(tmp) / "s")
        for store in (Store(), persistent):
            try:
                first = store.restore_from_log(log.native, "cl", 0, 0, split)
                assert first == (split, split)
                second = store.restore_from_log(log.native, "cl", 0, first[1])
                assert second == (end - split, end)
                assert dict(store.range()) == model
            finally:
                store.close()
        log.close()
