"""Windowed aggregation: the native kernels called from Python on one
columnar batch, and a windowed count of JSON records end to end."""

from __future__ import annotations

import array
import itertools
import json
import random
import time
from collections.abc import Callable
from typing import Any

import pytest

import strom
from strom import KafkaStreams, StreamsBuilder, _core, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import Materialized, SessionWindows, SlidingWindows, TimeWindows

RECORDS = 10_000_000
KEYS = 100_000
SIZE_MS = 60_000
GRACE_MS = 5_000


@pytest.fixture(scope="module")
def batch() -> tuple[tuple[bytes, bytes], bytes, bytes]:
    """10M records of 100k keys, 10 per ms, up to 2 s out of order, as
    packed buffers (Arrow Binary keys, int64 timestamps and values)."""
    rng = random.Random(7)
    width = 9
    names = [b"key-%05d" % i for i in range(KEYS)]
    data = b"".join(names[rng.randrange(KEYS)] for _ in range(RECORDS))
    offsets = array.array("i", range(0, (RECORDS + 1) * width, width)).tobytes()
    timestamps = array.array(
        "q", (max(0, i // 10 - (i * 7919) % 2_000) for i in range(RECORDS))
    ).tobytes()
    values = array.array("q", ((i * 31) % 1_000 for i in range(RECORDS))).tobytes()
    return (data, offsets), timestamps, values


@pytest.mark.benchmark(group="window-kernels")
@pytest.mark.parametrize("calls", [1, 100])
@pytest.mark.parametrize("aggregation", ["count", "sum"])
@pytest.mark.parametrize("windows", ["tumbling", "hopping"])
def test_native_windowed_aggregation(
    benchmark: Any, batch: tuple[Any, bytes, bytes], aggregation: str, windows: str, calls: int
) -> None:
    """The batch in one process() call, or in 100 calls of 100k records
    (steady state: each call reuses the buffers of the previous results);
    every update is a result (hopping: 4 windows per record, so about 4
    results per record)."""
    (data, offsets), timestamps, values = batch
    step = RECORDS // calls
    chunks = [
        (
            (data, offsets[4 * i * step : 4 * ((i + 1) * step + 1)]),
            timestamps[8 * i * step : 8 * (i + 1) * step],
            values[8 * i * step : 8 * (i + 1) * step],
        )
        for i in range(calls)
    ]
    advance = SIZE_MS if windows == "tumbling" else SIZE_MS // 4
    value_type = None if aggregation == "count" else "int"
    results: list[int] = []

    def setup() -> tuple[tuple[Any], dict[str, Any]]:
        kernel = _core.NativeTimeWindowedAggregation(
            aggregation, value_type, SIZE_MS, advance, GRACE_MS
        )
        return (kernel,), {}

    def run(kernel: Any) -> None:
        n = 0
        for keys, stamps, column in chunks:
            out = kernel.process(keys, stamps, None if aggregation == "count" else column)
            n += len(out)
            del out  # its buffers go back to the kernel for the next call
        results.append(n)

    benchmark.pedantic(run, setup=setup, rounds=3)
    benchmark.extra_info["records_per_s"] = RECORDS / benchmark.stats.stats.min
    benchmark.extra_info["note"] = (
        f"{RECORDS:,} records, {KEYS:,} keys, {calls} call(s); best "
        f"{RECORDS / benchmark.stats.stats.min / 1e6:.1f}M records/s, "
        f"{results[-1]:,} results"
    )


@pytest.mark.benchmark(group="window-kernels")
@pytest.mark.parametrize("store", ["persistent", "in_memory"])
@pytest.mark.parametrize("windows", ["tumbling", "hopping"])
def test_native_windowed_count_into_store(
    benchmark: Any,
    batch: tuple[Any, bytes, bytes],
    fresh_dir: Callable[[str], str],
    windows: str,
    store: str,
) -> None:
    """The DSL node's work per batch on the native kernel: 100 calls of 100k
    records, each followed by the drain of its store writes (every window
    it changed, with its latest count) into a window store, persistent or in
    memory, without a changelog. Where the time goes between the two is in
    the extra info."""
    (data, offsets), timestamps, _values = batch
    step = RECORDS // 100
    chunks = [
        (
            (data, offsets[4 * i * step : 4 * ((i + 1) * step + 1)]),
            timestamps[8 * i * step : 8 * (i + 1) * step],
        )
        for i in range(100)
    ]
    advance = SIZE_MS if windows == "tumbling" else SIZE_MS // 4
    split: list[tuple[float, float, int]] = []

    def setup() -> tuple[tuple[Any, Any], dict[str, Any]]:
        kernel = _core.NativeTimeWindowedAggregation("count", None, SIZE_MS, advance, GRACE_MS)
        if store == "persistent":
            native, _ = _core.NativeWindowStore.open(
                fresh_dir("strom-bench-wstore-"), SIZE_MS + GRACE_MS, SIZE_MS
            )
        else:
            native = _core.NativeWindowStore(SIZE_MS + GRACE_MS, SIZE_MS)
        return (kernel, native), {}

    def run(kernel: Any, native: Any) -> None:
        processing = draining = 0.0
        writes = 0
        for keys, stamps in chunks:
            t0 = time.perf_counter()
            out = kernel.process(keys, stamps, None)
            del out
            t1 = time.perf_counter()
            writes += kernel.drain_into(native)
            processing += t1 - t0
            draining += time.perf_counter() - t1
        split.append((processing, draining, writes))

    benchmark.pedantic(run, setup=setup, rounds=3)
    processing, draining, writes = min(split, key=lambda s: s[0] + s[1])
    benchmark.extra_info["records_per_s"] = RECORDS / benchmark.stats.stats.min
    benchmark.extra_info["note"] = (
        f"{RECORDS:,} records, {KEYS:,} keys, 100 calls, {writes:,} window writes; best "
        f"{RECORDS / benchmark.stats.stats.min / 1e6:.1f}M records/s; "
        f"process {processing:.2f} s, drain {draining:.2f} s"
    )


LINES = 200_000
_runs = itertools.count()


def _json_records() -> list[tuple[bytes, bytes, int]]:
    rng = random.Random(11)
    out = []
    for i in range(LINES):
        value = {
            "user": f"u{rng.randrange(1_000)}",
            "kind": rng.choice(["buy", "view"]),
            "amount": rng.randrange(100),
        }
        out.append((value["user"].encode(), json.dumps(value).encode(), i * 10))
    return out


@pytest.mark.benchmark(group="runtime")
@pytest.mark.parametrize("path", ["native", "python"])
def test_windowed_count_of_json_records(
    benchmark: Any, fresh_dir: Callable[[str], str], path: str
) -> None:
    """KafkaStreams on the embedded log: JSON values, a Python filter
    lambda, a one-minute tumbling count per key (native count(), or the
    same count as a Python aggregator for comparison)."""
    records = _json_records()

    def topology() -> Any:
        builder = StreamsBuilder()
        windowed = (
            builder.stream("events", key_serde=serdes.String(), value_serde=serdes.Json())
            .filter(lambda _k, v: v["kind"] == "buy")
            .group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(60_000))
        )
        table = (
            windowed.count()
            if path == "native"
            else windowed.aggregate(lambda: 0, lambda _k, _v, a: a + 1)
        )
        table.to_stream().to("counts", value_serde=serdes.Long())
        return builder.build()

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        where = fresh_dir("strom-bench-wcount-")
        log = EmbeddedLog(where)
        log.create_topic("events")
        log.create_topic("counts")
        with log.producer() as producer:
            producer.produce_batch("events", records)
        return (where,), {}

    def run(where: str) -> None:
        config = {
            "application.id": f"bench-{next(_runs)}",
            "bootstrap.servers": f"embedded:{where}",
            "default.value.serde": serdes.Long(),
        }
        with KafkaStreams(topology(), config) as app:
            app.run_until_end()

    benchmark.pedantic(run, setup=setup, rounds=3)
    benchmark.extra_info["records_per_s"] = LINES / benchmark.stats.stats.median
    benchmark.extra_info["note"] = f"{LINES:,} JSON records, filter lambda, {path} count"


@pytest.mark.benchmark(group="runtime")
@pytest.mark.parametrize("caching", [True, False], ids=["cached", "uncached"])
@pytest.mark.parametrize("path", ["native", "python"])
@pytest.mark.parametrize("windows", ["sliding", "session"])
def test_sliding_and_session_sum_of_json_records(
    benchmark: Any, fresh_dir: Callable[[str], str], windows: str, path: str, caching: bool
) -> None:
    """As above with 10 s sliding windows or 5 s-gap sessions summing a JSON
    field, behind the record cache or not: ``strom.agg.sum("amount")`` on
    the native kernel, or the same sum as Python functions."""
    records = _json_records()

    def topology() -> Any:
        builder = StreamsBuilder()
        grouped = (
            builder.stream("events", key_serde=serdes.String(), value_serde=serdes.Json())
            .filter(lambda _k, v: v["kind"] == "buy")
            .group_by_key()
        )
        mat = Materialized(value_serde=serdes.Double(), caching=caching)
        windowed: Any = grouped.windowed_by(
            SlidingWindows.of_time_difference_with_no_grace(10_000)
            if windows == "sliding"
            else SessionWindows.of_inactivity_gap_with_no_grace(5_000)
        )
        add = lambda _k, v, a: a + v["amount"]  # noqa: E731
        if path == "native":
            table = windowed.aggregate(strom.agg.sum("amount"), mat)
        elif windows == "sliding":
            table = windowed.aggregate(lambda: 0.0, add, mat)
        else:
            table = windowed.aggregate(lambda: 0.0, add, lambda _k, a, b: a + b, mat)
        table.to_stream().to("counts", value_serde=serdes.Double())
        return builder.build()

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        where = fresh_dir("strom-bench-swcount-")
        log = EmbeddedLog(where)
        log.create_topic("events")
        log.create_topic("counts")
        with log.producer() as producer:
            producer.produce_batch("events", records)
        return (where,), {}

    def run(where: str) -> None:
        config = {
            "application.id": f"bench-{next(_runs)}",
            "bootstrap.servers": f"embedded:{where}",
            "default.value.serde": serdes.Long(),
        }
        with KafkaStreams(topology(), config) as app:
            app.run_until_end()

    benchmark.pedantic(run, setup=setup, rounds=3)
    benchmark.extra_info["records_per_s"] = LINES / benchmark.stats.stats.median
    benchmark.extra_info["note"] = (
        f"{LINES:,} JSON records, filter lambda, {windows} {path} sum, caching={caching}"
    )
