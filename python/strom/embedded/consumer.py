"""``EmbeddedConsumer``: a consumer group member on the embedded log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import NamedTuple

from strom._core import ConsumedRecord, NativeConsumer, NativeLog, RecordBatch
from strom.embedded._closeable import Closeable
from strom.errors import StromError

__all__ = ["EmbeddedConsumer", "OffsetAndMetadata"]


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to read, and free-form metadata."""

    offset: int
    metadata: str = ""


def to_offset_tuples(
    offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
) -> list[tuple[str, int, int, str]]:
    """``{(topic, partition): offset}`` as the native layer takes it."""
    out = []
    for (topic, partition), committed in offsets.items():
        if isinstance(committed, OffsetAndMetadata):
            out.append((topic, partition, committed.offset, committed.metadata))
        else:
            out.append((topic, partition, committed, ""))
    return out


def _seconds(timeout: float | timedelta) -> float:
    return timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)


class EmbeddedConsumer(Closeable):
    """A member of a consumer group, assigned every partition of its topics.

    Created by :meth:`EmbeddedLog.consumer`. Positions start at the group's
    committed offsets (or at ``offset_reset``) and move as records are polled;
    nothing is committed until :meth:`commit` (there is no auto-commit).
    A consumer is meant for one thread at a time, like Kafka's.
    """

    __slots__ = ("_native",)

    def __init__(
        self, log: NativeLog, group_id: str, topics: Sequence[str], offset_reset: str = "earliest"
    ) -> None:
        self._native: NativeConsumer | None = NativeConsumer(log, group_id, topics, offset_reset)

    @property
    def native(self) -> NativeConsumer:
        """The native consumer (for strom's runtime)."""
        if self._native is None:
            raise StromError("the consumer is closed")
        return self._native

    @property
    def group_id(self) -> str:
        return self.native.group_id

    def assignment(self) -> list[tuple[str, int]]:
        """Every ``(topic, partition)`` this consumer reads."""
        return self.native.assignment()

    def poll(
        self, max_records: int = 500, timeout: float | timedelta = 1.0
    ) -> list[ConsumedRecord]:
        """Up to ``max_records`` records across the assigned partitions.

        Waits up to ``timeout`` seconds when there is nothing to read (without
        holding the GIL, so other threads run and can produce meanwhile) and
        returns ``[]`` if nothing came. Partitions are served round-robin
        across calls; records of one partition come in offset order.
        """
        return self.native.poll(max_records, _seconds(timeout))

    def poll_batches(
        self, max_records: int = 500, timeout: float | timedelta = 1.0
    ) -> list[RecordBatch]:
        """Like :meth:`poll`, columnar: one :class:`RecordBatch` per partition with data."""
        return self.native.poll_batches(max_records, _seconds(timeout))

    def position(self, topic: str, partition: int) -> int:
        """The offset the next poll reads from in this partition."""
        return self.native.position(topic, partition)

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Moves the position of one partition; the next poll reads from ``offset``."""
        self.native.seek(topic, partition, offset)

    def commit(
        self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata] | None = None
    ) -> None:
        """Durably commits the group's position.

        Without ``offsets``, commits the current position of every assigned
        partition; with them, exactly those (``{(topic, partition): offset}``,
        an offset being the next one to read, optionally with metadata).
        """
        if offsets is None:
            self.native.commit()
        else:
            self.native.commit_offsets(to_offset_tuples(offsets))

    def committed(self) -> dict[tuple[str, int], OffsetAndMetadata]:
        """The group's committed offsets, keyed by ``(topic, partition)``."""
        return {
            (topic, partition): OffsetAndMetadata(offset, metadata)
            for topic, partition, offset, metadata in self.native.committed()
        }

    def close(self) -> None:
        """Releases the consumer (it does not commit). Idempotent."""
        self._native = None

    def __repr__(self) -> str:
        native = getattr(self, "_native", None)  # None too if __init__ raised
        if native is None:
            return "EmbeddedConsumer(closed)"
        return f"EmbeddedConsumer(group_id={native.group_id!r})"
