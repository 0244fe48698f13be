"""examples/spark_replay.py runs with one command: the replay's counts equal
the streaming app's and plain Python's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pyspark.sql import SparkSession
from tests.examples.support import printed, run

from strom.cli.demo import generate_lines


def test_the_spark_replay_example(spark: SparkSession, tmp_path: Path) -> None:
    # ``spark`` (the session fixture) is not used by the example's own process;
    # asking for it puts the test in the spark suite with the Java it needs.
    stdout = run("spark_replay", tmp_path / "log")
    counts = Counter(w for line in generate_lines(2_000) for w in line.lower().split())
    assert f"words: {len(counts)}, same counts on Spark and streaming: True" in stdout
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert printed(stdout, "top 5:") == top
