"""The executor side of a replay: one stream task of one sub-topology, run by
the engine the streaming app uses (``StreamTask`` and its nodes and native
stores) over one partition's records, with what it writes captured as rows.

Nothing here imports pyspark: a Spark task calls :func:`run_task` with its
group's Arrow table and returns the Arrow table it gives back.
"""

from __future__ import annotations

import heapq
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strom import _core
from strom.config import StreamsConfig
from strom.errors import TopologyError
from strom.internals.task import RecordCollector, StreamTask
from strom.internals.topology_builder import InternalTopologyBuilder, Subtopology

# The records a task reads: external topics carry their offsets; records of
# topics the replay itself feeds (repartition topics) carry the producing task
# and its sequence number instead, and get their offsets here.
INPUT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("task", pa.int32()),
        ("seq", pa.int64()),
    ]
)

# What a task gives back, one row per item; ``kind`` says which:
#   sink       a record written to topic ``name`` (partition, producing task, seq)
#   changelog  the latest changelog record per key of changelog topic ``name``
#   store      an entry of store ``name`` (window/session stores: timestamp and
#              offset carry the window start and end)
#   offset     input topic ``name``: the offset after the last record read and,
#              as timestamp, the partition time
#   task       the task's final times and metrics as JSON in ``value``
OUTPUT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("name", pa.string()),
        ("partition", pa.int32()),
        ("task", pa.int32()),
        ("seq", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("offset", pa.int64()),
    ]
)

# Records handed to the task per input partition at a time (a poll's worth).
CHUNK = 10_000


@dataclass
class StagePlan:
    """Everything a Spark task needs to run one sub-topology's task (pickled
    into the UDF's closure)."""

    builder: InternalTopologyBuilder
    props: dict[str, Any]
    subtopology: Subtopology
    # Partition counts by physical topic name.
    partitions: dict[str, int]
    # Physical names of the topics whose records the replay itself produces.
    internal: set[str] = field(default_factory=set)
    chunk: int = CHUNK

    def topic_name(self, topic: str) -> str:
        app_id = StreamsConfig(self.props).application_id
        return self.builder.physical_topic(app_id, topic)


@dataclass
class _Records:
    """A chunk of one input partition, shaped like a native ``RecordBatch``."""

    topic: str
    partition: int
    _keys: list[bytes | None]
    _values: list[bytes | None]
    _timestamps: list[int]
    _offsets: list[int]

    def __len__(self) -> int:
        return len(self._keys)

    def keys(self) -> list[bytes | None]:
        return self._keys

    def values(self) -> list[bytes | None]:
        return self._values

    def timestamps(self) -> list[int]:
        return self._timestamps

    def offsets(self) -> list[int]:
        return self._offsets


class _Capture(RecordCollector):
    """Keeps what the task sends, with the partition each record goes to."""

    def __init__(self, partitions: dict[str, int], task_partition: int) -> None:
        super().__init__(None, self._count)
        self._partitions = partitions
        self._task_partition = task_partition
        self.sent: list[tuple[str, bytes | None, bytes | None, int, int]] = []

    def _count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            raise TopologyError(f"the replay does not know how many partitions {topic!r} has")
        return count

    def send(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int],
        partitions: Sequence[int] | None,
    ) -> None:
        if partitions is None:
            partitions = self._default_partitions(topic, keys)
        self.sent.extend(
            zip([topic] * len(keys), keys, values, timestamps, partitions, strict=True)
        )

    def _default_partitions(self, topic: str, keys: Sequence[bytes | None]) -> list[int]:
        """Kafka's default partitioner: murmur2 of the serialized key; a null
        key (spread by the producer in the streaming app) stays with the
        task's own partition number so the replay is deterministic."""
        count = self._count(topic)
        return [
            self._task_partition % count if k is None else _core.partition_for_key(k, count)
            for k in keys
        ]

    def flush(self) -> None:
        """Nothing to flush: the rows are returned with the task's result."""


def _chunks(
    table: pa.Table, topic: str, partition: int, internal: bool, size: int
) -> Iterator[_Records]:
    """One input partition's records in log order, in chunks."""
    rows = table.to_pydict()
    keys, values, stamps = rows["key"], rows["value"], rows["timestamp"]
    if internal:
        order = _merge_order(rows["task"], rows["seq"], stamps)
        offsets = list(range(len(order)))
    else:
        order = sorted(range(len(keys)), key=rows["offset"].__getitem__)
        offsets = [rows["offset"][i] for i in order]
    for start in range(0, len(order), size):
        picked = order[start : start + size]
        yield _Records(
            topic,
            partition,
            [keys[i] for i in picked],
            [values[i] for i in picked],
            [stamps[i] for i in picked],
            offsets[start : start + size],
        )


def _merge_order(tasks: list[int], seqs: list[int], stamps: list[int]) -> list[int]:
    """The order records of a repartition topic's partition take: each
    producing task's records keep their order (as Kafka guarantees), and the
    tasks' streams are merged by timestamp (ties by task), as concurrently
    running upstream tasks roughly interleave them."""
    by_task: dict[int, list[int]] = {}
    for i in sorted(range(len(tasks)), key=lambda i: (tasks[i], seqs[i])):
        by_task.setdefault(tasks[i], []).append(i)
    heap = [(stamps[rows[0]], task, 0) for task, rows in by_task.items()]
    heapq.heapify(heap)
    order = []
    while heap:
        _, task, position = heapq.heappop(heap)
        rows = by_task[task]
        order.append(rows[position])
        if position + 1 < len(rows):
            heapq.heappush(heap, (stamps[rows[position + 1]], task, position + 1))
    return order


def open_task(
    plan: StagePlan, partition: int, collector: RecordCollector, state_dir: Path
) -> StreamTask:
    config = StreamsConfig(plan.props)
    # A cache of 0 bytes evicts (forwards) every write at once, as no cache
    # does: the stores then run uncached, on the engine's batch paths.
    size = config["statestore.cache.max.bytes"]
    cache = _core.NativeThreadCache(size) if size > 0 else None
    return StreamTask(
        plan.subtopology,
        partition,
        plan.builder,
        config,
        collector,
        plan.topic_name,
        state_dir,
        wall_clock=_no_wall_clock,
        cache=cache,
    )


def _no_wall_clock() -> int:
    # Wall-clock punctuation is refused before a replay starts; a processor
    # asking for the system time gets the epoch, the same on every run.
    return 0


def run_task(plan: StagePlan, partition: int, table: pa.Table) -> pa.Table:
    """Runs task ``partition`` of the plan's sub-topology over ``table`` (rows
    of ``INPUT_SCHEMA``) and returns rows of ``OUTPUT_SCHEMA``."""
    state_dir = Path(tempfile.mkdtemp(prefix="strom-replay-"))
    collector = _Capture(plan.partitions, partition)
    try:
        task = open_task(plan, partition, collector, state_dir)
        try:
            _feed(plan, task, partition, table)
            task.flush()  # one commit at the end: the caches write out
            return _result(task, partition, collector)
        finally:
            task.close()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)


def _feed(plan: StagePlan, task: StreamTask, partition: int, table: pa.Table) -> None:
    """Hands the task its records a chunk per input partition at a time and
    lets it process them as the streaming app's task would: in timestamp
    order across its partitions, waiting for a partition that has records
    still to come (the default ``max.task.idle.ms`` with every record already
    in the log)."""
    pending: dict[tuple[str, int], Iterator[_Records]] = {}
    topics = table.column("topic")
    for topic in sorted(set(topics.to_pylist())):
        rows = table.filter(pc.equal(topics, topic))
        pending[(topic, partition)] = _chunks(
            rows, topic, partition, topic in plan.internal, plan.chunk
        )

    def must_wait(topic: str, part: int) -> bool:
        return (topic, part) in pending

    while pending:
        for key in list(pending):
            queue = task.queues.get(key)
            if queue is None or not queue.batches:
                chunk = next(pending[key], None)
                if chunk is None:
                    del pending[key]
                else:
                    task.add_records(chunk)
        task.process_ready(must_wait)
    task.process_ready(lambda _topic, _part: False)


def _result(task: StreamTask, partition: int, collector: _Capture) -> pa.Table:
    rows: dict[str, list[Any]] = {name: [] for name in OUTPUT_SCHEMA.names}

    def add(
        kind: str,
        name: str,
        part: int,
        seq: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        offset: int = -1,
    ) -> None:
        rows["kind"].append(kind)
        rows["name"].append(name)
        rows["partition"].append(part)
        rows["task"].append(partition)
        rows["seq"].append(seq)
        rows["key"].append(key)
        rows["value"].append(value)
        rows["timestamp"].append(timestamp)
        rows["offset"].append(offset)

    changelogs = set(task.changelogs.values())
    latest: dict[tuple[str, bytes | None], tuple[bytes | None, int, int]] = {}
    for seq, (topic, key, value, timestamp, part) in enumerate(collector.sent):
        if topic in changelogs:
            latest.pop((topic, key), None)  # keep the latest write, in write order
            latest[(topic, key)] = (value, timestamp, seq)
        else:
            add("sink", topic, part, seq, key, value, timestamp)
    for (topic, key), (value, timestamp, seq) in latest.items():
        add("changelog", topic, partition, seq, key, value, timestamp)

    for name, opened in task.state.stores.items():
        native = opened.native
        if isinstance(native, _core.NativeKeyValueStore):
            for seq, (key, value) in enumerate(native.range(None, None)):
                add("store", name, partition, seq, key, value, -1)
        else:
            columns = (
                native.all()
                if isinstance(native, _core.NativeWindowStore)
                else native.fetch_range(None, None)
            )
            keys, starts, ends, values = columns
            for seq in range(len(keys)):
                add("store", name, partition, seq, keys[seq], values[seq], starts[seq], ends[seq])

    for (topic, part), (offset, partition_time) in task.committable_offsets().items():
        add("offset", topic, part, 0, None, None, int(partition_time), offset)
    meta = {
        "stream_time": task.stream_time,
        "node_times": task.state.node_times,
        "records_processed": task.metrics.records_processed,
        "dropped_records": task.metrics.dropped_records,
        "skipped_records": task.metrics.skipped_records,
    }
    add("task", "", partition, 0, None, json.dumps(meta).encode(), task.stream_time)
    return pa.Table.from_pydict(rows, schema=OUTPUT_SCHEMA)


def scheduled_wall_clock(task: StreamTask) -> list[str]:
    """Nodes of a freshly opened task that scheduled wall-clock punctuation."""
    return task.wall_clock_punctuations.scheduled_nodes()


def check_replayable(plan: StagePlan, state_dir: Path) -> None:
    """Opens the stage's task once on the driver and refuses what a replay
    cannot reproduce: wall-clock punctuation depends on when the app ran."""
    collector = _Capture(plan.partitions, 0)
    task = open_task(plan, 0, collector, state_dir)
    try:
        nodes = scheduled_wall_clock(task)
        if nodes:
            raise TopologyError(
                f"processor {nodes[0]!r} schedules a WALL_CLOCK_TIME punctuation; a replay "
                "cannot reproduce wall-clock time (use STREAM_TIME punctuation)"
            )
    finally:
        task.close()
