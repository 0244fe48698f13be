"""A replay task's input chunks: native batches built from the Arrow columns
Spark hands the worker (``_core.replay_batch``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from strom import _core


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
