"""KStream-KStream joins end to end on the embedded log."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import JoinWindows

PER_SIDE = 100_000
KEYS = 10_000
_runs = itertools.count()


def topology(kind: str) -> Any:
    string = serdes.String()
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=string, value_serde=string)
    right = builder.stream("right", key_serde=string, value_serde=string)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    # Each key comes every KEYS ms on each side; two thirds of the records
    # find one match, the others none.
    windows = JoinWindows.of_time_difference_and_grace(KEYS // 3, 1_000)
    join(right, lambda a, b: f"{a}+{b}", windows).to("out", value_serde=string)
    return builder.build()


@pytest.mark.benchmark(group="runtime")
@pytest.mark.parametrize("kind", ["inner", "left", "outer"])
def test_stream_stream_join_throughput(
    benchmark: Any, fresh_dir: Callable[[str], str], kind: str
) -> None:
    def setup() -> tuple[tuple[str], dict[str, Any]]:
        path = fresh_dir("strom-bench-join-")
        log = EmbeddedLog(path)
        for topic in ("left", "right", "out"):
            log.create_topic(topic, partitions=2)
        with log.producer() as producer:
            producer.produce_batch(
                "left", [(f"k{i % KEYS}".encode(), b"v", i) for i in range(PER_SIDE)]
            )
            # The right record of a key comes 1 s after the left one, except
            # for every third, which has a key of its own.
            producer.produce_batch(
                "right",
                [
                    (f"{'k' if i % 3 else 'r'}{i % KEYS}".encode(), b"v", i + 1_000)
                    for i in range(PER_SIDE)
                ],
            )
        return (path,), {}

    def run(path: str) -> None:
        config = {"application.id": f"bench-{next(_runs)}", "bootstrap.servers": f"embedded:{path}"}
        with KafkaStreams(topology(kind), config) as app:
            app.run_until_end()

    benchmark.pedantic(run, setup=setup, rounds=3)
    benchmark.extra_info["records_per_s"] = 2 * PER_SIDE / benchmark.stats.stats.median
    benchmark.extra_info["note"] = (
        f"{2 * PER_SIDE:,} records, {KEYS:,} keys, 2 partitions, 2/3 matched"
    )
