"""Kafka offset ranges as a Spark Python Data Source, read inside the Spark
tasks by strom's own consumer (``strom.kafka.consumer``; no JVM connector jar
needed). One Spark partition per partition number, holding that partition of
every topic read: a stream task's records, which a replay then runs where
they are read, with no shuffle.

The readers read by assignment in no consumer group (as Kafka Streams'
restore consumers do): a replay needs Read on its input topics and nothing
else, never commits for any group, and a ``group.id`` among the settings is
ignored. The driver finds the ranges with the admin client, which tells a
topic it may not describe from one that does not exist and fails within
moments on a failed authentication."""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin._listoffsets import OffsetSpec
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from strom._core import RecordBatch
from strom.errors import StromError
from strom.kafka.clients import REQUEST_TIMEOUT_S, Admin, own_group
from strom.kafka.consumer import Consumer
from strom.kafka.topics import Topics

# The replay's input rows (strom.spark._task.INPUT_SCHEMA).
SCHEMA = (
    "topic string, partition int, offset long, key binary, value binary, timestamp long, "
    "task int, seq long"
)
BATCH = 10_000
# How long a range may go without a new record before the read gives up.
STALL_TIMEOUT_S = 60.0


@dataclass
class RangePartition:
    topic: str
    partition: int
    start: int
    end: int


@dataclass
class TaskPartition(InputPartition):
    """The ranges of one partition number, one per topic."""

    ranges: list[RangePartition]


class KafkaRangeSource(DataSource):
    """``spark.read.format("strom-kafka").option("ranges", JSON).option("consumer",
    JSON).load()``: ``ranges`` is ``[[topic, partition, start, end], ...]``
    (``start <= offset < end``), ``consumer`` the librdkafka settings."""

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
        by_number: dict[int, list[RangePartition]] = {}
        for t, p, s, e in self.ranges:
            by_number.setdefault(int(p), []).append(RangePartition(t, int(p), int(s), int(e)))
        return [TaskPartition(by_number[p]) for p in sorted(by_number)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TaskPartition)
        for part in partition.ranges:
            yield from read_range(self.consumer, part)


def reader_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A range reader's settings: ``config`` read by assignment, in no group."""
    return own_group(config, None) | {
        "enable.partition.eof": True,
        # A range that retention deleted meanwhile fails the read.
        "auto.offset.reset": "error",
    }


def read_range(config: Mapping[str, Any], part: RangePartition) -> Iterator[pa.RecordBatch]:
    """The records of one range as Arrow batches. Offsets have gaps
    (compaction, transaction markers): the read ends at the first offset
    past the range or at the partition's end, not after a record count."""
    if part.start >= part.end:
        return
    where = f"{part.topic}-{part.partition}"
    try:
        consumer = Consumer(reader_config(config))
        consumer.assign([TopicPartition(part.topic, part.partition, part.start)])
    except KafkaException as exc:
        raise StromError(f"reading {where} for a replay: {exc.args[0]}") from exc
    try:
        position = part.start
        last_progress = time.monotonic()
        while position < part.end:
            for batch in consumer.poll_batches(BATCH, 1.0):
                last_progress = time.monotonic()
                position = batch.next_offset
                rows = _batch(part, batch)
                if rows.num_rows:
                    yield rows
            if (part.topic, part.partition) in consumer.eofs:
                break  # the range's end lies past what was written
            if time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise StromError(
                    f"reading {where} for a replay: no record for {STALL_TIMEOUT_S:.0f} s at "
                    f"offset {position}, before the range's end {part.end}"
                )
    except KafkaException as exc:
        raise StromError(f"reading {where} for a replay: {exc.args[0]}") from exc
    finally:
        consumer.close()


def _batch(part: RangePartition, batch: RecordBatch) -> pa.RecordBatch:
    """The records of ``batch`` before the range's end, as the replay's input rows."""
    offsets = batch.offsets()
    n = bisect.bisect_left(offsets, part.end)
    offsets = offsets[:n]
    return pa.RecordBatch.from_pydict(
        {
            "topic": pa.array([part.topic] * n, pa.string()),
            "partition": pa.array([part.partition] * n, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "key": pa.array(batch.keys()[:n], pa.binary()),
            "value": pa.array(batch.values()[:n], pa.binary()),
            "timestamp": pa.array(batch.timestamps()[:n], pa.int64()),
            "task": pa.array([-1] * n, pa.int32()),
            "seq": pa.array(offsets, pa.int64()),
        }
    )


def offset_ranges(admin: Admin, topics: Sequence[str]) -> tuple[list[list[Any]], dict[str, int]]:
    """Every partition of ``topics`` from its log start to its end offset as
    of now, and the cluster's topics' partition counts (on the driver)."""
    found = Topics(admin, admin.servers).describe(list(topics))
    missing = [t for t in topics if t not in found]
    if missing:
        raise StromError(
            f"topic(s) {', '.join(missing)} do not exist on the Kafka cluster at {admin.servers}"
        )
    try:
        metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        partitions = [TopicPartition(t, p) for t in topics for p in range(found[t])]
        low, high = (
            _offsets(admin, partitions, spec)
            for spec in (OffsetSpec.earliest(), OffsetSpec.latest())  # type: ignore[no-untyped-call]
        )
    except KafkaException as exc:
        raise StromError(
            f"reading the offsets of {', '.join(topics)} for a replay: {exc.args[0]}"
        ) from exc
    # Every topic's count: output topics the cluster has keep theirs.
    counts = {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None
    }
    ranges = [
        [t, p, low[(t, p)], high[(t, p)]]
        for t, p in ((tp.topic, tp.partition) for tp in partitions)
    ]
    return ranges, counts | found


def _offsets(
    admin: Admin, partitions: list[TopicPartition], spec: OffsetSpec
) -> dict[tuple[str, int], int]:
    futures = admin.list_offsets({tp: spec for tp in partitions}, request_timeout=REQUEST_TIMEOUT_S)
    return {(tp.topic, tp.partition): admin.result(f).offset for tp, f in futures.items()}
