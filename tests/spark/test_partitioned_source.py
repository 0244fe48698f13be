"""A source already split by partition number runs where it is: no shuffle in
the stage's plan, the same results, and a false claim caught."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from tests.spark.support import (
    SOURCE_SCHEMA,
    Scenario,
    partitioned_frame,
    run_streaming,
    source_frame,
    write_log,
)
from tests.spark.test_replay import CONFIG, page_views, views

from strom import StreamsBuilder, Topology, serdes
from strom.errors import ConfigError
from strom.spark import Replay, replay

S, L = serdes.String(), serdes.Long()


def scenario() -> Scenario:
    return Scenario(
        views,
        {"views": page_views(300, seed=11)},
        {"views": (S, S), "view-counts": (S, L)},
        ["view-counts"],
        stores=["counts"],
    )


def stage_plan(result: Replay) -> str:
    """The physical plan of the replay's (only) stage, as Spark ran it."""
    (stage,) = result._stages
    assert stage.output is not None
    return str(stage.output._jdf.queryExecution().executedPlan().toString())


def counts(result: Replay) -> dict[str, int]:
    return {row["key"]: row["value"] for row in result.table("counts").collect()}


def test_a_partitioned_frame_is_not_shuffled(spark: SparkSession, tmp_path: Path) -> None:
    case = scenario()
    streaming = run_streaming(case, write_log(case, tmp_path / "log"), CONFIG)

    def replayed(frame: DataFrame, partitioned: bool) -> tuple[str, dict[str, int]]:
        with replay(
            views(), spark, source=frame, config=CONFIG, source_partitioned=partitioned
        ) as result:
            return stage_plan(result), counts(result)

    shuffled_plan, shuffled = replayed(source_frame(spark, case), False)
    in_place_plan, in_place = replayed(partitioned_frame(spark, case), True)
    assert "Exchange" in shuffled_plan
    assert "MapInArrow" in in_place_plan
    assert "Exchange" not in in_place_plan
    assert in_place == shuffled == streaming.tables["counts"]


def test_records_of_other_topics_are_left_out(spark: SparkSession, tmp_path: Path) -> None:
    # The stage's tasks drop them (Spark sends them along): records of a
    # topic the topology does not read, and with no topic, in the Spark
    # partitions of the topic read and in one of their own, with partition
    # numbers it has and one it has not.
    case = scenario()
    streaming = run_streaming(case, write_log(case, tmp_path / "log"), CONFIG)
    views_rows = case.rows()
    numbers = sorted({row[1] for row in views_rows})
    noise = [
        (topic, number, offset, b"k", b"not a view", 0)
        for topic in ("clicks", None)
        for number in [*numbers, 7]
        for offset in range(3)
    ]
    rows = [*views_rows, *noise]
    split = spark.sparkContext.parallelize([*numbers, 7], len(numbers) + 1).flatMap(
        lambda number: [row for row in rows if row[1] == number]
    )
    frame = spark.createDataFrame(split, SOURCE_SCHEMA)
    with replay(views(), spark, source=frame, config=CONFIG, source_partitioned=True) as result:
        assert "Exchange" not in stage_plan(result)
        assert counts(result) == streaming.tables["counts"]
        assert result.metrics()["records-processed"] == len(views_rows)
        assert result.partitions["views"] == len(numbers)


def test_a_table_comes_decoded_from_the_stages_tasks(spark: SparkSession, tmp_path: Path) -> None:
    case = scenario()
    streaming = run_streaming(case, write_log(case, tmp_path / "log"), CONFIG)
    with replay(
        views(),
        spark,
        source=partitioned_frame(spark, case),
        config=CONFIG,
        source_partitioned=True,
    ) as result:
        table = result.table("counts")
        plan = str(table._jdf.queryExecution().executedPlan().toString())
        # Read straight from the stage's persisted output (the plan goes on
        # with the cached plan below its scan): no Python worker on the way.
        above, scan, _cached = plan.partition("InMemoryTableScan")
        assert scan
        assert "MapInArrow" not in above
        assert dict(table.dtypes) == {"key": "string", "value": "bigint"}
        assert counts(result) == streaming.tables["counts"]


def test_a_false_partitioning_claim_fails(spark: SparkSession) -> None:
    # Round-robin: every partition's records in both Spark partitions.
    frame = source_frame(spark, scenario()).repartition(2)
    with pytest.raises(ConfigError, match=r"not partitioned by partition number .* partition \d"):
        replay(views(), spark, source=frame, config=CONFIG, source_partitioned=True)


def test_the_claim_is_for_dataframes(spark: SparkSession, tmp_path: Path) -> None:
    servers = write_log(scenario(), tmp_path / "log")
    with pytest.raises(ConfigError, match="source_partitioned applies to a DataFrame source"):
        replay(views(), spark, source=servers, config=CONFIG, source_partitioned=True)


def counts_only() -> Topology:
    """A count with no topic written: no stage needs the partition counts
    before it runs."""
    builder = StreamsBuilder()
    builder.stream("views", key_serde=S, value_serde=S).group_by_key().count(materialized="counts")
    return builder.build()


def test_partition_counts_come_from_the_tasks(spark: SparkSession) -> None:
    case = scenario()
    # Partition 2's records all bounded out: it still counts, as it exists.
    bounds = {("views", 2): 0}

    def replayed(frame: DataFrame, partitioned: bool) -> tuple[int, dict[str, int], Any]:
        group = f"sizing-{partitioned}"
        spark.sparkContext.setJobGroup(group, "a replay")
        try:
            result = replay(
                counts_only(),
                spark,
                source=frame,
                config=CONFIG,
                end_offsets=bounds,
                source_partitioned=partitioned,
                changelogs=True,
            )
            jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        with result:
            return jobs, dict(result.partitions), counts(result)

    sized_jobs, sized, sized_counts = replayed(source_frame(spark, case), False)
    in_place_jobs, in_place, in_place_counts = replayed(partitioned_frame(spark, case), True)
    assert in_place == sized == {"views": 3}
    assert in_place_counts == sized_counts
    assert sized_counts  # partitions 0 and 1 were counted
    # The stage's job only: no job to size the source.
    assert in_place_jobs == 1 < sized_jobs


ARROW_MAX_BYTES = "spark.sql.execution.arrow.maxBytesPerBatch"


@pytest.mark.parametrize("setting", [None, "1048576"], ids=["unset", "set"])
def test_the_sessions_arrow_byte_cap_is_left_as_it_was(
    spark: SparkSession, setting: str | None
) -> None:
    # The stage's job runs with the cap off; the session gets its own back.
    if setting is None:
        spark.conf.unset(ARROW_MAX_BYTES)
    else:
        spark.conf.set(ARROW_MAX_BYTES, setting)
    try:
        frame = partitioned_frame(spark, scenario())
        with replay(views(), spark, source=frame, config=CONFIG, source_partitioned=True) as result:
            assert counts(result)
        assert spark.conf.get(ARROW_MAX_BYTES, None) == setting
    finally:
        spark.conf.unset(ARROW_MAX_BYTES)
