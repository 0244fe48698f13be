"""The typed window store over both native flavours (in memory, persistent
segments): Kafka's inclusive bounds and expiry, retained duplicates, exact
keys, the changelog, commit and reopen, and a model-based property test."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom import _core, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, StoreError
from strom.keyvalue import KeyValue
from strom.kstream import Window, Windowed
from strom.state import WindowStore

RETENTION = 100
SIZE = 10
INTERVAL = 50

Make = Callable[..., WindowStore[str, str]]


@pytest.fixture(params=["memory", "persistent"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(flavour: str, tmp_path: Path) -> Iterator[Make]:
    """Builds stores of the test's flavour (all with String serdes) and
    closes them afterwards."""
    opened: list[WindowStore[str, str]] = []

    def build(
        *,
        retention: int = RETENTION,
        window_size: int = SIZE,
        dups: bool = False,
        name: str = "win",
        logged: bool = False,
    ) -> WindowStore[str, str]:
        kwargs: dict[str, Any] = {
            "retention": retention,
            "window_size": window_size,
            "retain_duplicates": dups,
            "segment_interval": INTERVAL,
            "logged": logged,
        }
        store: WindowStore[str, str]
        if flavour == "memory":
            store = WindowStore.in_memory(name, serdes.String(), serdes.String(), **kwargs)
        else:
            store, _ = WindowStore.open(tmp_path / name, serdes.String(), serdes.String(), **kwargs)
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def reopen(store: WindowStore[str, str], path: Path, dups: bool = False) -> tuple[Any, Any]:
    store.close()
    return WindowStore.open(
        path,
        serdes.String(),
        serdes.String(),
        retention=RETENTION,
        window_size=SIZE,
        retain_duplicates=dups,
        segment_interval=INTERVAL,
    )


def windowed(key: str, start: int, value: str) -> KeyValue:
    return KeyValue(Windowed(key, Window(start, start + SIZE)), value)


# --- Window and Windowed ---------------------------------------------------------


def test_window_and_windowed_are_frozen_ordered_values() -> None:
    w = Window(0, 10)
    assert (w.start, w.end) == (0, 10)
    assert repr(w) == "Window(start=0, end=10)"
    assert sorted([Window(5, 6), Window(0, 20), Window(0, 10)]) == [
        Window(0, 10),
        Window(0, 20),
        Window(5, 6),
    ]
    k = Windowed("a", w)
    assert k == Windowed("a", Window(0, 10)) and hash(k) == hash(Windowed("a", Window(0, 10)))
    assert k != Windowed("a", Window(0, 11))
    assert (k.key, k.window.start, k.window.end) == ("a", 0, 10)
    assert repr(k) == "Windowed(key='a', window=Window(start=0, end=10))"
    with pytest.raises(AttributeError):
        k.key = "b"  # type: ignore[misc]
    with pytest.raises(ValueError, match="negative"):
        Window(-1, 5)
    with pytest.raises(ValueError, match="before start"):
        Window(5, 4)


# --- both flavours ----------------------------------------------------------------


def test_fetch_bounds_are_inclusive(make: Make) -> None:
    s = make()
    for t in (10, 20, 30):
        s.put("a", f"v{t}", t)
    assert list(s.fetch("a", 10, 30)) == [(10, "v10"), (20, "v20"), (30, "v30")]
    assert list(s.fetch("a", 11, 29)) == [(20, "v20")]
    assert list(s.fetch("a", 20, 20)) == [(20, "v20")]
    assert list(s.fetch("a", 31, 40)) == []
    assert list(s.fetch("a", 30, 10)) == []
    assert list(s.backward_fetch("a", 10, 30)) == [(30, "v30"), (20, "v20"), (10, "v10")]
    assert all(isinstance(kv, KeyValue) for kv in s.fetch("a", 0, 100))


def test_fetch_of_one_window_and_delete(make: Make) -> None:
    s = make()
    s.put("a", "x", 20)
    assert s.fetch("a", 20) == "x"
    assert s.fetch("a", 21) is None
    assert s.fetch("b", 20) is None
    s.put("a", "y", 20)
    assert s.fetch("a", 20) == "y"
    s.put("a", None, 20)
    assert s.fetch("a", 20) is None
    assert list(s.all()) == []


def test_fetch_all_and_all_yield_windowed_keys(make: Make) -> None:
    s = make()
    s.put_all([("b", "b5", 5), ("a", "a5", 5), ("a", "a60", 60), ("c", "c40", 40)])
    assert list(s.all()) == [
        windowed("a", 5, "a5"),
        windowed("b", 5, "b5"),
        windowed("c", 40, "c40"),
        windowed("a", 60, "a60"),
    ]
    assert list(s.fetch_all(5, 40)) == [
        windowed("a", 5, "a5"),
        windowed("b", 5, "b5"),
        windowed("c", 40, "c40"),
    ]
    assert list(s.fetch_all(6, 59)) == [windowed("c", 40, "c40")]
    assert list(s.backward_all()) == list(s.all())[::-1]
    assert list(s.fetch_range("a", "b", 0, 100)) == [
        windowed("a", 5, "a5"),
        windowed("b", 5, "b5"),
        windowed("a", 60, "a60"),
    ]
    assert list(s.fetch_range(None, "a", 0, 10)) == [windowed("a", 5, "a5")]
    assert list(s.fetch_range("b", None, 0, 100)) == [
        windowed("b", 5, "b5"),
        windowed("c", 40, "c40"),
    ]
    assert list(s.fetch_range("c", "a", 0, 100)) == []
    assert list(s.backward_fetch_range("a", "b", 0, 10)) == [
        windowed("b", 5, "b5"),
        windowed("a", 5, "a5"),
    ]
    assert list(s.backward_fetch_all(0, 10)) == [windowed("b", 5, "b5"), windowed("a", 5, "a5")]
    assert s.approximate_num_entries() == len(s) == 4


def test_retention_expires_windows_and_drops_puts(make: Make) -> None:
    s = make()
    s.put("a", "0", 0)
    s.put("a", "60", 60)
    s.put("a", "61", 61)
    s.put("a", "160", 160)
    assert s.observed_stream_time == 160
    # Expired: start <= 160 - 100.
    assert list(s.fetch("a", 0, 1000)) == [(61, "61"), (160, "160")]
    assert s.fetch("a", 60) is None
    assert s.native.segment_ids() == [1, 3]
    s.put("a", "late", 55)
    assert list(s.fetch("a", 0, 100)) == [(61, "61")]
    assert s.observed_stream_time == 160


def test_retained_duplicates_keep_insertion_order(make: Make) -> None:
    s = make(dups=True)
    assert s.retain_duplicates
    for v in ("x", "y", "z"):
        s.put("a", v, 10)
    s.put("a", "w", 5)
    s.put("a", None, 10)  # ignored, as in Kafka
    assert list(s.fetch("a", 0, 20)) == [(5, "w"), (10, "x"), (10, "y"), (10, "z")]
    assert list(s.backward_fetch("a", 0, 20)) == [(10, "z"), (10, "y"), (10, "x"), (5, "w")]
    assert s.fetch("a", 10) is None  # no single value per window
    assert [kv.value for kv in s.all()] == ["w", "x", "y", "z"]


def test_keys_are_matched_exactly_not_by_prefix(make: Make) -> None:
    s = make()
    for key in ("a", "aa", "ab", ""):
        for t in (10, 20):
            s.put(key, f"{key}@{t}", t)
    assert list(s.fetch("a", 0, 100)) == [(10, "a@10"), (20, "a@20")]
    assert list(s.fetch("", 0, 100)) == [(10, "@10"), (20, "@20")]
    assert s.fetch("a", 10) == "a@10"
    assert [kv.key.key for kv in s.fetch_range("a", "a", 0, 100)] == ["a", "a"]
    assert [kv.key.key for kv in s.fetch_range("a", "aa", 10, 10)] == ["a", "aa"]


def test_bad_arguments(make: Make) -> None:
    s = make()
    with pytest.raises(StoreError, match="None"):
        s.put(None, "x", 0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="negative"):
        s.put("a", "x", -1)
    with pytest.raises(ConfigError, match="window size"):
        make(retention=5, window_size=10, name="other")


def test_changelog_gets_kafkas_windowed_keys(make: Make) -> None:
    s = make(logged=True)
    s.put("a", "x", 120)
    s.put_all([("b", "y", 130), ("a", None, 120), ("c", "late", 5)])
    logged = list(zip(*s.native.take_changelog(), strict=True))
    assert logged == [
        (b"a" + (120).to_bytes(8, "big") + (0).to_bytes(4, "big"), b"x", 0),
        (_core.window_store_key(b"b", 130, 0), b"y", 0),
        (_core.window_store_key(b"a", 120, 0), None, 0),
        # The put at 5 is expired (stream time 130, retention 100): not logged.
    ]
    assert _core.split_window_store_key(logged[1][0]) == (b"b", 130, 0)

    d = make(dups=True, name="dups", logged=True)
    d.put("a", "1", 7)
    d.put("a", "2", 7)
    dups, _, _ = d.native.take_changelog()
    assert [_core.split_window_store_key(k) for k in dups] == [(b"a", 7, 1), (b"a", 7, 2)]


def test_a_changelog_restores_the_same_state(make: Make) -> None:
    s = make(dups=True, logged=True)
    for i, t in enumerate((0, 30, 30, 90, 150, 170)):
        s.put(f"k{i % 2}", f"v{i}", t)
    keys, values, _ = s.native.take_changelog()
    copy = make(dups=True, name="copy")
    dropped = copy.restore(keys, values)
    assert dropped == 3  # starts 0, 30, 30 are expired at stream time 170
    assert list(copy.all()) == list(s.all())
    assert copy.observed_stream_time == s.observed_stream_time == 170


def test_a_changelog_read_from_the_log_restores_the_same_state(make: Make, tmp_path: Path) -> None:
    s = make(dups=True, logged=True)
    for i, t in enumerate((0, 30, 30, 90, 150, 170)):
        s.put(f"k{i % 2}", f"v{i}", t)
    keys, values, stamps = s.native.take_changelog()
    with EmbeddedLog(str(tmp_path / "log")) as log:
        log.create_topic("cl", 1)
        with log.producer() as producer:
            producer.produce_columns("cl", keys, values, stamps, partitions=[0] * len(keys))
        batch = log.read_batch("cl", 0, 0, 100)
        copy = make(dups=True, name="copy")
        assert copy.native.restore_records(batch) == 3  # expired at stream time 170
        assert list(copy.all()) == list(s.all())
        assert copy.observed_stream_time == 170
        with log.producer() as producer:
            producer.produce_columns("cl", [None], [b"x"], [0], partitions=[0])
        keyless = log.read_batch("cl", 0, len(keys), 100)
        with pytest.raises(
            StoreError, match=rf"cl-0 holds a record without a key at offset {len(keys)}"
        ):
            copy.native.restore_records(keyless)


def test_closed_store_raises(make: Make) -> None:
    s = make()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.put("a", "x", 1)
    with pytest.raises(StoreError, match="closed"):
        list(s.all())


def test_threads_share_a_store(make: Make) -> None:
    """Single puts run attached and batches/scans detached; mixing them
    across threads neither deadlocks nor loses writes."""
    s = make(retention=10_000, window_size=10)

    def work(n: int) -> None:
        for i in range(100):
            s.put(f"t{n}", str(i), i)
            s.put_all([(f"u{n}", str(i), i)])
            list(s.fetch_all(0, 10_000))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(list(s.all())) == 4 * 2 * 100


# --- persistent only ----------------------------------------------------------------


def test_reopen_returns_the_state_at_the_last_commit(tmp_path: Path) -> None:
    path = tmp_path / "win"
    s, meta = WindowStore.open(
        path,
        serdes.String(),
        serdes.String(),
        retention=RETENTION,
        window_size=SIZE,
        segment_interval=INTERVAL,
    )
    assert meta is None and s.persistent and s.name == "win"
    s.put("a", "1", 30)
    s.put("aa", "2", 30)
    s.put("b", "3", 120)
    s.commit(b"offset=3")
    at_commit = list(s.all())
    assert len(at_commit) == 3
    s.put("a", "changed", 30)
    s.put("b", None, 120)
    s.put("c", "new", 400)  # moves stream time and drops segments
    s, meta = reopen(s, path)
    try:
        assert meta == b"offset=3"
        assert s.observed_stream_time == 120
        assert list(s.all()) == at_commit
        assert s.fetch("a", 30) == "1"
    finally:
        s.close()


def test_retention_deletes_segment_directories_at_commit(tmp_path: Path) -> None:
    path = tmp_path / "win"
    s, _ = WindowStore.open(
        path, serdes.String(), serdes.String(), retention=100, window_size=10, segment_interval=50
    )
    s.put("a", "0", 0)
    s.put("a", "60", 60)
    s.commit(b"1")
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ["win.0", "win.50"]
    s.put("a", "200", 200)
    s.commit(b"2")
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ["win.200"]
    s.close()


def test_a_second_open_of_the_same_directory_fails(tmp_path: Path) -> None:
    path = tmp_path / "win"
    s, _ = WindowStore.open(path, serdes.String(), serdes.String(), retention=100, window_size=10)
    try:
        with pytest.raises(StoreError, match="locked"):
            WindowStore.open(path, serdes.String(), serdes.String(), retention=100, window_size=10)
        with pytest.raises(StoreError, match="locked"):
            _core.NativeWindowStore.destroy(path)
    finally:
        s.close()
    _core.NativeWindowStore.destroy(path)
    assert not path.exists()


def test_context_manager_closes(tmp_path: Path) -> None:
    store, _ = WindowStore.open(
        tmp_path / "w", serdes.String(), serdes.Long(), retention=100, window_size=10
    )
    with store as s:
        s.put("a", 5, 10)
        s.commit(b"")
    assert s.native.closed
    again, meta = WindowStore.open(
        tmp_path / "w", serdes.String(), serdes.Long(), retention=100, window_size=10
    )
    with again:
        assert meta == b"" and again.fetch("a", 10) == 5


# --- property test against a brute-force model -----------------------------------------

KEYS = ["", "a", "aa", "ab", "b"]
P_RETENTION = 120
P_INTERVAL = 40


@dataclass
class WindowModel:
    """Kafka's window store semantics, brute force: entries keyed by (key
    bytes, start, seqnum); expiry at ``start <= observed - retention``."""

    dups: bool
    entries: dict[tuple[bytes, int, int], str] = field(default_factory=dict)
    observed: int = -1
    seq: int = 0

    def put(self, key: bytes, value: str | None, start: int) -> None:
        if value is None and self.dups:
            return
        if self.dups:
            self.seq = (self.seq + 1) & 0x7FFFFFFF
        self.observed = max(self.observed, start)
        if start < self.min_live():
            return
        if value is None:
            self.entries.pop((key, start, 0), None)
        else:
            self.entries[(key, start, self.seq)] = value

    def min_live(self) -> int:
        return max(self.observed - P_RETENTION + 1, 0)

    def live(self, t_from: int, t_to: int) -> list[tuple[tuple[bytes, int, int], str]]:
        lo = max(t_from, self.min_live())
        return [(k, v) for k, v in self.entries.items() if lo <= k[1] <= t_to]

    def fetch(self, key: bytes, t_from: int, t_to: int) -> list[tuple[int, str]]:
        hits = sorted((k[1], k[2], v) for k, v in self.live(t_from, t_to) if k[0] == key)
        return [(start, v) for start, _, v in hits]

    def fetch_one(self, key: bytes, start: int) -> str | None:
        if self.dups or start < self.min_live():
            return None
        return self.entries.get((key, start, 0))

    def fetch_all(self, t_from: int, t_to: int) -> list[tuple[str, int, str]]:
        # Segment by segment, then in store-key byte order.
        def order(item: tuple[tuple[bytes, int, int], str]) -> tuple[int, bytes]:
            (key, start, seq), _ = item
            return start // P_INTERVAL, key + start.to_bytes(8, "big") + seq.to_bytes(4, "big")

        return [(k.decode(), s, v) for (k, s, _), v in sorted(self.live(t_from, t_to), key=order)]


def _times(data: st.DataObject, clock: int) -> int:
    """A timestamp near stream time, often exactly on the expiry boundary."""
    edges = {max(0, t) for t in (clock - P_RETENTION, clock - P_RETENTION + 1, clock, clock + 1)}
    # Mostly multiples of 10, so records often sit exactly on the boundary.
    coarse = st.integers(max(0, clock - 150) // 10, (clock + 30) // 10).map(lambda t: t * 10)
    return data.draw(st.one_of(coarse, st.sampled_from(sorted(edges))))


def run_window_model(data: st.DataObject, path: Path | None, dups: bool) -> None:
    def open_store() -> WindowStore[str, str]:
        if path is None:
            return WindowStore.in_memory(
                "w",
                serdes.String(),
                serdes.String(),
                retention=P_RETENTION,
                window_size=SIZE,
                retain_duplicates=dups,
                segment_interval=P_INTERVAL,
            )
        store, _ = WindowStore.open(
            path,
            serdes.String(),
            serdes.String(),
            retention=P_RETENTION,
            window_size=SIZE,
            retain_duplicates=dups,
            segment_interval=P_INTERVAL,
        )
        return store

    ops = ["put", "put", "put", "delete", "fetch", "fetch_one", "fetch_all"]
    if path is not None:
        ops += ["commit", "reopen"]
    model = WindowModel(dups)
    committed = WindowModel(dups)
    store = open_store()
    clock = 0
    try:
        for _ in range(data.draw(st.integers(1, 40))):
            op = data.draw(st.sampled_from(ops))
            key = data.draw(st.sampled_from(KEYS))
            if op in ("put", "delete"):
                start = _times(data, clock)
                clock = max(clock, start)
                value = None if op == "delete" else data.draw(st.sampled_from("xyz"))
                store.put(key, value, start)
                model.put(key.encode(), value, start)
            elif op == "fetch":
                lo, hi = _times(data, clock), _times(data, clock)
                assert list(store.fetch(key, lo, hi)) == model.fetch(key.encode(), lo, hi)
                assert (
                    list(store.backward_fetch(key, lo, hi))
                    == model.fetch(key.encode(), lo, hi)[::-1]
                )
            elif op == "fetch_one":
                start = _times(data, clock)
                assert store.fetch(key, start) == model.fetch_one(key.encode(), start)
            elif op == "fetch_all":
                lo, hi = _times(data, clock), _times(data, clock)
                got = [
                    (kv.key.key, kv.key.window.start, kv.value) for kv in store.fetch_all(lo, hi)
                ]
                assert got == model.fetch_all(lo, hi)
            elif op == "commit":
                store.commit(b"m")
                committed = WindowModel(dups, dict(model.entries), model.observed)
            else:  # reopen: back to the last commit; seqnums restart, as in Kafka
                store.close()
                store = open_store()
                model = WindowModel(dups, dict(committed.entries), committed.observed)
            assert store.observed_stream_time == model.observed
            everything = [(kv.key.key, kv.key.window.start, kv.value) for kv in store.all()]
            assert everything == model.fetch_all(0, 2**62)
    finally:
        store.close()


@pytest.mark.parametrize("dups", [False, True])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_in_memory_store_matches_the_model(dups: bool, data: st.DataObject) -> None:
    run_window_model(data, None, dups)


@pytest.mark.parametrize("dups", [False, True])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_persistent_store_matches_the_model_across_commits_and_reopens(
    dups: bool, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_window_model(data, Path(tmp) / "w", dups)
