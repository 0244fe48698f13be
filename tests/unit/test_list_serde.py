"""serdes.ListSerde writes and reads Kafka's ListSerde bytes
(org.apache.kafka.common.serialization.ListSerializer / ListDeserializer)."""

from __future__ import annotations

import logging
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import strom.config
from strom import StreamsConfig, serdes
from strom.errors import ConfigError, SerializationError

INTS = serdes.ListSerde(serdes.Integer())
STRS = serdes.ListSerde(serdes.String())
U = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")

# Expected bytes, from Kafka's format: one byte of strategy (0 CONSTANT_SIZE
# for Short, Integer, Float, Long, Double and UUID entries, 1 VARIABLE_SIZE for
# any other), for CONSTANT_SIZE a 4-byte count of null entries and their
# 4-byte indexes, then a 4-byte entry count and the entries: bare for
# CONSTANT_SIZE (nulls take no bytes), each after a 4-byte length for
# VARIABLE_SIZE (-1, ffffffff, for a null); every integer big-endian. Each was
# also checked once against Kafka 4.3's Serdes.ListSerde(ArrayList.class, …)
# with the same lists.
# Spaces separate the fields. CONSTANT_SIZE rows: flag | null count | null
# indexes | entry count | entries.
JAVA_BYTES = [
    (INTS, [1, None, 3], "00 00000001 00000001 00000003 00000001 00000003"),
    (INTS, [None], "00 00000001 00000000 00000001"),
    (serdes.ListSerde(serdes.Long()), [], "00 00000000 00000000"),
    (
        serdes.ListSerde(serdes.Long()),
        [-1, 2**63 - 1],
        "00 00000000 00000002 ffffffffffffffff 7fffffffffffffff",
    ),
    (
        serdes.ListSerde(serdes.Short()),
        [258, None, None],
        "00 00000002 00000001 00000002 00000003 0102",
    ),
    (
        serdes.ListSerde(serdes.Float()),
        [1.5, None, -0.25],
        "00 00000001 00000001 00000003 3fc00000 be800000",
    ),
    (
        serdes.ListSerde(serdes.Double()),
        [None, 1.0],
        "00 00000001 00000000 00000002 3ff0000000000000",
    ),
    (
        serdes.ListSerde(serdes.UUID()),
        [U, None],
        "00 00000001 00000001 00000002 " + str(U).encode().hex(),
    ),
    # VARIABLE_SIZE rows: flag | entry count | per entry, length and bytes or ffffffff.
    (STRS, ["a", None, "", "ü€"], "01 00000004 00000001 61 ffffffff 00000000 00000005 c3bce282ac"),
    (STRS, [], "01 00000000"),
    (
        serdes.ListSerde(serdes.Boolean()),
        [True, None, False],
        "01 00000003 00000001 01 ffffffff 00000001 00",
    ),
    (
        serdes.ListSerde(serdes.ByteArray()),
        [b"\x00\xff", None],
        "01 00000002 00000002 00ff ffffffff",
    ),
    # A list of lists: the inner ListSerde's bytes are a variable-size entry.
    (
        serdes.ListSerde(INTS),
        [[1, None], [], None],
        "01 00000003  00000011 00 00000001 00000001 00000002 00000001"
        "  00000009 00 00000000 00000000  ffffffff",
    ),
]


@pytest.mark.parametrize(("serde", "value", "raw"), JAVA_BYTES)
def test_the_bytes_are_kafkas(serde: serdes.ListSerde[Any], value: list[Any], raw: str) -> None:
    assert serde.serialize("t", value) == bytes.fromhex(raw)
    assert serde.deserialize("t", bytes.fromhex(raw)) == value
    assert serde.serialize_batch("t", [value, None]) == [bytes.fromhex(raw), None]
    assert serde.deserialize_batch("t", [bytes.fromhex(raw), None]) == [value, None]


def test_none_is_none_and_tuples_are_written_as_lists() -> None:
    assert INTS.serialize("t", None) is None
    assert INTS.deserialize("t", None) is None
    assert INTS.serialize("t", (1, None, 3)) == INTS.serialize("t", [1, None, 3])  # type: ignore[arg-type]


def test_a_variable_size_list_of_a_constant_size_inner_is_read() -> None:
    """Kafka's deserializer follows the flag in the bytes, so a VARIABLE_SIZE
    list of integers reads too."""
    raw = bytes.fromhex("01 00000002 00000004 00000007 ffffffff")
    assert INTS.deserialize("t", raw) == [7, None]


def test_repr_and_equality() -> None:
    assert repr(INTS) == "serdes.ListSerde(serdes.Integer())"
    assert serdes.ListSerde(serdes.Integer()) == INTS
    assert serdes.ListSerde(serdes.Long()) != INTS
    with pytest.raises(ConfigError, match="serde of its entries"):
        serdes.ListSerde(serdes.Integer)  # type: ignore[arg-type]


ints = st.integers(-(2**31), 2**31 - 1)
longs = st.integers(-(2**63), 2**63 - 1)


@given(st.lists(st.none() | ints))
def test_integer_lists_round_trip(value: list[int | None]) -> None:
    assert INTS.deserialize("t", INTS.serialize("t", value)) == value


@given(st.lists(st.none() | longs))
def test_long_lists_round_trip(value: list[int | None]) -> None:
    serde = serdes.ListSerde(serdes.Long())
    assert serde.deserialize("t", serde.serialize("t", value)) == value


@given(st.lists(st.none() | st.floats(allow_nan=False)))
def test_double_lists_round_trip(value: list[float | None]) -> None:
    serde = serdes.ListSerde(serdes.Double())
    assert serde.deserialize("t", serde.serialize("t", value)) == value


@given(st.lists(st.none() | st.floats(width=32)))
def test_float_lists_round_trip(value: list[float | None]) -> None:
    serde = serdes.ListSerde(serdes.Float())
    back = serde.deserialize("t", serde.serialize("t", value))
    assert back is not None
    # Compared as single-precision bytes, so that NaN equals NaN.
    assert [_single(x) for x in back] == [_single(x) for x in value]


def _single(x: float | None) -> bytes | None:
    return None if x is None else struct.pack(">f", x)


@given(st.lists(st.none() | st.uuids()))
def test_uuid_lists_round_trip(value: list[uuid.UUID | None]) -> None:
    serde = serdes.ListSerde(serdes.UUID())
    assert serde.deserialize("t", serde.serialize("t", value)) == value


@given(st.lists(st.none() | st.text()))
def test_string_lists_round_trip(value: list[str | None]) -> None:
    assert STRS.deserialize("t", STRS.serialize("t", value)) == value


@given(st.lists(st.none() | st.lists(st.none() | st.binary())))
def test_lists_of_byte_lists_round_trip(value: list[list[bytes | None] | None]) -> None:
    serde = serdes.ListSerde(serdes.ListSerde(serdes.ByteArray()))
    assert serde.deserialize("t", serde.serialize("t", value)) == value


@pytest.mark.parametrize(
    ("serde", "raw", "message"),
    [
        (INTS, "", "truncated at byte 0 of 0: 1 bytes needed for the strategy flag"),
        (INTS, "02 00000000", "invalid serialization strategy flag 2"),
        (INTS, "ff", "invalid serialization strategy flag 255"),
        (INTS, "00 0000", "truncated at byte 1 of 3"),
        (INTS, "00 ffffffff 00000000", "negative null index count -1"),
        (INTS, "00 00000002 00000000", "8 bytes needed for 2 null indexes"),
        (INTS, "00 00000001 00000005 00000002 00000001", "null index 5 outside"),
        (INTS, "00 00000000 ffffffff", "negative entry count -1"),
        (INTS, "00 00000000 00000002 00000001", "8 bytes needed for 2 entries"),
        (INTS, "00 00000000 7fffffff", "bytes needed for 2147483647 entries"),
        (INTS, "00 00000000 00000001 00000001 00", "1 bytes left over"),
        (STRS, "00 00000000 00000000", "constant-size list, which serdes.String()"),
        (STRS, "01 00000001", "4 bytes needed for the lengths of 1 entries"),
        (STRS, "01 00000001 fffffffe", "entry 0 has a negative length -2"),
        (STRS, "01 00000001 00000003 6162", "3 bytes needed for an entry"),
        (STRS, "01 00000001 00000001 ff", "invalid UTF-8"),
        (
            serdes.ListSerde(serdes.Short()),
            "00 00000000 00000001 0000 00",
            "1 bytes left over",
        ),
    ],
)
def test_malformed_bytes_raise_serialization_error(
    serde: serdes.ListSerde[Any], raw: str, message: str
) -> None:
    with pytest.raises(SerializationError, match=message):
        serde.deserialize("t", bytes.fromhex(raw))


def test_unwritable_values_raise_serialization_error() -> None:
    with pytest.raises(SerializationError, match="expects a list, got str"):
        STRS.serialize("t", "abc")  # type: ignore[arg-type]
    with pytest.raises(SerializationError):
        INTS.serialize("t", [1, "two"])  # type: ignore[list-item]
    with pytest.raises(SerializationError, match="turned the entry 'x' into null"):
        serdes.ListSerde(_Nulls()).serialize("t", ["x"])


class _Nulls(serdes.Serde[str]):
    def serialize(self, topic: str, data: str | None) -> bytes | None:
        return None

    def deserialize(self, topic: str, data: bytes | None) -> str | None:
        return None


# --- config: default.key.serde / default.value.serde = Kafka's ListSerde -------------

LIST_SERDE = "org.apache.kafka.common.serialization.Serdes$ListSerde"
LONG_SERDE = "org.apache.kafka.common.serialization.Serdes$LongSerde"


@pytest.mark.parametrize("list_type", [None, "java.util.ArrayList", "java.util.LinkedList", list])
def test_the_default_serdes_name_list_serde_with_its_inner_serde(list_type: Any) -> None:
    props: dict[str, Any] = {
        "default.key.serde": LIST_SERDE,
        "default.list.key.serde.inner": "org.apache.kafka.common.serialization.Serdes$StringSerde",
        "default.value.serde": serdes.ListSerde,
        "default.list.value.serde.inner": serdes.Long(),
    }
    if list_type is not None:
        props["default.list.key.serde.type"] = list_type
        props["default.list.value.serde.type"] = list_type
    config = StreamsConfig(props)
    assert config["default.key.serde"] == serdes.ListSerde(serdes.String())
    assert config["default.value.serde"] == serdes.ListSerde(serdes.Long())
    assert config.client_config("consumer.") == {}


def test_a_java_apps_list_serde_properties_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "streams.properties"
    path.write_text(
        "application.id=lists\n"
        f"default.value.serde={LIST_SERDE}\n"
        f"default.list.value.serde.inner={LONG_SERDE}\n"
        "default.list.value.serde.type=java.util.ArrayList\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(strom.config, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="strom.config"):
        config = StreamsConfig.from_properties(path)
    assert config["default.value.serde"] == serdes.ListSerde(serdes.Long())
    assert caplog.text == ""  # known keys: no "has no effect" warning


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"default.key.serde": LIST_SERDE}, "set 'default.list.key.serde.inner'"),
        ({"default.value.serde": serdes.ListSerde}, "set 'default.list.value.serde.inner'"),
        (
            {"default.list.value.serde.inner": "com.example.Nope"},
            "default.list.value.serde.inner must be a strom serde",
        ),
        (
            {"default.list.key.serde.inner": LIST_SERDE},
            "default.list.key.serde.inner cannot name ListSerde by class",
        ),
        (
            {"default.list.key.serde.type": "java.util.Vector"},
            "default.list.key.serde.type must be java.util.ArrayList or java.util.LinkedList",
        ),
    ],
)
def test_list_serde_config_errors_name_the_key(props: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StreamsConfig(props)
