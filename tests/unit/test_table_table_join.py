"""KTable-KTable joins on the primary key: inner, left and outer, following
Kafka Streams' KTableKTableInnerJoinTest / LeftJoinTest / OuterJoinTest and the
developer guide's KTable-KTable join semantics table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import BufferConfig, KTable, Materialized, Suppressed
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node
from strom.testing import TopologyTestDriver

INT, S = serdes.Integer(), serdes.String()


def tostring(left: Any, right: Any) -> str:
    """Kafka's MockValueJoiner.TOSTRING_JOINER (Java prints null as "null")."""
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


def joined_tables(kind: str, materialized: str | None = None) -> tuple[StreamsBuilder, KTable]:
    builder = StreamsBuilder()
    left = builder.table("left", key_serde=INT, value_serde=S)
    right = builder.table("right", key_serde=INT, value_serde=S)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    mat = None if materialized is None else Materialized(materialized, value_serde=S)
    return builder, join(right, tostring, materialized=mat)


def topology(kind: str, materialized: str | None = None) -> Any:
    builder, joined = joined_tables(kind, materialized)
    joined.to_stream().to("out", key_serde=INT, value_serde=S)
    return builder.build()


Expected = list[tuple[int, str | None, int]]

# The input steps shared by Kafka's three testJoin cases (keys 0..3), and per
# join kind the (key, value, timestamp) records each step produces.
STEPS: list[tuple[str, list[tuple[int | None, str | None, int]]]] = [
    ("left", [(0, "X0", 5), (1, "X1", 6), (None, "SomeVal", 42)]),
    ("right", [(0, "Y0", 0), (1, "Y1", 10), (None, "AnotherVal", 73)]),
    ("left", [(k, f"XX{k}", 7) for k in range(4)]),
    ("right", [(k, f"YY{k}", k * 5) for k in range(4)]),
    ("left", [(k, f"XXX{k}", 6) for k in range(4)]),
    ("right", [(0, None, 5), (1, None, 7)]),
    ("left", [(k, f"XXXX{k}", 13) for k in range(4)]),
    ("left", [(0, None, 0), (1, None, 42), (2, None, 5), (3, None, 20)]),
]
_BOTH: list[Expected] = [
    [],
    [(0, "X0+Y0", 5), (1, "X1+Y1", 10)],
    [(0, "XX0+Y0", 7), (1, "XX1+Y1", 10)],
    [(0, "XX0+YY0", 7), (1, "XX1+YY1", 7), (2, "XX2+YY2", 10), (3, "XX3+YY3", 15)],
    [(0, "XXX0+YY0", 6), (1, "XXX1+YY1", 6), (2, "XXX2+YY2", 10), (3, "XXX3+YY3", 15)],
]
EXPECTED: dict[str, list[Expected]] = {
    # KTableKTableInnerJoinTest.testJoin
    "inner": [
        *_BOTH,
        [(0, None, 6), (1, None, 7)],
        [(2, "XXXX2+YY2", 13), (3, "XXXX3+YY3", 15)],
        [(2, None, 10), (3, None, 20)],
    ],
    # KTableKTableLeftJoinTest.testJoin
    "left": [
        [(0, "X0+null", 5), (1, "X1+null", 6)],
        _BOTH[1],
        [*_BOTH[2], (2, "XX2+null", 7), (3, "XX3+null", 7)],
        *_BOTH[3:],
        [(0, "XXX0+null", 6), (1, "XXX1+null", 7)],
        [(0, "XXXX0+null", 13), (1, "XXXX1+null", 13), (2, "XXXX2+YY2", 13), (3, "XXXX3+YY3", 15)],
        [(0, None, 0), (1, None, 42), (2, None, 10), (3, None, 20)],
    ],
}
# KTableKTableOuterJoinTest.testJoin: as the left join until the left side is
# deleted, when the right side's values remain joined with null.
EXPECTED["outer"] = [
    *EXPECTED["left"][:-1],
    [(0, None, 0), (1, None, 42), (2, "null+YY2", 10), (3, "null+YY3", 20)],
]


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
@pytest.mark.parametrize("materialized", [None, "joined"])
def test_kafka_join_cases(kind: str, materialized: str | None) -> None:
    with TopologyTestDriver(topology(kind, materialized)) as driver:
        inputs = {side: driver.create_input_topic(side, INT, S) for side in ("left", "right")}
        out = driver.create_output_topic("out", INT, S)
        for (side, records), expected in zip(STEPS, EXPECTED[kind], strict=True):
            for key, value, timestamp in records:
                inputs[side].pipe_input(key, value, timestamp)
            got = [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]
            assert got == expected, (side, records)
        if materialized:
            # The queryable result holds what the output's last updates say.
            final = {k: v for k, v in out_table(EXPECTED[kind]).items() if v is not None}
            assert dict(driver.get_key_value_store(materialized).all()) == final


def out_table(steps: list[Expected]) -> dict[int, str | None]:
    return {key: value for step in steps for key, value, _ in step}


class Recorder(Node):
    """Records the changes a table forwards (Kafka's MockApiProcessor)."""

    def __init__(self, seen: list[tuple[Any, Any, Any, int]]) -> None:
        super().__init__()
        self.seen = seen

    def process(self, batch: Batch) -> None:
        olds = batch.old_values or [None] * len(batch)
        self.seen.extend(zip(batch.keys, batch.values, olds, batch.timestamps, strict=True))


# testSendingOldValue of KTableKTableLeftJoinTest / OuterJoinTest: the
# result's changes carry the previous result as old value.
OLD_VALUES = [
    [(0, "X0+null", None, 5), (1, "X1+null", None, 6)],
    [(0, "X0+Y0", "X0+null", 5), (1, "X1+Y1", "X1+null", 10)],
    [
        (0, "XX0+Y0", "X0+Y0", 7),
        (1, "XX1+Y1", "X1+Y1", 10),
        (2, "XX2+null", None, 7),
        (3, "XX3+null", None, 7),
    ],
    [
        (0, "XX0+YY0", "XX0+Y0", 7),
        (1, "XX1+YY1", "XX1+Y1", 7),
        (2, "XX2+YY2", "XX2+null", 10),
        (3, "XX3+YY3", "XX3+null", 15),
    ],
    [
        (0, "XXX0+YY0", "XX0+YY0", 6),
        (1, "XXX1+YY1", "XX1+YY1", 6),
        (2, "XXX2+YY2", "XX2+YY2", 10),
        (3, "XXX3+YY3", "XX3+YY3", 15),
    ],
    [(0, "XXX0+null", "XXX0+YY0", 6), (1, "XXX1+null", "XXX1+YY1", 7)],
    [
        (0, "XXXX0+null", "XXX0+null", 13),
        (1, "XXXX1+null", "XXX1+null", 13),
        (2, "XXXX2+YY2", "XXX2+YY2", 13),
        (3, "XXXX3+YY3", "XXX3+YY3", 15),
    ],
]
LAST_OLD_VALUES = {
    "left": [
        (0, None, "XXXX0+null", 0),
        (1, None, "XXXX1+null", 42),
        (2, None, "XXXX2+YY2", 10),
        (3, None, "XXXX3+YY3", 20),
    ],
    "outer": [
        (0, None, "XXXX0+null", 0),
        (1, None, "XXXX1+null", 42),
        (2, "null+YY2", "XXXX2+YY2", 10),
        (3, "null+YY3", "XXXX3+YY3", 20),
    ],
}


@pytest.mark.parametrize("kind", ["left", "outer"])
def test_sending_old_values(kind: str) -> None:
    builder, joined = joined_tables(kind)
    joined._enable_sending_old_values(True)  # as Kafka's test asks the result for old values
    seen: list[tuple[Any, Any, Any, int]] = []
    builder.internal.add_processor("recorder", lambda: Recorder(seen), joined._node)
    with TopologyTestDriver(builder.build()) as driver:
        inputs = {side: driver.create_input_topic(side, INT, S) for side in ("left", "right")}
        for (side, records), expected in zip(
            STEPS, [*OLD_VALUES, LAST_OLD_VALUES[kind]], strict=True
        ):
            for key, value, timestamp in records:
                inputs[side].pipe_input(key, value, timestamp)
            assert seen == expected, (side, records)
            seen.clear()


def test_without_old_values_none_are_sent() -> None:
    # KTableKTableLeftJoinTest.testNotSendingOldValue: changes carry no old value.
    builder, joined = joined_tables("left")
    seen: list[tuple[Any, Any, Any, int]] = []
    builder.internal.add_processor("recorder", lambda: Recorder(seen), joined._node)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("left", INT, S).pipe_input(0, "X0", 5)
        driver.create_input_topic("right", INT, S).pipe_input(0, "Y0", 9)
    assert seen == [(0, "X0+null", None, 5), (0, "X0+Y0", None, 9)]


def test_a_downstream_aggregation_sees_retractions() -> None:
    # Re-grouping a join result needs its old values (Kafka's group_by enables
    # them): counting results per right value must retract superseded ones.
    builder, joined = joined_tables("inner")
    grouped = joined.group_by(lambda _k, v: (v.split("+")[1], v), key_serde=S, value_serde=S)
    grouped.count().to_stream().to("counts", key_serde=S, value_serde=serdes.Long())
    with TopologyTestDriver(builder.build()) as driver:
        left = driver.create_input_topic("left", INT, S)
        right = driver.create_input_topic("right", INT, S)
        counts = driver.create_output_topic("counts", S, serdes.Long())
        right.pipe_input(1, "a", 1)
        right.pipe_input(2, "a", 1)
        left.pipe_input(1, "x", 2)
        left.pipe_input(2, "y", 3)
        right.pipe_input(2, "b", 4)  # key 2 moves from a to b
        left.pipe_input(1, None, 5)  # key 1 leaves
        assert counts.read_key_values_to_map() == {"a": 0, "b": 1}


def test_joins_read_filtered_and_mapped_tables_through_their_getters() -> None:
    # The other side is a filtered, mapped view (Kafka's value getters compose).
    builder = StreamsBuilder()
    left = builder.table("left", key_serde=INT, value_serde=S)
    right = (
        builder.table("right", key_serde=INT, value_serde=S)
        .filter(lambda _k, v: not v.startswith("hidden"))
        .map_values(str.upper)
    )
    left.left_join(right, tostring).to_stream().to("out", key_serde=INT, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        lt = driver.create_input_topic("left", INT, S)
        rt = driver.create_input_topic("right", INT, S)
        out = driver.create_output_topic("out", INT, S)
        rt.pipe_input(1, "seen", 1)
        rt.pipe_input(2, "hidden", 2)
        lt.pipe_input(1, "a", 3)
        lt.pipe_input(2, "b", 4)
        rt.pipe_input(1, "hidden-now", 5)  # filtered out: a tombstone to the join
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            (1, "a+SEEN", 3),
            (2, "b+null", 4),
            (1, "a+null", 5),
        ]


def test_a_join_result_can_be_joined_again_through_its_getter() -> None:
    # An unmaterialized join result is looked up by joining on the fly.
    builder = StreamsBuilder()
    a = builder.table("a", key_serde=INT, value_serde=S)
    b = builder.table("b", key_serde=INT, value_serde=S)
    c = builder.table("c", key_serde=INT, value_serde=S)
    a.join(b, tostring).join(c, tostring).to_stream().to("out", key_serde=INT, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        topics = {t: driver.create_input_topic(t, INT, S) for t in "abc"}
        out = driver.create_output_topic("out", INT, S)
        topics["c"].pipe_input(1, "c1", 30)
        topics["a"].pipe_input(1, "a1", 10)
        topics["b"].pipe_input(1, "b1", 20)
        topics["c"].pipe_input(1, "c2", 5)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            (1, "a1+b1+c1", 30),
            (1, "a1+b1+c2", 20),
        ]


def test_describe_names_nodes_as_kafka() -> None:
    text = topology("inner").describe()
    # Kafka's order: the merge node's index first, then join-this, join-other.
    assert "Processor: KTABLE-JOINTHIS-0000000007 (stores: [right-STATE-STORE-0000000003])" in text
    assert "Processor: KTABLE-JOINOTHER-0000000008 (stores: [left-STATE-STORE-0000000000])" in text
    assert "<-- KTABLE-JOINTHIS-0000000007, KTABLE-JOINOTHER-0000000008" in text
    assert "Processor: KTABLE-MERGE-0000000006 (stores: [])" in text
    assert text.count("Sub-topology:") == 1  # the join ties both tables together

    builder = StreamsBuilder()
    left = builder.table("left", key_serde=INT, value_serde=S)
    right = builder.table("right", key_serde=INT, value_serde=S)
    left.left_join(right, tostring, name="j", materialized="store").to_stream()
    named = builder.build().describe()
    for node in ("j-join-this", "j-join-other"):
        assert f"Processor: {node} " in named
    assert "Processor: j (stores: [store])" in named


def test_a_suppressed_table_cannot_be_joined() -> None:
    builder = StreamsBuilder()
    left = builder.table("left", key_serde=INT, value_serde=S)
    right = builder.table("right", key_serde=INT, value_serde=S).suppress(
        Suppressed.until_time_limit(10, BufferConfig.unbounded())
    )
    with pytest.raises(TopologyError, match="no value getter"):
        left.join(right, tostring)
    with pytest.raises(TopologyError, match="joins a KTable"):
        left.join(builder.stream("s"), tostring)  # type: ignore[arg-type]


def test_mismatched_partition_counts_fail_before_processing(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("left", partitions=2)
    log.create_topic("right", partitions=3)
    log.create_topic("out", partitions=2)
    app = KafkaStreams(
        topology("inner"), {"application.id": "tt", "bootstrap.servers": f"embedded:{log_path}"}
    )
    with pytest.raises(TopologyError, match=r"co-partitioned.*left \(2\).*right \(3\)"):
        app.run_until_end(timeout=30)


# --- a brute-force model ----------------------------------------------------------


def model_join(kind: str, left: dict[Any, Any], right: dict[Any, Any]) -> dict[Any, Any]:
    """The join of two final tables, as the developer guide's semantics table says."""
    keys = set(left) | set(right)
    if kind == "inner":
        keys = set(left) & set(right)
    elif kind == "left":
        keys = set(left)
    return {k: tostring(left.get(k), right.get(k)) for k in keys}


Op = tuple[str, int, str | None]
ops_strategy = st.lists(
    st.tuples(
        st.sampled_from(["left", "right"]),
        st.integers(0, 5),
        st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
    ),
    max_size=60,
)


def apply(ops: list[Op]) -> tuple[dict[Any, Any], dict[Any, Any]]:
    tables: dict[str, dict[Any, Any]] = {"left": {}, "right": {}}
    for side, key, value in ops:
        if value is None:
            tables[side].pop(key, None)
        else:
            tables[side][key] = f"{value}{key}"
    return tables["left"], tables["right"]


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy)
def test_random_updates_end_in_the_join_of_the_final_tables(kind: str, ops: list[Op]) -> None:
    with TopologyTestDriver(topology(kind, "joined")) as driver:
        inputs = {side: driver.create_input_topic(side, INT, S) for side in ("left", "right")}
        out = driver.create_output_topic("out", INT, S)
        for t, (side, key, value) in enumerate(ops):
            inputs[side].pipe_input(key, None if value is None else f"{value}{key}", t)
        expected = model_join(kind, *apply(ops))
        assert dict(driver.get_key_value_store("joined").all()) == expected
        # The output stream, read as a table, says the same.
        emitted = {k: v for k, v in out.read_key_values_to_map().items() if v is not None}
        assert emitted == expected


def test_embedded_log_run_with_a_restart_matches_the_model(
    log: EmbeddedLog, log_path: str, tmp_path: Path
) -> None:
    for topic in ("left", "right", "out"):
        log.create_topic(topic, partitions=2)
    import random  # noqa: PLC0415 - only here

    rng = random.Random(7)
    ops: list[Op] = [
        (rng.choice(["left", "right"]), rng.randrange(40), rng.choice([None, "a", "b", "c"]))
        for _ in range(600)
    ]
    config = {
        "application.id": "tt-restart",
        "bootstrap.servers": f"embedded:{log_path}",
        "commit.interval.ms": 0,
    }

    def produce(part: list[Op], start: int) -> None:
        with log.producer() as producer:
            for t, (side, key, value) in enumerate(part, start):
                raw = None if value is None else f"{value}{key}".encode()
                producer.produce(side, INT.serialize(side, key), raw, timestamp=t)

    def run() -> dict[Any, Any]:
        with KafkaStreams(topology("outer", "joined"), config) as app:
            app.run_until_end(timeout=120)
            return {kv.key: kv.value for kv in app.store("joined").all()}

    produce(ops[:300], 0)
    middle = run()
    assert middle == model_join("outer", *apply(ops[:300]))
    produce(ops[300:], 300)
    assert run() == model_join("outer", *apply(ops))
    # The output topic, read as a table, agrees.
    emitted: dict[Any, Any] = {}
    for partition in range(2):
        for record in log.read("out", partition, 0, 10_000):
            emitted[INT.deserialize("out", record.key)] = S.deserialize("out", record.value)
    assert {k: v for k, v in emitted.items() if v is not None} == model_join("outer", *apply(ops))


def test_a_stream_joins_an_unmaterialized_join_result() -> None:
    # KStream-KTable join over a table-table join result: the lookup joins
    # both tables on the fly (Kafka's KTableKTableInnerJoinValueGetter).
    builder = StreamsBuilder()
    left = builder.table("left", key_serde=INT, value_serde=S)
    right = builder.table("right", key_serde=INT, value_serde=S)
    joined = left.join(right, tostring)
    stream = builder.stream("events", key_serde=INT, value_serde=S)
    stream.join(joined, lambda ev, tv: f"{ev}@{tv}").to("out", key_serde=INT, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        lt = driver.create_input_topic("left", INT, S)
        rt = driver.create_input_topic("right", INT, S)
        events = driver.create_input_topic("events", INT, S)
        out = driver.create_output_topic("out", INT, S)
        lt.pipe_input(1, "a", 1)
        events.pipe_input(1, "e1", 2)  # no right value yet: no inner result
        rt.pipe_input(1, "b", 3)
        events.pipe_input(1, "e2", 4)
        rt.pipe_input(1, None, 5)
        events.pipe_input(1, "e3", 6)
        assert out.read_values_to_list() == ["e2@a+b"]


def test_tables_from_streams_join_as_kafka_describes() -> None:
    # KStreamImplTest.shouldSupportTableTableJoinWithKStreamToKTable
    builder = StreamsBuilder()
    table1 = builder.stream("left", key_serde=S, value_serde=S).to_table()
    table2 = builder.stream("right", key_serde=S, value_serde=S).to_table()
    table1.join(table2, tostring).to_stream().to("output", value_serde=S)
    text = builder.build().describe()
    store1, store2 = (
        "KSTREAM-TOTABLE-STATE-STORE-0000000002",
        "KSTREAM-TOTABLE-STATE-STORE-0000000005",
    )
    for line in (
        "Processor: KSTREAM-TOTABLE-0000000001 (stores: [" + store1 + "])\n"
        "      --> KTABLE-JOINTHIS-0000000007",
        "Processor: KSTREAM-TOTABLE-0000000004 (stores: [" + store2 + "])\n"
        "      --> KTABLE-JOINOTHER-0000000008",
        "Processor: KTABLE-JOINOTHER-0000000008 (stores: [" + store1 + "])",
        "Processor: KTABLE-JOINTHIS-0000000007 (stores: [" + store2 + "])",
        "Processor: KTABLE-MERGE-0000000006 (stores: [])\n"
        "      --> KTABLE-TOSTREAM-0000000009\n"
        "      <-- KTABLE-JOINTHIS-0000000007, KTABLE-JOINOTHER-0000000008",
        "Sink: KSTREAM-SINK-0000000010 (topic: output)",
    ):
        assert line in text, line
    with TopologyTestDriver(builder.build()) as driver:
        left = driver.create_input_topic("left", S, S)
        right = driver.create_input_topic("right", S, S)
        output = driver.create_output_topic("output", S, S)
        right.pipe_input("lhs1", "rhsValue1")
        right.pipe_input("rhs2", "rhsValue2")
        right.pipe_input("lhs3", "rhsValue3")
        assert output.read_key_values_to_map() == {}
        left.pipe_input("lhs1", "lhsValue1")
        left.pipe_input("lhs2", "lhsValue2")
        assert output.read_key_values_to_map() == {"lhs1": "lhsValue1+rhsValue1"}
        left.pipe_input("lhs3", "lhsValue3")
        assert output.read_key_values_to_map() == {"lhs3": "lhsValue3+rhsValue3"}
