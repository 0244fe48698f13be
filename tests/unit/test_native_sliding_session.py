"""count() of sliding and session windows on the native kernels: the same
results as the Python path (KStreamSlidingWindowAggregate and
KStreamSessionWindowAggregate with user functions), record for record, old
values, store contents and drops included."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strom
from strom import KafkaStreams, StreamsBuilder, serdes
from strom.config import EMIT_INTERVAL_WINDOWED
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.internals.native_window import NativeSessionWindowCount, NativeSlidingWindowCount
from strom.kstream import EmitStrategy, Materialized, SessionWindows, SlidingWindows
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
Windows = SlidingWindows | SessionWindows


def topology(windows: Windows, native: bool, caching: bool, final: bool) -> StreamsBuilder:
    builder = StreamsBuilder()
    windowed: Any = (
        builder.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
    )
    if final:
        windowed = windowed.emit_strategy(EmitStrategy.on_window_close())
    mat = Materialized("store", value_serde=L, caching=caching)
    if native:
        table = windowed.count(Materialized("store", caching=caching))
    elif isinstance(windows, SessionWindows):
        table = windowed.aggregate(lambda: 0, lambda _k, _v, a: a + 1, lambda _k, a, b: a + b, mat)
    else:
        table = windowed.aggregate(lambda: 0, lambda _k, _v, a: a + 1, mat)
    table.to_stream().to("out", value_serde=L)
    # A table regrouped by the plain key and summed retracts each window's
    # previous result: the old values must match too.
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


def run_driver(
    windows: Windows,
    native: bool,
    records: list[tuple[str, int | None, int]],
    caching: bool,
    final: bool,
) -> tuple[list[Any], list[Any], list[Any], int, list[str]]:
    """Output records, retracting totals, the store, drops, node kinds."""
    built = topology(windows, native, caching, final).build()
    with TopologyTestDriver(built, {EMIT_INTERVAL_WINDOWED: 0}) as driver:
        src = driver.create_input_topic("in", S, S)
        for key, v, ts in records:
            src.pipe_input(key, None if v is None else str(v), ts)
        out = driver.create_output_topic("out", key_serde(windows), L)
        results = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
        totals_topic = driver.create_output_topic("totals", S, L)
        totals = [(r.key, r.value, r.timestamp) for r in totals_topic.read_records_to_list()]
        if isinstance(windows, SessionWindows):
            store = list(driver.get_session_store("store").fetch_range(None, None))
        else:
            store = list(driver.get_window_store("store").all())
        dropped = sum(t.metrics.dropped_records for t in driver._tasks)
        kinds = [
            type(n).__name__ for t in driver._tasks for n in t.nodes.values()
        ]  # which node ran
    return results, totals, store, dropped, kinds


@settings(max_examples=120, deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.one_of(st.none(), st.integers(0, 9)),
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
def test_native_count_equals_the_python_path(
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
    native = run_driver(windows, True, records, caching, final)
    python = run_driver(windows, False, records, caching, final)
    assert native[:4] == python[:4]
    kind = NativeSessionWindowCount if session else NativeSlidingWindowCount
    assert (kind.__name__ in native[4]) is True
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


def test_agg_count_is_count_and_value_aggregations_are_refused() -> None:
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
        grouped: Any = StreamsBuilder().stream("in").group_by_key().windowed_by(windows)
        with pytest.raises(TopologyError, match=r"strom\.agg\.sum"):
            grouped.aggregate(strom.agg.sum(), "sums")
