"""Stub of the native module ``strom._core`` (checked with ``mypy.stubtest``)."""

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal, final, overload

from confluent_kafka import KafkaError as _KafkaError
from typing_extensions import Self

# PyO3 fills __all__ at runtime; each section below adds its names.
__all__ = ["__version__"]
__version__: str

# --- embedded log (rust/python/src/log.rs) ----------------------------------

__all__ += [
    "ConsumedRecord",
    "NativeConsumer",
    "NativeLog",
    "NativeProducer",
    "RecordBatch",
    "murmur2",
    "partition_for_key",
]

_HeaderList = list[tuple[str, bytes | None]]

@final
class ConsumedRecord:
    """One record as a consumer sees it; immutable, equal when every field is."""

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> Self: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> _HeaderList: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class RecordBatch:
    """Records of one partition, columnar; each column method builds a new list."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    def __len__(self) -> int: ...
    def offsets(self) -> list[int]: ...
    def timestamps(self) -> list[int]: ...
    def keys(self) -> list[bytes | None]: ...
    def values(self) -> list[bytes | None]: ...
    def headers(self) -> list[_HeaderList]: ...
    def has_headers(self) -> bool:
        """Whether any record of the batch has at least one header."""
    def records(self) -> list[ConsumedRecord]: ...

_OffsetTuple = tuple[str, int, int, str]  # (topic, partition, offset, metadata)

# --- Kafka clients (strom-kafka: librdkafka driven from Rust) -----------------
# Errors are raised as confluent_kafka.KafkaException(KafkaError(...)).

__all__ += ["KafkaConsumer", "KafkaProducer"]

_PartitionTuple = tuple[str, int]  # (topic, partition)
_LogLine = tuple[int, str, str]  # (syslog level, facility, message)
# ("assign" | "revoke" | "lost", [(topic, partition)]) or ("error", KafkaError)
_Rebalance = tuple[str, list[_PartitionTuple] | _KafkaError]

@final
class KafkaConsumer:
    def __new__(cls, config: Mapping[str, str]) -> Self: ...
    def read_headers(self, read: bool) -> None:
        """Whether records polled from now on carry their headers."""
    def subscribe(self, topics: Sequence[str]) -> None: ...
    def unsubscribe(self) -> None: ...
    def assign(self, partitions: Sequence[tuple[str, int, int]]) -> None: ...
    def incremental_assign(self, partitions: Sequence[tuple[str, int, int]]) -> None: ...
    def incremental_unassign(self, partitions: Sequence[_PartitionTuple]) -> None: ...
    def unassign(self) -> None: ...
    def pause(self, partitions: Sequence[_PartitionTuple]) -> None:
        """Stops fetching from assigned ``partitions`` until ``resume``."""
    def resume(self, partitions: Sequence[_PartitionTuple]) -> None: ...
    def commit(
        self, offsets: Sequence[tuple[str, int, int, str | None]], wait: bool = True
    ) -> None: ...
    def committed(
        self, partitions: Sequence[_PartitionTuple], timeout: float
    ) -> list[tuple[str, int, int, str, _KafkaError | None]]: ...
    def offsets_for_times(
        self, wanted: Sequence[tuple[str, int, int]], timeout: float
    ) -> list[tuple[str, int, int]]: ...
    def position(self, partitions: Sequence[_PartitionTuple]) -> list[int]: ...
    def get_watermark_offsets(
        self, topic: str, partition: int, *, cached: bool = False, timeout: float = 10.0
    ) -> tuple[int, int]: ...
    def partition_counts(
        self, topic: str | None = None, timeout: float = 10.0
    ) -> dict[str, int]: ...
    def poll(
        self, max_records: int, timeout: float
    ) -> tuple[
        list[RecordBatch],
        list[_PartitionTuple],
        list[tuple[_PartitionTuple | None, _KafkaError]],
        _Rebalance | None,
        list[tuple[str, int, int, _KafkaError | None]],
    ]: ...
    def take_logs(self) -> tuple[list[_LogLine], int]: ...
    def take_errors(self) -> list[_KafkaError]: ...
    def close(self) -> None: ...

@final
class KafkaProducer:
    def __new__(cls, config: Mapping[str, str]) -> Self: ...
    def produce_columns(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int] | None = None,
        partitions: Sequence[int] | None = None,
        partition_count: int = 1,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    ) -> None: ...
    def produce_fused(
        self, topic: str, records: RecordBatch, pipeline: ExprPipeline, partition_count: int
    ) -> tuple[int, int] | None:
        """Runs ``pipeline`` over ``records`` and queues what comes through
        for ``topic``; returns the batch's largest timestamp and the offset
        after its last record, or None (nothing queued) when the batch must
        take the ordinary path."""
    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int = 0,
        headers: Sequence[tuple[str, bytes | None]] = ...,
    ) -> None: ...
    def poll(self, timeout: float) -> None: ...
    def flush(self, timeout: float) -> int: ...
    def mark(self) -> int:
        """Closes the current epoch of sent records and returns it."""
    def reported_through(self) -> int:
        """Epochs below it have every record reported (acknowledged or failed)."""
    def take_written(self) -> list[tuple[str, int, int]]: ...
    def forget_written(self, topic: str, partition: int) -> None: ...
    def take_failures(
        self,
    ) -> list[tuple[str, int, bytes | None, bytes | None, int, _KafkaError, bool, _HeaderList]]:
        """Records the client could not write: topic, partition, key, value,
        timestamp, error, whether it had queued them, headers."""
    def fatal_error(self) -> _KafkaError | None: ...
    def init_transactions(self, timeout: float) -> None: ...
    def begin_transaction(self) -> None: ...
    def send_offsets_to_transaction(
        self,
        offsets: Sequence[tuple[str, int, int, str | None]],
        consumer: KafkaConsumer,
        timeout: float,
    ) -> None: ...
    def commit_transaction(self, timeout: float) -> None: ...
    def abort_transaction(self, timeout: float) -> None: ...
    def take_logs(self) -> tuple[list[_LogLine], int]: ...
    def take_errors(self) -> list[_KafkaError]: ...

@final
class NativeLog:
    def __new__(cls, path: str | os.PathLike[str]) -> Self: ...
    @property
    def path(self) -> str: ...
    def create_topic(
        self, name: str, partitions: int, config: Mapping[str, str] | None
    ) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def topics(self) -> list[str]: ...
    def partitions(self, topic: str) -> int: ...
    def topic_config(self, topic: str) -> dict[str, str]: ...
    def end_offsets(self, topic: str) -> list[int]: ...
    def log_start_offsets(self, topic: str) -> list[int]: ...
    def offsets_for_timestamp(self, topic: str, timestamp: int) -> list[int | None]: ...
    def read(
        self, topic: str, partition: int, offset: int, max_records: int, max_bytes: int = ...
    ) -> RecordBatch: ...
    def flush(self) -> None: ...
    def roll(self, topic: str, partition: int) -> None: ...
    def enforce_retention(self, now_ms: int) -> int: ...
    def compact(self, topic: str, now_ms: int) -> tuple[int, int, int]: ...
    def commit_offsets(self, group_id: str, offsets: Sequence[_OffsetTuple]) -> None: ...
    def committed_offsets(self, group_id: str) -> list[_OffsetTuple]: ...

@final
class NativeProducer:
    def __new__(cls, log: NativeLog) -> Self: ...
    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int | None = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> None: ...
    def produce_columns(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int] | None = None,
        partitions: Sequence[int] | None = None,
        headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
    ) -> None: ...
    def produce_fused(
        self, topic: str, records: RecordBatch, pipeline: ExprPipeline
    ) -> tuple[int, int] | None:
        """Runs ``pipeline`` over ``records`` and buffers what comes through
        for ``topic``; returns the batch's largest timestamp and the offset
        after its last record, or None (nothing buffered) when the batch must
        take the ordinary path."""
    def flush(self) -> None: ...

@final
class NativeConsumer:
    def __new__(
        cls, log: NativeLog, group_id: str, topics: Sequence[str], offset_reset: str = "earliest"
    ) -> Self: ...
    @property
    def group_id(self) -> str: ...
    def assignment(self) -> list[tuple[str, int]]: ...
    def poll_batches(self, max_records: int, timeout: float) -> list[RecordBatch]: ...
    def poll(self, max_records: int, timeout: float) -> list[ConsumedRecord]: ...
    def position(self, topic: str, partition: int) -> int: ...
    def seek(self, topic: str, partition: int, offset: int) -> None: ...
    def commit(self) -> None: ...
    def commit_offsets(self, offsets: Sequence[_OffsetTuple]) -> None: ...
    def committed(self) -> list[_OffsetTuple]: ...

def murmur2(data: bytes) -> int: ...
def partition_for_key(key: bytes, num_partitions: int) -> int: ...

# --- serdes: batch codecs of the built-in formats -----------------------------

__all__ += [
    "all_utf8",
    "decode_bools",
    "decode_doubles",
    "decode_floats",
    "decode_ints",
    "decode_longs",
    "decode_shorts",
    "decode_strings",
    "encode_bools",
    "encode_doubles",
    "encode_floats",
    "encode_ints",
    "encode_longs",
    "encode_shorts",
    "encode_strings",
]

def all_utf8(values: list[bytes | None]) -> bool:
    """Whether every value is UTF-8 (None is), without making the strings."""

def encode_strings(values: list[str | None]) -> list[bytes | None]: ...
def decode_strings(values: list[bytes | None]) -> list[str | None]: ...
def encode_longs(values: list[int | None]) -> list[bytes | None]: ...
def decode_longs(values: list[bytes | None]) -> list[int | None]: ...
def encode_ints(values: list[int | None]) -> list[bytes | None]: ...
def decode_ints(values: list[bytes | None]) -> list[int | None]: ...
def encode_doubles(values: list[float | None]) -> list[bytes | None]: ...
def decode_doubles(values: list[bytes | None]) -> list[float | None]: ...
def encode_shorts(values: list[int | None]) -> list[bytes | None]: ...
def decode_shorts(values: list[bytes | None]) -> list[int | None]: ...
def encode_floats(values: list[float | None]) -> list[bytes | None]: ...
def decode_floats(values: list[bytes | None]) -> list[float | None]: ...
def encode_bools(values: list[bool | None]) -> list[bytes | None]: ...
def decode_bools(values: list[bytes | None]) -> list[bool | None]: ...

# --- native record loops for the DSL's Python nodes ------------------------------

__all__ += [
    "any_none",
    "flat_map_select_strings",
    "flat_map_values",
    "produce_strings",
    "read_has_null",
    "read_utf8",
    "timestamp_range",
]

def read_utf8(records: RecordBatch, keys: bool, values: bool) -> bool:
    """Whether the keys (if asked) and values (if asked) of a batch read are
    all UTF-8 (None is), checked where the batch holds them."""

def read_has_null(records: RecordBatch) -> bool:
    """Whether a key or value of a batch read is null."""

def timestamp_range(records: RecordBatch) -> tuple[int, int] | None:
    """The smallest and largest timestamp of a batch read (None when empty)."""

def any_none(*columns: list[Any]) -> bool:
    """Whether a column holds None, told by identity (no ``==`` per item)."""

def flat_map_values(
    mapper: Any,
    keys: list[Any],
    values: list[Any],
    timestamps: list[int],
    offsets: list[int],
    start: int,
    out: tuple[list[Any], list[Any], list[int], list[int]],
) -> tuple[int, Exception] | None:
    """Appends what ``mapper(values[i])`` yields for each record from
    ``start`` on to ``out`` (keys, values, timestamps, offsets); None when
    all went through, else the first failing record's index and exception
    (what it yielded before stays appended)."""

def produce_strings(
    producer: NativeProducer,
    topic: str,
    keys: list[str | None],
    values: list[str | None],
    timestamps: list[int],
) -> bool:
    """Buffers keys and values as the String serde writes them (UTF-8),
    partitioned by the key's bytes; False, having buffered nothing, if one is
    not a ``str`` with a UTF-8 form (or None)."""

def flat_map_select_strings(
    mapper: Any,
    selector: Any,
    producer: NativeProducer,
    topic: str,
    keys: list[Any],
    values: list[Any],
    timestamps: list[int],
    start: int,
    pending: list[Any] | None = None,
    pending_from: int = 0,
) -> tuple[int, int, int, tuple[str, int, int, list[Any], Any] | None]:
    """``flat_map_values(mapper)``, ``group_by(selector)``'s key selection,
    its null-key filter and a String/String sink for ``topic`` in one pass
    from record ``start`` on (``pending``: record ``start``'s values when
    resuming, done up to ``pending_from``). Returns the values that reached
    the selector, those it selected a key for, those buffered, and None or
    where it stopped: ``(kind, record, value index, values, payload)`` with
    kind ``"map"`` or ``"select"`` (payload: the exception) or
    ``"serialize"`` (payload: the key; it or the value is not a ``str``
    with a UTF-8 form)."""

# --- state stores ---------------------------------------------------------------

__all__ += [
    "NativeKeyValueStore",
    "pack_changes",
    "split_stamped",
    "stamp_values",
    "unpack_changes",
]

# A changelog's records as columns: store keys, values (None: a tombstone), timestamps.
_ChangelogColumns = tuple[list[bytes], list[bytes | None], list[int]]
# What a record cache flushed (already written to the store and its changelog):
# keys, new values, old values (None: absent), timestamps, in emission order.
_FlushedColumns = tuple[list[bytes], list[bytes | None], list[bytes | None], list[int]]

@final
class NativeKeyValueStore:
    """An ordered bytes-to-bytes store (serialized-key order), in memory or
    persistent (log-structured, in one directory). Once ``enable_changelog``
    is called every write (not restores) is also kept for the changelog,
    stamped with the write's timestamp, until ``take_changelog``."""

    def __new__(cls) -> Self: ...
    @staticmethod
    def open(path: str | os.PathLike[str]) -> tuple[NativeKeyValueStore, bytes | None]: ...
    @staticmethod
    def destroy(path: str | os.PathLike[str]) -> None: ...
    @property
    def persistent(self) -> bool: ...
    def enable_changelog(self) -> None: ...
    @property
    def logged(self) -> bool: ...
    def take_changelog(self) -> _ChangelogColumns:
        """The changelog records written since the last call, in write order."""
    def get(self, key: bytes) -> bytes | None: ...
    def get_cached(self, key: bytes, cache: NativeThreadCache, cache_id: int) -> bytes | None:
        """The value through the named cache (a hit counts as a use; a miss
        reads the store and leaves the cache as it was)."""
    def put_cached(
        self,
        key: bytes,
        value: bytes | None,
        timestamp: int,
        cache: NativeThreadCache,
        cache_id: int,
    ) -> _FlushedColumns:
        """A dirty put into the named cache; returns what it evicted."""
    def put_if_absent_cached(
        self, key: bytes, value: bytes, timestamp: int, cache: NativeThreadCache, cache_id: int
    ) -> tuple[bytes | None, _FlushedColumns]: ...
    def delete_cached(
        self, key: bytes, timestamp: int, cache: NativeThreadCache, cache_id: int
    ) -> tuple[bytes | None, _FlushedColumns]: ...
    def range_cached(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        cache: NativeThreadCache,
        cache_id: int,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """``range`` with the named cache's entries over the store's."""
    def flush_cached(self, cache: NativeThreadCache, cache_id: int) -> _FlushedColumns:
        """Writes the named cache's dirty entries through (deletes of absent
        keys dropped) and returns them."""
    def get_all(self, keys: list[bytes]) -> list[bytes | None]:
        """The values of ``keys`` (None where absent), in order; one native
        call that releases the GIL for the lookups."""
    def get_all_cached(
        self, keys: list[bytes], cache: NativeThreadCache, cache_id: int
    ) -> list[bytes | None]:
        """``get_all`` as seen through the named cache ``cache_id`` (a cached
        delete reads None); the cache is peeked, no use is counted."""
    def upsert(
        self,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: list[int],
        cache: NativeThreadCache | None = None,
        cache_id: int = 0,
        want_old: bool = True,
    ) -> tuple[list[bytes | None], _FlushedColumns]:
        """Writes the records one after the other (None deletes), through
        the named cache when given; returns each record's old value (empty
        unless ``want_old``) and what the cache's evictions flushed."""
    def table_count(
        self,
        keys: list[bytes],
        timestamps: list[int],
        has_new: list[bool],
        has_old: list[bool],
        cache: NativeThreadCache | None = None,
        cache_id: int = 0,
    ) -> tuple[list[int | None], list[int | None], list[int], _FlushedColumns]:
        """``KGroupedTable.count()`` over a timestamped store, through the
        named cache when given: (old counts, new counts, result timestamps,
        what evictions flushed)."""
    def count_timestamped_cached(
        self, keys: list[bytes], timestamps: list[int], cache: NativeThreadCache, cache_id: int
    ) -> _FlushedColumns:
        """``count_timestamped`` through the named cache, as puts one by one;
        returns what evictions flushed."""
    def count_read_cached(
        self, records: RecordBatch, cache: NativeThreadCache, cache_id: int
    ) -> _FlushedColumns:
        """``count_timestamped_cached`` of a batch read's keys (none null)
        and timestamps, read where the batch holds them."""
    def put(self, key: bytes, value: bytes | None, timestamp: int = 0) -> None: ...
    def put_if_absent(self, key: bytes, value: bytes, timestamp: int = 0) -> bytes | None: ...
    def delete(self, key: bytes, timestamp: int = 0) -> bytes | None:
        """Deletes; a logged store logs the tombstone even for an absent key."""
    def put_all(self, keys: list[bytes], values: list[bytes | None], timestamp: int = 0) -> None:
        """Puts (None: deletes) each pair; the store ends up as if they were
        applied in order. Equal-length lists; releases the GIL for the writes."""
    def restore(self, keys: list[bytes], values: list[bytes | None]) -> int:
        """Applies changelog records without logging them; returns how many."""
    def restore_records(self, records: RecordBatch, remaining: int = 0) -> int:
        """Applies a batch of changelog records as read, natively, without
        logging them; ``remaining``: records still to come after these (a
        persistent store sizes its index by it). Returns how many."""
    def restore_from_log(
        self,
        log: NativeLog,
        topic: str,
        partition: int,
        from_offset: int,
        to_offset: int | None = None,
    ) -> tuple[int, int]:
        """Replays ``topic``-``partition`` of the embedded log from
        ``from_offset`` up to ``to_offset`` (default: the end offset now) into
        the store natively, a None value deleting; returns ``(records_applied,
        next_offset)``. A record without a key raises StoreError."""
    def range(
        self, key_from: bytes | None = None, key_to: bytes | None = None, reverse: bool = False
    ) -> list[tuple[bytes, bytes]]: ...
    def prefix_scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]: ...
    def approximate_num_entries(self) -> int: ...
    def __len__(self) -> int: ...
    def clear(self) -> None: ...
    def commit(self, metadata: bytes) -> None: ...
    def close(self) -> None: ...
    def count(self, keys: list[bytes]) -> tuple[list[int], list[bytes]]: ...
    def count_timestamped(
        self, keys: list[bytes], timestamps: list[int]
    ) -> tuple[list[int], list[int]]: ...

def stamp_values(values: list[bytes | None], timestamps: list[int]) -> list[bytes | None]:
    """Timestamped-store values: 8 big-endian bytes of timestamp, then the
    value's bytes; None stays None."""

def split_stamped(values: list[bytes | None]) -> tuple[list[bytes | None], list[int | None]]:
    """The inverse of ``stamp_values``; a value under 8 bytes raises SerializationError."""

def pack_changes(news: list[bytes | None], olds: list[bytes | None]) -> list[bytes]:
    """Table changes for a repartition topic: a flag byte (bit 0: new, bit 1:
    old present), the new value's 4-byte length, the new bytes, the old bytes."""

def unpack_changes(
    changes: list[bytes | None],
) -> tuple[list[bytes | None], list[bytes | None]] | None:
    """The inverse of ``pack_changes``; None if an item is None or under 5 bytes."""

# --- window and session stores (rust/python/src/store/window.rs, session.rs)

__all__ += [
    "NativeSessionStore",
    "NativeWindowStore",
    "session_store_key",
    "split_session_store_key",
    "split_window_store_key",
    "window_store_key",
]

# (keys, window or session starts, ends, values), one entry per index
_WindowColumns = tuple[list[bytes], list[int], list[int], list[bytes]]

@final
class NativeWindowStore:
    """Kafka's bytes window store over time segments, in memory or persistent
    (one log-structured store per segment directory)."""

    def __new__(
        cls,
        retention_ms: int,
        window_size_ms: int,
        segment_interval_ms: int | None = None,
        retain_duplicates: bool = False,
    ) -> Self: ...
    @staticmethod
    def open(
        path: str | os.PathLike[str],
        retention_ms: int,
        window_size_ms: int,
        segment_interval_ms: int | None = None,
        retain_duplicates: bool = False,
    ) -> tuple[NativeWindowStore, bytes | None]: ...
    @staticmethod
    def destroy(path: str | os.PathLike[str]) -> None: ...
    @property
    def persistent(self) -> bool: ...
    @property
    def retention_ms(self) -> int: ...
    @property
    def window_size_ms(self) -> int: ...
    @property
    def segment_interval_ms(self) -> int: ...
    @property
    def retain_duplicates(self) -> bool: ...
    @property
    def observed_stream_time(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def restore_observed_stream_time(self, timestamp: int) -> None: ...
    def enable_changelog(self) -> None: ...
    @property
    def logged(self) -> bool: ...
    def take_changelog(self) -> _ChangelogColumns:
        """The changelog records (store keys) written since the last call."""
    def put(
        self, key: bytes, value: bytes | None, window_start: int, timestamp: int = 0
    ) -> bytes | None: ...
    def put_all(
        self,
        keys: Sequence[bytes],
        values: Sequence[bytes | None],
        window_starts: Sequence[int],
        timestamps: Sequence[int] | None = None,
    ) -> list[bytes | None]: ...
    def restore(self, store_keys: Sequence[bytes], values: Sequence[bytes | None]) -> int: ...
    def restore_records(self, records: RecordBatch) -> int:
        """``restore`` over a batch of changelog records as read."""
    def fetch_one(self, key: bytes, window_start: int) -> bytes | None: ...
    def fetch(self, key: bytes, time_from: int, time_to: int) -> tuple[list[int], list[bytes]]: ...
    def backward_fetch(
        self, key: bytes, time_from: int, time_to: int
    ) -> tuple[list[int], list[bytes]]: ...
    def fetch_range(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int
    ) -> _WindowColumns: ...
    def backward_fetch_range(
        self, key_from: bytes | None, key_to: bytes | None, time_from: int, time_to: int
    ) -> _WindowColumns: ...
    def fetch_all(self, time_from: int, time_to: int) -> _WindowColumns: ...
    def backward_fetch_all(self, time_from: int, time_to: int) -> _WindowColumns: ...
    def all(self) -> _WindowColumns: ...
    def backward_all(self) -> _WindowColumns: ...
    def approximate_num_entries(self) -> int: ...
    def __len__(self) -> int: ...
    def segment_ids(self) -> list[int]: ...
    def flush(self) -> None: ...
    def commit(self, metadata: bytes) -> None: ...
    def close(self) -> None: ...

@final
class NativeSessionStore:
    """Kafka's bytes session store over time segments (by session end), in
    memory or persistent (one log-structured store per segment directory)."""

    def __new__(cls, retention_ms: int, segment_interval_ms: int | None = None) -> Self: ...
    @staticmethod
    def open(
        path: str | os.PathLike[str], retention_ms: int, segment_interval_ms: int | None = None
    ) -> tuple[NativeSessionStore, bytes | None]: ...
    @staticmethod
    def destroy(path: str | os.PathLike[str]) -> None: ...
    @property
    def persistent(self) -> bool: ...
    @property
    def retention_ms(self) -> int: ...
    @property
    def segment_interval_ms(self) -> int: ...
    @property
    def observed_stream_time(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def restore_observed_stream_time(self, timestamp: int) -> None: ...
    def enable_changelog(self) -> None: ...
    @property
    def logged(self) -> bool: ...
    def take_changelog(self) -> _ChangelogColumns:
        """The changelog records (store keys) written since the last call."""
    def put(
        self, key: bytes, start: int, end: int, value: bytes | None, timestamp: int = 0
    ) -> bytes | None: ...
    def put_all(
        self,
        keys: Sequence[bytes],
        starts: Sequence[int],
        ends: Sequence[int],
        values: Sequence[bytes | None],
        timestamps: Sequence[int] | None = None,
    ) -> list[bytes | None]: ...
    def remove(self, key: bytes, start: int, end: int, timestamp: int = 0) -> bytes: ...
    def restore(self, store_keys: Sequence[bytes], values: Sequence[bytes | None]) -> int: ...
    def restore_records(self, records: RecordBatch) -> int:
        """``restore`` over a batch of changelog records as read."""
    def fetch_session(self, key: bytes, start: int, end: int) -> bytes | None: ...
    def find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> _WindowColumns: ...
    def backward_find_sessions(
        self, key: bytes, earliest_session_end: int, latest_session_start: int
    ) -> _WindowColumns: ...
    def find_sessions_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_session_end: int,
        latest_session_start: int,
    ) -> _WindowColumns: ...
    def backward_find_sessions_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_session_end: int,
        latest_session_start: int,
    ) -> _WindowColumns: ...
    def fetch(self, key: bytes) -> _WindowColumns: ...
    def backward_fetch(self, key: bytes) -> _WindowColumns: ...
    def fetch_range(self, key_from: bytes | None, key_to: bytes | None) -> _WindowColumns: ...
    def backward_fetch_range(
        self, key_from: bytes | None, key_to: bytes | None
    ) -> _WindowColumns: ...
    def approximate_num_entries(self) -> int: ...
    def __len__(self) -> int: ...
    def segment_ids(self) -> list[int]: ...
    def flush(self) -> None: ...
    def commit(self, metadata: bytes) -> None: ...
    def close(self) -> None: ...

def window_store_key(key: bytes, window_start: int, seqnum: int) -> bytes: ...
def split_window_store_key(store_key: bytes) -> tuple[bytes, int, int]: ...
def session_store_key(key: bytes, start: int, end: int) -> bytes: ...
def split_session_store_key(store_key: bytes) -> tuple[bytes, int, int]: ...

# --- record cache (rust/python/src/store/cache.rs) ----------------------------

__all__ += ["NativeThreadCache"]

_DirtyEntries = list[tuple[bytes, bytes | None, int]]

@final
class NativeThreadCache:
    """Kafka's ThreadCache: named caches (one per task and store) sharing one
    byte budget. Entry size: key + value bytes + 45. An unknown or closed
    cache id raises StoreError."""

    def __new__(cls, max_bytes: int) -> Self: ...
    def named(self, namespace: str) -> int:
        """The id of the named cache for ``namespace``, created if not open."""
    def get(self, cache_id: int, key: bytes) -> tuple[bytes | None, int] | None:
        """None: not cached; ``(value, timestamp)``: cached, value None being
        a cached delete. A hit becomes the most recently used entry."""
    def put(
        self, cache_id: int, key: bytes, value: bytes | None, timestamp: int, dirty: bool
    ) -> _DirtyEntries:
        """Caches ``value`` (None: a delete); returns the dirty entries that
        the evictions this put caused flushed, ``(key, value, timestamp)`` in
        emission order (usually none). A clean put over a dirty entry raises
        StoreError."""
    def put_all(
        self,
        cache_id: int,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: list[int],
        suffixes: list[list[int]] = ...,
    ) -> _DirtyEntries:
        """``put`` of dirty entries in order, in one call: key ``i`` is
        ``keys[i]`` followed by each suffix column's ``i``-th value as 8
        big-endian bytes. Returns what the evictions flushed, in order."""
    def put_all_into(
        self,
        cache_id: int,
        keys: list[bytes],
        values: list[bytes | None],
        timestamps: list[int],
        window_starts: list[int],
        store: NativeWindowStore,
    ) -> int:
        """``put_all`` of window updates whose evictions are written into
        ``store`` (split back into key and window start, logged if the store
        is), in order; returns how many were written."""
    def put_results_into(
        self,
        cache_id: int,
        results: NativeWindowedResults,
        keys: list[bytes | None],
        timestamps: list[int],
        store: NativeWindowStore,
    ) -> tuple[int, int | None]:
        """Every update of a time-windowed kernel's ``results`` (one that
        sends store values) put in order as ``put_all_into`` puts them: the
        key and timestamp of its input row, its window start and store value;
        evictions go into ``store``. Returns ``(entries written to the store,
        the largest window start put or None)``."""
    def prefix_scan(self, cache_id: int, prefix: bytes) -> list[tuple[bytes, bytes | None]]:
        """Cached entries whose key starts with ``prefix``, in key order
        (value None: a cached delete); each counts as a use."""
    def flush(self, cache_id: int) -> _DirtyEntries:
        """Every dirty entry in last-update order, marked clean; flushed
        deletes leave the cache."""
    def flush_into(self, cache_id: int, store: NativeWindowStore) -> int:
        """``flush`` written into the window store ``store`` (as
        ``put_all_into``); returns how many entries were written."""
    def close(self, cache_id: int) -> None:
        """Drops the named cache, discarding its dirty entries."""
    def hit_stats(self, cache_id: int) -> tuple[int, int]:
        """``(hits, misses)`` of the named cache's point reads since it opened."""
    def size_bytes(self) -> int: ...
    def __len__(self) -> int: ...

# --- windowed-aggregation kernels (rust/python/src/window/) ------------------

__all__ += [
    "NativeSessionWindowedAggregation",
    "NativeSlidingWindowedAggregation",
    "NativeTimeWindowedAggregation",
    "NativeWindowedResults",
]

# keys: a list of bytes | None, or Arrow Binary buffers (data, int32
# offsets[, validity bitmap]) packed native-endian in bytes
_KeyColumn = list[bytes | None] | tuple[bytes, bytes] | tuple[bytes, bytes, bytes | None]
# a list, or packed native-endian int64 / float64 in bytes (no nulls)
_IntColumn = list[int] | bytes | bytearray
_ValueColumn = list[object] | bytes | bytearray
# (keys, starts, ends, store values or None, timestamps)
_StoreChanges = tuple[list[bytes], list[int], list[int], list[bytes | None], list[int]]
# the same packed: Arrow Binary (data, offsets), int64 columns, values
# (data, offsets, validity bitmap or None)
_PackedChanges = tuple[tuple[bytes, bytes], bytes, bytes, tuple[bytes, bytes, bytes | None], bytes]

@final
class NativeWindowedResults:
    """One batch's results in Kafka's forwarding order; columns on demand,
    as lists or (``packed=True``) native-endian bytes."""

    def __len__(self) -> int: ...
    @property
    def is_float(self) -> bool: ...
    @property
    def stats(self) -> dict[str, int]: ...
    def rows(self, packed: bool = False) -> list[int] | bytes: ...
    @overload
    def keys(self, packed: Literal[False] = False) -> list[bytes] | None:
        """The keys, or None when each result's key is its input row's."""
    @overload
    def keys(self, packed: Literal[True]) -> tuple[bytes, bytes] | None: ...
    def starts(self, packed: bool = False) -> list[int] | bytes: ...
    def ends(self, packed: bool = False) -> list[int] | bytes: ...
    def timestamps(self, packed: bool = False) -> list[int] | bytes: ...
    def values(self, packed: bool = False) -> list[int | float | None] | bytes: ...
    def tombstones(self) -> list[bool] | None: ...
    def old_values(self) -> list[int | float | None] | None: ...
    def store_values(self) -> list[bytes] | None: ...

class _NativeWindowedAggregation:
    def process(
        self,
        keys: _KeyColumn,
        timestamps: _IntColumn,
        values: _ValueColumn | None = None,
        *,
        field: str | None = None,
        wall_clock_ms: int = 0,
    ) -> NativeWindowedResults: ...
    @overload
    def drain_changes(self, packed: Literal[False] = False) -> _StoreChanges: ...
    @overload
    def drain_changes(self, packed: Literal[True]) -> _PackedChanges: ...
    def restore_times(
        self, observed_stream_time: int, last_emit_close_time: int, store_observed_time: int
    ) -> None: ...
    def restore(
        self,
        keys: Sequence[bytes],
        starts: Sequence[int],
        ends: Sequence[int],
        values: Sequence[bytes],
    ) -> None: ...
    @property
    def observed_stream_time(self) -> int: ...
    @property
    def last_emit_close_time(self) -> int: ...
    @property
    def store_observed_time(self) -> int: ...
    @property
    def value_type(self) -> str | None: ...
    @property
    def totals(self) -> dict[str, int]: ...

@final
class NativeTimeWindowedAggregation(_NativeWindowedAggregation):
    """Tumbling and hopping windows (Kafka's KStreamWindowAggregate)."""

    def __new__(
        cls,
        aggregation: str,
        value_type: str | None,
        size_ms: int,
        advance_ms: int,
        grace_ms: int,
        *,
        emit_final: bool = False,
        retention_ms: int | None = None,
        emit_interval_ms: int | None = None,
        send_old_values: bool = False,
        send_store_values: bool = False,
    ) -> Self: ...
    def drain_into(self, store: NativeWindowStore) -> int: ...

@final
class NativeSlidingWindowedAggregation(_NativeWindowedAggregation):
    """Sliding windows (Kafka's KStreamSlidingWindowAggregate)."""

    def __new__(
        cls,
        aggregation: str,
        value_type: str | None,
        time_difference_ms: int,
        grace_ms: int,
        *,
        emit_final: bool = False,
        retention_ms: int | None = None,
        emit_interval_ms: int | None = None,
        send_old_values: bool = False,
        record_cache: NativeThreadCache | None = None,
        record_cache_id: int = 0,
    ) -> Self: ...

@final
class NativeSessionWindowedAggregation(_NativeWindowedAggregation):
    """Session windows (Kafka's KStreamSessionWindowAggregate)."""

    def __new__(
        cls,
        aggregation: str,
        value_type: str | None,
        inactivity_gap_ms: int,
        grace_ms: int,
        *,
        emit_final: bool = False,
        retention_ms: int | None = None,
        emit_interval_ms: int | None = None,
        record_cache: NativeThreadCache | None = None,
        record_cache_id: int = 0,
    ) -> Self: ...

# --- expressions and JSON (rust/python/src/expr.rs) --------------------------
__all__ += ["ExprPipeline", "ExprPlan", "encode_json", "json_errors"]

# (row, "malformed" | "eval", message) of each row an evaluation failed on.
_RowErrors = list[tuple[int, str, str]]

@final
class ExprPlan:
    """A ``strom.expr`` tree compiled once, evaluated over a batch of values:
    raw JSON bytes (``raw=True``, only the fields read are decoded, every
    value validated) or Python objects; detached from the interpreter."""

    def __new__(cls, tree: tuple[Any, ...]) -> Self: ...
    @property
    def fields(self) -> list[list[str]]: ...
    def filter(self, values: list[Any], *, raw: bool) -> tuple[list[int], _RowErrors]: ...
    def to_json(self, values: list[Any], *, raw: bool) -> tuple[list[bytes | None], _RowErrors]: ...
    def to_python(self, values: list[Any], *, raw: bool) -> tuple[list[Any], _RowErrors]: ...

@final
class ExprPipeline:
    """The expression steps between a ``Json`` source and its sink,
    ``("filter" | "filter_not" | "map", plan)`` in order (a map's plan is a
    ``struct``), run over a batch in one call."""

    def __new__(cls, steps: list[tuple[str, ExprPlan]], *, utf8_keys: bool) -> Self: ...

def encode_json(values: list[Any]) -> list[bytes | None]:
    """Each value as Jackson's ``ObjectMapper`` writes it (None stays None)."""

def json_errors(values: list[bytes | None]) -> list[tuple[int, str]]:
    """``(index, message)`` of each value that is not JSON."""

# --- Arrow C data interface for batch functions (rust/python/src/arrow.rs) ---
__all__ += [
    "ArrowArray",
    "arrow_columns",
    "arrow_json_fields",
    "arrow_list_columns",
    "arrow_mask_rows",
]

@final
class ArrowArray:
    """One Arrow array, for ``pyarrow.array(obj)`` (the PyCapsule protocol)."""

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[Any, Any]: ...
    def __len__(self) -> int: ...

def arrow_columns(
    records: RecordBatch, *, key: str | None, value: str | None
) -> list[ArrowArray | None]:
    """``key``, ``value`` (``"utf8"`` | ``"binary"``, None: not built),
    ``timestamp``, ``partition``, ``offset`` of a batch read; ``timestamp``
    and ``offset`` share the batch's memory."""

def arrow_list_columns(
    keys: list[Any],
    values: list[Any],
    timestamps: list[int],
    offsets: list[int],
    partition: int,
) -> list[ArrowArray | None]:
    """The columns of ``arrow_columns`` from a batch's lists (keys and values
    that are not all ``str`` or all ``bytes``: None)."""

def arrow_json_fields(
    values: RecordBatch | list[bytes | None], paths: Sequence[Sequence[str]]
) -> tuple[list[ArrowArray | None], list[tuple[int, str]]]:
    """One typed column per field path (None: needs Python), and the rows
    whose value is not JSON as ``(row, message)``."""

def arrow_mask_rows(mask: Any) -> tuple[int, list[int]]:
    """A boolean Arrow mask's length and the rows it keeps (true)."""

# --- the Spark replay's input batches (rust/python/src/replay.rs) ---
__all__ += ["replay_batch"]

def replay_batch(
    topic: str, partition: int, keys: Any, values: Any, timestamps: Any, offsets: Any
) -> RecordBatch:
    """Records of ``topic``-``partition`` from Arrow arrays (``keys`` and
    ``values`` binary or large binary, ``timestamps`` and ``offsets`` int64,
    equal lengths), as a native batch read."""
