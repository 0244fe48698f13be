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

The store follows Kafka's ``RocksDBVersionedStore`` step for step: a key's
latest value is kept apart (never a tombstone), older versions sit in
time segments chosen by when they stop being valid (their validTo), and
whole segments expire with the history. Which tombstones end up as
explicit records and which only as the end of a record decides what a
later out-of-order put becomes, so strom keeps exactly Kafka's rows. Each
key's latest value and segment rows are one entry of a native key-value
store.

The changelog holds one record per put, timestamped with the version's
timestamp, as Kafka's does; restoring replays them in order. Versioned
stores have no record cache (nor does Kafka).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar, cast

from strom import _core
from strom.errors import StoreError
from strom.serdes import Serde
from strom.state.internals.typed import serialize_key
from strom.state.stores import versioned_segment_interval

__all__ = ["NOT_PUT", "VALID_TO_UNDEFINED", "VersionedKeyValueStore", "VersionedRecord"]

K = TypeVar("K")
V = TypeVar("V")

# Kafka's VersionedKeyValueStore.PUT_RETURN_CODE_VALID_TO_UNDEFINED and
# PUT_RETURN_CODE_NOT_PUT.
VALID_TO_UNDEFINED = -1
NOT_PUT = -(2**63)

# A record version: its (validFrom) timestamp and value (None: a tombstone).
Record = tuple[int, bytes | None]

# The entry of a key. It starts with a marker byte no entry of the former
# format can start with (that one was a list of versions, each an 8-byte
# big-endian timestamp >= 0 first), then whether a latest value follows.
_MARKER = 0xFF
_HEAD = struct.Struct(">BB")
_LATEST = struct.Struct(">qI")  # the latest value's timestamp and length
_ROW = struct.Struct(">qqI")  # a row's segment id, next timestamp, record count
_RECORD = struct.Struct(">qi")  # a record's timestamp, value length (-1: tombstone)


@dataclass(frozen=True)
class VersionedRecord(Generic[V]):
    """A value and the time it is valid from (Kafka's ``VersionedRecord``);
    ``valid_to`` is when the next version took over (None: still valid)."""

    value: V
    timestamp: int
    valid_to: int | None = None


@dataclass
class _Row:
    """A key's records in one segment (Kafka's ``SegmentValue``), oldest
    first: each valid until the next one's timestamp, the last until
    ``next_timestamp``. A *degenerate* row is a lone tombstone whose
    ``next_timestamp`` is its own timestamp (Kafka's, for a tombstone put
    when nothing else of the key is in reach)."""

    next_timestamp: int
    records: list[Record]

    @property
    def min_timestamp(self) -> int:
        return self.records[0][0]

    @property
    def degenerate(self) -> bool:
        return self.next_timestamp == self.records[0][0]

    def valid_to(self, index: int) -> int:
        return self.records[index + 1][0] if index + 1 < len(self.records) else self.next_timestamp

    def find(self, timestamp: int) -> int:
        """The index of the record valid at ``timestamp``, which must be in
        ``[min_timestamp, next_timestamp)``."""
        index = len(self.records) - 1
        while self.records[index][0] > timestamp:
            index -= 1
        return index

    def insert_as_latest(self, valid_from: int, valid_to: int, value: bytes | None) -> None:
        if valid_from < self.next_timestamp:
            # Kafka's repair of a half-done move between segments; kept so
            # that the rows stay Kafka's whatever the order of puts.
            self._truncate(valid_from)
        if self.next_timestamp != valid_from:
            # The gap from this row's end is a tombstone (a degenerate row's
            # lone tombstone already is that record).
            if not self.degenerate:
                self.records.append((self.next_timestamp, None))
        elif self.degenerate:
            self.records.clear()  # the new record starts where the tombstone did
        self.records.append((valid_from, value))
        self.next_timestamp = valid_to

    def insert_as_earliest(self, timestamp: int, value: bytes | None) -> None:
        if self.degenerate:
            self.records[:] = [(timestamp, value)]  # it ends where the tombstone was
        else:
            self.records.insert(0, (timestamp, value))

    def _truncate(self, timestamp: int) -> None:
        """Drops what is at or after ``timestamp``: the row then ends there."""
        if timestamp <= self.min_timestamp:
            self.records[:] = [(timestamp, None)]
        else:
            index = self.find(timestamp)
            del self.records[index + 1 :]
            if self.records[index][0] == timestamp:
                del self.records[index]
        self.next_timestamp = timestamp

    def found_in(self, from_time: int | None, to_time: int | None) -> list[tuple[bytes, int, int]]:
        """Its values valid at some time in ``[from_time, to_time]``, oldest
        first, as (value, valid from, valid to) (Kafka's ``findAll``)."""
        out = []
        for index, (timestamp, value) in enumerate(self.records):
            valid_to = self.valid_to(index)
            if (
                value is not None
                and (to_time is None or timestamp <= to_time)
                and (from_time is None or valid_to > from_time)
            ):
                out.append((value, timestamp, valid_to))
        return out


@dataclass
class _History:
    """One key's state: Kafka's latest-value store entry (timestamp, value)
    and its rows by segment id."""

    latest: tuple[int, bytes] | None = None
    rows: dict[int, _Row] = field(default_factory=dict)

    @property
    def max_timestamp(self) -> int:
        # A row's next timestamp is at least each of its records'.
        stamps = [row.next_timestamp for row in self.rows.values()]
        if self.latest is not None:
            stamps.append(self.latest[0])
        return max(stamps, default=NOT_PUT)


def _encode(history: _History) -> bytes:
    latest = history.latest
    parts = [_HEAD.pack(_MARKER, latest is not None)]
    if latest is not None:
        parts += [_LATEST.pack(latest[0], len(latest[1])), latest[1]]
    for segment_id, row in history.rows.items():
        parts.append(_ROW.pack(segment_id, row.next_timestamp, len(row.records)))
        for timestamp, value in row.records:
            parts.append(_RECORD.pack(timestamp, -1 if value is None else len(value)))
            if value is not None:
                parts.append(value)
    return b"".join(parts)


def _decode_latest(raw: bytes) -> tuple[tuple[int, bytes] | None, int]:
    """A new-format entry's latest value, and where its rows start."""
    at = _HEAD.size
    if not raw[1]:
        return None, at
    timestamp, length = _LATEST.unpack_from(raw, at)
    at += _LATEST.size
    return (timestamp, raw[at : at + length]), at + length


def _decode_rows(raw: bytes, at: int) -> dict[int, _Row]:
    rows = {}
    while at < len(raw):
        segment_id, next_timestamp, count = _ROW.unpack_from(raw, at)
        at += _ROW.size
        records: list[Record] = []
        for _ in range(count):
            timestamp, length = _RECORD.unpack_from(raw, at)
            at += _RECORD.size
            if length < 0:
                records.append((timestamp, None))
            else:
                records.append((timestamp, raw[at : at + length]))
                at += length
        rows[segment_id] = _Row(next_timestamp, records)
    return rows


def _decode_old(raw: bytes) -> list[Record]:
    """An entry of the former format: the key's versions, oldest first."""
    versions: list[Record] = []
    at = 0
    while at < len(raw):
        timestamp, length = _RECORD.unpack_from(raw, at)
        at += _RECORD.size
        if length < 0:
            versions.append((timestamp, None))
        else:
            versions.append((timestamp, raw[at : at + length]))
            at += length
    return versions


def _is_new(raw: bytes) -> bool:
    return bool(raw) and raw[0] == _MARKER


class VersionedBytesStore:
    """The bytes layer of a versioned store (Kafka's ``RocksDBVersionedStore``):
    each key's latest value and segment rows as one entry of a native
    key-value store (persistent or in memory), the store's observed stream
    time, and Kafka's changelog (a record per put)."""

    def __init__(
        self,
        inner: _core.NativeKeyValueStore,
        history_retention_ms: int,
        segment_interval_ms: int | None = None,
    ) -> None:
        self.inner = inner
        self.history_retention_ms = history_retention_ms
        if segment_interval_ms is None:
            segment_interval_ms = versioned_segment_interval(history_retention_ms)
        if segment_interval_ms < 1:
            raise StoreError("a versioned store's segment interval must be at least 1 ms")
        self.segment_interval_ms = segment_interval_ms
        self.observed_stream_time = max(
            (self._history(raw).max_timestamp for _, raw in inner.range(None, None)),
            default=NOT_PUT,
        )
        self._changelog: tuple[list[bytes], list[bytes | None], list[int]] | None = None

    @staticmethod
    def open(
        path: Path | None, history_retention_ms: int, segment_interval_ms: int | None = None
    ) -> tuple[VersionedBytesStore, bytes | None]:
        if path is None:
            inner, meta = _core.NativeKeyValueStore(), None
        else:
            inner, meta = _core.NativeKeyValueStore.open(path)
        return VersionedBytesStore(inner, history_retention_ms, segment_interval_ms), meta

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
        """Replays changelog records (puts, in order) without logging them.
        As Kafka's restore, the batch is put as of the stream time it ends
        at, so nothing goes into segments that will have expired by then."""
        batch = [
            (key, value, int(timestamp))
            for key, value, timestamp in zip(
                records.keys(), records.values(), records.timestamps(), strict=True
            )
            if key is not None
        ]
        end = max((t for _, _, t in batch), default=NOT_PUT)
        end = max(end, self.observed_stream_time)
        for key, value, timestamp in batch:
            self._put(key, value, timestamp, end)

    # --- reads and writes -----------------------------------------------------
    def _history_start(self) -> int:
        return self.observed_stream_time - self.history_retention_ms

    def _segment_id(self, timestamp: int) -> int:
        # Java's long division, which truncates toward zero.
        interval = self.segment_interval_ms
        return timestamp // interval if timestamp >= 0 else -(-timestamp // interval)

    def _live(self, segment_id: int, stream_time: int) -> bool:
        return segment_id >= self._segment_id(stream_time - self.history_retention_ms)

    def _history(self, raw: bytes) -> _History:
        if _is_new(raw):
            latest, at = _decode_latest(raw)
            return _History(latest, _decode_rows(raw, at))
        # The former format: replayed in time order, which leaves what Kafka
        # would hold after those puts in order.
        versions = _decode_old(raw)
        history = _History()
        stream_time = max((t for t, _ in versions), default=NOT_PUT)
        for timestamp, value in versions:
            self._put_into(history, value, timestamp, stream_time)
        return history

    def put(self, key: bytes, value: bytes | None, timestamp: int) -> int:
        valid_to = self._put(key, value, timestamp, None)
        if self._changelog is not None:
            keys, values, stamps = self._changelog
            keys.append(key)
            values.append(value)
            stamps.append(timestamp)
        return valid_to

    def _put(self, key: bytes, value: bytes | None, timestamp: int, until: int | None) -> int:
        """A put (``until``: a restore batch's end, the stream time to put as of)."""
        if timestamp < self._history_start():
            return NOT_PUT
        self.observed_stream_time = max(self.observed_stream_time, timestamp)
        stream_time = self.observed_stream_time if until is None else until
        raw = self.inner.get(key)
        history = _History() if raw is None else self._history(raw)
        # Kafka drops whole segments once they fall out of the history.
        for segment_id in [s for s in history.rows if not self._live(s, stream_time)]:
            del history.rows[segment_id]
        valid_to = self._put_into(history, value, timestamp, stream_time)
        if history.latest is not None or history.rows:
            self.inner.put(key, _encode(history), timestamp)
        elif raw is not None:
            self.inner.put(key, None, timestamp)
        return valid_to

    def _put_into(
        self, history: _History, value: bytes | None, timestamp: int, stream_time: int
    ) -> int:
        """Kafka's doPut on one key's state."""
        # The earliest timestamp seen after this one (None: none yet): the
        # new record's validTo, which picks its segment.
        found: int | None = None
        latest = history.latest
        if latest is not None:
            latest_timestamp, latest_value = latest
            if timestamp >= latest_timestamp:
                if timestamp > latest_timestamp:
                    # The latest value now ends here: it moves to the segment
                    # of its validTo (or is dropped, that one being dead).
                    self._put_as_latest(
                        history, latest_value, latest_timestamp, timestamp, stream_time
                    )
                # A tombstone is not a latest value: it just drops the value.
                history.latest = None if value is None else (timestamp, value)
                return VALID_TO_UNDEFINED
            found = latest_timestamp
        first = self._segment_id(timestamp)
        for segment_id in sorted((s for s in history.rows if s >= first), reverse=True):
            row = history.rows[segment_id]
            if row.next_timestamp <= timestamp:
                break  # nothing here or earlier is affected
            if row.min_timestamp <= timestamp:
                return self._put_to_row(history, segment_id, row, value, timestamp, stream_time)
            if row.min_timestamp < stream_time - self.history_retention_ms:
                # Only during a restore (put as of the batch's end): the
                # record would not change the history kept.
                return NOT_PUT
            found = row.min_timestamp
        return self._finish_put(history, value, timestamp, found, stream_time)

    def _put_as_latest(
        self,
        history: _History,
        value: bytes | None,
        valid_from: int,
        valid_to: int,
        stream_time: int,
    ) -> None:
        """Adds a record that ends at ``valid_to`` after everything in the
        row of ``valid_to``'s segment."""
        segment_id = self._segment_id(valid_to)
        if not self._live(segment_id, stream_time):
            return
        row = history.rows.get(segment_id)
        if row is None:
            history.rows[segment_id] = _Row(valid_to, [(valid_from, value)])
        else:
            row.insert_as_latest(valid_from, valid_to, value)

    def _put_to_row(
        self,
        history: _History,
        segment_id: int,
        row: _Row,
        value: bytes | None,
        timestamp: int,
        stream_time: int,
    ) -> int:
        """Kafka's putToSegment: the record falls inside ``row``."""
        index = row.find(timestamp)
        found_from, found_value = row.records[index]
        valid_to = row.valid_to(index)
        if found_from == timestamp:
            row.records[index] = (timestamp, value)  # replaces a version
        elif self._segment_id(timestamp) != segment_id:
            # The record found now ends at ``timestamp``, in an older
            # segment: it moves there, the new record takes its place.
            self._put_as_latest(history, found_value, found_from, timestamp, stream_time)
            row.records[index] = (timestamp, value)
        else:
            row.records.insert(index + 1, (timestamp, value))
        return valid_to

    def _finish_put(
        self,
        history: _History,
        value: bytes | None,
        timestamp: int,
        found: int | None,
        stream_time: int,
    ) -> int:
        """Kafka's finishPut: the record belongs in no row found so far."""
        if found is None:
            if value is not None:
                history.latest = (timestamp, value)
                return VALID_TO_UNDEFINED
            # A tombstone later than everything: a row of its own segment
            # keeps it, as a degenerate one if the key has no row there.
            segment_id = self._segment_id(timestamp)
            if not self._live(segment_id, stream_time):
                return NOT_PUT
            row = history.rows.get(segment_id)
            if row is None:
                history.rows[segment_id] = _Row(timestamp, [(timestamp, None)])
            elif row.next_timestamp != timestamp:  # equal: that end already is a tombstone
                row.insert_as_latest(row.next_timestamp, timestamp, None)
            return VALID_TO_UNDEFINED
        segment_id = self._segment_id(found)
        if not self._live(segment_id, stream_time):
            return NOT_PUT
        row = history.rows.get(segment_id)
        if row is None:
            history.rows[segment_id] = _Row(found, [(timestamp, value)])
        elif row.next_timestamp <= timestamp:
            # After a gap a degenerate row left (its tombstone ends nothing).
            row.insert_as_latest(timestamp, found, value)
        else:
            row.insert_as_earliest(timestamp, value)
        return found

    def get(self, key: bytes, as_of: int | None = None) -> tuple[bytes, int, int | None] | None:
        """(value, valid from, valid to) of the version valid at ``as_of``
        (None: the latest), or None."""
        raw = self.inner.get(key)
        if raw is None:
            return None
        latest = _decode_latest(raw)[0] if _is_new(raw) else self._history(raw).latest
        if latest is not None and (as_of is None or latest[0] <= as_of):
            # The latest answers even a bound older than the history, as in Kafka.
            return latest[1], latest[0], None
        if as_of is None or as_of < self._history_start():
            return None
        history = self._history(raw)
        first = self._segment_id(as_of)
        for segment_id in sorted((s for s in history.rows if s >= first), reverse=True):
            row = history.rows[segment_id]
            if row.next_timestamp <= as_of:
                return None  # nothing here or earlier was valid then
            if row.min_timestamp <= as_of:
                index = row.find(as_of)
                timestamp, value = row.records[index]
                return None if value is None else (value, timestamp, row.valid_to(index))
        return None

    def versions(
        self, key: bytes, from_time: int | None = None, to_time: int | None = None
    ) -> list[tuple[bytes, int, int | None]]:
        """The values of ``key`` valid at some time in ``[from_time,
        to_time]`` (None: unbounded), oldest first, as (value, valid from,
        valid to) (Kafka's MultiVersionedKeyQuery). As in Kafka, a bound
        older than the history finds only the latest, and rows of segments
        after ``to_time``'s are not read."""
        raw = self.inner.get(key)
        history = _History() if raw is None else self._history(raw)
        out: list[tuple[bytes, int, int | None]] = []
        if to_time is None or to_time >= self._history_start():
            last = None if to_time is None else self._segment_id(to_time)
            for segment_id in sorted(history.rows):
                # Rows of dead segments are gone in Kafka (this key's entry
                # may not have been rewritten since).
                live = self._live(segment_id, self.observed_stream_time)
                if live and (last is None or segment_id <= last):
                    out += history.rows[segment_id].found_in(from_time, to_time)
        latest = history.latest
        if latest is not None and (to_time is None or latest[0] <= to_time):
            out.append((latest[1], latest[0], None))
        return out

    def latest_entries(self) -> list[tuple[bytes, bytes]]:
        """Each key's latest value (keys whose latest is a tombstone left out)."""
        out = []
        for key, raw in self.inner.range(None, None):
            latest = _decode_latest(raw)[0] if _is_new(raw) else self._history(raw).latest
            if latest is not None:
                out.append((key, latest[1]))
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
        return [
            VersionedRecord(self._value(raw), timestamp, valid_to)
            for raw, timestamp, valid_to in self.native.versions(self._key(key), from_time, to_time)
        ]
