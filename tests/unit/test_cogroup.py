"""Cogroup: several grouped streams aggregated into one table, on the
TopologyTestDriver. The expected records follow Kafka's own cogroup tests
(CogroupedKStreamImplTest); tests/differential runs random cogroups against
Kafka's TopologyTestDriver."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import (
    Materialized,
    SessionWindows,
    SlidingWindows,
    TimeWindowedCogroupedKStream,
    TimeWindows,
    Windowed,
)
from strom.testing import TopologyTestDriver

S, INT = serdes.String(), serdes.Integer()
# As Kafka's cogroup tests: a cogroup's store takes the default serdes unless
# Materialized gives its own (not the grouped streams').
STRINGS: dict[str, Any] = {"default.key.serde": S, "default.value.serde": S}


def concat(_key: Any, value: Any, agg: str) -> str:
    return agg + value


def add_digits(_key: Any, value: str, agg: int) -> int:
    return agg + int(value)


def two_streams(builder: StreamsBuilder, two_values: serdes.Serde[Any] = S) -> tuple[Any, Any]:
    one = builder.stream("one", key_serde=S, value_serde=S).group_by_key()
    two = builder.stream("two", key_serde=S, value_serde=two_values).group_by_key()
    return one, two


def records(driver: TopologyTestDriver, value_serde: serdes.Serde[Any] = S) -> list[Any]:
    out = driver.create_output_topic("out", S, value_serde).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in out]


def test_names_processors_and_store_as_kafka_does() -> None:
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    table = (
        one.cogroup(concat).cogroup(two, concat).aggregate(str, materialized="store", name="test")
    )
    table.to_stream().to("output")
    assert str(builder.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [one])\n"
        "      --> test-cogroup-agg-0\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [two])\n"
        "      --> test-cogroup-agg-1\n"
        "    Processor: test-cogroup-agg-0 (stores: [store])\n"
        "      --> test-cogroup-merge\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: test-cogroup-agg-1 (stores: [store])\n"
        "      --> test-cogroup-merge\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: test-cogroup-merge (stores: [])\n"
        "      --> KTABLE-TOSTREAM-0000000005\n"
        "      <-- test-cogroup-agg-0, test-cogroup-agg-1\n"
        "    Processor: KTABLE-TOSTREAM-0000000005 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000006\n"
        "      <-- test-cogroup-merge\n"
        "    Sink: KSTREAM-SINK-0000000006 (topic: output)\n"
        "      <-- KTABLE-TOSTREAM-0000000005\n\n"
    )


def test_repartitions_a_stream_whose_key_changed() -> None:
    """Kafka's shouldInsertRepartitionsTopicForUpstreamKeyModification: the
    re-keyed stream goes through ``<store>-repartition``; both aggregate in
    the sub-topology that reads it."""
    builder = StreamsBuilder()
    stream1 = builder.stream("one", key_serde=S, value_serde=S)
    stream2 = builder.stream("two", key_serde=S, value_serde=S)
    one = stream1.map(lambda k, v: (v, k)).group_by_key()
    table = (
        one.cogroup(concat)
        .cogroup(stream2.group_by_key(), concat)
        .aggregate(str, materialized=Materialized("store", key_serde=S, value_serde=S), name="test")
    )
    table.to_stream().to("output", key_serde=S, value_serde=S)
    assert str(builder.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [one])\n"
        "      --> KSTREAM-MAP-0000000002\n"
        "    Processor: KSTREAM-MAP-0000000002 (stores: [])\n"
        "      --> store-repartition-filter\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: store-repartition-filter (stores: [])\n"
        "      --> store-repartition-sink\n"
        "      <-- KSTREAM-MAP-0000000002\n"
        "    Sink: store-repartition-sink (topic: store-repartition)\n"
        "      <-- store-repartition-filter\n\n"
        "  Sub-topology: 1\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [two])\n"
        "      --> test-cogroup-agg-1\n"
        "    Source: store-repartition-source (topics: [store-repartition])\n"
        "      --> test-cogroup-agg-0\n"
        "    Processor: test-cogroup-agg-0 (stores: [store])\n"
        "      --> test-cogroup-merge\n"
        "      <-- store-repartition-source\n"
        "    Processor: test-cogroup-agg-1 (stores: [store])\n"
        "      --> test-cogroup-merge\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: test-cogroup-merge (stores: [])\n"
        "      --> KTABLE-TOSTREAM-0000000009\n"
        "      <-- test-cogroup-agg-0, test-cogroup-agg-1\n"
        "    Processor: KTABLE-TOSTREAM-0000000009 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000010\n"
        "      <-- test-cogroup-merge\n"
        "    Sink: KSTREAM-SINK-0000000010 (topic: output)\n"
        "      <-- KTABLE-TOSTREAM-0000000009\n\n"
    )
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        driver.create_input_topic("one", S, S).pipe_input("A", "k1", 0)
        driver.create_input_topic("two", S, S).pipe_input("k1", "B", 5)
        out = driver.create_output_topic("output", S, S).read_records_to_list()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("k1", "A", 0), ("k1", "AB", 5)]


def test_two_repartitioned_streams_get_a_topic_each() -> None:
    """Kafka names both ``<store>-repartition`` and fails (Grouped.as tells
    them apart); strom has no Grouped name and numbers the second."""
    builder = StreamsBuilder()
    flip = lambda k, v: (v, k)  # noqa: E731
    one = builder.stream("one", key_serde=S, value_serde=S).map(flip).group_by_key()
    two = builder.stream("two", key_serde=S, value_serde=S).map(flip).group_by_key()
    table = (
        one.cogroup(concat)
        .cogroup(two, concat)
        .aggregate(str, materialized=Materialized("store", key_serde=S, value_serde=S))
    )
    table.to_stream().to("out", key_serde=S, value_serde=S)
    description = str(builder.build().describe())
    assert "(topic: store-repartition)" in description
    assert "(topic: store-1-repartition)" in description
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        driver.create_input_topic("one", S, S).pipe_input("A", "k1", 1)
        driver.create_input_topic("two", S, S).pipe_input("B", "k1", 2)
        driver.create_input_topic("one", S, S).pipe_input("C", "k2", 3)
        assert records(driver) == [("k1", "A", 1), ("k1", "AB", 2), ("k2", "C", 3)]


def test_one_stream_skips_null_values() -> None:
    """Kafka's testCogroupHandleNullValues."""
    builder = StreamsBuilder()
    one, _ = two_streams(builder)
    one.cogroup(concat).aggregate(str).to_stream().to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        src = driver.create_input_topic("one", S, S)
        for key, value in [("k1", "A"), ("k2", "B"), ("k2", None), ("k2", "B"), ("k1", "A")]:
            src.pipe_input(key, value, 0)
        src.pipe_input(None, "X", 0)
        assert records(driver) == [("k1", "A", 0), ("k2", "B", 0), ("k2", "BB", 0), ("k1", "AA", 0)]


def test_two_streams_share_keys_and_results_take_the_latest_timestamp() -> None:
    """Kafka's shouldCogroupAndAggregateTwoKStreamsWithSharedKeys."""
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    table = one.cogroup(concat).cogroup(two, concat).aggregate(str)
    table.to_stream().to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        first = driver.create_input_topic("one", S, S)
        second = driver.create_input_topic("two", S, S)
        for key, ts in [("k1", 0), ("k2", 1), ("k1", 10), ("k2", 100)]:
            first.pipe_input(key, "A", ts)
        for key, ts in [("k2", 100), ("k2", 200), ("k1", 1), ("k2", 500), ("k1", 500)]:
            second.pipe_input(key, "B", ts)
        assert records(driver) == [
            ("k1", "A", 0),
            ("k2", "A", 1),
            ("k1", "AA", 10),
            ("k2", "AA", 100),
            ("k2", "AAB", 100),
            ("k2", "AABB", 200),
            ("k1", "AAB", 10),
            ("k2", "AABBB", 500),
            ("k1", "AABB", 500),
        ]


def test_streams_of_different_value_types_into_another_type() -> None:
    """Kafka's shouldCoGroupStreamsWithDifferentInputTypes: each stream's
    aggregator takes its own values; the store's value serde is the
    Materialized's."""
    builder = StreamsBuilder()
    one, two = two_streams(builder, two_values=INT)
    table = (
        one.cogroup(add_digits)
        .cogroup(two, lambda _k, v, agg: agg + v)
        .aggregate(lambda: 0, materialized=Materialized("store1", value_serde=INT))
    )
    table.to_stream().to("out", key_serde=S, value_serde=INT)
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        first = driver.create_input_topic("one", S, S)
        second = driver.create_input_topic("two", S, INT)
        for key, ts in [("k1", 0), ("k2", 1), ("k1", 10), ("k2", 100)]:
            first.pipe_input(key, "1", ts)
        for key, value, ts in [("k2", 2, 100), ("k1", 2, 1), ("k2", 3, 500), ("k3", 2, 500)]:
            second.pipe_input(key, value, ts)
        assert records(driver, INT) == [
            ("k1", 1, 0),
            ("k2", 1, 1),
            ("k1", 2, 10),
            ("k2", 2, 100),
            ("k2", 4, 100),
            ("k1", 4, 10),
            ("k2", 7, 500),
            ("k3", 2, 500),
        ]
        assert driver.get_key_value_store("store1").get("k2") == 7


def test_time_windows_update_one_window_per_key() -> None:
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    table = (
        one.cogroup(concat)
        .cogroup(two, lambda _k, v, agg: agg + v.lower())
        .windowed_by(TimeWindows.of_size_with_no_grace(500))
        .aggregate(str, materialized=Materialized("windows", key_serde=S, value_serde=S))
    )
    table.to_stream().map(lambda w, v: (f"{w.key}@{w.window.start}", v)).to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        driver.create_input_topic("one", S, S).pipe_input("k", "A", 0)
        driver.create_input_topic("two", S, S).pipe_input("k", "B", 499)
        driver.create_input_topic("one", S, S).pipe_input("k", "C", 500)
        # Each processor keeps its own stream time, as Kafka's do: "two" has
        # seen 499 only, so its record at 0 still lands in the first window.
        driver.create_input_topic("two", S, S).pipe_input("k", "D", 0)
        assert records(driver) == [
            ("k@0", "A", 0),
            ("k@0", "Ab", 499),
            ("k@500", "C", 500),
            ("k@0", "Abd", 499),
        ]
        fetched = driver.get_timestamped_window_store("windows").fetch("k", 0, 500)
        assert [(kv.key, kv.value) for kv in fetched] == [(0, ("Abd", 499)), (500, ("C", 500))]


def test_sliding_windows_give_a_time_windowed_cogroup() -> None:
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    windowed = (
        one.cogroup(concat)
        .cogroup(two, concat)
        .windowed_by(SlidingWindows.of_time_difference_with_no_grace(10))
    )
    assert isinstance(windowed, TimeWindowedCogroupedKStream)
    table = windowed.aggregate(str, materialized=Materialized(key_serde=S, value_serde=S))
    table.to_stream().map(lambda w, v: (f"{w.window.start}-{w.window.end}", v)).to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        driver.create_input_topic("one", S, S).pipe_input("k", "A", 10)
        driver.create_input_topic("two", S, S).pipe_input("k", "B", 15)
        # Kafka makes the earlier record's right window first, then the
        # new record's left window.
        assert records(driver) == [
            ("0-10", "A", 10),
            ("11-21", "B", 15),
            ("5-15", "AB", 15),
        ]


def test_session_windows_merge_with_the_merger() -> None:
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    table = (
        one.cogroup(concat)
        .cogroup(two, concat)
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10))
        .aggregate(
            str,
            lambda _k, a, b: a + "+" + b,
            # A longer retention than the gap: the store still shows the
            # first session when the second stream's put moved its time on.
            materialized=Materialized(
                "sessions", key_serde=S, value_serde=S, caching=False, retention=1_000
            ),
        )
    )
    table.to_stream().map(lambda w, v: (f"{w.window.start}-{w.window.end}", v)).to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        driver.create_input_topic("one", S, S).pipe_input("k", "A", 0)
        driver.create_input_topic("two", S, S).pipe_input("k", "B", 20)
        driver.create_input_topic("one", S, S).pipe_input("k", "C", 10)
        # The bridging record merges both sessions: a tombstone for each,
        # then the merger over the initializer and each session in turn,
        # and the record (Kafka's KStreamSessionWindowAggregate).
        assert records(driver) == [
            ("0-0", "A", 0),
            ("20-20", "B", 20),
            ("0-0", None, 0),
            ("20-20", None, 20),
            ("0-20", "+A+BC", 20),
        ]


def test_cached_updates_carry_the_headers_of_their_last_record(
    log: EmbeddedLog, log_path: str
) -> None:
    """Both processors write one record cache: a commit's write-out takes the
    headers of whichever stream last updated the key (here the first one,
    whose processor is not the one the cache forwards through)."""
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    table = (
        one.cogroup(concat)
        .cogroup(two, concat)
        .aggregate(
            str, materialized=Materialized("cached", key_serde=S, value_serde=S, caching=True)
        )
    )
    table.to_stream().to("out", key_serde=S, value_serde=S)
    for topic in ("one", "two", "out"):
        log.create_topic(topic)
    with log.producer(key_serde=S, value_serde=S) as producer:
        producer.produce("two", "k", "B", timestamp=1, headers=[("h", b"two")])
        producer.produce("one", "k", "A", timestamp=2, headers=[("h", b"one")])
        producer.produce("two", "j", "C", timestamp=3, headers=[("h", b"two")])
    props = {
        "application.id": "cogroup-cache",
        "bootstrap.servers": f"embedded:{log_path}",
        "commit.interval.ms": 3_600_000,
        **STRINGS,
    }
    with KafkaStreams(builder.build(), props) as app:
        app.run_until_end(timeout=30)
    out = {r.key: (r.value, r.headers) for r in log.read("out", 0, 0, 10)}
    assert out == {b"k": (b"BA", [("h", b"one")]), b"j": (b"C", [("h", b"two")])}


def test_wrong_arguments_are_topology_errors() -> None:
    builder = StreamsBuilder()
    one, _ = two_streams(builder)
    with pytest.raises(TopologyError, match="KGroupedStream"):
        one.cogroup(concat).cogroup(builder.stream("x"), concat)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="aggregator"):
        one.cogroup("concat")  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="initializer"):
        one.cogroup(concat).aggregate(None)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="merger"):
        one.cogroup(concat).windowed_by(
            SessionWindows.of_inactivity_gap_with_no_grace(5)
        ).aggregate(
            str,
            None,  # type: ignore[arg-type]
        )
    with pytest.raises(TopologyError, match="same StreamsBuilder"):
        one.cogroup(concat).cogroup(two_streams(StreamsBuilder())[0], concat)


def test_inputs_must_be_co_partitioned(log: EmbeddedLog, log_path: str) -> None:
    builder = StreamsBuilder()
    one, two = two_streams(builder)
    one.cogroup(concat).cogroup(two, concat).aggregate(str).to_stream().to("out")
    log.create_topic("one", partitions=2)
    log.create_topic("two", partitions=3)
    log.create_topic("out")
    props = {"application.id": "cogroup", "bootstrap.servers": f"embedded:{log_path}", **STRINGS}
    app = KafkaStreams(builder.build(), props)
    with pytest.raises(TopologyError, match=r"cogroup-merge|COGROUPKSTREAM-MERGE"):
        app.run_until_end(timeout=30)
    with pytest.raises(TopologyError, match=r"co-partitioned.*one \(2\).*two \(3\)"):
        KafkaStreams(builder.build(), props).run_until_end(timeout=30)
    assert sum(log.end_offsets("out").values()) == 0


def test_windowed_keys_read_back() -> None:
    """The result table is keyed by Windowed, its store a window store."""
    builder = StreamsBuilder()
    one, _ = two_streams(builder)
    table = (
        one.cogroup(concat)
        .windowed_by(TimeWindows.of_size_with_no_grace(100))
        .aggregate(str, materialized=Materialized(key_serde=S, value_serde=S))
    )
    seen: list[Windowed] = []
    table.to_stream().foreach(lambda k, _v: seen.append(k))
    with TopologyTestDriver(builder.build(), STRINGS) as driver:
        driver.create_input_topic("one", S, S).pipe_input("k", "A", 150)
    assert [(w.key, w.window.start, w.window.end) for w in seen] == [("k", 100, 200)]
