"""Batch functions (``filter_batches``/``map_batches`` over pyarrow
RecordBatches) against the same apps written with lambdas and with
``strom.col`` expressions, end to end on the embedded log: Nexmark q2 over
the bids of 200,000 events (a selective filter, then a projection), and
``price``: every bid's price * 89 // 100 written as a Long (every record
crosses back from Arrow).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from benches.nexmark.generator import GeneratorConfig, generate
from benches.peers.protocol import Q2_MODULUS as MODULUS
from benches.test_expressions import q2_expressions, q2_lambdas, topology

from strom import KafkaStreams, StreamsBuilder, col, serdes
from strom.embedded import EmbeddedLog

EVENTS = 200_000

S, J, L = serdes.String(), serdes.Json(), serdes.Long()

pytestmark = pytest.mark.benchmark(group="batch-functions")
_runs = itertools.count()


def _q2_project(rb: Any) -> Any:
    value = pa.StructArray.from_arrays(
        [rb.column("auction"), rb.column("price")], names=["auction", "price"]
    )
    return pa.RecordBatch.from_arrays([rb.column("key"), value], names=["key", "value"])


def q2_batches(b: StreamsBuilder) -> None:
    (
        b.stream("bid", key_serde=S, value_serde=J)
        .filter_batches(
            lambda rb: np.asarray(rb.column("auction")) % MODULUS == 0, fields=["auction"]
        )
        .map_batches(_q2_project, fields=["auction", "price"])
        .to("out", key_serde=S, value_serde=J)
    )


def price_lambdas(b: StreamsBuilder) -> None:
    (
        b.stream("bid", key_serde=S, value_serde=J)
        .map_values(lambda bid: bid["price"] * 89 // 100)
        .to("out", key_serde=S, value_serde=L)
    )


def price_expressions(b: StreamsBuilder) -> None:
    (
        b.stream("bid", key_serde=S, value_serde=J)
        .map_values(col("price") * 89 // 100)
        .to("out", key_serde=S, value_serde=L)
    )


def price_batches(b: StreamsBuilder) -> None:
    (
        b.stream("bid", key_serde=S, value_serde=J)
        .map_batches(
            lambda rb: pa.RecordBatch.from_arrays(
                [rb.column("key"), pc.divide(pc.multiply(rb.column("price"), 89), 100)],
                names=["key", "value"],
            ),
            fields=["price"],
        )
        .to("out", key_serde=S, value_serde=L)
    )


APPS: dict[str, Callable[[StreamsBuilder], None]] = {
    "q2-lambdas": q2_lambdas,
    "q2-expressions": q2_expressions,
    "q2-batches": q2_batches,
    "price-lambdas": price_lambdas,
    "price-expressions": price_expressions,
    "price-batches": price_batches,
}


@pytest.fixture(scope="module")
def bids() -> list[tuple[bytes, bytes, int]]:
    """The bids of EVENTS Nexmark events, kept in memory; each round writes
    them to a fresh log."""
    rows: list[tuple[bytes, bytes, int]] = []
    for chunk in generate(GeneratorConfig(), EVENTS):
        cols = chunk["bid"]
        rows.extend(zip(cols.keys, cols.values, cols.timestamps, strict=True))
    return rows


def _fresh_log(rows: list[tuple[bytes, bytes, int]]) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="strom-bench-batches-")
    try:
        with EmbeddedLog(path) as log:
            log.create_topic("bid")
            log.create_topic("out")
            with log.producer() as producer:
                keys, values, stamps = zip(*rows, strict=True)
                producer.produce_columns("bid", list(keys), list(values), list(stamps))
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("name", list(APPS))
def test_batch_functions(benchmark: Any, bids: list[tuple[bytes, bytes, int]], name: str) -> None:
    logs: list[Iterator[str]] = []

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        logs.append(_fresh_log(bids))
        return (next(logs[-1]),), {}

    def run(path: str) -> None:
        config = {"application.id": f"bench-{next(_runs)}", "bootstrap.servers": f"embedded:{path}"}
        with KafkaStreams(topology(APPS[name]), config) as app:
            app.run_until_end()

    benchmark.pedantic(run, setup=setup, rounds=3)
    for log in logs:
        log.close()
    if benchmark.stats is None:
        return  # benchmarks disabled: a plain pytest run executes each body once
    benchmark.extra_info["records_per_s"] = len(bids) / benchmark.stats.stats.median
    benchmark.extra_info["note"] = f"{len(bids):,} records in, one partition, one thread"
