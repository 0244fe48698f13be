"""What metrics cost: the demo's word count end to end on the embedded log at
each ``metrics.recording.level``. Run with main's interpreter too (before the
metrics existed; the level key is then ignored) to compare with no metrics:

    .venv/bin/python -m pytest benches/test_metrics.py --benchmark-enable
    /path/to/main/.venv/bin/python -m pytest benches/test_metrics.py --benchmark-enable -k INFO
"""

from __future__ import annotations

import itertools
import tempfile
from typing import Any

import pytest

from strom import KafkaStreams, serdes
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog

LINES = 100_000
_runs = itertools.count()


@pytest.mark.benchmark(group="metrics")
@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_word_count_by_recording_level(benchmark: Any, level: str) -> None:
    lines = serdes.String().serialize_batch("t", generate_lines(LINES))

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        path = tempfile.mkdtemp(prefix="strom-bench-metrics-")
        log = EmbeddedLog(path)
        log.create_topic("text-input", partitions=3)
        log.create_topic("word-counts", partitions=3)
        with log.producer() as producer:
            producer.produce_batch("text-input", [(None, v) for v in lines])
        return (path,), {}

    def run(path: str) -> None:
        config = {
            "application.id": f"bench-metrics-{next(_runs)}",
            "bootstrap.servers": f"embedded:{path}",
            "metrics.recording.level": level,
        }
        with KafkaStreams(word_count_topology(), config) as app:
            app.run_until_end()

    benchmark.pedantic(run, setup=setup, rounds=5)
    benchmark.extra_info["records_per_s"] = LINES / benchmark.stats.stats.median
    benchmark.extra_info["note"] = f"{LINES:,} lines, metrics.recording.level={level}"
