"""The typed key-value store: serdes in Python over a native bytes store,
which logs every write for the store's changelog topic when it is logged."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from strom import _core
from strom.errors import StoreError
from strom.keyvalue import KeyValue
from strom.serdes import Long, Serde, Timestamped
from strom.state.internals.typed import deserialize_values

K = TypeVar("K")
V = TypeVar("V")


def prefix_bounds(prefix: bytes) -> tuple[bytes, bytes | None]:
    """Inclusive serialized-key bounds around every key starting with
    ``prefix``: the prefix and its successor (the prefix without trailing
    0xff bytes, its last byte plus one; None when it is all 0xff), which
    itself does not start with the prefix and is filtered out."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return prefix, None
    return prefix, stripped[:-1] + bytes([stripped[-1] + 1])


class KeyValueReads(ABC):
    """The range reads of a key-value store, written once over a store's
    ``_scan`` of serialized keys (the store's own, or through the record
    cache): Kafka's ``ReadOnlyKeyValueStore`` range, reverse_range, all,
    reverse_all and prefix_scan."""

    name: str
    key_serde: Serde[Any]

    @abstractmethod
    def _scan(self, lo: bytes | None, hi: bytes | None, reverse: bool) -> list[tuple[bytes, bytes]]:
        """A snapshot of the serialized entries with ``lo <= key <= hi``
        (None: open), in serialized-key order or its reverse."""

    @abstractmethod
    def _key(self, key: Any) -> bytes: ...

    @abstractmethod
    def _entries(self, raw: list[tuple[bytes, bytes]]) -> Iterator[KeyValue]: ...

    def _bounds(self, key_from: Any, key_to: Any) -> tuple[bytes | None, bytes | None]:
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        return lo, hi

    def range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        """Entries with ``key_from <= key <= key_to`` in serialized-key
        order; a None bound is open."""
        return self._entries(self._scan(*self._bounds(key_from, key_to), False))

    def reverse_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        """As ``range``, largest key first."""
        return self._entries(self._scan(*self._bounds(key_from, key_to), True))

    def all(self) -> Iterator[KeyValue]:
        return self._entries(self._scan(None, None, False))

    def reverse_all(self) -> Iterator[KeyValue]:
        return self._entries(self._scan(None, None, True))

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None
    ) -> Iterator[KeyValue]:
        """Entries whose serialized key starts with ``prefix`` serialized
        by ``prefix_serde`` (default: the store's key serde), in
        serialized-key order (Kafka's ``prefixScan``)."""
        serde = prefix_serde if prefix_serde is not None else self.key_serde
        raw = serde.serialize(self.name, prefix)
        if raw is None:
            raise StoreError(f"store {self.name!r}: the prefix serde turned {prefix!r} into None")
        lo, hi = prefix_bounds(raw)
        found = [(k, v) for k, v in self._scan(lo, hi, False) if k.startswith(raw)]
        return self._entries(found)


class KeyValueStore(KeyValueReads, Generic[K, V]):
    """A key-value store of one task. Iteration follows serialized-key order
    (as Kafka's stores) and works on a snapshot, so the store may be modified
    while iterating."""

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        clock: Callable[[], int] | None = None,
        native: _core.NativeKeyValueStore | None = None,
    ) -> None:
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.native = native if native is not None else _core.NativeKeyValueStore()
        # The timestamp of the record being processed: a logged write's.
        self._clock = clock or (lambda: 0)

    def _key(self, key: K) -> bytes:
        if key is None:
            raise StoreError(f"store {self.name!r}: keys must not be None")
        raw = self.key_serde.serialize(self.name, key)
        assert raw is not None
        return raw

    def get(self, key: K) -> V | None:
        return self.value_serde.deserialize(self.name, self.native.get(self._key(key)))

    def get_all(self, keys: Sequence[K]) -> list[V | None]:
        """The values of ``keys`` (None where absent), in order, in one native call."""
        raw = self.native.get_all([self._key(k) for k in keys])
        return deserialize_values(self.value_serde, self.name, raw)

    def put(self, key: K, value: V | None) -> None:
        raw_key = self._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        self.native.put(raw_key, raw_value, self._clock())

    def put_if_absent(self, key: K, value: V) -> V | None:
        raw_key = self._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        if raw_value is None:
            raise StoreError(f"store {self.name!r}: put_if_absent needs a non-None value")
        previous = self.native.put_if_absent(raw_key, raw_value, self._clock())
        return self.value_serde.deserialize(self.name, previous)

    def put_all(self, entries: Sequence[tuple[K, V | None]]) -> None:
        raw_keys = [self._key(k) for k, _ in entries]
        raw_values = self.value_serde.serialize_batch(self.name, [v for _, v in entries])
        self.native.put_all(raw_keys, raw_values, self._clock())

    def delete(self, key: K) -> V | None:
        raw_key = self._key(key)
        previous = self.native.delete(raw_key, self._clock())
        return self.value_serde.deserialize(self.name, previous)

    def _entries(self, raw: list[tuple[bytes, bytes]]) -> Iterator[KeyValue]:
        keys = self.key_serde.deserialize_batch(self.name, [k for k, _ in raw])
        values = deserialize_values(self.value_serde, self.name, [v for _, v in raw])
        return (KeyValue(k, v) for k, v in zip(keys, values, strict=True))

    def _scan(self, lo: bytes | None, hi: bytes | None, reverse: bool) -> list[tuple[bytes, bytes]]:
        return self.native.range(lo, hi, reverse)

    def approximate_num_entries(self) -> int:
        return int(self.native.approximate_num_entries())

    def __len__(self) -> int:
        return len(self.native)

    # --- batch kernels used by the DSL ---------------------------------------
    def count(self, keys: list[Any], timestamps: list[int]) -> tuple[list[int], list[int]]:
        """Adds one to each key's count, in order, in a timestamped store of
        Long counts; returns the new counts and their result timestamps (the
        latest record's, as Kafka's aggregations)."""
        serde = self.value_serde
        if not (isinstance(serde, Timestamped) and isinstance(serde.inner, Long)):
            raise StoreError(f"store {self.name!r}: count needs a timestamped Long value serde")
        raw_keys = self.key_serde.serialize_batch(self.name, keys)
        counts, stamps = self.native.count_timestamped(raw_keys, timestamps)  # type: ignore[arg-type]
        return list(counts), list(stamps)

    def get_raw_batch(self, raw_keys: list[bytes]) -> list[bytes | None]:
        """The serialized values of serialized keys, in one native call."""
        return self.native.get_all(raw_keys)

    def upsert_raw(
        self,
        raw_keys: list[bytes],
        raw_values: list[bytes | None],
        timestamps: list[int],
        want_old: bool,
    ) -> list[bytes | None]:
        """Writes serialized records in order (None deletes) in one native
        call, logging each with its record's timestamp; returns each record's
        old serialized value (the previous record's for a repeated key) when
        ``want_old``."""
        olds, _ = self.native.upsert(raw_keys, raw_values, timestamps, want_old=want_old)
        return olds

    def table_count(
        self, raw_keys: list[bytes], timestamps: list[int], has_new: list[bool], has_old: list[bool]
    ) -> tuple[list[int | None], list[int | None], list[int]]:
        """``KGroupedTable.count()`` in one native call over a timestamped
        Long store: record ``i`` changes ``raw_keys[i]``, retracting an old
        value (``has_old``) and adding a new one (``has_new``). Returns the
        old counts, the new counts (None: absent) and the result timestamps."""
        olds, news, stamps, _ = self.native.table_count(raw_keys, timestamps, has_new, has_old)
        return olds, news, stamps

    def restore(self, keys: list[bytes | None], values: list[bytes | None]) -> None:
        """Applies changelog records (None value = delete) without re-logging them."""
        if None in keys:
            raise StoreError(f"the changelog of store {self.name!r} holds a record without a key")
        self.native.restore(keys, values)  # type: ignore[arg-type]
