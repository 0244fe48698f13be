"""Spark replay throughput: a tumbling-window count (10 s windows, 2 s
grace) over generated events on local[2], against Spark's own
``groupBy(window(timestamp, "10 seconds"), key).count()`` on the same
DataFrame in the same run. Spark's built-in is not exact (no stream time, no
grace drops); the replay is.

Each round also records the CPU time of this process and its children (the
JVM and the Python workers, from /proc on Linux): on a loaded machine the
wall times follow the load, the CPU times much less.

Records: ``STROM_SPARK_BENCH_RECORDS`` (default 1,000,000; the 10,000,000
figure takes about 20 s a round on 2 cores: run it with
``-k "builtin or default"`` to leave out the slower cached replay).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

RECORDS = int(os.environ.get("STROM_SPARK_BENCH_RECORDS", "1000000"))
KEYS = 10_000
PARTITIONS = 2

pytestmark = pytest.mark.benchmark(group="spark-replay")

# The built-in's medians (wall and CPU), for the replay's ratios (the
# built-in runs first).
BUILTIN: dict[str, float] = {}


def tree_cpu() -> float | None:
    """CPU seconds used so far by this process and its descendants (live
    ones, and those reaped); None where /proc is missing."""
    if not os.path.isdir("/proc/self"):
        return None
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        # ppid; utime + stime + cutime + cstime
        stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    ticks, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        ticks += stats.get(pid, (0, 0))[1]
        todo += children.get(pid, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def timed_cpu(benchmark: Any, run: Any) -> Any:
    """``run`` recording each round's CPU seconds in ``cpu_s``."""

    def measured() -> None:
        before = tree_cpu()
        run()
        after = tree_cpu()
        if before is not None and after is not None:
            benchmark.extra_info.setdefault("cpu_s", []).append(round(after - before, 3))

    return measured


def median_cpu(benchmark: Any) -> float | None:
    # The first entry is the warm-up round's.
    rounds = benchmark.extra_info.get("cpu_s", [])[1:]
    return statistics.median(rounds) if rounds else None


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # noqa: PLC0415

    session = (
        SparkSession.builder.master("local[2]")
        .appName("strom-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(PARTITIONS))
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def events(spark: Any) -> Any:
    return make_events(spark, RECORDS)


def make_events(spark: Any, records: int) -> Any:
    """``records`` events over KEYS keys, 1 ms apart per partition with some a
    few seconds late, as the replay's source DataFrame (cached), laid out as a
    Kafka source reads them: Spark partition ``p`` holds partition ``p``."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    per = records // PARTITIONS
    # spark.range gives each Spark partition one contiguous run of ids.
    frame = spark.range(0, per * PARTITIONS, 1, PARTITIONS).select(
        (F.col("id") / per).cast("int").alias("partition"),
        (F.col("id") % per).alias("offset"),
    )
    # The event's number in time: the two partitions interleave.
    n = F.col("offset") * PARTITIONS + F.col("partition")
    frame = frame.select(
        F.lit("events").alias("topic"),
        "partition",
        "offset",
        F.concat(F.lit("k"), (n % KEYS).cast("string")).cast("binary").alias("key"),
        F.lit(b"x").alias("value"),
        (
            F.lit(1_700_000_000_000) + n - F.when(n % 97 == 0, F.lit(3_000)).otherwise(F.lit(0))
        ).alias("timestamp"),
    ).cache()
    frame.count()
    return frame


def windowed_count() -> Any:
    from strom import StreamsBuilder, serdes  # noqa: PLC0415
    from strom.kstream import Materialized, TimeWindows  # noqa: PLC0415

    builder = StreamsBuilder()
    (
        builder.stream("events", key_serde=serdes.String(), value_serde=serdes.String())
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10_000, 2_000))
        .count(Materialized("counts"))
    )
    return builder.build()


def test_spark_builtin_windowed_count(benchmark: Any, events: Any) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415

    def run() -> None:
        stamped = events.withColumn("ts", F.timestamp_millis("timestamp"))
        counts = stamped.groupBy(F.window("ts", "10 seconds"), "key").count()
        counts.write.format("noop").mode("overwrite").save()

    benchmark.pedantic(timed_cpu(benchmark, run), rounds=3, warmup_rounds=1)
    BUILTIN["median_s"] = benchmark.stats.stats.median
    cpu = median_cpu(benchmark)
    if cpu is not None:
        BUILTIN["median_cpu_s"] = cpu
    benchmark.extra_info["records_per_s"] = RECORDS / benchmark.stats.stats.median
    benchmark.extra_info["note"] = f"groupBy(window, key).count(), {RECORDS:,} records, local[2]"


@pytest.mark.parametrize(
    ("cache", "partitioned"),
    [(None, True), (None, False), (10 << 20, True)],
    ids=["default", "shuffled", "cache-10MiB"],
)
def test_replay_windowed_count(
    benchmark: Any, spark: Any, events: Any, cache: int | None, partitioned: bool
) -> None:
    from strom.spark import replay  # noqa: PLC0415

    # The replay's default is no record cache (every update emitted).
    config: dict[str, Any] = {"application.id": "bench"}
    if cache is not None:
        config["statestore.cache.max.bytes"] = cache

    def run() -> None:
        started = time.monotonic()
        with replay(
            windowed_count(), spark, source=events, config=config, source_partitioned=partitioned
        ) as result:
            assert result.metrics()["records-processed"] == RECORDS
            result.table("counts").write.format("noop").mode("overwrite").save()
        benchmark.extra_info.setdefault("rounds_s", []).append(time.monotonic() - started)
        # The time split: each phase's slowest task (the tasks run in
        # parallel), the stage's Spark job; the rest of a round is the
        # driver's planning and table()'s job.
        timings = [meta["timings"] for stage in result._stages for meta in stage.tasks]
        split = {phase: round(max(t.get(phase, 0.0) for t in timings), 3) for phase in timings[0]}
        split["stage_job"] = round(sum(stage.job_seconds for stage in result._stages), 3)
        benchmark.extra_info.setdefault("split_s", []).append(split)

    benchmark.pedantic(timed_cpu(benchmark, run), rounds=3, warmup_rounds=1)
    benchmark.extra_info["records_per_s"] = RECORDS / benchmark.stats.stats.median
    if "median_s" in BUILTIN:
        # Throughput relative to the built-in (the target: at least 1.0).
        benchmark.extra_info["vs_builtin"] = BUILTIN["median_s"] / benchmark.stats.stats.median
    cpu = median_cpu(benchmark)
    if cpu is not None and "median_cpu_s" in BUILTIN:
        benchmark.extra_info["vs_builtin_cpu"] = BUILTIN["median_cpu_s"] / cpu
    benchmark.extra_info["note"] = (
        f"strom.spark.replay, tumbling count with grace, {RECORDS:,} records, local[2], "
        f"statestore.cache.max.bytes={'default (0)' if cache is None else cache}, "
        f"source_partitioned={partitioned}"
    )
