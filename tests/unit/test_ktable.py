"""KTable and the aggregations, on the TopologyTestDriver."""

from __future__ import annotations

import pytest

from strom import KeyValue, StreamsBuilder, serdes
from strom.kstream import Materialized
from strom.processor import Record
from strom.testing import TopologyTestDriver

S, L, INT = serdes.String(), serdes.Long(), serdes.Integer()
RECORDS = [("Jack", 1), ("Lily", 2), ("Mike", 4), ("Jack", 3), ("Lily", 5)]


def test_kstream_vs_ktable_grouped_sum() -> None:
    """Issue acceptance: the same records summed as a stream (every record
    adds) and as a table (an update retracts the old value, adds the new)."""
    builder = StreamsBuilder()
    (
        builder.stream("stream-in", key_serde=S, value_serde=INT)
        .group_by_key()
        .reduce(lambda agg, v: agg + v, Materialized("stream-sums"))
        .to_stream()
        .to("stream-out")
    )
    (
        builder.table("table-in", key_serde=S, value_serde=INT)
        .group_by(lambda k, v: (k, v), key_serde=S, value_serde=INT)
        .reduce(lambda agg, v: agg + v, lambda agg, v: agg - v, Materialized("table-sums"))
        .to_stream()
        .to("table-out")
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("stream-in", S, INT).pipe_key_value_list(RECORDS)
        driver.create_input_topic("table-in", S, INT).pipe_key_value_list(RECORDS)
        stream_out = driver.create_output_topic("stream-out", S, INT).read_key_values_to_map()
        table_out = driver.create_output_topic("table-out", S, INT).read_key_values_to_map()
        assert stream_out == {"Jack": 4, "Lily": 7, "Mike": 4}
        assert table_out == {"Mike": 4, "Jack": 3, "Lily": 5}
        # The table result iterates in last-update order.
        assert list(table_out) == ["Mike", "Jack", "Lily"]
        assert driver.get_key_value_store("table-sums").get("Jack") == 3


def test_table_group_by_moves_values_between_keys() -> None:
    """Kafka's KTableAggregate: a re-keyed update subtracts from the old group
    and adds to the new one; a delete subtracts."""
    builder = StreamsBuilder()
    (
        builder.table("users", key_serde=S, value_serde=S)
        .group_by(lambda user, city: (city, user), key_serde=S, value_serde=S)
        .count(Materialized("per-city"))
        .to_stream()
        .to("counts", value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        users = driver.create_input_topic("users", S, S)
        out = driver.create_output_topic("counts", S, L)
        users.pipe_input("ann", "oslo", 1)
        users.pipe_input("bob", "oslo", 2)
        assert out.read_key_values_to_list() == [KeyValue("oslo", 1), KeyValue("oslo", 2)]
        users.pipe_input("ann", "rome", 3)  # moves: oslo -1, rome +1
        assert out.read_key_values_to_list() == [KeyValue("oslo", 1), KeyValue("rome", 1)]
        users.pipe_input("bob", None, 4)  # delete
        assert out.read_key_values_to_list() == [KeyValue("oslo", 0)]
        users.pipe_input(None, "nowhere", 5)  # null keys are skipped by the table
        assert out.is_empty()


@pytest.mark.parametrize("materialized", [None, "source"])
def test_table_filter_forwards_tombstones_and_map_values(materialized: str | None) -> None:
    """Kafka's KTableFilter asks its parent for old values when it is made:
    a materialized parent gives them, and then an update that did not pass
    the filter before and does not now is not forwarded at all; an
    unmaterialized one does not, and every such update is a tombstone."""
    builder = StreamsBuilder()
    table = builder.table("in", key_serde=S, value_serde=INT, materialized=materialized)
    table.filter(lambda k, v: v > 1).map_values(lambda v: v * 10).to_stream().to(
        "out", value_serde=INT
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, INT)
        out = driver.create_output_topic("out", S, INT)
        src.pipe_key_value_list([("a", 1), ("b", 2), ("b", 0), ("c", None)])
        retracted = [KeyValue("b", 20), KeyValue("b", None)]
        if materialized is None:
            assert out.read_key_values_to_list() == [
                KeyValue("a", None),
                *retracted,
                KeyValue("c", None),
            ]
        else:
            assert out.read_key_values_to_list() == retracted
            assert driver.get_key_value_store("source").get("b") == 0


@pytest.mark.parametrize("cache_bytes", [0, 10 * 1024 * 1024])
@pytest.mark.parametrize("source", [None, "source"])
def test_materialized_filter_and_map_values_keep_their_results(
    source: str | None, cache_bytes: int
) -> None:
    """``materialized=`` on KTable.filter and map_values (Kafka's queryable
    name): the results are kept in stores of their own that the test driver
    and joins read. An update absent before and after is
    not forwarded where the filter can tell (its parent sends old values) or
    where the store's record cache forwards it (a cached delete of nothing is
    no change); otherwise it is a tombstone, as in Kafka."""
    builder = StreamsBuilder()
    table = builder.table("in", key_serde=S, value_serde=INT, materialized=source)
    tens = table.filter(lambda k, v: v > 1, materialized="passing").map_values(
        lambda k, v: f"{k}{v * 10}", with_key=True, materialized=Materialized("tens", value_serde=S)
    )
    tens.to_stream().to("out", value_serde=S)
    stream = builder.stream("lookups", key_serde=S, value_serde=S)
    stream.left_join(tens, lambda v, t: f"{v}={t}").to("joined", value_serde=S)
    config = {"statestore.cache.max.bytes": cache_bytes}
    with TopologyTestDriver(builder.build(), config) as driver:
        src = driver.create_input_topic("in", S, INT)
        out = driver.create_output_topic("out", S, S)
        src.pipe_key_value_list([("a", 1), ("b", 2)])
        assert driver.get_key_value_store("passing").get("b") == 2
        assert driver.get_key_value_store("passing").get("a") is None
        assert driver.get_key_value_store("tens").get("b") == "b20"
        driver.create_input_topic("lookups", S, S).pipe_key_value_list([("b", "x"), ("a", "y")])
        joined = driver.create_output_topic("joined", S, S).read_values_to_list()
        assert joined == ["x=b20", "y=None"]
        src.pipe_key_value_list([("b", 0), ("c", None)])
        assert driver.get_key_value_store("tens").get("b") is None
        retracted = [KeyValue("b", "b20"), KeyValue("b", None)]
        if source is None and cache_bytes == 0:
            assert out.read_key_values_to_list() == [
                KeyValue("a", None),
                *retracted,
                KeyValue("c", None),
            ]
        else:
            assert out.read_key_values_to_list() == retracted


def test_grouped_stream_aggregate_and_reduce_skip_nulls() -> None:
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=INT).group_by_key()
    grouped.aggregate(
        lambda: "", lambda k, v, agg: agg + str(v), Materialized("joined", value_serde=S)
    ).to_stream().to("agg-out", value_serde=S)
    grouped.reduce(max, "max").to_stream().to("max-out")
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, INT).pipe_key_value_list(
            [("a", 3), ("a", 9), (None, 1), ("a", None), ("b", 2), ("a", 4)]
        )
        assert driver.create_output_topic("agg-out", S, S).read_key_values_to_list() == [
            KeyValue("a", "3"),
            KeyValue("a", "39"),
            KeyValue("b", "2"),
            KeyValue("a", "394"),
        ]
        assert driver.create_output_topic("max-out", S, INT).read_values_to_list() == [3, 9, 2, 9]


def test_table_describe_names_follow_kafka() -> None:
    """A source table's store is named when the table is made and added only
    when something needs it (Kafka's KTableSource): here a join reads it."""
    builder = StreamsBuilder()
    table = builder.table("t", key_serde=S, value_serde=S)
    table.to_stream().to("o")
    text = builder.build().describe()
    assert "Source: KSTREAM-SOURCE-0000000001 (topics: [t])" in text
    assert "Processor: KTABLE-SOURCE-0000000002 (stores: [])" in text
    builder.stream("s", key_serde=S, value_serde=S).join(table, lambda v, t: v).to("j")
    text = builder.build().describe()
    assert "Processor: KTABLE-SOURCE-0000000002 (stores: [t-STATE-STORE-0000000000])" in text


def test_results_are_timestamped_as_kafka_stores_them() -> None:
    """Aggregations keep (value, timestamp) with the latest record's time;
    a table source keeps each record's own time."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=INT).group_by_key().reduce(
        lambda a, b: a + b, "sums"
    ).to_stream().to("sums-out")
    builder.table("tin", key_serde=S, value_serde=INT, materialized="table").to_stream().to(
        "table-out"
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, INT).pipe_records(
            [Record("k", 1, 50), Record("k", 2, 10)]
        )
        driver.create_input_topic("tin", S, INT).pipe_records(
            [Record("k", 1, 50), Record("k", 2, 10)]
        )
        sums = driver.create_output_topic("sums-out", S, INT).read_records_to_list()
        assert [(r.value, r.timestamp) for r in sums] == [(1, 50), (3, 50)]
        table = driver.create_output_topic("table-out", S, INT).read_records_to_list()
        assert [(r.value, r.timestamp) for r in table] == [(1, 50), (2, 10)]
        assert driver.get_timestamped_key_value_store("sums").get("k") == (3, 50)
        assert driver.get_key_value_store("sums").get("k") == 3
        assert driver.get_timestamped_key_value_store("table").get("k") == (2, 10)
