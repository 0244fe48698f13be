"""Built-in serdes produce the bytes Kafka's Java serdes produce."""

from __future__ import annotations

import math
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom import serdes
from strom.errors import SerializationError


@pytest.mark.parametrize(
    ("serde", "value", "raw"),
    [
        (serdes.Long(), 1, bytes.fromhex("0000000000000001")),
        (serdes.Long(), -1, bytes.fromhex("ffffffffffffffff")),
        (serdes.Long(), 2**63 - 1, bytes.fromhex("7fffffffffffffff")),
        (serdes.Integer(), 256, bytes.fromhex("00000100")),
        (serdes.Integer(), -2, bytes.fromhex("fffffffe")),
        (serdes.Double(), 1.0, bytes.fromhex("3ff0000000000000")),
        (serdes.Double(), -0.5, bytes.fromhex("bfe0000000000000")),
        (serdes.Short(), 258, bytes.fromhex("0102")),
        (serdes.Short(), -2, bytes.fromhex("fffe")),
        (serdes.Float(), 1.5, bytes.fromhex("3fc00000")),
        (serdes.Float(), -0.25, bytes.fromhex("be800000")),
        (serdes.Boolean(), True, b"\x01"),
        (serdes.Boolean(), False, b"\x00"),
        (
            serdes.UUID(),
            uuid.UUID("123e4567-e89b-12d3-a456-426614174000"),
            b"123e4567-e89b-12d3-a456-426614174000",
        ),
        (serdes.String(), "ü€", "ü€".encode()),
        (serdes.String(), "", b""),
        (serdes.ByteArray(), b"\x00\xff", b"\x00\xff"),
        (serdes.Json(), {"a": [1, 2]}, b'{"a":[1,2]}'),
    ],
)
def test_java_compatible_bytes(serde: serdes.Serde[object], value: object, raw: bytes) -> None:
    assert serde.serialize("t", value) == raw
    assert serde.deserialize("t", raw) == value
    assert serde.serialize_batch("t", [value, None]) == [raw, None]
    assert serde.deserialize_batch("t", [raw, None]) == [value, None]


def test_none_maps_to_none() -> None:
    for serde in (serdes.Long(), serdes.String(), serdes.Json(), serdes.ByteArray()):
        assert serde.serialize("t", None) is None
        assert serde.deserialize("t", None) is None


@pytest.mark.parametrize(
    ("serde", "raw", "message"),
    [
        (serdes.Long(), b"\x01\x02", "LongDeserializer is not 8"),
        (serdes.Integer(), b"\x01", "IntegerDeserializer is not 4"),
        (serdes.Double(), b"\x01", "DoubleDeserializer is not 8"),
        (serdes.Short(), b"\x01", "ShortDeserializer is not 2"),
        (serdes.Float(), b"\x01\x02", "FloatDeserializer is not 4"),
        (serdes.Boolean(), b"\x02", "unexpected byte received by BooleanDeserializer: 2"),
        (serdes.Boolean(), b"", "BooleanDeserializer is not 1"),
        (serdes.UUID(), b"not-a-uuid", "not a UUID: 'not-a-uuid'"),
        (serdes.Void(), b"\x00", "data should be null"),
        (serdes.String(), b"\xff\xfe", "invalid UTF-8"),
        (serdes.Json(), b"{not json", "Json serde"),
    ],
)
def test_undecodable_bytes_raise_serialization_error(
    serde: serdes.Serde[object], raw: bytes, message: str
) -> None:
    with pytest.raises(SerializationError, match=message):
        serde.deserialize("t", raw)
    with pytest.raises(SerializationError, match=message):
        serde.deserialize_batch("t", [b"", raw] if isinstance(serde, serdes.String) else [raw])


def test_void_maps_only_none_and_floats_are_singles() -> None:
    void = serdes.Void()
    assert void.serialize_batch("t", [None, None]) == [None, None]
    assert void.deserialize_batch("t", [None]) == [None]
    with pytest.raises(SerializationError, match="takes only None"):
        void.serialize("t", 0)  # type: ignore[arg-type]
    # A Python float is rounded to the nearest single, as Java's (float) cast.
    single = serdes.Float()
    assert (
        single.deserialize("t", single.serialize("t", 0.1))
        == struct.unpack(">f", struct.pack(">f", 0.1))[0]
    )
    with pytest.raises(SerializationError):
        single.serialize("t", 1e300)
    assert single.serialize("t", math.inf) == bytes.fromhex("7f800000")
    with pytest.raises(SerializationError):
        serdes.Short().serialize("t", 2**15)
    with pytest.raises(SerializationError, match="Boolean serde expects bool"):
        serdes.Boolean().serialize("t", 1)  # type: ignore[arg-type]
    with pytest.raises(SerializationError, match=r"UUID serde expects uuid\.UUID"):
        serdes.UUID().serialize("t", "123e4567-e89b-12d3-a456-426614174000")  # type: ignore[arg-type]


def test_wrong_python_type_is_a_serialization_error() -> None:
    with pytest.raises(SerializationError):
        serdes.String().serialize("t", 42)  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        serdes.Long().serialize_batch("t", ["x"])  # type: ignore[list-item]
    with pytest.raises(SerializationError):
        serdes.Long().serialize("t", 2**63)


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.none()))
def test_long_batch_round_trip(values: list[int | None]) -> None:
    long = serdes.Long()
    raw = long.serialize_batch("t", values)
    assert raw == [None if v is None else v.to_bytes(8, "big", signed=True) for v in values]
    assert long.deserialize_batch("t", raw) == values


@given(st.lists(st.text() | st.none()))
def test_string_batch_round_trip(values: list[str | None]) -> None:
    string = serdes.String()
    raw = string.serialize_batch("t", values)
    assert raw == [None if v is None else v.encode() for v in values]
    assert string.deserialize_batch("t", raw) == values


@given(st.floats(allow_nan=True))
def test_double_round_trip(value: float) -> None:
    double = serdes.Double()
    back = double.deserialize("t", double.serialize("t", value))
    assert back == value or (math.isnan(value) and back is not None and math.isnan(back))
