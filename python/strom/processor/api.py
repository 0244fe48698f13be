"""The Processor API: records, processors, their context and punctuation."""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from strom.serdes import Serde

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
    """What a topic-choosing function learns about the record being written."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    headers: Headers = field(default_factory=list)


def wallclock_timestamp_extractor(_record: Any, _partition_time: int) -> int:
    """A timestamp extractor that ignores the record: processing time
    (Kafka's ``WallclockTimestampExtractor``)."""
    return time.time_ns() // 1_000_000


class PunctuationType(enum.Enum):
    """When a scheduled punctuation fires: as stream time (record timestamps)
    or wall-clock time passes its schedule."""

    STREAM_TIME = "STREAM_TIME"
    WALL_CLOCK_TIME = "WALL_CLOCK_TIME"


class Cancellable(ABC):
    """Returned by ``ProcessorContext.schedule``."""

    @abstractmethod
    def cancel(self) -> None: ...


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

    @abstractmethod
    def schedule(
        self,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        callback: Callable[[int], None],
    ) -> Cancellable:
        """Calls ``callback(timestamp)`` every ``interval`` of stream or
        wall-clock time, as Kafka's ``schedule`` does."""

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
