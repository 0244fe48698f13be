"""Reading a whole topic back, as bytes or as typed records."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from strom._core import ConsumedRecord, RecordBatch
from strom.errors import SerializationError

if TYPE_CHECKING:
    from strom._core import NativeLog
    from strom.serdes import Serde

__all__ = ["TypedRecord"]

K = TypeVar("K")
V = TypeVar("V")

# Records per read while iterating a topic.
READ_CHUNK = 10_000
#: Stop a read after about this many bytes (it always returns at least one record).
DEFAULT_READ_MAX_BYTES = 64 << 20


@dataclass(frozen=True, slots=True)
class TypedRecord(Generic[K, V]):
    """A :class:`ConsumedRecord` whose key and value went through serdes
    (a side read without a serde stays ``bytes``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: K | None
    value: V | None
    headers: list[tuple[str, bytes | None]]


def topic_records(
    log: NativeLog,
    topic: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
) -> Iterator[ConsumedRecord] | Iterator[TypedRecord[Any, Any]]:
    """Every partition's records, partition by partition, from its log start
    to its end offset as of this call (records appended later are left out)."""
    starts, ends = log.log_start_offsets(topic), log.end_offsets(topic)
    batches = _batches(log, topic, starts, ends)
    if key_serde is None and value_serde is None:
        return (r for batch, end in batches for r in batch.records() if r.offset < end)
    return _typed(batches, key_serde, value_serde)


def _batches(
    log: NativeLog, topic: str, starts: list[int], ends: list[int]
) -> Iterator[tuple[RecordBatch, int]]:
    for partition, end in enumerate(ends):
        offset = starts[partition]
        while offset < end:
            # Compaction leaves gaps, so a read may run past `end`: each batch
            # comes with it, for the caller to cut there.
            batch = log.read(topic, partition, offset, READ_CHUNK, DEFAULT_READ_MAX_BYTES)
            if not len(batch):
                break
            yield batch, end
            offset = batch.next_offset


def _typed(
    batches: Iterator[tuple[RecordBatch, int]],
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
) -> Iterator[TypedRecord[Any, Any]]:
    for batch, end in batches:
        offsets = batch.offsets()
        keys = _deserialize(key_serde, "key", batch, batch.keys(), offsets)
        values = _deserialize(value_serde, "value", batch, batch.values(), offsets)
        columns = zip(offsets, batch.timestamps(), keys, values, batch.headers(), strict=True)
        for offset, timestamp, key, value, headers in columns:
            if offset < end:
                yield TypedRecord(
                    batch.topic, batch.partition, offset, timestamp, key, value, headers
                )


def _deserialize(
    serde: Serde[Any] | None,
    side: str,
    batch: RecordBatch,
    data: list[bytes | None],
    offsets: list[int],
) -> list[Any]:
    if serde is None:
        return data
    try:
        return serde.deserialize_batch(batch.topic, data)
    except Exception as batch_error:
        # Find the record that failed, to name it.
        for offset, item in zip(offsets, data, strict=True):
            try:
                serde.deserialize(batch.topic, item)
            except Exception as exc:  # noqa: PERF203 - looking for the failing record
                raise SerializationError(
                    f"{serde!r} cannot deserialize the {side} of record "
                    f"{batch.topic}-{batch.partition}@{offset}: {exc}"
                ) from exc
        raise batch_error
