"""Decoding built-in serdes into Arrow columns, whole columns at a time; what
the kernels refuse fails with the serde's error."""

from __future__ import annotations

import pyarrow as pa
import pytest

from strom import serdes
from strom.errors import SerializationError
from strom.spark._types import decode

S, L = serdes.String(), serdes.Long()


def column(serde: serdes.Serde, values: list) -> pa.Array:  # type: ignore[type-arg]
    return pa.array([None if v is None else serde.serialize("t", v) for v in values], pa.binary())


def test_numbers_and_strings_with_nulls() -> None:
    longs = [5, None, -(2**63), 2**63 - 1]
    assert decode(L, "t", column(L, longs)).to_pylist() == longs
    ints = [7, None, -1]
    assert decode(serdes.Integer(), "t", column(serdes.Integer(), ints)).to_pylist() == ints
    doubles = [1.5, None, -0.25]
    assert decode(serdes.Double(), "t", column(serdes.Double(), doubles)).to_pylist() == doubles
    shorts = [258, None, -(2**15)]
    decoded = decode(serdes.Short(), "t", column(serdes.Short(), shorts))
    assert (decoded.type, decoded.to_pylist()) == (pa.int16(), shorts)
    singles = [1.5, None, -0.25]
    decoded = decode(serdes.Float(), "t", column(serdes.Float(), singles))
    assert (decoded.type, decoded.to_pylist()) == (pa.float32(), singles)
    words = ["zoë", None, ""]
    assert decode(S, "t", column(S, words)).to_pylist() == words
    # A slice of a column (a non-zero offset into its buffers).
    assert decode(L, "t", column(L, longs).slice(2)).to_pylist() == longs[2:]


def test_windowed_keys() -> None:
    serde = serdes.TimeWindowed(S, 10_000)
    raw = [S.serialize("t", "a") + (20_000).to_bytes(8, "big"), None]
    assert decode(serde, "t", pa.array(raw, pa.binary())).to_pylist() == [
        {"key": "a", "start": 20_000, "end": 30_000},
        None,
    ]


@pytest.mark.parametrize(
    ("serde", "raw"),
    [(L, b"\x00" * 7), (S, b"\xff\xfe"), (serdes.TimeWindowed(S, 10), b"abc")],
    ids=["short-long", "invalid-utf8", "short-window"],
)
def test_bad_values_fail_naming_them(serde: serdes.Serde, raw: bytes) -> None:  # type: ignore[type-arg]
    with pytest.raises(SerializationError):
        decode(serde, "t", pa.array([S.serialize("t", "ok"), raw], pa.binary()))
