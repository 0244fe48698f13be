"""What the typed stores share: value deserialization and the base of the
typed window and session stores (serdes, the record clock, commit and close
over a native store). Changelogs are the native stores' own: a logged native
store keeps every write for its changelog (``enable_changelog``) until the
task takes them (``take_changelog``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from strom import _core
from strom.errors import SerializationError, StoreError
from strom.keyvalue import KeyValue
from strom.serdes import Serde, Timestamped
from strom.windowed import TimeWindow, Window, Windowed

if TYPE_CHECKING:
    from typing_extensions import Self  # Python 3.10 has no typing.Self

K = TypeVar("K")
V = TypeVar("V")


def deserialize_values(serde: Serde[Any], name: str, raw: Sequence[bytes | None]) -> list[Any]:
    """``serde.deserialize_batch``, splitting timestamped values natively."""
    if not isinstance(serde, Timestamped):
        return serde.deserialize_batch(name, raw)
    try:
        inner, stamps = _core.split_stamped(list(raw))
    except SerializationError:
        return serde.deserialize_batch(name, raw)  # one by one, naming the bad value
    values = serde.inner.deserialize_batch(name, inner)
    return [None if t is None else (v, t) for v, t in zip(values, stamps, strict=True)]


def serialize_key(store: str, serde: Serde[Any], key: Any) -> bytes:
    """A store key's bytes; a None key, or one its serde makes None, is a StoreError."""
    if key is None:
        raise StoreError(f"store {store!r}: keys must not be None")
    raw = serde.serialize(store, key)
    if raw is None:
        raise StoreError(f"store {store!r}: the key serde turned {key!r} into None")
    return raw


# (keys, starts, ends, values) as the native scans return them
Columns = tuple[list[bytes], list[int], list[int], list[bytes]]


class TypedWindowedStore(Generic[K, V]):
    """What the typed window and session stores share: serdes, the record
    clock (the timestamp a logged write is logged with), commit and close."""

    native: _core.NativeWindowStore | _core.NativeSessionStore
    # The type of the windows scans return (Kafka's TimeWindow, or SessionWindow).
    window_type: type[Window] = TimeWindow

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        native: _core.NativeWindowStore | _core.NativeSessionStore,
        clock: Callable[[], int] | None,
    ) -> None:
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.native = native
        self._clock = clock or (lambda: 0)

    def _key(self, key: K | None) -> bytes:
        return serialize_key(self.name, self.key_serde, key)

    def _keys(self, keys: Sequence[K]) -> list[bytes]:
        if any(k is None for k in keys):
            raise StoreError(f"store {self.name!r}: keys must not be None")
        raw = self.key_serde.serialize_batch(self.name, keys)
        if any(r is None for r in raw):
            raise StoreError(f"store {self.name!r}: the key serde turned a key into None")
        return raw  # type: ignore[return-value]

    def _windowed(self, columns: Columns) -> Iterator[KeyValue]:
        raw_keys, starts, ends, raw_values = columns
        keys = self.key_serde.deserialize_batch(self.name, raw_keys)
        values = self.value_serde.deserialize_batch(self.name, raw_values)
        window = self.window_type
        return (
            KeyValue(Windowed(k, window(s, e)), v)
            for k, s, e, v in zip(keys, starts, ends, values, strict=True)
        )

    @property
    def persistent(self) -> bool:
        return self.native.persistent

    @property
    def logged(self) -> bool:
        """Whether writes go to a changelog."""
        return self.native.logged

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
