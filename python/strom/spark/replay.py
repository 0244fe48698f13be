"""Batch replay of a topology on PySpark.

The driver plans one Spark stage per sub-topology, writers before readers.
A stage groups its input records by partition (``groupBy(partition)
.applyInArrow``): each group is one stream task, which runs in the Arrow UDF
on the same engine as the streaming app (``StreamTask``, its nodes, the native
stores and kernels) and gives back what it wrote: sink and repartition
records, the latest changelog record per key, its final store contents, the
offsets and partition times it reached. Repartition records are the next
stage's input, grouped by the partition Kafka's murmur2 partitioner chose.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from strom import _core, errors
from strom.config import EMIT_INTERVAL_WINDOWED, StreamsConfig
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, StromError, TopologyError
from strom.processor.internals.topology_builder import InternalTopologyBuilder, SinkDef, Subtopology
from strom.serdes import Serde
from strom.spark import bootstrap
from strom.spark._task import (
    INPUT_SCHEMA,
    OUTPUT_SCHEMA,
    StagePlan,
    check_replayable,
    decode_entries,
    only_topic,
    run_task,
    store_serdes,
    table_types,
)
from strom.topology import Topology

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["Replay", "replay"]

log = logging.getLogger("strom.spark")

# (topic, partition) -> offset
Offsets = Mapping[tuple[str, int], int]
# Called after each stage: (stages done, stages in all, records the stage read)
ProgressListener = Callable[[int, int, int], None]

# No record cache unless the config sets one: every update is emitted, as by
# the TopologyTestDriver (a cache would only decide which updates a commit at
# the very end lets through, which no streaming run reproduces).
_DEFAULT_PROPS = {
    "application.id": "strom-replay",
    "bootstrap.servers": "replay:0",
    "statestore.cache.max.bytes": 0,
}


@dataclass
class _Stage:
    subtopology: Subtopology
    plan: StagePlan
    output: DataFrame | None = None
    records: int = 0
    # Each task's final times, metrics and timings (its "task" row).
    tasks: list[dict[str, Any]] = field(default_factory=list)
    # The wall time of the Spark job that ran the stage.
    job_seconds: float = 0.0


def replay(
    topology: Topology,
    spark: SparkSession,
    *,
    source: str | DataFrame,
    config: Mapping[str, Any] | None = None,
    start_offsets: Offsets | None = None,
    end_offsets: Offsets | None = None,
    progress: ProgressListener | None = None,
    changelogs: bool = False,
    source_partitioned: bool = False,
) -> Replay:
    """Replays ``topology`` over the records of ``source`` on Spark and
    returns the :class:`Replay`, whose stages have all run.

    ``source`` is ``"embedded:PATH"`` (an embedded log, read on the driver),
    or a DataFrame with columns ``key, value`` (binary or string),
    ``timestamp`` (epoch ms, or a Spark timestamp), ``topic``, ``partition``
    and ``offset``. ``start_offsets`` / ``end_offsets`` bound each
    ``(topic, partition)`` to ``start <= offset < end``. ``config`` is the
    app's StreamsConfig (``application.id`` names internal topics and
    ``deserialization.exception.handler``, ``statestore.cache.max.bytes`` and
    the default serdes apply as in the streaming app, except that the record
    cache is off unless ``config`` sizes it: every update is emitted).
    ``changelogs`` keeps each store's changelog (the latest record per key),
    which :meth:`Replay.bootstrap` writes; without it the stores run
    unlogged, which is faster. ``source_partitioned`` says that the source
    DataFrame holds all records of each partition number (of every topic) in
    one Spark partition: the replay then runs its first sub-topologies where
    the records are, with no shuffle (checked: a partition found in two Spark
    partitions fails the replay with a ``ConfigError``). A Kafka source is
    read that way always.
    """
    # No wall clock in a replay: emit-final aggregations look for closed
    # windows on every record, as in the test driver.
    props = {**_DEFAULT_PROPS, **dict(config or {}), EMIT_INTERVAL_WINDOWED: 0}
    streams_config = StreamsConfig(props)
    builder = topology._internal
    _refuse_unreplayable(builder)
    subs = builder.subtopologies()
    app_id = streams_config.application_id

    def physical(topic: str) -> str:
        return builder.physical_topic(app_id, topic)

    fed = {physical(t) for s in subs for t in s.sink_topics} & {
        physical(t) for s in subs for t in s.source_topics
    }
    external = sorted({physical(t) for s in subs for t in s.source_topics} - fed)
    planning = time.monotonic()
    frame, known_partitions, partitioned, read_ends = _source_frame(
        spark, source, external, streams_config, start_offsets, end_offsets, source_partitioned
    )
    # A DataFrame's partition counts take a Spark job, unless the tasks can
    # report them: when no stage needs them before it runs (it reads the
    # source in place and nothing is written to a topic, whose partitions
    # follow from them).
    unsized: set[str] = set()
    if known_partitions is None:
        if partitioned and not any(sub.sink_topics for sub in subs):
            unsized, known_partitions = set(external), {}
        else:
            known_partitions = _frame_partitions(frame, external)
    frame = _bounded(frame, start_offsets, end_offsets)
    partitions = (
        {} if unsized else _partition_counts(builder, subs, physical, known_partitions, external)
    )

    stages = [
        _Stage(
            sub,
            StagePlan(
                builder,
                props,
                sub,
                partitions,
                {physical(t) for t in sub.source_topics} & fed,
                changelogs=changelogs,
                unsized=unsized,
            ),
        )
        for sub in _ordered(subs, physical, fed)
    ]
    state_dir = Path(tempfile.mkdtemp(prefix="strom-replay-check-"))
    try:
        for stage in stages:
            check_replayable(stage.plan, state_dir)
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
    log.debug("replay %s: planned in %.2f s", app_id, time.monotonic() - planning)

    result = Replay(builder, streams_config, partitions, external, stages, changelogs, read_ends)
    for index, stage in enumerate(stages):
        started = time.monotonic()
        _run_stage(stage, frame, stages[:index], partitioned)
        log.info(
            "replay %s: sub-topology %d done (%d/%d): %d input record(s) in %.1f s",
            app_id,
            stage.subtopology.id,
            index + 1,
            len(stages),
            stage.records,
            time.monotonic() - started,
        )
        if progress is not None:
            progress(index + 1, len(stages), stage.records)
    if unsized:
        # The partitions the tasks read, and those the bounds name (whose
        # records they may have left out), as the sizing job would count them.
        seen = [
            (topic, part)
            for stage in stages
            for meta in stage.tasks
            for topic, part in meta["inputs"]
        ]
        seen += [key for bounds in (start_offsets, end_offsets) for key in bounds or {}]
        highest: dict[str, int] = {}
        for topic, part in seen:
            if topic in unsized:
                highest[topic] = max(highest.get(topic, -1), part)
        known = {topic: n + 1 for topic, n in highest.items()}
        partitions.update(_partition_counts(builder, subs, physical, known, external))
    return result


def _refuse_unreplayable(builder: InternalTopologyBuilder) -> None:
    if builder.global_stores:
        name = sorted(builder.global_stores)[0]
        raise TopologyError(
            f"global store {name!r} (a GlobalKTable or add_global_store) cannot be replayed "
            "on Spark yet: its contents depend on when each record arrived"
        )


def _ordered(
    subs: list[Subtopology], physical: Callable[[str], str], fed: set[str]
) -> list[Subtopology]:
    """Sub-topologies with each after those that feed it."""
    writers = {physical(t): sub.id for sub in subs for t in sub.sink_topics}
    needs = {
        sub.id: {writers[physical(t)] for t in sub.source_topics if physical(t) in fed} - {sub.id}
        for sub in subs
    }
    done: list[Subtopology] = []
    while len(done) < len(subs):
        ready = [s for s in subs if s not in done and needs[s.id] <= {d.id for d in done}]
        if not ready:
            stuck = [s.id for s in subs if s not in done]
            raise TopologyError(f"sub-topologies {stuck} feed each other in a cycle")
        done.append(ready[0])
    return done


# --- sources ------------------------------------------------------------------


def _source_frame(
    spark: SparkSession,
    source: str | DataFrame,
    topics: list[str],
    config: StreamsConfig,
    start: Offsets | None,
    end: Offsets | None,
    partitioned: bool,
) -> tuple[DataFrame, dict[str, int] | None, bool, Offsets]:
    """The input records as a DataFrame of ``INPUT_SCHEMA`` (only the
    topology's external topics), the partition counts the source knows
    (None for a DataFrame: :func:`_frame_partitions` counts them), whether
    each partition number's records are in one Spark partition, and the
    offset each partition's read ends at where the source knows it (a
    DataFrame: the ``end`` bounds given), empty partitions included."""
    from pyspark.sql import DataFrame  # noqa: PLC0415 - pyspark is optional

    if partitioned and not isinstance(source, DataFrame):
        raise ConfigError(
            f"source_partitioned applies to a DataFrame source, not {source!r} (a Kafka "
            "source is read partitioned always)"
        )
    if isinstance(source, DataFrame):
        return _from_frame(source, topics), None, partitioned, dict(end or {})
    if isinstance(source, str) and source.startswith("embedded:"):
        frame, counts, ends = _from_embedded(spark, source.removeprefix("embedded:"), topics)
        bounded = {key: min(offset, (end or {}).get(key, offset)) for key, offset in ends.items()}
        return frame, counts, False, bounded
    if isinstance(source, str) and source.strip():
        frame, counts, ends = _from_kafka(spark, source, topics, config, start, end)
        return frame, counts, True, ends
    raise ConfigError(f"replay source must be 'embedded:PATH' or a DataFrame, not {source!r}")


def _from_frame(frame: DataFrame, topics: list[str]) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: PLC0415
    from pyspark.sql.types import BinaryType, StringType, TimestampNTZType, TimestampType  # noqa: PLC0415

    columns = {f.name: f.dataType for f in frame.schema.fields}
    missing = [
        c for c in ("key", "value", "timestamp", "topic", "partition", "offset") if c not in columns
    ]
    if missing:
        raise ConfigError(
            f"the replay source DataFrame lacks column(s) {', '.join(missing)}; it needs "
            "key, value, timestamp, topic, partition, offset"
        )

    def raw(name: str) -> Column:
        kind = columns[name]
        if isinstance(kind, BinaryType):
            return F.col(name)
        if isinstance(kind, StringType):
            return F.encode(F.col(name), "UTF-8")
        raise ConfigError(
            f"the replay source's {name!r} column must be binary or string, not {kind}"
        )

    stamp = F.col("timestamp")
    if isinstance(columns["timestamp"], TimestampType | TimestampNTZType):
        stamp = F.unix_millis(stamp)
    normalized = frame.select(
        F.col("topic").cast("string").alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        raw("key").alias("key"),
        raw("value").alias("value"),
        stamp.cast("long").alias("timestamp"),
        F.lit(-1).cast("int").alias("task"),
        F.col("offset").cast("long").alias("seq"),
    )
    # Records of other topics are left out by each stage (_run_stage).
    return normalized


def _frame_partitions(frame: DataFrame, topics: list[str]) -> dict[str, int]:
    """The partition count of each topic with records in ``frame`` (of
    ``INPUT_SCHEMA``): its largest partition number + 1."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    # One global aggregate (a max per topic): no grouping by topic name, and
    # only the two columns read.
    (highest,) = frame.agg(
        *[F.max(F.when(F.col("topic") == topic, F.col("partition"))) for topic in topics]
    ).collect()
    return {topic: int(n) + 1 for topic, n in zip(topics, highest, strict=True) if n is not None}


def _from_embedded(
    spark: SparkSession, path: str, topics: list[str]
) -> tuple[DataFrame, dict[str, int], Offsets]:
    """Reads the topics of an embedded log on the driver (the log is local
    disk, open in this process) into a DataFrame, each batch read made into
    Arrow columns natively; with each partition's end offset."""
    log_ = EmbeddedLog(path)
    existing = set(log_.topics())
    missing = [t for t in topics if t not in existing]
    if missing:
        raise TopologyError(
            f"topic(s) {', '.join(missing)} do not exist in the embedded log {path}"
        )
    # Every topic's count: output topics the log has keep theirs.
    counts = {topic: log_.partitions(topic) for topic in existing}
    tables = []
    read_ends: dict[tuple[str, int], int] = {}
    for topic in topics:
        ends = log_.end_offsets(topic)
        read_ends.update({(topic, partition): end for partition, end in ends.items()})
        for partition, start in log_.log_start_offsets(topic).items():
            offset = start
            while offset < ends[partition]:
                batch = log_.read_batch(topic, partition, offset, 100_000)
                if not len(batch):
                    break
                # The batch's columns as Arrow arrays natively: no Python
                # object per record.
                key, value, timestamp, part, offsets = (
                    pa.array(column)
                    for column in _core.arrow_columns(batch, key="binary", value="binary")
                )
                n = len(batch)
                tables.append(
                    pa.table(
                        {
                            "topic": pa.repeat(pa.scalar(topic, pa.string()), n),
                            "partition": part,
                            "offset": offsets,
                            "key": key,
                            "value": value,
                            "timestamp": timestamp,
                            "task": pa.repeat(pa.scalar(-1, pa.int32()), n),
                            "seq": offsets,
                        },
                        schema=INPUT_SCHEMA,
                    )
                )
                offset = batch.next_offset
    table = pa.concat_tables(tables) if tables else INPUT_SCHEMA.empty_table()
    return spark.createDataFrame(table), counts, read_ends


def _from_kafka(
    spark: SparkSession,
    servers: str,
    topics: list[str],
    config: StreamsConfig,
    start: Offsets | None,
    end: Offsets | None,
) -> tuple[DataFrame, dict[str, int], Offsets]:
    """Offset ranges of a Kafka cluster, read in the Spark tasks (one per
    topic-partition) by the ``strom-kafka`` Python Data Source; with the
    offset each range ends at."""
    # Imports pyspark's data source API and strom.kafka (confluent-kafka: optional).
    from strom.kafka.clients import Admin, admin_config  # noqa: PLC0415
    from strom.spark.kafka_source import KafkaRangeSource, offset_ranges  # noqa: PLC0415

    # The app's client settings (security: docs/security.md), on the source's cluster.
    consumer = config.client_config("consumer.") | {"bootstrap.servers": servers}
    admin = Admin(admin_config(config) | {"bootstrap.servers": servers}, config.application_id)
    ranges, counts = offset_ranges(admin, topics)
    for bounds in ranges:
        key = (bounds[0], bounds[1])
        bounds[2] = max(bounds[2], (start or {}).get(key, bounds[2]))
        bounds[3] = min(bounds[3], (end or {}).get(key, bounds[3]))
    spark.dataSource.register(KafkaRangeSource)
    frame = (
        spark.read.format(KafkaRangeSource.name())
        .option("ranges", json.dumps(ranges))
        .option("consumer", json.dumps(consumer))
        .load()
    )
    return frame, counts, {(bounds[0], bounds[1]): bounds[3] for bounds in ranges}


def _bounded(frame: DataFrame, start: Offsets | None, end: Offsets | None) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: PLC0415

    for bounds, keep in ((start, F.col("offset").__ge__), (end, F.col("offset").__lt__)):
        for (topic, partition), offset in (bounds or {}).items():
            here = (F.col("topic") == topic) & (F.col("partition") == partition)
            frame = frame.filter(~here | keep(offset))
    return frame


def _partition_counts(
    builder: InternalTopologyBuilder,
    subs: list[Subtopology],
    physical: Callable[[str], str],
    known: dict[str, int],
    external: list[str],
) -> dict[str, int]:
    """Partition counts of every topic the replay reads or writes: the
    source's for its topics; repartition topics sized as the streaming app
    sizes them; output topics the source does not know get as many
    partitions as the sub-topology writing them has tasks."""
    counts = {t: known[t] for t in external if t in known}
    for sub in subs:
        sizes = [counts[physical(t)] for t in sub.source_topics if physical(t) in counts]
        for topic in sub.source_topics:
            if physical(topic) in external and physical(topic) not in counts:
                counts[physical(topic)] = max(sizes, default=1)
    for topic, n in builder.repartition_partitions.items():
        counts[physical(topic)] = n
    pending = [s for s in subs]
    while pending:
        progressed = False
        for sub in list(pending):
            inputs = [physical(t) for t in sub.source_topics]
            if all(t in counts for t in inputs):
                tasks = max(counts[t] for t in inputs)
                for topic in sub.sink_topics:
                    counts.setdefault(physical(topic), known.get(physical(topic), tasks))
                pending.remove(sub)
                progressed = True
        if not progressed:
            raise TopologyError(
                f"cannot size the topics of sub-topologies {[s.id for s in pending]}: a cycle"
            )
    return counts


# --- running --------------------------------------------------------------------


def _run_stage(stage: _Stage, frame: DataFrame, earlier: list[_Stage], partitioned: bool) -> None:
    from pyspark import StorageLevel  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    plan = stage.plan
    own = [plan.topic_name(t) for t in stage.subtopology.source_topics]
    # A source already split by partition number runs where it is (checked
    # below: no stream task may come out of two Spark tasks).
    in_place = partitioned and not plan.internal
    # One external topic read in place: its tasks drop other topics' records
    # themselves. Spark filtering on the topic makes every row be copied
    # once more (into the projection after the filter), which costs the JVM
    # more than sending the topic column along.
    only = plan.external_topics()[0] if in_place and len(plan.external_topics()) == 1 else None
    inputs = frame
    if only is None:
        inputs = frame.filter(F.col("topic").isin([t for t in own if t not in plan.internal]))
    for prior in earlier:
        assert prior.output is not None
        fed = prior.output.filter(
            (F.col("kind") == "sink") & F.col("name").isin(sorted(plan.internal))
        ).select(
            F.col("name").alias("topic"),
            "partition",
            F.lit(-1).cast("long").alias("offset"),
            "key",
            "value",
            "timestamp",
            "task",
            "seq",
        )
        inputs = inputs.unionByName(fed)

    # One Spark task per stream task, in parallel: a groupBy would hash
    # partition numbers into colliding shuffle partitions (and adaptive
    # execution would coalesce small ones), running several stream tasks one
    # after another in one Spark task. Spread by a column whose hash sends
    # partition i to Spark partition i (a fixed count: not coalesced), and
    # run each Spark partition's tasks without Spark sorting to group them.
    columns = inputs.columns
    if not plan.internal and len(plan.external_topics()) == 1:
        # One external topic: the topic name and the producer columns are
        # the same on every row; leaving them out is less to shuffle and send.
        columns = ["partition", "offset", "key", "value", "timestamp"]
    if only is not None:
        inputs = inputs.select("topic", *columns)
    elif in_place:
        inputs = inputs.select(*columns)
    else:
        count = max((plan.partitions.get(t, 1) for t in own), default=1)
        buckets = F.array(*[F.lit(b) for b in _hash_buckets(frame.sparkSession, count)])
        bucket = F.element_at(buckets, F.pmod(F.col("partition"), F.lit(count)) + 1)
        inputs = (
            inputs.select(*columns, bucket.alias("bucket"))
            .repartition(count, "bucket")
            .drop("bucket")
        )

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        started = time.perf_counter()
        received = list(batches)
        if not received:
            return
        table = pa.Table.from_batches(received)
        if only is not None:
            table = only_topic(table, only)
            if not len(table):
                return
        # The input's way here: the shuffle's read and the Arrow transfer.
        timings = {"receive": time.perf_counter() - started}
        numbers = table.column("partition")
        found = sorted(set(pc.unique(numbers).to_pylist()))
        for partition in found:
            # One stream task per Spark task (the usual case): no copy.
            rows = table if len(found) == 1 else table.filter(pc.equal(numbers, partition))
            yield from run_task(plan, partition, rows, timings).to_batches()
            timings = {"receive": 0.0}

    output = inputs.mapInArrow(run, _spark_schema(plan.output_schema()))
    output = output.persist(StorageLevel.MEMORY_AND_DISK)
    stage.output = output
    started = time.perf_counter()
    try:
        with _no_arrow_byte_limit(frame.sparkSession):
            tasks = output.filter(F.col("kind") == "task").select("value").collect()
    except Exception as exc:
        raise _strom_error(exc, stage.subtopology.id) from exc
    stage.job_seconds = time.perf_counter() - started
    metas = stage.tasks = [json.loads(row["value"]) for row in tasks]
    stage.records = sum(meta["records_processed"] for meta in metas)
    ran = Counter(meta["partition"] for meta in metas)
    split = sorted(p for p, n in ran.items() if n > 1)
    if split:
        raise ConfigError(
            f"the replay source is not partitioned by partition number (source_partitioned): "
            f"the records of partition {split[0]} of sub-topology {stage.subtopology.id} "
            f"came in {ran[split[0]]} Spark partitions; leave source_partitioned out to "
            "have the replay shuffle them"
        )
    for meta in metas:
        log.debug(
            "sub-topology %d, task %d: %s",
            stage.subtopology.id,
            meta["partition"],
            ", ".join(f"{phase} {s:.2f} s" for phase, s in meta["timings"].items()),
        )
    # What the job took beyond its slowest task: Spark's scheduling, the
    # Python worker's start and the rows' way back.
    slowest = max(
        (sum(s for phase, s in meta["timings"].items() if phase != "engine_cpu") for meta in metas),
        default=0.0,
    )
    log.debug(
        "sub-topology %d: Spark job %.2f s, its slowest task %.2f s",
        stage.subtopology.id,
        stage.job_seconds,
        slowest,
    )


# Spark's cap on the bytes of an Arrow batch sent to a Python worker; at
# Int.MaxValue it goes unchecked. Otherwise Spark sizes the batch after every
# row it adds (a walk over all its vectors, a third of the stage's JVM time in
# a profile); the rows per batch (maxRecordsPerBatch) still bound it.
_ARROW_MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"
_UNCHECKED = str(2**31 - 1)


@contextmanager
def _no_arrow_byte_limit(spark: SparkSession) -> Iterator[None]:
    """The session's Arrow batch byte cap off while a stage's job runs (its
    tasks read the setting when they start), then as it was."""
    before = spark.conf.get(_ARROW_MAX_BYTES, None)
    spark.conf.set(_ARROW_MAX_BYTES, _UNCHECKED)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_ARROW_MAX_BYTES)
        else:
            spark.conf.set(_ARROW_MAX_BYTES, before)


# Spark's hash is fixed (Murmur3, seed 42): the buckets per count are too.
_BUCKETS: dict[int, list[int]] = {}


def _hash_buckets(spark: SparkSession, count: int) -> list[int]:
    """For each ``i < count`` a number Spark's hash partitioner sends to
    shuffle partition ``i`` of ``count``, found with Spark's own hash."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    known = _BUCKETS.get(count)
    if known is not None:
        return known
    limit = 16 * count + 64
    while True:
        rows = (
            spark.range(limit)
            .select(F.pmod(F.hash("id"), F.lit(count)).alias("target"), "id")
            .groupBy("target")
            .agg(F.min("id").alias("id"))
            .collect()
        )
        found = {int(row["target"]): int(row["id"]) for row in rows}
        if len(found) == count:
            _BUCKETS[count] = [found[i] for i in range(count)]
            return _BUCKETS[count]
        limit *= 4


def _strom_error(exc: Exception, sub: int) -> Exception:
    """A strom error raised in a Spark task, raised again on the driver as
    itself (Spark reports it as text); other failures pass unchanged."""
    found = re.findall(r"^strom\.errors\.(\w+): (.*)$", str(exc), re.MULTILINE)
    kind = getattr(errors, found[-1][0], None) if found else None
    if not (isinstance(kind, type) and issubclass(kind, errors.StromError)):
        return exc
    return kind(f"{found[-1][1]} (replay of sub-topology {sub} on Spark)")


def _spark_schema(schema: pa.Schema) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema  # noqa: PLC0415

    return from_arrow_schema(schema)


class Replay:
    """The results of a replay: output streams, final tables, and the state to
    start a streaming app from (``bootstrap``). Its DataFrames are persisted;
    ``close()`` (or ``with``) releases them."""

    def __init__(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        partitions: dict[str, int],
        external: list[str],
        stages: list[_Stage],
        changelogs: bool = False,
        read_ends: Offsets | None = None,
    ) -> None:
        self._builder = builder
        # Where the read of each source partition ended, records or none.
        self._read_ends = read_ends or {}
        self.changelogs = changelogs
        self.config = config
        self.partitions = partitions
        self._external = external
        self._stages = stages

    def _rows(self, kind: str, name: str | None = None) -> DataFrame:
        from pyspark.sql import functions as F  # noqa: PLC0415

        columns = OUTPUT_SCHEMA.names
        frames = [s.output.select(*columns) for s in self._stages if s.output is not None]
        if not frames:
            raise StromError("the replay has no results")
        union = frames[0]
        for frame in frames[1:]:
            union = union.unionByName(frame)
        condition = F.col("kind") == kind
        if name is not None:
            condition &= F.col("name") == name
        return union.filter(condition)

    def _serde(self, serde: Serde[Any] | None, default: str) -> Serde[Any] | None:
        return serde if serde is not None else self.config[default]

    def output(self, topic: str) -> DataFrame:
        """What the streaming app would have written to ``topic``: ``key,
        value, timestamp, partition, offset``, keys and values deserialized
        with the sink's serdes when they are built-in (bytes otherwise).
        ``offset`` orders each partition: every producing task's records in
        the order it wrote them, tasks one after another."""
        from pyspark.sql import Window  # noqa: PLC0415
        from pyspark.sql import functions as F  # noqa: PLC0415

        app_id = self.config.application_id
        sinks = [
            n
            for n in self._builder.nodes.values()
            if isinstance(n, SinkDef)
            and (
                n.topic_extractor is not None
                or self._builder.physical_topic(app_id, n.topic) == topic
            )
        ]
        if not sinks:
            raise TopologyError(f"no sink of this topology writes to topic {topic!r}")
        key_serde = self._serde(sinks[0].key_serde, "default.key.serde")
        value_serde = self._serde(sinks[0].value_serde, "default.value.serde")
        order = Window.partitionBy("partition").orderBy("task", "seq")
        rows = self._rows("sink", topic).select(
            "key",
            "value",
            "timestamp",
            "partition",
            (F.row_number().over(order) - 1).cast("long").alias("offset"),
        )
        return _decoded(rows, topic, key_serde, value_serde, window=False)

    def table(self, store_name: str) -> DataFrame:
        """The final contents of state store ``store_name``: ``key, value``
        (window and session stores: ``key`` is a struct of ``key, start,
        end``), deserialized with the store's serdes when they are built-in;
        timestamped stores give the plain value."""
        if store_name not in self._builder.stores:
            raise TopologyError(f"no state store named {store_name!r} in this topology")
        from pyspark.sql import functions as F  # noqa: PLC0415

        stage = next((s for s in self._stages if store_name in s.subtopology.stores), None)
        if (
            stage is not None
            and stage.output is not None
            and stage.plan.table_columns(store_name)[0] in stage.output.columns
            and not any(store_name in meta["undecoded"] for meta in stage.tasks)
        ):
            # Decoded by the stage's tasks: a projection of their output.
            key, value = stage.plan.table_columns(store_name)
            return stage.output.filter(
                (F.col("kind") == "store") & (F.col("name") == store_name)
            ).select(F.col(key).alias("key"), F.col(value).alias("value"))
        # Some value the serdes cannot read: decoding it again here fails
        # naming it when the table is read, as for any other bad value.
        key_serde, value_serde, windowed = store_serdes(self._builder, self.config, store_name)
        columns = ["key", "value", "timestamp", "offset"] if windowed else ["key", "value"]
        rows = self._rows("store", store_name).select(*columns)
        return _decoded(rows, store_name, key_serde, value_serde, window=windowed)

    def metrics(self) -> dict[str, int]:
        """Totals over the replay's tasks: records processed, dropped (a
        negative timestamp, a null key in an aggregation, …) and skipped
        (undeserializable, under ``log_and_continue``)."""
        totals = {"records-processed": 0, "dropped-records": 0, "skipped-records": 0}
        # Collected when the stages ran: no Spark job.
        for meta in (meta for stage in self._stages for meta in stage.tasks):
            totals["records-processed"] += meta["records_processed"]
            totals["dropped-records"] += meta["dropped_records"]
            totals["skipped-records"] += meta["skipped_records"]
        return totals

    def close(self) -> None:
        """Releases the persisted results."""
        for stage in self._stages:
            if stage.output is not None:
                stage.output.unpersist()

    def __enter__(self) -> Replay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def bootstrap(self, config: Mapping[str, Any]) -> None:
        """Writes the replay's end state so that ``KafkaStreams(topology,
        config)`` continues where the replay ended: see
        :func:`strom.spark.bootstrap.bootstrap`."""
        bootstrap.bootstrap(self, config)

    # --- for bootstrap --------------------------------------------------------
    def _collect(self, kind: str) -> Iterator[Any]:
        yield from self._rows(kind).toLocalIterator()


def _decoded(
    rows: DataFrame,
    topic: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    *,
    window: bool,
) -> DataFrame:
    """Rows with ``key`` and ``value`` bytes turned into typed columns. With
    ``window`` the result is ``key, value`` and ``key`` a struct of the key
    and the window's start and end (the rows' ``timestamp`` and ``offset``)."""
    key_type, value_type = table_types(key_serde, value_serde, window)
    extra = [] if window else [c for c in rows.columns if c not in ("key", "value")]
    schema = pa.schema(
        [
            pa.field("key", key_type),
            pa.field("value", value_type),
            *(pa.field(c, pa.int32() if c == "partition" else pa.int64()) for c in extra),
        ]
    )

    def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            keys, values = decode_entries(topic, key_serde, value_serde, window, batch)
            out = {"key": keys, "value": values}
            for name in extra:
                out[name] = batch.column(name).cast(schema.field(name).type)
            yield pa.RecordBatch.from_pydict(out, schema=schema)

    return rows.mapInArrow(convert, _spark_schema(schema))
