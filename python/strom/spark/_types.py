"""Serdes to Arrow columns: built-in formats become typed columns, anything
else stays bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from strom import serdes
from strom.serdes import Serde

_PLAIN: dict[type[Serde[Any]], pa.DataType] = {
    serdes.String: pa.string(),
    serdes.Long: pa.int64(),
    serdes.Integer: pa.int32(),
    serdes.Double: pa.float64(),
    serdes.ByteArray: pa.binary(),
    serdes.Json: pa.string(),  # the JSON text (Spark's from_json reads it)
}


def arrow_type(serde: Serde[Any] | None) -> pa.DataType:
    """The column type ``decode`` gives for ``serde``'s bytes."""
    if serde is None:
        return pa.binary()
    if isinstance(serde, serdes.Timestamped):
        return arrow_type(serde.inner)
    if isinstance(serde, serdes.TimeWindowed | serdes.SessionWindowed):
        return window_struct(arrow_type(serde.inner))
    return _PLAIN.get(type(serde), pa.binary())


def window_struct(key: pa.DataType) -> pa.DataType:
    """A windowed key: Kafka's ``Windowed(key, Window(start, end))``."""
    return pa.struct([("key", key), ("start", pa.int64()), ("end", pa.int64())])


def decode(serde: Serde[Any] | None, topic: str, data: Sequence[bytes | None]) -> pa.Array:
    """``data`` as the column ``arrow_type(serde)`` describes."""
    target = arrow_type(serde)
    if serde is None or target == pa.binary():
        return pa.array(data, pa.binary())
    if isinstance(serde, serdes.Timestamped):
        return decode(serde.inner, topic, [None if d is None else d[8:] for d in data])
    if isinstance(serde, serdes.TimeWindowed):
        keys, starts = [], []
        for d in data:
            keys.append(None if d is None else d[:-8])
            starts.append(None if d is None else int.from_bytes(d[-8:], "big", signed=True))
        ends = [None if s is None else s + serde.window_size for s in starts]
        return windowed(decode(serde.inner, topic, keys), starts, ends, data)
    if isinstance(serde, serdes.SessionWindowed):
        keys, starts, ends = [], [], []
        for d in data:
            keys.append(None if d is None else d[:-16])
            ends.append(None if d is None else int.from_bytes(d[-16:-8], "big", signed=True))
            starts.append(None if d is None else int.from_bytes(d[-8:], "big", signed=True))
        return windowed(decode(serde.inner, topic, keys), starts, ends, data)
    if isinstance(serde, serdes.Json):
        return pa.array([None if d is None else d.decode() for d in data], pa.string())
    return pa.array(serde.deserialize_batch(topic, data), target)


def windowed(
    keys: pa.Array,
    starts: Sequence[int | None],
    ends: Sequence[int | None],
    present: Sequence[Any],
) -> pa.Array:
    """Struct column of (key, start, end); null where ``present`` is None."""
    mask = pa.array([p is None for p in present], pa.bool_())
    return pa.StructArray.from_arrays(
        [keys, pa.array(starts, pa.int64()), pa.array(ends, pa.int64())],
        names=["key", "start", "end"],
        mask=mask,
    )
