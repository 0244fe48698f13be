"""The typed window store: serdes in Python over a native bytes window store
(in memory, or persistent with one log-structured store per time segment),
whose native store logs every write for the store's changelog topic (when
logged) under Kafka's windowed key (key ‖ 8-byte window start ‖ 4-byte seqnum).

Reads follow Kafka's ``WindowStore``: time bounds are inclusive, expired
windows (start ``<= observed stream time - retention``) are never returned,
and results are snapshots, so the store may be modified while iterating.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from strom import _core
from strom.keyvalue import KeyValue
from strom.serdes import Serde
from strom.state.internals.typed import TypedWindowedStore
from strom.state.stores import Duration, to_millis

if TYPE_CHECKING:
    pass  # Python 3.10 has no typing.Self

__all__ = ["WindowStore"]

K = TypeVar("K")
V = TypeVar("V")


class WindowStore(TypedWindowedStore[K, V]):
    """A window store of one task (Kafka's ``WindowStore``): values per key
    and window start, kept for ``retention`` of stream time.

    Build one with :meth:`in_memory` or :meth:`open` (persistent), or wrap a
    native store. A ``logged`` store's native store keeps every write for the
    changelog (``native.take_changelog()``) under Kafka's windowed changelog
    key; ``clock()`` gives its timestamp.
    """

    native: _core.NativeWindowStore

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        native: _core.NativeWindowStore,
        logged: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(name, key_serde, value_serde, native, clock)
        if logged:
            native.enable_changelog()

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
        logged: bool = False,
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
        return cls(name, key_serde, value_serde, native, logged, clock)

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
        logged: bool = False,
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
        store = cls(name or Path(path).name, key_serde, value_serde, native, logged, clock)
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
        self.native.put(raw_key, raw_value, window_start, self._clock())

    def put_all(self, entries: Iterable[tuple[K, V | None, int]]) -> None:
        """Puts each ``(key, value, window_start)`` in order, as one batch."""
        items = list(entries)
        raw_keys = self._keys([k for k, _, _ in items])
        raw_values = self.value_serde.serialize_batch(self.name, [v for _, v, _ in items])
        now = self._clock()
        self.native.put_all(raw_keys, raw_values, [t for _, _, t in items], [now] * len(items))

    def put_raw_all(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        window_starts: Sequence[int],
        timestamps: Sequence[int],
    ) -> None:
        """Puts serialized windows as they are (what a native kernel
        reports), each logged with its own timestamp rather than the clock's."""
        self.native.put_all(keys, values, window_starts, timestamps)

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
