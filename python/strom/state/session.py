"""The typed session store: serdes in Python over a native bytes session
store (in memory, or persistent with one log-structured store per time
segment), whose native store logs every write for the store's changelog
topic (when logged) under Kafka's session key (key ‖ 8-byte end ‖ 8-byte start).

Sessions are ``Windowed(key, Window(start, end))`` with both ends inclusive;
a session expires once its end is ``<= observed stream time - retention``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from strom import _core
from strom.keyvalue import KeyValue
from strom.serdes import Serde
from strom.state.internals.typed import TypedWindowedStore
from strom.state.stores import Duration, to_millis
from strom.windowed import SessionWindow, Windowed

__all__ = ["SessionStore"]

K = TypeVar("K")
V = TypeVar("V")


class SessionStore(TypedWindowedStore[K, V]):
    """A session store of one task (Kafka's ``SessionStore``): one aggregate
    per key and session window.

    Build one with :meth:`in_memory` or :meth:`open` (persistent), or wrap a
    native store. A ``logged`` store's native store keeps every write for the
    changelog (``native.take_changelog()``) under Kafka's session changelog
    key; ``clock()`` gives its timestamp.
    Results are ``KeyValue(Windowed(key, SessionWindow(start, end)), value)``
    snapshots, so the store may be modified while iterating.
    """

    native: _core.NativeSessionStore
    window_type = SessionWindow

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        native: _core.NativeSessionStore,
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
        segment_interval: Duration | None = None,
        logged: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> SessionStore[K, V]:
        """An in-memory session store; ``segment_interval`` defaults to
        Kafka's ``max(retention / 2, 60 s)``."""
        native = _core.NativeSessionStore(
            to_millis(retention, "retention"),
            None if segment_interval is None else to_millis(segment_interval, "segment_interval"),
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
        segment_interval: Duration | None = None,
        name: str | None = None,
        logged: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> tuple[SessionStore[K, V], bytes | None]:
        """Opens (or creates) the persistent session store in directory
        ``path`` as of its last commit; returns it with that commit's
        metadata (None: no commit yet). Raises StoreError if the directory is
        already open."""
        native, metadata = _core.NativeSessionStore.open(
            path,
            to_millis(retention, "retention"),
            None if segment_interval is None else to_millis(segment_interval, "segment_interval"),
        )
        store = cls(name or Path(path).name, key_serde, value_serde, native, logged, clock)
        return store, metadata

    def put(self, session: Windowed[K], value: V | None) -> None:
        """Stores the aggregate of ``session`` (None removes it). A session
        already expired is dropped."""
        raw_key = self._key(session.key)
        raw_value = self.value_serde.serialize(self.name, value)
        window = session.window
        self.native.put(raw_key, window.start, window.end, raw_value, self._clock())

    def put_all(self, entries: Iterable[tuple[Windowed[K], V | None]]) -> None:
        """Puts each ``(session, value)`` in order, as one batch."""
        items = list(entries)
        raw_keys = self._keys([w.key for w, _ in items])
        raw_values = self.value_serde.serialize_batch(self.name, [v for _, v in items])
        self.native.put_all(
            raw_keys,
            [w.window.start for w, _ in items],
            [w.window.end for w, _ in items],
            raw_values,
            [self._clock()] * len(items),
        )

    def put_raw_all(
        self,
        keys: Sequence[bytes],
        starts: Sequence[int],
        ends: Sequence[int],
        values: Sequence[bytes | None],
        timestamps: Sequence[int],
    ) -> None:
        """Puts serialized sessions as they are (what a native kernel
        reports; None removes), each logged with its own timestamp."""
        self.native.put_all(keys, starts, ends, values, timestamps)

    def remove(self, session: Windowed[K]) -> None:
        """Deletes ``session`` if present (logs a tombstone either way, as
        Kafka does)."""
        raw_key = self._key(session.key)
        window = session.window
        self.native.remove(raw_key, window.start, window.end, self._clock())

    def fetch_session(self, key: K, start: int, end: int) -> V | None:
        """The aggregate of exactly the session ``[start, end]`` of ``key``;
        None when absent or expired."""
        raw = self.native.fetch_session(self._key(key), start, end)
        return self.value_serde.deserialize(self.name, raw)

    def find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[KeyValue]:
        """The sessions of exactly ``key`` that end at or after
        ``earliest_session_end`` and start at or before
        ``latest_session_start``, in (end, start) order."""
        raw = self.native.find_sessions(self._key(key), earliest_session_end, latest_session_start)
        return self._windowed(raw)

    def backward_find_sessions(
        self, key: K, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[KeyValue]:
        raw = self.native.backward_find_sessions(
            self._key(key), earliest_session_end, latest_session_start
        )
        return self._windowed(raw)

    def find_sessions_range(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_session_end: int,
        latest_session_start: int,
    ) -> Iterator[KeyValue]:
        """As ``find_sessions`` for the keys with ``key_from <= key <=
        key_to`` in serialized-key order (either bound open when None)."""
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        raw = self.native.find_sessions_range(lo, hi, earliest_session_end, latest_session_start)
        return self._windowed(raw)

    def backward_find_sessions_range(
        self,
        key_from: K | None,
        key_to: K | None,
        earliest_session_end: int,
        latest_session_start: int,
    ) -> Iterator[KeyValue]:
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        raw = self.native.backward_find_sessions_range(
            lo, hi, earliest_session_end, latest_session_start
        )
        return self._windowed(raw)

    def fetch(self, key: K) -> Iterator[KeyValue]:
        """Every session of ``key`` within retention, in (end, start) order."""
        return self._windowed(self.native.fetch(self._key(key)))

    def backward_fetch(self, key: K) -> Iterator[KeyValue]:
        return self._windowed(self.native.backward_fetch(self._key(key)))

    def fetch_range(self, key_from: K | None, key_to: K | None) -> Iterator[KeyValue]:
        """Every session of the keys with ``key_from <= key <= key_to``."""
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        return self._windowed(self.native.fetch_range(lo, hi))

    def backward_fetch_range(self, key_from: K | None, key_to: K | None) -> Iterator[KeyValue]:
        lo = None if key_from is None else self._key(key_from)
        hi = None if key_to is None else self._key(key_to)
        return self._windowed(self.native.backward_fetch_range(lo, hi))
