"""The Processor API: records, processors, their context and punctuation."""

from __future__ import annotations

import enum
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar, overload

from strom.errors import TaskError

if TYPE_CHECKING:
    from strom.serdes import Serde
    from strom.state.stores import StoreBuilder

_log = logging.getLogger("strom.processor")

K = TypeVar("K")
V = TypeVar("V")

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Record(Generic[K, V]):
    """A record as processors see it (Kafka's ``api.Record``)."""

    key: K
    value: V
    timestamp: int
    headers: Headers | None = None

    def with_key(self, key: Any) -> Record[Any, V]:
        return replace(self, key=key)

    def with_value(self, value: Any) -> Record[K, Any]:
        return replace(self, value=value)

    def with_timestamp(self, timestamp: int) -> Record[K, V]:
        return replace(self, timestamp=timestamp)

    def with_headers(self, headers: Headers | None) -> Record[K, V]:
        return replace(self, headers=headers)


@dataclass(frozen=True, slots=True)
class FixedKeyRecord(Generic[K, V]):
    """A record a ``FixedKeyProcessor`` gets and forwards (Kafka's
    ``FixedKeyRecord``): it has no ``with_key``, so what it forwards, derived
    from the record it got, keeps that key, and no repartition follows."""

    key: K
    value: V
    timestamp: int
    headers: Headers | None = None

    def with_value(self, value: Any) -> FixedKeyRecord[K, Any]:
        return replace(self, value=value)

    def with_timestamp(self, timestamp: int) -> FixedKeyRecord[K, V]:
        return replace(self, timestamp=timestamp)

    def with_headers(self, headers: Headers | None) -> FixedKeyRecord[K, V]:
        return replace(self, headers=headers)


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the record being processed came from."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class RecordContext:
    """What a topic-choosing function learns about the record being written:
    the input record it comes from (topic, partition, offset), its timestamp
    and headers."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    headers: Headers = field(default_factory=list)
    # Reads the input record's key and value bytes (while it is processed).
    raw_input: Callable[[], tuple[bytes | None, bytes | None]] | None = field(
        default=None, repr=False, compare=False
    )

    def source_raw_key(self) -> bytes | None:
        """The input record's key as it was read (Kafka's ``sourceRawKey()``),
        or None when not known (a record a cache wrote out)."""
        return None if self.raw_input is None else self.raw_input()[0]

    def source_raw_value(self) -> bytes | None:
        """The input record's value as it was read (``sourceRawValue()``)."""
        return None if self.raw_input is None else self.raw_input()[1]


def wallclock_timestamp_extractor(_record: Any, _partition_time: int) -> int:
    """A timestamp extractor that ignores the record: processing time
    (Kafka's ``WallclockTimestampExtractor``)."""
    return time.time_ns() // 1_000_000


def _where(record: Any) -> str:
    return f"input record {record.topic}-{record.partition}@{record.offset}"


def fail_on_invalid_timestamp(record: Any, _partition_time: int) -> int:
    """The record's own timestamp; a negative one stops the app with a
    ``TaskError`` (Kafka's ``FailOnInvalidTimestamp``, its default)."""
    if record.timestamp < 0:
        raise TaskError(
            f"{_where(record)} has an invalid (negative) timestamp {record.timestamp}; "
            "use another timestamp extractor to process such records "
            "(log_and_skip_on_invalid_timestamp, use_partition_time_on_invalid_timestamp)"
        )
    return int(record.timestamp)


def log_and_skip_on_invalid_timestamp(record: Any, _partition_time: int) -> int:
    """The record's own timestamp; a record with a negative one is logged,
    dropped and counted in ``dropped-records`` (Kafka's
    ``LogAndSkipOnInvalidTimestamp``; strom's sources do the same without
    an extractor)."""
    if record.timestamp < 0:
        _log.warning("%s will be dropped: its timestamp is negative", _where(record))
    return int(record.timestamp)


def use_partition_time_on_invalid_timestamp(record: Any, partition_time: int) -> int:
    """The record's own timestamp, or for a negative one the partition's
    time (the largest timestamp read from it so far), a ``TaskError`` when
    there is none yet (Kafka's ``UsePartitionTimeOnInvalidTimestamp``)."""
    if record.timestamp >= 0:
        return int(record.timestamp)
    if partition_time < 0:
        raise TaskError(
            f"{_where(record)} has a negative timestamp and no partition time "
            "is known yet to put in its place"
        )
    return partition_time


class PunctuationType(enum.Enum):
    """When a scheduled punctuation fires: as stream time (record timestamps)
    or wall-clock time passes its schedule."""

    STREAM_TIME = "STREAM_TIME"
    WALL_CLOCK_TIME = "WALL_CLOCK_TIME"


class Cancellable(ABC):
    """Returned by ``ProcessorContext.schedule``."""

    @abstractmethod
    def cancel(self) -> None: ...


# What a partitioner returns for a record (Kafka's ``Optional<Set<Integer>>``):
# one partition; a collection of partitions to send a copy to each (empty:
# drop the record); or None, for the default partitioner (murmur2 of the key).
Partitions: TypeAlias = int | Iterable[int] | None


class StreamPartitioner(ABC, Generic[K, V]):
    """Chooses the partitions of a sink's topic for each record (Kafka's
    ``StreamPartitioner``, with KIP-837's multicast): a partitioner that
    needs the name of the topic. Where ``partitioner=`` is taken, a plain
    function ``fn(key, value, num_partitions)`` with the same results works
    too."""

    @abstractmethod
    def partitions(self, topic: str, key: K, value: V, num_partitions: int) -> Partitions:
        """The partition for the record (``0 <= p < num_partitions``), a
        collection of them (a copy goes to each; an empty one drops the
        record, counted in ``dropped-records``), or None for the default
        partitioner."""


# ``partitioner=``: a StreamPartitioner, or fn(key, value, num_partitions).
Partitioner: TypeAlias = StreamPartitioner[Any, Any] | Callable[[Any, Any, int], Partitions]


class ProcessorContext(ABC):
    """What a processor can do besides receiving records."""

    @property
    @abstractmethod
    def application_id(self) -> str: ...

    @property
    @abstractmethod
    def task_id(self) -> str: ...

    @abstractmethod
    def forward(
        self, record: Record[Any, Any] | FixedKeyRecord[Any, Any], child: str | None = None
    ) -> None:
        """Sends a record to every child, or to the child named ``child``
        (from a ``FixedKeyProcessor``, a ``FixedKeyRecord``)."""

    @overload
    def schedule(
        self,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        callback: Callable[[int], None],
        /,
    ) -> Cancellable: ...

    @overload
    def schedule(
        self,
        start_time: int | datetime,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        callback: Callable[[int], None],
        /,
    ) -> Cancellable: ...

    @abstractmethod
    def schedule(self, *args: Any) -> Cancellable:
        """Calls ``callback(timestamp)`` every ``interval`` of stream or
        wall-clock time with that time, as Kafka's ``schedule`` does:
        ``schedule(interval, type, callback)`` fires first at stream time 0
        (so on the first record) or one interval of wall-clock time from
        now; ``schedule(start_time, interval, type, callback)`` (epoch ms or
        a datetime) fires at ``start_time`` and every interval after it, or,
        if that time has passed, first at the next of those times after
        now."""

    @abstractmethod
    def get_state_store(self, name: str) -> Any:
        """A state store connected to this processor."""

    @abstractmethod
    def commit(self) -> None:
        """Requests a commit as soon as possible."""

    @abstractmethod
    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed (None in
        a punctuation)."""

    @abstractmethod
    def current_stream_time_ms(self) -> int: ...

    @abstractmethod
    def current_system_time_ms(self) -> int: ...

    @property
    @abstractmethod
    def key_serde(self) -> Serde[Any] | None:
        """The default key serde (``default.key.serde``; None when unset)."""

    @property
    @abstractmethod
    def value_serde(self) -> Serde[Any] | None:
        """The default value serde (``default.value.serde``; None when unset)."""

    @property
    @abstractmethod
    def state_dir(self) -> Path:
        """This task's own directory under ``state.dir``, created if need be."""

    @abstractmethod
    def app_configs(self) -> dict[str, Any]:
        """The application's configuration, the defaults included."""

    @abstractmethod
    def app_configs_with_prefix(self, prefix: str) -> dict[str, Any]:
        """The configuration keys that start with ``prefix``, the prefix
        taken off (Kafka's ``appConfigsWithPrefix``)."""


class StateRestoreListener:
    """Told as local stores are restored from their changelogs (Kafka's
    ``StateRestoreListener``, given to
    ``KafkaStreams.set_global_state_restore_listener``). ``topic_partition``
    is the changelog's ``(topic, partition)``; offsets are the changelog's.
    Override what you need; the calls run on the stream thread restoring."""

    def on_restore_start(
        self,
        topic_partition: tuple[str, int],
        store_name: str,
        starting_offset: int,
        ending_offset: int,
    ) -> None:
        """Restoring ``[starting_offset, ending_offset)`` begins."""

    def on_batch_restored(
        self,
        topic_partition: tuple[str, int],
        store_name: str,
        batch_end_offset: int,
        num_restored: int,
    ) -> None:
        """A batch of ``num_restored`` records, the last at ``batch_end_offset``, is in."""

    def on_restore_end(
        self, topic_partition: tuple[str, int], store_name: str, total_restored: int
    ) -> None:
        """The store is restored."""


class SuspendReason(enum.Enum):
    """Why a standby stopped updating a store (Kafka's
    ``StandbyUpdateListener.SuspendReason``)."""

    MIGRATED = "MIGRATED"  # placed on another instance (or the app closes)
    PROMOTED = "PROMOTED"  # its task became active here


class StandbyUpdateListener:
    """Told as standby tasks keep their stores up to date from the
    changelogs (Kafka's ``StandbyUpdateListener``, given to
    ``KafkaStreams.set_standby_update_listener``). ``topic_partition`` is
    the changelog's ``(topic, partition)``. Override what you need; the calls
    run on the stream thread."""

    def on_update_start(
        self, topic_partition: tuple[str, int], store_name: str, starting_offset: int
    ) -> None:
        """A standby starts reading the changelog from ``starting_offset``."""

    def on_batch_loaded(
        self,
        topic_partition: tuple[str, int],
        store_name: str,
        task_id: str,
        batch_end_offset: int,
        batch_size: int,
        current_end_offset: int,
    ) -> None:
        """``batch_size`` records, the last at ``batch_end_offset``, are in;
        the changelog ends at ``current_end_offset``."""

    def on_update_suspended(
        self,
        topic_partition: tuple[str, int],
        store_name: str,
        store_offset: int,
        current_end_offset: int,
        reason: SuspendReason,
    ) -> None:
        """The standby stops, its store at ``store_offset`` (the next to read)."""


class Processor(ABC, Generic[K, V]):
    """A node of a topology that receives records one at a time."""

    def init(self, context: ProcessorContext) -> None:
        """Called once before the first record, with the processor's context."""

    @abstractmethod
    def process(self, record: Record[K, V]) -> None: ...

    def close(self) -> None:
        """Called when the task closes."""


class ContextualProcessor(Processor[K, V]):
    """A processor that keeps the context it was initialised with (Kafka's
    ``ContextualProcessor``): ``self.context()``. A subclass that overrides
    ``init`` calls ``super().init(context)``."""

    _context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context

    def context(self) -> ProcessorContext:
        if self._context is None:
            raise RuntimeError(f"{type(self).__name__} has no context before init()")
        return self._context


class FixedKeyProcessor(ABC, Generic[K, V]):
    """A processor that cannot change keys (Kafka's ``FixedKeyProcessor``,
    for ``KStream.process_values``): it gets ``FixedKeyRecord``s and
    forwards records derived from them."""

    def init(self, context: ProcessorContext) -> None:
        """Called once before the first record, with the processor's context."""

    @abstractmethod
    def process(self, record: FixedKeyRecord[K, V]) -> None: ...

    def close(self) -> None:
        """Called when the task closes."""


class ConnectedStoreProvider:
    """A processor supplier that declares the stores its processors use
    (Kafka's ``ConnectedStoreProvider``): ``Topology.add_processor``,
    ``KStream.process`` and ``KStream.process_values`` add each store
    builder ``stores()`` returns to the topology and connect it to the
    processor. Suppliers may share a builder (the same one, or an equal
    one): its store is added once and connected to each."""

    def stores(self) -> Iterable[StoreBuilder] | None:
        """The builders of the stores to add and connect (None: none)."""
        return None


class ProcessorSupplier(ConnectedStoreProvider, ABC, Generic[K, V]):
    """Makes a new ``Processor`` for each task (Kafka's
    ``ProcessorSupplier``); calling it calls ``get()``. Any callable that
    returns a processor (a class) is a supplier too; subclass this one to
    declare stores with ``stores()``."""

    @abstractmethod
    def get(self) -> Processor[K, V]: ...

    def __call__(self) -> Processor[K, V]:
        return self.get()


class FixedKeyProcessorSupplier(ConnectedStoreProvider, ABC, Generic[K, V]):
    """``ProcessorSupplier`` for ``KStream.process_values`` (Kafka's
    ``FixedKeyProcessorSupplier``)."""

    @abstractmethod
    def get(self) -> FixedKeyProcessor[K, V]: ...

    def __call__(self) -> FixedKeyProcessor[K, V]:
        return self.get()


class ValueTransformerWithKey(ABC, Generic[K, V]):
    """Computes a table's new value from a key and its value, with state
    stores if it needs them (Kafka's ``ValueTransformerWithKey``, for
    ``KTable.transform_values``). It must not change the key, so its
    context refuses ``forward``; it may read and write stores and schedule
    punctuations."""

    def init(self, context: ProcessorContext) -> None:
        """Called once before the first value, with a context that cannot forward."""

    @abstractmethod
    def transform(self, read_only_key: K, value: V | None) -> Any:
        """The new value for ``value`` (None for a deleted or absent one)."""

    def close(self) -> None:
        """Called when the task closes."""
