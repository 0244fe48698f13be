"""Versioned key-value stores (Kafka's ``VersionedKeyValueStore``, KIP-889):
every value a key had, each valid from its timestamp until the next one's,
kept for the store's history retention, and read as of a point in time.

- ``put(key, value, timestamp)`` adds a version (None: a tombstone) and
  returns when it stops being valid: the next version's timestamp, or
  ``VALID_TO_UNDEFINED`` when it is the latest. A version older than the
  store's observed stream time (its largest timestamp put) minus the
  history retention is not put (``NOT_PUT``), as in Kafka.
- ``get(key)`` is the latest value; ``get(key, as_of_timestamp)`` the
  version valid then, or None when that is older than the history kept.
- ``delete(key, timestamp)`` puts a tombstone and returns what was valid.

The changelog holds one record per put, timestamped with the version's
timestamp, as Kafka's does; restoring replays them in order. Versioned
stores have no record cache (nor does Kafka).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar, cast

from strom import _core
from strom.errors import StoreError
from strom.serdes import Serde
from strom.state.internals.typed import serialize_key

__all__ = ["NOT_PUT", "VALID_TO_UNDEFINED", "VersionedKeyValueStore", "VersionedRecord"]

K = TypeVar("K")
V = TypeVar("V")

# Kafka's VersionedKeyValueStore.PUT_RETURN_CODE_VALID_TO_UNDEFINED and
# PUT_RETURN_CODE_NOT_PUT.
VALID_TO_UNDEFINED = -1
NOT_PUT = -(2**63)

_ENTRY = struct.Struct(">qi")  # a version's timestamp, its value's length (-1: tombstone)

# One key's versions, oldest first: (timestamp, value bytes or None).
Versions = list[tuple[int, bytes | None]]


@dataclass(frozen=True)
class VersionedRecord(Generic[V]):
    """A value and the time it is valid from (Kafka's ``VersionedRecord``);
    ``valid_to`` is when the next version took over (None: still valid)."""

    value: V
    timestamp: int
    valid_to: int | None = None


def _decode(raw: bytes | None) -> Versions:
    versions: Versions = []
    at = 0
    while raw is not None and at < len(raw):
        timestamp, length = _ENTRY.unpack_from(raw, at)
        at += _ENTRY.size
        if length < 0:
            versions.append((timestamp, None))
        else:
            versions.append((timestamp, raw[at : at + length]))
            at += length
    return versions


def _encode(versions: Versions) -> bytes:
    parts = []
    for timestamp, value in versions:
        parts.append(_ENTRY.pack(timestamp, -1 if value is None else len(value)))
        if value is not None:
            parts.append(value)
    return b"".join(parts)


class VersionedBytesStore:
    """The bytes layer of a versioned store: each key's versions as one entry
    of a native key-value store (persistent or in memory), the store's
    observed stream time, and Kafka's changelog (a record per put)."""

    def __init__(self, inner: _core.NativeKeyValueStore, history_retention_ms: int) -> None:
        self.inner = inner
        self.history_retention_ms = history_retention_ms
        self.observed_stream_time = max(
            (t for _, raw in inner.range(None, None) for t, _ in _decode(raw)),
            default=NOT_PUT,
        )
        self._changelog: tuple[list[bytes], list[bytes | None], list[int]] | None = None

    @staticmethod
    def open(
        path: Path | None, history_retention_ms: int
    ) -> tuple[VersionedBytesStore, bytes | None]:
        if path is None:
            return VersionedBytesStore(_core.NativeKeyValueStore(), history_retention_ms), None
        inner, meta = _core.NativeKeyValueStore.open(path)
        return VersionedBytesStore(inner, history_retention_ms), meta

    # --- the changelog --------------------------------------------------------
    def enable_changelog(self) -> None:
        self._changelog = ([], [], [])

    @property
    def logged(self) -> bool:
        return self._changelog is not None

    def take_changelog(self) -> tuple[list[bytes], list[bytes | None], list[int]]:
        """The puts since the last call, as (keys, values, timestamps)."""
        taken = self._changelog or ([], [], [])
        if self._changelog is not None:
            self._changelog = ([], [], [])
        return taken

    def restore_records(self, records: _core.RecordBatch, remaining: int = 0) -> None:
        """Replays changelog records (puts, in order) without logging them."""
        for key, value, timestamp in zip(
            records.keys(), records.values(), records.timestamps(), strict=True
        ):
            if key is not None:
                self._put(key, value, timestamp)

    # --- reads and writes -----------------------------------------------------
    def _history_start(self) -> int:
        return self.observed_stream_time - self.history_retention_ms

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        valid_to = self._put(key, value, timestamp)
        if self._changelog is not None:
            keys, values, stamps = self._changelog
            keys.append(key)
            values.append(value)
            stamps.append(timestamp)
        return valid_to

    def _put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        if timestamp < self._history_start():
            return NOT_PUT
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        versions = _decode(self.inner.get(key))
        at = len(versions)
        while at > 0 and versions[at - 1][0] > timestamp:
            at -= 1
        # versions[at - 1] is the last version at or before the timestamp.
        if at > 0 and versions[at - 1][0] == timestamp:
            at -= 1
            current, latest = versions[at][1], at == len(versions) - 1
            previous = versions[at - 1] if at > 0 else None
            if value is None and latest and current is not None:
                # Kafka's latest-value store just drops a value a tombstone
                # replaces. What bounded it stays: a tombstone at the same
                # time, or the previous value it moved out (that now ends
                # here). Otherwise nothing is left, and an older put later
                # may be the latest.
                if previous is not None and previous[0] != timestamp and previous[1] is not None:
                    versions[at] = (timestamp, None)
                else:
                    del versions[at]
                self._write(key, versions, timestamp)
                return VALID_TO_UNDEFINED
            if value is not None and latest and current is None:
                # A value on a latest tombstone at its time: Kafka keeps the
                # tombstone (its segment record ends there) beside the value.
                at += 1
                versions.insert(at, (timestamp, value))
            else:
                versions[at] = (timestamp, value)
        else:
            versions.insert(at, (timestamp, value))
        valid_to = versions[at + 1][0] if at + 1 < len(versions) else VALID_TO_UNDEFINED
        # Versions no longer valid anywhere in the history kept are gone.
        start = self._history_start()
        keep = 0
        while keep + 1 < len(versions) and versions[keep + 1][0] <= start:
            keep += 1
        self._write(key, versions[keep:], timestamp)
        return valid_to

    def _write(self, key: bytes, versions: Versions, timestamp: int) -> None:
        start = self._history_start()
        if not versions or (
            len(versions) == 1 and versions[0][1] is None and versions[0][0] <= start
        ):
            self.inner.put(key, None, timestamp)  # nothing, or a tombstone shadowing nothing
        else:
            self.inner.put(key, _encode(versions), timestamp)

    def get(self, key: bytes, as_of: int | None = None) -> tuple[bytes, int, int | None] | None:
        """(value, valid from, valid to) of the version valid at ``as_of``
        (None: the latest), or None."""
        versions = _decode(self.inner.get(key))
        if not versions:
            return None
        timestamp, value = versions[-1]
        if as_of is None or timestamp <= as_of:
            # The latest answers even a bound older than the history, as in Kafka.
            return None if value is None else (value, timestamp, None)
        if as_of < self._history_start():
            return None
        for i in range(len(versions) - 2, -1, -1):
            timestamp, value = versions[i]
            if timestamp <= as_of:
                if value is None:
                    return None
                valid_to = versions[i + 1][0] if i + 1 < len(versions) else None
                return value, timestamp, valid_to
        return None

    def versions(self, key: bytes) -> Versions:
        """Every version of ``key`` kept, oldest first (tombstones included)."""
        return _decode(self.inner.get(key))

    def latest_entries(self) -> list[tuple[bytes, bytes]]:
        """Each key's latest value (keys whose latest is a tombstone left out)."""
        out = []
        for key, raw in self.inner.range(None, None):
            versions = _decode(raw)
            if versions and versions[-1][1] is not None:
                out.append((key, versions[-1][1]))
        return out

    def commit(self, meta: bytes) -> None:
        self.inner.commit(meta)

    def close(self) -> None:
        self.inner.close()


class VersionedKeyValueStore(Generic[K, V]):
    """A versioned key-value store of one task (see the module's docs)."""

    def __init__(
        self,
        name: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        native: VersionedBytesStore,
        clock: Callable[[], int] | None = None,
    ) -> None:
        # ``clock`` is every typed store's; a version's own timestamp is what
        # its changelog record takes, so it goes unused here.
        del clock
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.native = native

    @property
    def history_retention_ms(self) -> int:
        return self.native.history_retention_ms

    def _key(self, key: K) -> bytes:
        return serialize_key(self.name, self.key_serde, key)

    def _value(self, raw: bytes) -> V:
        # Stored bytes are a value (tombstones are not read back as records).
        return cast(V, self.value_serde.deserialize(self.name, raw))

    def put(self, key: K, value: V | None, timestamp: int) -> int:
        """Adds the version of ``key`` valid from ``timestamp`` (None: a
        tombstone); returns when it stops being valid (``VALID_TO_UNDEFINED``:
        it is the latest), or ``NOT_PUT`` when it is older than the history."""
        if not isinstance(timestamp, int) or timestamp < 0:
            raise StoreError(f"store {self.name!r}: a version's timestamp must be >= 0")
        return self.native.put(
            self._key(key), self.value_serde.serialize(self.name, value), timestamp
        )

    def get(self, key: K, as_of_timestamp: int | None = None) -> VersionedRecord[V] | None:
        """The latest value of ``key``, or the one valid at ``as_of_timestamp``
        (None when it is older than the history the store keeps)."""
        found = self.native.get(self._key(key), as_of_timestamp)
        if found is None:
            return None
        raw, timestamp, valid_to = found
        return VersionedRecord(self._value(raw), timestamp, valid_to)

    def delete(self, key: K, timestamp: int) -> VersionedRecord[V] | None:
        """Puts a tombstone at ``timestamp``; returns the version valid then
        (None, with nothing deleted, when ``timestamp`` is older than the
        history)."""
        native = self.native
        expired = timestamp < native.observed_stream_time - native.history_retention_ms
        previous = None if expired else self.get(key, timestamp)
        self.put(key, None, timestamp)  # logged even when not put, as Kafka's
        return previous

    def versions(
        self, key: K, from_time: int | None = None, to_time: int | None = None
    ) -> list[VersionedRecord[V]]:
        """The versions of ``key`` (tombstones left out) valid at some time in
        ``[from_time, to_time]``, oldest first, within the history kept
        (Kafka's MultiVersionedKeyQuery)."""
        start = self.native.observed_stream_time - self.native.history_retention_ms
        versions = self.native.versions(self._key(key))
        out: list[VersionedRecord[V]] = []
        for i, (timestamp, raw) in enumerate(versions):
            valid_to = versions[i + 1][0] if i + 1 < len(versions) else None
            if raw is None or (to_time is not None and timestamp > to_time):
                continue
            if valid_to is not None:
                if from_time is not None and valid_to <= from_time:
                    continue
                # Older versions answer only within the history (the latest always).
                if valid_to <= start or (to_time is not None and to_time < start):
                    continue
            out.append(VersionedRecord(self._value(raw), timestamp, valid_to))
        return out
