"""A replay's input: the embedded log read into the source DataFrame, and a
task's input chunks, native batches built from the Arrow columns Spark hands
the worker (``_core.replay_batch``)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from strom import _core
from strom.embedded import EmbeddedLog
from strom.spark._task import INPUT_SCHEMA

# The module, not the function of the same name that strom.spark exports.
replay_module = importlib.import_module("strom.spark.replay")


def test_the_embedded_source_holds_the_logs_records(spark: SparkSession, tmp_path: Path) -> None:
    """Every record of the topics asked for, null keys and values included,
    from each partition's start, in the input schema; other topics left out."""
    log = EmbeddedLog(tmp_path / "log")
    log.create_topic("in", 3)
    log.create_topic("other")
    with log.producer() as producer:
        for i in range(500):
            key = None if i % 7 == 0 else b"k%d" % i
            value = None if i % 5 == 0 else b"v" * (i % 40)
            producer.produce("in", key, value, timestamp=10 * i, partition=i % 3)
        producer.produce("other", b"a", b"b")
    frame, counts, ends = replay_module._from_embedded(spark, str(tmp_path / "log"), ["in"])
    assert counts == {"in": 3, "other": 1}
    assert ends == {("in", p): n for p, n in log.end_offsets("in").items()}
    got = sorted(
        (r["partition"], r["offset"], r["key"], r["value"], r["timestamp"], r["task"], r["seq"])
        for r in frame.collect()
        if r["topic"] == "in"
    )
    expected = sorted(
        (p, r.offset, r.key, r.value, r.timestamp, -1, r.offset)
        for p in range(3)
        for r in log.read("in", p, 0, 1_000)
    )
    assert got == expected
    assert len(got) == frame.count() == 500
    assert [f.name for f in frame.schema.fields] == INPUT_SCHEMA.names


def test_columns_come_back_as_given() -> None:
    keys = pa.array([b"k1", None, b"", b"k\xff"], pa.binary())
    values = pa.array([b"v", b"w", None, b"xyz"], pa.binary())
    stamps = pa.array([5, -1, 2**62, 0], pa.int64())
    offsets = pa.array([10, 11, 13, 14], pa.int64())
    # Slices: the columns start inside their buffers, as a chunk's do.
    batch = _core.replay_batch("events", 3, *(c.slice(1) for c in (keys, values, stamps, offsets)))
    assert (batch.topic, batch.partition, len(batch)) == ("events", 3, 3)
    assert batch.keys() == [None, b"", b"k\xff"]
    assert batch.values() == [b"w", None, b"xyz"]
    assert batch.timestamps() == [-1, 2**62, 0]
    assert batch.offsets() == [11, 13, 14]
    assert batch.next_offset == 15
    assert batch.headers() == [[], [], []]


def test_large_binary_columns() -> None:
    batch = _core.replay_batch(
        "events",
        0,
        pa.array([b"k", None], pa.large_binary()),
        pa.array([None, b"v"], pa.large_binary()),
        pa.array([1, 2], pa.int64()),
        pa.array([0, 1], pa.int64()),
    )
    assert (batch.keys(), batch.values()) == ([b"k", None], [None, b"v"])


def test_an_empty_batch() -> None:
    empty = [pa.array([], pa.binary())] * 2 + [pa.array([], pa.int64())] * 2
    batch = _core.replay_batch("events", 0, *empty)
    assert len(batch) == 0
    assert batch.next_offset == 0


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            [pa.array(["k"]), pa.array([b"v"]), pa.array([1]), pa.array([0])],
            "the key column must be binary, not Utf8",
        ),
        (
            [pa.array([b"k"]), pa.array([b"v"]), pa.array([1], pa.int32()), pa.array([0])],
            "the timestamp column must be int64 without nulls, not Int32",
        ),
        (
            [pa.array([b"k"]), pa.array([b"v"]), pa.array([None], pa.int64()), pa.array([0])],
            "the timestamp column must be int64 without nulls",
        ),
        (
            [pa.array([b"k"]), pa.array([b"v"]), pa.array([1]), pa.array([-1])],
            "a negative offset",
        ),
        (
            [pa.array([b"k", b"l"]), pa.array([b"v"]), pa.array([1]), pa.array([0])],
            r"unequal lengths \(keys 2, values 1, timestamps 1, offsets 1\)",
        ),
    ],
)
def test_bad_columns_are_named(columns: list[pa.Array], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _core.replay_batch("events", 0, *columns)
