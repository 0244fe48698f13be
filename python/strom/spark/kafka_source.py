"""Kafka offset ranges as a Spark Python Data Source: one Spark partition per
topic-partition range, read inside the Spark task with confluent-kafka (no
JVM connector jar needed)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from strom.errors import StromError

# The replay's input rows (strom.spark._task.INPUT_SCHEMA).
SCHEMA = (
    "topic string, partition int, offset long, key binary, value binary, timestamp long, "
    "task int, seq long"
)
BATCH = 10_000
# How long a range may go without a new record before the read gives up.
STALL_TIMEOUT_S = 60.0


@dataclass
class RangePartition(InputPartition):
    topic: str
    partition: int
    start: int
    end: int


class KafkaRangeSource(DataSource):
    """``spark.read.format("strom-kafka").option("ranges", JSON).option("consumer",
    JSON).load()``: ``ranges`` is ``[[topic, partition, start, end], ...]``
    (``start <= offset < end``), ``consumer`` the confluent-kafka config."""

    @classmethod
    def name(cls) -> str:
        return "strom-kafka"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(json.loads(self.options["ranges"]), json.loads(self.options["consumer"]))


class _Reader(DataSourceReader):
    def __init__(self, ranges: list[list[Any]], consumer: dict[str, Any]) -> None:
        self.ranges = ranges
        self.consumer = consumer

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(t, int(p), int(s), int(e)) for t, p, s, e in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        yield from read_range(self.consumer, partition)


def read_range(config: Mapping[str, Any], part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches. Offsets have gaps
    (compaction, transaction markers), so the read follows the consumer's
    position rather than counting records."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition  # noqa: PLC0415

    if part.start >= part.end:
        return
    consumer = Consumer(
        {
            "group.id": "strom-replay-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            **config,
            # A range that retention deleted meanwhile fails the read.
            "auto.offset.reset": "error",
        }
    )
    try:
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
        rows: dict[str, list[Any]] = {name: [] for name in ("offset", "key", "value", "timestamp")}
        last_progress = time.monotonic()
        done = False
        while not done:
            messages = consumer.consume(BATCH, timeout=1.0)
            if messages:
                last_progress = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = True  # the range's end lies past what was written
                        continue
                    raise StromError(f"reading {part.topic}-{part.partition} for a replay: {error}")
                offset = message.offset()
                if offset is None or offset >= part.end:
                    done = True
                    continue
                rows["offset"].append(offset)
                rows["key"].append(message.key())
                rows["value"].append(message.value())
                rows["timestamp"].append(message.timestamp()[1])
            position = consumer.position([TopicPartition(part.topic, part.partition)])[0].offset
            if position >= part.end:
                done = True
            if len(rows["offset"]) >= BATCH or (done and rows["offset"]):
                yield _batch(part, rows)
                rows = {name: [] for name in rows}
            if not done and time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise StromError(
                    f"reading {part.topic}-{part.partition} for a replay: no record for "
                    f"{STALL_TIMEOUT_S:.0f} s at offset {position}, before the range's end "
                    f"{part.end}"
                )
    finally:
        consumer.close()


def _batch(part: RangePartition, rows: dict[str, list[Any]]) -> pa.RecordBatch:
    n = len(rows["offset"])
    return pa.RecordBatch.from_pydict(
        {
            "topic": pa.array([part.topic] * n, pa.string()),
            "partition": pa.array([part.partition] * n, pa.int32()),
            "offset": pa.array(rows["offset"], pa.int64()),
            "key": pa.array(rows["key"], pa.binary()),
            "value": pa.array(rows["value"], pa.binary()),
            "timestamp": pa.array(rows["timestamp"], pa.int64()),
            "task": pa.array([-1] * n, pa.int32()),
            "seq": pa.array(rows["offset"], pa.int64()),
        }
    )


def offset_ranges(
    consumer_config: Mapping[str, Any], topics: Sequence[str]
) -> tuple[list[list[Any]], dict[str, int]]:
    """Every partition of ``topics`` from its log start to its end offset as
    of now, and the cluster's topics' partition counts (on the driver)."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer(
        {"group.id": "strom-replay-reader", "enable.auto.commit": False, **consumer_config}
    )
    try:
        metadata = consumer.list_topics(timeout=30)
        ranges: list[list[Any]] = []
        # Every topic's count: output topics the cluster has keep theirs.
        counts = {
            name: len(found.partitions)
            for name, found in metadata.topics.items()
            if found.error is None
        }
        for topic in topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None:
                raise StromError(f"topic {topic!r} does not exist on the Kafka cluster")
            counts[topic] = len(found.partitions)
            for partition in sorted(found.partitions):
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=30
                )
                ranges.append([topic, partition, low, high])
        return ranges, counts
    finally:
        consumer.close()
