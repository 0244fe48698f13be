"""The native windowed-aggregation kernels through their Python binding
(strom._core.Native*WindowedAggregation): column forms, restarts, errors,
and sliding and session windows against brute-force models of Kafka's
semantics (KStreamSlidingWindowAggregate, KStreamSessionWindowAggregate)."""

from __future__ import annotations

import array
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import _core
from strom.errors import ConfigError

Records = list[tuple[bytes, int, int]]

records_strategy = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c"]),
        st.integers(min_value=0, max_value=300),
        st.integers(min_value=-50, max_value=50),
    ),
    max_size=40,
)


def columns(records: Records) -> tuple[list[bytes | None], list[int], list[int | None]]:
    return [r[0] for r in records], [r[1] for r in records], [r[2] for r in records]


def results_of(r: Any, keys: list[bytes | None]) -> list[tuple[Any, ...]]:
    owned = r.keys()
    result_keys = owned if owned is not None else [keys[i] for i in r.rows()]
    tombstones = r.tombstones() or [False] * len(r)
    return list(
        zip(
            result_keys,
            r.starts(),
            r.ends(),
            r.values(),
            r.timestamps(),
            tombstones,
            strict=True,
        )
    )


def test_packed_columns_give_what_lists_give() -> None:
    keys = [b"k%d" % (i % 7) for i in range(500)]
    stamps = [(i * 37) % 1_000 for i in range(500)]
    values = [(i * 13) % 100 - 50 for i in range(500)]
    data = b"".join(keys)
    offsets = array.array("i", [0])
    for k in keys:
        offsets.append(offsets[-1] + len(k))
    lists = _core.NativeTimeWindowedAggregation("sum", "int", 100, 25, 50)
    packed = _core.NativeTimeWindowedAggregation("sum", "int", 100, 25, 50)
    a = lists.process(keys, stamps, values)
    b = packed.process(
        (data, offsets.tobytes()),
        array.array("q", stamps).tobytes(),
        array.array("q", values).tobytes(),
    )
    assert len(a) > 200
    assert results_of(a, keys) == results_of(b, keys)
    assert a.stats == b.stats and a.stats["dropped_expired"] > 0
    assert array.array("q", b.values(packed=True)).tolist() == a.values()
    # One change per window; their order is the kernel's table order.
    expected = lists.drain_changes()
    (key_data, key_offsets), starts, ends, (value_data, value_offsets, validity), stamps = (
        packed.drain_changes(packed=True)
    )
    assert validity is None  # time windows never remove
    ko = array.array("i", key_offsets)
    vo = array.array("i", value_offsets)
    got = (
        [key_data[ko[i] : ko[i + 1]] for i in range(len(ko) - 1)],
        array.array("q", starts).tolist(),
        array.array("q", ends).tolist(),
        [value_data[vo[i] : vo[i + 1]] for i in range(len(vo) - 1)],
        array.array("q", stamps).tolist(),
    )
    assert len(expected[0]) > 20
    assert sorted(zip(*expected, strict=True)) == sorted(zip(*got, strict=True))


@settings(max_examples=40, deadline=None)
@given(records=records_strategy, cut=st.integers(min_value=0, max_value=40))
def test_a_restart_from_the_store_changes_nothing(records: Records, cut: int) -> None:
    """Process, apply the store changes, start a new kernel from the store
    and the times, process the rest: the same results as one run."""
    keys, stamps, values = columns(records)

    def kernel() -> Any:
        return _core.NativeTimeWindowedAggregation("max", "int", 20, 10, 15)

    whole = kernel()
    expected = results_of(whole.process(keys, stamps, values), keys)
    first = kernel()
    got = results_of(first.process(keys[:cut], stamps[:cut], values[:cut]), keys[:cut])
    store: dict[tuple[bytes, int], tuple[int, bytes]] = {}
    for k, s, e, v, _ts in zip(*first.drain_changes(), strict=True):
        store[(k, s)] = (e, v)
    second = kernel()
    second.restore_times(first.observed_stream_time, -1, first.store_observed_time)
    second.restore(
        [k for k, _ in store],
        [s for _, s in store],
        [e for e, _ in store.values()],
        [v for _, v in store.values()],
    )
    got += results_of(second.process(keys[cut:], stamps[cut:], values[cut:]), keys[cut:])
    assert got == expected


def test_bad_input_is_refused_with_what_and_where() -> None:
    k = _core.NativeTimeWindowedAggregation("sum", "int", 10, 10, 0)
    with pytest.raises(TypeError, match=r"values\[1\] must be an int, not float"):
        k.process([b"a", b"a"], [1, 2], [1, 2.5])
    with pytest.raises(TypeError, match=r"values\[0\]\[\"x\"\] must be an int"):
        k.process([b"a"], [1], [{"x": "7"}], field="x")
    with pytest.raises(TypeError, match=r"keys\[0\] must be bytes"):
        k.process(["a"], [1], [1])
    with pytest.raises(ConfigError, match="differ in length"):
        k.process([b"a"], [1, 2], [1, 2])
    with pytest.raises(ValueError, match="multiple of 8"):
        k.process([b"a"], b"\x00" * 7, [1])
    with pytest.raises(ConfigError, match="advancement"):
        _core.NativeTimeWindowedAggregation("count", None, 10, 20, 0)
    with pytest.raises(ValueError, match="value_type"):
        _core.NativeTimeWindowedAggregation("sum", None, 10, 10, 0)


def test_nulls_and_fields() -> None:
    """A null key, a null value and a missing field are dropped; a count
    counts null values (Kafka 4.x's windowed count does)."""
    k = _core.NativeTimeWindowedAggregation("mean", "float", 10, 10, 0)
    r = k.process(
        [b"a", None, b"a", b"a"], [1, 2, 3, 4], [{"x": 1}, {"x": 5}, {}, {"x": 2}], field="x"
    )
    assert r.values() == [1.0, 1.5]
    assert (r.stats["dropped_null_key"], r.stats["dropped_null_value"]) == (1, 1)
    c = _core.NativeTimeWindowedAggregation("count", None, 10, 10, 0)
    assert c.process([b"a", b"a"], [1, 2], [None, 3]).values() == [1, 2]


def live_windows(
    results: list[tuple[Any, ...]],
) -> dict[tuple[bytes, int, int], tuple[Any, int]]:
    """The latest value of every window a sequence of results leaves."""
    live: dict[tuple[bytes, int, int], tuple[Any, int]] = {}
    for key, start, end, value, ts, tombstone in results:
        if tombstone:
            live.pop((key, start, end), None)
        else:
            live[(key, start, end)] = (value, ts)
    return live


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, difference=st.sampled_from([1, 5, 30]))
def test_sliding_windows_equal_a_brute_force_model(records: Records, difference: int) -> None:
    """With a grace that drops nothing: every window's latest result is the
    sum (and timestamp: the latest record) of the key's records inside its
    inclusive bounds, and every record at t >= d has its left window
    [t - d, t] (Kafka's sliding windows)."""
    keys, stamps, values = columns(records)
    k = _core.NativeSlidingWindowedAggregation("sum", "int", difference, 10_000)
    live = live_windows(results_of(k.process(keys, stamps, values), keys))
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for key, ts, v in records:
        by_key[key].append((ts, v))
    for (key, start, end), (value, ts) in live.items():
        inside = [(t, v) for t, v in by_key[key] if start <= t <= end]
        assert end - start == difference
        assert inside, f"window {key!r} [{start}, {end}] holds no record"
        assert value == sum(v for _, v in inside)
        assert ts == max(t for t, _ in inside)
    for key, ts, _ in records:
        if ts >= difference:
            assert (key, ts - difference, ts) in live


@settings(max_examples=60, deadline=None)
@given(records=records_strategy, gap=st.sampled_from([1, 10, 40]))
def test_session_windows_equal_a_brute_force_model(records: Records, gap: int) -> None:
    """With a grace that drops nothing, the sessions left (after every
    merge's tombstones) are each key's timestamps split where two
    consecutive ones are more than the gap apart, with their sums and
    counts, timestamped with their end (Kafka's session windows)."""
    keys, stamps, values = columns(records)
    total = _core.NativeSessionWindowedAggregation("sum", "int", gap, 10_000)
    count = _core.NativeSessionWindowedAggregation("count", None, gap, 10_000)
    sums = live_windows(results_of(total.process(keys, stamps, values), keys))
    counts = live_windows(results_of(count.process(keys, stamps), keys))
    expected_sums: dict[tuple[bytes, int, int], tuple[int, int]] = {}
    expected_counts: dict[tuple[bytes, int, int], tuple[int, int]] = {}
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for key, ts, v in records:
        by_key[key].append((ts, v))
    for key, points in by_key.items():
        points.sort()
        session = [points[0]]
        for point in points[1:]:
            if point[0] - session[-1][0] > gap:
                expected_sums[(key, session[0][0], session[-1][0])] = (
                    sum(v for _, v in session),
                    session[-1][0],
                )
                expected_counts[(key, session[0][0], session[-1][0])] = (
                    len(session),
                    session[-1][0],
                )
                session = []
            session.append(point)
        expected_sums[(key, session[0][0], session[-1][0])] = (
            sum(v for _, v in session),
            session[-1][0],
        )
        expected_counts[(key, session[0][0], session[-1][0])] = (len(session), session[-1][0])
    assert sums == expected_sums
    assert counts == expected_counts
