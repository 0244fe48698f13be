"""The typed session store over both native flavours (in memory, persistent
segments): Kafka's find_sessions boundaries, expiry by session end, exact
keys, the changelog, commit and reopen, and a model-based property test."""

from __future__ import annotations

import tempfile
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
from strom.state import SessionStore

RETENTION = 100
INTERVAL = 50

Make = Callable[..., SessionStore[str, int]]


@pytest.fixture(params=["memory", "persistent"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make(flavour: str, tmp_path: Path) -> Iterator[Make]:
    """Builds stores of the test's flavour (String keys, Long values) and
    closes them afterwards."""
    opened: list[SessionStore[str, int]] = []

    def build(
        *,
        retention: int = RETENTION,
        name: str = "sessions",
        logged: bool = False,
        clock: Any = None,
    ) -> SessionStore[str, int]:
        kwargs: dict[str, Any] = {
            "retention": retention,
            "segment_interval": INTERVAL,
            "logged": logged,
            "clock": clock,
        }
        store: SessionStore[str, int]
        if flavour == "memory":
            store = SessionStore.in_memory(name, serdes.String(), serdes.Long(), **kwargs)
        else:
            store, _ = SessionStore.open(tmp_path / name, serdes.String(), serdes.Long(), **kwargs)
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def session(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


def kv(key: str, start: int, end: int, value: int) -> KeyValue:
    return KeyValue(session(key, start, end), value)


def open_persistent(path: Path) -> tuple[SessionStore[str, int], bytes | None]:
    return SessionStore.open(
        path, serdes.String(), serdes.Long(), retention=RETENTION, segment_interval=INTERVAL
    )


# --- both flavours ----------------------------------------------------------------


def test_find_sessions_bounds_are_inclusive(make: Make) -> None:
    s = make()
    s.put(session("a", 0, 10), 1)
    s.put(session("a", 20, 30), 2)
    s.put(session("a", 40, 40), 3)
    # Sessions that end at or after 10 and start at or before 40.
    assert list(s.find_sessions("a", 10, 40)) == [
        kv("a", 0, 10, 1),
        kv("a", 20, 30, 2),
        kv("a", 40, 40, 3),
    ]
    assert list(s.find_sessions("a", 11, 39)) == [kv("a", 20, 30, 2)]
    assert list(s.find_sessions("a", 30, 20)) == [kv("a", 20, 30, 2)]
    assert list(s.find_sessions("a", 31, 39)) == []
    assert list(s.find_sessions("a", 0, 0)) == [kv("a", 0, 10, 1)]
    assert list(s.find_sessions("a", 41, 100)) == []
    assert list(s.backward_find_sessions("a", 0, 100)) == [
        kv("a", 40, 40, 3),
        kv("a", 20, 30, 2),
        kv("a", 0, 10, 1),
    ]


def test_sessions_come_in_end_then_start_order(make: Make) -> None:
    s = make()
    s.put_all(
        [
            (session("a", 5, 30), 1),
            (session("a", 0, 30), 2),
            (session("a", 10, 20), 3),
        ]
    )
    assert [(kv.key.window.start, kv.key.window.end) for kv in s.fetch("a")] == [
        (10, 20),
        (0, 30),
        (5, 30),
    ]
    assert [kv.value for kv in s.backward_fetch("a")] == [1, 2, 3]


def test_fetch_session_put_none_and_remove(make: Make) -> None:
    s = make()
    s.put(session("a", 0, 10), 1)
    s.put(session("a", 20, 30), 2)
    assert s.fetch_session("a", 0, 10) == 1
    assert s.fetch_session("a", 0, 11) is None
    assert s.fetch_session("b", 0, 10) is None
    s.remove(session("a", 0, 10))
    assert s.fetch_session("a", 0, 10) is None
    s.put(session("a", 20, 30), None)
    assert list(s.fetch("a")) == []
    s.remove(session("zzz", 1, 2))  # absent: nothing to do


def test_expiry_is_by_session_end(make: Make) -> None:
    s = make()
    s.put(session("a", 0, 60), 1)
    s.put(session("a", 0, 61), 2)
    s.put(session("b", 150, 160), 3)
    assert s.observed_stream_time == 160
    # Expired: end <= 160 - 100.
    assert list(s.find_sessions("a", 0, 1000)) == [kv("a", 0, 61, 2)]
    assert s.fetch_session("a", 0, 60) is None
    s.put(session("a", 0, 50), 4)  # dropped
    assert [kv.value for kv in s.fetch("a")] == [2]
    assert s.native.segment_ids() == [1, 3]


def test_keys_are_matched_exactly_not_by_prefix(make: Make) -> None:
    s = make()
    for i, key in enumerate(("a", "aa", "ab", "")):
        s.put(session(key, 10, 20), i)
    assert list(s.find_sessions("a", 0, 100)) == [kv("a", 10, 20, 0)]
    assert list(s.fetch("")) == [kv("", 10, 20, 3)]
    assert [kv.key.key for kv in s.fetch_range("a", "aa")] == ["a", "aa"]
    assert [kv.key.key for kv in s.find_sessions_range("a", "a", 0, 100)] == ["a"]
    assert [kv.key.key for kv in s.fetch_range(None, None)] == ["", "a", "aa", "ab"]
    assert [kv.key.key for kv in s.backward_fetch_range("aa", None)] == ["ab", "aa"]
    assert [kv.key.key for kv in s.backward_find_sessions_range(None, "a", 0, 100)] == ["a", ""]
    assert list(s.fetch_range("b", "a")) == []


def test_bad_arguments(make: Make) -> None:
    s = make()
    with pytest.raises(StoreError, match="None"):
        s.put(Windowed(None, Window(0, 1)), 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="before start"):
        s.put(session("a", 10, 5), 1)
    with pytest.raises(ConfigError, match="negative"):
        s.native.put(b"a", -1, 5, b"x")


def test_changelog_gets_kafkas_session_keys(make: Make, tmp_path: Path) -> None:
    s = make(logged=True, name="logged", clock=lambda: 77)
    s.put(session("a", 100, 120), 1)
    s.put_all([(session("b", 130, 140), 2), (session("c", 0, 10), 3)])  # the last is expired
    s.remove(session("a", 100, 120))
    assert s.logged
    logged = list(zip(*s.native.take_changelog(), strict=True))
    assert s.native.take_changelog() == ([], [], [])  # taken
    one = (1).to_bytes(8, "big")
    assert logged == [
        (b"a" + (120).to_bytes(8, "big") + (100).to_bytes(8, "big"), one, 77),
        (_core.session_store_key(b"b", 130, 140), (2).to_bytes(8, "big"), 77),
        (_core.session_store_key(b"a", 100, 120), None, 77),
    ]
    assert _core.split_session_store_key(logged[1][0]) == (b"b", 130, 140)

    copy = make(name="copy")
    assert copy.restore([k for k, _, _ in logged], [v for _, v, _ in logged]) == 0
    assert list(copy.fetch_range(None, None)) == list(s.fetch_range(None, None))
    assert copy.observed_stream_time == 140

    # The same records as a batch read from a log.
    with EmbeddedLog(str(tmp_path / "log")) as log:
        log.create_topic("cl", 1)
        with log.producer() as producer:
            producer.produce_columns(
                "cl",
                [k for k, _, _ in logged],
                [v for _, v, _ in logged],
                [t for _, _, t in logged],
                partitions=[0] * len(logged),
            )
        from_log = make(name="from-log")
        assert from_log.native.restore_records(log.read_batch("cl", 0, 0, 100)) == 0
        assert list(from_log.fetch_range(None, None)) == list(s.fetch_range(None, None))
        assert from_log.observed_stream_time == 140


def test_closed_store_raises(make: Make) -> None:
    s = make()
    s.close()
    with pytest.raises(StoreError, match="closed"):
        s.fetch_session("a", 0, 1)


# --- persistent only ----------------------------------------------------------------


def test_reopen_returns_the_state_at_the_last_commit(tmp_path: Path) -> None:
    path = tmp_path / "sessions"
    s, meta = open_persistent(path)
    assert meta is None
    s.put(session("a", 0, 40), 1)
    s.put(session("aa", 10, 45), 2)
    s.put(session("b", 60, 120), 3)
    s.commit(b"c1")
    at_commit = list(s.fetch_range(None, None))
    s.put(session("a", 0, 40), 10)
    s.remove(session("b", 60, 120))
    s.put(session("z", 300, 400), 4)
    s.close()
    s, meta = open_persistent(path)
    try:
        assert meta == b"c1"
        assert s.observed_stream_time == 120
        assert list(s.fetch_range(None, None)) == at_commit
        assert s.fetch_session("a", 0, 40) == 1
    finally:
        s.close()


def test_a_second_open_of_the_same_directory_fails(tmp_path: Path) -> None:
    path = tmp_path / "sessions"
    s, _ = open_persistent(path)
    try:
        with pytest.raises(StoreError, match="locked"):
            open_persistent(path)
    finally:
        s.close()
    again, _ = open_persistent(path)
    again.close()


# --- property test against a brute-force model -----------------------------------------

KEYS = ["", "a", "aa", "ab", "b"]
P_RETENTION = 120
P_INTERVAL = 40

Entry = tuple[bytes, int, int]  # key bytes, start, end


@dataclass
class SessionModel:
    """Kafka's session store semantics, brute force: sessions keyed by (key
    bytes, start, end); expiry at ``end <= observed - retention``."""

    entries: dict[Entry, int] = field(default_factory=dict)
    observed: int = -1

    def min_live(self) -> int:
        return max(self.observed - P_RETENTION + 1, 0)

    def put(self, key: bytes, start: int, end: int, value: int | None) -> None:
        self.observed = max(self.observed, end)
        if end < self.min_live():
            return
        if value is None:
            self.entries.pop((key, start, end), None)
        else:
            self.entries[(key, start, end)] = value

    def remove(self, key: bytes, start: int, end: int) -> None:
        self.entries.pop((key, start, end), None)

    def fetch_session(self, key: bytes, start: int, end: int) -> int | None:
        return None if end < self.min_live() else self.entries.get((key, start, end))

    def find(
        self, key_from: bytes | None, key_to: bytes | None, earliest_end: int, latest_start: int
    ) -> list[tuple[str, int, int, int]]:
        lo = max(earliest_end, self.min_live())
        hits = [
            (k, v)
            for k, v in self.entries.items()
            if (key_from is None or k[0] >= key_from)
            and (key_to is None or k[0] <= key_to)
            and k[2] >= lo
            and k[1] <= latest_start
        ]

        # Segment (by end) by segment, then in store-key byte order: key ‖ end ‖ start.
        def order(item: tuple[Entry, int]) -> tuple[int, bytes]:
            (key, start, end), _ = item
            return end // P_INTERVAL, key + end.to_bytes(8, "big") + start.to_bytes(8, "big")

        return [(k.decode(), s, e, v) for (k, s, e), v in sorted(hits, key=order)]


def _rows(results: Iterator[KeyValue]) -> list[tuple[str, int, int, int]]:
    return [(kv.key.key, kv.key.window.start, kv.key.window.end, kv.value) for kv in results]


def _time(data: st.DataObject, clock: int) -> int:
    """A timestamp near stream time, often exactly on the expiry boundary."""
    edges = {max(0, t) for t in (clock - P_RETENTION, clock - P_RETENTION + 1, clock, clock + 1)}
    # Mostly multiples of 10, so sessions often sit exactly on the boundary.
    coarse = st.integers(max(0, clock - 150) // 10, (clock + 30) // 10).map(lambda t: t * 10)
    return data.draw(st.one_of(coarse, st.sampled_from(sorted(edges))))


def run_session_model(data: st.DataObject, path: Path | None) -> None:
    def open_store() -> SessionStore[str, int]:
        if path is None:
            return SessionStore.in_memory(
                "s",
                serdes.String(),
                serdes.Long(),
                retention=P_RETENTION,
                segment_interval=P_INTERVAL,
            )
        store, _ = SessionStore.open(
            path, serdes.String(), serdes.Long(), retention=P_RETENTION, segment_interval=P_INTERVAL
        )
        return store

    ops = ["put", "put", "put", "put_none", "remove", "find", "find_range", "fetch_session"]
    if path is not None:
        ops += ["commit", "reopen"]
    model, committed = SessionModel(), SessionModel()
    live: list[Entry] = []  # sessions put so far, to remove or fetch them again
    store = open_store()
    clock = 0
    try:
        for _ in range(data.draw(st.integers(1, 40))):
            op = data.draw(st.sampled_from(ops))
            key = data.draw(st.sampled_from(KEYS))
            if op in ("put", "put_none"):
                start = _time(data, clock)
                end = start + data.draw(st.sampled_from([0, 1, 10, 25]))
                clock = max(clock, end)
                value = None if op == "put_none" else data.draw(st.integers(0, 9))
                store.put(session(key, start, end), value)
                model.put(key.encode(), start, end, value)
                live.append((key.encode(), start, end))
            elif op in ("remove", "fetch_session") and live:
                k, start, end = data.draw(st.sampled_from(live))
                if op == "remove":
                    store.remove(session(k.decode(), start, end))
                    model.remove(k, start, end)
                else:
                    got = store.fetch_session(k.decode(), start, end)
                    assert got == model.fetch_session(k, start, end)
            elif op == "find":
                earliest, latest = _time(data, clock), _time(data, clock)
                want = model.find(key.encode(), key.encode(), earliest, latest)
                assert _rows(store.find_sessions(key, earliest, latest)) == want
                assert _rows(store.backward_find_sessions(key, earliest, latest)) == want[::-1]
            elif op == "find_range":
                other = data.draw(st.sampled_from(KEYS))
                earliest, latest = _time(data, clock), _time(data, clock)
                rows = _rows(store.find_sessions_range(key, other, earliest, latest))
                assert rows == model.find(key.encode(), other.encode(), earliest, latest)
            elif op == "commit":
                store.commit(b"m")
                committed = SessionModel(dict(model.entries), model.observed)
            elif op == "reopen":
                store.close()
                store = open_store()
                model = SessionModel(dict(committed.entries), committed.observed)
            assert store.observed_stream_time == model.observed
            assert _rows(store.fetch_range(None, None)) == model.find(None, None, 0, 2**62)
    finally:
        store.close()


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_in_memory_store_matches_the_model(data: st.DataObject) -> None:
    run_session_model(data, None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_persistent_store_matches_the_model_across_commits_and_reopens(
    data: st.DataObject,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_session_model(data, Path(tmp) / "s")
