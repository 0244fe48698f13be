"""Runs one topology three ways over the same records (the TopologyTestDriver,
KafkaStreams on the embedded log, a Spark replay) and puts the results in one
shape to compare."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession

from strom import KafkaStreams, Topology
from strom._core import partition_for_key
from strom.embedded import EmbeddedLog
from strom.kstream import Window, Windowed
from strom.processor import Record
from strom.serdes import Serde
from strom.spark import Replay, replay
from strom.testing import TopologyTestDriver

# (partition, key) -> [(value, timestamp), ...] in the order written
Stream = dict[tuple[int, Any], list[tuple[Any, int]]]


@dataclass
class Scenario:
    """A topology, its typed input records and the serdes to read and write."""

    build: Callable[[], Topology]
    # topic -> [(key, value, timestamp)] in produce order
    inputs: dict[str, list[tuple[Any, Any, int]]]
    serdes: dict[str, tuple[Serde[Any], Serde[Any]]]
    outputs: list[str]
    partitions: int = 3
    stores: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    # Partitions of the output topics (default: as the inputs).
    output_partitions: int | None = None

    def rows(self) -> list[tuple[str, int, int, bytes | None, bytes | None, int]]:
        """Serialized input records with their partition (Kafka's default
        partitioner, or round-robin for a null key) and offset."""
        out = []
        next_offset: dict[tuple[str, int], int] = defaultdict(int)
        for topic, records in self.inputs.items():
            key_serde, value_serde = self.serdes[topic]
            for i, (key, value, timestamp) in enumerate(records):
                raw_key = key_serde.serialize(topic, key)
                raw_value = value_serde.serialize(topic, value)
                partition = (
                    i % self.partitions
                    if raw_key is None
                    else partition_for_key(raw_key, self.partitions)
                )
                offset = next_offset[(topic, partition)]
                next_offset[(topic, partition)] += 1
                out.append((topic, partition, offset, raw_key, raw_value, timestamp))
        return out


@dataclass
class Results:
    streams: dict[str, Stream]
    tables: dict[str, dict[Any, Any]]


def _typed(value: Any) -> Any:
    """A windowed key struct from Spark as the Windowed the driver gives."""
    if isinstance(value, Row) and set(value.asDict()) == {"key", "start", "end"}:
        return Windowed(value["key"], Window(value["start"], value["end"]))
    return value


def run_driver_per_partition(scenario: Scenario, config: Mapping[str, Any]) -> dict[str, Stream]:
    """One TopologyTestDriver per input partition (the streaming app's task
    for that partition), records piped in timestamp order across topics as
    the task's partition group processes them."""
    streams: dict[str, Stream] = {topic: defaultdict(list) for topic in scenario.outputs}
    rows = scenario.rows()
    for partition in range(scenario.partitions):
        mine = _partition_group_order([r for r in rows if r[1] == partition])
        with TopologyTestDriver(scenario.build(), config) as driver:
            for topic, _p, _o, key, value, timestamp in mine:
                key_serde, value_serde = scenario.serdes[topic]
                driver.create_input_topic(topic, key_serde, value_serde).pipe_records(
                    [
                        Record(
                            key_serde.deserialize(topic, key),
                            value_serde.deserialize(topic, value),
                            timestamp,
                        )
                    ]
                )
            for topic in scenario.outputs:
                key_serde, value_serde = scenario.serdes[topic]
                out = driver.create_output_topic(topic, key_serde, value_serde)
                for record in out.read_records_to_list():
                    raw = key_serde.serialize(topic, record.key)
                    part = partition if raw is None else partition_for_key(raw, scenario.partitions)
                    streams[topic][(part, record.key)].append((record.value, record.timestamp))
    return {t: dict(s) for t, s in streams.items()}


def _partition_group_order(rows: list[Any]) -> list[Any]:
    """The order a task processes its partitions' records (Kafka's
    PartitionGroup): each partition in offset order, always from the one
    whose next record has the smallest timestamp (ties: topic order)."""
    queues = {
        topic: sorted((r for r in rows if r[0] == topic), key=lambda r: r[2])
        for topic in sorted({r[0] for r in rows})
    }
    order = []
    while any(queues.values()):
        ready = sorted((q[0][5], topic) for topic, q in queues.items() if q)
        _, topic = ready[0]
        bound = ready[1][0] if len(ready) > 1 else None
        queue = queues[topic]
        order.append(queue.pop(0))
        while queue and (bound is None or queue[0][5] <= bound):
            order.append(queue.pop(0))
    return order


def run_driver(scenario: Scenario, config: Mapping[str, Any]) -> Results:
    """One TopologyTestDriver over every record (one partition), in timestamp
    order across topics: for topologies whose results do not depend on how
    records interleave across partitions."""
    with TopologyTestDriver(scenario.build(), config) as driver:
        for topic, _p, _o, key, value, timestamp in _partition_group_order(scenario.rows()):
            key_serde, value_serde = scenario.serdes[topic]
            driver.create_input_topic(topic, key_serde, value_serde).pipe_records(
                [
                    Record(
                        key_serde.deserialize(topic, key),
                        value_serde.deserialize(topic, value),
                        timestamp,
                    )
                ]
            )
        streams: dict[str, Stream] = {}
        for topic in scenario.outputs:
            stream: Stream = defaultdict(list)
            out = driver.create_output_topic(topic, *scenario.serdes[topic])
            for record in out.read_records_to_list():
                stream[(0, record.key)].append((record.value, record.timestamp))
            streams[topic] = dict(stream)
        tables = {
            name: {kv.key: kv.value for kv in driver.get_key_value_store(name).all()}
            for name in scenario.stores
        }
    return Results(streams, tables)


def values_by_key(stream: Stream) -> dict[Any, list[Any]]:
    """Each key's values in the order written, partitions and timestamps aside."""
    out: dict[Any, list[Any]] = {}
    for (_partition, key), records in stream.items():
        assert key not in out, f"key {key!r} written to more than one partition"
        out[key] = [value for value, _ts in records]
    return out


def write_log(scenario: Scenario, path: Path) -> str:
    """The scenario's topics and input records in a new embedded log."""
    log = EmbeddedLog(path)
    for topic in scenario.inputs:
        log.create_topic(topic, scenario.partitions)
    for topic in scenario.outputs:
        log.create_topic(topic, scenario.output_partitions or scenario.partitions)
    with log.producer() as producer:
        for topic, partition, _offset, key, value, timestamp in scenario.rows():
            producer.produce(topic, key, value, timestamp=timestamp, partition=partition)
    return f"embedded:{path}"


def read_stream(log: EmbeddedLog, topic: str, serdes: tuple[Serde[Any], Serde[Any]]) -> Stream:
    key_serde, value_serde = serdes
    stream: Stream = defaultdict(list)
    for partition, end in log.end_offsets(topic).items():
        for record in log.read(topic, partition, 0, end):
            key = key_serde.deserialize(topic, record.key)
            stream[(partition, key)].append(
                (value_serde.deserialize(topic, record.value), record.timestamp)
            )
    return dict(stream)


def run_streaming(scenario: Scenario, servers: str, config: Mapping[str, Any]) -> Results:
    """KafkaStreams over the embedded log, to the end of its input."""
    app = KafkaStreams(scenario.build(), {"bootstrap.servers": servers, **config})
    with app:
        app.run_until_end(timeout=120)
        tables = {
            name: {kv.key: kv.value for kv in app.store(name).all()} for name in scenario.stores
        }
    log = EmbeddedLog(servers.removeprefix("embedded:"))
    streams = {t: read_stream(log, t, scenario.serdes[t]) for t in scenario.outputs}
    return Results(streams, tables)


SOURCE_SCHEMA = "topic string, partition int, offset long, key binary, value binary, timestamp long"


def source_frame(spark: SparkSession, scenario: Scenario) -> DataFrame:
    return spark.createDataFrame(scenario.rows(), SOURCE_SCHEMA)


def replay_results(result: Replay, scenario: Scenario) -> Results:
    streams = {}
    for topic in scenario.outputs:
        stream: Stream = defaultdict(list)
        rows = result.output(topic).orderBy("partition", "offset").collect()
        for row in rows:
            key = _typed(row["key"])
            stream[(row["partition"], key)].append((_typed(row["value"]), row["timestamp"]))
        streams[topic] = dict(stream)
    tables = {
        name: {_typed(row["key"]): row["value"] for row in result.table(name).collect()}
        for name in scenario.stores
    }
    return Results(streams, tables)


def partitioned_frame(spark: SparkSession, scenario: Scenario) -> DataFrame:
    """The source frame with each partition number's records in a Spark
    partition of their own, as a Kafka source reads them (no shuffle made)."""
    rows = scenario.rows()
    numbers = sorted({row[1] for row in rows})
    split = spark.sparkContext.parallelize(numbers, len(numbers)).flatMap(
        lambda number: [row for row in rows if row[1] == number]
    )
    return spark.createDataFrame(split, SOURCE_SCHEMA)


def run_replay(
    spark: SparkSession,
    scenario: Scenario,
    source: str | DataFrame,
    config: Mapping[str, Any],
    **options: Any,
) -> Results:
    with replay(scenario.build(), spark, source=source, config=config, **options) as result:
        return replay_results(result, scenario)
