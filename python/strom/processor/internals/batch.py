"""The unit of work that flows between the nodes of a running task."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Batch:
    """Records of one input partition, columnar and in input order.

    Nodes never mutate a batch they receive (a parent may hand the same batch
    to several children); they build new lists instead. ``offsets`` keeps each
    record's input offset through flat-maps so that errors and
    ``record_metadata`` can name the record that caused them.

    ``encoded`` is set while the values are still the bytes that serde
    writes (a native expression step reads and writes JSON bytes itself);
    :meth:`decoded` turns them into objects for the nodes that need them.
    ``raw_keys``: the keys (and values) are still the bytes read, for the
    one node that takes them so (``Node.raw_key_serde``); ``packed_keys``
    then may hold the same keys as Arrow ``Binary`` buffers ``(data,
    offsets)``, which a native kernel reads without a Python object per key
    (a batch built from other columns has none).
    """

    topic: str
    partition: int
    keys: list[Any]
    values: list[Any]
    timestamps: list[int]
    offsets: list[int]
    # For KTable changes: the value each key had before (None when unknown).
    old_values: list[Any] | None = None
    headers: list[Any] | None = field(default=None)
    encoded: Any = None
    raw_keys: bool = False
    # The batch read (``_core.RecordBatch``) these rows are, row for row, and
    # its key and value serdes: batch functions export its columns to Arrow
    # natively. None once rows change (``select``, ``derive``).
    read: tuple[Any, Any, Any] | None = None
    packed_keys: tuple[bytes, bytes] | None = None

    def __len__(self) -> int:
        return len(self.keys)

    def derive(
        self,
        keys: list[Any],
        values: list[Any],
        timestamps: list[int],
        offsets: list[int],
        old_values: list[Any] | None = None,
    ) -> Batch:
        """A batch with the same origin and new columns."""
        return Batch(self.topic, self.partition, keys, values, timestamps, offsets, old_values)

    def decoded(self) -> Batch:
        """The batch with its values as objects (itself if they are)."""
        if self.encoded is None:
            return self
        values = self.encoded.deserialize_batch(self.topic, self.values)
        return Batch(
            self.topic,
            self.partition,
            self.keys,
            values,
            self.timestamps,
            self.offsets,
            self.old_values,
            self.headers,
            raw_keys=self.raw_keys,
            read=self.read,
            packed_keys=self.packed_keys,
        )

    def select(self, indices: list[int]) -> Batch:
        """The records at ``indices`` (a filter's survivors)."""
        if len(indices) == len(self.keys):
            return self
        keys, values, ts, offs = self.keys, self.values, self.timestamps, self.offsets
        return Batch(
            self.topic,
            self.partition,
            [keys[i] for i in indices],
            [values[i] for i in indices],
            [ts[i] for i in indices],
            [offs[i] for i in indices],
            None if self.old_values is None else [self.old_values[i] for i in indices],
            encoded=self.encoded,
            raw_keys=self.raw_keys,
        )
