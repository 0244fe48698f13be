"""The bytes layer of an LRU map (Kafka's ``Stores.lruMap``: its
``MemoryNavigableLRUCache`` under ``ChangeLoggingKeyValueBytesStore``).

An in-memory native key-value store holds the entries, in serialized-key
order for scans; this layer keeps the keys in order of use and evicts the
least recently used one when a put of a new key takes the store past
``max_cache_size`` entries. A ``get`` or a put of a key is a use; a scan is
not (Kafka's ``LinkedHashMap`` in access order).

A logged store keeps its changelog here, in Kafka's order: a put's eviction
tombstones come before the put itself (Kafka's eviction listener logs while
the inner put runs, then the logging layer logs the put), and a ``put_all``
logs its evictions as they happen and its entries after them. Replaying
that changelog evicts whatever the tombstones left over the bound in write
order, which keeps exactly what the store kept, whatever order reads had put
its keys in. A restore logs nothing, evictions included (Kafka's
``restoring`` flag).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from strom import _core
from strom.errors import StoreError

__all__ = ["LruBytesStore"]

ChangelogColumns = tuple[list[bytes], list[bytes | None], list[int]]


class LruBytesStore:
    """Bytes in, bytes out, at most ``max_cache_size`` entries; the calls of
    ``NativeKeyValueStore`` that the typed ``KeyValueStore`` and the runtime
    make. Safe to read from another thread (interactive queries) while the
    task writes."""

    persistent = False

    def __init__(self, max_cache_size: int) -> None:
        self.max_cache_size = max_cache_size
        self.inner = _core.NativeKeyValueStore()
        # Every key the store holds, least recently used first.
        self._order: OrderedDict[bytes, None] = OrderedDict()
        self._changelog: ChangelogColumns | None = None
        self._lock = threading.RLock()

    # --- the changelog --------------------------------------------------------
    def enable_changelog(self) -> None:
        self._changelog = ([], [], [])

    @property
    def logged(self) -> bool:
        return self._changelog is not None

    def take_changelog(self) -> ChangelogColumns:
        """The writes since the last call, as (keys, values, timestamps)."""
        with self._lock:
            taken = self._changelog or ([], [], [])
            if self._changelog is not None:
                self._changelog = ([], [], [])
            return taken

    def _log(self, key: bytes, value: bytes | None, timestamp: int) -> None:
        if self._changelog is not None:
            keys, values, stamps = self._changelog
            keys.append(key)
            values.append(value)
            stamps.append(timestamp)

    # --- writes ---------------------------------------------------------------
    def _apply(self, key: bytes, value: bytes | None, timestamp: int, log_evictions: bool) -> None:
        """Puts (None: deletes) one entry, evicting what goes past the bound;
        the entry itself is not logged here."""
        if value is None:
            self.inner.delete(key, timestamp)
            self._order.pop(key, None)
            return
        self.inner.put(key, value, timestamp)
        if key in self._order:
            self._order.move_to_end(key)
            return
        self._order[key] = None
        while len(self._order) > self.max_cache_size:
            eldest, _ = self._order.popitem(last=False)
            self.inner.delete(eldest, timestamp)
            if log_evictions:
                self._log(eldest, None, timestamp)

    def put(self, key: bytes, value: bytes | None, timestamp: int = 0) -> None:
        with self._lock:
            self._apply(key, value, timestamp, log_evictions=True)
            self._log(key, value, timestamp)

    def put_if_absent(self, key: bytes, value: bytes, timestamp: int = 0) -> bytes | None:
        with self._lock:
            previous = self._get(key)
            if previous is None:
                self.put(key, value, timestamp)
            return previous

    def put_all(
        self, keys: Sequence[bytes], values: Sequence[bytes | None], timestamp: int = 0
    ) -> None:
        with self._lock:
            for key, value in zip(keys, values, strict=True):
                self._apply(key, value, timestamp, log_evictions=True)
            for key, value in zip(keys, values, strict=True):
                self._log(key, value, timestamp)

    def delete(self, key: bytes, timestamp: int = 0) -> bytes | None:
        """Removes the key (no use of it) and logs a tombstone, present or not."""
        with self._lock:
            previous = self.inner.delete(key, timestamp)
            self._order.pop(key, None)
            self._log(key, None, timestamp)
            return previous

    # --- reads ----------------------------------------------------------------
    def _get(self, key: bytes) -> bytes | None:
        value = self.inner.get(key)
        if value is not None:
            self._order.move_to_end(key)
        return value

    def get(self, key: bytes) -> bytes | None:
        """The key's value, counted as a use of it."""
        with self._lock:
            return self._get(key)

    def get_all(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` in order, each a use (as ``get`` one by one)."""
        with self._lock:
            return [self._get(key) for key in keys]

    def range(
        self, key_from: bytes | None = None, key_to: bytes | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]:
        """A snapshot of the entries in serialized-key order (no use of them)."""
        with self._lock:
            return self.inner.range(key_from, key_to, reverse)

    def approximate_num_entries(self) -> int:
        return len(self._order)

    def __len__(self) -> int:
        return len(self._order)

    # --- restore, commit, close ---------------------------------------------
    def restore(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> int:
        """Replays changelog records (None values delete) in order, evicting
        as the puts did, without logging anything."""
        with self._lock:
            for key, value in zip(keys, values, strict=True):
                if key is None:
                    raise StoreError("an LRU store's changelog holds a record without a key")
                self._apply(key, value, 0, log_evictions=False)
            return len(keys)

    def restore_records(self, records: _core.RecordBatch, remaining: int = 0) -> int:
        return self.restore(records.keys(), records.values())

    def flush(self) -> None:
        """Nothing to flush: the store is in memory."""

    def commit(self, metadata: bytes) -> None:
        """Nothing to commit: the store is in memory, restored from its changelog."""

    def close(self) -> None:
        with self._lock:
            self.inner.close()

    def __repr__(self) -> str:
        return f"LruBytesStore({len(self._order)} of {self.max_cache_size} entries)"
