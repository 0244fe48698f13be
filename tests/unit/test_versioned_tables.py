"""Versioned tables (KIP-914): a source table or an aggregation kept in a
versioned store, read as of each stream record's time by stream-table joins,
and its out-of-order updates left out of joins and re-groupings.
tests/differential runs random versioned tables and aggregations against
Kafka's TopologyTestDriver as well."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import BufferConfig, JoinWindows, Materialized, Suppressed, TimeWindows
from strom.state import Stores, VersionedRecord
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def versioned(name: str = "prices", history: int = 60_000, **serdes: Any) -> Materialized:
    return Materialized(Stores.persistent_versioned_key_value_store(name, history), **serdes)


def rows(driver: TopologyTestDriver, topic: str, value_serde: Any = S) -> list[Any]:
    out = driver.create_output_topic(topic, S, value_serde).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in out]


def embedded_app(builder: StreamsBuilder, app_id: str, log_path: str, state: Any) -> KafkaStreams:
    """An app of ``builder``'s topology on the embedded log at ``log_path``."""
    props = {
        "application.id": app_id,
        "bootstrap.servers": f"embedded:{log_path}",
        "state.dir": str(state),
    }
    return KafkaStreams(builder.build(), props)


def priced_orders(table_materialized: Materialized | str) -> StreamsBuilder:
    builder = StreamsBuilder()
    prices = builder.table("prices", key_serde=S, value_serde=S, materialized=table_materialized)
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    orders.left_join(prices, lambda qty, price: f"{qty}@{price}").to(
        "priced", key_serde=S, value_serde=S
    )
    return builder


def test_a_stream_joins_the_version_valid_at_its_records_time() -> None:
    with TopologyTestDriver(priced_orders(versioned()).build()) as driver:
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", 1_000)
        prices.pipe_input("apple", "1.20", 10_000)
        orders = driver.create_input_topic("orders", S, S)
        orders.pipe_input("apple", "3", 5_000)  # late: the price then was 1.00
        orders.pipe_input("apple", "2", 12_000)
        orders.pipe_input("apple", "1", 500)  # before any price
        assert rows(driver, "priced") == [
            ("apple", "3@1.00", 5_000),
            ("apple", "2@1.20", 12_000),
            ("apple", "1@None", 500),
        ]
        store = driver.get_versioned_key_value_store("prices")
        assert store.get("apple", 9_999) == VersionedRecord("1.00", 1_000, 10_000)


def test_a_plain_table_joins_its_latest_value() -> None:
    with TopologyTestDriver(priced_orders("prices").build()) as driver:
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", 1_000)
        prices.pipe_input("apple", "1.20", 10_000)
        driver.create_input_topic("orders", S, S).pipe_input("apple", "3", 5_000)
        assert rows(driver, "priced") == [("apple", "3@1.20", 5_000)]


def test_an_out_of_order_update_is_a_version_but_not_the_tables_value() -> None:
    """Kafka forwards it (to_stream shows it), but re-groupings and joins
    take only each key's latest version."""
    builder = StreamsBuilder()
    table = builder.table("prices", key_serde=S, value_serde=S, materialized=versioned())
    table.to_stream().to("changes", key_serde=S, value_serde=S)
    table.group_by(lambda k, v: (v, k), key_serde=S, value_serde=S).count().to_stream().to(
        "per-price", key_serde=S, value_serde=L
    )
    with TopologyTestDriver(builder.build()) as driver:
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", 1_000)
        prices.pipe_input("apple", "1.20", 10_000)
        prices.pipe_input("apple", "0.90", 5_000)  # out of order
        assert rows(driver, "changes") == [
            ("apple", "1.00", 1_000),
            ("apple", "1.20", 10_000),
            ("apple", "0.90", 5_000),
        ]
        assert rows(driver, "per-price", L) == [
            ("1.00", 1, 1_000),
            ("1.00", 0, 10_000),
            ("1.20", 1, 10_000),
        ]
        store = driver.get_versioned_key_value_store("prices")
        assert store.get("apple", 6_000) == VersionedRecord("0.90", 5_000, 10_000)


def test_updates_older_than_the_history_are_dropped() -> None:
    builder = StreamsBuilder()
    table = builder.table("prices", key_serde=S, value_serde=S, materialized=versioned(history=100))
    table.to_stream().to("changes", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        prices = driver.create_input_topic("prices", S, S)
        prices.pipe_input("apple", "1.00", 1_000)
        prices.pipe_input("pear", "2.00", 899)  # 1_000 - 100 > 899: not put, not forwarded
        prices.pipe_input("pear", "2.10", 900)
        assert rows(driver, "changes") == [("apple", "1.00", 1_000), ("pear", "2.10", 900)]


def test_what_versioned_tables_do_not_take() -> None:
    builder = StreamsBuilder()
    table = builder.table("prices", key_serde=S, value_serde=S, materialized=versioned())
    with pytest.raises(TopologyError, match="non-versioned"):
        table.suppress(Suppressed.until_time_limit(10, BufferConfig.unbounded()))
    with pytest.raises(TopologyError, match="GlobalKTable cannot be versioned"):
        builder.global_table("rates", key_serde=S, value_serde=S, materialized=versioned("g"))
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    with pytest.raises(TopologyError, match="window or session store"):
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(10)).count(versioned("counts"))
    with pytest.raises(TopologyError, match="caching"):
        Stores.versioned_key_value_store_builder(
            Stores.persistent_versioned_key_value_store("v", 10), S, S
        ).with_caching_enabled()
    # A window store supplier materializes a windowed aggregation, not a table.
    with pytest.raises(TopologyError, match="not a table"):
        StreamsBuilder().table(
            "t", materialized=Materialized(Stores.in_memory_window_store("w", 10, 10))
        )


def test_a_grace_period_waits_for_late_table_updates() -> None:
    """Kafka's Joined.withGracePeriod: a stream record waits until stream
    time is the grace past it, so a table update arriving late (but within
    it) is the one it joins; then records join in timestamp order."""
    builder = StreamsBuilder()
    prices = builder.table("prices", key_serde=S, value_serde=S, materialized=versioned())
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    orders.join(prices, lambda qty, price: f"{qty}@{price}", grace=1_000).to(
        "priced", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build()) as driver:
        price_in = driver.create_input_topic("prices", S, S)
        order_in = driver.create_input_topic("orders", S, S)
        price_in.pipe_input("apple", "1.00", 0)
        order_in.pipe_input("apple", "2", 5_000)  # held back
        order_in.pipe_input("apple", "1", 4_500)  # held back, older
        price_in.pipe_input("apple", "1.50", 4_000)  # late, within the grace
        assert rows(driver, "priced") == []
        order_in.pipe_input("apple", "7", 6_000)  # stream time 6_000: releases up to 5_000
        assert rows(driver, "priced") == [
            ("apple", "1@1.50", 4_500),
            ("apple", "2@1.50", 5_000),
        ]
        order_in.pipe_input("apple", "9", 1_000)  # older than 6_000 - grace: joins at once
        assert rows(driver, "priced") == [("apple", "9@1.00", 1_000)]


def test_grace_needs_a_versioned_table_and_a_table() -> None:
    builder = StreamsBuilder()
    plain = builder.table("prices", key_serde=S, value_serde=S, materialized="plain")
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="versioned table"):
        orders.join(plain, lambda a, b: a, grace=10)
    with pytest.raises(TopologyError, match="JoinWindows"):
        windows = JoinWindows.of_time_difference_with_no_grace(5)
        orders.join(orders, lambda a, b: a, windows, grace=1)


def test_held_back_records_survive_a_restart(tmp_path: Any) -> None:
    """The grace buffer is a changelogged store: records held back when an
    instance stops are joined by the next one."""
    log_path = str(tmp_path / "log")
    log = EmbeddedLog(log_path)
    for topic in ("prices", "orders", "priced"):
        log.create_topic(topic)

    def app(state: str) -> KafkaStreams:
        builder = StreamsBuilder()
        prices = builder.table("prices", key_serde=S, value_serde=S, materialized=versioned())
        builder.stream("orders", key_serde=S, value_serde=S).join(
            prices, lambda qty, price: f"{qty}@{price}", grace=1_000
        ).to("priced", key_serde=S, value_serde=S)
        return embedded_app(builder, "graced", log_path, tmp_path / state)

    with log.producer(S, S) as producer:
        producer.produce("prices", "apple", "1.00", timestamp=0)
        producer.produce("orders", "apple", "2", timestamp=5_000)
    with app("first") as first:
        first.run_until_end(timeout=30)
    assert log.end_offsets("priced")[0] == 0  # still held back
    with log.producer(S, S) as producer:
        producer.produce("orders", "apple", "3", timestamp=7_000)
    with app("second") as second:  # no local state: the buffer comes from its changelog
        second.run_until_end(timeout=30)
    assert [(r.key, r.value, r.timestamp) for r in log.read("priced", 0, 0, 10)] == [
        (b"apple", b"2@1.00", 5_000)
    ]


def test_a_versioned_count_drops_records_older_than_its_history() -> None:
    """Kafka's KStreamAggregate over a versioned store: the result time is
    the later of the record's and the latest version's; a result older than
    the store's history is neither put nor forwarded."""
    builder = StreamsBuilder()
    counts = (
        builder.stream("clicks", key_serde=S, value_serde=S)
        .group_by_key()
        .count(versioned("counts", history=50))
    )
    counts.to_stream().to("counts", key_serde=S, value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        clicks = driver.create_input_topic("clicks", S, S)
        for user, time in [("a", 100), ("a", 90), ("b", 200), ("a", 120), ("c", 100), ("c", 210)]:
            clicks.pipe_input(user, "x", time)
        assert rows(driver, "counts", L) == [
            ("a", 1, 100),
            ("a", 2, 100),  # out of order: timed as the latest version
            ("b", 1, 200),
            # a at 120 and c at 100: stream time 200, so older than the history
            ("c", 1, 210),
        ]
        store = driver.get_versioned_key_value_store("counts")
        assert store.get("a") == VersionedRecord(2, 100)
        assert store.get("c", 209) is None


def test_a_stream_joins_an_aggregate_as_of_its_records_time() -> None:
    """A versioned aggregation's table is versioned: a stream-table join
    reads the aggregate that was valid at each stream record's time."""
    builder = StreamsBuilder()
    totals = (
        builder.stream("deposits", key_serde=S, value_serde=L)
        .group_by_key()
        .reduce(lambda total, amount: total + amount, versioned("totals"))
    )
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    orders.left_join(totals, lambda order, total: f"{order}:{total}").to(
        "checked", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build()) as driver:
        deposits = driver.create_input_topic("deposits", S, L)
        deposits.pipe_input("ann", 10, 1_000)
        deposits.pipe_input("ann", 5, 3_000)
        orders_in = driver.create_input_topic("orders", S, S)
        orders_in.pipe_input("ann", "o1", 2_000)  # late: the total then was 10
        orders_in.pipe_input("ann", "o2", 4_000)
        orders_in.pipe_input("ann", "o3", 500)
        assert rows(driver, "checked") == [
            ("ann", "o1:10", 2_000),
            ("ann", "o2:15", 4_000),
            ("ann", "o3:None", 500),
        ]


def test_an_aggregate_put_before_a_later_tombstone_is_not_the_latest() -> None:
    """An aggregator that returns None deletes the key as of its record's
    time; a record older than that delete starts a new aggregate, kept as a
    version before it and forwarded marked not latest: to_stream shows it,
    a table-table join skips it."""
    builder = StreamsBuilder()
    sums = (
        builder.stream("amounts", key_serde=S, value_serde=L)
        .group_by_key()
        .aggregate(
            lambda: 0,
            lambda _k, amount, total: None if amount < 0 else total + amount,
            versioned("sums", value_serde=L),
        )
    )
    sums.to_stream().to("sums", key_serde=S, value_serde=L)
    limits = builder.table("limits", key_serde=S, value_serde=L)
    sums.join(limits, lambda total, limit: total <= limit).to_stream().to(
        "within", key_serde=S, value_serde=serdes.Boolean()
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("limits", S, L).pipe_input("k", 100, 0)
        amounts = driver.create_input_topic("amounts", S, L)
        amounts.pipe_input("k", 40, 1_000)
        amounts.pipe_input("k", -1, 2_000)  # a tombstone at 2_000
        amounts.pipe_input("k", 7, 1_500)  # no latest value: a new aggregate at 1_500
        assert rows(driver, "sums", L) == [("k", 40, 1_000), ("k", None, 2_000), ("k", 7, 1_500)]
        within = driver.create_output_topic("within", S, serdes.Boolean()).read_records_to_list()
        assert [(r.value, r.timestamp) for r in within] == [(True, 1_000), (None, 2_000)]
        store = driver.get_versioned_key_value_store("sums")
        assert store.get("k") is None
        assert store.get("k", 1_999) == VersionedRecord(7, 1_500, 2_000)


def test_a_versioned_table_aggregation_and_cogroup() -> None:
    """KGroupedTable aggregations and cogroups take versioned stores too,
    with Kafka's result times; their stores keep the versions."""
    builder = StreamsBuilder()
    table = builder.table("users", key_serde=S, value_serde=S)
    by_city = table.group_by(lambda user, city: (city, user), key_serde=S, value_serde=S).count(
        versioned("by-city")
    )
    by_city.to_stream().to("by-city", key_serde=S, value_serde=L)
    visits = builder.stream("visits", key_serde=S, value_serde=S).group_by_key()
    orders = builder.stream("orders", key_serde=S, value_serde=S).group_by_key()
    activity = (
        visits.cogroup(lambda _k, _v, agg: agg + "v")
        .cogroup(orders, lambda _k, _v, agg: agg + "o")
        .aggregate(lambda: "", materialized=versioned("activity", key_serde=S, value_serde=S))
    )
    activity.to_stream().to("activity", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        users = driver.create_input_topic("users", S, S)
        users.pipe_input("ann", "oslo", 1_000)
        users.pipe_input("bob", "oslo", 2_000)
        users.pipe_input("ann", "rome", 3_000)
        assert rows(driver, "by-city", L) == [
            ("oslo", 1, 1_000),
            ("oslo", 2, 2_000),
            ("oslo", 1, 3_000),
            ("rome", 1, 3_000),
        ]
        counts = driver.get_versioned_key_value_store("by-city")
        assert counts.get("oslo", 2_500) == VersionedRecord(2, 2_000, 3_000)
        driver.create_input_topic("visits", S, S).pipe_input("ann", "x", 10)
        driver.create_input_topic("orders", S, S).pipe_input("ann", "y", 5)
        assert rows(driver, "activity") == [("ann", "v", 10), ("ann", "vo", 10)]
        assert driver.get_versioned_key_value_store("activity").get("ann", 9) is None


def test_a_versioned_aggregate_is_restored_from_its_changelog(tmp_path: Any) -> None:
    """A versioned aggregation's store is changelogged: an instance with no
    local state goes on from the versions the last one wrote, history
    included."""
    log_path = str(tmp_path / "log")
    log = EmbeddedLog(log_path)
    for topic in ("clicks", "counts"):
        log.create_topic(topic)

    def app(state: str) -> KafkaStreams:
        builder = StreamsBuilder()
        builder.stream("clicks", key_serde=S, value_serde=S).group_by_key().count(
            versioned("counts", history=1_000)
        ).to_stream().to("counts", key_serde=S, value_serde=L)
        return embedded_app(builder, "versioned-count", log_path, tmp_path / state)

    with log.producer(S, S) as producer:
        producer.produce("clicks", "a", "x", timestamp=1_000)
        producer.produce("clicks", "a", "x", timestamp=2_000)
    with app("first") as first:
        first.run_until_end(timeout=30)
    with log.producer(S, S) as producer:
        producer.produce("clicks", "a", "x", timestamp=3_000)
    with app("second") as second:  # no local state: the store comes from its changelog
        second.run_until_end(timeout=30)
        store = second.store("counts")
        assert store.get("a") == VersionedRecord(3, 3_000)
        assert store.get("a", 2_500) == VersionedRecord(2, 2_000, 3_000)
    counted = [(r.key, L.deserialize("counts", r.value)) for r in log.read("counts", 0, 0, 10)]
    assert counted == [(b"a", 1), (b"a", 2), (b"a", 3)]


def test_a_filter_kept_in_a_versioned_store_keeps_out_of_order_versions() -> None:
    """A filter (or map_values, transform_values) materialized in a
    versioned store puts each update at its own time: an update older than
    the key's latest is a version, forwarded marked not latest, and a
    stream joins the filtered table as of its records' times."""
    builder = StreamsBuilder()
    prices = builder.table("prices", key_serde=S, value_serde=S)
    cheap = prices.filter(lambda _k, price: float(price) < 2, materialized=versioned("cheap"))
    cheap.to_stream().to("cheap", key_serde=S, value_serde=S)
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    orders.join(cheap, lambda qty, price: f"{qty}@{price}").to("deals", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        prices_in = driver.create_input_topic("prices", S, S)
        prices_in.pipe_input("apple", "1.50", 1_000)
        prices_in.pipe_input("apple", "1.20", 500)  # older than the latest: a version
        prices_in.pipe_input("apple", "2.50", 2_000)  # filtered out: a tombstone at 2_000
        assert rows(driver, "cheap") == [
            ("apple", "1.50", 1_000),
            ("apple", "1.20", 500),
            ("apple", None, 2_000),
        ]
        store = driver.get_versioned_key_value_store("cheap")
        assert store.get("apple") is None
        assert store.get("apple", 700) == VersionedRecord("1.20", 500, 1_000)
        orders_in = driver.create_input_topic("orders", S, S)
        orders_in.pipe_input("apple", "4", 800)
        orders_in.pipe_input("apple", "5", 1_500)
        orders_in.pipe_input("apple", "6", 2_500)  # not cheap then: no deal
        assert rows(driver, "deals") == [("apple", "4@1.20", 800), ("apple", "5@1.50", 1_500)]


def test_a_table_join_kept_in_a_versioned_store() -> None:
    """A table-table join materialized in a versioned store keeps each
    result as a version at its time, so its table is versioned."""
    builder = StreamsBuilder()
    names = builder.table("names", key_serde=S, value_serde=S)
    cities = builder.table("cities", key_serde=S, value_serde=S)
    joined = names.join(
        cities,
        lambda name, city: f"{name} in {city}",
        materialized=Materialized(
            Stores.persistent_versioned_key_value_store("who-where", 60_000),
            key_serde=S,
            value_serde=S,
        ),
    )
    joined.to_stream().to("who-where", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("names", S, S).pipe_input("u1", "ann", 100)
        cities_in = driver.create_input_topic("cities", S, S)
        cities_in.pipe_input("u1", "oslo", 200)
        cities_in.pipe_input("u1", "rome", 300)
        assert rows(driver, "who-where") == [("u1", "ann in oslo", 200), ("u1", "ann in rome", 300)]
        store = driver.get_versioned_key_value_store("who-where")
        assert store.get("u1", 250) == VersionedRecord("ann in oslo", 200, 300)
        assert store.get("u1", 150) is None


def test_a_foreign_key_join_kept_in_a_versioned_store() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=S, value_serde=S)
    products = builder.table("products", key_serde=S, value_serde=S)
    orders.join(
        products,
        lambda product, name: name,
        foreign_key=lambda product: product,
        materialized=Materialized(
            Stores.persistent_versioned_key_value_store("order-names", 60_000),
            key_serde=S,
            value_serde=S,
        ),
    ).to_stream().to("order-names", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        products_in = driver.create_input_topic("products", S, S)
        products_in.pipe_input("p1", "pen", 100)
        driver.create_input_topic("orders", S, S).pipe_input("o1", "p1", 200)
        products_in.pipe_input("p1", "ink pen", 300)
        assert rows(driver, "order-names") == [("o1", "pen", 200), ("o1", "ink pen", 300)]
        store = driver.get_versioned_key_value_store("order-names")
        assert store.get("o1", 250) == VersionedRecord("pen", 200, 300)
        assert store.get("o1") == VersionedRecord("ink pen", 300)
