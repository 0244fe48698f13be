"""Bootstrap: replay the first half of a topic on Spark, write its end state,
stream the second half with KafkaStreams; the results equal one streaming run
over the whole topic, late-record drops included (they depend on the stream
time the replay hands over)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from tests.spark.support import Scenario, read_stream, write_log
from tests.spark.test_replay import out_of_order_events, windowed

from strom import KafkaStreams, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError
from strom.kstream import TimeWindows
from strom.spark import replay

S, L = serdes.String(), serdes.Long()
WINDOWED = (serdes.TimeWindowed(S, 10_000), L)


def latest(stream: dict[tuple[int, Any], list[tuple[Any, int]]]) -> dict[Any, Any]:
    return {key: records[-1][0] for (_p, key), records in stream.items()}


def test_replay_then_bootstrap_then_stream_equals_one_streaming_run(
    spark: SparkSession, tmp_path: Path
) -> None:
    windows = TimeWindows.of_size_and_grace(10_000, 2_000)
    scenario = Scenario(
        lambda: windowed(windows),
        {"events": out_of_order_events(600, seed=6)},
        {"events": (S, S), "windowed-counts": WINDOWED},
        ["windowed-counts"],
    )

    # One streaming run over everything.
    whole = write_log(scenario, tmp_path / "whole")
    config = {"application.id": "bootstrapped", "statestore.cache.max.bytes": 0}
    with KafkaStreams(scenario.build(), {**config, "bootstrap.servers": whole}) as app:
        app.run_until_end(timeout=120)
    expected = latest(
        read_stream(EmbeddedLog(whole.removeprefix("embedded:")), "windowed-counts", WINDOWED)
    )

    # The same records: about the first half of each partition replayed on
    # Spark, cut just before a record the whole run drops as too late, so
    # the streaming half must know the stream time the replay reached.
    servers = write_log(scenario, tmp_path / "split")
    log = EmbeddedLog(servers.removeprefix("embedded:"))
    half = {("events", p): late_record_after_half(scenario, p) for p in range(3)}
    app_config = {**config, "bootstrap.servers": servers}
    with replay(
        scenario.build(),
        spark,
        source=servers,
        config=app_config,
        end_offsets=half,
        changelogs=True,
    ) as result:
        first = {
            _typed_key(row["key"]): row["value"]
            for row in result.output("windowed-counts").orderBy("partition", "offset").collect()
        }
        result.bootstrap(app_config)
    committed = log.committed_offsets("bootstrapped")
    assert {key: c.offset for key, c in committed.items()} == half

    # The app continues from there.
    with KafkaStreams(scenario.build(), app_config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["records-processed"] == sum(
            end - half[("events", p)] for p, end in log.end_offsets("events").items()
        )
    second = latest(read_stream(log, "windowed-counts", WINDOWED))
    assert {**first, **second} == expected


def late_record_after_half(scenario: Scenario, partition: int) -> int:
    """The offset of the first record past the partition's middle that is
    older than every window still open (stream time - size - grace)."""
    stamps = [r[5] for r in sorted(scenario.rows(), key=lambda r: r[2]) if r[1] == partition]
    for offset in range(len(stamps) // 2, len(stamps)):
        if stamps[offset] < max(stamps[:offset]) - 12_000:
            return offset
    raise AssertionError(f"no late record in the second half of partition {partition}")


def _typed_key(row: Any) -> Any:
    from strom.kstream import Window, Windowed  # noqa: PLC0415

    return Windowed(row["key"], Window(row["start"], row["end"]))


def test_bootstrap_needs_a_replay_that_kept_the_changelogs(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Without ``changelogs=True`` the stores ran unlogged: bootstrap says so
    and writes nothing (no committed offsets, no changelog records)."""
    scenario = Scenario(
        lambda: windowed(TimeWindows.of_size_and_grace(10_000, 2_000)),
        {"events": out_of_order_events(60, seed=7)},
        {"events": (S, S), "windowed-counts": WINDOWED},
        ["windowed-counts"],
    )
    servers = write_log(scenario, tmp_path / "log")
    config = {"application.id": "not-kept", "bootstrap.servers": servers}
    with replay(scenario.build(), spark, source=servers, config=config) as result:
        assert result.metrics()["records-processed"] == 60
        with pytest.raises(ConfigError, match=r"changelogs=True"):
            result.bootstrap(config)
    log = EmbeddedLog(servers.removeprefix("embedded:"))
    assert log.committed_offsets("not-kept") == {}
    assert not [t for t in log.topics() if t.startswith("not-kept")]


def test_a_partition_the_replay_read_nothing_of_continues_where_the_read_ended(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An empty input partition gets its end offset committed too: with none,
    an app at auto.offset.reset=latest would skip what was written to it
    between the replay and the app's start."""
    log = EmbeddedLog(tmp_path / "log")
    log.create_topic("events", 3)
    log.create_topic("windowed-counts", 3)
    with log.producer() as producer:
        for i in range(40):
            producer.produce(
                "events", f"k{i % 4}".encode(), b"v", timestamp=1_000 * i, partition=i % 2
            )
    servers = f"embedded:{tmp_path / 'log'}"
    config = {
        "application.id": "empty-partition",
        "bootstrap.servers": servers,
        "auto.offset.reset": "latest",
    }
    topology = windowed(TimeWindows.of_size_and_grace(10_000, 2_000))
    with replay(topology, spark, source=servers, config=config, changelogs=True) as result:
        result.bootstrap(config)
    committed = log.committed_offsets("empty-partition")
    assert {key: c.offset for key, c in committed.items()} == {
        ("events", 0): 20,
        ("events", 1): 20,
        ("events", 2): 0,
    }

    with log.producer() as producer:
        producer.produce("events", b"late-arrival", b"v", timestamp=40_000, partition=2)
    with KafkaStreams(windowed(TimeWindows.of_size_and_grace(10_000, 2_000)), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["records-processed"] == 1
    counts = read_stream(log, "windowed-counts", WINDOWED)
    assert any(key.key == "late-arrival" for _p, key in counts)
