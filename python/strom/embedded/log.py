"""``EmbeddedLog``: an open embedded log directory."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypeVar, overload

from strom._core import ConsumedRecord, NativeLog, RecordBatch
from strom.embedded._closeable import Closeable
from strom.embedded.consumer import EmbeddedConsumer, OffsetAndMetadata, to_offset_tuples
from strom.embedded.producer import EmbeddedProducer
from strom.embedded.records import DEFAULT_READ_MAX_BYTES, TypedRecord, topic_records
from strom.errors import ConfigError, StromError
from strom.serdes import Serde

__all__ = ["CompactionStats", "EmbeddedLog"]

K = TypeVar("K")
V = TypeVar("V")


class CompactionStats(NamedTuple):
    """What one compaction pass over a topic did."""

    segments_cleaned: int
    records_removed: int
    tombstones_removed: int


def now_ms() -> int:
    """The wall clock in epoch milliseconds, as record timestamps are."""
    return time.time_ns() // 1_000_000


def _config_value(key: str, value: str | int | bool) -> str:
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, (str, int)):
        return str(value)
    raise ConfigError(f"topic config {key!r}: expected str or int, got {type(value).__name__}")


class EmbeddedLog(Closeable):
    """Kafka's log on local disk: topics of partitions of append-only segments.

    Every handle on the same directory in one process shares one open log, so
    a test can produce, run an app and read its output side by side. Another
    *process* opening the directory while it is open here gets
    :class:`~strom.errors.LogInUseError`.

    >>> log = EmbeddedLog("/tmp/strom-doc-log")  # doctest: +SKIP
    >>> log.create_topic("words", partitions=3)  # doctest: +SKIP
    >>> with log.producer() as producer:  # doctest: +SKIP
    ...     producer.produce("words", b"k", b"hello")
    >>> log.read("words", 0, 0, 10)  # doctest: +SKIP

    The log stays open until the last handle (log, producer or consumer) on it
    is closed or garbage-collected; :meth:`close` (or ``with``) releases this one.
    """

    __slots__ = ("_native", "_path")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Opens (creating if needed) the log at ``path``, recovering a torn tail."""
        self._native: NativeLog | None = NativeLog(os.fspath(path))
        self._path = self._native.path

    # --- handle -------------------------------------------------------------------
    @property
    def path(self) -> str:
        """The log directory."""
        return self._path

    @property
    def native(self) -> NativeLog:
        """The native log object (for strom's runtime and replay code)."""
        if self._native is None:
            raise StromError(f"EmbeddedLog({self._path!r}) is closed")
        return self._native

    def close(self) -> None:
        """Releases this handle; the log closes once no handle uses it any more."""
        self._native = None

    def __repr__(self) -> str:
        state = "" if self._native is not None else ", closed"
        return f"EmbeddedLog({self._path!r}{state})"

    # --- topics -------------------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str | int | bool] | None = None,
    ) -> None:
        """Creates a topic.

        ``config`` takes Kafka's topic config keys: ``cleanup.policy``
        (``delete`` | ``compact`` | ``compact,delete``), ``retention.ms``
        (default -1: keep forever), ``retention.bytes``, ``segment.bytes``,
        ``segment.ms``, ``delete.retention.ms``, ``min.compaction.lag.ms``,
        ``index.interval.bytes``. Unknown keys, bad values and an existing topic raise
        :class:`~strom.errors.ConfigError`.
        """
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"topic {name!r}: partitions must be an int >= 1, not {partitions!r}")
        values = None
        if config is not None:
            values = {str(k): _config_value(str(k), v) for k, v in config.items()}
        self.native.create_topic(name, partitions, values)

    def delete_topic(self, name: str) -> None:
        """Deletes a topic, its records and every group's committed offsets
        for it (Kafka's ``deleteTopics``). An unknown topic raises
        :class:`~strom.errors.UnknownTopicError`.
        """
        self.native.delete_topic(name)

    def topics(self) -> list[str]:
        """The names of every topic, sorted."""
        return sorted(self.native.topics())

    def partitions(self, topic: str) -> int:
        """The topic's partition count."""
        return self.native.partitions(topic)

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic's configuration, with Kafka's keys (defaults included)."""
        return self.native.topic_config(topic)

    # --- clients ------------------------------------------------------------------
    @overload
    def producer(
        self, key_serde: None = None, value_serde: None = None
    ) -> EmbeddedProducer[bytes, bytes]: ...
    @overload
    def producer(self, key_serde: Serde[K], value_serde: Serde[V]) -> EmbeddedProducer[K, V]: ...
    @overload
    def producer(
        self, key_serde: Serde[K], value_serde: None = None
    ) -> EmbeddedProducer[K, bytes]: ...
    @overload
    def producer(
        self, key_serde: None = None, *, value_serde: Serde[V]
    ) -> EmbeddedProducer[bytes, V]: ...
    def producer(
        self, key_serde: Serde[Any] | None = None, value_serde: Serde[Any] | None = None
    ) -> EmbeddedProducer[Any, Any]:
        """A new producer on this log.

        Without serdes it takes ``bytes`` keys and values; with them, objects
        that it serializes (as Kafka's producer with serializers), partitioned
        by the serialized key:

        >>> with log.producer(serdes.String(), serdes.Long()) as producer:  # doctest: +SKIP
        ...     producer.produce("counts", "alice", 3)
        """
        return EmbeddedProducer(self.native, key_serde, value_serde)

    def consumer(
        self,
        group_id: str,
        topics: str | Iterable[str],
        *,
        offset_reset: str = "earliest",
    ) -> EmbeddedConsumer:
        """A consumer of group ``group_id`` assigned every partition of ``topics``.

        It starts from the group's committed offsets; a partition without one
        starts at ``offset_reset``: ``"earliest"`` (log start), ``"latest"``
        (log end) or ``"none"`` (raise :class:`~strom.errors.OffsetOutOfRangeError`).
        """
        names = [topics] if isinstance(topics, str) else list(topics)
        return EmbeddedConsumer(self.native, group_id, names, offset_reset)

    # --- reading ------------------------------------------------------------------
    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's end offset: the offset the next record will get."""
        return dict(enumerate(self.native.end_offsets(topic)))

    def log_start_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's first offset still on disk (retention moves it up)."""
        return dict(enumerate(self.native.log_start_offsets(topic)))

    def offsets_for_times(self, topic: str, timestamp: int) -> dict[int, int | None]:
        """Per partition, the offset of its first record whose timestamp is at
        least ``timestamp`` (epoch ms), or None when it has none (Kafka's
        ``offsetsForTimes``)."""
        found = self.native.offsets_for_timestamp(topic, timestamp)
        return dict(enumerate(found))

    @overload
    def records(
        self, topic: str, *, key_serde: None = None, value_serde: None = None
    ) -> Iterator[ConsumedRecord]: ...
    @overload
    def records(
        self, topic: str, *, key_serde: Serde[K], value_serde: Serde[V]
    ) -> Iterator[TypedRecord[K, V]]: ...
    @overload
    def records(
        self, topic: str, *, key_serde: Serde[K], value_serde: None = None
    ) -> Iterator[TypedRecord[K, bytes]]: ...
    @overload
    def records(
        self, topic: str, *, key_serde: None = None, value_serde: Serde[V]
    ) -> Iterator[TypedRecord[bytes, V]]: ...
    def records(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> Iterator[ConsumedRecord] | Iterator[TypedRecord[Any, Any]]:
        """Every record of ``topic``: partition 0 from its log start to its end
        offset, then partition 1, … (each partition in offset order; ends as
        of this call, so records produced meanwhile are left out).

        Without serdes the records are :class:`ConsumedRecord` with ``bytes``
        keys and values; with them, :class:`TypedRecord` with the same fields,
        deserialized (as Kafka's consumer with deserializers). A record a serde
        cannot read raises :class:`~strom.errors.SerializationError` naming it:

        >>> for r in log.records("counts", key_serde=serdes.String(),  # doctest: +SKIP
        ...                      value_serde=serdes.Long()):
        ...     print(r.partition, r.offset, r.key, r.value)
        """
        return topic_records(self.native, topic, key_serde, value_serde)

    def read(
        self,
        topic: str,
        partition: int,
        offset: int = 0,
        max_records: int = 500,
        *,
        max_bytes: int = DEFAULT_READ_MAX_BYTES,
    ) -> list[ConsumedRecord]:
        """Up to ``max_records`` records of one partition from ``offset`` on.

        Reading at the end offset returns ``[]``; an offset below the log start
        or past the end raises :class:`~strom.errors.OffsetOutOfRangeError`.
        Offsets may have gaps (compaction), so continue from the last
        record's offset + 1, or use :meth:`read_batch` and its ``next_offset``.
        """
        return self.read_batch(topic, partition, offset, max_records, max_bytes=max_bytes).records()

    def read_batch(
        self,
        topic: str,
        partition: int,
        offset: int = 0,
        max_records: int = 500,
        *,
        max_bytes: int = DEFAULT_READ_MAX_BYTES,
    ) -> RecordBatch:
        """Like :meth:`read`, but columnar: the fast path for many records.

        The batch holds the bytes natively; ``keys()``, ``values()``,
        ``offsets()``, ``timestamps()``, ``headers()`` and ``records()`` build
        Python lists on demand.
        """
        return self.native.read(topic, partition, offset, max_records, max_bytes)

    # --- durability and maintenance -----------------------------------------------
    def flush(self) -> None:
        """fsyncs every partition with appends not yet on disk."""
        self.native.flush()

    def roll(self, topic: str, partition: int) -> None:
        """Closes the partition's active segment and starts a new one."""
        self.native.roll(topic, partition)

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Deletes closed segments past ``retention.ms`` / ``retention.bytes``.

        Applies to topics whose ``cleanup.policy`` includes ``delete``; ``now_ms``
        defaults to the wall clock. Returns the number of segments deleted.
        """
        return self.native.enforce_retention(_now(now_ms))

    def compact(self, topic: str, now_ms: int | None = None) -> CompactionStats:
        """Compacts the closed segments of a ``compact`` topic.

        Keeps the latest record per key; tombstones (null values) older than
        ``delete.retention.ms`` at ``now_ms`` (default: the wall clock) go too.
        """
        return CompactionStats(*self.native.compact(topic, _now(now_ms)))

    # --- consumer groups ----------------------------------------------------------
    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The group's committed offsets, keyed by ``(topic, partition)``."""
        return {
            (topic, partition): OffsetAndMetadata(offset, metadata)
            for topic, partition, offset, metadata in self.native.committed_offsets(group_id)
        }

    def commit_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata]
    ) -> None:
        """Durably records offsets for a group (merged with its other partitions)."""
        self.native.commit_offsets(group_id, to_offset_tuples(offsets))


def _now(now_ms_: int | None) -> int:
    return now_ms() if now_ms_ is None else now_ms_
