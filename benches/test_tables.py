"""Tables and aggregations on the embedded log: batched store updates (one
native call to read a batch's old values, one to write its new ones; one in
all for a table source or a count) against the same nodes forced record
by record (one store call and one serde call per record, the path they took
before, table changes also framed one by one for the repartition topic),
side by side in one run, with the record cache on and off.

Workloads, each over RECORDS updates of KEYS keys (one partition):
- ``table``: ``builder.table`` materialized, its changes to a topic;
- ``reduce``: ``group_by_key().reduce`` with a trivial lambda;
- ``table_count``: ``KTable.group_by(...).count()`` (1,000 groups) over an
  uncached source table, through a repartition topic.

Each record-by-record run comes just before its batched counterpart, which
notes the speedup.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import Materialized
from strom.kstream.internals import table_processors

RECORDS = int(os.environ.get("STROM_BENCH_TABLE_RECORDS", "1000000"))
KEYS = RECORDS // 10
S, L = serdes.String(), serdes.Long()
_runs = itertools.count()
_record_by_record: dict[str, float] = {}


def table(b: StreamsBuilder, m: Materialized) -> None:
    b.table("in", key_serde=S, value_serde=L, materialized=m).to_stream().to(
        "out", key_serde=S, value_serde=L
    )


def reduce(b: StreamsBuilder, m: Materialized) -> None:
    b.stream("in", key_serde=S, value_serde=L).group_by_key().reduce(
        lambda agg, v: agg + v, m
    ).to_stream().to("out", key_serde=S, value_serde=L)


def table_count(b: StreamsBuilder, m: Materialized) -> None:
    source = b.table(
        "in", key_serde=S, value_serde=L, materialized=Materialized("source", caching=False)
    )
    source.group_by(lambda k, v: (f"g{v % 1000}", v), key_serde=S, value_serde=L).count(
        m
    ).to_stream().to("out", key_serde=S, value_serde=L)


WORKLOADS: dict[str, Callable[[StreamsBuilder, Materialized], None]] = {
    "table": table,
    "reduce": reduce,
    "table_count": table_count,
}


@pytest.fixture(scope="module")
def log_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="strom-bench-tables-")
    log = EmbeddedLog(path)
    log.create_topic("in", partitions=1)
    log.create_topic("out", partitions=1)
    keys = S.serialize_batch("in", [f"k{i % KEYS:06d}" for i in range(RECORDS)])
    values = L.serialize_batch("in", list(range(RECORDS)))
    with log.producer() as producer:
        for start in range(0, RECORDS, 100_000):
            end = start + 100_000
            producer.produce_batch("in", list(zip(keys[start:end], values[start:end], strict=True)))
    log.close()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(log_dir: str, workload: str, caching: bool) -> None:
    builder = StreamsBuilder()
    WORKLOADS[workload](builder, Materialized("store", caching=caching))
    app_id = f"bench-tables-{next(_runs)}"
    with KafkaStreams(
        builder.build(), {"application.id": app_id, "bootstrap.servers": f"embedded:{log_dir}"}
    ) as app:
        app.run_until_end()


def _bench(benchmark: Any, log_dir: str, workload: str, caching: bool) -> float:
    benchmark.pedantic(_run, args=(log_dir, workload, caching), rounds=1, iterations=1)
    rate: float = RECORDS / benchmark.stats.stats.median
    benchmark.extra_info["records_per_s"] = rate
    return rate


@pytest.mark.parametrize("path", ["record-by-record", "batched"])
@pytest.mark.parametrize("caching", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.benchmark(group="tables")
def test_tables(
    benchmark: Any,
    log_dir: str,
    monkeypatch: pytest.MonkeyPatch,
    workload: str,
    caching: bool,
    path: str,
) -> None:
    what = f"{RECORDS:,} updates of {KEYS:,} keys"
    if path == "record-by-record":

        def refuse(self: Any, keys: list[Any]) -> list[bytes]:
            raise ValueError("record by record")

        # The nodes fall back to one record at a time when a batch's keys
        # do not serialize together; table changes framed one by one.
        monkeypatch.setattr(table_processors._StoreNode, "_raw_keys", refuse)
        change = table_processors.ChangeSerde
        monkeypatch.setattr(change, "serialize_batch", serdes.Serde.serialize_batch)
        monkeypatch.setattr(change, "deserialize_batch", serdes.Serde.deserialize_batch)
        _record_by_record[f"{workload}-{caching}"] = _bench(benchmark, log_dir, workload, caching)
        benchmark.extra_info["note"] = f"{what}, record by record"
        return
    rate = _bench(benchmark, log_dir, workload, caching)
    before = _record_by_record.get(f"{workload}-{caching}")
    speedup = f"{rate / before:.2f}x record by record" if before else "record by record not run"
    benchmark.extra_info["note"] = f"{what}, batched: {speedup}"
