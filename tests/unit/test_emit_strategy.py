"""EmitStrategy.on_window_close() (Kafka's KIP-825) for time, sliding and
session windows, after the emit-final cases of Kafka's
KStreamWindowAggregateTest and the developer guide's "emit final" section."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.config import StreamsConfig
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, TopologyError
from strom.kstream import (
    BufferConfig,
    EmitStrategy,
    Materialized,
    SessionWindows,
    SlidingWindows,
    Suppressed,
    TimeWindows,
    Window,
    Windowed,
)
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
UPDATE, CLOSE = EmitStrategy.on_window_update(), EmitStrategy.on_window_close()
INTERVAL = "__emit.interval.ms.kstreams.windowed.aggregation__"
# KStreamWindowAggregateTest's hopping windows: size 10, advance 5, grace 5.
HOPPING = TimeWindows.of_size_and_grace(10, 5).advance_by(5)


DAY = 86_400_000


def string_aggregate(windows: Any, emit: EmitStrategy) -> StreamsBuilder:
    """MockInitializer.STRING_INIT ("0") and MockAggregator.TOSTRING_ADDER,
    over a store kept for a day, as KStreamWindowAggregateTest's stores are
    (with the default size + grace, Kafka's time-ordered store would no
    longer show some windows by the time these cases emit them)."""
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .emit_strategy(emit)
        .aggregate(
            lambda: "0",
            lambda _k, v, agg: f"{agg}+{v}",
            Materialized("agg", value_serde=S, retention=DAY),
        )
        .to_stream()
        .to("out", value_serde=S)
    )
    return builder


class Harness:
    def __init__(self, windows: Any, emit: EmitStrategy, config: dict[str, Any] | None = None):
        self.driver = TopologyTestDriver(string_aggregate(windows, emit).build(), config)
        self.src = self.driver.create_input_topic("in", S, S)
        self.out = self.driver.create_output_topic("out", serdes.TimeWindowed(S, 10), S)

    def pipe(self, *records: tuple[str, str, int]) -> list[tuple[Any, Any, int]]:
        for key, value, ts in records:
            self.src.pipe_input(key, value, ts)
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]


def tw(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


def test_emit_with_interval_zero() -> None:
    """KStreamWindowAggregateTest.shouldEmitWithInterval0 (the driver's default)."""
    records = [("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15), ("D", "4", 20)]
    with TopologyTestDriver(string_aggregate(HOPPING, CLOSE).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for key, value, ts in records:
            src.pipe_input(key, value, ts)
        out = driver.create_output_topic("out", serdes.TimeWindowed(S, 10), S)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            (tw("A", 0, 10), "0+1+1", 5),
            (tw("A", 5, 15), "0+1", 5),
            (tw("B", 5, 15), "0+2", 10),
        ]


def test_no_emit_until_the_close_time_moves_past_a_new_window() -> None:
    """KStreamWindowAggregateTest.shouldNotEmitFinalIfNotProgressEnough."""
    h = Harness(HOPPING, CLOSE)
    with h.driver:
        assert h.pipe(("A", "1", 0), ("B", "2", 5), ("C", "3", 15)) == [
            (tw("A", 0, 10), "0+1", 0),
            (tw("B", 0, 10), "0+2", 5),
        ]
        assert h.pipe(("D", "4", 15)) == []  # stream time did not move
        assert h.pipe(("E", "5", 19)) == []  # it moved, but closed no new window


def test_emit_at_most_once_per_interval_of_wall_clock_time() -> None:
    """KStreamWindowAggregateTest.shouldEmitWithLargeInterval: with a 1 s
    interval nothing is emitted until the wall clock moves on."""
    h = Harness(HOPPING, CLOSE, {INTERVAL: 1000})
    with h.driver:
        # The first record looks (nothing has closed) and starts the interval.
        assert h.pipe(("A", "1", 0), ("A", "1", 5), ("B", "2", 10), ("C", "3", 15)) == []
        h.driver.advance_wall_clock_time(10_000)
        assert h.pipe(("D", "4", 20)) == [
            (tw("A", 0, 10), "0+1+1", 5),
            (tw("A", 5, 15), "0+1", 5),
            (tw("B", 5, 15), "0+2", 10),
        ]
        h.driver.advance_wall_clock_time(100)
        assert h.pipe(("E", "5", 40)) == []  # within the interval again


def test_nothing_is_emitted_while_grace_keeps_windows_open() -> None:
    """KStreamWindowAggregateTest.testAggBasic (emit final): grace 100, no window closes."""
    windows = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    h = Harness(windows, CLOSE)
    with h.driver:
        stamps = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 3, 2, 9]
        assert h.pipe(*[("A", "1", ts) for ts in stamps]) == []


def test_emit_final_of_a_join_input() -> None:
    """KStreamWindowAggregateTest.testJoin (processEmitFinalJoin, first table)."""
    h = Harness(HOPPING, CLOSE)
    with h.driver:
        first = h.pipe(("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3))
        first += h.pipe(("A", "1", 9), ("A", "1", 15))
        assert first == [
            (tw("A", 0, 10), "0+1+1", 9),
            (tw("B", 0, 10), "0+2", 1),
            (tw("C", 0, 10), "0+3", 2),
            (tw("D", 0, 10), "0+4", 3),
        ]
        second = h.pipe(
            ("A", "1", 10), ("B", "2", 11), ("D", "4", 12), ("B", "2", 13), ("C", "3", 14)
        )
        second += h.pipe(("A", "1", 20))
        assert second == [
            (tw("A", 5, 15), "0+1+1", 10),
            (tw("B", 5, 15), "0+2+2", 13),
            (tw("C", 5, 15), "0+3", 14),
            (tw("D", 5, 15), "0+4", 12),
        ]


def test_the_issue_case_with_emit_final() -> None:
    """Issue #5: 5 s tumbling count; records at 1 s, 3 s, 4.999 s, 6 s, then a
    late 2 s within a 4 s grace: one final result, 4, once [0, 5 s) closes."""
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(5_000, 4_000))
        .emit_strategy(CLOSE)
        .count()
        .to_stream()
        .to("out", value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", serdes.TimeWindowed(S, 5_000), L)
        for ts in (1_000, 3_000, 4_999, 6_000, 2_000):
            src.pipe_input("k", "v", ts)
        assert out.is_empty()
        src.pipe_input("k", "v", 9_000)  # closes [0, 5000): end + grace <= 9000
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            (Windowed("k", Window(0, 5_000)), 4, 4_999)
        ]
        # 14 s closes [5 s, 10 s) while the store (size + grace) still shows it.
        src.pipe_input("k", "v", 14_000)
        assert out.read_key_values_to_list() == [(Windowed("k", Window(5_000, 10_000)), 2)]


def test_emit_strategy_is_checked() -> None:
    grouped = StreamsBuilder().stream("in", key_serde=S, value_serde=S).group_by_key()
    with pytest.raises(TopologyError, match="emit_strategy"):
        grouped.windowed_by(HOPPING).emit_strategy("on_window_close")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        StreamsConfig({INTERVAL: -1})
    assert StreamsConfig()[INTERVAL] == 1000


def test_last_emit_survives_a_restart(log: EmbeddedLog, log_path: str) -> None:
    """KStreamWindowAggregateTest.shouldEmitFromLastEmitTime, on the embedded
    log: a restarted app does not emit old windows again, and emits the ones
    that closed since."""
    log.create_topic("in")
    log.create_topic("out")
    config = {
        "application.id": "emit-final",
        "bootstrap.servers": f"embedded:{log_path}",
        INTERVAL: 0,
    }
    topology = string_aggregate(HOPPING, CLOSE).build()

    def produce(*records: tuple[str, str, int]) -> None:
        with log.producer() as producer:
            for key, value, ts in records:
                producer.produce("in", key.encode(), value.encode(), timestamp=ts)

    def emitted() -> list[tuple[Any, Any, int]]:
        serde = serdes.TimeWindowed(S, 10)
        return [
            (serde.deserialize("out", r.key), S.deserialize("out", r.value), r.timestamp)
            for r in log.read("out", 0, 0, 100)
        ]

    produce(("A", "1", 0), ("B", "2", 5), ("C", "3", 15))
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=30)
    assert emitted() == [(tw("A", 0, 10), "0+1", 0), (tw("B", 0, 10), "0+2", 5)]
    produce(("D", "4", 25))
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=30)
    assert emitted()[2:] == [(tw("B", 5, 15), "0+2", 5), (tw("C", 10, 20), "0+3", 15)]


# --- properties: final results are the last updates, once per window ------------


def windowed_kinds(size: int, grace: int) -> dict[str, Any]:
    return {
        "tumbling": TimeWindows.of_size_and_grace(size, grace),
        "hopping": TimeWindows.of_size_and_grace(size, grace).advance_by(max(1, size // 4)),
        "sliding": SlidingWindows.of_time_difference_and_grace(size, grace),
        "session": SessionWindows.of_inactivity_gap_and_grace(size, grace),
    }


def sums(windows: Any, emit: EmitStrategy, records: list[tuple[str, int]]) -> list[Any]:
    """Windowed sums of the records' timestamps, as (key, start, end, value, ts)."""
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=L)
        .group_by_key()
        .windowed_by(windows)
        .emit_strategy(emit)
        .reduce(lambda a, b: a + b, Materialized("sums", retention=1_000_000))
        .to_stream()
        .to("out", value_serde=L)
    )
    session = isinstance(windows, SessionWindows)
    key_serde = serdes.SessionWindowed(S) if session else serdes.TimeWindowed(S, 1)
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, L)
        for key, ts in records:
            src.pipe_input(key, ts, ts)
        out = driver.create_output_topic("out", key_serde, L)
        return [
            (r.key.key, r.key.window.start, r.key.window.end if session else None, r.value)
            for r in out.read_records_to_list()
        ]


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=300)),
        max_size=30,
    ),
    kind=st.sampled_from(["tumbling", "hopping", "sliding", "session"]),
    size=st.sampled_from([5, 20]),
    grace=st.sampled_from([0, 10]),
)
def test_final_results_are_the_last_update_of_each_closed_window(
    records: list[tuple[str, int]], kind: str, size: int, grace: int
) -> None:
    windows = windowed_kinds(size, grace)[kind]
    updates = sums(windows, UPDATE, records)
    finals = sums(windows, CLOSE, records)
    # Every window at most once, never a tombstone.
    keys = [(k, start, end) for k, start, end, _ in finals]
    assert len(keys) == len(set(keys))
    assert all(value is not None for *_, value in finals)
    last: dict[tuple[str, int, int | None], Any] = {}
    last_value: dict[tuple[str, int, int | None], Any] = {}
    for k, start, end, value in updates:
        last[(k, start, end)] = value
        if value is not None:
            last_value[(k, start, end)] = value
    # A final result is the window's value when it closed: its last update
    # (a session merged away later shows that as a tombstone).
    assert {(k, start, end): v for k, start, end, v in finals} == {
        key: last_value[key] for key in keys
    }
    # Every window that closed by the end of the input was emitted; any other
    # emitted window is a session that a later record merged away.
    observed = max((ts for _, ts in records), default=-1)
    closed = set()
    for (k, start, end), value in last.items():
        if value is None:
            continue
        if kind == "session":
            assert end is not None
            done = end < observed - grace - size
        elif kind == "sliding":
            done = start + size < observed - grace
        else:
            done = start + size <= observed - grace
        if done:
            closed.add((k, start, end))
    assert closed <= set(keys)
    assert all(last[key] is None for key in set(keys) - closed)


def test_on_window_close_equals_suppress_until_window_closes() -> None:
    """The developer guide: emit final is the built-in form of
    suppress(until_window_closes) for windowed aggregations."""
    records = [("a", ts) for ts in (1, 7, 12, 3, 25, 11, 40, 26, 60, 90)]
    windows = TimeWindows.of_size_and_grace(10, 5)
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=L)
        .group_by_key()
        .windowed_by(windows)
        .reduce(lambda a, b: a + b)
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .to("out", value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, L)
        for key, ts in records:
            src.pipe_input(key, ts, ts)
        out = driver.create_output_topic("out", serdes.TimeWindowed(S, 1), L)
        suppressed = [
            (r.key.key, r.key.window.start, None, r.value) for r in out.read_records_to_list()
        ]
    assert sums(windows, CLOSE, records) == suppressed


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=200)),
        max_size=30,
    ),
    advance=st.sampled_from([10, 5, 2]),
    grace=st.sampled_from([0, 7, 50]),
)
def test_time_windowed_sums_equal_a_brute_force_model(
    records: list[tuple[str, int]], advance: int, grace: int
) -> None:
    """Tumbling and hopping sums, by definition: a record at t is added to
    every window [s, s + 10) holding it (s a multiple of the advance) whose
    end is still after stream time - grace; otherwise it is dropped there."""
    windows = TimeWindows.of_size_and_grace(10, grace).advance_by(advance)
    latest: dict[tuple[str, int], int] = {}
    for k, start, _, value in sums(windows, UPDATE, records):
        latest[(k, start)] = value
    expected: dict[tuple[str, int], int] = defaultdict(int)
    observed = -1
    for k, t in records:
        observed = max(observed, t)
        for s in range(0, t + 1, advance):
            if s <= t < s + 10 and s + 10 > observed - grace:
                expected[(k, s)] += t
    assert latest == dict(expected)


def test_windowed_tables_join_window_by_window() -> None:
    """KStreamWindowAggregateTest.testJoin (emit on update): two windowed
    aggregations joined as tables; each update looks the other table up by
    key and window, the result timed with the later of the two."""
    windows = TimeWindows.of_size_and_grace(10, 100).advance_by(5)
    builder = StreamsBuilder()

    def table(topic: str, store: str) -> Any:
        return (
            builder.stream(topic, key_serde=S, value_serde=S)
            .group_by_key()
            .windowed_by(windows)
            .aggregate(
                lambda: "0", lambda _k, v, agg: f"{agg}+{v}", Materialized(store, value_serde=S)
            )
        )

    table1, table2 = table("topic1", "t1"), table("topic2", "t2")
    table2.to_stream().to("out2", value_serde=S)
    table1.join(table2, lambda a, b: f"{a}%{b}").to_stream().to("joined", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        in1 = driver.create_input_topic("topic1", S, S)
        in2 = driver.create_input_topic("topic2", S, S)
        out2 = driver.create_output_topic("out2", serdes.TimeWindowed(S, 10), S)
        joined = driver.create_output_topic("joined", serdes.TimeWindowed(S, 10), S)

        def read(topic: Any) -> list[tuple[Any, Any, int]]:
            return [(r.key, r.value, r.timestamp) for r in topic.read_records_to_list()]

        for key, value, ts in [("A", "1", 0), ("B", "2", 1), ("C", "3", 2), ("D", "4", 3)]:
            in1.pipe_input(key, value, ts)
        for key, value, ts in [("A", "1", 9), ("A", "1", 5), ("B", "2", 6), ("D", "4", 7)]:
            in1.pipe_input(key, value, ts)
        for key, value, ts in [("B", "2", 8), ("C", "3", 9)]:
            in1.pipe_input(key, value, ts)
        assert joined.is_empty()
        for key, value, ts in [("A", "a", 0), ("B", "b", 1), ("C", "c", 2), ("D", "d", 20)]:
            in2.pipe_input(key, value, ts)
        in2.pipe_input("A", "a", 20)
        assert read(out2) == [
            (tw("A", 0, 10), "0+a", 0),
            (tw("B", 0, 10), "0+b", 1),
            (tw("C", 0, 10), "0+c", 2),
            (tw("D", 15, 25), "0+d", 20),
            (tw("D", 20, 30), "0+d", 20),
            (tw("A", 15, 25), "0+a", 20),
            (tw("A", 20, 30), "0+a", 20),
        ]
        assert read(joined) == [
            (tw("A", 0, 10), "0+1+1+1%0+a", 9),
            (tw("B", 0, 10), "0+2+2+2%0+b", 8),
            (tw("C", 0, 10), "0+3+3%0+c", 9),
        ]
        for key, value, ts in [("A", "a", 5), ("B", "b", 6), ("D", "d", 7), ("D", "d", 18)]:
            in2.pipe_input(key, value, ts)
        in2.pipe_input("A", "a", 21)
        assert read(joined) == [
            (tw("A", 0, 10), "0+1+1+1%0+a+a", 9),
            (tw("A", 5, 15), "0+1+1%0+a", 9),
            (tw("B", 0, 10), "0+2+2+2%0+b+b", 8),
            (tw("B", 5, 15), "0+2+2%0+b", 8),
            (tw("D", 0, 10), "0+4+4%0+d", 7),
            (tw("D", 5, 15), "0+4%0+d", 7),
        ]


def test_session_tables_join_session_by_session() -> None:
    """A session-windowed table is read by session (Kafka's
    KTableSessionWindowValueGetter: the aggregate, timed at the session end)."""
    builder = StreamsBuilder()
    windows = SessionWindows.of_inactivity_gap_with_no_grace(100)

    def table(topic: str) -> Any:
        return (
            builder.stream(topic, key_serde=S, value_serde=S)
            .group_by_key()
            .windowed_by(windows)
            .count()
        )

    table("left").join(table("right"), lambda a, b: a * 10 + b).to_stream().to(
        "joined", value_serde=L
    )
    with TopologyTestDriver(builder.build()) as driver:
        left = driver.create_input_topic("left", S, S)
        right = driver.create_input_topic("right", S, S)
        left.pipe_input("k", "x", 10)
        left.pipe_input("k", "x", 20)
        right.pipe_input("k", "y", 10)  # a different session: [10, 10]
        right.pipe_input("k", "y", 20)  # now [10, 20], as on the left
        joined = driver.create_output_topic("joined", serdes.SessionWindowed(S), L)
        records = [(r.key, r.value, r.timestamp) for r in joined.read_records_to_list()]
    session = Windowed("k", Window(10, 20))
    assert records[-1] == (session, 22, 20)
    assert all(key == session or value is None for key, value, _ in records)
