"""The nodes that call user functions, on their happy path: one batch of
RECORDS records through one node (its children detached), with a trivial
user function, so that what is measured is the node's own work around the
calls. This is the cost the error handling (the failing record named, the
``processing.exception.handler``) must not raise.

Compare two checkouts by running this file against each in turn, e.g.
``PYTHONPATH=OTHER/python pytest benches/test_user_functions.py
--benchmark-enable``: the nodes are found by class, not by module path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom import StreamsBuilder, serdes
from strom.kstream import Materialized
from strom.processor.api import Processor, ProcessorContext, Record
from strom.processor.internals.batch import Batch
from strom.testing import TopologyTestDriver

RECORDS = int(os.environ.get("STROM_BENCH_NODE_RECORDS", "20000"))
S, L = serdes.String(), serdes.Long()


class _Forwarding(Processor[Any, Any]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record[Any, Any]) -> None:
        self.context.forward(record)


def _stream(builder: StreamsBuilder) -> Any:
    return builder.stream("in", key_serde=S, value_serde=L)


def _table_join(builder: StreamsBuilder) -> None:
    table = builder.table("t", key_serde=S, value_serde=L)
    _stream(builder).join(table, lambda v, t: v).to("out", value_serde=L)


# name -> (topology, the node's class name, whether it gets table changes)
CASES: dict[str, tuple[Callable[[StreamsBuilder], Any], str, bool]] = {
    "map_values": (lambda b: _stream(b).map_values(lambda v: v), "KStreamMapValues", False),
    "select_key": (lambda b: _stream(b).select_key(lambda k, v: k), "KStreamMap", False),
    "map": (lambda b: _stream(b).map(lambda k, v: (k, v)), "KStreamMap", False),
    "filter": (lambda b: _stream(b).filter(lambda k, v: v & 1), "KStreamFilter", False),
    "filter_not": (lambda b: _stream(b).filter_not(lambda k, v: v & 1), "KStreamFilter", False),
    "flat_map_values": (
        lambda b: _stream(b).flat_map_values(lambda v: (v, v)),
        "KStreamFlatMap",
        False,
    ),
    "flat_map": (lambda b: _stream(b).flat_map(lambda k, v: [(k, v)]), "KStreamFlatMap", False),
    "peek": (lambda b: _stream(b).peek(lambda k, v: None), "KStreamPeek", False),
    "split": (
        lambda b: (
            _stream(b)
            .split()
            .branch(lambda k, v: v % 3 == 0)
            .branch(lambda k, v: v % 3 == 1)
            .default_branch()
        ),
        "KStreamBranch",
        False,
    ),
    "process": (lambda b: _stream(b).process(_Forwarding), "ProcessorAdapter", False),
    "sink_partitioner": (
        lambda b: _stream(b).to("out", value_serde=L, partitioner=lambda k, v, n: len(k) % n),
        "SinkNode",
        False,
    ),
    "stream_table_join": (_table_join, "KStreamKTableJoin", False),
    "table_map_values": (
        lambda b: b.table("in", key_serde=S, value_serde=L).map_values(lambda v: v),
        "KTableMapValues",
        True,
    ),
    "table_filter": (
        lambda b: b.table("in", key_serde=S, value_serde=L).filter(lambda k, v: v & 1),
        "KTableFilter",
        True,
    ),
    "aggregate": (
        lambda b: (
            _stream(b)
            .group_by_key()
            .aggregate(
                lambda: 0,
                lambda k, v, agg: agg + v,
                Materialized("agg", value_serde=L, caching=False),
            )
        ),
        "KStreamAggregate",
        False,
    ),
}


@pytest.fixture(params=list(CASES))
def node_and_batch(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any, Batch]]:
    build, node_class, changes = CASES[request.param]
    builder = StreamsBuilder()
    build(builder)
    with TopologyTestDriver(builder.build()) as driver:
        [node] = [
            n
            for task in driver._tasks
            for n in task.nodes.values()
            if type(n).__name__ == node_class
        ]
        node.children = []
        keys = [f"k{i % 1000}" for i in range(RECORDS)]
        values = list(range(RECORDS))
        stamps = list(range(RECORDS))
        olds = [*values[1:], 0] if changes else None
        batch = Batch("in", 0, keys, values, stamps, list(range(RECORDS)), olds)
        yield request.param, node, batch


@pytest.mark.benchmark(group="user functions")
def test_node_happy_path(benchmark: Any, node_and_batch: tuple[str, Any, Batch]) -> None:
    name, node, batch = node_and_batch
    benchmark.pedantic(node.process, args=(batch,), rounds=30, warmup_rounds=3)
    if benchmark.disabled:  # run once, as a check (pytest's default here)
        return
    benchmark.extra_info["records_per_s"] = RECORDS / benchmark.stats.stats.median
    benchmark.extra_info["note"] = f"{name}: {RECORDS:,} records in one batch"
