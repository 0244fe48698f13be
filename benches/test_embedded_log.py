"""Embedded log throughput from Python: 1,000,000 records of 100-byte values,
appended and read in batches of 10,000.

Targets: >= 1,000,000 records/s appended and >= 2,000,000 records/s read
(``read_batch(...).values()``). ``read()``, which makes one ``ConsumedRecord``
per record, is measured apart.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from strom.embedded import EmbeddedLog

RECORDS = 1_000_000
BATCH = 10_000
VALUE_BYTES = 100

pytestmark = pytest.mark.benchmark(group="embedded-log")

_topics = itertools.count()


@pytest.fixture(scope="module")
def log() -> Iterator[EmbeddedLog]:
    path = tempfile.mkdtemp(prefix="strom-bench-log-")
    log = EmbeddedLog(path)
    yield log
    log.close()
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def values() -> list[bytes | None]:
    # Distinct objects, as a real batch would have.
    return [os.urandom(VALUE_BYTES) for _ in range(BATCH)]


@pytest.fixture(scope="module")
def filled(log: EmbeddedLog, values: list[bytes | None]) -> str:
    """A one-partition topic holding RECORDS records."""
    log.create_topic("read-bench")
    with log.producer() as producer:
        for _ in range(RECORDS // BATCH):
            producer.produce_columns("read-bench", [None] * BATCH, values)
    return "read-bench"


def _report(benchmark: Any, what: str) -> None:
    rate = RECORDS / benchmark.stats.stats.median
    benchmark.extra_info["records_per_s"] = rate
    benchmark.extra_info["note"] = (
        f"{what}: {RECORDS:,} records of {VALUE_BYTES} B in batches of {BATCH:,}"
    )


def test_append_produce_columns(benchmark: Any, log: EmbeddedLog, values: list[bytes]) -> None:
    keys: list[bytes | None] = [None] * BATCH

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        topic = f"append-{next(_topics)}"
        log.create_topic(topic)
        return (topic,), {}

    def run(topic: str) -> None:
        with log.producer() as producer:
            for _ in range(RECORDS // BATCH):
                producer.produce_columns(topic, keys, values)
        assert log.end_offsets(topic)[0] == RECORDS

    benchmark.pedantic(run, setup=setup, rounds=3)
    _report(benchmark, "produce_columns + flush (fsync)")


def test_append_produce_batch(benchmark: Any, log: EmbeddedLog, values: list[bytes]) -> None:
    records = [(None, v) for v in values]

    def setup() -> tuple[tuple[str], dict[str, Any]]:
        topic = f"append-{next(_topics)}"
        log.create_topic(topic)
        return (topic,), {}

    def run(topic: str) -> None:
        with log.producer() as producer:
            for _ in range(RECORDS // BATCH):
                producer.produce_batch(topic, records)
        assert log.end_offsets(topic)[0] == RECORDS

    benchmark.pedantic(run, setup=setup, rounds=3)
    _report(benchmark, "produce_batch of (key, value) tuples + flush (fsync)")


def test_read_batch_values(benchmark: Any, log: EmbeddedLog, filled: str) -> None:
    def run() -> None:
        offset = count = 0
        while offset < RECORDS:
            batch = log.read_batch(filled, 0, offset, BATCH)
            count += len(batch.values())
            offset = batch.next_offset
        assert count == RECORDS

    benchmark.pedantic(run, rounds=5, warmup_rounds=1)
    _report(benchmark, "read_batch(...).values()")


def test_read_records(benchmark: Any, log: EmbeddedLog, filled: str) -> None:
    def run() -> None:
        offset = count = 0
        while offset < RECORDS:
            records = log.read(filled, 0, offset, BATCH)
            count += len(records)
            offset = records[-1].offset + 1
        assert count == RECORDS

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    _report(benchmark, "read(...) -> list[ConsumedRecord]")


def test_consumer_poll_batches(benchmark: Any, log: EmbeddedLog, filled: str) -> None:
    groups = itertools.count()

    def run() -> None:
        consumer = log.consumer(f"bench-{next(groups)}", [filled])
        count = 0
        while count < RECORDS:
            for batch in consumer.poll_batches(max_records=BATCH, timeout=1.0):
                count += len(batch.values())
        consumer.close()

    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    _report(benchmark, "consumer.poll_batches(...) + values()")
