"""KStream-KStream windowed joins: inner, left and outer, as Kafka Streams 4.x.

Golden cases follow Kafka's KStreamKStreamJoinTest, KStreamKStreamLeftJoinTest,
KStreamKStreamOuterJoinTest and the stream-stream join-semantics table of the
Kafka Streams developer guide (each test names its source); the expected
outputs were worked out from those sources, not copied from strom."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, TopologyError
from strom.kstream import JoinWindows, KStream
from strom.state import Stores
from strom.testing import TopologyTestDriver
from strom.testing.driver import TestInputTopic, TestOutputTopic

INT, S, L = serdes.Integer(), serdes.String(), serdes.Long()


def joiner(left: Any, right: Any) -> str:
    """Kafka's MockValueJoiner.TOSTRING_JOINER: ``left+right``, None as null."""
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


def topology(kind: str, windows: JoinWindows, *, right_serde: Any = S) -> StreamsBuilder:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=right_serde)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    join(right, joiner, windows).to("out", value_serde=S)
    return builder


class Run:
    """A driver with the ``left``/``right`` inputs and the ``out`` output."""

    def __init__(self, builder: StreamsBuilder, right_serde: Any = S) -> None:
        self.driver = TopologyTestDriver(builder.build())
        self.left: TestInputTopic = self.driver.create_input_topic("left", INT, S)
        self.right: TestInputTopic = self.driver.create_input_topic("right", INT, right_serde)
        self.out: TestOutputTopic = self.driver.create_output_topic("out", INT, S)

    def emitted(self) -> list[tuple[Any, Any, int]]:
        return [(r.key, r.value, r.timestamp) for r in self.out.read_records_to_list()]

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *_: object) -> None:
        self.driver.close()


# --- JoinWindows ---------------------------------------------------------------


def test_join_windows_factories_and_bounds() -> None:
    # Kafka's JoinWindows: before = after = the time difference; size =
    # before + after; before/after may be negative while their sum is not.
    windows = JoinWindows.of_time_difference_and_grace(timedelta(seconds=5), 1_000)
    assert (windows.before_ms, windows.after_ms, windows.grace_ms) == (5_000, 5_000, 1_000)
    assert windows.size_ms == 10_000 and windows.retention_ms() == 11_000
    assert JoinWindows.of_time_difference_with_no_grace(7).grace_ms == 0
    shifted = JoinWindows.of_time_difference_with_no_grace(10).before(-5)
    assert (shifted.before_ms, shifted.after_ms, shifted.size_ms) == (-5, 10, 5)
    assert JoinWindows.of_time_difference_with_no_grace(10).after(0).after_ms == 0


@pytest.mark.parametrize(
    "make",
    [
        lambda: JoinWindows.of_time_difference_with_no_grace(-1),
        lambda: JoinWindows.of_time_difference_and_grace(10, -1),
        lambda: JoinWindows.of_time_difference_with_no_grace(10).before(-11),
        lambda: JoinWindows.of_time_difference_with_no_grace(10).after(-11),
        lambda: JoinWindows.of_time_difference_with_no_grace("10"),
    ],
)
def test_join_windows_reject_what_kafka_rejects(make: Any) -> None:
    with pytest.raises(ConfigError):
        make()


def test_join_arguments_are_checked() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    table = builder.table("table", key_serde=INT, value_serde=S, materialized="t")
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    with pytest.raises(TopologyError, match="join_windows"):
        left.join(right, joiner)
    with pytest.raises(TopologyError, match="outer join with a table"):
        left.outer_join(table, joiner, windows)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="JoinWindows belong"):
        left.join(table, joiner, windows)
    with pytest.raises(TopologyError, match="same StreamsBuilder"):
        left.join(StreamsBuilder().stream("elsewhere"), joiner, windows)
    with pytest.raises(TopologyError, match="callable"):
        left.join(right, "joiner", windows)  # type: ignore[arg-type]


# --- topology ------------------------------------------------------------------


def test_describe_names_nodes_and_stores_as_kafka() -> None:
    # KStreamKStreamJoinTest's expected topologies: two KSTREAM-WINDOWED-
    # nodes, the JOINTHIS/JOINOTHER processors (OUTERTHIS/OUTEROTHER for the
    # outer sides) each reading the other side's window store, a MERGE, and
    # for left/outer joins the shared KSTREAM-OUTERSHARED-<n>-store.
    windows = JoinWindows.of_time_difference_with_no_grace(100)
    inner = topology("inner", windows).build().describe()
    assert (
        "    Processor: KSTREAM-WINDOWED-0000000002 (stores: [KSTREAM-JOINTHIS-0000000004-store])\n"
        "      --> KSTREAM-JOINTHIS-0000000004\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
    ) in inner
    assert (
        "    Processor: KSTREAM-JOINTHIS-0000000004 "
        "(stores: [KSTREAM-JOINOTHER-0000000005-store])\n"
        "      --> KSTREAM-MERGE-0000000006\n"
    ) in inner
    assert (
        "    Processor: KSTREAM-MERGE-0000000006 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000007\n"
        "      <-- KSTREAM-JOINTHIS-0000000004, KSTREAM-JOINOTHER-0000000005\n"
    ) in inner
    left = topology("left", windows).build().describe()
    assert (
        "Processor: KSTREAM-JOINTHIS-0000000004 (stores: [KSTREAM-OUTEROTHER-0000000005-store, "
        "KSTREAM-OUTERSHARED-0000000004-store])"
    ) in left
    outer = topology("outer", windows).build().describe()
    assert (
        "Processor: KSTREAM-OUTEROTHER-0000000005 (stores: [KSTREAM-OUTERTHIS-0000000004-store, "
        "KSTREAM-OUTERSHARED-0000000004-store])"
    ) in outer


def test_stores_are_retained_duplicate_window_stores_sized_by_the_windows() -> None:
    windows = JoinWindows.of_time_difference_and_grace(100, 30).before(20)
    internal = topology("left", windows).build()._internal
    store = internal.stores["KSTREAM-JOINTHIS-0000000004-store"]
    assert (store.kind, store.retain_duplicates, store.logged) == ("window", True, True)
    assert (store.window_size_ms, store.retention_ms) == (120, 150)
    assert internal.stores["KSTREAM-OUTERSHARED-0000000004-store"].kind == "key_value"


def test_named_join_and_store_names_follow_stream_joined() -> None:
    # KStreamKStreamJoinTest.shouldCreateRepartitionTopicsWithUserProvidedName:
    # a name gives <name>-this-windowed, <name>-this-join, <name>-merge and the
    # repartition topic <name>-left-repartition; a store name gives
    # <store>-this-join-store (and -outer-... for outer sides).
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S).select_key(lambda k, v: k)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    left.outer_join(
        right,
        joiner,
        JoinWindows.of_time_difference_with_no_grace(10),
        name="first-join",
        store_name="store",
    ).to("out", value_serde=S)
    text = builder.build().describe()
    for node in (
        "first-join-left-repartition-source",
        "first-join-this-windowed",
        "first-join-other-windowed",
        "first-join-outer-this-join",
        "first-join-outer-other-join",
        "first-join-merge",
    ):
        assert f": {node} " in text
    assert "(topic: first-join-left-repartition)" in text
    # In the order Kafka prints them (a Java HashSet's).
    assert "stores: [store-outer-shared-join-store, store-outer-other-join-store]" in text


def test_a_rekeyed_stream_is_repartitioned_once_per_join_input() -> None:
    # KStreamKStreamJoinTest.shouldReuseRepartitionTopicWithGeneratedName:
    # joining the same re-keyed stream twice reuses its repartition topic.
    builder = StreamsBuilder()
    source = builder.stream("topic", key_serde=INT, value_serde=S)
    topic2, topic3 = builder.stream("topic2"), builder.stream("topic3")
    mapped = source.map(lambda k, v: (v, k))
    windows = JoinWindows.of_time_difference_with_no_grace(100)
    mapped.join(topic2, joiner, windows).to("out-one")
    mapped.join(topic3, joiner, windows).to("out-to")
    topology_ = builder.build()
    internal = topology_._internal
    assert internal.repartition_topics == {"KSTREAM-MAP-0000000003-repartition"}
    text = topology_.describe()
    assert "KSTREAM-WINDOWED-0000000016" in text and "KSTREAM-JOINTHIS-0000000018" in text


# --- inner join ----------------------------------------------------------------


def test_inner_join_emits_every_match_from_both_sides() -> None:
    # KStreamKStreamJoinTest.testJoin (window 100 ms, no grace, all at ts 0).
    with Run(topology("inner", JoinWindows.of_time_difference_with_no_grace(100))) as run:
        for k in (0, 1):
            run.left.pipe_input(k, f"A{k}", 0)
        assert run.emitted() == []
        for k in (0, 1):
            run.right.pipe_input(k, f"a{k}", 0)
        assert run.emitted() == [(0, "A0+a0", 0), (1, "A1+a1", 0)]
        for k in (0, 1, 2, 3):
            run.left.pipe_input(k, f"B{k}", 0)
        assert run.emitted() == [(0, "B0+a0", 0), (1, "B1+a1", 0)]
        for k in (0, 1, 2, 3):
            run.right.pipe_input(k, f"b{k}", 0)
        assert run.emitted() == [
            (0, "A0+b0", 0),
            (0, "B0+b0", 0),
            (1, "A1+b1", 0),
            (1, "B1+b1", 0),
            (2, "B2+b2", 0),
            (3, "B3+b3", 0),
        ]
        for k in (0, 1):
            run.right.pipe_input(k, f"c{k}", 0)
        assert run.emitted() == [
            (0, "A0+c0", 0),
            (0, "B0+c0", 0),
            (1, "A1+c1", 0),
            (1, "B1+c1", 0),
        ]


def test_outer_join_with_long_grace_emits_only_matches_while_windows_are_open() -> None:
    # KStreamKStreamJoinTest.testOuterJoin (grace 24 h): nothing is joined
    # with null while the windows are open.
    windows = JoinWindows.of_time_difference_and_grace(100, timedelta(hours=24))
    with Run(topology("outer", windows)) as run:
        for k in (0, 1):
            run.left.pipe_input(k, f"A{k}", 0)
        for k in (0, 1):
            run.right.pipe_input(k, f"a{k}", 0)
        for k in (0, 1, 2, 3):
            run.left.pipe_input(k, f"B{k}", 0)
        assert run.emitted() == [(0, "A0+a0", 0), (1, "A1+a1", 0), (0, "B0+a0", 0), (1, "B1+a1", 0)]


def test_inner_join_window_bounds_are_inclusive_and_result_time_is_the_max() -> None:
    # KStreamKStreamJoinTest.testWindowing (upper and lower window bounds):
    # a left record at t joins right records in [t - 100, t + 100].
    with Run(topology("inner", JoinWindows.of_time_difference_with_no_grace(100))) as run:
        run.left.pipe_input(0, "A", 1_000)
        for ts in (899, 900, 1_000, 1_100, 1_101):
            run.right.pipe_input(0, f"a{ts}", ts)
        assert run.emitted() == [
            (0, "A+a900", 1_000),
            (0, "A+a1000", 1_000),
            (0, "A+a1100", 1_100),
        ]
        # A late left record joins what the right side still holds.
        run.left.pipe_input(0, "B", 1_050)
        assert run.emitted() == [
            (0, "B+a1000", 1_050),
            (0, "B+a1100", 1_100),
            (0, "B+a1101", 1_101),
        ]


@pytest.mark.parametrize(
    ("windows", "joined"),
    [
        # testAsymmetricWindowingAfter: before(0) -> right in [t, t + 100]
        (JoinWindows.of_time_difference_with_no_grace(0).after(100), [1_000, 1_010, 1_050, 1_100]),
        # testAsymmetricWindowingBefore: after(0) -> right in [t - 100, t]
        (JoinWindows.of_time_difference_with_no_grace(0).before(100), [900, 950, 1_000]),
        # before(-20) and after(100): right in [t + 20, t + 100]
        (JoinWindows.of_time_difference_with_no_grace(100).before(-20), [1_050, 1_100]),
    ],
)
def test_asymmetric_windows(windows: JoinWindows, joined: list[int]) -> None:
    with Run(topology("inner", windows)) as run:
        run.left.pipe_input(0, "A", 1_000)
        # In time order, so none is late for the right side's own store.
        for ts in (899, 900, 950, 1_000, 1_010, 1_050, 1_100, 1_101):
            run.right.pipe_input(0, f"a{ts}", ts)
        assert run.emitted() == [(0, f"A+a{ts}", max(ts, 1_000)) for ts in joined]


def test_null_keys_and_values_are_dropped_and_counted() -> None:
    # KStreamKStreamJoinTest.shouldLogAndMeterOnSkippedRecordsWithNullValue:
    # inner joins skip null keys and null values and count them as dropped.
    with Run(topology("inner", JoinWindows.of_time_difference_with_no_grace(100))) as run:
        run.left.pipe_input(0, None, 0)
        run.left.pipe_input(None, "x", 0)
        run.right.pipe_input(0, None, 0)
        run.right.pipe_input(0, "a", 1)
        assert run.emitted() == []
        assert run.driver.metrics()["dropped-records"] == 3


# --- the developer guide's join-semantics table --------------------------------

# Join semantics table of the Kafka Streams developer guide (KStream-KStream
# join): one key, window 15 (the guide's "15 seconds", here 15 ms) and grace 5;
# None marks the table's null (null-value) records.
TABLE = [
    (1, "L", None, []),
    (2, "R", None, []),
    (3, "L", "A", []),
    (4, "R", "a", ["A+a"]),
    (5, "L", "B", ["B+a"]),
    (6, "R", "b", ["A+b", "B+b"]),
    (7, "L", None, []),
    (8, "R", None, []),
    (9, "L", "C", ["C+a", "C+b"]),
    (10, "R", "c", ["A+c", "B+c", "C+c"]),
    (11, "R", None, []),
    (12, "L", None, []),
    (13, "R", None, []),
    (14, "R", "d", ["A+d", "B+d", "C+d"]),
    (15, "L", "D", ["D+a", "D+b", "D+c", "D+d"]),
]


@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_developer_guide_join_semantics_table(kind: str) -> None:
    windows = JoinWindows.of_time_difference_and_grace(15, 5)
    with Run(topology(kind, windows)) as run:
        for ts, side, value, expected in TABLE:
            (run.left if side == "L" else run.right).pipe_input(0, value, ts)
            assert [v for _k, v, _t in run.emitted()] == expected, ts
        assert run.driver.metrics()["dropped-records"] == 7  # the null values
        # The table's tail. The guide lists [E, null] at 60, [F, null] at 80
        # and (outer) [null, f] at 100; Kafka's code emits once stream time
        # is *past* ts + 15 + 5, so the triggering records here come 1-3 ms
        # later than in the table.
        tail = [
            (40, "L", "E", []),
            (61, "L", "F", ["E+null"]),
            (82, "R", "f", ["F+null"]),
            (103, "L", "G", ["null+f"]),
        ]
        for ts, side, value, expected in tail:
            (run.left if side == "L" else run.right).pipe_input(0, value, ts)
            wanted = {"inner": [], "left": [e for e in expected if e != "null+f"]}.get(
                kind, expected
            )
            assert [v for _k, v, _t in run.emitted()] == wanted, ts


# --- left join -----------------------------------------------------------------


def test_left_join_emits_unmatched_records_once_their_window_closes() -> None:
    # KStreamKStreamLeftJoinTest.testOrdering: the closed record first, then
    # the new join result.
    with Run(topology("left", JoinWindows.of_time_difference_with_no_grace(100))) as run:
        run.left.pipe_input(0, "A0", 0)
        run.left.pipe_input(1, "A1", 100)
        assert run.emitted() == []
        run.right.pipe_input(1, "a1", 110)
        assert run.emitted() == [(0, "A0+null", 0), (1, "A1+a1", 110)]


def test_left_join_waits_for_the_grace_period() -> None:
    # KStreamKStreamLeftJoinTest.testGracePeriod (window 100, grace 10).
    windows = JoinWindows.of_time_difference_and_grace(100, 10)
    with Run(topology("left", windows)) as run:
        run.left.pipe_input(0, "A0", 0)
        run.left.pipe_input(1, "A1", 0)
        for k in (0, 1, 2, 3):
            run.right.pipe_input(k, f"a{k}", 101)  # outside the windows, not closed
        assert run.emitted() == []
        run.right.pipe_input(0, "dummy", 1_201)
        assert run.emitted() == [(0, "A0+null", 0), (1, "A1+null", 0)]


def test_left_join_duplicates() -> None:
    # KStreamKStreamLeftJoinTest.testLeftJoinDuplicates.
    windows = JoinWindows.of_time_difference_and_grace(100, 10)
    with Run(topology("left", windows)) as run:
        run.left.pipe_input(0, "A0", 0)
        run.left.pipe_input(0, "A0-0", 0)
        run.right.pipe_input(1, "a0", 111)
        run.right.pipe_input(2, "dummy", 500)
        assert run.emitted() == [(0, "A0+null", 0), (0, "A0-0+null", 0)]
        run.left.pipe_input(2, "A2", 1_000)
        run.left.pipe_input(2, "A2-0", 1_000)
        run.right.pipe_input(2, "a2", 1_001)
        assert run.emitted() == [(2, "A2+a2", 1_001), (2, "A2-0+a2", 1_001)]
        run.right.pipe_input(3, "a3", 315)  # joined ones are never emitted again
        assert run.emitted() == []


@pytest.mark.parametrize("trigger", ["left", "right"])
def test_left_join_closed_records_are_emitted_by_either_side(trigger: str) -> None:
    # KStreamKStreamLeftJoinTest.testLeftExpiredNonJoinedRecordsAreEmittedBy
    # TheLeftProcessor / ...ByTheRightProcessor.
    windows = JoinWindows.of_time_difference_and_grace(100, 0)
    with Run(topology("left", windows)) as run:
        run.left.pipe_input(0, "A0", 1)
        run.left.pipe_input(1, "A1", 2)
        run.left.pipe_input(0, "A0-0", 3)
        run.right.pipe_input(1, "a1", 3)
        assert run.emitted() == [(1, "A1+a1", 3)]
        getattr(run, trigger).pipe_input(2, "dummy", 401)
        assert run.emitted() == [(0, "A0+null", 1), (0, "A0-0+null", 3)]


def test_left_join_never_emits_unmatched_right_records() -> None:
    # KStreamKStreamLeftJoinTest.testRightNonJoinedRecordsAreNeverEmittedBy...
    with Run(topology("left", JoinWindows.of_time_difference_with_no_grace(100))) as run:
        run.right.pipe_input(0, "A0", 1)
        run.right.pipe_input(1, "A1", 2)
        run.left.pipe_input(1, "a1", 3)
        assert run.emitted() == [(1, "a1+A1", 3)]
        run.right.pipe_input(2, "dummy", 401)
        run.left.pipe_input(2, "dummy", 402)
        assert run.emitted() == [(2, "dummy+dummy", 402)]


def test_left_join_asymmetric_window() -> None:
    # KStreamKStreamLeftJoinTest.shouldNotEmitLeftJoinResultForAsymmetricWindow.
    windows = JoinWindows.of_time_difference_with_no_grace(100).before(0)
    with Run(topology("left", windows)) as run:
        run.left.pipe_input(0, "A0", 0)
        run.left.pipe_input(1, "A1", 1)
        run.right.pipe_input(0, "a0", 100)
        assert run.emitted() == [(0, "A0+a0", 100)]
        run.right.pipe_input(1, "a1", 102)
        assert run.emitted() == [(1, "A1+null", 1)]


def test_left_join_null_key_is_joined_with_none_at_once() -> None:
    # KIP-962 (Kafka >= 3.7): a left record with a null key cannot match, so
    # a left/outer join emits it at once; a null value is dropped.
    with Run(topology("left", JoinWindows.of_time_difference_with_no_grace(100))) as run:
        run.left.pipe_input(None, "x", 5)
        run.left.pipe_input(0, None, 6)
        run.right.pipe_input(None, "y", 7)  # the right side is not outer here
        assert run.emitted() == [(None, "x+null", 5)]
        assert run.driver.metrics()["dropped-records"] == 2


# --- outer join ----------------------------------------------------------------


@pytest.mark.parametrize("trigger", ["left", "right"])
def test_outer_join_emits_unmatched_right_records(trigger: str) -> None:
    # KStreamKStreamOuterJoinTest.testRightExpiredNonJoinedRecordsAreEmittedBy
    # TheLeftProcessor / ...ByTheRightProcessor (right values are Longs).
    builder = topology("outer", JoinWindows.of_time_difference_with_no_grace(100), right_serde=L)
    with Run(builder, right_serde=L) as run:
        run.right.pipe_input(0, 10, 1)
        run.right.pipe_input(1, 11, 2)
        run.right.pipe_input(0, 12, 3)
        run.left.pipe_input(1, "A1", 3)
        assert run.emitted() == [(1, "A1+11", 3)]
        dummy = "dummy" if trigger == "left" else 100
        getattr(run, trigger).pipe_input(2, dummy, 401)
        assert run.emitted() == [(0, "null+10", 1), (0, "null+12", 3)]


def test_outer_join_grace_period_and_emission_order() -> None:
    # KStreamKStreamOuterJoinTest.testGracePeriod: at equal timestamps the
    # right side's entries come first (Kafka's store key ordering).
    windows = JoinWindows.of_time_difference_and_grace(100, 10)
    with Run(topology("outer", windows, right_serde=L), right_serde=L) as run:
        run.left.pipe_input(0, "A0", 0)
        run.right.pipe_input(1, 11, 0)
        run.left.pipe_input(1, "A1", 101)
        run.right.pipe_input(0, 10, 101)
        assert run.emitted() == []
        run.right.pipe_input(0, 100, 112)
        assert run.emitted() == [(1, "null+11", 0), (0, "A0+null", 0)]


def test_outer_join_asymmetric_windows_close_per_side() -> None:
    # KStreamKStreamOuterJoinTest.testEmitAllNonJoinedResultsForAsymmetricWindow:
    # before 5, after 20: right records close 5 ms after their time, left 20.
    windows = JoinWindows.of_time_difference_with_no_grace(5).after(20)
    with Run(topology("outer", windows, right_serde=L), right_serde=L) as run:
        run.left.pipe_input(0, "A0", 29)
        run.left.pipe_input(1, "A1", 30)
        run.right.pipe_input(2, 12, 31)
        run.right.pipe_input(3, 13, 36)
        assert run.emitted() == []
        run.right.pipe_input(4, 14, 37)
        assert run.emitted() == [(2, "null+12", 31)]
        run.right.pipe_input(5, 15, 50)
        assert run.emitted() == [(0, "A0+null", 29), (3, "null+13", 36), (4, "null+14", 37)]


def test_a_match_before_the_window_closes_suppresses_the_null_result() -> None:
    # KIP-633's spurious-result fix: an out-of-order match inside the grace
    # period removes the waiting record, which is then never joined with null.
    windows = JoinWindows.of_time_difference_and_grace(10, 50)
    with Run(topology("outer", windows)) as run:
        run.left.pipe_input(0, "A", 100)
        run.right.pipe_input(1, "b", 140)  # past A's window, inside its grace
        run.right.pipe_input(0, "a", 105)  # out of order: matches A
        assert run.emitted() == [(0, "A+a", 105)]
        run.left.pipe_input(2, "dummy", 300)
        assert run.emitted() == [(1, "null+b", 140)]


def test_late_records_out_of_retention_are_dropped_from_the_store_and_counted() -> None:
    # Kafka's window stores drop records older than stream time - retention
    # (retention = before + after + grace) and count them as dropped records;
    # such a record still joins what the other side holds.
    windows = JoinWindows.of_time_difference_and_grace(10, 5)  # retention 25
    with Run(topology("inner", windows)) as run:
        run.left.pipe_input(0, "A", 100)
        run.right.pipe_input(0, "a", 100)
        assert run.emitted() == [(0, "A+a", 100)]
        run.left.pipe_input(1, "B", 200)  # the left store's stream time: 200
        run.left.pipe_input(0, "late", 105)  # 105 <= 200 - 25: not stored
        assert run.emitted() == [(0, "late+a", 105)]
        assert run.driver.metrics()["dropped-records"] == 1
        # Neither A (expired from the left store) nor the late record (never
        # stored) is there for a right record to find.
        run.right.pipe_input(0, "a2", 110)
        assert run.emitted() == []


@pytest.mark.parametrize(("stored_at", "joins"), [(100, False), (101, True)])
def test_a_store_hides_records_at_or_before_its_stream_time_minus_retention(
    stored_at: int, joins: bool
) -> None:
    # Kafka's segmented window stores fetch from max(from, observed stream
    # time - retention + 1): with retention 20 and the right store at 120, a
    # record at 100 is gone and one at 101 is still there.
    windows = JoinWindows.of_time_difference_with_no_grace(10)  # retention 20
    with Run(topology("inner", windows)) as run:
        run.right.pipe_input(0, "a", stored_at)
        run.right.pipe_input(1, "b", 120)
        run.left.pipe_input(0, "A", 105)
        assert run.emitted() == ([(0, "A+a", 105)] if joins else [])


def test_out_of_order_unmatched_record_past_its_window_is_emitted_at_once() -> None:
    # KStreamKStreamJoin (Kafka 4.x): an unmatched left record whose window
    # end is already behind stream time is joined with None immediately
    # (see KStreamKStreamLeftJoinTest.testLowerWindowBound's comment).
    windows = JoinWindows.of_time_difference_and_grace(10, 100)
    with Run(topology("left", windows)) as run:
        run.left.pipe_input(1, "X", 500)
        run.left.pipe_input(0, "A", 200)
        assert run.emitted() == [(0, "A+null", 200)]


# --- self-joins ----------------------------------------------------------------


def self_join_topology() -> StreamsBuilder:
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.join(
        stream, lambda a, b: f"{a}+{b}", JoinWindows.of_time_difference_with_no_grace(100)
    ).to("out", value_serde=S)
    return builder


SELF_INPUT = [("A", "1", 1), ("B", "1", 2), ("A", "2", 3), ("B", "2", 4), ("B", "3", 5)]
# Kafka's unoptimized self-join (KStreamKStreamSelfJoinTest compares the
# optimized join with it): each record passes the left side (joining what the
# right store already holds), then the right side (joining the left store,
# which now holds the record itself).
SELF_EXPECTED = [
    ("A", "1+1", 1),
    ("B", "1+1", 2),
    ("A", "2+1", 3),
    ("A", "1+2", 3),
    ("A", "2+2", 3),
    ("B", "2+1", 4),
    ("B", "1+2", 4),
    ("B", "2+2", 4),
    ("B", "3+1", 5),
    ("B", "3+2", 5),
    ("B", "1+3", 5),
    ("B", "2+3", 5),
    ("B", "3+3", 5),
]


def test_self_join() -> None:
    with TopologyTestDriver(self_join_topology().build()) as driver:
        source = driver.create_input_topic("in", S, S)
        for key, value, ts in SELF_INPUT:
            source.pipe_input(key, value, ts)
        out = driver.create_output_topic("out", S, S)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == (
            SELF_EXPECTED
        )


def app_config(log_path: str, app: str = "ssjoin") -> dict[str, Any]:
    return {"application.id": app, "bootstrap.servers": f"embedded:{log_path}"}


def read_all(log: EmbeddedLog, topic: str, key_serde: Any, value_serde: Any) -> list[Any]:
    return [
        (
            key_serde.deserialize(topic, record.key),
            value_serde.deserialize(topic, record.value),
            record.timestamp,
        )
        for partition, end in sorted(log.end_offsets(topic).items())
        for record in log.read(topic, partition, 0, end)
    ]


def test_self_join_on_the_embedded_log_processes_record_by_record(
    log: EmbeddedLog, log_path: str
) -> None:
    # The runtime takes whole batches; the fork feeding both sides must still
    # hand over one record at a time to match Kafka (and the driver).
    log.create_topic("in")
    log.create_topic("out")
    with log.producer() as producer:
        for key, value, ts in SELF_INPUT:
            producer.produce("in", key.encode(), value.encode(), timestamp=ts)
    with KafkaStreams(self_join_topology().build(), app_config(log_path)) as app:
        app.run_until_end(timeout=60)
    assert read_all(log, "out", S, S) == SELF_EXPECTED


# --- co-partitioning, repartitioning, restarts -----------------------------------


def test_mismatched_partition_counts_fail_before_processing(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("left", partitions=2)
    log.create_topic("right", partitions=3)
    log.create_topic("out")
    builder = topology("inner", JoinWindows.of_time_difference_with_no_grace(10))
    app = KafkaStreams(builder.build(), app_config(log_path))
    with pytest.raises(TopologyError, match=r"co-partitioned.*left \(2\).*right \(3\)"):
        app.run_until_end(timeout=30)
    assert sum(log.end_offsets("out").values()) == 0


def rekeyed_join() -> StreamsBuilder:
    # Left values are "key:payload"; the join key comes out of the value.
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=S, value_serde=S).select_key(
        lambda _k, v: v.split(":")[0]
    )
    right = builder.stream("right", key_serde=S, value_serde=S)
    left.left_join(right, joiner, JoinWindows.of_time_difference_and_grace(10, 5), key_serde=S).to(
        "out", key_serde=S, value_serde=S
    )
    return builder


def test_a_key_changing_operation_inserts_a_repartition_topic(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("left", partitions=2)
    log.create_topic("right", partitions=3)  # fine: the repartition topic gets 3
    log.create_topic("out")
    with log.producer() as producer:
        producer.produce("left", b"x", b"k1:A", timestamp=100)
        producer.produce("right", b"k1", b"a", timestamp=105)
        producer.produce("left", b"y", b"k2:B", timestamp=110)
        producer.produce("right", b"k3", b"c", timestamp=200)
    topology_ = rekeyed_join().build()
    assert topology_._internal.repartition_topics == {"KSTREAM-KEY-SELECT-0000000001-repartition"}
    with KafkaStreams(topology_, app_config(log_path)) as app:
        app.run_until_end(timeout=60)
    assert log.partitions("ssjoin-KSTREAM-KEY-SELECT-0000000001-repartition") == 3
    results = sorted(read_all(log, "out", S, S))
    assert ("k1", "k1:A+a", 105) in results
    # k2 closes only once stream time in its task passes 110 + 10 + 5.
    assert all(key in ("k1", "k2") for key, _v, _t in results)


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_null_keys_from_a_key_change_reach_left_joins_only(kind: str) -> None:
    # KIP-962 (Kafka >= 3.7): repartition topics upstream of a left/outer join
    # keep null keys, which the join then emits with None at once; upstream of
    # an inner join they are filtered out.
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=S, value_serde=S).select_key(
        lambda _k, v: v.split(":")[0] or None
    )
    right = builder.stream("right", key_serde=S, value_serde=S)
    join = left.left_join if kind == "left" else left.join
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    join(right, joiner, windows, key_serde=S).to("out", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("right", S, S).pipe_input("k", "a", 5)
        driver.create_input_topic("left", S, S).pipe_key_value_list([("x", ":A"), ("y", "k:B")])
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
    assert out == ([(None, ":A+null")] if kind == "left" else []) + [("k", "k:B+a")]


RESTART_INPUT = [
    ("left", 0, "A", 100),
    ("right", 1, "b", 102),
    ("left", 2, "C", 104),
    ("right", 0, "a", 108),
    ("left", 1, "B", 95),
    ("right", 3, "d", 130),
    ("left", 3, "D", 131),
    ("right", 2, "c", 90),
    ("left", 4, "E", 200),
    ("right", 5, "f", 260),
    ("left", 6, "late", 150),
    ("right", 4, "e", 300),
]


def restart_topology() -> StreamsBuilder:
    return topology("outer", JoinWindows.of_time_difference_and_grace(10, 20))


def produce_joined(log: EmbeddedLog, rows: list[tuple[str, int, str, int]]) -> None:
    with log.producer() as producer:
        for topic, key, value, ts in rows:
            producer.produce(topic, INT.serialize(topic, key), value.encode(), timestamp=ts)


@pytest.mark.parametrize("split", [3, 6, 9])
def test_restart_resumes_with_the_same_results(
    log: EmbeddedLog, log_path: str, tmp_path: Any, split: int
) -> None:
    # One uninterrupted run against a run stopped after `split` records and
    # restarted: stores, stream time and the outer-join store carry over.
    expected_log = EmbeddedLog(str(tmp_path / "reference"))
    for one in (log, expected_log):
        for topic in ("left", "right", "out"):
            one.create_topic(topic)
    produce_joined(expected_log, RESTART_INPUT)
    with KafkaStreams(restart_topology().build(), app_config(str(tmp_path / "reference"))) as app:
        app.run_until_end(timeout=60)
    expected = read_all(expected_log, "out", INT, S)

    produce_joined(log, RESTART_INPUT[:split])
    with KafkaStreams(restart_topology().build(), app_config(log_path)) as app:
        app.run_until_end(timeout=60)
    produce_joined(log, RESTART_INPUT[split:])
    with KafkaStreams(restart_topology().build(), app_config(log_path)) as app:
        app.run_until_end(timeout=60)
    assert read_all(log, "out", INT, S) == expected
    values = [v for _k, v, _t in expected]
    assert "A+a" in values and any("null" in v for v in values)


def test_restart_after_losing_local_state_restores_from_the_changelogs(
    log: EmbeddedLog, log_path: str, tmp_path: Any
) -> None:
    expected_log = EmbeddedLog(str(tmp_path / "reference"))
    for one in (log, expected_log):
        for topic in ("left", "right", "out"):
            one.create_topic(topic)
    produce_joined(expected_log, RESTART_INPUT)
    with KafkaStreams(restart_topology().build(), app_config(str(tmp_path / "reference"))) as app:
        app.run_until_end(timeout=60)
    produce_joined(log, RESTART_INPUT[:6])
    with KafkaStreams(restart_topology().build(), app_config(log_path)) as app:
        app.run_until_end(timeout=60)
    shutil.rmtree(Path(log_path) / ".state")
    produce_joined(log, RESTART_INPUT[6:])
    with KafkaStreams(restart_topology().build(), app_config(log_path)) as app:
        app.run_until_end(timeout=60)
        assert app.metrics()["restored-records"] > 0
    assert read_all(log, "out", INT, S) == read_all(expected_log, "out", INT, S)


def test_logging_can_be_turned_off_for_all_join_stores() -> None:
    # KStreamKStreamJoinTest.shouldDisableLoggingOnStreamJoined.
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    left.outer_join(right, joiner, windows, store_name="store", logging=False).to("out")
    stores = builder.build()._internal.stores
    assert sorted(stores) == [
        "store-outer-other-join-store",
        "store-outer-shared-join-store",
        "store-outer-this-join-store",
    ]
    assert not any(store.logged for store in stores.values())


def test_join_store_changelogs_take_topic_configs(log: EmbeddedLog, log_path: str) -> None:
    # KStreamKStreamJoinTest.shouldEnableLoggingWithCustomConfigOnStreamJoined.
    for topic in ("left", "right", "out"):
        log.create_topic(topic)
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    configs = {"min.compaction.lag.ms": 60_000}
    joined = left.outer_join(right, joiner, windows, store_name="store", logging=configs)
    joined.to("out", value_serde=S)
    props = {"application.id": "logged", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(builder.build(), props) as app:
        app.run_until_end(timeout=30)
    changelogs = sorted(t for t in log.topics() if t.endswith("-changelog"))
    assert changelogs == [
        "logged-store-outer-other-join-store-changelog",
        "logged-store-outer-shared-join-store-changelog",
        "logged-store-outer-this-join-store-changelog",
    ]
    for topic in changelogs:
        assert log.topic_config(topic)["min.compaction.lag.ms"] == "60000"
    table = builder.table("table", key_serde=INT, value_serde=S)
    with pytest.raises(TopologyError, match="logging"):
        left.join(table, joiner, logging=configs)


def _outer_join_stores(**join_args: Any) -> dict[str, Any]:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    windows = JoinWindows.of_time_difference_and_grace(10, 5)
    left.outer_join(right, joiner, windows, **join_args).to("out", value_serde=S)
    return builder.build()._internal.stores


def test_store_suppliers_name_and_place_the_join_stores() -> None:
    # KStreamKStreamJoinTest.shouldBuildJoinWithCustomStoresAndCorrectWindowSettings
    # and the outer store's name and type from OuterStreamJoinStoreFactory.
    this = Stores.in_memory_window_store("mine", 25, 20, retain_duplicates=True)
    other = Stores.persistent_window_store("theirs", 25, 20, retain_duplicates=True)
    stores = _outer_join_stores(store_suppliers=(this, other))
    placed = {name: store.persistent for name, store in stores.items()}
    assert placed == {"mine": False, "theirs": True, "mine-outer-shared-join-store": False}
    # One side's supplier; the others in memory (Kafka's in-memory DslStoreSuppliers).
    stores = _outer_join_stores(store_name="j", store_suppliers=(None, other), in_memory=True)
    placed = {name: store.persistent for name, store in stores.items()}
    assert placed == {
        "j-outer-this-join-store": False,
        "theirs": True,
        "j-outer-shared-join-store": False,
    }


def test_join_store_suppliers_run_as_the_default_stores() -> None:
    this = Stores.in_memory_window_store("mine", 25, 20, retain_duplicates=True)
    other = Stores.in_memory_window_store("theirs", 25, 20, retain_duplicates=True)
    results = []
    for args in ({}, {"store_suppliers": (this, other)}):
        builder = StreamsBuilder()
        left = builder.stream("left", key_serde=INT, value_serde=S)
        right = builder.stream("right", key_serde=INT, value_serde=S)
        windows = JoinWindows.of_time_difference_and_grace(10, 5)
        left.outer_join(right, joiner, windows, **args).to("out", value_serde=S)
        with TopologyTestDriver(builder.build()) as driver:
            lefts = driver.create_input_topic("left", INT, S)
            rights = driver.create_input_topic("right", INT, S)
            lefts.pipe_input(1, "a", 0)
            rights.pipe_input(1, "b", 5)
            lefts.pipe_input(2, "c", 6)
            rights.pipe_input(3, "d", 40)
            results.append(driver.create_output_topic("out", INT, S).read_key_values_to_list())
    assert results[0] == results[1]
    assert (2, "c+null") in results[1]


@pytest.mark.parametrize(
    ("suppliers", "error"),
    [
        ((Stores.in_memory_window_store("a", 25, 20), None), "retain duplicates"),
        ((Stores.in_memory_window_store("a", 30, 20, True), None), "must be the join windows"),
        ((None, Stores.in_memory_window_store("a", 25, 10, True)), "must be the join windows"),
        ((Stores.in_memory_key_value_store("a"), None), "a window store's"),
        (
            (
                Stores.in_memory_window_store("a", 25, 20, True),
                Stores.persistent_window_store("a", 25, 20, True),
            ),
            "names of their own",
        ),
    ],
)
def test_join_store_suppliers_must_fit_the_windows(suppliers: Any, error: str) -> None:
    with pytest.raises(TopologyError, match=error):
        _outer_join_stores(store_suppliers=suppliers)


def test_a_join_with_a_table_takes_no_store_suppliers() -> None:
    builder = StreamsBuilder()
    stream = builder.stream("left", key_serde=INT, value_serde=S)
    table = builder.table("table", key_serde=INT, value_serde=S)
    with pytest.raises(TopologyError, match="in_memory"):
        stream.join(table, joiner, in_memory=True)


def test_self_join_after_a_key_change_repartitions_once() -> None:
    builder = StreamsBuilder()
    rekeyed = builder.stream("in", key_serde=S, value_serde=S).select_key(lambda _k, v: v[0])
    windows = JoinWindows.of_time_difference_with_no_grace(10)
    rekeyed.join(rekeyed, joiner, windows, key_serde=S).to("out", value_serde=S)
    topology_ = builder.build()
    assert topology_._internal.repartition_topics == {"KSTREAM-KEY-SELECT-0000000001-repartition"}
    with TopologyTestDriver(topology_) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("x", "a1", 1)
        source.pipe_input("y", "a2", 2)
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [
            ("a", "a1+a1"),
            ("a", "a2+a1"),
            ("a", "a1+a2"),
            ("a", "a2+a2"),
        ]


def test_default_serdes_serve_the_join_stores() -> None:
    builder = StreamsBuilder()
    left, right = builder.stream("left"), builder.stream("right")
    left.outer_join(right, joiner, JoinWindows.of_time_difference_with_no_grace(10)).to("out")
    config = {"default.key.serde": S, "default.value.serde": S}
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("left", S, S).pipe_input("k", "A", 0)
        driver.create_input_topic("right", S, S).pipe_input("j", "b", 100)
        records = driver.create_output_topic("out", S, S).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in records] == [("k", "A+null", 0)]


def test_join_result_stream_keeps_the_key_serde() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    joined = left.join(
        builder.stream("right", key_serde=INT, value_serde=S),
        joiner,
        JoinWindows.of_time_difference_with_no_grace(5),
    )
    assert isinstance(joined, KStream) and joined._key_serde is INT
