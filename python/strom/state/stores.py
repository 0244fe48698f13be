"""The ``Stores`` factory: store suppliers (which kind, persistent or in memory)
and builders (serdes, caching, logging), as in Kafka Streams."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from strom.errors import TopologyError
from strom.serdes import Serde

__all__ = ["StoreBuilder", "StoreSupplier", "Stores"]

# The kinds of store (``strom.state.internals.registry`` says how each is made).
KEY_VALUE = "key_value"
WINDOW = "window"
SESSION = "session"
VERSIONED = "versioned"
# Kafka's ``Stores.lruMap``: an in-memory key-value store of bounded size.
LRU = "lru"
# The kinds whose stores are key-value stores (get, put, range, ...).
KEY_VALUE_KINDS = frozenset({KEY_VALUE, LRU})
# The builder that takes a supplier of each kind.
_BUILDER_OF = {
    KEY_VALUE: "key_value_store_builder",
    LRU: "key_value_store_builder",
    WINDOW: "window_store_builder",
    SESSION: "session_store_builder",
    VERSIONED: "versioned_key_value_store_builder",
}
Duration = int | timedelta


def epoch_millis(at: int | datetime) -> int:
    """An instant as epoch milliseconds: an int as it is, or a datetime."""
    return int(at.timestamp() * 1000) if isinstance(at, datetime) else int(at)


def to_millis(value: Duration, what: str) -> int:
    """Durations are int milliseconds or timedelta; negative ones are errors."""
    if isinstance(value, timedelta):
        millis = int(value.total_seconds() * 1000)
    elif isinstance(value, int) and not isinstance(value, bool):
        millis = value
    else:
        raise TopologyError(f"{what} must be int milliseconds or a timedelta, got {value!r}")
    if millis < 0:
        raise TopologyError(f"{what} must not be negative, got {millis} ms")
    return millis


def versioned_segment_interval(history_retention_ms: int) -> int:
    """Kafka's default segment interval of a versioned store
    (``RocksDbVersionedKeyValueBytesStoreSupplier``): a fraction of the
    history retention that shrinks as the history grows, with a floor."""
    if history_retention_ms <= 60_000:
        return max(history_retention_ms // 3, 2_000)
    if history_retention_ms <= 300_000:
        return max(history_retention_ms // 5, 20_000)
    if history_retention_ms <= 3_600_000:
        return max(history_retention_ms // 12, 60_000)
    return max(history_retention_ms // 24, 300_000)


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name:
        raise TopologyError(f"a store name must be a non-empty string, got {name!r}")
    return name


@dataclass(frozen=True)
class StoreSupplier:
    """What kind of store to make and where it keeps its data."""

    name: str
    kind: str
    persistent: bool
    retention_ms: int | None = None
    window_size_ms: int | None = None
    retain_duplicates: bool = False
    # An LRU map's bound: the entries it keeps (Kafka's ``maxCacheSize``).
    max_cache_size: int | None = None
    # A versioned store's segment interval when given (None: Kafka's default).
    segment_interval: int | None = None

    @property
    def segment_interval_ms(self) -> int | None:
        """Kafka's segment interval for segmented stores: max(retention / 2, 60 s);
        a versioned store's is the one given or its own default (see
        ``versioned_segment_interval``)."""
        if self.retention_ms is None:
            return None
        if self.kind == VERSIONED:
            if self.segment_interval is not None:
                return self.segment_interval
            return versioned_segment_interval(self.retention_ms)
        return max(self.retention_ms // 2, 60_000)


@dataclass(frozen=True)
class StoreBuilder:
    """A supplier plus serdes, caching and changelog settings. The ``with_*``
    methods return a new builder, so chains read like Kafka's."""

    supplier: StoreSupplier
    key_serde: Serde[Any] | None
    value_serde: Serde[Any] | None
    caching: bool = False
    logging: bool = True
    log_config: dict[str, str] = field(default_factory=dict)
    # Values kept with their timestamps, as ``(value, timestamp)`` pairs
    # (Kafka's timestamped stores: ``Stores.timestamped_*_store_builder``).
    timestamped: bool = False

    @property
    def name(self) -> str:
        return self.supplier.name

    def with_caching_enabled(self) -> StoreBuilder:
        if self.supplier.kind == VERSIONED:
            # As Kafka's VersionedKeyValueStoreBuilder.
            raise TopologyError(f"store {self.name!r}: versioned stores do not support caching")
        if self.supplier.kind == LRU:
            # Kafka caches an LRU map like any key-value store; strom's
            # record cache writes to native stores only.
            raise TopologyError(f"store {self.name!r}: an LRU map has no record cache in strom")
        return replace(self, caching=True)

    def with_caching_disabled(self) -> StoreBuilder:
        return replace(self, caching=False)

    def with_logging_enabled(self, config: dict[str, str] | None = None) -> StoreBuilder:
        """Backs the store with ``<application.id>-<store>-changelog``;
        ``config`` adds topic configs for it."""
        return replace(self, logging=True, log_config=dict(config or {}))

    def with_logging_disabled(self) -> StoreBuilder:
        return replace(self, logging=False, log_config={})


class Stores:
    """Factory of store suppliers and builders (Kafka's ``Stores``)."""

    @staticmethod
    def persistent_key_value_store(name: str) -> StoreSupplier:
        return StoreSupplier(_check_name(name), KEY_VALUE, persistent=True)

    @staticmethod
    def persistent_timestamped_key_value_store(name: str) -> StoreSupplier:
        """Kafka's supplier for a persistent timestamped key-value store. A
        strom store keeps bytes; what makes it timestamped is its builder,
        :meth:`timestamped_key_value_store_builder`, so this is the same
        supplier as :meth:`persistent_key_value_store`."""
        return Stores.persistent_key_value_store(name)

    @staticmethod
    def in_memory_key_value_store(name: str) -> StoreSupplier:
        return StoreSupplier(_check_name(name), KEY_VALUE, persistent=False)

    @staticmethod
    def lru_map(name: str, max_cache_size: int) -> StoreSupplier:
        """An in-memory key-value store that keeps at most ``max_cache_size``
        entries: a put of a new key beyond that evicts the least recently
        used one (a ``get`` or a put counts as a use), and a logged store
        writes a tombstone of each evicted key to its changelog (Kafka's
        ``Stores.lruMap``, ``MemoryNavigableLRUCache``)."""
        if not isinstance(max_cache_size, int) or isinstance(max_cache_size, bool):
            raise TopologyError(f"max_cache_size must be an int, got {max_cache_size!r}")
        if max_cache_size < 0:
            raise TopologyError(f"store {name!r}: max_cache_size cannot be negative")
        return StoreSupplier(
            _check_name(name), LRU, persistent=False, max_cache_size=max_cache_size
        )

    @staticmethod
    def _window(
        name: str,
        retention: Duration,
        window_size: Duration,
        retain_duplicates: bool,
        persistent: bool,
    ) -> StoreSupplier:
        retention_ms = to_millis(retention, "retention")
        size_ms = to_millis(window_size, "window_size")
        if size_ms > retention_ms:
            raise TopologyError(
                f"store {name!r}: the retention ({retention_ms} ms) must be at least "
                f"the window size ({size_ms} ms)"
            )
        return StoreSupplier(
            _check_name(name), WINDOW, persistent, retention_ms, size_ms, retain_duplicates
        )

    @staticmethod
    def persistent_window_store(
        name: str, retention: Duration, window_size: Duration, retain_duplicates: bool = False
    ) -> StoreSupplier:
        return Stores._window(name, retention, window_size, retain_duplicates, persistent=True)

    @staticmethod
    def persistent_timestamped_window_store(
        name: str, retention: Duration, window_size: Duration, retain_duplicates: bool = False
    ) -> StoreSupplier:
        """Kafka's supplier for a persistent timestamped window store: the
        same supplier as :meth:`persistent_window_store`; its builder,
        :meth:`timestamped_window_store_builder`, makes it timestamped."""
        return Stores._window(name, retention, window_size, retain_duplicates, persistent=True)

    @staticmethod
    def in_memory_window_store(
        name: str, retention: Duration, window_size: Duration, retain_duplicates: bool = False
    ) -> StoreSupplier:
        return Stores._window(name, retention, window_size, retain_duplicates, persistent=False)

    @staticmethod
    def persistent_session_store(name: str, retention: Duration) -> StoreSupplier:
        return StoreSupplier(_check_name(name), SESSION, True, to_millis(retention, "retention"))

    @staticmethod
    def in_memory_session_store(name: str, retention: Duration) -> StoreSupplier:
        return StoreSupplier(_check_name(name), SESSION, False, to_millis(retention, "retention"))

    @staticmethod
    def persistent_versioned_key_value_store(
        name: str, history_retention: Duration, segment_interval: Duration | None = None
    ) -> StoreSupplier:
        """A key-value store that keeps every version of each key for
        ``history_retention`` (Kafka's versioned store, KIP-889; see
        ``strom.state.versioned``). Old versions are kept in segments of
        ``segment_interval`` (None: Kafka's default for the history), which
        expire whole, as in Kafka."""
        history_ms = to_millis(history_retention, "history_retention")
        interval_ms = None
        if segment_interval is not None:
            interval_ms = to_millis(segment_interval, "segment_interval")
            if interval_ms < 1:
                raise TopologyError(f"store {name!r}: the segment interval must be at least 1 ms")
        return StoreSupplier(
            _check_name(name), VERSIONED, True, history_ms, segment_interval=interval_ms
        )

    @staticmethod
    def _builder(
        supplier: StoreSupplier,
        kinds: frozenset[str],
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        timestamped: bool = False,
    ) -> StoreBuilder:
        if supplier.kind not in kinds:
            raise TopologyError(
                f"store {supplier.name!r} is a {supplier.kind} store; "
                f"use Stores.{_BUILDER_OF.get(supplier.kind, supplier.kind)}"
            )
        return StoreBuilder(supplier, key_serde, value_serde, timestamped=timestamped)

    @staticmethod
    def key_value_store_builder(
        supplier: StoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreBuilder:
        """A key-value store (persistent, in memory or an LRU map)."""
        return Stores._builder(supplier, KEY_VALUE_KINDS, key_serde, value_serde)

    @staticmethod
    def timestamped_key_value_store_builder(
        supplier: StoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreBuilder:
        """A key-value store of any key-value supplier whose values are
        ``(value, timestamp)`` pairs, as a DSL table's are (Kafka's
        ``TimestampedKeyValueStore``): ``get`` returns a pair or None, and
        putting None, or a pair whose value is None, deletes the key (as
        Kafka's ``ValueAndTimestamp.make(null, ts)`` is null)."""
        return Stores._builder(supplier, KEY_VALUE_KINDS, key_serde, value_serde, timestamped=True)

    @staticmethod
    def versioned_key_value_store_builder(
        supplier: StoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreBuilder:
        return Stores._builder(supplier, frozenset({VERSIONED}), key_serde, value_serde)

    @staticmethod
    def window_store_builder(
        supplier: StoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreBuilder:
        return Stores._builder(supplier, frozenset({WINDOW}), key_serde, value_serde)

    @staticmethod
    def timestamped_window_store_builder(
        supplier: StoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreBuilder:
        """A window store whose values are ``(value, timestamp)`` pairs, as a
        windowed aggregation's are (Kafka's ``TimestampedWindowStore``):
        ``put(key, (value, timestamp), window_start)``; None, or a pair
        whose value is None, deletes the window."""
        return Stores._builder(
            supplier, frozenset({WINDOW}), key_serde, value_serde, timestamped=True
        )

    @staticmethod
    def session_store_builder(
        supplier: StoreSupplier, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreBuilder:
        return Stores._builder(supplier, frozenset({SESSION}), key_serde, value_serde)
