"""Session-windowed aggregations, after Kafka's SessionWindowedKStreamImplTest,
KStreamSessionWindowAggregateProcessorTest and the session-window section of
its developer guide."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import (
    BufferConfig,
    EmitStrategy,
    Materialized,
    SessionWindowedKStream,
    SessionWindows,
    Suppressed,
    Window,
    Windowed,
)
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
UPDATE, CLOSE = EmitStrategy.on_window_update(), EmitStrategy.on_window_close()


def sessions(builder: StreamsBuilder, windows: SessionWindows) -> SessionWindowedKStream:
    return builder.stream("in", key_serde=S, value_serde=S).group_by_key().windowed_by(windows)


def results(driver: TopologyTestDriver, value_serde: Any = L) -> list[tuple[Any, Any, int]]:
    out = driver.create_output_topic("out", serdes.SessionWindowed(S), value_serde)
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def w(key: str, start: int, end: int) -> Windowed[str]:
    return Windowed(key, Window(start, end))


def pipe(driver: TopologyTestDriver, records: list[tuple[str, str | None, int]]) -> None:
    src = driver.create_input_topic("in", S, S)
    for key, value, ts in records:
        src.pipe_input(key, value, ts)


# SessionWindowedKStreamImplTest.processData: gap 500 ms, no grace.
PROCESS_DATA = [("1", "1", 10), ("1", "2", 15), ("1", "3", 600), ("2", "1", 600), ("2", "2", 599)]


@pytest.mark.parametrize("emit", [UPDATE, CLOSE])
def test_count_reduce_and_aggregate_as_kafkas_session_windowed_stream_tests(
    emit: EmitStrategy,
) -> None:
    """SessionWindowedKStreamImplTest: shouldCountSessionWindowed,
    shouldReduceWindowed, shouldAggregateSessionWindowed (both strategies)."""
    builder = StreamsBuilder()
    windows = SessionWindows.of_inactivity_gap_with_no_grace(500)
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    grouped.windowed_by(windows).emit_strategy(emit).count(Materialized("counts")).to_stream().to(
        "out", value_serde=L
    )
    grouped.windowed_by(windows).emit_strategy(emit).reduce(
        lambda a, b: a + "+" + b, Materialized("reduced", value_serde=S)
    ).to_stream().to("reduced", value_serde=S)
    grouped.windowed_by(windows).emit_strategy(emit).aggregate(
        lambda: "0",
        lambda _k, v, agg: agg + "+" + v,
        lambda _k, a, b: a + "+" + b,
        Materialized("aggregated", value_serde=S),
    ).to_stream().to("aggregated", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        pipe(driver, PROCESS_DATA)
        counts = results(driver)
        reduced = driver.create_output_topic("reduced", serdes.SessionWindowed(S), S)
        aggregated = driver.create_output_topic("aggregated", serdes.SessionWindowed(S), S)
        reduced_out = [(r.key, r.value, r.timestamp) for r in reduced.read_records_to_list()]
        aggregated_out = [(r.key, r.value, r.timestamp) for r in aggregated.read_records_to_list()]
        store = driver.get_session_store("counts")
        stored = {kv.key: kv.value for kv in store.fetch_range("1", "2")}
    if emit == CLOSE:
        # Only [10, 15] of key 1 closes (stream time 600 - gap 500 > 15).
        assert counts == [(w("1", 10, 15), 2, 15)]
        assert reduced_out == [(w("1", 10, 15), "1+2", 15)]
        assert aggregated_out == [(w("1", 10, 15), "0+0+1+2", 15)]
        return
    assert counts == [
        (w("1", 10, 10), 1, 10),
        (w("1", 10, 10), None, 10),
        (w("1", 10, 15), 2, 15),
        (w("1", 600, 600), 1, 600),
        (w("2", 600, 600), 1, 600),
        (w("2", 600, 600), None, 600),
        (w("2", 599, 600), 2, 600),
    ]
    assert [v for _, v, _ in reduced_out] == ["1", None, "1+2", "3", "1", None, "1+2"]
    assert [v for _, v, _ in aggregated_out] == [
        "0+1",
        None,
        "0+0+1+2",
        "0+3",
        "0+1",
        None,
        "0+0+1+2",
    ]
    # shouldMaterializeCount: sessions stay queryable in the store.
    assert stored[w("1", 600, 600)] == 1
    assert stored[w("2", 599, 600)] == 2
    assert w("2", 600, 600) not in stored


GAP = 5 * 60 * 1000  # KStreamSessionWindowAggregateProcessorTest.GAP_MS


def counting(
    emit: EmitStrategy, windows: SessionWindows | None = None, retention: int | None = None
) -> StreamsBuilder:
    builder = StreamsBuilder()
    windows = windows or SessionWindows.of_inactivity_gap_with_no_grace(GAP)
    counts = Materialized("counts", retention=retention)
    sessions(builder, windows).emit_strategy(emit).count(counts).to_stream().to(
        "out", value_serde=L
    )
    return builder


@pytest.mark.parametrize("emit", [UPDATE, CLOSE])
def test_multiple_sessions_and_merging(emit: EmitStrategy) -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging
    (without its record cache, so every update is forwarded)."""
    half = GAP // 2
    records = [
        ("a", "1", 0),
        ("b", "1", 0),
        ("c", "1", 0),
        ("d", "1", 0),
        ("d", "2", half),
        ("a", "2", GAP + 1),
        ("b", "2", GAP + 1),
        ("a", "3", GAP + 1 + half),
        ("c", "3", GAP + 1 + half),
    ]
    with TopologyTestDriver(counting(emit).build()) as driver:
        pipe(driver, records)
        out = results(driver)
    if emit == CLOSE:
        assert out == [
            (w("a", 0, 0), 1, 0),
            (w("b", 0, 0), 1, 0),
            (w("c", 0, 0), 1, 0),
            (w("d", 0, half), 2, half),
        ]
        return
    assert out == [
        (w("a", 0, 0), 1, 0),
        (w("b", 0, 0), 1, 0),
        (w("c", 0, 0), 1, 0),
        (w("d", 0, 0), 1, 0),
        (w("d", 0, 0), None, 0),
        (w("d", 0, half), 2, half),
        (w("a", GAP + 1, GAP + 1), 1, GAP + 1),
        (w("b", GAP + 1, GAP + 1), 1, GAP + 1),
        (w("a", GAP + 1, GAP + 1), None, GAP + 1),
        (w("a", GAP + 1, GAP + 1 + half), 2, GAP + 1 + half),
        (w("c", GAP + 1 + half, GAP + 1 + half), 1, GAP + 1 + half),
    ]


def test_a_record_between_two_sessions_merges_them() -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions: a late
    record within the gap of both sessions merges them into one. As there,
    the store keeps three gaps: with the default (one gap) the store would
    no longer show [0, 0] once it holds a session ending at gap + 1."""
    with TopologyTestDriver(counting(UPDATE, retention=3 * GAP).build()) as driver:
        pipe(driver, [("mel", "first", 0), ("mel", "second", GAP + 1), ("mel", "third", GAP // 2)])
        out = results(driver)
        store = driver.get_session_store("counts")
        assert [(kv.key, kv.value) for kv in store.fetch("mel")] == [(w("mel", 0, GAP + 1), 3)]
    # Both absorbed sessions become tombstones (in the store's (end, start)
    # order), then the merged session.
    assert out[-3:] == [
        (w("mel", 0, 0), None, 0),
        (w("mel", GAP + 1, GAP + 1), None, GAP + 1),
        (w("mel", 0, GAP + 1), 3, GAP + 1),
    ]


def test_same_timestamp_updates_the_session_without_a_tombstone() -> None:
    """KStreamSessionWindowAggregateProcessorTest.shouldUpdateSessionIfTheSameTime."""
    with TopologyTestDriver(counting(UPDATE).build()) as driver:
        pipe(driver, [("mel", "first", 0), ("mel", "second", 0)])
        assert results(driver) == [(w("mel", 0, 0), 1, 0), (w("mel", 0, 0), 2, 0)]


@pytest.mark.parametrize(
    ("grace", "records", "dropped"),
    [
        # shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace
        (0, [("dummy", 0), ("OnTime1", 0), ("dummy", 11), ("Late1", 0)], ["Late1"]),
        # shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace
        (
            1,
            [
                ("dummy", 0),
                ("OnTime1", 0),
                ("dummy", 11),
                ("OnTime2", 0),
                ("dummy", 12),
                ("Late1", 0),
            ],
            ["Late1"],
        ),
    ],
)
def test_late_records_are_dropped_counted_and_logged(
    grace: int,
    records: list[tuple[str, int]],
    dropped: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Late by session end + gap + grace: dropped, counted, logged at debug."""
    windows = SessionWindows.of_inactivity_gap_and_grace(10, grace)
    with TopologyTestDriver(counting(UPDATE, windows).build()) as driver:
        with caplog.at_level(logging.DEBUG, logger="strom"):
            pipe(driver, [(k, "1", ts) for k, ts in records])
        keys = {key.key for key, _, _ in results(driver)}
        assert driver.metrics()["dropped-records"] == len(dropped)
    assert keys == {k for k, _ in records} - set(dropped)
    # count() runs on the native kernel, which logs its drops per batch.
    logged = [re.search(r"\((\d+) for closed windows\)", m) for m in caplog.messages]
    assert sum(int(m.group(1)) for m in logged if m) == len(dropped)


def test_null_keys_are_dropped_and_null_values_reach_the_aggregator() -> None:
    """Kafka's session aggregation skips null keys only (count counts a null value)."""
    with TopologyTestDriver(counting(UPDATE).build()) as driver:
        pipe(driver, [("a", "x", 0)])
        driver.create_input_topic("in", S, S).pipe_input(None, "x", 1)
        pipe(driver, [("a", None, 2)])
        assert [v for _, v, _ in results(driver)] == [1, None, 2]
        assert driver.metrics()["dropped-records"] == 1


def test_session_windowed_serde_matches_kafka_layout() -> None:
    """Kafka's SessionKeySchema / SessionWindowedSerde: key ‖ end ‖ start."""
    serde = serdes.SessionWindowed(S)
    raw = serde.serialize("t", w("ab", 5, 10))
    assert raw == b"ab" + (10).to_bytes(8, "big") + (5).to_bytes(8, "big")
    assert serde.deserialize("t", raw) == w("ab", 5, 10)


def test_retention_defaults_to_gap_plus_grace_and_can_only_grow() -> None:
    windows = SessionWindows.of_inactivity_gap_and_grace(100, 50)
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="inactivity gap plus the grace period"):
        sessions(builder, windows).count(Materialized("short", retention=149))
    builder = StreamsBuilder()
    sessions(builder, windows).count(Materialized("long", retention=10_000)).to_stream().to(
        "out", value_serde=L
    )
    with TopologyTestDriver(builder.build()) as driver:
        assert driver.get_session_store("long").retention_ms == 10_000
        pipe(driver, [("k", "v", 0), ("k", "v", 5_000)])
        # Still queryable although far past gap + grace.
        store = driver.get_session_store("long")
        assert store.fetch_session("k", 0, 0) == 1
    with pytest.raises(TopologyError):
        SessionWindows.of_inactivity_gap_with_no_grace(0)


def test_suppress_until_window_closes_waits_for_gap_and_grace() -> None:
    """Kafka's suppression of a session-windowed table waits for the session
    end plus gap plus grace (GraphGraceSearchUtil)."""
    builder = StreamsBuilder()
    (
        sessions(builder, SessionWindows.of_inactivity_gap_and_grace(10, 5))
        .count()
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .to("out", value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        pipe(driver, [("k", "v", 0), ("k", "v", 4), ("o", "v", 18)])
        assert results(driver) == []
        pipe(driver, [("o", "v", 19)])
        assert results(driver) == [(w("k", 0, 4), 2, 4)]


def model(
    records: list[tuple[str, int]], gap: int, grace: int
) -> tuple[dict[tuple[str, int, int], tuple[int, int]], int]:
    """Kafka's session semantics by brute force: sessions per key as [start,
    end, count, sum of timestamps]; a record merges every session within the
    gap, or is dropped when the merged session ends before stream time -
    grace - gap."""
    by_key: dict[str, list[list[int]]] = {}
    observed, dropped = -1, 0
    for key, ts in records:
        observed = max(observed, ts)
        close = observed - grace - gap
        mine = by_key.setdefault(key, [])
        near = [s for s in mine if s[1] >= ts - gap and s[0] <= ts + gap]
        start = min([ts] + [s[0] for s in near])
        end = max([ts] + [s[1] for s in near])
        if end < close:
            dropped += 1
            continue
        for s in near:
            mine.remove(s)
        mine.append([start, end, 1 + sum(s[2] for s in near), ts + sum(s[3] for s in near)])
    sessions_ = {(k, s[0], s[1]): (s[2], s[3]) for k, ss in by_key.items() for s in ss}
    return sessions_, dropped


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(min_value=0, max_value=300)),
        max_size=40,
    ),
    gap=st.sampled_from([1, 10, 30]),
    grace=st.sampled_from([0, 15, 100]),
)
def test_random_out_of_order_counts_and_sums_equal_the_model(
    records: list[tuple[str, int]], gap: int, grace: int
) -> None:
    builder = StreamsBuilder()
    windowed = (
        builder.stream("in", key_serde=S, value_serde=L)
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap, grace))
    )
    # Retention large enough that expiry never hides a session from the model.
    windowed.count(Materialized("c", retention=10_000)).to_stream().to("out", value_serde=L)
    windowed.reduce(lambda a, b: a + b, Materialized("s", retention=10_000)).to_stream().to(
        "sums", value_serde=L
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, L)
        for key, ts in records:
            src.pipe_input(key, ts, ts)
        latest = driver.create_output_topic("out", serdes.SessionWindowed(S), L)
        counts = {k: v for k, v in latest.read_key_values_to_map().items() if v is not None}
        sums_topic = driver.create_output_topic("sums", serdes.SessionWindowed(S), L)
        sums = {k: v for k, v in sums_topic.read_key_values_to_map().items() if v is not None}
        dropped = driver.metrics()["dropped-records"]
    expected, expected_dropped = model(records, gap, grace)
    found = {(k.key, k.window.start, k.window.end): n for k, n in counts.items()}
    assert found == {k: n for k, (n, _) in expected.items()}
    # Each record's value is its timestamp.
    found = {(k.key, k.window.start, k.window.end): n for k, n in sums.items()}
    assert found == {k: total for k, (_, total) in expected.items()}
    assert dropped == 2 * expected_dropped


def test_observed_stream_time_survives_a_restart(log: EmbeddedLog, log_path: str) -> None:
    """Stopping and restarting mid-stream gives the results of one run: the
    late record after the restart is dropped exactly as without it."""
    log.create_topic("in")
    log.create_topic("out")
    config = {
        "application.id": "sessions",
        "bootstrap.servers": f"embedded:{log_path}",
        # Look for closed sessions on every record, as the test driver does.
        "__emit.interval.ms.kstreams.windowed.aggregation__": 0,
    }
    topology = counting(CLOSE, SessionWindows.of_inactivity_gap_with_no_grace(100)).build()

    def produce(*stamps: int) -> None:
        with log.producer() as producer:
            for ts in stamps:
                producer.produce("in", b"k", b"v", timestamp=ts)

    produce(0, 50, 500)  # [0, 50] closes at stream time 500 and is emitted
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=30)
    produce(40, 800)  # 40 is late; 800 closes nothing new ([500, 500] ends too late)
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=30)
        assert app.metrics()["dropped-records"] == 1
    out = [
        (serdes.SessionWindowed(S).deserialize("out", r.key), L.deserialize("out", r.value))
        for r in log.read("out", 0, 0, 100)
    ]
    # [0, 50] once (the restart does not emit it again), then [500, 500].
    assert out == [(w("k", 0, 50), 2), (w("k", 500, 500), 1)]
