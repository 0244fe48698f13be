"""Spark replays give what the streaming app gives: the same topology run by
the TopologyTestDriver (one per partition: one per streaming task), by
KafkaStreams on the embedded log and by ``strom.spark.replay`` (local[2],
three source partitions) produces identical output streams and tables."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark.support import (
    Scenario,
    partitioned_frame,
    run_driver,
    run_driver_per_partition,
    run_replay,
    run_streaming,
    source_frame,
    values_by_key,
    write_log,
)

from strom import StreamsBuilder, Topology, col, serdes, struct
from strom.cli.demo import generate_lines, word_count_topology
from strom.kstream import JoinWindows, Materialized, SessionWindows, TimeWindows
from strom.state import Stores

S, L = serdes.String(), serdes.Long()
CONFIG = {"application.id": "replay-test", "statestore.cache.max.bytes": 0}


def views(topic: str = "views") -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream(topic, key_serde=S, value_serde=S)
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
    in_place = run_replay(
        spark, scenario, partitioned_frame(spark, scenario), CONFIG, source_partitioned=True
    )
    for topic in scenario.outputs:
        assert streaming.streams[topic], f"the scenario wrote nothing to {topic}"
        assert streaming.streams[topic] == driver[topic]
        assert from_frame.streams[topic] == streaming.streams[topic]
        assert from_log.streams[topic] == streaming.streams[topic]
        assert in_place.streams[topic] == streaming.streams[topic]
    for store in scenario.stores:
        assert streaming.tables[store]
        assert from_frame.tables[store] == streaming.tables[store]
        assert from_log.tables[store] == streaming.tables[store]
        assert in_place.tables[store] == streaming.tables[store]


def test_count_by_key(spark: SparkSession, tmp_path: Path) -> None:
    scenario = Scenario(
        views,
        {"views": page_views(300, seed=1)},
        {"views": (S, S), "view-counts": (S, L)},
        ["view-counts"],
        stores=["counts"],
    )
    check_all_ways(spark, scenario, tmp_path)


def test_output_partitions_follow_the_output_topic(spark: SparkSession, tmp_path: Path) -> None:
    """An output topic with fewer partitions than the input: the replay puts
    each record where the streaming app's producer does (murmur2 of the key
    over the topic's own partition count, read from the embedded log)."""
    scenario = Scenario(
        views,
        {"views": page_views(200, seed=11)},
        {"views": (S, S), "view-counts": (S, L)},
        ["view-counts"],
        output_partitions=2,
    )
    servers = write_log(scenario, tmp_path / "log")
    streaming = run_streaming(scenario, servers, CONFIG)
    replayed = run_replay(spark, scenario, servers, CONFIG)
    assert {p for p, _key in streaming.streams["view-counts"]} == {0, 1}
    assert replayed.streams == streaming.streams


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


def test_record_cache_default_and_final_tables(spark: SparkSession, tmp_path: Path) -> None:
    """The replay runs without a record cache unless the config sets one
    (every update emitted, as by the TopologyTestDriver, which commits after
    each record); a cache changes which updates reach the output, never the
    final table or each window's last result."""
    scenario = Scenario(
        lambda: windowed(TimeWindows.of_size_and_grace(10_000, 2_000)),
        {"events": out_of_order_events(300, seed=5)},
        {"events": (S, S), "windowed-counts": (serdes.TimeWindowed(S, 10_000), L)},
        ["windowed-counts"],
        stores=["window-counts"],
    )
    driver = run_driver_per_partition(scenario, CONFIG)
    frame = source_frame(spark, scenario)
    by_default = run_replay(spark, scenario, frame, {"application.id": "replay-test"})
    cached = run_replay(spark, scenario, frame, {**CONFIG, "statestore.cache.max.bytes": 10 << 20})
    uncached = run_replay(spark, scenario, frame, CONFIG)
    assert by_default.streams["windowed-counts"] == driver["windowed-counts"]
    assert by_default.tables == uncached.tables
    assert uncached.tables["window-counts"]
    assert cached.tables == uncached.tables
    stream, cached_stream = driver["windowed-counts"], cached.streams["windowed-counts"]
    assert {k: v[-1][0] for k, v in cached_stream.items()} == {
        k: v[-1][0] for k, v in stream.items()
    }
    # The cache did hold updates back: fewer records than without it.
    assert sum(map(len, cached_stream.values())) < sum(map(len, stream.values()))


def check_across_repartition(
    spark: SparkSession, scenario: Scenario, tmp_path: Path, *, sequences: bool = True
) -> None:
    """Across a repartition the streaming app's interleaving of the upstream
    tasks' records depends on timing, so what must agree exactly is the final
    tables, each key's last result and (when the interleaving cannot change
    it, ``sequences``) each key's sequence of results."""
    driver = run_driver(scenario, CONFIG)
    servers = write_log(scenario, tmp_path / "log")
    streaming = run_streaming(scenario, servers, CONFIG)
    from_frame = run_replay(spark, scenario, source_frame(spark, scenario), CONFIG)
    from_log = run_replay(spark, scenario, servers, CONFIG)
    for store in scenario.stores:
        assert streaming.tables[store]
        assert driver.tables[store] == streaming.tables[store]
        assert from_frame.tables[store] == streaming.tables[store]
        assert from_log.tables[store] == streaming.tables[store]
    for topic in scenario.outputs:
        expected = values_by_key(streaming.streams[topic])
        assert expected
        assert {k: v[-1] for k, v in values_by_key(driver.streams[topic]).items()} == {
            k: v[-1] for k, v in expected.items()
        }
        for replayed in (from_frame, from_log):
            got = values_by_key(replayed.streams[topic])
            if sequences:
                assert got == expected
            else:
                assert {k: v[-1] for k, v in got.items()} == {k: v[-1] for k, v in expected.items()}


def test_word_count(spark: SparkSession, tmp_path: Path) -> None:
    """Two sub-topologies: the group_by's repartition topic becomes a Spark
    shuffle by murmur2 of the word."""
    lines = generate_lines(200, seed=3)
    scenario = Scenario(
        word_count_topology,
        {"text-input": [(None, line, 1_000 + i) for i, line in enumerate(lines)]},
        {"text-input": (S, S), "word-counts": (S, L)},
        ["word-counts"],
        stores=["counts"],
    )
    check_across_repartition(spark, scenario, tmp_path)


def prices_by_category() -> Topology:
    builder = StreamsBuilder()
    (
        builder.table("prices", key_serde=S, value_serde=L)
        .group_by(lambda item, price: (item.split("/")[0], price), key_serde=S, value_serde=L)
        .reduce(
            lambda total, price: total + price,
            lambda total, price: total - price,
            materialized="totals",
        )
        .to_stream()
        .to("category-totals", key_serde=S, value_serde=L)
    )
    return builder.build()


def test_table_group_by_aggregation(spark: SparkSession, tmp_path: Path) -> None:
    """A KTable re-keyed by category: each item update subtracts its old
    price from the category and adds the new one; deletes subtract."""
    rnd = random.Random(4)
    updates = []
    for i in range(300):
        item = f"{rnd.choice(['fruit', 'veg', 'bread'])}/{rnd.randrange(15)}"
        price = None if rnd.random() < 0.1 else rnd.randrange(1, 100)
        updates.append((item, price, 1_000 + i))
    scenario = Scenario(
        prices_by_category,
        {"prices": updates},
        {"prices": (S, L), "category-totals": (S, L)},
        ["category-totals"],
        stores=["totals"],
    )
    # The intermediate totals depend on how the items' updates interleave.
    check_across_repartition(spark, scenario, tmp_path, sequences=False)


def enriched_orders() -> Topology:
    builder = StreamsBuilder()
    users = builder.table("users", key_serde=S, value_serde=S, materialized="users")
    (
        builder.stream("orders", key_serde=S, value_serde=L)
        .left_join(users, lambda amount, city: f"{amount}@{city}")
        .to("enriched", key_serde=S, value_serde=S)
    )
    return builder.build()


def test_stream_table_join(spark: SparkSession, tmp_path: Path) -> None:
    """Each order sees the user's city as of its timestamp: the task merges
    the two co-partitioned topics in timestamp order."""
    rnd = random.Random(5)
    users = [
        (f"user-{rnd.randrange(10)}", rnd.choice(["oslo", "rome", None]), t)
        for t in range(0, 3_000, 20)
    ]
    orders = [
        (f"user-{rnd.randrange(10)}", rnd.randrange(1, 500), 5 + t) for t in range(0, 3_000, 10)
    ]
    scenario = Scenario(
        enriched_orders,
        {"users": users, "orders": orders},
        {"users": (S, S), "orders": (S, L), "enriched": (S, S)},
        ["enriched"],
        stores=["users"],
    )
    check_all_ways(spark, scenario, tmp_path)


def enriched_orders_as_of() -> Topology:
    # A versioned users table, read as of each order's time; orders wait a
    # grace period in the join's buffer for late user updates.
    builder = StreamsBuilder()
    users = builder.table(
        "users",
        key_serde=S,
        value_serde=S,
        materialized=Materialized(Stores.persistent_versioned_key_value_store("users", 60_000)),
    )
    (
        builder.stream("orders", key_serde=S, value_serde=L)
        .left_join(users, lambda amount, city: f"{amount}@{city}", grace=300)
        .to("enriched", key_serde=S, value_serde=S)
    )
    return builder.build()


def test_stream_table_join_as_of_a_versioned_table(spark: SparkSession, tmp_path: Path) -> None:
    """User updates and orders come out of order: each order sees the
    user's city as of its own timestamp, after the grace period."""
    rnd = random.Random(11)
    users = [
        (f"user-{rnd.randrange(10)}", rnd.choice(["oslo", "rome", None]), t - rnd.randrange(400))
        for t in range(400, 3_400, 20)
    ]
    orders = [
        (f"user-{rnd.randrange(10)}", rnd.randrange(1, 500), 400 + t - rnd.randrange(500))
        for t in range(0, 3_000, 10)
    ]
    scenario = Scenario(
        enriched_orders_as_of,
        {"users": users, "orders": orders},
        {"users": (S, S), "orders": (S, L), "enriched": (S, S)},
        ["enriched"],
    )
    check_all_ways(spark, scenario, tmp_path)
    # The input makes the versions matter: joined with the latest values at
    # once, as an unversioned table is, orders see other cities.
    latest = run_driver_per_partition(replace(scenario, build=enriched_orders), CONFIG)
    assert latest["enriched"] != run_driver_per_partition(scenario, CONFIG)["enriched"]


def sessions() -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream("clicks", key_serde=S, value_serde=L)
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(2_000, 1_000))
        .aggregate(
            lambda: 0,
            lambda _user, amount, total: total + amount,
            lambda _user, a, b: a + b,
            Materialized("sessions", value_serde=L),
        )
        .to_stream()
        .to("session-totals", key_serde=serdes.SessionWindowed(S), value_serde=L)
    )
    return builder.build()


def test_session_windowed_aggregate(spark: SparkSession, tmp_path: Path) -> None:
    """Sessions merge when a record bridges them (a tombstone per absorbed
    session, then the merged total); late records past gap + grace drop."""
    rnd = random.Random(7)
    clicks = []
    for i in range(300):
        lateness = rnd.choice([0, 0, 0, 1_500, 6_000])
        clicks.append(
            (f"user-{rnd.randrange(6)}", rnd.randrange(1, 10), 10_000 + i * 400 - lateness)
        )
    scenario = Scenario(
        sessions,
        {"clicks": clicks},
        {"clicks": (S, L), "session-totals": (serdes.SessionWindowed(S), L)},
        ["session-totals"],
    )
    check_all_ways(spark, scenario, tmp_path)


def joined_streams() -> Topology:
    builder = StreamsBuilder()
    views = builder.stream("ad-views", key_serde=S, value_serde=S)
    clicks = builder.stream("ad-clicks", key_serde=S, value_serde=S)
    views.outer_join(
        clicks,
        lambda view, click: f"{view}/{click}",
        JoinWindows.of_time_difference_and_grace(1_000, 500),
    ).to("attributed", key_serde=S, value_serde=S)
    return builder.build()


def test_windowed_stream_stream_join(spark: SparkSession, tmp_path: Path) -> None:
    """An outer join: matches within 1 s, unmatched records emitted once the
    window and grace have passed in stream time, late records dropped."""
    rnd = random.Random(8)

    def events(kind: str, step: int) -> list[tuple[Any, Any, int]]:
        return [
            (
                f"ad-{rnd.randrange(8)}",
                f"{kind}{i}",
                5_000 + i * step - rnd.choice([0, 0, 300, 3_000]),
            )
            for i in range(150)
        ]

    scenario = Scenario(
        joined_streams,
        {"ad-views": events("v", 100), "ad-clicks": events("c", 100)},
        {"ad-views": (S, S), "ad-clicks": (S, S), "attributed": (S, S)},
        ["attributed"],
    )
    check_all_ways(spark, scenario, tmp_path)


def native_bids() -> Topology:
    """Expression steps (strom.col): the same native plans run in the replay."""
    J = serdes.Json()
    builder = StreamsBuilder()
    bids = builder.stream("bids", key_serde=S, value_serde=J)
    (
        bids.filter(col("price") % 3 == 0)
        .map_values(struct(p=col("price") * 89 // 100, a=col("auction"), euros=col("price") / 4))
        .to("cheap", key_serde=S, value_serde=J)
    )
    (
        bids.group_by(col("auction").cast(str), key_serde=S)
        .count(materialized="by-auction")
        .to_stream()
        .to("auction-counts", key_serde=S, value_serde=L)
    )
    return builder.build()


def test_expressions(spark: SparkSession, tmp_path: Path) -> None:
    rnd = random.Random(5)
    bids = [
        (f"b{i % 7}", {"auction": rnd.randrange(9), "price": rnd.randrange(1000)}, 1_000 + i)
        for i in range(300)
    ]
    scenario = Scenario(
        native_bids,
        {"bids": bids},
        {"bids": (S, serdes.Json()), "cheap": (S, serdes.Json()), "auction-counts": (S, L)},
        ["cheap", "auction-counts"],
        stores=["by-auction"],
    )
    driver = run_driver_per_partition(scenario, CONFIG)
    servers = write_log(scenario, tmp_path / "log")
    streaming = run_streaming(scenario, servers, CONFIG)
    replayed = run_replay(spark, scenario, servers, CONFIG)
    # The replay gives JSON values as their text.
    replayed.streams["cheap"] = {
        where: [(json.loads(value), ts) for value, ts in records]
        for where, records in replayed.streams["cheap"].items()
    }
    # The stateless output record for record. After the repartition the order
    # in which a streaming app reads the partitions of the repartition topic
    # is its own (with lambdas too), so the counts are compared as a table.
    assert streaming.streams["cheap"]
    assert streaming.streams["cheap"] == driver["cheap"]
    assert replayed.streams["cheap"] == streaming.streams["cheap"]
    assert streaming.tables["by-auction"]
    assert replayed.tables["by-auction"] == streaming.tables["by-auction"]
