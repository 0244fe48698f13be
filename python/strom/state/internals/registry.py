"""The kinds of state store, each written once: how its native bytes store is
opened, the typed layer over it, the record cache in front, its changelog
topic's configs, how its changelog is replayed, and how its contents are
read back. Kafka composes a store from a ``StoreBuilder`` (metered → caching
→ logging → bytes store); here each kind says how to make those layers, and
the engine, the test driver and the Spark replay ask the kind of a store
(``StoreDef.kind``) through :func:`store_kind`.

A new kind (Kafka's versioned key-value store, its timestamped stores with
headers, …) is one :class:`StoreKind` subclass registered in ``KINDS``, plus
its native store and typed classes; ``Stores`` gets its public factory.
Whether values carry timestamps is not a kind: any key-value or window store
may (``StoreDef.timestamped``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from strom import _core
from strom.errors import StoreError
from strom.serdes import Serde, Timestamped
from strom.state.internals.caching import (
    CachingKeyValueStore,
    CachingSessionStore,
    CachingWindowStore,
)
from strom.state.internals.lru import LruBytesStore
from strom.state.key_value import KeyValueStore
from strom.state.session import SessionStore
from strom.state.stores import KEY_VALUE, LRU, SESSION, VERSIONED, WINDOW
from strom.state.versioned import VersionedBytesStore, VersionedKeyValueStore
from strom.state.views import (
    ReadOnlyKeyValueView,
    ReadOnlySessionView,
    ReadOnlyVersionedView,
    ReadOnlyWindowView,
)
from strom.state.window import WindowStore

if TYPE_CHECKING:
    from strom.embedded import EmbeddedLog
    from strom.processor.internals.topology_builder import StoreDef

QueryView = ReadOnlyKeyValueView | ReadOnlyWindowView | ReadOnlySessionView | ReadOnlyVersionedView
NativeStore = (
    _core.NativeKeyValueStore
    | _core.NativeWindowStore
    | _core.NativeSessionStore
    | VersionedBytesStore
    | LruBytesStore
)
Clock = Callable[[], int]
# A store's contents as columns: keys, values, and (windowed stores) the
# windows' starts and ends.
Contents = tuple[list[bytes], list[bytes], list[int] | None, list[int] | None]
# Changelog records as columns: store keys, values, timestamps.
ChangelogColumns = tuple[list[bytes], list[bytes | None], list[int]]

# Changelog records read per call when a changelog is replayed batch by batch.
RESTORE_BATCH = 50_000


class StoreKind(ABC):
    """One kind of store: the layers a ``StoreDef`` of this kind is made of."""

    name: ClassVar[str]
    # Whether entries are per window (keys come with a window's start and end).
    windowed: ClassVar[bool] = False
    # The typed store over the native one (serdes in Python), and the record
    # cache in front of it.
    typed_class: ClassVar[type[Any]]
    caching_class: ClassVar[type[Any]]
    # The read-only view interactive queries get over the local tasks' stores.
    view_class: ClassVar[type[QueryView]]

    @abstractmethod
    def open_native(self, store: StoreDef, path: Path | None) -> tuple[NativeStore, bytes | None]:
        """The native store: in memory (``path`` None) or persistent in a
        directory, with its last commit's metadata (None: no commit yet)."""

    def typed(
        self,
        store: StoreDef,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        native: Any,
        clock: Clock,
    ) -> Any:
        """The typed store over an opened native one; ``clock()`` gives the
        timestamp its writes are logged with."""
        return self.typed_class(store.name, key_serde, value_serde, native=native, clock=clock)

    def caching(
        self, typed: Any, cache: _core.NativeThreadCache, namespace: str, clock: Clock
    ) -> Any:
        """The record cache in front of a typed store."""
        return self.caching_class(typed, cache, namespace, clock)

    def changelog_config(self, store: StoreDef, additional_retention_ms: int) -> dict[str, str]:
        """Kafka's changelog topic configs: compacted, then the store's own
        ``log_config``. ``additional_retention_ms``: how much longer than a
        windowed store its changelog keeps records
        (``windowstore.changelog.additional.retention.ms``)."""
        return {"cleanup.policy": "compact"} | store.log_config

    def restore_from_log(
        self, native: Any, log: EmbeddedLog, topic: str, partition: int, offset: int, end: int
    ) -> int:
        """Replays ``[offset, end)`` of a changelog partition of the embedded
        log without logging it again; returns the records read."""
        restored = 0
        while offset < end:
            records = log.read_batch(topic, partition, offset, RESTORE_BATCH)
            if not len(records):
                break
            self.restore_records(native, records)
            restored += len(records)
            offset = records.next_offset
        return restored

    def restore_records(self, native: Any, records: _core.RecordBatch, remaining: int = 0) -> None:
        """Applies a batch of changelog records as read (a None value
        deletes) natively, without logging them again; ``remaining``: the
        records still to come after these, when known (a persistent
        key-value store sizes its index by it)."""
        native.restore_records(records)

    @abstractmethod
    def contents(self, native: Any) -> Contents:
        """Everything the store holds, in its key order."""

    def changelog_from_contents(
        self, store: StoreDef
    ) -> Callable[[Contents], ChangelogColumns] | None:
        """What makes the store's compacted changelog from its contents
        alone, when they say everything the changelog holds (None: they do
        not, the changelog must be captured as it is written)."""
        return None


class KeyValueKind(StoreKind):
    name = KEY_VALUE
    typed_class = KeyValueStore
    caching_class = CachingKeyValueStore
    view_class = ReadOnlyKeyValueView

    def open_native(self, store: StoreDef, path: Path | None) -> tuple[NativeStore, bytes | None]:
        if path is None:
            return _core.NativeKeyValueStore(), None
        return _core.NativeKeyValueStore.open(path)

    def restore_from_log(
        self, native: Any, log: EmbeddedLog, topic: str, partition: int, offset: int, end: int
    ) -> int:
        # Natively, without a Python object per record.
        restored, _ = native.restore_from_log(log.native, topic, partition, offset, end)
        return int(restored)

    def restore_records(self, native: Any, records: _core.RecordBatch, remaining: int = 0) -> None:
        native.restore_records(records, remaining)

    def contents(self, native: Any) -> Contents:
        entries = native.range(None, None)
        return [k for k, _ in entries], [v for _, v in entries], None, None


class LruKind(StoreKind):
    """Kafka's ``Stores.lruMap``: an in-memory key-value store of at most
    ``max_cache_size`` entries, evicting the least recently used one, whose
    changelog gets a tombstone of each evicted key (see
    :class:`~strom.state.internals.lru.LruBytesStore`). No record cache: its
    builder refuses one. Always in memory, so restored from its changelog."""

    name = LRU
    typed_class = KeyValueStore
    caching_class = KeyValueStore  # unused: caching() leaves it uncached
    view_class = ReadOnlyKeyValueView

    def open_native(self, store: StoreDef, path: Path | None) -> tuple[NativeStore, bytes | None]:
        if store.max_cache_size is None:
            raise StoreError(f"LRU store {store.name!r} has no max_cache_size (Stores.lru_map)")
        return LruBytesStore(store.max_cache_size), None

    def caching(
        self, typed: Any, cache: _core.NativeThreadCache, namespace: str, clock: Clock
    ) -> Any:
        return typed

    def contents(self, native: Any) -> Contents:
        entries = native.range(None, None)
        return [k for k, _ in entries], [v for _, v in entries], None, None


class _WindowedKind(StoreKind):
    windowed = True

    def changelog_config(self, store: StoreDef, additional_retention_ms: int) -> dict[str, str]:
        """Compacted and deleted after the store's retention plus the additional
        retention (a day by default; Kafka's windowed changelogs), then the
        store's own ``log_config``."""
        if store.retention_ms is None:
            return super().changelog_config(store, additional_retention_ms)
        return {
            "cleanup.policy": "compact,delete",
            "retention.ms": str(store.retention_ms + additional_retention_ms),
        } | store.log_config


class WindowKind(_WindowedKind):
    name = WINDOW
    typed_class = WindowStore
    caching_class = CachingWindowStore
    view_class = ReadOnlyWindowView

    def open_native(self, store: StoreDef, path: Path | None) -> tuple[NativeStore, bytes | None]:
        if store.retention_ms is None or store.window_size_ms is None:
            raise StoreError(f"window store {store.name!r} needs a retention and a window size")
        args = (store.retention_ms, store.window_size_ms, None, store.retain_duplicates)
        if path is None:
            return _core.NativeWindowStore(*args), None
        return _core.NativeWindowStore.open(path, *args)

    def contents(self, native: Any) -> Contents:
        keys, starts, ends, values = native.all()
        return keys, values, starts, ends

    def changelog_from_contents(
        self, store: StoreDef
    ) -> Callable[[Contents], ChangelogColumns] | None:
        """A timestamped window store without duplicates: its changelog keys
        are its store keys (seqnum 0) and its records' timestamps the ones
        its values carry (as Kafka's timestamped window store logs them), so
        its compacted changelog is its contents, less the windows retention
        already dropped (which a restore drops as well)."""
        if not store.timestamped or store.retain_duplicates:
            return None
        return _window_changelog


def _window_changelog(contents: Contents) -> ChangelogColumns:
    keys, values, starts, _ends = contents
    assert starts is not None
    return (
        [_core.window_store_key(k, s, 0) for k, s in zip(keys, starts, strict=True)],
        list(values),
        [int.from_bytes(v[:8], "big", signed=True) for v in values],
    )


class SessionKind(_WindowedKind):
    name = SESSION
    typed_class = SessionStore
    caching_class = CachingSessionStore
    view_class = ReadOnlySessionView

    def open_native(self, store: StoreDef, path: Path | None) -> tuple[NativeStore, bytes | None]:
        if store.retention_ms is None:
            raise StoreError(f"session store {store.name!r} needs a retention")
        if path is None:
            return _core.NativeSessionStore(store.retention_ms), None
        return _core.NativeSessionStore.open(path, store.retention_ms)

    def contents(self, native: Any) -> Contents:
        keys, starts, ends, values = native.fetch_range(None, None)
        return keys, values, starts, ends


class VersionedKind(StoreKind):
    """Kafka's versioned key-value store: no record cache; a changelog of
    puts at their versions' timestamps, compacted no sooner than the history
    retention plus a day (Kafka's ``min.compaction.lag.ms`` for it)."""

    name = VERSIONED
    typed_class = VersionedKeyValueStore
    caching_class = VersionedKeyValueStore  # unused: caching() leaves it uncached
    view_class = ReadOnlyVersionedView

    def open_native(self, store: StoreDef, path: Path | None) -> tuple[NativeStore, bytes | None]:
        assert store.retention_ms is not None, "a versioned store has a history retention"
        return VersionedBytesStore.open(path, store.retention_ms, store.segment_interval_ms)

    def caching(
        self, typed: Any, cache: _core.NativeThreadCache, namespace: str, clock: Clock
    ) -> Any:
        return typed

    def changelog_config(self, store: StoreDef, additional_retention_ms: int) -> dict[str, str]:
        lag = (store.retention_ms or 0) + 24 * 60 * 60 * 1000
        return {"cleanup.policy": "compact", "min.compaction.lag.ms": str(lag)} | store.log_config

    def contents(self, native: Any) -> Contents:
        entries = native.latest_entries()
        return [k for k, _ in entries], [v for _, v in entries], None, None


KINDS: dict[str, StoreKind] = {
    kind.name: kind
    for kind in (KeyValueKind(), LruKind(), WindowKind(), SessionKind(), VersionedKind())
}


def store_kind(store: StoreDef) -> StoreKind:
    """The kind of ``store``; a clear error for a kind nothing registered."""
    kind = KINDS.get(store.kind)
    if kind is None:
        raise StoreError(
            f"store {store.name!r} is of unknown kind {store.kind!r} (known: {', '.join(KINDS)})"
        )
    return kind


def typed_value_serde(store: StoreDef, value_serde: Serde[Any]) -> Serde[Any]:
    """Timestamped stores (Kafka's) keep each value with its timestamp."""
    return Timestamped(value_serde) if store.timestamped else value_serde
