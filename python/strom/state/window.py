"""The typed window store: serdes in Python over a native bytes window store
(in memory, or persistent with one log-structured store per time segment),
with every write also sent to the store's changelog topic under Kafka's
windowed key (key ‖ 8-byte window start ‖ 4-byte seqnum).

Reads follow Kafka's ``WindowStore``: time bounds are inclusive, expired
windows (start ``<= observed stream time - retention``) are never returned,
and results are snapshots, so the store may be modified while iterating.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from strom import _core
from strom.errors import StoreError
from strom.keyvalue import KeyValue
from strom.serdes import Serde
from strom.state.key_value import ChangelogSink
from strom.state.stores import Duration, to_millis
from strom.windowed import Window, Windowed

if TYPE_CHECKING:
    from typing_extensions import Self  # Python 3.10 has no typing.Self

__all__ = ["WindowStore"]

K = TypeVar("K")
V = TypeVar("V")

# (keys, starts, ends, values) as the native scans return them
_Columns = tuple[list[bytes], list[int], list[int], list[bytes]]


class _TypedStore(Generic[K, V]):
    """What the typed window and session stores share: serdes, the
    changelog, commit and close."""

    native: _core.NativeWindowStore | _core.NativeSessionStore

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        changelog: ChangelogSink | None,
        clock: Callable[[], int] | None,
    ) -> None:
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self._changelog = changelog
        self._clock = clock or (lambda: 0)

    def _key(self, key: K | None) -> bytes:
        if key is None:
            raise StoreError(f"store {self.name!r}: keys must not be None")
        raw = self.key_serde.serialize(self.name, key)
        if raw is None:
            raise StoreError(f"store {self.name!r}: the key serde turned {key!r} into None")
        return raw

    def _keys(self, keys: Sequence[K]) -> list[bytes]:
        if any(k is None for k in keys):
            raise StoreError(f"store {self.name!r}: keys must not be None")
        raw = self.key_serde.serialize_batch(self.name, keys)
        if any(r is None for r in raw):
            raise StoreError(f"store {self.name!r}: the key serde turned a key into None")
        return raw  # type: ignore[return-value]

    def _log(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> None:
        """Sends the writes that happened (a None key: nothing was written)."""
        if self._changelog is None:
            return
        logged = [(k, v) for k, v in zip(keys, values, strict=True) if k is not None]
        if logged:
            now = self._clock()
            self._changelog([k for k, _ in logged], [v for _, v in logged], [now] * len(logged))

    def _windowed(self, columns: _Columns) -> Iterator[KeyValue]:
        raw_keys, starts, ends, raw_values = columns
        keys = self.key_serde.deserialize_batch(self.name, raw_keys)
        values = self.value_serde.deserialize_batch(self.name, raw_values)
        return (
            KeyValue(Windowed(k, Window(s, e)), v)
            for k, s, e, v in zip(keys, starts, ends, values, strict=True)
        )

    @property
    def persistent(self) -> bool:
        return self.native.persistent

    @property
    def logged(self) -> bool:
        """Whether writes go to a changelog."""
        return self._changelog is not None

    @property
    def retention_ms(self) -> int:
        return self.native.retention_ms

    @property
    def segment_interval_ms(self) -> int:
        return self.native.segment_interval_ms

    @property
    def observed_stream_time(self) -> int:
        """The latest timestamp put so far (-1 before the first); records at
        or before ``observed_stream_time - retention`` are expired."""
        return self.native.observed_stream_time

    def restore_observed_stream_time(self, timestamp: int) -> None:
        """Advances observed stream time (never backwards), dropping what
        falls out of retention. Persistent stores restore the committed value
        when opened."""
        self.native.restore_observed_stream_time(timestamp)

    def restore(self, store_keys: Sequence[bytes], values: Sequence[bytes | None]) -> int:
        """Applies changelog records (store keys as logged, None values
        delete) without logging them again; returns how many were dropped
        as expired."""
        return self.native.restore(store_keys, values)

    def approximate_num_entries(self) -> int:
        return self.native.approximate_num_entries()

    def __len__(self) -> int:
        return len(self.native)

    def flush(self) -> None:
        self.native.flush()

    def commit(self, metadata: bytes) -> None:
        """Makes the writes so far durable together with ``metadata`` and the
        observed stream time (persistent stores; a no-op in memory). Opening
        the store again returns it exactly as of its last commit."""
        self.native.commit(metadata)

    def close(self) -> None:
        """Releases the store; a persistent store's writes since its last
        commit are discarded."""
        self.native.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        flavour = "persistent" if self.persistent else "in-memory"
        return f"{type(self).__name__}({self.name!r}, {flavour})"


class WindowStore(_TypedStore[K, V]):
    """A window store of one task (Kafka's ``WindowStore``): values per key
    and window start, kept for ``retention`` of stream time.

    Build one with :meth:`in_memory` or :meth:`open` (persistent), or wrap a
    native store. ``changelog(keys, values, timestamps)`` receives every write
    under Kafka's windowed changelog key; ``clock()`` gives its timestamp.
    """

    native: _core.NativeWindowStore

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        native: _core.NativeWindowStore,
        changelog: ChangelogSink | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(name, key_serde, value_serde, changelog, clock)
        self.native = native

    @classmethod
    def in_memory(
        cls,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        retention: Duration,
        window_size: Duration,
        retain_duplicates: bool = False,
        segment_interval: Duration | None = None,
        changelog: ChangelogSink | None = None,
        clock: Callable[[], int] | None = None,
    ) -> WindowStore[K, V]:
        """An in-memory window store; ``segment_interval`` defaults to Kafka's
        ``max(retention / 2, 60 s)``."""
        native = _core.NativeWindowStore(
            to_millis(retention, "retention"),
            to_millis(window_size, "window_size"),
            None if segment_interval is None else to_millis(segment_interval, "segment_interval"),
            retain_duplicates,
        )
        return cls(name, key_serde, value_serde, native, changelog, clock)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        retention: Duration,
        window_size: Duration,
        retain_duplicates: bool = False,
        segment_interval: Duration | None = None,
        name: str | None = None,
        changelog: ChangelogSink | None = None,
        clock: Callable[[], int] | None = None,
    ) -> tuple[WindowStore[K, V], bytes | None]:
        """Opens (or creates) the persistent window store in directory
        ``path`` as of its last commit; returns it with that commit's
        metadata (None: no commit yet). Raises StoreError if the directory is
        already open."""
        native, metadata = _core.NativeWindowStore.open(
            path,
            to_millis(retention, "retention"),
            to_millis(window_size, "window_size"),
            None if segment_interval is None else to_millis(segment_interval, "segment_interval"),
            retain_duplicates,
        )
        store = cls(name or Path(path).name, key_serde, value_serde, native, changelog, clock)
        return store, metadata

    @property
    def window_size_ms(self) -> int:
        return self.native.window_size_ms

    @property
    def retain_duplicates(self) -> bool:
        return self.native.retain_duplicates

    def put(self, key: K, value: V | None, window_start: int) -> None:
        """Stores ``value`` for the window of ``key`` starting at
        ``window_start``, or deletes it when ``value`` is None. With retained
        duplicates every put adds an entry and None is ignored. A window
        already expired is dropped."""
        raw_key = self._key(key)
        raw_value = self.value_serde.serialize(self.name, value)
        logged = self.native.put(raw_key, raw_value, window_start)
        self._log([logged], [raw_value])

    def put_all(self, entries: Iterable[tuple[K, V | None, int]]) -> None:
        """Puts each ``(key, value, window_start)`` in order, as one batch."""
        items = list(entries)
        raw_keys = self._keys([k for k, _, _ in items])
        raw_values = self.value_serde.serialize_batch(self.name, [v for _, v, _ in items])
        logged = self.native.put_all(raw_keys, raw_values, [t for _, _, t in items])
        self._log(logged, raw_values)

    def put_raw_all(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        window_starts: Sequence[int],
        timestamps: Sequence[int],
    ) -> None:
        """Puts serialized windows as they are (what a native kernel
        reports), each logged with its own timestamp rather than the clock's."""
        logged = self.native.put_all(keys, values, window_starts)
        if self._changelog is None:
            return
        kept = [i for i, k in enumerate(logged) if k is not None]
        if kept:
            self._changelog(
                [logged[i] for i in kept],  # type: ignore[misc]
                [values[i] for i in kept],
                [timestamps[i] for i in kept],
            )

    @overload
    def fetch(self, key: K, time_from: int) -> V | None: ...
    @overload
    def fetch(self, key: K, time_from: int, time_to: int) -> Iterator[KeyValue]: ...
    def fetch(self, key: K, time_from: int, time_to: int | None = None) -> Any:
        """``fetch(key, window_start)``: the value of that one window (None
        when absent, expired, or the store retains duplicates), as Kafka's
        ``fetch(key, time)``.

        ``fetch(key, time_from, time_to)``: ``KeyValue(window_start, value)``
        for every window of exactly ``key`` with ``time_from <= start <=
        time_to``, in start order (duplicates in insertion order), as Kafka's
        ``WindowStoreIterator``.
        """
        raw_key = self._key(key)
        if time_to is None:
            raw = self.native.fetch_one(raw_key, time_from)
            return self.value_serde.deserialize(self.name, raw)
        return self._starts(*self.native.fetch(raw_key, time_from, time_to))

    def backward_fetch(self, key: K, time_from: int, time_to: int) -> Iterator[KeyValue]:
        """As ``fetch(key, time_from, time_to)``, latest window first."""
        return self._starts(*self.native.backward_fetch(self._key(key), time_from, time_to))

    def _starts(self, starts: list[int], raw_values: list[bytes]) -> Iterator[KeyValue]:
        values = self.value_serde.deserialize_batch(self.name, raw_values)
        return (KeyValue(s, v) for s, v in zip(starts, values, strict=True))

    def fetch_range(
        self, key_from: K | None, key_to: K | None, time_from: int, time_to: int
    ) -> Iterator[KeyValue]:
        """``KeyValue(Windowed(key, Window(start, end)), value)`` for the keys
        with ``key_from <= key <= key_to`` in serialized-key order (either
        bound open when None) and ``time_from <= start <= time_to``."""
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        return self._windowed(self.native.fetch_range(lo, hi, time_from, time_to))

    def backward_fetch_range(
        self, key_from: K | None, key_to: K | None, time_from: int, time_to: int
    ) -> Iterator[KeyValue]:
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        return self._windowed(self.native.backward_fetch_range(lo, hi, time_from, time_to))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[KeyValue]:
        """``KeyValue(Windowed(key, Window(start, start + window_size)), value)``
        for every window with ``time_from <= start <= time_to``: segment by
        segment, then in serialized-key order, then by start."""
        return self._windowed(self.native.fetch_all(time_from, time_to))

    def backward_fetch_all(self, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return self._windowed(self.native.backward_fetch_all(time_from, time_to))

    def all(self) -> Iterator[KeyValue]:
        """Every window within retention, in ``fetch_all`` order."""
        return self._windowed(self.native.all())

    def backward_all(self) -> Iterator[KeyValue]:
        return self._windowed(self.native.backward_all())
