"""Word count end to end on the embedded log (the demo's pipeline), and what
metrics cost: the same run at each ``metrics.recording.level``. Run the
second with main's interpreter too (before metrics existed; the level key is
then ignored) to compare with no metrics."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from strom import KafkaStreams, serdes
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog

LINES = 100_000
_runs = itertools.count()


def _bench(benchmark: Any, fresh_dir: Callable[[str], str], rounds: int, **config: Any) -> float:
    """Word count over ``LINES`` fresh lines per round; returns words per line."""
    lines = serdes.String().serialize_batch("t", generate_lines(LINES))

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        path = fresh_dir("strom-bench-wc-")
        log = EmbeddedLog(path)
        log.create_topic("text-input", partitions=3)
        log.create_topic("word-counts", partitions=3)
        with log.producer() as producer:
            producer.produce_batch("text-input", [(None, v) for v in lines])
        return (path,), {}

    cpu: list[float] = []

    def run(path: str) -> None:
        settings = {
            "application.id": f"bench-{next(_runs)}",
            "bootstrap.servers": f"embedded:{path}",
            **config,
        }
        started = time.process_time()
        with KafkaStreams(word_count_topology(), settings) as app:
            app.run_until_end()
        cpu.append(time.process_time() - started)

    benchmark.pedantic(run, setup=setup, rounds=rounds)
    benchmark.extra_info["records_per_s"] = LINES / benchmark.stats.stats.median
    # On a loaded machine wall time mostly measures the neighbours: the CPU
    # time this process spent (all its threads) is the figure to compare.
    benchmark.extra_info["cpu_s_median"] = statistics.median(cpu)
    return sum(len(line.split()) for line in lines if line) / LINES


@pytest.mark.benchmark(group="runtime")
def test_word_count_throughput(benchmark: Any, fresh_dir: Callable[[str], str]) -> None:
    words_per_line = _bench(benchmark, fresh_dir, rounds=3)
    words = LINES * words_per_line
    words_per_s = words / benchmark.stats.stats.median
    per_cpu_s = words / benchmark.extra_info["cpu_s_median"]
    benchmark.extra_info["note"] = (
        f"{LINES:,} lines, {words_per_s:,.0f} words/s ({per_cpu_s:,.0f} per CPU second)"
    )


@pytest.mark.benchmark(group="runtime")
def test_word_count_lambdas_alone(benchmark: Any) -> None:
    """The floor under the throughput above: the README's two lambdas (as
    ``word_count_topology`` has them) in a bare Python loop over the same
    lines, once per line and once per word, nothing else."""
    lines = generate_lines(LINES)
    split = lambda line: line.lower().split()  # noqa: E731 - the README's lambdas
    select = lambda _key, word: word  # noqa: E731

    def run() -> int:
        words: list[str] = []
        for line in lines:
            words.extend(split(line))
        return len([select(None, word) for word in words])

    words = benchmark.pedantic(run, rounds=5)
    words_per_s = words / benchmark.stats.stats.median
    benchmark.extra_info["note"] = f"{LINES:,} lines, {words_per_s:,.0f} words/s"


@pytest.mark.benchmark(group="metrics")
@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_word_count_by_recording_level(
    benchmark: Any, fresh_dir: Callable[[str], str], level: str
) -> None:
    _bench(benchmark, fresh_dir, rounds=5, **{"metrics.recording.level": level})
    benchmark.extra_info["note"] = f"{LINES:,} lines, metrics.recording.level={level}"
