"""Spark replays give what the streaming app gives: the same topology run by
the TopologyTestDriver (one per partition: one per streaming task), by
KafkaStreams on the embedded log and by ``strom.spark.replay`` (local[2],
three source partitions) produces identical output streams and tables."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark.support import (
    Scenario,
    run_driver_per_partition,
    run_replay,
    run_streaming,
    source_frame,
    write_log,
)

from strom import StreamsBuilder, Topology, serdes
from strom.kstream import Materialized, TimeWindows

S, L = serdes.String(), serdes.Long()
CONFIG = {"application.id": "replay-test", "statestore.cache.max.bytes": 0}


def views() -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream("views", key_serde=S, value_serde=S)
        .filter(lambda _user, page: page != "bot")
        .map_values(str.upper)
        .group_by_key()
        .count(materialized="counts")
        .to_stream()
        .to("view-counts", key_serde=S, value_serde=L)
    )
    return builder.build()


def page_views(n: int, seed: int) -> list[tuple[Any, Any, int]]:
    rnd = random.Random(seed)
    return [
        (f"user-{rnd.randrange(12)}", rnd.choice(["home", "cart", "bot"]), 1_000 + i * 10)
        for i in range(n)
    ]


def check_all_ways(spark: SparkSession, scenario: Scenario, tmp_path: Path) -> None:
    driver = run_driver_per_partition(scenario, CONFIG)
    servers = write_log(scenario, tmp_path / "log")
    streaming = run_streaming(scenario, servers, CONFIG)
    from_frame = run_replay(spark, scenario, source_frame(spark, scenario), CONFIG)
    from_log = run_replay(spark, scenario, servers, CONFIG)
    for topic in scenario.outputs:
        assert streaming.streams[topic], f"the scenario wrote nothing to {topic}"
        assert streaming.streams[topic] == driver[topic]
        assert from_frame.streams[topic] == streaming.streams[topic]
        assert from_log.streams[topic] == streaming.streams[topic]
    for store in scenario.stores:
        assert streaming.tables[store]
        assert from_frame.tables[store] == streaming.tables[store]
        assert from_log.tables[store] == streaming.tables[store]


def test_count_by_key(spark: SparkSession, tmp_path: Path) -> None:
    scenario = Scenario(
        views,
        {"views": page_views(300, seed=1)},
        {"views": (S, S), "view-counts": (S, L)},
        ["view-counts"],
        stores=["counts"],
    )
    check_all_ways(spark, scenario, tmp_path)


def windowed(windows: TimeWindows) -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream("events", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(windows)
        .count(Materialized("window-counts"))
        .to_stream()
        .to("windowed-counts", key_serde=serdes.TimeWindowed(S, 10_000), value_serde=L)
    )
    return builder.build()


def out_of_order_events(n: int, seed: int) -> list[tuple[Any, Any, int]]:
    """Mostly ascending timestamps, some up to 15 s late: beyond a 10 s
    window's 2 s grace, so some are dropped and which depends on each
    partition's stream time."""
    rnd = random.Random(seed)
    events = []
    for i in range(n):
        lateness = rnd.choice([0, 0, 0, 500, 1_500, 4_000, 15_000])
        events.append((f"sensor-{rnd.randrange(8)}", "x", 100_000 + i * 300 - lateness))
    return events


@pytest.mark.parametrize("advance", [10_000, 5_000], ids=["tumbling", "hopping"])
def test_windowed_count_with_late_records(
    spark: SparkSession, tmp_path: Path, advance: int
) -> None:
    windows = TimeWindows.of_size_and_grace(10_000, 2_000).advance_by(advance)
    scenario = Scenario(
        lambda: windowed(windows),
        {"events": out_of_order_events(400, seed=2)},
        {"events": (S, S), "windowed-counts": (serdes.TimeWindowed(S, 10_000), L)},
        ["windowed-counts"],
    )
    check_all_ways(spark, scenario, tmp_path)
    # The data does exercise drops: fewer counted than sent.
    driver = run_driver_per_partition(scenario, CONFIG)
    counted = sum(values[-1][0] for values in driver["windowed-counts"].values())
    assert counted < len(scenario.inputs["events"]) * (10_000 // advance)
