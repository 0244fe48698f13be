"""Sliding-window aggregations, after Kafka's KStreamSlidingWindowAggregateTest
and the sliding-window section of its developer guide."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import StreamsBuilder, serdes
from strom.errors import TopologyError
from strom.kstream import EmitStrategy, Materialized, SlidingWindows, Window, Windowed
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
UPDATE, CLOSE = EmitStrategy.on_window_update(), EmitStrategy.on_window_close()


def string_aggregate(windows: SlidingWindows, emit: EmitStrategy) -> StreamsBuilder:
    """MockInitializer.STRING_INIT ("0") and MockAggregator.TOSTRING_ADDER."""
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .emit_strategy(emit)
        .aggregate(lambda: "0", lambda _k, v, agg: f"{agg}+{v}", Materialized("agg", value_serde=S))
        .to_stream()
        .to("out", value_serde=S)
    )
    return builder


def run(
    builder: StreamsBuilder, records: list[tuple[str | None, str | None, int]], size: int
) -> tuple[list[tuple[Any, Any, int]], TopologyTestDriver]:
    driver = TopologyTestDriver(builder.build())
    src = driver.create_input_topic("in", S, S)
    for key, value, ts in records:
        src.pipe_input(key, value, ts)
    out = driver.create_output_topic("out", serdes.TimeWindowed(S, size), S)
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()], driver


def gather(out: list[tuple[Any, Any, int]]) -> dict[int, set[tuple[Any, int]]]:
    """KStreamSlidingWindowAggregateTest.gatherOutput: per window start, the
    set of (value, timestamp) results."""
    found: dict[int, set[tuple[Any, int]]] = defaultdict(set)
    for key, value, ts in out:
        found[key.window.start].add((value, ts))
    return dict(found)


@pytest.mark.parametrize("emit", [UPDATE, CLOSE])
def test_aggregate_small_input(emit: EmitStrategy) -> None:
    """KStreamSlidingWindowAggregateTest.testAggregateSmallInput."""
    windows = SlidingWindows.of_time_difference_and_grace(10, 5)
    records = [("A", str(i + 1), ts) for i, ts in enumerate([10, 10, 14, 15, 20, 22, 30])]
    out, driver = run(string_aggregate(windows, emit), records, 10)
    driver.close()
    if emit == CLOSE:
        assert gather(out) == {
            0: {("0+1+2", 10)},
            4: {("0+1+2+3", 14)},
            5: {("0+1+2+3+4", 15)},
            10: {("0+1+2+3+4+5", 20)},
            11: {("0+3+4+5", 20)},
            12: {("0+3+4+5+6", 22)},
        }
        return
    assert gather(out) == {
        0: {("0+1", 10), ("0+1+2", 10)},
        4: {("0+1+2+3", 14)},
        5: {("0+1+2+3+4", 15)},
        10: {("0+1+2+3+4+5", 20)},
        11: {("0+3", 14), ("0+3+4", 15), ("0+3+4+5", 20)},
        12: {("0+3+4+5+6", 22)},
        15: {("0+4", 15), ("0+4+5", 20), ("0+4+5+6", 22)},
        16: {("0+5", 20), ("0+5+6", 22)},
        20: {("0+5+6+7", 30)},
        21: {("0+6", 22), ("0+6+7", 30)},
        23: {("0+7", 30)},
    }
    # Keys carry Kafka's inclusive end, start + time difference.
    assert all(key.window.end == key.window.start + 10 for key, _, _ in out)


@pytest.mark.parametrize("emit", [UPDATE, CLOSE])
def test_reduce_small_input(emit: EmitStrategy) -> None:
    """KStreamSlidingWindowAggregateTest.testReduceSmallInput (MockReducer.STRING_ADDER)."""
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(10, 5))
        .emit_strategy(emit)
        .reduce(lambda agg, v: f"{agg}+{v}")
        .to_stream()
        .to("out", value_serde=S)
    )
    records = [("A", str(i + 1), ts) for i, ts in enumerate([10, 14, 15, 22, 26, 30])]
    out, driver = run(builder, records, 10)
    driver.close()
    if emit == CLOSE:
        assert gather(out) == {
            0: {("1", 10)},
            4: {("1+2", 14)},
            5: {("1+2+3", 15)},
            11: {("2+3", 15)},
            12: {("2+3+4", 22)},
        }
        return
    assert gather(out) == {
        0: {("1", 10)},
        4: {("1+2", 14)},
        5: {("1+2+3", 15)},
        11: {("2", 14), ("2+3", 15)},
        12: {("2+3+4", 22)},
        15: {("3", 15), ("3+4", 22)},
        16: {("4", 22), ("4+5", 26)},
        20: {("4+5+6", 30)},
        23: {("5", 26), ("5+6", 30)},
        27: {("6", 30)},
    }


@pytest.mark.parametrize("emit", [UPDATE, CLOSE])
def test_early_records_share_the_first_window(emit: EmitStrategy) -> None:
    """KStreamSlidingWindowAggregateTest.testEarlyRecordsSmallInput: records
    before the time difference go into [0, d]."""
    windows = SlidingWindows.of_time_difference_with_no_grace(50)
    stamps = [0, 5, 6, 3, 13, 10, 70]
    records = [("A", str(i + 1), ts) for i, ts in enumerate(stamps)]
    out, driver = run(string_aggregate(windows, emit), records, 50)
    driver.close()
    if emit == CLOSE:
        assert gather(out) == {
            0: {("0+1+2+3+4+5+6", 13)},
            1: {("0+2+3+4+5+6", 13)},
            4: {("0+2+3+5+6", 13)},
            6: {("0+3+5+6", 13)},
            7: {("0+5+6", 13)},
            11: {("0+5", 13)},
        }
        return
    assert gather(out) == {
        0: {
            ("0+1", 0),
            ("0+1+2", 5),
            ("0+1+2+3", 6),
            ("0+1+2+3+4", 6),
            ("0+1+2+3+4+5", 13),
            ("0+1+2+3+4+5+6", 13),
        },
        1: {("0+2", 5), ("0+2+3", 6), ("0+2+3+4", 6), ("0+2+3+4+5", 13), ("0+2+3+4+5+6", 13)},
        4: {("0+2+3", 6), ("0+2+3+5", 13), ("0+2+3+5+6", 13)},
        6: {("0+3", 6), ("0+3+5", 13), ("0+3+5+6", 13)},
        7: {("0+5", 13), ("0+5+6", 13)},
        11: {("0+5", 13)},
        20: {("0+7", 70)},
    }


@pytest.mark.parametrize("emit", [UPDATE, CLOSE])
def test_records_for_expired_windows_are_dropped_counted_and_logged(
    emit: EmitStrategy, caplog: pytest.LogCaptureFixture
) -> None:
    """KStreamSlidingWindowAggregateTest.shouldLogAndMeterWhenSkippingExpiredWindowByGrace."""
    windows = SlidingWindows.of_time_difference_and_grace(10, 90)
    stamps = [("100", 200), ("0", 100), ("1", 101), ("2", 102), ("3", 103), ("4", 104)]
    stamps += [("5", 105), ("6", 15), ("101", 300), ("102", 400)]
    with caplog.at_level(logging.DEBUG, logger="strom"):
        out, driver = run(string_aggregate(windows, emit), [("k", v, t) for v, t in stamps], 10)
    with driver:
        assert driver.metrics()["dropped-records"] == 7
    expected = [
        (Windowed("k", Window(190, 200)), "0+100", 200),
        (Windowed("k", Window(290, 300)), "0+101", 300),
    ]
    if emit == UPDATE:
        expected.append((Windowed("k", Window(390, 400)), "0+102", 400))
    assert out == expected
    expired = [m for m in caplog.messages if "expired window" in m]
    assert any("window=[90,100]" in m and "expiration=110" in m for m in expired)
    assert any("window=[15,25]" in m for m in expired)


def test_null_keys_and_values_are_dropped() -> None:
    windows = SlidingWindows.of_time_difference_with_no_grace(10)
    records: list[tuple[str | None, str | None, int]] = [("A", "1", 20), (None, "2", 21)]
    records.append(("A", None, 22))
    out, driver = run(string_aggregate(windows, UPDATE), records, 10)
    with driver:
        assert driver.metrics()["dropped-records"] == 2
    assert out == [(Windowed("A", Window(10, 20)), "0+1", 20)]


def test_retention_must_cover_twice_the_difference_plus_grace() -> None:
    windows = SlidingWindows.of_time_difference_and_grace(10, 5)
    grouped = StreamsBuilder().stream("in", key_serde=S, value_serde=S).group_by_key()
    with pytest.raises(TopologyError, match="twice the time difference plus the grace period"):
        grouped.windowed_by(windows).count(Materialized("c", retention=24))
    grouped.windowed_by(windows).count(Materialized("ok", retention=25))
    with pytest.raises(TopologyError):
        SlidingWindows.of_time_difference_with_no_grace(0)


def model(
    records: list[tuple[str, int]], difference: int, grace: int
) -> tuple[dict[tuple[str, int], tuple[int, int, int]], int]:
    """Kafka's sliding windows by brute force, for input where no accepted
    record meets a closed window: a record more than ``grace + d`` behind
    stream time is dropped; every accepted record ``t`` has its left window
    ``[t - d, t]`` (``[0, d]`` when ``t < d``) and, when an accepted record
    lies in ``(t, t + 1 + d]``, its right window ``[t + 1, t + 1 + d]``. A
    window's result is (count, sum, max timestamp) of the accepted records
    in it, both bounds inclusive."""
    observed, dropped = -1, 0
    accepted: dict[str, list[int]] = defaultdict(list)
    for key, ts in records:
        observed = max(observed, ts)
        if ts + difference < observed - grace:
            dropped += 1
            continue
        accepted[key].append(ts)
    out: dict[tuple[str, int], tuple[int, int, int]] = {}
    for key, stamps in accepted.items():
        starts = {max(0, t - difference) for t in stamps}
        starts |= {t + 1 for t in stamps if any(t < q <= t + 1 + difference for q in stamps)}
        for start in starts:
            inside = [t for t in stamps if start <= t <= start + difference]
            out[(key, start)] = (len(inside), sum(inside), max(inside))
    return out, dropped


@st.composite
def late_or_on_time(draw: st.DrawFn, difference: int, grace: int) -> list[tuple[str, int]]:
    """Timestamps that run ahead, come back within grace, or fall more than
    grace + d behind stream time (so no accepted record meets a closed window)."""
    observed, out = 0, []
    for _ in range(draw(st.integers(0, 30))):
        key = draw(st.sampled_from(["a", "b"]))
        kind = draw(st.sampled_from(["ahead", "within", "late"]))
        if kind == "ahead":
            ts = observed + draw(st.integers(0, 2 * difference))
        elif kind == "within":
            ts = observed - draw(st.integers(0, grace))
        else:
            ts = observed - grace - difference - draw(st.integers(1, 20))
        ts = ts if ts >= 0 else observed
        observed = max(observed, ts)
        out.append((key, ts))
    return out


@settings(max_examples=80, deadline=None)
@given(data=st.data(), difference=st.sampled_from([1, 5, 20]), grace=st.sampled_from([0, 10]))
def test_random_out_of_order_counts_and_sums_equal_the_model(
    data: st.DataObject, difference: int, grace: int
) -> None:
    records = data.draw(late_or_on_time(difference, grace))
    builder = StreamsBuilder()
    windowed = (
        builder.stream("in", key_serde=S, value_serde=L)
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(difference, grace))
    )
    # A long retention: the model knows nothing of expiry.
    windowed.count(Materialized("c", retention=100_000)).to_stream().to("counts", value_serde=L)
    windowed.reduce(lambda a, b: a + b, Materialized("s", retention=100_000)).to_stream().to(
        "sums", value_serde=L
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, L)
        for key, ts in records:
            src.pipe_input(key, ts, ts)
        counts = driver.create_output_topic("counts", serdes.TimeWindowed(S, difference), L)
        sums = driver.create_output_topic("sums", serdes.TimeWindowed(S, difference), L)
        latest_counts = {
            (k.key, k.window.start): v for k, v in counts.read_key_values_to_map().items()
        }
        sum_records = sums.read_records_to_list()
        dropped = driver.metrics()["dropped-records"]
    latest: dict[tuple[str, int], tuple[int, int]] = {}
    for r in sum_records:
        latest[(r.key.key, r.key.window.start)] = (r.value, r.timestamp)
    expected, expected_dropped = model(records, difference, grace)
    assert latest_counts == {k: n for k, (n, _, _) in expected.items()}
    # Each record's value is its timestamp; a result's timestamp is the
    # latest record in its window.
    assert latest == {k: (total, ts) for k, (_, total, ts) in expected.items()}
    assert dropped == 2 * expected_dropped
