"""Native fast paths against lambdas, end to end on the embedded log (read,
decode, evaluate, encode, append): Nexmark q1 and q2 over the bids of
200,000 events, and filter_map over String values, each written with
lambdas and with ``strom.col`` expressions (the apps of docs/fast-paths.md).

Targets (issue 19): expressions >= 3,000,000 records/s on one core for q1
and q2, and >= 10x the lambda version of the same app.

Only the app's run is timed: the input log is written, the topology built
and garbage collected before each round. ``test_fast_path_ratio`` measures
the ratio itself from rounds run in pairs (lambdas, then expressions), so
that both apps of a pair see the machine in the same minutes. The inputs
are kept as columns (lists of bytes and ints, which the garbage collector
does not track), so a collection the app triggers does not walk the
benchmark's own data. Each round also records the process CPU time it
took (``cpu_records_per_s``): on a shared machine the wall time includes
waiting for a core.
"""

from __future__ import annotations

import gc
import itertools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from benches.nexmark.generator import GeneratorConfig, generate
from benches.peers.protocol import Q2_MODULUS as MODULUS
from benches.sidebyside import strom_native_app as native

from strom import KafkaStreams, StreamsBuilder, Topology, col, serdes
from strom.embedded import EmbeddedLog

EVENTS = 200_000

S, J = serdes.String(), serdes.Json()

pytestmark = pytest.mark.benchmark(group="fast-paths")
_runs = itertools.count()


def q1_lambdas(b: StreamsBuilder) -> None:
    (
        b.stream("bid", key_serde=S, value_serde=J)
        .map_values(lambda bid: {**bid, "price": bid["price"] * 89 // 100})
        .to("out", key_serde=S, value_serde=J)
    )


def q1_expressions(b: StreamsBuilder) -> None:
    native.q1(b, {"bid": "bid"}, "out")


def q2_lambdas(b: StreamsBuilder) -> None:
    (
        b.stream("bid", key_serde=S, value_serde=J)
        .filter(lambda _k, bid: bid["auction"] % MODULUS == 0)
        .map_values(lambda bid: {"auction": bid["auction"], "price": bid["price"]})
        .to("out", key_serde=S, value_serde=J)
    )


def q2_expressions(b: StreamsBuilder) -> None:
    native.q2(b, {"bid": "bid"}, "out")


def filter_map_lambdas(b: StreamsBuilder) -> None:
    (
        b.stream("lines", key_serde=S, value_serde=S)
        .filter(lambda _k, v: not v.startswith("0"))
        .map_values(lambda v: v.upper())
        .to("out", key_serde=S, value_serde=S)
    )


def filter_map_expressions(b: StreamsBuilder) -> None:
    (
        b.stream("lines", key_serde=S, value_serde=S)
        .filter(~col().startswith("0"))
        .map_values(col().upper())
        .to("out", key_serde=S, value_serde=S)
    )


APPS: dict[str, Callable[[StreamsBuilder], None]] = {
    "q1-lambdas": q1_lambdas,
    "q1-expressions": q1_expressions,
    "q2-lambdas": q2_lambdas,
    "q2-expressions": q2_expressions,
    "filter_map-lambdas": filter_map_lambdas,
    "filter_map-expressions": filter_map_expressions,
}


InputColumns = tuple[list[bytes], list[bytes], list[int]]


@pytest.fixture(scope="module")
def inputs() -> Iterator[dict[str, InputColumns]]:
    """The bids of EVENTS Nexmark events and as many short lines, kept in
    memory as columns (keys, values, timestamps); each round writes them to
    a fresh log."""
    keys: list[bytes] = []
    values: list[bytes] = []
    stamps: list[int] = []
    for chunk in generate(GeneratorConfig(), EVENTS):
        cols = chunk["bid"]
        keys += cols.keys
        values += cols.values
        stamps += cols.timestamps
    n = len(keys)
    lines = (
        [b"%d" % i for i in range(n)],
        [b"%d-line of text %d" % (i % 10, i) for i in range(n)],
        list(range(n)),
    )
    yield {"bid": (keys, values, stamps), "lines": lines}


def topology(app: Callable[[StreamsBuilder], None]) -> Topology:
    b = StreamsBuilder()
    app(b)
    return b.build()


def _input_log(topic: str, columns: InputColumns) -> str:
    """A fresh log holding ``columns`` in ``topic``, and an empty ``out``."""
    path = tempfile.mkdtemp(prefix="strom-bench-expr-")
    with EmbeddedLog(path) as log:
        log.create_topic(topic)
        log.create_topic("out")
        with log.producer() as producer:
            producer.produce_columns(topic, *columns)
    return path


def _prepared(name: str, topic: str, inputs: dict[str, InputColumns]) -> tuple[Topology, str]:
    """App ``name`` built and a fresh input log for it, garbage collected
    before the round (so the round does not pay for the setup's garbage)."""
    path = _input_log(topic, inputs[topic])
    built = topology(APPS[name])
    gc.collect()
    return built, path


def _run_app(built: Topology, path: str) -> float:
    """Runs the app to the end of its input; the process CPU seconds it took."""
    started = time.process_time()
    config = {"application.id": f"bench-{next(_runs)}", "bootstrap.servers": f"embedded:{path}"}
    with KafkaStreams(built, config) as app:
        app.run_until_end()
    return time.process_time() - started


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@pytest.mark.parametrize("name", list(APPS))
def test_fast_paths(benchmark: Any, inputs: dict[str, InputColumns], name: str) -> None:
    topic = "lines" if name.startswith("filter_map") else "bid"
    paths: list[str] = []
    cpu_seconds: list[float] = []

    def setup() -> tuple[tuple[Topology, str], dict[str, Any]]:
        built, path = _prepared(name, topic, inputs)
        paths.append(path)
        return (built, path), {}

    def run(built: Topology, path: str) -> None:
        cpu_seconds.append(_run_app(built, path))

    benchmark.pedantic(run, setup=setup, rounds=5)
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    if benchmark.stats is None:
        return  # benchmarks disabled: a plain pytest run executes each body once
    records = len(inputs[topic][0])
    benchmark.extra_info["records_per_s"] = records / benchmark.stats.stats.median
    benchmark.extra_info["cpu_records_per_s"] = records / _median(cpu_seconds)
    benchmark.extra_info["note"] = f"{records:,} records in, one partition, one thread"


@pytest.mark.parametrize("app", ["q1", "q2"])
def test_fast_path_ratio(benchmark: Any, inputs: dict[str, InputColumns], app: str) -> None:
    """The expression app's speed over its lambda version's, from rounds run
    in pairs (lambdas, then expressions, on the same input): both see the
    machine in the same minutes, where separate runs move the ratio with
    whatever the machine does in between. Reports the median of the pairs'
    ratios, by wall time and by CPU time."""
    ratios: list[float] = []
    cpu_ratios: list[float] = []

    def one(name: str) -> tuple[float, float]:
        built, path = _prepared(name, "bid", inputs)
        try:
            started = time.perf_counter()
            cpu = _run_app(built, path)
            return time.perf_counter() - started, cpu
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def pair() -> None:
        wall_lambdas, cpu_lambdas = one(f"{app}-lambdas")
        wall_expressions, cpu_expressions = one(f"{app}-expressions")
        ratios.append(wall_lambdas / wall_expressions)
        cpu_ratios.append(cpu_lambdas / cpu_expressions)

    benchmark.pedantic(pair, rounds=5)
    if benchmark.stats is None:
        return
    benchmark.extra_info["ratio"] = _median(ratios)
    benchmark.extra_info["cpu_ratio"] = _median(cpu_ratios)
    benchmark.extra_info["note"] = (
        f"expressions / lambdas, 5 alternated pairs: median {_median(ratios):.2f}x "
        f"(pairs {min(ratios):.2f}-{max(ratios):.2f}x), CPU {_median(cpu_ratios):.2f}x"
    )
