"""Serdes to Arrow columns: built-in formats become typed columns, anything
else stays bytes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strom import serdes
from strom.errors import SerializationError
from strom.serdes import Serde

_PLAIN: dict[type[Serde[Any]], pa.DataType] = {
    serdes.String: pa.string(),
    serdes.Long: pa.int64(),
    serdes.Integer: pa.int32(),
    serdes.Short: pa.int16(),
    serdes.Double: pa.float64(),
    serdes.Float: pa.float32(),
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


# Fixed-width big-endian numbers (Kafka's LongSerializer and friends).
_FIXED: dict[type[Serde[Any]], str] = {
    serdes.Long: ">i8",
    serdes.Integer: ">i4",
    serdes.Short: ">i2",
    serdes.Double: ">f8",
    serdes.Float: ">f4",
}
# binary_slice's open end (pyarrow fails with stop=None).
_END = 1 << 31


def decode(serde: Serde[Any] | None, topic: str, data: pa.Array) -> pa.Array:
    """``data`` (binary) as the column ``arrow_type(serde)`` describes, by
    Arrow kernels over the whole column; values those cannot take (invalid
    UTF-8, a number of the wrong width) go through the serde, which names the
    bad one."""
    target = arrow_type(serde)
    if serde is None or target == pa.binary():
        return data.cast(pa.binary())
    if isinstance(serde, serdes.Timestamped):
        return decode(serde.inner, topic, pc.binary_slice(data, 8, _END))
    if isinstance(serde, serdes.TimeWindowed):
        starts = _fixed(pc.binary_slice(data, -8, _END), ">i8")
        if starts is not None:
            keys = decode(serde.inner, topic, pc.binary_slice(data, 0, -8))
            return windowed(keys, starts, pc.add(starts, serde.window_size), data)
    elif isinstance(serde, serdes.SessionWindowed):
        ends = _fixed(pc.binary_slice(data, -16, -8), ">i8")
        starts = _fixed(pc.binary_slice(data, -8, _END), ">i8")
        if ends is not None and starts is not None:
            keys = decode(serde.inner, topic, pc.binary_slice(data, 0, -16))
            return windowed(keys, starts, ends, data)
    elif type(serde) in _FIXED:
        found = _fixed(data, _FIXED[type(serde)])
        if found is not None:
            return found
    elif target == pa.string():
        try:
            return data.cast(pa.string())
        except pa.ArrowInvalid:
            pass  # the serde names the value
    return _decode_each(serde, topic, data.to_pylist())


def _fixed(data: pa.Array, dtype: str) -> pa.Array | None:
    """A column of fixed-width numbers read straight out of the binary
    column's buffer; None if some value has another width."""
    width = np.dtype(dtype).itemsize
    filled = data.cast(pa.binary()).fill_null(b"\0" * width)
    if len(filled) and not pc.all(pc.equal(pc.binary_length(filled), width)).as_py():
        return None
    offsets = np.frombuffer(filled.buffers()[1], np.int32)[filled.offset :]
    start = int(offsets[0]) if len(filled) else 0
    numbers = np.frombuffer(filled.buffers()[2] or b"", dtype, len(filled), start)
    mask = data.is_null().to_numpy(zero_copy_only=False) if data.null_count else None
    return pa.array(numbers.astype(dtype[1:]), mask=mask)


def _decode_each(serde: Serde[Any], topic: str, data: list[bytes | None]) -> pa.Array:
    """Decoding a value at a time, where a value the kernels refused needs
    the serde's error."""
    target = arrow_type(serde)
    if isinstance(serde, serdes.TimeWindowed | serdes.SessionWindowed):
        tail = 8 if isinstance(serde, serdes.TimeWindowed) else 16
        bad = next((d for d in data if d is not None and len(d) < tail), None)
        raise SerializationError(
            f"a windowed key of topic {topic!r} needs at least {tail} bytes, got {bad!r}"
        )
    if isinstance(serde, serdes.Json):
        return pa.array([None if d is None else d.decode() for d in data], pa.string())
    return pa.array(serde.deserialize_batch(topic, data), target)


def windowed(keys: pa.Array, starts: pa.Array, ends: pa.Array, present: pa.Array) -> pa.Array:
    """Struct column of (key, start, end); null where ``present`` is null."""
    return pa.StructArray.from_arrays(
        [keys, starts.cast(pa.int64()), ends.cast(pa.int64())],
        names=["key", "start", "end"],
        mask=present.is_null(),
    )
