"""The record cache in front of key-value, window and session stores
(Kafka's CachingKeyValueStore, CachingWindowStore and CachingSessionStore
over a thread's ThreadCache).

Writes stay in the cache, deduplicated per key, until the task commits or the
cache evicts; then each dirty entry is written to the store (and so to its
changelog) and handed to the listener, which forwards it downstream with its
old value. With the cache off (or ``statestore.cache.max.bytes`` = 0) every
update goes through at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from strom import _core
from strom.errors import StoreError
from strom.keyvalue import KeyValue
from strom.state.internals.typed import deserialize_values
from strom.state.key_value import KeyValueReads, KeyValueStore
from strom.windowed import SessionWindow, TimeWindow, Windowed

K = TypeVar("K")
V = TypeVar("V")

# (key, new value, old value, timestamp) of every entry a flush wrote.
FlushListener = Callable[[list[tuple[Any, Any, Any, int]]], None]


# What a native cache call flushed, as columns: keys, new values, old values
# (None: absent), timestamps; each entry already written to the store.
FlushedColumns = tuple[list[bytes], list[bytes | None], list[bytes | None], list[int]]


class CachingKeyValueStore(KeyValueReads, Generic[K, V]):
    """A key-value store behind the thread's record cache: serdes here, the
    caching itself native (``strom_core::store::CachingKeyValueStore``: cache
    over store for reads, dirty entries written through to the store and its
    changelog when evicted or flushed, deletes of keys the store never had
    dropped, as Kafka's ``putAndMaybeForward`` does). What a call flushed is
    handed to the listener with its old value."""

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
        self.listener: FlushListener | None = None

    # --- reads: the cache first ---------------------------------------------
    def get(self, key: K) -> V | None:
        raw = self.native.get_cached(self.inner._key(key), self._cache, self._id)
        return self.value_serde.deserialize(self.name, raw)

    def _scan(self, lo: bytes | None, hi: bytes | None, reverse: bool) -> list[tuple[bytes, bytes]]:
        return self.native.range_cached(lo, hi, self._cache, self._id, reverse)

    def _key(self, key: Any) -> bytes:
        return self.inner._key(key)

    def _entries(self, raw: list[tuple[bytes, bytes]]) -> Iterator[KeyValue]:
        return self.inner._entries(raw)

    def approximate_num_entries(self) -> int:
        return self.inner.approximate_num_entries()

    def __len__(self) -> int:
        return self.approximate_num_entries()

    # --- writes: into the cache ---------------------------------------------
    def put(self, key: K, value: V | None) -> None:
        raw_key = self.inner._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        self._emit(self.native.put_cached(raw_key, raw_value, self._clock(), self._cache, self._id))

    def put_if_absent(self, key: K, value: V) -> V | None:
        raw_key = self.inner._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        if raw_value is None:
            raise StoreError(f"store {self.name!r}: put_if_absent needs a non-None value")
        previous, flushed = self.native.put_if_absent_cached(
            raw_key, raw_value, self._clock(), self._cache, self._id
        )
        self._emit(flushed)
        return self.value_serde.deserialize(self.name, previous)

    def put_all(self, entries: list[tuple[K, V | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: K) -> V | None:
        previous, flushed = self.native.delete_cached(
            self.inner._key(key), self._clock(), self._cache, self._id
        )
        self._emit(flushed)
        return self.value_serde.deserialize(self.name, previous)

    def flush(self) -> None:
        """Writes every dirty entry to the store and hands them on (commit)."""
        self._emit(self.native.flush_cached(self._cache, self._id))

    def _emit(self, flushed: FlushedColumns) -> None:
        """Hands what a native call flushed (written and logged already) to
        the listener."""
        keys, news, olds, timestamps = flushed
        if not keys or self.listener is None:
            return
        typed_keys = self.key_serde.deserialize_batch(self.name, keys)
        new_values = deserialize_values(self.value_serde, self.name, news)
        old_values = deserialize_values(self.value_serde, self.name, olds)
        self.listener(list(zip(typed_keys, new_values, old_values, timestamps, strict=True)))

    # --- batches: one native call each ---------------------------------------
    def count(self, keys: list[Any], timestamps: list[int]) -> None:
        """``count()`` through the cache over a timestamped Long store, in
        one native call that reads and puts record by record (so evictions
        happen exactly when they would)."""
        self.count_raw(self.key_serde.serialize_batch(self.name, keys), timestamps)

    def count_raw(self, raw_keys: list[Any], timestamps: list[int]) -> None:
        """``count`` of keys already serialized."""
        self._emit(
            self.native.count_timestamped_cached(raw_keys, timestamps, self._cache, self._id)
        )

    def count_read(self, records: _core.RecordBatch) -> None:
        """``count_raw`` of a batch read's keys (none null) and timestamps."""
        self._emit(self.native.count_read_cached(records, self._cache, self._id))

    def table_count(
        self, raw_keys: list[bytes], timestamps: list[int], has_new: list[bool], has_old: list[bool]
    ) -> None:
        """``KGroupedTable.count()``'s native kernel through the cache (see
        ``KeyValueStore.table_count``); what it evicts is handed on."""
        *_, flushed = self.native.table_count(
            raw_keys, timestamps, has_new, has_old, self._cache, self._id
        )
        self._emit(flushed)

    def get_raw_batch(self, raw_keys: list[bytes]) -> list[bytes | None]:
        """The serialized values of serialized keys as the cache sees them,
        in one native call that counts no use (the writes that follow do)."""
        return self.native.get_all_cached(raw_keys, self._cache, self._id)

    def upsert_raw(
        self,
        raw_keys: list[bytes],
        raw_values: list[bytes | None],
        timestamps: list[int],
        want_old: bool,
    ) -> list[bytes | None]:
        """Puts serialized records into the cache in order, each with its
        record's timestamp, in one native call: evictions happen exactly
        where puts one by one would cause them, and what they flush is
        handed on. Returns each record's old serialized value when
        ``want_old``."""
        olds, flushed = self.native.upsert(
            raw_keys, raw_values, timestamps, self._cache, self._id, want_old
        )
        self._emit(flushed)
        return olds

    def restore(self, keys: list[bytes | None], values: list[bytes | None]) -> None:
        self.inner.restore(keys, values)

    def close(self) -> None:
        self._cache.close(self._id)


MIN_TIME = -(2**63)
MAX_TIME = 2**63 - 1


def _within(raw_key: bytes, lo: bytes | None, hi: bytes | None) -> bool:
    return (lo is None or raw_key >= lo) and (hi is None or raw_key <= hi)


def _split_windowed(cache_key: bytes) -> tuple[bytes, int]:
    return cache_key[:-8], int.from_bytes(cache_key[-8:], "big", signed=True)


def _split_session(cache_key: bytes) -> tuple[bytes, int, int]:
    end = int.from_bytes(cache_key[-16:-8], "big", signed=True)
    return cache_key[:-16], end, int.from_bytes(cache_key[-8:], "big", signed=True)


class _CachingWindowedBase(ABC):
    """What the caching window and session stores share. Reads the caching
    layer does not serve itself go to the store underneath (as of the last
    flush); writes stay in the record cache until a commit or an eviction
    writes them to the store (and changelog) and hands them to the listener,
    as Kafka's CachingWindowStore and CachingSessionStore do."""

    def __init__(
        self, inner: Any, cache: _core.NativeThreadCache, namespace: str, clock: Callable[[], int]
    ) -> None:
        self.inner = inner
        self.name = inner.name
        self.key_serde = inner.key_serde
        self.value_serde = inner.value_serde
        self.native = inner.native
        self._cache = cache
        self._id = cache.named(namespace)
        self._clock = clock
        self.listener: FlushListener | None = None
        # The largest window start (session end) put, cached or not.
        self._observed = -1

    @property
    def observed_stream_time(self) -> int:
        """The store's time as if every put had reached it: reads hide what
        the store would have expired, cached or not, so the cache changes
        when results are forwarded, never what they are."""
        native_time: int = self.native.observed_stream_time
        return max(self._observed, native_time)

    @property
    def cache_handle(self) -> tuple[_core.NativeThreadCache, int]:
        """The thread cache and this store's named cache in it (for a native
        kernel that must see what the cache holds)."""
        return self._cache, self._id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def flush(self) -> None:
        """Writes every dirty entry to the store and hands them on (commit)."""
        self._write(self._cache.flush(self._id))

    def _bounds(self, key_from: Any, key_to: Any) -> tuple[bytes | None, bytes | None]:
        lo = None if key_from is None else self.inner._key(key_from)
        hi = None if key_to is None else self.inner._key(key_to)
        return lo, hi

    @abstractmethod
    def _write(self, flushed: list[tuple[bytes, bytes | None, int]]) -> None:
        """Writes entries out of the cache to the store (and changelog) and
        hands them to the listener."""
        raise NotImplementedError

    def close(self) -> None:
        self._cache.close(self._id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class CachingWindowStore(_CachingWindowedBase):
    """A window store whose writes go through the record cache: the latest
    value per key and window start is written (and forwarded) per commit.
    Reads see every window the cache holds, even one the store has expired
    (Kafka's ``CachingWindowStore`` merges its cache, unfiltered, over the
    store's fetches: a sliding window aggregation finds the previous record's
    window there)."""

    native: _core.NativeWindowStore

    def put(self, key: Any, value: Any, window_start: int) -> None:
        raw_key = self.inner._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        self._observed = max(self._observed, window_start)
        cache_key = raw_key + window_start.to_bytes(8, "big", signed=True)
        self._write(self._cache.put(self._id, cache_key, raw_value, self._clock(), True))

    def put_all(self, entries: Any) -> None:
        for key, value, start in entries:
            self.put(key, value, start)

    def put_raw_all(
        self,
        raw_keys: list[bytes],
        raw_values: list[bytes | None],
        window_starts: list[int],
        timestamps: list[int],
    ) -> None:
        """``put_raw`` for each update in order, in one native call. What the
        puts evict is written out after them, in order: nothing reads the
        store in between (the kernel keeps its own windows), and each write
        is logged with the clock, which a batch does not move."""
        if window_starts:
            self._observed = max(self._observed, *window_starts)
        if self.listener is None:
            # Nothing to hand the evictions to: they go into the store natively.
            self._cache.put_all_into(
                self._id, raw_keys, raw_values, timestamps, window_starts, self.native
            )
            return
        self._write(
            self._cache.put_all(self._id, raw_keys, raw_values, timestamps, [window_starts])
        )

    def put_results(
        self, raw_keys: list[bytes | None], timestamps: list[int], results: Any
    ) -> bool:
        """Every update of a time-windowed kernel's ``results`` (which send
        store values), as ``put_raw_all`` of their keys, store values, starts
        and input timestamps, in one native call with no Python object per
        update; False, with nothing put, when there is a listener (the
        caller then puts them with ``put_raw_all``)."""
        if self.listener is not None:
            return False
        _written, highest = self._cache.put_results_into(
            self._id, results, raw_keys, timestamps, self.native
        )
        if highest is not None:
            self._observed = max(self._observed, highest)
        return True

    def flush(self) -> None:
        if self.listener is None:
            self._cache.flush_into(self._id, self.native)
        else:
            super().flush()

    def _write_all(self, flushed: list[tuple[bytes, bytes | None, int]]) -> None:
        """Writes entries out of the cache to the store and changelog in one
        call (no listener to hand them to)."""
        if flushed:
            keys = [key[:-8] for key, _, _ in flushed]
            starts = [int.from_bytes(key[-8:], "big", signed=True) for key, _, _ in flushed]
            values = [value for _, value, _ in flushed]
            self.native.put_all(keys, values, starts, [ts for _, _, ts in flushed])

    def _one(self, raw_key: bytes, start: int) -> bytes | None:
        hit = self._cache.get(self._id, raw_key + start.to_bytes(8, "big", signed=True))
        if hit is not None:
            return hit[0]
        return self.native.fetch_one(raw_key, start)

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        """As ``WindowStore.fetch``, seeing the cache's writes."""
        raw_key = self.inner._key(key)
        if time_to is None:
            return self.value_serde.deserialize(self.name, self._one(raw_key, time_from))
        return iter(self._starts(raw_key, time_from, time_to))

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return iter(self._starts(self.inner._key(key), time_from, time_to)[::-1])

    def merged_windows(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int, backward: bool
    ) -> Iterator[KeyValue]:
        """The windows of the keys in ``[key_from, key_to]`` (None: open)
        starting in ``[time_from, time_to]``, the cache's over the store's,
        in (serialized key, start) order or its reverse: what interactive
        queries read (Kafka's CachingWindowStore merges its cache into every
        fetch). The processors' own reads (``fetch_all``) stay on the store."""
        lo, hi = self._bounds(key_from, key_to)
        keys, starts, _ends, values = self.native.fetch_range(lo, hi, time_from, time_to)
        entries: dict[tuple[bytes, int], bytes | None] = {
            (k, s): v for k, s, v in zip(keys, starts, values, strict=True)
        }
        for cache_key, value in self._cache.prefix_scan(self._id, b""):
            raw_key, start = _split_windowed(cache_key)
            if _within(raw_key, lo, hi) and time_from <= start <= time_to:
                entries[(raw_key, start)] = value
        found = sorted((k, v) for k, v in entries.items() if v is not None)
        if backward:
            found.reverse()
        size = self.native.window_size_ms
        return self.inner._windowed(  # type: ignore[no-any-return]
            (
                [k for (k, _), _ in found],
                [s for (_, s), _ in found],
                [s + size for (_, s), _ in found],
                [v for _, v in found],
            )
        )

    def _starts(self, raw_key: bytes, time_from: int, time_to: int) -> list[KeyValue]:
        starts, raw_values = self.native.fetch(raw_key, time_from, time_to)
        entries: dict[int, bytes | None] = dict(zip(starts, raw_values, strict=True))
        # Every window of exactly this key the cache holds (its keys are the
        # key's bytes and 8 more), over the store's, expired there or not.
        length = len(raw_key) + 8
        for cache_key, value in self._cache.prefix_scan(self._id, raw_key):
            if len(cache_key) == length:
                start = int.from_bytes(cache_key[-8:], "big", signed=True)
                if time_from <= start <= time_to:
                    entries[start] = value
        found = sorted((s, v) for s, v in entries.items() if v is not None)
        values = self.value_serde.deserialize_batch(self.name, [v for _, v in found])
        return [KeyValue(s, v) for (s, _), v in zip(found, values, strict=True)]

    def _write(self, flushed: list[tuple[bytes, bytes | None, int]]) -> None:
        if not flushed:
            return
        if self.listener is None:
            self._write_all(flushed)
            return
        out: list[tuple[Any, Any, Any, int]] = []
        size = self.native.window_size_ms
        for cache_key, value, timestamp in flushed:
            raw_key, start = _split_windowed(cache_key)
            old = self.native.fetch_one(raw_key, start)
            if value is None and old is None:
                # Neither written nor forwarded, as Kafka's putAndMaybeForward
                # skips it: the store's time does not move for it.
                continue
            self.native.put(raw_key, value, start, timestamp)
            if self.listener is not None:
                key = self.key_serde.deserialize(self.name, raw_key)
                new_value = self.value_serde.deserialize(self.name, value)
                old_value = self.value_serde.deserialize(self.name, old)
                windowed = Windowed(key, TimeWindow(start, start + size))
                out.append((windowed, new_value, old_value, timestamp))
        if out and self.listener is not None:
            self.listener(out)


class CachingSessionStore(_CachingWindowedBase):
    """A session store whose writes go through the record cache: the latest
    value (or removal) per session is written and forwarded per commit.
    Reads see every session the cache holds, even one the store has expired
    (Kafka's ``CachingSessionStore``: ``fetchSession`` answers from the cache,
    ``findSessions`` merges the cache's sessions over the store's)."""

    native: _core.NativeSessionStore

    @staticmethod
    def _cache_key(raw_key: bytes, start: int, end: int) -> bytes:
        return raw_key + end.to_bytes(8, "big", signed=True) + start.to_bytes(8, "big", signed=True)

    def _set(self, session: Any, raw_value: bytes | None) -> None:
        raw_key = self.inner._key(session.key)
        start, end = session.window.start, session.window.end
        self._observed = max(self._observed, end)
        cache_key = self._cache_key(raw_key, start, end)
        # Session results are timestamped with the session's end.
        self._write(self._cache.put(self._id, cache_key, raw_value, end, True))

    def put(self, session: Any, value: Any) -> None:
        self._set(session, self.value_serde.serialize(self.name, value))

    def put_all(self, entries: Any) -> None:
        for session, value in entries:
            self.put(session, value)

    def remove(self, session: Any) -> None:
        self._set(session, None)

    def put_raw_all(
        self,
        raw_keys: list[bytes],
        starts: list[int],
        ends: list[int],
        raw_values: list[bytes | None],
        timestamps: list[int],
    ) -> None:
        """Serialized puts and removals (None) in order, as a native kernel
        reports them, each cached with its own timestamp, in one native call
        (see ``CachingWindowStore.put_raw_all``)."""
        if ends:
            self._observed = max(self._observed, *ends)
        self._write(self._cache.put_all(self._id, raw_keys, raw_values, timestamps, [ends, starts]))

    def _raw(self, raw_key: bytes, start: int, end: int) -> bytes | None:
        hit = self._cache.get(self._id, self._cache_key(raw_key, start, end))
        if hit is not None:
            return hit[0]
        return self.native.fetch_session(raw_key, start, end)

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        return self.value_serde.deserialize(self.name, self._raw(self.inner._key(key), start, end))

    def _sessions(
        self,
        lo: bytes | None,
        hi: bytes | None,
        earliest_session_end: int,
        latest_session_start: int,
        backward: bool,
    ) -> Iterator[KeyValue]:
        """The sessions with ``lo <= key <= hi`` (None: open) that end at
        or after ``earliest_session_end`` and start at or before
        ``latest_session_start``, the cache's over the store's (expired there
        or not), in (serialized key, end, start) order or its reverse."""
        keys, starts, ends, values = self.native.find_sessions_range(
            lo, hi, earliest_session_end, latest_session_start
        )
        entries: dict[tuple[bytes, int, int], bytes | None] = {
            (k, e, s): v for k, s, e, v in zip(keys, starts, ends, values, strict=True)
        }
        # One key's sessions are the cache keys of its bytes and 16 more.
        one = lo is not None and lo == hi
        for cache_key, value in self._cache.prefix_scan(self._id, lo if one and lo else b""):
            raw_key, end, start = _split_session(cache_key)
            if (
                _within(raw_key, lo, hi)
                and end >= earliest_session_end
                and start <= latest_session_start
            ):
                entries[(raw_key, end, start)] = value
        found = sorted((k, v) for k, v in entries.items() if v is not None)
        if backward:
            found.reverse()
        return self.inner._windowed(  # type: ignore[no-any-return]
            (
                [k for (k, _, _), _ in found],
                [s for (_, _, s), _ in found],
                [e for (_, e, _), _ in found],
                [v for _, v in found],
            )
        )

    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[KeyValue]:
        """As ``SessionStore.find_sessions``, seeing the cache's writes."""
        raw_key = self.inner._key(key)
        return self._sessions(raw_key, raw_key, earliest_session_end, latest_session_start, False)

    def backward_find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[KeyValue]:
        raw_key = self.inner._key(key)
        return self._sessions(raw_key, raw_key, earliest_session_end, latest_session_start, True)

    def fetch(self, key: Any) -> Iterator[KeyValue]:
        return self.find_sessions(key, MIN_TIME, MAX_TIME)

    def backward_fetch(self, key: Any) -> Iterator[KeyValue]:
        return self.backward_find_sessions(key, MIN_TIME, MAX_TIME)

    # Key-range scans (interactive queries) see the cache too; the
    # processors' own find_sessions_range stays on the store.
    def fetch_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return self._sessions(*self._bounds(key_from, key_to), MIN_TIME, MAX_TIME, False)

    def backward_fetch_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return self._sessions(*self._bounds(key_from, key_to), MIN_TIME, MAX_TIME, True)

    def _write(self, flushed: list[tuple[bytes, bytes | None, int]]) -> None:
        if not flushed:
            return
        out: list[tuple[Any, Any, Any, int]] = []
        for cache_key, value, timestamp in flushed:
            raw_key, end, start = _split_session(cache_key)
            old = self.native.fetch_session(raw_key, start, end)
            if value is None and old is None and self.listener is not None:
                continue  # as for windows, above
            if value is None:
                self.native.remove(raw_key, start, end, timestamp)
            else:
                self.native.put(raw_key, start, end, value, timestamp)
            if self.listener is not None:
                key = self.key_serde.deserialize(self.name, raw_key)
                new_value = self.value_serde.deserialize(self.name, value)
                old_value = self.value_serde.deserialize(self.name, old)
                session = Windowed(key, SessionWindow(start, end))
                out.append((session, new_value, old_value, timestamp))
        if out and self.listener is not None:
            self.listener(out)
