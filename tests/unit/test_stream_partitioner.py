"""Sink partitioners (Kafka's StreamPartitioner with KIP-837): one partition,
a set to multicast to, an empty set that drops the record, or None for the
default partitioner; on the embedded log and in the test driver."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom._core import partition_for_key
from strom.embedded import EmbeddedLog
from strom.errors import TaskError
from strom.processor import ContextualProcessor, Record, RecordContext, StreamPartitioner
from strom.testing import TopologyTestDriver

S = serdes.String()


def by_value(_key: str, value: str, count: int) -> int | Iterable[int] | None:
    """The value says where the record goes."""
    if value.startswith("all"):
        return range(count)
    if value.startswith("none"):
        return set()
    if value.startswith("default"):
        return None
    if value.startswith("pair"):
        return [2, 0, 2]  # a partition named twice gets one copy
    return int(value[-1])


def run_app(log: EmbeddedLog, log_path: str, topology: Topology) -> dict[str, Any]:
    with KafkaStreams(
        topology, {"application.id": "parts", "bootstrap.servers": f"embedded:{log_path}"}
    ) as app:
        app.run_until_end(timeout=30)
        return app.metrics()


def landed(log: EmbeddedLog, topic: str) -> dict[int, list[tuple[str | None, str]]]:
    """Each partition's (key, value)s in offset order."""
    return {
        partition: [
            (None if r.key is None else r.key.decode(), r.value.decode())  # type: ignore[union-attr]
            for r in log.read(topic, partition, 0, max(end, 1))
        ]
        for partition, end in log.end_offsets(topic).items()
    }


def produce(log: EmbeddedLog, records: list[tuple[str, str]]) -> None:
    with log.producer() as producer:
        for i, (k, v) in enumerate(records):
            producer.produce("in", k.encode(), v.encode(), timestamp=100 + i)


def test_to_multicasts_drops_and_falls_back_to_the_default_partitioner(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("in")
    log.create_topic("out", partitions=3)
    produce(
        log,
        [
            ("a", "one-1"),
            ("b", "all-x"),
            ("c", "none-x"),
            ("d", "default-x"),
            ("e", "pair-x"),
            ("f", "none-y"),
            ("g", "two-2"),
        ],
    )
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to(
        "out", key_serde=S, value_serde=S, partitioner=by_value
    )
    metrics = run_app(log, log_path, builder.build())
    home = partition_for_key(b"d", 3)  # the default partitioner: murmur2 of the key
    expected: dict[int, list[tuple[str | None, str]]] = {0: [], 1: [], 2: []}
    expected[1].append(("a", "one-1"))
    for p in range(3):
        expected[p].append(("b", "all-x"))
    expected[home].append(("d", "default-x"))
    expected[2].append(("e", "pair-x"))
    expected[0].append(("e", "pair-x"))
    expected[2].append(("g", "two-2"))
    assert landed(log, "out") == expected
    assert metrics["dropped-records"] == 2  # the two empty sets


class TopicAware(StreamPartitioner[str, str]):
    """Kafka's partitions(topic, key, value, numPartitions): every partition
    of "wide", partition 0 of anything else."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, int]] = []

    def partitions(self, topic: str, key: str, value: str, num_partitions: int) -> Iterable[int]:
        self.calls.append((topic, key, value, num_partitions))
        return range(num_partitions) if topic == "wide" else {0}


def test_a_stream_partitioner_is_given_the_topic_the_extractor_chose(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("in")
    log.create_topic("wide", partitions=2)
    log.create_topic("narrow", partitions=4)
    produce(log, [("a", "wide"), ("b", "narrow")])
    partitioner = TopicAware()

    def extractor(_key: str, value: str, _context: RecordContext) -> str:
        return value

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to(
        extractor, key_serde=S, value_serde=S, partitioner=partitioner
    )
    run_app(log, log_path, builder.build())
    assert partitioner.calls == [("wide", "a", "wide", 2), ("narrow", "b", "narrow", 4)]
    assert landed(log, "wide") == {0: [("a", "wide")], 1: [("a", "wide")]}
    assert landed(log, "narrow") == {0: [("b", "narrow")], 1: [], 2: [], 3: []}


def test_add_sink_takes_a_topic_name_extractor_and_a_stream_partitioner(
    log: EmbeddedLog, log_path: str
) -> None:
    """Kafka's addSink(name, TopicNameExtractor, StreamPartitioner, parents)."""
    log.create_topic("in")
    log.create_topic("wide", partitions=3)
    log.create_topic("narrow", partitions=2)
    produce(log, [("a", "wide"), ("b", "narrow"), ("c", "wide")])
    topology = (
        Topology()
        .add_source("Source", "in", key_serde=S, value_serde=S)
        .add_sink(
            "Sink",
            lambda _key, value, _context: value,
            "Source",
            key_serde=S,
            value_serde=S,
            partitioner=TopicAware(),
        )
    )
    assert "Sink: Sink (extractor:" in topology.describe()
    run_app(log, log_path, topology)
    assert landed(log, "wide") == {p: [("a", "wide"), ("c", "wide")] for p in range(3)}
    assert landed(log, "narrow") == {0: [("b", "narrow")], 1: []}


def test_repartition_multicasts_to_each_partition_of_its_topic(
    log: EmbeddedLog, log_path: str
) -> None:
    """Repartitioned.streamPartitioner with a set: the sub-topology after the
    repartition topic gets one copy on each partition of it."""
    seen: list[tuple[str, int]] = []

    class Where(ContextualProcessor[str, str]):
        def process(self, record: Record[str, str]) -> None:
            metadata = self.context().record_metadata()
            assert metadata is not None
            seen.append((record.value, metadata.partition))

    log.create_topic("in")
    produce(log, [("a", "all-1"), ("b", "none-2"), ("c", "pair-3"), ("d", "one-1")])
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).repartition(
        name="spread", num_partitions=3, partitioner=by_value
    ).process(Where)
    metrics = run_app(log, log_path, builder.build())
    assert sorted(seen) == [
        ("all-1", 0),
        ("all-1", 1),
        ("all-1", 2),
        ("one-1", 1),
        ("pair-3", 0),
        ("pair-3", 2),
    ]
    assert metrics["dropped-records"] == 1


def test_in_the_test_driver_a_set_sends_a_copy_an_empty_one_drops() -> None:
    """The driver's topics have one partition (as Kafka's): the partitioner
    is told so, a set of it sends the record, an empty set drops and counts
    it, None sends it too, and the output keeps the input's order."""
    counts: list[int] = []

    def partitioner(_key: str, value: str, count: int) -> set[int] | None:
        counts.append(count)
        return {"keep": {0}, "drop": set()}.get(value)

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to(
        "out", key_serde=S, value_serde=S, partitioner=partitioner
    )
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        for i, value in enumerate(["keep", "drop", "other", "drop", "keep"]):
            source.pipe_input(f"k{i}", value, 10 + i)
        out = driver.create_output_topic("out", S, S)
        assert out.read_records_to_list() == [
            Record("k0", "keep", 10),
            Record("k2", "other", 12),
            Record("k4", "keep", 14),
        ]
        assert driver.metrics()["dropped-records"] == 2
    assert counts == [1] * 5


def test_in_the_test_driver_a_repartition_multicast_reaches_the_next_sub_topology() -> None:
    seen: list[str] = []

    class Collect(ContextualProcessor[str, str]):
        def process(self, record: Record[str, str]) -> None:
            seen.append(record.value)

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).repartition(
        name="spread", partitioner=lambda _k, v, n: [] if v == "drop" else range(n)
    ).process(Collect)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list(
            [("a", "x"), ("b", "drop"), ("c", "y")]
        )
        assert driver.metrics()["dropped-records"] == 1
    assert seen == ["x", "y"]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({0, 1}, "partitioner returned 1, topic has 1 partitions"),
        (-1, "partitioner returned -1, topic has 1 partitions"),
        ("0", "partitioner returned '0': return a partition"),
        (0.5, "partitioner returned 0.5: return a partition"),
    ],
)
def test_a_partition_out_of_range_or_not_a_partition_is_a_clear_error(
    answer: object, message: str
) -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to(
        "out", key_serde=S, value_serde=S, partitioner=lambda _k, _v, _n: answer
    )
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        with pytest.raises(TaskError, match=message):
            source.pipe_input("k", "v", 1)
