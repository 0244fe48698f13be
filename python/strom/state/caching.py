"""The record cache in front of a key-value store (Kafka's
CachingKeyValueStore over a thread's ThreadCache).

Writes stay in the cache, deduplicated per key, until the task commits or the
cache evicts; then each dirty entry is written to the store (and so to its
changelog) and handed to the listener, which forwards it downstream with its
old value. With the cache off (or ``statestore.cache.max.bytes`` = 0) every
update goes through at once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from strom import _core
from strom.keyvalue import KeyValue
from strom.state.key_value import KeyValueStore

# Timestamped(Long) values: 8-byte timestamp, then the 8-byte count.
_TIMESTAMPED_LONG = struct.Struct(">qq")

K = TypeVar("K")
V = TypeVar("V")

# (key, new value, old value, timestamp) of every entry a flush wrote.
FlushListener = Callable[[list[tuple[Any, Any, Any, int]]], None]


class CachingKeyValueStore(Generic[K, V]):
    """A key-value store whose writes go through a shared record cache."""

    def __init__(
        self,
        inner: KeyValueStore[K, V],
        cache: _core.NativeThreadCache,
        namespace: str,
        clock: Callable[[], int],
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.key_serde = inner.key_serde
        self.value_serde = inner.value_serde
        self.native = inner.native
        self._cache = cache
        self._id = cache.named(namespace)
        self._clock = clock
        # Keys written since their last flush: the cache may hold values the
        # store does not have yet.
        self._dirty: set[bytes] = set()
        self.listener: FlushListener | None = None

    # --- reads: the cache first ---------------------------------------------
    def _raw(self, key: bytes) -> bytes | None:
        hit = self._cache.get(self._id, key)
        if hit is not None:
            return hit[0]
        return self.native.get(key)

    def get(self, key: K) -> V | None:
        return self.value_serde.deserialize(self.name, self._raw(self.inner._key(key)))

    def _merged(self, lo: bytes | None, hi: bytes | None) -> Iterator[KeyValue]:
        entries = dict(self.native.range(lo, hi))
        for key in self._dirty:
            if (lo is None or key >= lo) and (hi is None or key <= hi):
                entries[key] = self._raw(key)  # type: ignore[assignment]
        raw = sorted((k, v) for k, v in entries.items() if v is not None)
        return self.inner._entries(raw)

    def range(self, key_from: K | None, key_to: K | None) -> Iterator[KeyValue]:
        lo = None if key_from is None else self.inner._key(key_from)
        hi = None if key_to is None else self.inner._key(key_to)
        return self._merged(lo, hi)

    def all(self) -> Iterator[KeyValue]:
        return self._merged(None, None)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()

    def __len__(self) -> int:
        return self.approximate_num_entries()

    # --- writes: into the cache ---------------------------------------------
    def put(self, key: K, value: V | None) -> None:
        raw_key = self.inner._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        self._dirty.add(raw_key)
        self._write(self._cache.put(self._id, raw_key, raw_value, self._clock(), True))

    def put_if_absent(self, key: K, value: V) -> V | None:
        previous = self.get(key)
        if previous is None:
            self.put(key, value)
        return previous

    def put_all(self, entries: list[tuple[K, V | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: K) -> V | None:
        previous = self.get(key)
        self.put(key, None)
        return previous

    def count(self, keys: list[Any], timestamps: list[int]) -> None:
        """``count()`` through the cache, record by record (so evictions
        happen exactly when they would), over a timestamped Long store: keys
        serialized in one batch, values packed directly."""
        raw_keys = self.key_serde.serialize_batch(self.name, keys)
        cache, cache_id, native, dirty = self._cache, self._id, self.native, self._dirty
        for raw_key, timestamp in zip(raw_keys, timestamps, strict=True):
            assert raw_key is not None
            hit = cache.get(cache_id, raw_key)
            raw = hit[0] if hit is not None else native.get(raw_key)
            if raw is None:
                count, result_time = 1, timestamp
            else:
                result_time, count = _TIMESTAMPED_LONG.unpack(raw)
                count, result_time = count + 1, max(result_time, timestamp)
            dirty.add(raw_key)
            flushed = cache.put(
                cache_id, raw_key, _TIMESTAMPED_LONG.pack(result_time, count), timestamp, True
            )
            if flushed:
                self._write(flushed)

    def flush(self) -> None:
        """Writes every dirty entry to the store and hands them on (commit)."""
        self._write(self._cache.flush(self._id))

    def _write(self, flushed: list[tuple[bytes, bytes | None, int]]) -> None:
        if not flushed:
            return
        keys = [k for k, _, _ in flushed]
        olds = self.native.get_all(keys)
        for key, value, _ in flushed:
            self._dirty.discard(key)
            self.native.put(key, value)
        self.inner.log_raw(keys, [v for _, v, _ in flushed], [ts for _, _, ts in flushed])
        if self.listener is not None:
            typed_keys = self.key_serde.deserialize_batch(self.name, keys)
            news = self.value_serde.deserialize_batch(self.name, [v for _, v, _ in flushed])
            old_values = self.value_serde.deserialize_batch(self.name, olds)
            self.listener(
                [
                    (k, n, o, ts)
                    for k, n, o, (_, _, ts) in zip(
                        typed_keys, news, old_values, flushed, strict=True
                    )
                ]
            )

    def restore(self, keys: list[bytes | None], values: list[bytes | None]) -> None:
        self.inner.restore(keys, values)

    def close(self) -> None:
        self._cache.close(self._id)
