"""Aggregations of sliding and session windows on the native kernels
(count() and strom.agg sum/min/max/mean): the same results as the Python
path (KStreamSlidingWindowAggregate and KStreamSessionWindowAggregate with
user functions), record for record, old values, store contents and drops
included, behind the record cache or not."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strom
from strom import KafkaStreams, StreamsBuilder, serdes
from strom.config import EMIT_INTERVAL_WINDOWED
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import EmitStrategy, Materialized, SessionWindows, SlidingWindows
from strom.kstream.internals.native_window import (
    NativeSessionWindowAggregate,
    NativeSlidingWindowAggregate,
)
from strom.testing import TopologyTestDriver

S, L, D, J = serdes.String(), serdes.Long(), serdes.Double(), serdes.Json()
BIG = 2**63 - 1
Windows = SlidingWindows | SessionWindows


def _mean(a: Any) -> float:
    return a[0] / a[1] if a[1] else math.nan


# name -> (input value serde, native aggregation, Python initializer,
#          aggregator, session merger, result serde)
CASES: dict[str, tuple[Any, Any, Callable[[], Any], Any, Any, Any]] = {
    "count": (S, None, lambda: 0, lambda _k, _v, a: a + 1, lambda _k, a, b: a + b, L),
    "sum_long": (
        L,
        strom.agg.sum(),
        lambda: 0,
        lambda _k, v, a: a + v,
        lambda _k, a, b: a + b,
        L,
    ),
    "max_long": (
        L,
        strom.agg.max(),
        lambda: -BIG - 1,
        lambda _k, v, a: max(a, v),
        lambda _k, a, b: max(a, b),
        L,
    ),
    "min_field_int": (
        J,
        strom.agg.min(strom.col("amount").cast(int)),
        lambda: BIG,
        lambda _k, v, a: min(a, v["amount"]),
        lambda _k, a, b: min(a, b),
        L,
    ),
    "mean_field": (
        J,
        strom.agg.mean("amount"),
        lambda: [0.0, 0],
        lambda _k, v, a: [a[0] + v["amount"], a[1] + 1],
        lambda _k, a, b: [a[0] + b[0], a[1] + b[1]],
        D,
    ),
}
# Cases whose old values a retracting table downstream checks (a mean
# cannot be retracted by subtraction).
RETRACTED = ("count", "sum_long")


def topology(
    windows: Windows, native: bool, caching: bool, final: bool, case: str = "count"
) -> StreamsBuilder:
    value_serde, aggregation, init, aggregator, merger, result_serde = CASES[case]
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=value_serde)
    if not native and aggregation is not None:
        # strom.agg value aggregations skip null values (counted as dropped,
        # see run_driver).
        stream = stream.filter(lambda _k, v: v is not None)
    windowed: Any = stream.group_by_key().windowed_by(windows)
    if final:
        windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
    if native:
        mat = Materialized("store", caching=caching)
        table = windowed.count(mat) if aggregation is None else windowed.aggregate(aggregation, mat)
    else:
        mat = Materialized(
            "store", value_serde=J if case == "mean_field" else result_serde, caching=caching
        )
        if isinstance(windows, SessionWindows):
            table = windowed.aggregate(init, aggregator, merger, mat)
        else:
            table = windowed.aggregate(init, aggregator, mat)
        if case == "mean_field":
            table = table.map_values(_mean)
    table.to_stream().to("out", value_serde=result_serde)
    if case in RETRACTED:
        # A table regrouped by the plain key and summed retracts each
        # window's previous result: the old values must match too.
        (
            table.group_by(lambda wk, v: (wk.key, v), key_serde=S, value_serde=L)
            .reduce(lambda a, v: a + v, lambda a, v: a - v)
            .to_stream()
            .to("totals", value_serde=L)
        )
    return builder


def key_serde(windows: Windows) -> Any:
    if isinstance(windows, SessionWindows):
        return serdes.SessionWindowed(S)
    return serdes.TimeWindowed(S, windows.time_difference_ms)


def value_of(case: str, v: int | None) -> Any:
    serde = CASES[case][0]
    if v is None:
        return None
    if serde is J:
        return {"amount": v}
    return str(v) if serde is S else v


def run_driver(
    windows: Windows,
    native: bool,
    records: list[tuple[str, int | None, int]],
    caching: bool,
    final: bool,
    case: str = "count",
) -> tuple[list[Any], list[Any], list[Any], int, list[str]]:
    """Output records, retracting totals, the store, drops, node kinds."""
    built = topology(windows, native, caching, final, case).build()
    with TopologyTestDriver(built, {EMIT_INTERVAL_WINDOWED: 0}) as driver:
        src = driver.create_input_topic("in", S, CASES[case][0])
        for key, v, ts in records:
            src.pipe_input(key, value_of(case, v), ts)
        out = driver.create_output_topic("out", key_serde(windows), CASES[case][5])
        results = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
        totals: list[Any] = []
        if case in RETRACTED:
            totals_topic = driver.create_output_topic("totals", S, L)
            totals = [(r.key, r.value, r.timestamp) for r in totals_topic.read_records_to_list()]
        if isinstance(windows, SessionWindows):
            store = [
                (kv.key, kv.value)
                for kv in driver.get_session_store("store").fetch_range(None, None)
            ]
        else:
            store = [
                (kv.key, kv.value) for kv in driver.get_timestamped_window_store("store").all()
            ]
        if case == "mean_field" and not native:
            # The Python store holds (sum, count) pairs, the native one reads as the mean.
            store = [
                (k, _mean(v) if isinstance(windows, SessionWindows) else (_mean(v[0]), v[1]))
                for k, v in store
            ]
        dropped = sum(t.metrics.dropped_records for t in driver._tasks)
        kinds = [
            type(n).__name__ for t in driver._tasks for n in t.nodes.values()
        ]  # which node ran
    if not native and CASES[case][1] is not None:
        dropped += sum(v is None for _, v, _ in records)
    return results, totals, store, dropped, kinds


@settings(max_examples=200, deadline=None)
@given(
    case=st.sampled_from(sorted(CASES)),
    records=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.integers(-9, 9)),
            # steps from the previous record: mostly forward, some late
            st.integers(min_value=-60, max_value=40),
        ),
        max_size=30,
    ),
    session=st.booleans(),
    span=st.sampled_from([1, 10, 50]),
    grace=st.sampled_from([0, 20, 200]),
    caching=st.booleans(),
    final=st.booleans(),
)
def test_native_aggregations_equal_the_python_path(
    case: str,
    records: list[tuple[str, int | None, int]],
    session: bool,
    span: int,
    grace: int,
    caching: bool,
    final: bool,
) -> None:
    """Random out-of-order input, sliding or session windows with grace,
    behind the record cache or not, every update or final results only:
    same results, emission order, timestamps, old values, store and drops."""
    at, timed = 100, []
    for key, v, step in records:
        at = max(0, at + step)
        timed.append((key, v, at))
    records = timed
    windows: Windows = (
        SessionWindows.of_inactivity_gap_and_grace(span, grace)
        if session
        else SlidingWindows.of_time_difference_and_grace(span, grace)
    )
    native = run_driver(windows, True, records, caching, final, case)
    python = run_driver(windows, False, records, caching, final, case)
    assert native[:4] == python[:4]
    kind = NativeSessionWindowAggregate if session else NativeSlidingWindowAggregate
    assert kind.__name__ in native[4]
    assert kind.__name__ not in python[4]


def test_batches_on_the_embedded_log_equal_the_python_path(tmp_path: Any) -> None:
    """Through KafkaStreams, where a call carries many records at once."""
    rng = random.Random(7)
    records = [
        # mostly in order, some late (within and beyond grace)
        (
            f"k{rng.randrange(20)}",
            rng.choice([None, *range(10)]),
            max(0, i * 10 + rng.randrange(-800, 200)),
        )
        for i in range(2_000)
    ]
    cases: list[Windows] = [
        SlidingWindows.of_time_difference_and_grace(300, 500),
        SessionWindows.of_inactivity_gap_and_grace(200, 500),
    ]
    for windows in cases:
        for final in (False, True):
            outputs = []
            for native in (True, False):
                name = f"{type(windows).__name__}-{final}-{native}"
                path = tmp_path / name
                log = EmbeddedLog(path)
                for topic in ("in", "out", "totals"):
                    log.create_topic(topic)
                with log.producer() as producer:
                    for key, v, ts in records:
                        raw = None if v is None else str(v).encode()
                        producer.produce("in", key.encode(), raw, timestamp=ts)
                config = {
                    "application.id": "agg",
                    "bootstrap.servers": f"embedded:{path}",
                    EMIT_INTERVAL_WINDOWED: 0,
                }
                built = topology(windows, native, False, final).build()
                with KafkaStreams(built, config) as app:
                    app.run_until_end(timeout=60)
                    dropped = app.metrics()["dropped-records"]
                got = []
                for topic in ("out", "totals"):
                    out = log.read(topic, 0, 0, 1_000_000)
                    got.append([(r.key, r.value, r.timestamp) for r in out])
                outputs.append((got, dropped))
                log.close()
            assert outputs[0] == outputs[1], (windows, final)
            assert len(outputs[0][0][0]) > 50 and outputs[0][1] > 50


def test_a_restart_reloads_the_kernel_from_the_store(tmp_path: Any) -> None:
    """Native counts stopped halfway and restarted (the kernel reloads the
    open windows, stream time and last emit from the restored store) give
    what the Python path gives, restarted at the same point."""
    rng = random.Random(11)
    records = [
        (
            f"k{rng.randrange(5)}",
            rng.choice([None, *range(10)]),
            max(0, i * 10 + rng.randrange(-300, 100)),
        )
        for i in range(600)
    ]
    cases: list[Windows] = [
        SlidingWindows.of_time_difference_and_grace(100, 200),
        SessionWindows.of_inactivity_gap_and_grace(40, 200),
    ]
    for windows in cases:
        for final in (False, True):
            outputs = []
            for native in (True, False):
                path = tmp_path / f"{type(windows).__name__}-{final}-{native}"
                log = EmbeddedLog(path)
                for topic in ("in", "out", "totals"):
                    log.create_topic(topic)
                config = {
                    "application.id": "agg",
                    "bootstrap.servers": f"embedded:{path}",
                    "state.dir": str(path / "state"),
                    EMIT_INTERVAL_WINDOWED: 0,
                }
                for half in (records[:300], records[300:]):
                    with log.producer() as producer:
                        for key, v, ts in half:
                            raw = None if v is None else str(v).encode()
                            producer.produce("in", key.encode(), raw, timestamp=ts)
                    built = topology(windows, native, False, final).build()
                    with KafkaStreams(built, config) as app:
                        app.run_until_end(timeout=60)
                got = [
                    [(r.key, r.value, r.timestamp) for r in log.read(topic, 0, 0, 1_000_000)]
                    for topic in ("out", "totals")
                ]
                outputs.append(got)
                log.close()
            assert outputs[0] == outputs[1], (windows, final)
            assert len(outputs[0][0]) > 20


def test_agg_count_is_count_and_bad_arguments_are_refused() -> None:
    records = [("a", 1, 5), ("a", None, 8), ("b", 2, 9), ("a", 3, 30), ("a", 4, 12)]
    for windows in (
        SlidingWindows.of_time_difference_and_grace(10, 50),
        SessionWindows.of_inactivity_gap_and_grace(10, 50),
    ):
        got = {}
        for how in ("count", "agg"):
            builder = StreamsBuilder()
            windowed: Any = (
                builder.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
            )
            mat = Materialized("store", caching=False)
            table = (
                windowed.count(mat)
                if how == "count"
                else windowed.aggregate(strom.agg.count(), mat)
            )
            table.to_stream().to("out", value_serde=L)
            with TopologyTestDriver(builder.build()) as driver:
                src = driver.create_input_topic("in", S, S)
                for key, v, ts in records:
                    src.pipe_input(key, None if v is None else str(v), ts)
                out = driver.create_output_topic("out", key_serde(windows), L)
                got[how] = out.read_key_values_to_list()
                kinds = [type(n).__name__ for t in driver._tasks for n in t.nodes.values()]
                assert any(k.startswith("Native") for k in kinds)
        assert got["count"] == got["agg"] and got["count"]
        grouped: Any = (
            StreamsBuilder().stream("in", value_serde=L).group_by_key().windowed_by(windows)
        )
        with pytest.raises(TopologyError, match=r"strom\.agg\.sum results are Longs"):
            grouped.aggregate(strom.agg.sum(), Materialized("sums", value_serde=D))
        with pytest.raises(TopologyError, match="takes no aggregator"):
            grouped.aggregate(strom.agg.sum(), lambda _k, v, a: a + v)


LATE = 50


@pytest.mark.parametrize("cache_bytes", [3_000, 10 << 20], ids=["evicting", "default"])
def test_cached_batches_equal_the_python_path(tmp_path: Any, cache_bytes: int) -> None:
    """Behind the record cache, with many records per call: the kernel's
    writes go into the cache in one call per batch, and what it flushes on
    commit is forwarded, stored and logged as the Python path's one-by-one
    puts are, for time, sliding and session windows. When a small cache
    evicts (a window may be evicted and written again within one batch),
    the latest result per window, the totals and the store are the same;
    the order of evictions may differ, as the Python processors' reads of
    windows through the cache count as uses (Kafka's LRU) and the kernel's
    own reads do not. Session windows are compared without evictions only:
    behind the cache a session the store has expired still merges while the
    cache holds it (Kafka's CachingSessionStore), and the kernel sees which
    ones it holds as of each call, the processor as of each record."""
    from strom.kstream import TimeWindows  # noqa: PLC0415

    rng = random.Random(13)
    records = [
        (
            f"k{rng.randrange(30)}",
            rng.choice([None, *range(10)]),
            max(0, i * 10 + rng.randrange(-LATE, 100)),
        )
        for i in range(3_000)
    ]
    cases: list[Any] = [
        TimeWindows.of_size_and_grace(200, 300).advance_by(100),
        SlidingWindows.of_time_difference_and_grace(300, 500),
    ]
    if cache_bytes >= 10_000:
        cases.append(SessionWindows.of_inactivity_gap_and_grace(200, 500))
    for windows in cases:
        for case in ("count", "sum_long"):
            outputs = []
            for native in (True, False):
                path = tmp_path / f"{type(windows).__name__}-{case}-{native}"
                log = EmbeddedLog(path)
                for topic in ("in", "out", "totals"):
                    log.create_topic(topic)
                serde = CASES[case][0]
                with log.producer() as producer:
                    for key, v, ts in records:
                        value = serde.serialize("in", value_of(case, v))
                        producer.produce("in", key.encode(), value, timestamp=ts)
                config = {
                    "application.id": "agg",
                    "bootstrap.servers": f"embedded:{path}",
                    "statestore.cache.max.bytes": cache_bytes,
                    "commit.interval.ms": 3_600_000,
                    EMIT_INTERVAL_WINDOWED: 0,
                }
                built = topology(windows, native, True, False, case).build()
                with KafkaStreams(built, config) as app:
                    app.run_until_end(timeout=60)
                got: list[Any] = [
                    [(r.key, r.value, r.timestamp) for r in log.read(topic, 0, 0, 1_000_000)]
                    for topic in ("out", "totals")
                ]
                if cache_bytes < 10_000:
                    got = [{key: (value, ts) for key, value, ts in records} for records in got]
                changelog = {
                    r.key: r.value for r in log.read("agg-store-changelog", 0, 0, 1_000_000)
                }
                outputs.append((got, changelog))
                log.close()
            assert outputs[0] == outputs[1], (windows, case)
            assert len(outputs[0][0][0]) > 50 and outputs[0][1]
