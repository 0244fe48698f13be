"""Read-only views of stores for interactive queries and the test driver.

``KafkaStreams.store(name)`` returns the view of the store's kind over every
local active task (Kafka's CompositeReadOnlyKeyValueStore,
CompositeReadOnlyWindowStore and CompositeReadOnlySessionStore): a point
read asks each task's store until one has the key, a scan concatenates the
tasks' scans (each in its own order, as Kafka's composite iterators do).
Timestamped stores (tables, aggregations, the Processor API's timestamped
stores) are seen with plain values, as Kafka's
``QueryableStoreTypes.keyValueStore()`` and ``windowStore()`` show them, or,
in a view made with ``timestamped=True`` (``KafkaStreams.store(name,
timestamped=True)``: Kafka's ``timestampedKeyValueStore()`` and
``timestampedWindowStore()``), with ``(value, timestamp)`` values.

The stores are found again on every call (a rebalance may have moved the
tasks since the view was made); a store that closes under a call, its task
gone, raises :class:`~strom.errors.InvalidStateStoreError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from strom.errors import InvalidStateStoreError, StoreError
from strom.keyvalue import KeyValue
from strom.serdes import Serde, Timestamped
from strom.state.internals.caching import MAX_TIME, MIN_TIME

__all__ = [
    "PlainValues",
    "PlainWindowValues",
    "ReadOnlyKeyValueView",
    "ReadOnlySessionView",
    "ReadOnlyWindowView",
    "plain",
    "plain_window",
]

# Kafka's ConsumerRecord.NO_TIMESTAMP: what a value written through a
# plain-value facade is stamped with.
NO_TIMESTAMP = -1


def _value(value: Any) -> Any:
    """A timestamped store's ``(value, timestamp)`` pair as its value."""
    return None if value is None else value[0]


def _values(entries: Iterator[KeyValue]) -> Iterator[KeyValue]:
    return (KeyValue(kv.key, kv.value[0]) for kv in entries)


def _stamped(value: Any) -> Any:
    """A plain value as a timestamped store takes it (None stays None)."""
    return None if value is None else (value, NO_TIMESTAMP)


class PlainValues:
    """A timestamped key-value store seen with plain values, as Kafka's
    ``getKeyValueStore`` shows a timestamped store (its
    ``KeyValueStoreFacade``): writes store each value with timestamp -1
    (Kafka's ``NO_TIMESTAMP``)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.name = store.name

    def get(self, key: Any) -> Any:
        return _value(self.store.get(key))

    def put(self, key: Any, value: Any) -> None:
        self.store.put(key, _stamped(value))

    def put_if_absent(self, key: Any, value: Any) -> Any:
        return _value(self.store.put_if_absent(key, _stamped(value)))

    def put_all(self, entries: Sequence[tuple[Any, Any]]) -> None:
        self.store.put_all([(k, _stamped(v)) for k, v in entries])

    def delete(self, key: Any) -> Any:
        return _value(self.store.delete(key))

    def all(self) -> Iterator[KeyValue]:
        return _values(self.store.all())

    def reverse_all(self) -> Iterator[KeyValue]:
        return _values(self.store.reverse_all())

    def range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return _values(self.store.range(key_from, key_to))

    def reverse_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return _values(self.store.reverse_range(key_from, key_to))

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None
    ) -> Iterator[KeyValue]:
        return _values(self.store.prefix_scan(prefix, prefix_serde))

    def approximate_num_entries(self) -> int:
        return int(self.store.approximate_num_entries())


def plain(store: Any) -> Any:
    """The store itself, or a plain-value view of a timestamped one."""
    if is_timestamped(store):
        return PlainValues(store)
    return store


class PlainWindowValues:
    """A timestamped window store seen with plain values, as Kafka's
    ``getWindowStore`` shows a timestamped store (its ``WindowStoreFacade``):
    the same reads, each value without its timestamp; ``put`` stores a
    value with timestamp -1 (Kafka's ``NO_TIMESTAMP``)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.name = store.name

    def put(self, key: Any, value: Any, window_start: int) -> None:
        self.store.put(key, _stamped(value), window_start)

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        """``fetch(key, window_start)``: that window's value, or None;
        ``fetch(key, time_from, time_to)``: ``KeyValue(window_start, value)``."""
        if time_to is None:
            return _value(self.store.fetch(key, time_from))
        return _values(self.store.fetch(key, time_from, time_to))

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return _values(self.store.backward_fetch(key, time_from, time_to))

    def fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> Iterator[KeyValue]:
        return _values(self.store.fetch_range(key_from, key_to, time_from, time_to))

    def backward_fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> Iterator[KeyValue]:
        return _values(self.store.backward_fetch_range(key_from, key_to, time_from, time_to))

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return _values(self.store.fetch_all(time_from, time_to))

    def backward_fetch_all(self, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return _values(self.store.backward_fetch_all(time_from, time_to))

    def all(self) -> Iterator[KeyValue]:
        return _values(self.store.all())

    def backward_all(self) -> Iterator[KeyValue]:
        return _values(self.store.backward_all())

    def approximate_num_entries(self) -> int:
        return int(self.store.approximate_num_entries())


def plain_window(store: Any) -> Any:
    """The window store itself, or a plain-value view of a timestamped one."""
    if is_timestamped(store):
        return PlainWindowValues(store)
    return store


def is_timestamped(store: Any) -> bool:
    return isinstance(getattr(store, "value_serde", None), Timestamped)


def plain_value(store: Any, value: Any) -> Any:
    """A value read from ``store``, without its timestamp if it has one."""
    return _value(value) if is_timestamped(store) else value


# What finds the store's instances of the local active tasks now.
StoreProvider = Callable[[], list[Any]]


class _Composite:
    """One store over the local tasks, found again on every call;
    ``timestamped``: reads give a timestamped store's ``(value, timestamp)``
    pairs (key-value and window views) rather than its plain values."""

    def __init__(self, name: str, provider: StoreProvider, *, timestamped: bool = False) -> None:
        self.name = name
        self._provider = provider
        self.timestamped = timestamped

    def _each(self, read: Callable[[Any], Any]) -> list[Any]:
        """``read(store)`` of every task's store, each read done before
        the first result is returned (scans are snapshots)."""
        stores = self._provider()
        try:
            return [read(store) for store in stores]
        except StoreError as exc:
            if isinstance(exc, InvalidStateStoreError):
                raise
            live = self._provider()
            if any(all(s is not store for s in live) for store in stores):
                raise InvalidStateStoreError(
                    f"store {self.name!r} moved while it was queried (a rebalance closed "
                    "its task); query again, where query_metadata_for_key says"
                ) from exc
            raise

    def _chain(self, read: Callable[[Any], Iterator[KeyValue]]) -> Iterator[KeyValue]:
        return itertools.chain.from_iterable(self._each(read))

    def approximate_num_entries(self) -> int:
        """The sum over the local tasks' stores (each an estimate)."""
        return sum(int(n) for n in self._each(lambda s: s.approximate_num_entries()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ReadOnlyKeyValueView(_Composite):
    """A key-value store over the local active tasks (Kafka's
    ``ReadOnlyKeyValueStore``). Bounds are inclusive and None is open.
    Values are plain, or ``(value, timestamp)`` pairs in a ``timestamped``
    view (Kafka's ``ReadOnlyKeyValueStore<K, ValueAndTimestamp<V>>``)."""

    def _reads(self, store: Any) -> Any:
        return store if self.timestamped else plain(store)

    def get(self, key: Any) -> Any:
        """The key's value (a ``(value, timestamp)`` pair in a timestamped
        view), or None."""
        _check_key(self.name, key)
        return self._first(lambda s: self._reads(s).get(key))

    def _first(self, read: Callable[[Any], Any]) -> Any:
        """The first task's answer that is not None (a key is in one task)."""
        for value in self._each(read):
            if value is not None:
                return value
        return None

    def range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return self._chain(lambda s: self._reads(s).range(key_from, key_to))

    def reverse_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return self._chain(lambda s: self._reads(s).reverse_range(key_from, key_to))

    def prefix_scan(
        self, prefix: Any, prefix_serde: Serde[Any] | None = None
    ) -> Iterator[KeyValue]:
        """Entries whose serialized key starts with ``prefix`` serialized by
        ``prefix_serde`` (default: the store's key serde)."""
        return self._chain(lambda s: self._reads(s).prefix_scan(prefix, prefix_serde))

    def all(self) -> Iterator[KeyValue]:
        return self._chain(lambda s: self._reads(s).all())

    def reverse_all(self) -> Iterator[KeyValue]:
        return self._chain(lambda s: self._reads(s).reverse_all())

    def is_timestamped(self) -> bool:
        """Whether the local stores keep each value's timestamp (a DSL
        table's or aggregation's do)."""
        return all(self._each(is_timestamped))

    def get_with_timestamp(self, key: Any) -> tuple[Any, int] | None:
        """A timestamped store's ``(value, timestamp)`` of the key, or None."""
        _check_key(self.name, key)
        found: tuple[Any, int] | None = self._first(lambda s: s.get(key))
        return found

    def range_with_timestamps(
        self, key_from: Any, key_to: Any, *, reverse: bool = False
    ) -> Iterator[KeyValue]:
        """A timestamped store's range, values as ``(value, timestamp)``."""
        if reverse:
            return self._chain(lambda s: s.reverse_range(key_from, key_to))
        return self._chain(lambda s: s.range(key_from, key_to))


class _PlainWindowed(_Composite):
    """Scans of ``KeyValue(Windowed(key, window), value)`` with plain values
    (``(value, timestamp)`` pairs in a timestamped view)."""

    def _plain(self, store: Any) -> bool:
        """Whether reads of ``store`` drop the timestamps its values carry."""
        return not self.timestamped and is_timestamped(store)

    def _windowed(self, read: Callable[[Any], Iterator[KeyValue]]) -> Iterator[KeyValue]:
        def each(store: Any) -> Iterator[KeyValue]:
            found = read(store)
            return _values(found) if self._plain(store) else found

        return self._chain(each)


class ReadOnlyWindowView(_PlainWindowed):
    """A window store over the local active tasks (Kafka's
    ``ReadOnlyWindowStore``). Time bounds are inclusive window starts."""

    def fetch(self, key: Any, time_from: int, time_to: int | None = None) -> Any:
        """``fetch(key, window_start)``: that window's value, or None.
        ``fetch(key, time_from, time_to)``: ``KeyValue(window_start, value)``
        for the key's windows starting in ``[time_from, time_to]``. Values
        are ``(value, timestamp)`` pairs in a timestamped view."""
        _check_key(self.name, key)
        if time_to is None:
            for value in self._each(lambda s: self._one(s, s.fetch(key, time_from))):
                if value is not None:
                    return value
            return None
        return self._windowed(lambda s: s.fetch(key, time_from, time_to))

    def _one(self, store: Any, value: Any) -> Any:
        return _value(value) if self._plain(store) else value

    def backward_fetch(self, key: Any, time_from: int, time_to: int) -> Iterator[KeyValue]:
        _check_key(self.name, key)
        return self._windowed(lambda s: s.backward_fetch(key, time_from, time_to))

    def fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> Iterator[KeyValue]:
        """The windows of the keys in ``[key_from, key_to]`` (None: open)
        starting in ``[time_from, time_to]`` (Kafka's four-argument fetch)."""
        return self._scan(key_from, key_to, time_from, time_to, False)

    def backward_fetch_range(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int
    ) -> Iterator[KeyValue]:
        return self._scan(key_from, key_to, time_from, time_to, True)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return self._scan(None, None, time_from, time_to, False)

    def backward_fetch_all(self, time_from: int, time_to: int) -> Iterator[KeyValue]:
        return self._scan(None, None, time_from, time_to, True)

    def all(self) -> Iterator[KeyValue]:
        return self._scan(None, None, MIN_TIME, MAX_TIME, False)

    def backward_all(self) -> Iterator[KeyValue]:
        return self._scan(None, None, MIN_TIME, MAX_TIME, True)

    def _scan(
        self, key_from: Any, key_to: Any, time_from: int, time_to: int, backward: bool
    ) -> Iterator[KeyValue]:
        def read(store: Any) -> Iterator[KeyValue]:
            merged = getattr(store, "merged_windows", None)  # behind a record cache
            if merged is not None:
                found: Iterator[KeyValue] = merged(key_from, key_to, time_from, time_to, backward)
                return found
            scan = store.backward_fetch_range if backward else store.fetch_range
            return scan(key_from, key_to, time_from, time_to)  # type: ignore[no-any-return]

        return self._windowed(read)


class ReadOnlySessionView(_PlainWindowed):
    """A session store over the local active tasks (Kafka's
    ``ReadOnlySessionStore``): ``KeyValue(Windowed(key, Window(start,
    end)), aggregate)``, both ends inclusive."""

    def fetch(self, key: Any) -> Iterator[KeyValue]:
        """Every session of ``key``."""
        _check_key(self.name, key)
        return self._windowed(lambda s: s.fetch(key))

    def backward_fetch(self, key: Any) -> Iterator[KeyValue]:
        _check_key(self.name, key)
        return self._windowed(lambda s: s.backward_fetch(key))

    def fetch_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        """Every session of the keys in ``[key_from, key_to]`` (None: open)."""
        return self._windowed(lambda s: s.fetch_range(key_from, key_to))

    def backward_fetch_range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return self._windowed(lambda s: s.backward_fetch_range(key_from, key_to))

    def find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[KeyValue]:
        """The sessions of ``key`` ending at or after ``earliest_session_end``
        and starting at or before ``latest_session_start``."""
        _check_key(self.name, key)
        return self._windowed(
            lambda s: s.find_sessions(key, earliest_session_end, latest_session_start)
        )

    def backward_find_sessions(
        self, key: Any, earliest_session_end: int, latest_session_start: int
    ) -> Iterator[KeyValue]:
        _check_key(self.name, key)
        return self._windowed(
            lambda s: s.backward_find_sessions(key, earliest_session_end, latest_session_start)
        )

    def fetch_session(self, key: Any, start: int, end: int) -> Any:
        """The aggregate of exactly the session ``[start, end]`` of ``key``."""
        _check_key(self.name, key)
        for value in self._each(lambda s: plain_value(s, s.fetch_session(key, start, end))):
            if value is not None:
                return value
        return None


def _check_key(store: str, key: Any) -> None:
    if key is None:
        raise StoreError(f"store {store!r}: a query key must not be None")


class ReadOnlyVersionedView(_Composite):
    """A versioned key-value store over the local active tasks (what Kafka's
    IQv2 ``VersionedKeyQuery`` and ``MultiVersionedKeyQuery`` read)."""

    def get(self, key: Any, as_of_timestamp: int | None = None) -> Any:
        """The key's latest ``VersionedRecord`` or the one valid at
        ``as_of_timestamp``, or None."""
        _check_key(self.name, key)
        for found in self._each(lambda s: s.get(key, as_of_timestamp)):
            if found is not None:
                return found
        return None

    def versions(
        self, key: Any, from_time: int | None = None, to_time: int | None = None
    ) -> list[Any]:
        """The key's ``VersionedRecord``s valid in ``[from_time, to_time]``, oldest first."""
        _check_key(self.name, key)
        out: list[Any] = []
        for found in self._each(lambda s: s.versions(key, from_time, to_time)):
            out.extend(found)
        return out
