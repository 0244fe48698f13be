"""``EmbeddedProducer``: buffered, batched appends to the embedded log."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

from strom import _core
from strom._core import ExprPipeline, NativeLog, NativeProducer, RecordBatch
from strom.embedded._closeable import Closeable
from strom.errors import ConfigError, SerializationError, StromError
from strom.serdes import Serde

__all__ = ["EmbeddedProducer", "Headers", "ProducerRecord"]

K = TypeVar("K")
V = TypeVar("V")

Headers: TypeAlias = Sequence[tuple[str, bytes | None]] | Mapping[str, bytes | None]
"""Kafka headers: ``(key, value)`` pairs (keys may repeat), or a mapping."""

ProducerRecord: TypeAlias = tuple[K | None, V | None] | tuple[K | None, V | None, int]
"""``(key, value)`` or ``(key, value, timestamp_ms)``, as ``produce_batch`` takes them."""


class EmbeddedProducer(Closeable, Generic[K, V]):
    """Appends records to the embedded log, batched per partition.

    Created by :meth:`EmbeddedLog.producer`. Records are buffered and appended
    in batches (about 1 MiB per partition) and by :meth:`flush`, which also
    fsyncs: a record is durable once a ``flush()`` after its ``produce`` has
    returned. Closing the producer (or leaving its ``with`` block) flushes;
    records still buffered when an unclosed producer is garbage-collected are
    dropped, as they were never acknowledged.

    Keys and values are ``bytes`` (or ``None``), unless the producer was
    made with serdes (``log.producer(key_serde=…, value_serde=…)``, like
    Kafka's producer with serializers): then ``produce`` and
    ``produce_batch`` take objects and serialize them with the serde of
    their side (a side without a serde still takes ``bytes``).

    Partitioning is Kafka's default: an explicit ``partition`` wins; otherwise
    a record with a key goes to ``murmur2(serialized key) % partitions`` (the
    same partition Kafka's Java producer picks), and records with a null key are
    spread round-robin over the partitions from a random start (Kafka's
    producer uses sticky batches for those instead; either way no partition
    is favoured).

    Thread-safe; records of one partition are appended in the order they were
    produced.
    """

    __slots__ = ("_key_serde", "_native", "_value_serde")

    def __init__(
        self,
        log: NativeLog,
        key_serde: Serde[K] | None = None,
        value_serde: Serde[V] | None = None,
    ) -> None:
        self._native: NativeProducer | None = NativeProducer(log)
        self._key_serde = key_serde
        self._value_serde = value_serde

    @property
    def native(self) -> NativeProducer:
        """The native producer (for strom's runtime)."""
        if self._native is None:
            raise StromError("the producer is closed")
        return self._native

    def produce(
        self,
        topic: str,
        key: K | None,
        value: V | None,
        *,
        timestamp: int | None = None,
        partition: int | None = None,
        headers: Headers | None = None,
    ) -> None:
        """Buffers one record.

        ``timestamp`` is epoch milliseconds (default: now). An unknown topic or
        partition raises :class:`~strom.errors.UnknownTopicError` here, not at
        flush; a key or value its serde cannot serialize raises
        :class:`~strom.errors.SerializationError`.
        """
        if isinstance(headers, Mapping):
            headers = list(headers.items())
        keys = _serialize(self._key_serde, "key", topic, [key])
        values = _serialize(self._value_serde, "value", topic, [value])
        self.native.produce(topic, keys[0], values[0], timestamp, partition, headers)

    def produce_batch(self, topic: str, records: Iterable[ProducerRecord[K, V]]) -> int:
        """Buffers many records of one topic in one native call; returns how many.

        Each record is a ``(key, value)`` or ``(key, value, timestamp_ms)``
        tuple (key and value as :meth:`produce` takes them); records without a
        timestamp get the current time. Partitions are chosen as in
        :meth:`produce`. The call is all or nothing: a bad record raises before
        any record is buffered.
        """
        batch: list[ProducerRecord[K, V]] = records if isinstance(records, list) else list(records)
        keys = _serialize(self._key_serde, "key", topic, [r[0] for r in batch])
        values = _serialize(self._value_serde, "value", topic, [r[1] for r in batch])
        timestamps: list[int] | None = None
        if not all(len(r) == 2 for r in batch):
            now = time.time_ns() // 1_000_000
            timestamps = []
            for r in batch:
                if len(r) == 3:
                    timestamps.append(r[2])
                elif len(r) == 2:
                    timestamps.append(now)
                else:
                    raise ConfigError(
                        f"produce_batch: a record is (key, value) or (key, value, timestamp), "
                        f"got a tuple of {len(r)}"
                    )
        self.native.produce_columns(topic, keys, values, timestamps)
        return len(batch)

    def produce_columns(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int] | None = None,
        partitions: Sequence[int] | None = None,
        headers: Sequence[list[tuple[str, bytes | None]] | None] | None = None,
    ) -> None:
        """Buffers records given as columns (the runtime's path): equal-length
        sequences of serialized keys and values (``bytes`` whatever the
        producer's serdes) and, optionally, timestamps, partitions and
        headers (per record None or a list of ``(str, bytes | None)`` pairs)."""
        self.native.produce_columns(topic, keys, values, timestamps, partitions, headers)

    def produce_strings(
        self,
        topic: str,
        keys: list[str | None],
        values: list[str | None],
        timestamps: list[int],
    ) -> bool:
        """For strom's runtime: ``produce_columns`` of keys and values the
        String serde would write, serialized natively as they are buffered;
        False, having buffered nothing, if one is not a ``str`` (or None)."""
        return _core.produce_strings(self.native, topic, keys, values, timestamps)

    def produce_fused(
        self, topic: str, records: RecordBatch, pipeline: ExprPipeline
    ) -> tuple[int, int] | None:
        """Buffers for ``topic`` what a task's fused expression steps let
        through of ``records`` (the runtime's path): the batch's largest
        timestamp and the offset after it, or None (nothing buffered) when
        the batch must take the ordinary path."""
        return self.native.produce_fused(topic, records, pipeline)

    def flush(self) -> None:
        """Appends everything buffered and fsyncs the log.

        If an append fails, the other partitions are still appended, the batch
        that failed is dropped and the first error is raised.
        """
        self.native.flush()

    def close(self) -> None:
        """Flushes, then releases the producer. Idempotent."""
        if self._native is not None:
            self._native.flush()
            self._native = None

    def __repr__(self) -> str:
        return "EmbeddedProducer(closed)" if self._native is None else "EmbeddedProducer()"


def _serialize(
    serde: Serde[Any] | None, side: str, topic: str, data: list[Any]
) -> list[bytes | None]:
    """``data`` serialized with ``serde``; without one it is bytes already."""
    if serde is None:
        return data
    try:
        return serde.serialize_batch(topic, data)
    except Exception as exc:
        raise SerializationError(
            f"producing to {topic!r}: cannot serialize the {side}: {exc}"
        ) from exc
