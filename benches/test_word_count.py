"""Word count end to end on the embedded log (the demo's pipeline)."""

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


@pytest.mark.benchmark(group="runtime")
def test_word_count_throughput(benchmark: Any) -> None:
    lines = serdes.String().serialize_batch("t", generate_lines(LINES))
    words = sum(len(line.split()) for line in lines if line)

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        path = tempfile.mkdtemp(prefix="strom-bench-wc-")
        log = EmbeddedLog(path)
        log.create_topic("text-input", partitions=3)
        log.create_topic("word-counts", partitions=3)
        with log.producer() as producer:
            producer.produce_batch("text-input", [(None, v) for v in lines])
        return (path,), {}

    def run(path: str) -> None:
        with KafkaStreams(
            word_count_topology(),
            {"application.id": f"bench-{next(_runs)}", "bootstrap.servers": f"embedded:{path}"},
        ) as app:
            app.run_until_end()

    benchmark.pedantic(run, setup=setup, rounds=3)
    benchmark.extra_info["records_per_s"] = LINES / benchmark.stats.stats.median
    benchmark.extra_info["note"] = (
        f"{LINES:,} lines, {words / benchmark.stats.stats.median:,.0f} words/s"
    )
