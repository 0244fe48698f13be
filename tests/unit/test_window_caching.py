"""The record cache in front of window and session stores (Kafka's
CachingWindowStore and CachingSessionStore): with caching on (the default)
only the latest update per windowed key is forwarded per commit."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import (
    Materialized,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
    Window,
    Windowed,
)
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def counting(windows: Any, caching: bool) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .count(Materialized("counts", caching=caching))
        .to_stream()
        .to("out", value_serde=L)
    )
    return builder


@pytest.mark.parametrize("caching", [True, False])
def test_a_session_merged_into_itself_is_one_update_behind_the_cache(caching: bool) -> None:
    """A record inside an existing session removes and re-puts that same
    session: uncached, a tombstone and the new value are forwarded; behind
    the cache (Kafka's default) the two writes of one key become one."""
    windows = SessionWindows.of_inactivity_gap_with_no_grace(100)
    with TopologyTestDriver(counting(windows, caching).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for ts in (0, 10, 5):
            src.pipe_input("a", "v", ts)
        out = driver.create_output_topic("out", serdes.SessionWindowed(S), L)
        results = out.read_key_values_to_list()
        assert driver.get_session_store("counts").fetch_session("a", 0, 10) == 3
    first, merged = Windowed("a", Window(0, 0)), Windowed("a", Window(0, 10))
    last = [(merged, 3)] if caching else [(merged, None), (merged, 3)]
    assert [(kv.key, kv.value) for kv in results] == [
        (first, 1),
        (first, None),
        (merged, 2),
        *last,
    ]


@pytest.mark.parametrize(
    ("windows", "key_serde"),
    [
        (TimeWindows.of_size_with_no_grace(10), serdes.TimeWindowed(S, 10)),
        (SlidingWindows.of_time_difference_with_no_grace(10), serdes.TimeWindowed(S, 10)),
        (SessionWindows.of_inactivity_gap_with_no_grace(10), serdes.SessionWindowed(S)),
    ],
)
def test_one_result_per_window_and_commit(
    windows: Any, key_serde: Any, log: EmbeddedLog, log_path: str
) -> None:
    """Between commits the cache keeps the latest update per windowed key;
    without it every update is written."""
    log.create_topic("in")
    stamps = (11, 12, 13, 14, 40)
    with log.producer() as producer:
        for ts in stamps:
            producer.produce("in", b"k", b"v", timestamp=ts)
    outputs = {}
    for caching in (True, False):
        log.create_topic(f"out-{caching}")
        builder = StreamsBuilder()
        (
            builder.stream("in", key_serde=S, value_serde=S)
            .group_by_key()
            .windowed_by(windows)
            .count(Materialized("counts", caching=caching))
            .to_stream()
            .to(f"out-{caching}", value_serde=L)
        )
        config = {
            "application.id": f"cache-{caching}",
            "bootstrap.servers": f"embedded:{log_path}",
            "commit.interval.ms": 3_600_000,
        }
        with KafkaStreams(builder.build(), config) as app:
            app.run_until_end(timeout=30)
        outputs[caching] = [
            (key_serde.deserialize("o", r.key), L.deserialize("o", r.value))
            for r in log.read(f"out-{caching}", 0, 0, 1000)
        ]
    cached, uncached = outputs[True], outputs[False]
    latest = dict(uncached)
    # Cached: each windowed key once, with its latest value; a session created
    # and merged away within the commit never reaches the store, so nothing
    # (not even a tombstone) is forwarded for it, as in Kafka.
    assert len({key for key, _ in cached}) == len(cached)
    assert dict(cached) == {key: value for key, value in latest.items() if value is not None}
    assert len(cached) < len(uncached)


def test_a_terminal_count_writes_out_as_one_with_children(log: EmbeddedLog, log_path: str) -> None:
    """With nothing downstream, the cache writes its evictions and its flush
    into the store natively; the store and its changelog end up as when a
    child takes the updates (the write-out in Python)."""
    log.create_topic("in")
    with log.producer() as producer:
        for i in range(400):
            producer.produce("in", f"k{i * 7 % 10}".encode(), b"v", timestamp=i * 3)
    results = {}
    for terminal in (True, False):
        builder = StreamsBuilder()
        counts = (
            builder.stream("in", key_serde=S, value_serde=S)
            .group_by_key()
            .windowed_by(TimeWindows.of_size_and_grace(100, 50))
            .count(Materialized("counts"))
        )
        if not terminal:
            log.create_topic("out")
            counts.to_stream().to("out", key_serde=serdes.TimeWindowed(S, 100), value_serde=L)
        app_id = f"terminal-{terminal}"
        config = {
            "application.id": app_id,
            "bootstrap.servers": f"embedded:{log_path}",
            "commit.interval.ms": 3_600_000,
            # Room for a few windows: most updates are written out on eviction.
            "statestore.cache.max.bytes": 600,
        }
        with KafkaStreams(builder.build(), config) as app:
            app.run_until_end(timeout=30)
            store = sorted(
                (kv.key.key, kv.key.window.start, kv.value) for kv in app.store("counts").all()
            )
        changelog = [
            (r.key, r.value, r.timestamp)
            for r in log.read(f"{app_id}-counts-changelog", 0, 0, 100_000)
        ]
        results[terminal] = store, changelog
    (store, changelog), (listed_store, listed_changelog) = results[True], results[False]
    assert store == listed_store
    assert changelog == listed_changelog
    # Evicted before their last update, windows were written more than once.
    assert len(store) > 0
    assert len({key for key, _, _ in changelog}) < len(changelog)
