"""KStream-KTable joins (Kafka's join-semantics table for stream-table joins)."""

from __future__ import annotations

import pytest

from strom import KafkaStreams, KeyValue, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.testing import TopologyTestDriver

S = serdes.String()


def join_topology(left: bool, filtered: bool = False) -> StreamsBuilder:
    builder = StreamsBuilder()
    table = builder.table("table", key_serde=S, value_serde=S, materialized="t")
    if filtered:
        table = table.filter(lambda k, v: v != "hidden").map_values(str.upper)
    stream = builder.stream("stream", key_serde=S, value_serde=S)
    joined = (stream.left_join if left else stream.join)(table, lambda sv, tv: f"{sv}+{tv}")
    joined.to("out", value_serde=S)
    return builder


@pytest.mark.parametrize("left", [False, True])
def test_only_stream_records_trigger_and_see_the_table_as_of_then(left: bool) -> None:
    with TopologyTestDriver(join_topology(left).build()) as driver:
        stream = driver.create_input_topic("stream", S, S)
        table = driver.create_input_topic("table", S, S)
        out = driver.create_output_topic("out", S, S)
        stream.pipe_input("k", "s1", 1)  # no table entry yet
        table.pipe_input("k", "t1", 2)  # a table update emits nothing
        stream.pipe_input("k", "s2", 3)
        table.pipe_input("k", None, 4)  # delete
        stream.pipe_input("k", "s3", 5)
        # A null key: dropped by an inner join, joined with None by a left
        # join (Kafka's KStreamKTableJoinProcessor since KIP-962).
        stream.pipe_input(None, "s4", 6)
        stream.pipe_input("k", None, 7)  # a null value: dropped by both
        expected = [KeyValue("k", "s2+t1")]
        if left:
            expected = [
                KeyValue("k", "s1+None"),
                *expected,
                KeyValue("k", "s3+None"),
                KeyValue(None, "s4+None"),
            ]
        records = out.read_records_to_list()
        assert [KeyValue(r.key, r.value) for r in records] == expected
        # The result carries the stream record's timestamp.
        assert [r.timestamp for r in records] == ([1, 3, 5, 6] if left else [3])


def test_join_reads_a_filtered_and_mapped_table_through_its_getters() -> None:
    with TopologyTestDriver(join_topology(left=True, filtered=True).build()) as driver:
        driver.create_input_topic("table", S, S).pipe_key_value_list(
            [("a", "visible"), ("b", "hidden")]
        )
        driver.create_input_topic("stream", S, S).pipe_key_value_list([("a", "x"), ("b", "y")])
        assert driver.create_output_topic("out", S, S).read_values_to_list() == [
            "x+VISIBLE",
            "y+None",
        ]


def test_mismatched_partition_counts_fail_before_processing(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("stream", partitions=2)
    log.create_topic("table", partitions=3)
    log.create_topic("out", partitions=1)
    app = KafkaStreams(
        join_topology(left=False).build(),
        {"application.id": "join", "bootstrap.servers": f"embedded:{log_path}"},
    )
    with pytest.raises(TopologyError, match=r"co-partitioned.*stream \(2\).*table \(3\)"):
        app.run_until_end(timeout=30)


@pytest.mark.parametrize("left", [False, True])
def test_joined_serdes_serialize_the_repartition_after_a_key_change(left: bool) -> None:
    """Kafka's ``Joined``: after a key change the join repartitions with its
    key and value serdes (the stream has none of its own after
    ``select_key``), and its key serde is the result's."""
    builder = StreamsBuilder()
    table = builder.table("users", key_serde=S, value_serde=S)
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    by_user = orders.select_key(lambda k, v: v.split(",")[0])
    join = by_user.left_join if left else by_user.join
    join(table, lambda order, user: f"{order}|{user}", key_serde=S, value_serde=S).to(
        "out", value_serde=S
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("users", S, S).pipe_input("alice", "Alice A.", 1)
        orders_in = driver.create_input_topic("orders", S, S)
        orders_in.pipe_input("o1", "alice,book", 2)
        orders_in.pipe_input("o2", "bob,pen", 3)
        got = driver.create_output_topic("out", S, S).read_key_values_to_list()
    expected = [KeyValue("alice", "alice,book|Alice A.")]
    if left:
        expected.append(KeyValue("bob", "bob,pen|None"))
    assert got == expected


def test_join_arguments_a_table_join_does_not_take_are_refused() -> None:
    builder = StreamsBuilder()
    table = builder.table("t", key_serde=S, value_serde=S)
    stream = builder.stream("s", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="KTable takes no store_name, logging"):
        stream.join(table, lambda a, b: a, store_name="x", logging=False)
    globals_ = builder.global_table("g", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="GlobalKTable takes no key_serde"):
        stream.left_join(globals_, lambda k, v: k, lambda a, b: a, key_serde=S)
    # Joined's other value serde is taken (and unused), as in Kafka.
    stream.join(table, lambda a, b: a, other_value_serde=S).to("out", value_serde=S)
