"""The executor side of a replay: one stream task of one sub-topology, run by
the engine the streaming app uses (``StreamTask`` and its nodes and native
stores) over one partition's records, with what it writes captured as rows.

Nothing here imports pyspark: a Spark task calls :func:`run_task` with its
group's Arrow table and returns the Arrow table it gives back.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import json
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom import _core
from strom.config import StreamsConfig
from strom.errors import SerializationError, TopologyError
from strom.processor.api import Headers
from strom.processor.internals.task import (
    RecordCollector,
    StreamTask,
    TaskFactory,
)
from strom.processor.internals.topology_builder import (
    InternalTopologyBuilder,
    StoreDef,
    Subtopology,
)
from strom.serdes import Serde, Timestamped
from strom.spark import _types
from strom.state.internals.registry import store_kind

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
#              (timestamped window stores: their final contents),
#              packed: ``value`` holds up to PACKED_ROWS of them as an Arrow IPC
#              stream of CHANGELOG_SCHEMA (one row per window ever updated is
#              too many for Spark to carry as rows; only bootstrap reads them)
#   store      an entry of store ``name`` (window/session stores: timestamp and
#              offset carry the window start and end)
#   offset     input topic ``name``: the offset after the last record read and,
#              as timestamp, the partition time
#   task       the task's final times and metrics as JSON in ``value``
# A stage's output adds two columns per store of its sub-topology (see
# ``StagePlan.output_schema``): a store row's key and value decoded, null on
# every other row, so that ``Replay.table`` is a projection of the stage's
# persisted output, with no second trip through a Python worker.
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

# Records handed to the task per input partition at a time. Larger than a
# poll: fewer calls per record; the results do not depend on it (records are
# processed in timestamp order across partitions however they are queued).
CHUNK = 50_000

CHANGELOG_SCHEMA = pa.schema(
    [("seq", pa.int64()), ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.int64())]
)
PACKED_ROWS = 250_000


def pack(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def unpack(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


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
    # Whether the task gives back its stores' changelogs (for bootstrap):
    # without, every store runs unlogged and no changelog row is built; with,
    # the stores :func:`rebuilt_from_contents` still run unlogged.
    changelogs: bool = True
    # External topics whose partition counts the replay takes from the tasks
    # (after the stages): a task takes its own partition to exist in each.
    unsized: set[str] = field(default_factory=set)

    def topic_name(self, topic: str) -> str:
        app_id = StreamsConfig(self.props).application_id
        return self.builder.physical_topic(app_id, topic)

    def table_columns(self, store: str) -> tuple[str, str]:
        """The names of the columns that hold ``store``'s decoded keys and
        values in the stage's output."""
        index = self.subtopology.stores.index(store)
        return f"table{index}_key", f"table{index}_value"

    def output_schema(self) -> pa.Schema:
        """``OUTPUT_SCHEMA`` and each store's decoded key and value columns."""
        config = StreamsConfig(self.props)
        fields = list(OUTPUT_SCHEMA)
        for store in self.subtopology.stores:
            key, value = self.table_columns(store)
            key_type, value_type = table_types(*store_serdes(self.builder, config, store))
            fields += [pa.field(key, key_type), pa.field(value, value_type)]
        return pa.schema(fields)

    def external_topics(self) -> list[str]:
        """Physical names of the stage's input topics the replay does not feed."""
        own = {self.topic_name(t) for t in self.subtopology.source_topics}
        return sorted(own - self.internal)


@dataclass
class _Sent:
    """One send's records as Arrow columns: the task's output (mostly
    changelog records, one per update) stays compact, and the Python objects
    of each batch are freed as the task goes."""

    first_seq: int
    keys: pa.Array
    values: pa.Array
    timestamps: pa.Array
    partitions: pa.Array | None


class _Capture(RecordCollector):
    """Keeps what the task sends, as the columns each send hands over (no
    per-record Python), with the partition each record goes to and its
    position in the task's output (``seq``)."""

    def __init__(
        self, partitions: dict[str, int], task_partition: int, unsized: set[str] | None = None
    ) -> None:
        super().__init__(None, self._count)
        self._partitions = partitions
        self._task_partition = task_partition
        self._unsized = unsized or set()
        self.sent: dict[str, list[_Sent]] = {}
        self.count = 0

    def _count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None and topic in self._unsized:
            return self._task_partition + 1
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
        headers: Sequence[Headers | None] | None = None,
    ) -> None:
        # No headers: a replay's input frames have none to carry.
        if not len(keys):
            return
        # Partitions are worked out when the rows are assembled (changelog
        # records, most of what is sent, need none).
        self.sent.setdefault(topic, []).append(
            _Sent(
                self.count,
                pa.array(keys, pa.binary()),
                pa.array(values, pa.binary()),
                pa.array(timestamps, pa.int64()),
                None if partitions is None else pa.array(partitions, pa.int32()),
            )
        )
        self.count += len(keys)

    def default_partitions(self, topic: str, keys: Sequence[bytes | None]) -> list[int]:
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


def only_topic(table: pa.Table, topic: str) -> pa.Table:
    """The rows of ``topic`` (a null topic is none), without the topic
    column: what a stage reading one topic gets from Spark."""
    keep = pc.fill_null(pc.equal(table.column("topic"), topic), False)
    if not pc.all(keep).as_py():
        table = table.filter(keep)
    return table.drop_columns(["topic"])


def _chunks(
    table: pa.Table, topic: str, partition: int, internal: bool, size: int
) -> Iterator[_core.RecordBatch]:
    """One input partition's records in log order, in chunks: native
    batches, which the task reads as it reads the log (no Python object per
    record where its nodes take the bytes)."""
    if internal:
        rows = table.select(["task", "seq", "timestamp"]).to_pydict()
        order = pa.array(_merge_order(rows["task"], rows["seq"], rows["timestamp"]), pa.int64())
        table = table.take(order)
        offsets = pa.chunked_array([pa.array(range(len(table)), pa.int64())])
    else:
        offsets = table.column("offset")
        ordered = offsets.to_numpy()
        # A source read in log order (a Kafka source, a cached frame) needs no sort.
        if (ordered[1:] < ordered[:-1]).any():
            table = table.take(pc.sort_indices(offsets))
            offsets = table.column("offset")
    keys, values, stamps = (table.column(c) for c in ("key", "value", "timestamp"))
    for start in range(0, len(table), size):
        yield _core.replay_batch(
            topic,
            partition,
            *(
                column.slice(start, size).combine_chunks()
                for column in (keys, values, stamps, offsets)
            ),
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


def store_serdes(
    builder: InternalTopologyBuilder, config: StreamsConfig, name: str
) -> tuple[Serde[Any] | None, Serde[Any] | None, bool]:
    """The serdes ``Replay.table`` decodes store ``name``'s keys and values
    with (timestamped stores: the plain value), and whether it is windowed."""
    store = builder.stores[name]
    key_serde = store.key_serde if store.key_serde is not None else config["default.key.serde"]
    value_serde = (
        store.value_serde if store.value_serde is not None else config["default.value.serde"]
    )
    if store.timestamped and value_serde is not None:
        value_serde = Timestamped(value_serde)
    return key_serde, value_serde, store_kind(store).windowed


def table_types(
    key_serde: Serde[Any] | None, value_serde: Serde[Any] | None, window: bool
) -> tuple[pa.DataType, pa.DataType]:
    """The column types :func:`decode_entries` gives."""
    key_type = _types.arrow_type(key_serde)
    return (
        _types.window_struct(key_type) if window else key_type,
        _types.arrow_type(value_serde),
    )


def decode_entries(
    name: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    window: bool,
    entries: pa.RecordBatch | pa.Table,
) -> tuple[pa.Array, pa.Array]:
    """A store's entries (``key, value`` bytes; windowed: the window's start
    and end in ``timestamp, offset``) as typed key and value columns."""
    raw_keys = _flat(entries.column("key"))
    keys = _types.decode(key_serde, name, raw_keys)
    if window:
        keys = _types.windowed(
            keys, _flat(entries.column("timestamp")), _flat(entries.column("offset")), raw_keys
        )
    return keys, _types.decode(value_serde, name, _flat(entries.column("value")))


def _flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def rebuilt_from_contents(store: StoreDef) -> bool:
    """Whether the replay rebuilds the store's compacted changelog from its
    final contents instead of capturing a record per update (see
    ``StoreKind.changelog_from_contents``)."""
    return store.logged and store_kind(store).changelog_from_contents(store) is not None


def _replay_builder(plan: StagePlan) -> InternalTopologyBuilder:
    """The builder a replay task runs: every store unlogged when the replay
    keeps no changelogs, else those whose changelog it rebuilds from their
    final contents (no record captured per update either way)."""

    def unlogged(store: StoreDef) -> bool:
        return not plan.changelogs or rebuilt_from_contents(store)

    replayed = copy.copy(plan.builder)
    replayed.stores = {
        name: dataclasses.replace(store, logged=False) if unlogged(store) else store
        for name, store in plan.builder.stores.items()
    }
    return replayed


def open_task(
    plan: StagePlan, partition: int, collector: RecordCollector, state_dir: Path
) -> StreamTask:
    config = StreamsConfig(plan.props)
    # A cache of 0 bytes evicts (forwards) every write at once, as no cache
    # does: the stores then run uncached, on the engine's batch paths.
    size = config["statestore.cache.max.bytes"]
    cache = _core.NativeThreadCache(size) if size > 0 else None
    factory = TaskFactory(
        _replay_builder(plan),
        config,
        collector,
        plan.topic_name,
        state_dir,
        cache=cache,
        wall_clock=_no_wall_clock,
    )
    return factory.task(plan.subtopology, partition)


def _no_wall_clock() -> int:
    # Wall-clock punctuation is refused before a replay starts; a processor
    # asking for the system time gets the epoch, the same on every run.
    return 0


def run_task(
    plan: StagePlan, partition: int, table: pa.Table, timings: dict[str, float] | None = None
) -> pa.Table:
    """Runs task ``partition`` of the plan's sub-topology over ``table`` (rows
    of ``INPUT_SCHEMA``) and returns rows of ``OUTPUT_SCHEMA``. ``timings``
    (seconds by phase, the caller's own included) go into the task's row with
    the engine's and the result's."""
    state_dir = Path(tempfile.mkdtemp(prefix="strom-replay-"))
    collector = _Capture(plan.partitions, partition, plan.unsized)
    timings = dict(timings or {})
    try:
        task = open_task(plan, partition, collector, state_dir)
        try:
            started, cpu = time.perf_counter(), time.process_time()
            _feed(plan, task, partition, table)
            task.flush()  # one commit at the end: the caches write out
            timings["engine"] = time.perf_counter() - started
            # The worker's CPU time: what the engine costs, whatever the load.
            timings["engine_cpu"] = time.process_time() - cpu
            return _result(plan, task, partition, collector, timings)
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
    pending: dict[tuple[str, int], Iterator[_core.RecordBatch]] = {}
    if "topic" not in table.column_names:
        # The stage reads one external topic: Spark leaves the column out.
        (only,) = plan.external_topics()
        pending[(only, partition)] = _chunks(table, only, partition, False, plan.chunk)
    else:
        topics = table.column("topic")
        for topic in sorted(pc.unique(topics).to_pylist()):
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


def _result(
    plan: StagePlan,
    task: StreamTask,
    partition: int,
    collector: _Capture,
    timings: dict[str, float],
) -> pa.Table:
    """The task's output as rows of ``OUTPUT_SCHEMA``, built a column at a
    time: per changelog topic only the latest record per key (in the order
    of those latest writes; for stores that :func:`rebuilt_from_contents`,
    their final contents), then the stores' entries, offsets and the
    task's times."""
    started = time.perf_counter()
    schema = plan.output_schema()
    parts: list[pa.Table] = []
    # Each store's decoded entries, by the index of the part holding them.
    decoded: dict[int, tuple[str, pa.Array, pa.Array]] = {}
    # Stores whose entries the built-in serdes cannot read: ``Replay.table``
    # decodes them itself, and fails naming the bad value.
    undecoded: list[str] = []

    def add(
        kind: str,
        name: str,
        part: Any,
        seq: Any,
        keys: Any,
        values: Any,
        timestamps: Any,
        offsets: Any = None,
    ) -> None:
        n = len(keys)
        if not n:
            return
        columns = {
            "kind": pa.array([kind] * n, pa.string()),
            "name": pa.array([name] * n, pa.string()),
            "partition": _column([part] * n if isinstance(part, int) else part, pa.int32()),
            "task": pa.array([partition] * n, pa.int32()),
            "seq": _column(range(n) if seq is None else seq, pa.int64()),
            "key": _column(keys, pa.binary()),
            "value": _column(values, pa.binary()),
            "timestamp": _column(timestamps, pa.int64()),
            "offset": _column([-1] * n if offsets is None else offsets, pa.int64()),
        }
        parts.append(pa.Table.from_pydict(columns, schema=OUTPUT_SCHEMA))

    def add_changelog(topic: str, latest: pa.Table) -> None:
        blobs = [
            pack(latest.slice(start, PACKED_ROWS)) for start in range(0, len(latest), PACKED_ROWS)
        ]
        add("changelog", topic, partition, None, [None] * len(blobs), blobs, [-1] * len(blobs))

    changelogs = set(task.changelogs.values())
    for topic, sends in collector.sent.items():
        keys = pa.concat_arrays([s.keys for s in sends])
        values = pa.concat_arrays([s.values for s in sends])
        stamps = pa.concat_arrays([s.timestamps for s in sends])
        seqs = pa.array(
            np.concatenate(
                [np.arange(s.first_seq, s.first_seq + len(s.keys), dtype=np.int64) for s in sends]
            )
        )
        if topic in changelogs:
            add_changelog(
                topic,
                _latest_per_key(pa.table([seqs, keys, values, stamps], schema=CHANGELOG_SCHEMA)),
            )
        else:
            targets = pa.concat_arrays(
                [
                    pa.array(collector.default_partitions(topic, s.keys.to_pylist()), pa.int32())
                    if s.partitions is None
                    else s.partitions
                    for s in sends
                ]
            )
            add("sink", topic, targets, seqs, keys, values, stamps)

    for name, opened in task.state.stores.items():
        store_def = plan.builder.stores[name]
        contents = opened.kind.contents(opened.native)
        keys, values, starts, ends = contents
        n = len(keys)
        # Window and session stores: timestamp and offset carry the window.
        add("store", name, partition, None, keys, values, starts or [-1] * n, ends)
        if n and plan.table_columns(name)[0] in schema.names:
            try:
                typed = decode_entries(
                    name, *store_serdes(plan.builder, task.config, name), parts[-1]
                )
            except SerializationError:
                undecoded.append(name)
            else:
                decoded[len(parts) - 1] = (name, *typed)
        rebuild = opened.kind.changelog_from_contents(store_def) if plan.changelogs else None
        if rebuild is not None and store_def.logged:
            store_keys, changelog_values, stamps = rebuild(contents)
            changelog = pa.table(
                [
                    pa.array(range(n), pa.int64()),
                    pa.array(store_keys, pa.binary()),
                    pa.array(changelog_values, pa.binary()),
                    pa.array(stamps, pa.int64()),
                ],
                schema=CHANGELOG_SCHEMA,
            )
            add_changelog(f"{task.config.application_id}-{name}-changelog", changelog)

    for (topic, part), (offset, partition_time) in task.committable_offsets().items():
        add("offset", topic, part, [0], [None], [None], [int(partition_time)], [offset])
    meta = {
        "partition": partition,
        # The input partitions it read (the replay's partition counts).
        "inputs": sorted(task.queues),
        "stream_time": task.stream_time,
        "node_times": task.state.node_times,
        "records_processed": task.metrics.records_processed,
        "dropped_records": task.metrics.dropped_records,
        "skipped_records": task.metrics.skipped_records,
        "undecoded": undecoded,
        # Seconds per phase: the whole of this function as "result".
        "timings": timings | {"result": time.perf_counter() - started},
    }
    add("task", "", partition, [0], [None], [json.dumps(meta).encode()], [task.stream_time])
    tables = []
    for index, part in enumerate(parts):
        store, keys, values = decoded.get(index, ("", None, None))
        own = dict(zip(plan.table_columns(store), (keys, values), strict=True)) if store else {}
        extra = [
            own.get(column, pa.nulls(len(part), schema.field(column).type))
            for column in schema.names[len(OUTPUT_SCHEMA) :]
        ]
        tables.append(pa.Table.from_arrays([*part.columns, *extra], schema=schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _column(values: Any, kind: pa.DataType) -> pa.Array:
    if isinstance(values, pa.Array):
        return values if values.type == kind else values.cast(kind)
    return pa.array(values, kind)


def _latest_per_key(changes: pa.Table) -> pa.Table:
    """The latest change per key, in the order of those latest changes (the
    rows are in write order, ``seq`` rising)."""
    last = changes.group_by("key", use_threads=False).aggregate([("seq", "max")])
    seqs = changes.column("seq").to_numpy()
    return changes.take(np.searchsorted(seqs, np.sort(last.column("seq_max").to_numpy())))


def scheduled_wall_clock(task: StreamTask) -> list[str]:
    """Nodes of a freshly opened task that scheduled wall-clock punctuation."""
    return task.wall_clock_punctuations.scheduled_nodes()


def check_replayable(plan: StagePlan, state_dir: Path) -> None:
    """Opens the stage's task once on the driver and refuses what a replay
    cannot reproduce: wall-clock punctuation depends on when the app ran."""
    collector = _Capture(plan.partitions, 0, plan.unsized)
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
