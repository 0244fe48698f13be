"""Serdes byte-compatible with Kafka's Java serdes.

Each serde converts one value (``serialize``/``deserialize``) and a whole batch
(``serialize_batch``/``deserialize_batch``); the built-in formats run their
batches in native code, so a batch crosses into Rust once.
"""

from __future__ import annotations

import copy
import json
import struct
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from strom import _core
from strom.errors import ConfigError, SerializationError
from strom.windowed import SessionWindow, TimeWindow, Windowed

__all__ = [
    "UUID",
    "Boolean",
    "ByteArray",
    "Double",
    "Float",
    "Integer",
    "Json",
    "ListSerde",
    "Long",
    "Serde",
    "SessionWindowed",
    "Short",
    "String",
    "TimeWindowed",
    "Timestamped",
    "Void",
    "WrappingSerde",
]

T = TypeVar("T")


class Serde(ABC, Generic[T]):
    """A serializer and deserializer pair. ``None`` always maps to ``None``.

    Subclasses override ``serialize``/``deserialize``; they may override the
    batch methods with a faster whole-list version.
    """

    @abstractmethod
    def serialize(self, topic: str, data: T | None) -> bytes | None: ...

    @abstractmethod
    def deserialize(self, topic: str, data: bytes | None) -> T | None: ...

    def serialize_batch(self, topic: str, data: Sequence[T | None]) -> list[bytes | None]:
        return [self.serialize(topic, d) for d in data]

    def deserialize_batch(self, topic: str, data: Sequence[bytes | None]) -> list[T | None]:
        return [self.deserialize(topic, d) for d in data]

    def __repr__(self) -> str:
        return f"serdes.{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash(type(self))


class WrappingSerde(Serde[T]):
    """A serde of a composite value around an inner serde the DSL may not
    know when the topology is built (a table's changes, a suppression
    buffer's entries). Left None, the inner serde is the app's
    ``default.value.serde``, given when a task starts (Kafka's
    WrappingNullableSerde and its ``setIfUnset``)."""

    inner: Serde[Any] | None

    def with_default(self, default: Serde[Any] | None, where: str) -> WrappingSerde[T]:
        """This serde with ``default`` as its inner serde if it has none."""
        if self.inner is not None:
            return self
        if default is None:
            raise ConfigError(
                f"{where!r} has no value serde: pass one in the DSL call or set "
                "'default.value.serde'"
            )
        resolved = copy.copy(self)
        resolved.inner = default
        return resolved

    def _inner(self) -> Serde[Any]:
        if self.inner is None:
            raise SerializationError(
                f"{type(self).__name__} has no inner serde (resolved when a task starts)"
            )
        return self.inner


def _wrap(kind: str, exc: Exception) -> SerializationError:
    return SerializationError(f"{kind}: {exc}")


class _NativeSerde(Serde[T]):
    """A built-in serde whose batch codecs are native functions of strom._core."""

    _encode: Any
    _decode: Any
    _py_type: type | tuple[type, ...]

    def serialize(self, topic: str, data: T | None) -> bytes | None:
        if data is None:
            return None
        return self.serialize_batch(topic, [data])[0]

    def deserialize(self, topic: str, data: bytes | None) -> T | None:
        if data is None:
            return None
        return self.deserialize_batch(topic, [data])[0]

    def serialize_batch(self, topic: str, data: Sequence[T | None]) -> list[bytes | None]:
        try:
            out: list[bytes | None] = type(self)._encode(list(data))
        except (TypeError, OverflowError) as exc:
            raise _wrap(f"{type(self).__name__} serde cannot serialize", exc) from exc
        return out

    def deserialize_batch(self, topic: str, data: Sequence[bytes | None]) -> list[T | None]:
        try:
            out: list[T | None] = type(self)._decode(list(data))
        except TypeError as exc:
            raise _wrap(f"{type(self).__name__} serde expects bytes", exc) from exc
        return out


class String(_NativeSerde[str]):
    """Kafka's StringSerde (UTF-8). Invalid UTF-8 raises SerializationError."""

    _encode = staticmethod(_core.encode_strings)
    _decode = staticmethod(_core.decode_strings)


class Long(_NativeSerde[int]):
    """Kafka's LongSerde: 8 bytes, big-endian two's complement."""

    _encode = staticmethod(_core.encode_longs)
    _decode = staticmethod(_core.decode_longs)


class Integer(_NativeSerde[int]):
    """Kafka's IntegerSerde: 4 bytes, big-endian two's complement."""

    _encode = staticmethod(_core.encode_ints)
    _decode = staticmethod(_core.decode_ints)


class Double(_NativeSerde[float]):
    """Kafka's DoubleSerde: 8 bytes, IEEE 754 big-endian."""

    _encode = staticmethod(_core.encode_doubles)
    _decode = staticmethod(_core.decode_doubles)


class Short(_NativeSerde[int]):
    """Kafka's ShortSerde: 2 bytes, big-endian two's complement."""

    _encode = staticmethod(_core.encode_shorts)
    _decode = staticmethod(_core.decode_shorts)


class Float(_NativeSerde[float]):
    """Kafka's FloatSerde: 4 bytes, IEEE 754 single precision, big-endian
    (a Python float is rounded to the nearest single; one beyond its range
    is a SerializationError)."""

    _encode = staticmethod(_core.encode_floats)
    _decode = staticmethod(_core.decode_floats)


class Boolean(_NativeSerde[bool]):
    """Kafka's BooleanSerde: one byte, 1 for true and 0 for false."""

    _encode = staticmethod(_core.encode_bools)
    _decode = staticmethod(_core.decode_bools)


_STRINGS = String()


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


class UUID(Serde[uuid.UUID]):
    """Kafka's UUIDSerde: the UUID's canonical string, UTF-8."""

    def serialize(self, topic: str, data: uuid.UUID | None) -> bytes | None:
        return self.serialize_batch(topic, [data])[0]

    def deserialize(self, topic: str, data: bytes | None) -> uuid.UUID | None:
        return self.deserialize_batch(topic, [data])[0]

    def serialize_batch(self, topic: str, data: Sequence[uuid.UUID | None]) -> list[bytes | None]:
        bad = next((d for d in data if d is not None and not isinstance(d, uuid.UUID)), None)
        if bad is not None:
            raise SerializationError(f"UUID serde expects uuid.UUID, got {type(bad).__name__}")
        return _STRINGS.serialize_batch(topic, [None if d is None else str(d) for d in data])

    def deserialize_batch(self, topic: str, data: Sequence[bytes | None]) -> list[uuid.UUID | None]:
        texts = _STRINGS.deserialize_batch(topic, data)
        try:
            return [None if text is None else uuid.UUID(text) for text in texts]
        except ValueError:
            bad = next(t for t in texts if t is not None and not _is_uuid(t))
            raise SerializationError(f"UUID serde: not a UUID: {bad!r}") from None


class Void(Serde[None]):
    """Kafka's VoidSerde: every key or value is null."""

    def serialize(self, topic: str, data: None) -> None:
        if data is not None:
            raise SerializationError(f"Void serde takes only None, got {type(data).__name__}")

    def deserialize(self, topic: str, data: bytes | None) -> None:
        if data is not None:
            raise SerializationError(f"Void serde: data should be null, got {len(data)} bytes")


class ByteArray(Serde[bytes]):
    """Kafka's ByteArraySerde: bytes pass through unchanged."""

    def serialize(self, topic: str, data: bytes | None) -> bytes | None:
        if data is not None and not isinstance(data, bytes | bytearray | memoryview):
            raise SerializationError(f"ByteArray serde expects bytes, got {type(data).__name__}")
        return None if data is None else bytes(data)

    def deserialize(self, topic: str, data: bytes | None) -> bytes | None:
        return data

    def serialize_batch(self, topic: str, data: Sequence[bytes | None]) -> list[bytes | None]:
        if all(type(d) is bytes or d is None for d in data):
            return list(data)
        return [self.serialize(topic, d) for d in data]

    def deserialize_batch(self, topic: str, data: Sequence[bytes | None]) -> list[bytes | None]:
        return list(data)


class Json(Serde[Any]):
    """JSON as compact UTF-8 text, byte for byte as Kafka's ``JsonSerializer``
    (Jackson) writes the same object: members in order, non-ASCII as UTF-8,
    control characters as ``\\u00XX`` (upper-case hex), floats as Java's
    ``Double.toString`` (``1.0E10``, ``0.001``), NaN and the infinities as the
    strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``. Dicts, lists, tuples,
    str, int, float, bool and None are written; dict keys as Python's ``json``
    converts them. ``strom.struct`` results are written the same way."""

    def serialize(self, topic: str, data: Any) -> bytes | None:
        if data is None:
            return None
        return self.serialize_batch(topic, [data])[0]

    def serialize_batch(self, topic: str, data: Sequence[Any]) -> list[bytes | None]:
        try:
            out: list[bytes | None] = _core.encode_json(list(data))
        except (TypeError, ValueError) as exc:
            raise _wrap("Json serde cannot serialize", exc) from exc
        return out

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            return json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise _wrap("Json serde cannot deserialize", exc) from exc


# Kafka's ListSerde layout: a strategy byte (the ordinal of its
# SerializationStrategy), then for CONSTANT_SIZE a list of the null entries'
# indexes, then the entry count and the entries, each with a 4-byte length
# for VARIABLE_SIZE (-1, Kafka's NULL_ENTRY_VALUE, for a null entry).
_CONSTANT_SIZE = 0
_VARIABLE_SIZE = 1
_NULL_ENTRY = -1
_INT = struct.Struct(">i")
# The inner serdes whose entries Kafka writes without lengths (its
# ListSerializer's FIXED_LENGTH_SERIALIZERS, matched by exact class as Kafka
# does), with the bytes an entry takes.
_FIXED_SIZES: dict[type[Serde[Any]], int] = {
    Short: 2,
    Integer: 4,
    Float: 4,
    Long: 8,
    Double: 8,
    UUID: 36,
}


class ListSerde(Serde[list[T | None]]):
    """Kafka's ``Serdes.ListSerde``: a list of values of one inner serde, in
    Kafka's bytes. Null entries are kept. With ``Short``, ``Integer``,
    ``Float``, ``Long``, ``Double`` or ``UUID`` inside, entries are written
    without lengths and the null entries' indexes come first (Kafka's
    CONSTANT_SIZE); with any other serde each entry has a 4-byte length, -1
    for a null one (VARIABLE_SIZE). Lists and tuples are written; values are
    read back as lists (as Kafka's ``ArrayList`` or ``LinkedList`` alike)."""

    def __init__(self, inner: Serde[T]) -> None:
        if not isinstance(inner, Serde):
            raise ConfigError(
                f"ListSerde takes the serde of its entries (e.g. serdes.Integer()), got {inner!r}"
            )
        self.inner = inner
        self.entry_size = _FIXED_SIZES.get(type(inner))

    def __repr__(self) -> str:
        return f"serdes.ListSerde({self.inner!r})"

    def serialize(self, topic: str, data: list[T | None] | None) -> bytes | None:
        if data is None:
            return None
        if not isinstance(data, list | tuple):
            raise SerializationError(f"ListSerde expects a list, got {type(data).__name__}")
        encoded = self.inner.serialize_batch(topic, [entry for entry in data if entry is not None])
        size = self.entry_size
        if size is not None:
            nulls = [i for i, entry in enumerate(data) if entry is None]
            head = struct.pack(f">bi{len(nulls)}ii", _CONSTANT_SIZE, len(nulls), *nulls, len(data))
            body = bytearray(head)
            for raw in encoded:
                if raw is None or len(raw) != size:
                    got = "null" if raw is None else f"{len(raw)} bytes"
                    raise SerializationError(
                        f"ListSerde: {self.inner!r} wrote an entry of {got}, not {size} bytes"
                    )
                body += raw
            return bytes(body)
        out = bytearray(struct.pack(">bi", _VARIABLE_SIZE, len(data)))
        entries = iter(encoded)
        for entry in data:
            if entry is None:
                out += _INT.pack(_NULL_ENTRY)
                continue
            raw = next(entries)
            if raw is None:
                raise SerializationError(
                    f"ListSerde: {self.inner!r} turned the entry {entry!r} into null"
                )
            out += _INT.pack(len(raw))
            out += raw
        return bytes(out)

    def deserialize(self, topic: str, data: bytes | None) -> list[T | None] | None:
        if data is None:
            return None
        reader = _Reader(data)
        flag = reader.read_byte()
        size = self.entry_size
        nulls: set[int] = set()
        if flag == _CONSTANT_SIZE:
            if size is None:
                raise SerializationError(
                    f"ListSerde: the bytes are a constant-size list, which {self.inner!r} "
                    "cannot read (Kafka writes one only for Short, Integer, Float, Long, "
                    "Double and UUID entries)"
                )
            nulls = set(reader.read_ints(reader.read_count("null index")))
        elif flag != _VARIABLE_SIZE:
            raise SerializationError(
                f"ListSerde: invalid serialization strategy flag {flag} (0 or 1 expected)"
            )
        count = reader.read_count("entry")
        outside = sorted(i for i in nulls if not 0 <= i < count)
        if outside:
            raise SerializationError(
                f"ListSerde: null index {outside[0]} outside the list's {count} entries"
            )
        places: list[int] = []
        payloads: list[bytes] = []
        if size is not None and flag == _CONSTANT_SIZE:
            reader.need((count - len(nulls)) * size, f"{count - len(nulls)} entries")
            for i in range(count):
                if i not in nulls:
                    places.append(i)
                    payloads.append(reader.take(size))
        else:
            reader.need(4 * count, f"the lengths of {count} entries")
            for i in range(count):
                length = reader.read_int()
                if length == _NULL_ENTRY:
                    continue
                if length < 0:
                    raise SerializationError(f"ListSerde: entry {i} has a negative length {length}")
                places.append(i)
                payloads.append(reader.take(length))
        reader.end()
        out: list[T | None] = [None] * count
        for i, value in zip(places, self.inner.deserialize_batch(topic, payloads), strict=True):
            out[i] = value
        return out


class _Reader:
    """Reads a ListSerde's bytes front to back; running short or leaving
    bytes over is a SerializationError."""

    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def need(self, n: int, what: str) -> None:
        left = len(self.data) - self.pos
        if n > left:
            raise SerializationError(
                f"ListSerde: truncated at byte {self.pos} of {len(self.data)}: "
                f"{n} bytes needed for {what}"
            )

    def take(self, n: int) -> bytes:
        self.need(n, "an entry")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def read_byte(self) -> int:
        self.need(1, "the strategy flag")
        self.pos += 1
        return self.data[self.pos - 1]

    def read_int(self) -> int:
        self.need(4, "a 4-byte integer")
        (value,) = _INT.unpack_from(self.data, self.pos)
        self.pos += 4
        return int(value)

    def read_count(self, what: str) -> int:
        n = self.read_int()
        if n < 0:
            raise SerializationError(f"ListSerde: negative {what} count {n}")
        return n

    def read_ints(self, n: int) -> list[int]:
        self.need(4 * n, f"{n} null indexes")
        values = list(struct.unpack_from(f">{n}i", self.data, self.pos))
        self.pos += 4 * n
        return values

    def end(self) -> None:
        if self.pos != len(self.data):
            raise SerializationError(
                f"ListSerde: {len(self.data) - self.pos} bytes left over after the list"
            )


class TimeWindowed(Serde[Any]):
    """Kafka's ``TimeWindowedSerde``: the inner key's bytes, then the window
    start as 8 big-endian bytes; the end is start + ``window_size``."""

    def __init__(self, inner: Serde[Any], window_size: int) -> None:
        self.inner = inner
        self.window_size = int(window_size)

    def serialize(self, topic: str, data: Any) -> bytes | None:
        if data is None:
            return None
        key = self.inner.serialize(topic, data.key)
        return (key or b"") + int(data.window.start).to_bytes(8, "big", signed=True)

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < 8:
            raise SerializationError(f"a time-windowed key needs 8 bytes of window start: {data!r}")
        start = int.from_bytes(data[-8:], "big", signed=True)
        return Windowed(
            self.inner.deserialize(topic, data[:-8]), TimeWindow(start, start + self.window_size)
        )


class SessionWindowed(Serde[Any]):
    """Kafka's ``SessionWindowedSerde``: the inner key's bytes, then the
    session's end and start as 8 big-endian bytes each (both inclusive)."""

    def __init__(self, inner: Serde[Any]) -> None:
        self.inner = inner

    def serialize(self, topic: str, data: Any) -> bytes | None:
        if data is None:
            return None
        key = self.inner.serialize(topic, data.key)
        window = data.window
        return (
            (key or b"")
            + int(window.end).to_bytes(8, "big", signed=True)
            + int(window.start).to_bytes(8, "big", signed=True)
        )

    def deserialize(self, topic: str, data: bytes | None) -> Any:
        if data is None:
            return None
        if len(data) < 16:
            raise SerializationError(
                f"a session-windowed key needs 16 bytes of session end and start: {data!r}"
            )
        end = int.from_bytes(data[-16:-8], "big", signed=True)
        start = int.from_bytes(data[-8:], "big", signed=True)
        return Windowed(self.inner.deserialize(topic, data[:-16]), SessionWindow(start, end))


class Timestamped(Serde[tuple[Any, int]]):
    """Kafka's timestamped-store value layout: 8 big-endian bytes of
    timestamp, then the inner value's bytes; ``(value, timestamp)`` in Python."""

    def __init__(self, inner: Serde[Any]) -> None:
        self.inner = inner

    def serialize(self, topic: str, data: tuple[Any, int] | None) -> bytes | None:
        """None for None, and for a pair whose value is None or serializes
        to None (Kafka's ``ValueAndTimestamp.make(null, ts)`` is null, and
        its serializer gives null there): a store deletes the key."""
        if data is None:
            return None
        if not isinstance(data, tuple | list) or len(data) != 2:
            raise SerializationError(
                f"a timestamped value is a (value, timestamp) pair, got {data!r}"
            )
        if data[0] is None:
            return None
        value = self.inner.serialize(topic, data[0])
        if value is None:
            return None
        return int(data[1]).to_bytes(8, "big", signed=True) + value

    def deserialize(self, topic: str, data: bytes | None) -> tuple[Any, int] | None:
        if data is None:
            return None
        if len(data) < 8:
            raise SerializationError(f"a timestamped value needs 8 bytes of timestamp: {data!r}")
        return self.inner.deserialize(topic, data[8:]), int.from_bytes(data[:8], "big", signed=True)
