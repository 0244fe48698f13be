"""Foreign-key KTable-KTable joins (Kafka's KIP-213), following the scenarios of
Kafka Streams' KTableKTableForeignKeyJoinIntegrationTest,
KTableKTableForeignKeyJoinScenarioTest and KStreamImplTest."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import Materialized
from strom.kstream.internals import table_joins as tj
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node
from strom.testing import TopologyTestDriver

S, INT = serdes.String(), serdes.Integer()


def joiner(left: Any, right: Any) -> str:
    # The integration test's joiner; Java prints null as "null".
    return f"({left},{'null' if right is None else right})"


def rhs(value: str) -> str:
    return value.split("|")[1]


def fk_topology(
    left_join: bool,
    store: str | None,
    extractor: Any = rhs,
    name: str | None = None,
    keyed: bool = False,
) -> Any:
    builder = StreamsBuilder()
    left = builder.table("left_table", key_serde=S, value_serde=S)
    right = builder.table("right_table", key_serde=S, value_serde=S)
    join = left.left_join if left_join else left.join
    # As Kafka's test: the cache would suppress some of the tombstones asserted on.
    mat = None if store is None else Materialized(store, value_serde=S, caching=False)
    join(
        right,
        joiner,
        foreign_key=extractor,
        foreign_key_with_key=keyed,
        materialized=mat,
        name=name,
    ).to_stream().to("output", value_serde=S)
    return builder.build()


class Harness:
    def __init__(
        self, left_join: bool, store: str | None, extractor: Any = rhs, keyed: bool = False
    ) -> None:
        self.driver = TopologyTestDriver(fk_topology(left_join, store, extractor, keyed=keyed))
        self.left = self.driver.create_input_topic("left_table", S, S)
        self.right = self.driver.create_input_topic("right_table", S, S)
        self.output = self.driver.create_output_topic("output", S, S)
        self.store = store

    def emitted(self) -> dict[str, Any]:
        return self.output.read_key_values_to_map()

    def table(self) -> dict[str, Any] | None:
        if self.store is None:
            return None
        return dict(self.driver.get_key_value_store(self.store).all())

    def check(self, emitted: dict[str, Any], table: dict[str, Any]) -> None:
        assert self.emitted() == emitted
        if self.store is not None:
            assert self.table() == table


both = pytest.mark.parametrize(
    ("left_join", "store"), [(False, None), (True, None), (False, "store"), (True, "store")]
)


@both
def test_join_from_left_then_delete_left_entity(left_join: bool, store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest.doJoinFromLeftThenDeleteLeftEntity
    h = Harness(left_join, store)
    h.right.pipe_input("rhs1", "rhsValue1", 1)
    h.right.pipe_input("rhs2", "rhsValue2", 2)
    h.right.pipe_input("rhs3", "rhsValue3", 3)  # unreferenced: never in a result
    h.check({}, {})
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 4)
    h.left.pipe_input("lhs2", "lhsValue2|rhs2", 5)
    both_joined = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
    h.check(both_joined, both_joined)
    h.left.pipe_input("lhs3", "lhsValue3|rhs1", 6)  # a second reference to rhs1
    h.check(
        {"lhs3": "(lhsValue3|rhs1,rhsValue1)"},
        {**both_joined, "lhs3": "(lhsValue3|rhs1,rhsValue1)"},
    )
    h.left.pipe_input("lhs1", None, 7)
    h.check(
        {"lhs1": None},
        {"lhs2": "(lhsValue2|rhs2,rhsValue2)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"},
    )


@both
def test_join_from_right_then_delete_right_entity(left_join: bool, store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest.doJoinFromRightThenDeleteRightEntity
    h = Harness(left_join, store)
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 1)
    h.left.pipe_input("lhs2", "lhsValue2|rhs2", 2)
    h.left.pipe_input("lhs3", "lhsValue3|rhs1", 3)
    unmatched = {
        "lhs1": "(lhsValue1|rhs1,null)",
        "lhs2": "(lhsValue2|rhs2,null)",
        "lhs3": "(lhsValue3|rhs1,null)",
    }
    h.check(unmatched if left_join else {}, unmatched if left_join else {})
    h.right.pipe_input("rhs1", "rhsValue1", 4)  # answers both subscribers
    ones = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"}
    h.check(ones, {**unmatched, **ones} if left_join else ones)
    h.right.pipe_input("rhs2", "rhsValue2", 5)
    all_joined = {**ones, "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
    h.check({"lhs2": "(lhsValue2|rhs2,rhsValue2)"}, all_joined)
    h.right.pipe_input("rhs3", "rhsValue3", 6)  # nobody subscribes to rhs3
    h.check({}, all_joined)
    h.right.pipe_input("rhs1", None, 7)
    if left_join:
        h.check(
            {"lhs1": "(lhsValue1|rhs1,null)", "lhs3": "(lhsValue3|rhs1,null)"},
            {**unmatched, "lhs2": "(lhsValue2|rhs2,rhsValue2)"},
        )
    else:
        h.check({"lhs1": None, "lhs3": None}, {"lhs2": "(lhsValue2|rhs2,rhsValue2)"})


@both
def test_deleting_a_non_joining_record_emits_a_tombstone(
    left_join: bool, store: str | None
) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest.shouldEmitTombstoneWhenDeletingNonJoiningRecords
    h = Harness(left_join, store)
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 1)
    expected = {"lhs1": "(lhsValue1|rhs1,null)"} if left_join else {}
    h.check(expected, expected)
    # An inner join cannot know whether the old entry joined: it retracts.
    h.left.pipe_input("lhs1", None, 2)
    h.check({"lhs1": None}, {})
    h.left.pipe_input("lhs1", None, 3)  # deleting it again: nothing
    h.check({}, {})


@both
def test_deleting_a_non_existing_record_emits_nothing(left_join: bool, store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest
    # .shouldNotEmitTombstonesWhenDeletingNonExistingRecords
    h = Harness(left_join, store)
    h.left.pipe_input("lhs1", None, 1)
    h.check({}, {})


@both
def test_a_non_matching_foreign_key_produces_nulls(left_join: bool, store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest
    # .joinShouldProduceNullsWhenValueHasNonMatchingForeignKey
    h = Harness(left_join, store)

    def unmatched(fk: str) -> dict[str, Any]:
        return {"lhs1": f"(lhsValue1|{fk},null)"} if left_join else {}

    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 1)
    h.check(unmatched("rhs1"), unmatched("rhs1"))
    # A changed foreign key always answers, to retract the previous result.
    h.left.pipe_input("lhs1", "lhsValue1|rhs2", 2)
    h.check({"lhs1": "(lhsValue1|rhs2,null)" if left_join else None}, unmatched("rhs2"))
    h.left.pipe_input("lhs1", "lhsValue1|rhs3", 3)
    h.check({"lhs1": "(lhsValue1|rhs3,null)" if left_join else None}, unmatched("rhs3"))
    h.right.pipe_input("rhs1", "rhsValue1", 4)  # lhs1 no longer subscribes to rhs1
    h.check({}, unmatched("rhs3"))
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 5)
    joined = {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
    h.check(joined, joined)
    h.left.pipe_input("lhs1", "lhsValue1|rhs2", 6)
    h.check({"lhs1": "(lhsValue1|rhs2,null)" if left_join else None}, unmatched("rhs2"))


@both
def test_the_old_foreign_key_is_unsubscribed(left_join: bool, store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest.shouldUnsubscribeOldForeignKeyIfLeftSideIsUpdated
    h = Harness(left_join, store)
    h.right.pipe_input("rhs1", "rhsValue1", 1)
    h.right.pipe_input("rhs2", "rhsValue2", 2)
    h.check({}, {})
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 3)
    first = {"lhs1": "(lhsValue1|rhs1,rhsValue1)"}
    h.check(first, first)
    h.left.pipe_input("lhs1", "lhsValue1|rhs2", 4)
    second = {"lhs1": "(lhsValue1|rhs2,rhsValue2)"}
    h.check(second, second)
    h.right.pipe_input("rhs1", "rhsValue1Delta", 5)  # no longer joined with lhs1
    h.check({}, second)


@both
def test_an_extractor_of_the_key_and_the_value(left_join: bool, store: str | None) -> None:
    """Kafka 4's BiFunction extractor (``foreign_key_with_key=True``): two
    entries with the same value join different right entries by their keys,
    and a right update reaches only the entry whose foreign key it is."""
    h = Harness(left_join, store, lambda k, v: f"{rhs(v)}-{k}", keyed=True)
    h.right.pipe_input("rhs1-lhs1", "a", 1)
    h.right.pipe_input("rhs1-lhs2", "b", 2)
    h.left.pipe_input("lhs1", "v|rhs1", 3)
    h.left.pipe_input("lhs2", "v|rhs1", 4)
    joined = {"lhs1": "(v|rhs1,a)", "lhs2": "(v|rhs1,b)"}
    h.check(joined, joined)
    h.right.pipe_input("rhs1-lhs1", "a2", 5)
    h.check({"lhs1": "(v|rhs1,a2)"}, {**joined, "lhs1": "(v|rhs1,a2)"})


def test_a_key_and_value_extractor_needs_an_extractor() -> None:
    builder = StreamsBuilder()
    left, right = builder.table("l"), builder.table("r")
    with pytest.raises(TopologyError, match="needs a foreign_key extractor"):
        left.join(right, joiner, foreign_key_with_key=True)


@pytest.mark.parametrize("store", [None, "store"])
def test_a_null_foreign_key_emits_in_a_left_join(store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest.shouldEmitRecordOnNullForeignKeyForLeftJoins
    h = Harness(True, store, extractor=lambda _v: None)
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 1)
    h.check({"lhs1": "(lhsValue1|rhs1,null)"}, {"lhs1": "(lhsValue1|rhs1,null)"})


def subscription_store(driver: TopologyTestDriver) -> Any:
    (name,) = [
        n
        for task in driver._tasks  # test-only peek at the driver's stores
        for n in task.stores
        if "SUBSCRIPTION-STATE-STORE" in n
    ]
    return driver.get_timestamped_key_value_store(name)


@pytest.mark.parametrize("store", [None, "store"])
def test_a_foreign_key_turning_null_unsubscribes_in_a_left_join(store: str | None) -> None:
    # KTableKTableForeignKeyJoinIntegrationTest.shouldEmitRecordWhenOldAndNewFkDiffer
    def extractor(value: str) -> str | None:
        fk = rhs(value)
        return None if fk == "returnNull" else fk

    h = Harness(True, store, extractor)
    subscriptions = subscription_store(h.driver)
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 1)
    h.check({"lhs1": "(lhsValue1|rhs1,null)"}, {"lhs1": "(lhsValue1|rhs1,null)"})
    assert subscriptions.get(("rhs1", "lhs1")) is not None
    h.left.pipe_input("lhs1", "lhsValue1|returnNull", 1)
    h.check({"lhs1": "(lhsValue1|returnNull,null)"}, {"lhs1": "(lhsValue1|returnNull,null)"})
    assert subscriptions.get(("rhs1", "lhs1")) is None


def test_an_inner_join_retracts_when_the_foreign_key_turns_null() -> None:
    # Kafka 4.x SubscriptionSendProcessorSupplier (inner join): a null foreign
    # key is skipped, but the result of the old foreign key is retracted.
    h = Harness(False, "store", lambda v: None if rhs(v) == "none" else rhs(v))
    h.right.pipe_input("rhs1", "rhsValue1", 1)
    h.left.pipe_input("lhs1", "lhsValue1|rhs1", 2)
    h.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)"}, {"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
    h.left.pipe_input("lhs1", "lhsValue1|none", 3)
    h.check({"lhs1": None}, {})
    h.left.pipe_input("lhs2", "lhsValue2|none", 4)  # never joined: nothing
    h.check({}, {})
    assert (
        h.driver._tasks[0].metrics.dropped_records + h.driver._tasks[1].metrics.dropped_records == 2
    )
    h.right.pipe_input("rhs1", "rhsValue1b", 5)  # lhs1 is no longer subscribed
    h.check({}, {})


def test_result_timestamps() -> None:
    # A left update's result is timed with the later of the two sides (Kafka's
    # SubscriptionJoinProcessor); a right update's with the right record.
    h = Harness(True, None)
    h.right.pipe_input("rhs1", "r", 50)
    h.left.pipe_input("lhs1", "a|rhs1", 10)
    h.left.pipe_input("lhs2", "b|rhs1", 70)
    h.left.pipe_input("lhs3", "c|rhs9", 20)  # no match: the left timestamp
    h.right.pipe_input("rhs1", "r2", 30)
    got = [(r.key, r.value, r.timestamp) for r in h.output.read_records_to_list()]
    assert got == [
        ("lhs1", "(a|rhs1,r)", 50),
        ("lhs2", "(b|rhs1,r)", 70),
        ("lhs3", "(c|rhs9,null)", 20),
        ("lhs1", "(a|rhs1,r2)", 30),
        ("lhs2", "(b|rhs1,r2)", 30),
    ]


def test_describe_uses_kafkas_names_and_internal_topics() -> None:
    # KStreamImplTest.shouldSupportForeignKeyTableTableJoinWithKTableFromKStream
    builder = StreamsBuilder()
    left = builder.stream("input1", key_serde=S, value_serde=S).to_table()
    right = builder.stream("input2", key_serde=S, value_serde=S).to_table()
    left.join(right, joiner, foreign_key=rhs).to_stream().to("output", value_serde=S)
    text = builder.build().describe()
    subs = text.split("Sub-topology: ")
    assert len(subs) == 3  # the join splits at its internal topics
    fk, store = "KTABLE-FK-JOIN-", "KSTREAM-TOTABLE-STATE-STORE-"
    sub_topic = f"{fk}SUBSCRIPTION-REGISTRATION-0000000006-topic"
    response_topic = f"{fk}SUBSCRIPTION-RESPONSE-0000000014-topic"
    sub_store = f"{fk}SUBSCRIPTION-STATE-STORE-0000000010"
    expected_first = [
        f"Source: KTABLE-SOURCE-0000000016 (topics: [{response_topic}])",
        f"Processor: {fk}SUBSCRIPTION-RESPONSE-RESOLVER-PROCESSOR-0000000017 "
        f"(stores: [{store}0000000002])",
        f"Processor: {fk}OUTPUT-0000000018 (stores: [])",
        f"Processor: {fk}SUBSCRIPTION-REGISTRATION-0000000007 (stores: [])",
        f"Sink: KTABLE-SINK-0000000008 (topic: {sub_topic})",
        "Processor: KTABLE-TOSTREAM-0000000020 (stores: [])",
    ]
    expected_second = [
        f"Source: KTABLE-SOURCE-0000000009 (topics: [{sub_topic}])",
        f"Processor: {fk}SUBSCRIPTION-PROCESSOR-0000000011 (stores: [{sub_store}])",
        f"Processor: {fk}SUBSCRIPTION-PROCESSOR-0000000012 (stores: [{store}0000000005])",
        f"Processor: {fk}SUBSCRIPTION-PROCESSOR-0000000013 (stores: [{sub_store}])",
        f"Sink: KTABLE-SINK-0000000015 (topic: {response_topic})",
        f"<-- {fk}SUBSCRIPTION-PROCESSOR-0000000012, {fk}SUBSCRIPTION-PROCESSOR-0000000013",
    ]
    for line in expected_first:
        assert line in subs[1], line
    for line in expected_second:
        assert line in subs[2], line


def test_a_named_join_names_its_parts_after_it() -> None:
    text = fk_topology(True, "store", name="fk").describe()
    for part in (
        "Processor: fk-subscription-registration-processor ",
        "Sink: fk-subscription-registration-sink (topic: fk-subscription-registration-topic)",
        "Source: fk-subscription-registration-source ",
        "Processor: fk-subscription-receive (stores: [fk-subscription-store])",
        "Processor: fk-subscription-join-foreign ",
        "Processor: fk-foreign-join-subscription (stores: [fk-subscription-store])",
        "Sink: fk-subscription-response-sink (topic: fk-subscription-response-topic)",
        "Processor: fk-subscription-response-resolver ",
        "Processor: fk-result (stores: [store])",
    ):
        assert part in text, part


def test_default_serdes_and_joining_the_result_again() -> None:
    # KTableKTableForeignKeyJoinScenarioTest.shouldWorkWithDefaultSerdes
    builder = StreamsBuilder()
    a = builder.table("A")
    b = builder.table("B")
    fk_result = a.join(
        b,
        lambda av, bv: f"({av},{bv})",
        foreign_key=lambda v: int(v.split("-")[0]),
        materialized="asdf",
    )
    a.join(fk_result, lambda av, fv: f"({av},{fv})").to_stream().to("output")
    config = {"default.key.serde": INT, "default.value.serde": S}
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("A", INT, S).pipe_input(1, "999-alpha")
        driver.create_input_topic("B", INT, S).pipe_input(999, "beta")
        out = driver.create_output_topic("output", INT, S)
        assert out.read_key_values_to_map() == {1: "(999-alpha,(999-alpha,beta))"}


def test_an_unmaterialized_result_gets_a_store_when_re_grouped() -> None:
    """The result is a source table (Kafka's KTableSource): re-grouping it
    needs old values, which give it a store, so a changed result retracts
    the old one from the aggregate."""
    builder = StreamsBuilder()
    left = builder.table("l", key_serde=S, value_serde=S)
    right = builder.table("r", key_serde=S, value_serde=S)
    result = left.join(right, joiner, foreign_key=rhs)
    result.group_by(lambda k, v: (v, k), key_serde=S, value_serde=S).count().to_stream().to(
        "counts", key_serde=S, value_serde=serdes.Long()
    )
    stores = builder.internal.stores
    assert any(name.startswith("KTABLE-FK-JOIN-OUTPUT-STATE-STORE-") for name in stores)
    with TopologyTestDriver(builder.build(), {"default.value.serde": S}) as driver:
        driver.create_input_topic("r", S, S).pipe_input("x", "X")
        lefts = driver.create_input_topic("l", S, S)
        lefts.pipe_input("k1", "a|x")
        lefts.pipe_input("k1", "b|x")
        counts = driver.create_output_topic("counts", S, serdes.Long())
        assert counts.read_key_values_to_map() == {"(a|x,X)": 0, "(b|x,X)": 1}


# --- a brute-force model ----------------------------------------------------------


def model(left_join: bool, left: dict[str, str], right: dict[str, str]) -> dict[str, str]:
    """The join of the final tables: each left entry with the right entry its
    foreign key names (a left join keeps the unmatched ones)."""
    out = {}
    for key, value in left.items():
        fk = foreign(value)
        match = None if fk is None else right.get(fk)
        if match is not None or left_join:
            out[key] = joiner(value, match)
    return out


def foreign(value: str) -> str | None:
    fk = rhs(value)
    return None if fk == "none" else fk


Op = tuple[str, str, str | None]
ops_strategy = st.lists(
    st.one_of(
        st.tuples(
            st.just("left"),
            st.sampled_from(["l0", "l1", "l2", "l3"]),
            st.one_of(st.none(), st.sampled_from(["a|r0", "b|r1", "c|r2", "d|none", "e|r0"])),
        ),
        st.tuples(
            st.just("right"),
            st.sampled_from(["r0", "r1", "r2"]),
            st.one_of(st.none(), st.sampled_from(["x", "y"])),
        ),
    ),
    max_size=50,
)


def final_tables(ops: list[Op]) -> tuple[dict[str, str], dict[str, str]]:
    tables: dict[str, dict[str, str]] = {"left": {}, "right": {}}
    for side, key, value in ops:
        if value is None:
            tables[side].pop(key, None)
        else:
            tables[side][key] = value
    return tables["left"], tables["right"]


@pytest.mark.parametrize("left_join", [False, True])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy)
def test_random_updates_end_in_the_join_of_the_final_tables(left_join: bool, ops: list[Op]) -> None:
    with TopologyTestDriver(fk_topology(left_join, "joined", foreign)) as driver:
        inputs = {
            "left": driver.create_input_topic("left_table", S, S),
            "right": driver.create_input_topic("right_table", S, S),
        }
        out = driver.create_output_topic("output", S, S)
        for t, (side, key, value) in enumerate(ops):
            inputs[side].pipe_input(key, value, t)
        expected = model(left_join, *final_tables(ops))
        assert dict(driver.get_key_value_store("joined").all()) == expected
        emitted = {k: v for k, v in out.read_key_values_to_map().items() if v is not None}
        assert emitted == expected


def test_embedded_log_run_with_a_restart_matches_the_model(log: EmbeddedLog, log_path: str) -> None:
    # No co-partitioning needed: 3 left partitions against 2 right ones.
    log.create_topic("left_table", partitions=3)
    log.create_topic("right_table", partitions=2)
    log.create_topic("output", partitions=3)
    rng = random.Random(11)
    ops: list[Op] = []
    for _ in range(800):
        if rng.random() < 0.6:
            value = rng.choice([None, f"v{rng.randrange(9)}|r{rng.randrange(30)}", "w|none"])
            ops.append(("left", f"l{rng.randrange(60)}", value))
        else:
            ops.append(("right", f"r{rng.randrange(30)}", rng.choice([None, "x", "y", "z"])))
    config = {
        "application.id": "fk-restart",
        "bootstrap.servers": f"embedded:{log_path}",
        "commit.interval.ms": 0,
    }

    def produce(part: list[Op], start: int) -> None:
        with log.producer() as producer:
            for t, (side, key, value) in enumerate(part, start):
                raw = None if value is None else value.encode()
                producer.produce(f"{side}_table", key.encode(), raw, timestamp=t)

    def run() -> dict[str, Any]:
        with KafkaStreams(fk_topology(True, "joined", foreign), config) as app:
            app.run_until_end(timeout=120)
            return {kv.key: kv.value for kv in app.store("joined").all()}

    produce(ops[:400], 0)
    assert run() == model(True, *final_tables(ops[:400]))
    produce(ops[400:], 400)  # a restart in the middle
    assert run() == model(True, *final_tables(ops))
    topics = log.topics()
    assert "fk-restart-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic" in topics
    assert (
        log.partitions("fk-restart-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic") == 2
    )
    assert log.partitions("fk-restart-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000014-topic") == 3


class _Collect(Node):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, Any]] = []

    def process(self, batch: Batch) -> None:
        self.seen.extend(zip(batch.keys, batch.values, strict=True))


def test_a_response_for_an_outdated_left_value_is_dropped() -> None:
    # Kafka's ResponseJoinProcessorSupplier: an answer carries the hash of the
    # left value that asked; if the left value changed since, the answer is
    # stale (a newer one is on its way) and must not overwrite the result.
    fks = tj.FkSerdes("t", S, S, S, S)
    current = {"lhs1": ("b|r1", 5)}
    node = tj.ResponseJoin(lambda _task: current.get, joiner, False, fks)
    sink = _Collect()
    node.children.append(sink)
    node.init(SimpleNamespace(metrics=None))  # type: ignore[arg-type]
    stale = tj.SubscriptionResponse(fks.value_hash("a|r0"), "x")
    fresh = tj.SubscriptionResponse(fks.value_hash("b|r1"), "y")
    node.process(Batch("t", 0, ["lhs1", "lhs1"], [fresh, stale], [1, 2], [0, 1]))
    assert sink.seen == [("lhs1", "(b|r1,y)")]
    # A deletion's answer (no hash) only counts while the left entry is gone.
    deleted = tj.SubscriptionResponse(None, None)
    node.process(Batch("t", 0, ["lhs1"], [deleted], [3], [2]))
    assert sink.seen == [("lhs1", "(b|r1,y)")]
    del current["lhs1"]
    node.process(Batch("t", 0, ["lhs1"], [deleted], [3], [2]))
    assert sink.seen[-1] == ("lhs1", None)


def test_the_right_side_may_be_a_filtered_table() -> None:
    # The subscription side reads the right table through its value getter and
    # sees its changes after the filter (a filtered-out value deletes).
    builder = StreamsBuilder()
    left = builder.table("left_table", key_serde=S, value_serde=S)
    right = builder.table("right_table", key_serde=S, value_serde=S).filter(
        lambda _k, v: v != "hidden"
    )
    left.left_join(right, joiner, foreign_key=rhs, materialized=Materialized("j", value_serde=S))
    with TopologyTestDriver(builder.build()) as driver:
        lt = driver.create_input_topic("left_table", S, S)
        rt = driver.create_input_topic("right_table", S, S)
        store = driver.get_key_value_store("j")
        rt.pipe_input("rhs1", "hidden", 1)
        lt.pipe_input("lhs1", "a|rhs1", 2)
        assert dict(store.all()) == {"lhs1": "(a|rhs1,null)"}
        rt.pipe_input("rhs1", "shown", 3)
        assert dict(store.all()) == {"lhs1": "(a|rhs1,shown)"}
        rt.pipe_input("rhs1", "hidden", 4)
        assert dict(store.all()) == {"lhs1": "(a|rhs1,null)"}


def test_a_joiner_with_key_gets_the_left_tables_key() -> None:
    builder = StreamsBuilder()
    orders = builder.table("orders", key_serde=S, value_serde=S)
    users = builder.table("users", key_serde=S, value_serde=S)
    orders.join(
        users, lambda key, order, user: f"{key}:{order}@{user}", foreign_key=rhs, with_key=True
    ).to_stream().to("out", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("users", S, S).pipe_input("u1", "Ann", 1)
        driver.create_input_topic("orders", S, S).pipe_input("o1", "book|u1", 2)
        assert driver.create_output_topic("out", S, S).read_values_to_list() == ["o1:book|u1@Ann"]


def _by_digit(key: str, _value: Any, count: int) -> int:
    """Topics written by a partitioner of their own: the key's last digit."""
    return int(key[-1]) % count


@pytest.mark.parametrize("with_partitioners", [True, False])
def test_table_joined_partitioners_find_tables_written_by_their_own(
    log: EmbeddedLog, log_path: str, with_partitioners: bool
) -> None:
    # Kafka's TableJoined.with(partitioner, otherPartitioner): both tables'
    # topics placed by _by_digit, not murmur2. Given the partitioners, each
    # subscription meets its customer's partition and each answer its
    # order's; without them, subscriptions go where murmur2 puts the
    # customer keys and miss the customers placed elsewhere.
    for topic in ("orders", "customers", "out"):
        log.create_topic(topic, partitions=2)
    customers = {f"c{i}": f"name{i}" for i in range(10)}
    orders = {f"o{i}": f"item{i}|c{(i * 3) % 10}" for i in range(20)}
    with log.producer() as producer:
        for key, value in customers.items():
            producer.produce(
                "customers", key.encode(), value.encode(), partition=_by_digit(key, None, 2)
            )
        for key, value in orders.items():
            producer.produce(
                "orders", key.encode(), value.encode(), partition=_by_digit(key, None, 2)
            )
    builder = StreamsBuilder()
    left = builder.table("orders", key_serde=S, value_serde=S)
    right = builder.table("customers", key_serde=S, value_serde=S)
    partitioners = (
        {"partitioner": _by_digit, "other_partitioner": _by_digit} if with_partitioners else {}
    )
    joined_store = Materialized("joined", value_serde=S)
    left.join(right, joiner, foreign_key=rhs, materialized=joined_store, **partitioners)
    config = {
        "application.id": f"fk-parts-{with_partitioners}",
        "bootstrap.servers": f"embedded:{log_path}",
    }
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end(timeout=60)
        joined = {kv.key: kv.value for kv in app.store("joined").all()}
    expected = {key: joiner(value, customers[rhs(value)]) for key, value in orders.items()}
    if with_partitioners:
        assert joined == expected
    else:
        assert joined != expected and set(joined) < set(expected)


def test_table_joined_partitioners_are_a_foreign_key_joins() -> None:
    builder = StreamsBuilder()
    left = builder.table("orders", key_serde=S, value_serde=S)
    right = builder.table("customers", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="belong to a foreign-key join"):
        left.join(right, joiner, partitioner=_by_digit)
