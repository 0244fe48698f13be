"""Time-windowed aggregations, after Kafka's KStreamWindowAggregateTest and
the windowing section of its developer guide."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import (
    Materialized,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
)
from strom.state import Stores
from strom.testing import TopologyTestDriver
from strom.windowed import SessionWindow, TimeWindow

S, L = serdes.String(), serdes.Long()


def counting(windows: TimeWindows) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .count(Materialized("counts"))
        .to_stream()
        .to("out", value_serde=L)
    )
    return builder


def out_topic(driver: TopologyTestDriver, size: int):  # type: ignore[no-untyped-def]
    return driver.create_output_topic("out", serdes.TimeWindowed(S, size), L)


def test_tumbling_count_with_a_late_record_inside_and_outside_grace() -> None:
    """The issue's case: 5 s windows; records at 1 s, 3 s, 4.999 s, 6 s, then 2 s."""
    for grace, expected_last in ((4_000, 4), (0, None)):
        windows = TimeWindows.of_size_and_grace(5_000, grace)
        with TopologyTestDriver(counting(windows).build()) as driver:
            src = driver.create_input_topic("in", S, S)
            for ts in (1_000, 3_000, 4_999, 6_000, 2_000):
                src.pipe_input("k", "v", ts)
            records = out_topic(driver, 5_000).read_records_to_list()
            first = Windowed("k", Window(0, 5_000))
            assert [(r.key, r.value, r.timestamp) for r in records[:4]] == [
                (first, 1, 1_000),
                (first, 2, 3_000),
                (first, 3, 4_999),
                (Windowed("k", Window(5_000, 10_000)), 1, 6_000),
            ]
            if expected_last is None:
                assert len(records) == 4  # the late record was dropped
            else:
                # In grace: the window's result is replaced; its timestamp stays the max.
                assert (records[4].key, records[4].value, records[4].timestamp) == (
                    first,
                    expected_last,
                    4_999,
                )
            # Retention is size + grace: without grace, [0, 5000) has expired
            # in the store, but the record cache still holds it and reads go
            # through the cache, as Kafka's CachingWindowStore's do (C15).
            store = driver.get_timestamped_window_store("counts")
            assert store.fetch("k", 0) == ((3, 4_999) if expected_last is None else (4, 4_999))


def test_an_unlogged_store_gets_the_same_writes() -> None:
    """Without a changelog (and cache) the native kernel writes the store itself
    (``drain_into``); results and store contents equal the logged store's,
    with out-of-order records, a late drop and expired windows."""
    rng = random.Random(7)
    records = [(f"k{rng.randrange(20)}", rng.randrange(0, 60_000)) for _ in range(2_000)]
    windows = TimeWindows.of_size_and_grace(5_000, 1_000).advance_by(2_500)
    runs = []
    for logging in (True, False):
        builder = StreamsBuilder()
        (
            builder.stream("in", key_serde=S, value_serde=S)
            .group_by_key()
            .windowed_by(windows)
            .count(Materialized("counts", logging=logging, caching=False))
            .to_stream()
            .to("out", value_serde=L)
        )
        with TopologyTestDriver(builder.build()) as driver:
            src = driver.create_input_topic("in", S, S)
            for key, ts in records:
                src.pipe_input(key, "v", ts)
            out = [
                (r.key, r.value, r.timestamp)
                for r in out_topic(driver, 5_000).read_records_to_list()
            ]
            store = driver.get_timestamped_window_store("counts")
            runs.append((out, [(kv.key, kv.value) for kv in store.all()], store.logged))
    (logged_out, logged_store, had_changelog), (out, store, has_changelog) = runs
    assert (had_changelog, has_changelog) == (True, False)
    assert logged_store and out == logged_out and store == logged_store


def test_hopping_windows_put_a_record_in_every_window_containing_it() -> None:
    windows = TimeWindows.of_size_with_no_grace(10_000).advance_by(5_000)
    with TopologyTestDriver(counting(windows).build()) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", 7_000)
        keys = [r.key.window for r in out_topic(driver, 10_000).read_records_to_list()]
    assert keys == [Window(0, 10_000), Window(5_000, 15_000)]


def test_windowed_reduce_and_aggregate_keep_separate_windows() -> None:
    builder = StreamsBuilder()
    windowed = (
        builder.stream("in", key_serde=S, value_serde=L)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(100, 50))
    )
    # Null values reach reducers and aggregators, as in Kafka 4.x's
    # KStreamWindowAggregate (only null keys are dropped).
    windowed.reduce(lambda a, b: a + (b or 0), "sums").to_stream().to("sums", value_serde=L)
    windowed.aggregate(
        lambda: "", lambda k, v, agg: agg + str(v), Materialized("joined", value_serde=S)
    ).to_stream().to("joined", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, L)
        for value, ts in ((1, 10), (2, 50), (3, 120), (None, 130), (4, 99)):
            src.pipe_input("k", value, ts)
        sums = driver.create_output_topic("sums", serdes.TimeWindowed(S, 100), L)
        assert [(r.key.window.start, r.value) for r in sums.read_records_to_list()] == [
            (0, 1),
            (0, 3),
            (100, 3),
            (100, 3),
            (0, 7),
        ]
        joined = driver.create_output_topic("joined", serdes.TimeWindowed(S, 100), S)
        assert joined.read_values_to_list() == ["1", "12", "3", "3None", "124"]


def test_time_windowed_serde_matches_kafka_layout() -> None:
    serde = serdes.TimeWindowed(S, 5_000)
    raw = serde.serialize("t", Windowed("ab", Window(5_000, 10_000)))
    assert raw == b"ab" + (5_000).to_bytes(8, "big")
    assert serde.deserialize("t", raw) == Windowed("ab", Window(5_000, 10_000))


def model(
    records: list[tuple[str, int]], size: int, advance: int, grace: int
) -> tuple[dict[tuple[str, int], int], int]:
    """Kafka's semantics by brute force: observed stream time is the max
    timestamp so far; a window accepts a record while end > stream time - grace."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    observed, dropped = -1, 0
    for key, ts in records:
        observed = max(observed, ts)
        for start in range(0, ts + 1, advance):
            if start <= ts < start + size:
                if start + size > observed - grace:
                    counts[(key, start)] += 1
                else:
                    dropped += 1
    return dict(counts), dropped


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(min_value=0, max_value=400)),
        max_size=40,
    ),
    size=st.sampled_from([10, 50, 100]),
    hops=st.sampled_from([1, 2, 5]),
    grace=st.sampled_from([0, 20, 200]),
)
def test_random_out_of_order_counts_equal_the_model(
    records: list[tuple[str, int]], size: int, hops: int, grace: int
) -> None:
    advance = size // hops
    windows = TimeWindows.of_size_and_grace(size, grace).advance_by(advance)
    with TopologyTestDriver(counting(windows).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for key, ts in records:
            src.pipe_input(key, "v", ts)
        latest = out_topic(driver, size).read_key_values_to_map()
    expected, _dropped = model(records, size, advance, grace)
    assert {(w.key, w.window.start): n for w, n in latest.items()} == expected


def test_observed_stream_time_survives_a_restart(log: EmbeddedLog, log_path: str) -> None:
    """After a restart the late record is dropped exactly as in one run."""
    log.create_topic("in")
    log.create_topic("out")
    config = {"application.id": "win", "bootstrap.servers": f"embedded:{log_path}"}
    topology = counting(TimeWindows.of_size_with_no_grace(5_000)).build()

    def produce(ts: int) -> None:
        with log.producer() as producer:
            producer.produce("in", b"k", b"v", timestamp=ts)

    produce(1_000)
    produce(6_000)
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=30)
    produce(2_000)  # late for [0, 5000) given stream time 6000
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=30)
        assert app.metrics()["dropped-records"] == 1
    assert sum(log.end_offsets("out").values()) == 2
    assert (Path(log_path) / ".state" / "win" / "0_0" / "counts").is_dir()


@pytest.mark.parametrize("additional", [None, 3_600_000])
def test_windowed_changelogs_keep_records_the_additional_retention_longer(
    log: EmbeddedLog, log_path: str, additional: int | None
) -> None:
    """``windowstore.changelog.additional.retention.ms`` (a day by default)
    on top of the store's retention, as Kafka configures windowed changelogs."""
    log.create_topic("events")
    log.create_topic("counts")
    builder = StreamsBuilder()
    (
        builder.stream("events", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(60_000, 5_000))
        .count(materialized="per-minute")
        .to_stream()
        .to("counts", value_serde=serdes.Long())
    )
    config = {"application.id": "retention", "bootstrap.servers": f"embedded:{log_path}"}
    if additional is not None:
        config["windowstore.changelog.additional.retention.ms"] = additional
    with log.producer(S, S) as producer:
        producer.produce("events", "k", "v", timestamp=1)
    KafkaStreams(builder.build(), config).run_until_end(timeout=30)
    retention = int(log.topic_config("retention-per-minute-changelog")["retention.ms"])
    # The store keeps a window for its size and grace (Kafka's default).
    assert retention == 65_000 + (additional if additional is not None else 86_400_000)


def test_window_times_as_utc_datetimes() -> None:
    """Kafka's Window.startTime and endTime, to the millisecond."""
    window = Window(1_767_225_600_123, 1_767_225_660_123)
    assert window.start_time() == datetime(2026, 1, 1, 0, 0, 0, 123_000, tzinfo=UTC)
    assert window.end_time() - window.start_time() == timedelta(minutes=1)
    assert Window(0, 0).start_time() == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("a", "b", "time", "session"),
    [
        # (this, other): TimeWindow's [start, end) and SessionWindow's [start, end]
        ((0, 10), (5, 15), True, True),
        ((0, 10), (10, 20), False, True),  # touching: only the inclusive ends meet
        ((0, 10), (11, 20), False, False),
        ((0, 10), (0, 10), True, True),
        ((2, 8), (0, 10), True, True),  # one inside the other
        ((5, 5), (5, 5), False, True),  # empty half-open interval; a one-instant session
        ((5, 5), (0, 10), True, True),
        ((10, 20), (0, 10), False, True),
    ],
)
def test_windows_overlap_as_kafkas_time_and_session_windows(
    a: tuple[int, int], b: tuple[int, int], time: bool, session: bool
) -> None:
    """Kafka's TimeWindow.overlap (start < other.end and other.start < end)
    and SessionWindow.overlap (neither ends before the other starts), both
    symmetric."""
    assert TimeWindow(*a).overlap(TimeWindow(*b)) is time
    assert TimeWindow(*b).overlap(TimeWindow(*a)) is time
    assert SessionWindow(*a).overlap(SessionWindow(*b)) is session
    assert SessionWindow(*b).overlap(SessionWindow(*a)) is session


def test_windows_of_different_types_do_not_overlap_but_compare_equal() -> None:
    """Comparing a TimeWindow with a SessionWindow is an error, as Kafka's
    IllegalArgumentException; a plain Window has no overlap rule. Equality
    and order look only at start and end, so Window(start, end) matches a
    result's window of either type."""
    with pytest.raises(TypeError, match="different types: TimeWindow and SessionWindow"):
        TimeWindow(0, 10).overlap(SessionWindow(0, 10))
    with pytest.raises(TypeError, match="different types: SessionWindow and Window"):
        SessionWindow(0, 10).overlap(Window(0, 10))
    with pytest.raises(TypeError, match="plain Window"):
        Window(0, 10).overlap(TimeWindow(0, 10))
    assert TimeWindow(0, 10) == Window(0, 10) == SessionWindow(0, 10)
    assert hash(TimeWindow(0, 10)) == hash(SessionWindow(0, 10)) == hash(Window(0, 10))
    assert Windowed("k", TimeWindow(0, 10)) == Windowed("k", Window(0, 10))
    assert sorted([SessionWindow(5, 6), Window(0, 20), TimeWindow(0, 10)]) == [
        Window(0, 10),
        Window(0, 20),
        Window(5, 6),
    ]
    assert repr(TimeWindow(0, 10)) == "Window(start=0, end=10)"  # Kafka's toString is shared


def _window_types(windows: Any, native: bool) -> tuple[set[type], set[type]]:
    """The window types of a windowed aggregation's results and of its
    store's scans, on the native kernel (count) or the Python path (reduce)."""
    builder = StreamsBuilder()
    seen: set[type] = set()
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)
    table = (
        grouped.count(Materialized("agg"))
        if native
        else grouped.reduce(lambda a, b: a + b, Materialized("agg", value_serde=S))
    )
    table.to_stream().peek(lambda k, _v: seen.add(type(k.window)))
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for ts in (10, 15, 40):
            src.pipe_input("k", "v", ts)
        if isinstance(windows, SessionWindows):
            scanned = driver.get_session_store("agg").fetch("k")
        else:
            scanned = driver.get_timestamped_window_store("agg").fetch_all(0, 100)
        return seen, {type(kv.key.window) for kv in scanned}


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize(
    ("windows", "expected"),
    [
        (TimeWindows.of_size_with_no_grace(20), TimeWindow),
        (SlidingWindows.of_time_difference_with_no_grace(20), TimeWindow),
        (SessionWindows.of_inactivity_gap_with_no_grace(20), SessionWindow),
    ],
)
def test_results_carry_kafkas_window_types(windows: Any, expected: type, native: bool) -> None:
    """As in Kafka, time and sliding windows' results hold a TimeWindow and
    sessions a SessionWindow, so overlap() applies the right rule."""
    assert _window_types(windows, native) == ({expected}, {expected})


def test_windowed_serdes_read_kafkas_window_types() -> None:
    time_key = serdes.TimeWindowed(S, 10).serialize("t", Windowed("k", Window(0, 10)))
    session_key = serdes.SessionWindowed(S).serialize("t", Windowed("k", Window(0, 10)))
    assert type(serdes.TimeWindowed(S, 10).deserialize("t", time_key).window) is TimeWindow
    assert type(serdes.SessionWindowed(S).deserialize("t", session_key).window) is SessionWindow


def _aggregate_with(windows: Any, materialized: Any) -> StreamsBuilder:
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    grouped.windowed_by(windows).count(materialized).to_stream().to("out", value_serde=L)
    return builder


def test_window_and_session_store_suppliers_materialize_windowed_aggregations() -> None:
    # Kafka's Materialized.as(WindowBytesStoreSupplier / SessionBytesStoreSupplier):
    # the supplier names the store, says where it lives and how long it keeps.
    windows = TimeWindows.of_size_and_grace(10, 5)
    supplier = Stores.in_memory_window_store("mem-counts", 60, 10)
    topology = _aggregate_with(windows, Materialized(supplier)).build()
    store = topology._internal.stores["mem-counts"]
    assert (store.persistent, store.retention_ms, store.window_size_ms) == (False, 60, 10)
    with TopologyTestDriver(topology) as driver:
        src = driver.create_input_topic("in", S, S)
        for ts in (1, 3, 12):
            src.pipe_input("k", "v", ts)
        assert [
            (w.window.start, w.window.end) for w, _ in driver.get_window_store("mem-counts").all()
        ] == [
            (0, 10),
            (10, 20),
        ]
        assert [c for _, c in out_topic(driver, 10).read_key_values_to_list()] == [1, 2, 1]

    sessions = Stores.persistent_session_store("sessions", 100)
    topology = _aggregate_with(SessionWindows.of_inactivity_gap_and_grace(5, 0), sessions).build()
    assert topology._internal.stores["sessions"].retention_ms is not None
    sliding = Stores.in_memory_window_store("sliding", 50, 10)
    topology = _aggregate_with(SlidingWindows.of_time_difference_and_grace(10, 0), sliding).build()
    assert topology._internal.stores["sliding"].window_size_ms == 10


@pytest.mark.parametrize(
    ("windows", "supplier", "error"),
    [
        (TimeWindows.of_size_and_grace(10, 5), ("w", 60, 20, False), "window size \\(20 ms\\)"),
        (TimeWindows.of_size_and_grace(10, 5), ("w", 60, 10, True), "retain duplicates"),
        (TimeWindows.of_size_and_grace(10, 5), ("w", 14, 10, False), "must be at least"),
        (SessionWindows.of_inactivity_gap_and_grace(5, 0), ("w", 60, 10, False), "session"),
        (TimeWindows.of_size_and_grace(10, 5), ("s", 60), "window store supplier"),
    ],
)
def test_store_suppliers_that_do_not_fit_the_windows_are_refused(
    windows: Any, supplier: tuple[Any, ...], error: str
) -> None:
    made = (
        Stores.in_memory_window_store(*supplier)
        if len(supplier) == 4
        else Stores.in_memory_session_store(*supplier)
    )
    with pytest.raises(TopologyError, match=error):
        _aggregate_with(windows, Materialized(made))


def test_a_window_store_supplier_does_not_materialize_a_table() -> None:
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="not a table"):
        builder.table("in", materialized=Materialized(Stores.in_memory_window_store("w", 60, 10)))
