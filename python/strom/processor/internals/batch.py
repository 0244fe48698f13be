"""The unit of work that flows between the nodes of a running task."""

from __future__ import annotations

from typing import Any

from strom import _core


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
    one node that takes them so (``Node.raw_key_serde``).

    ``headers``: None while every record's headers are those of the input
    record it came from (found by its offset, see
    ``StreamTask.record_headers``), as in Kafka, whose processors forward
    the current record's context; else each record's own (a ``Processor``
    forwarding records with headers of their own, a suppression buffer
    emitting records it kept).

    A batch of raw rows made with :meth:`of_read` has no lists until one is
    asked for: a native consumer (the cached count) reads the keys and
    timestamps where the read holds them, with no Python object per record.
    """

    __slots__ = (
        "_keys",
        "_offsets",
        "_timestamps",
        "_values",
        "encoded",
        "headers",
        "is_latest",
        "old_values",
        "partition",
        "raw_keys",
        "read",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        keys: list[Any],
        values: list[Any],
        timestamps: list[int],
        offsets: list[int],
        # For KTable changes: the value each key had before (None when unknown).
        old_values: list[Any] | None = None,
        headers: list[Any] | None = None,
        encoded: Any = None,
        raw_keys: bool = False,
        # The batch read (``_core.RecordBatch``) these rows are, row for row,
        # and its key and value serdes: batch functions export its columns to
        # Arrow natively. None once rows change (``select``, ``derive``).
        read: tuple[Any, Any, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self._keys: list[Any] | None = keys
        self._values: list[Any] | None = values
        self._timestamps: list[int] | None = timestamps
        self._offsets: list[int] | None = offsets
        self.old_values = old_values
        self.headers = headers
        self.encoded = encoded
        self.raw_keys = raw_keys
        self.read = read
        # For KTable changes of a versioned table: whether each is its key's
        # latest version (Kafka's Change.isLatest); None: all are.
        self.is_latest: list[bool] | None = None

    @classmethod
    def of_read(cls, records: _core.RecordBatch, key_serde: Any, value_serde: Any) -> Batch:
        """The rows of ``records`` as read (``raw_keys``), their columns made
        into lists only when asked for."""
        batch = cls.__new__(cls)
        batch.topic = records.topic
        batch.partition = records.partition
        batch._keys = batch._values = batch._timestamps = batch._offsets = None
        batch.old_values = batch.headers = batch.encoded = batch.is_latest = None
        batch.raw_keys = True
        batch.read = (records, key_serde, value_serde)
        return batch

    @property
    def keys(self) -> list[Any]:
        if self._keys is None:
            self._keys = self._records().keys()
        return self._keys

    @property
    def values(self) -> list[Any]:
        if self._values is None:
            self._values = self._records().values()
        return self._values

    @property
    def timestamps(self) -> list[int]:
        if self._timestamps is None:
            self._timestamps = self._records().timestamps()
        return self._timestamps

    @property
    def offsets(self) -> list[int]:
        if self._offsets is None:
            self._offsets = self._records().offsets()
        return self._offsets

    def max_timestamp(self) -> int:
        """The largest timestamp (the batch is not empty)."""
        if self._timestamps is not None:
            return max(self._timestamps)
        span = _core.timestamp_range(self._records())
        assert span is not None  # not empty
        return span[1]

    def _records(self) -> _core.RecordBatch:
        assert self.read is not None  # a batch without lists is a read's
        records: _core.RecordBatch = self.read[0]
        return records

    def __len__(self) -> int:
        return len(self._records()) if self._keys is None else len(self._keys)

    def derive(
        self,
        keys: list[Any],
        values: list[Any],
        timestamps: list[int],
        offsets: list[int],
        old_values: list[Any] | None = None,
    ) -> Batch:
        """A batch with the same origin and new columns. Headers set on the
        records (``headers``) follow them: row for row when ``offsets`` are
        this batch's own, else by input offset (a flat-map's records take
        those of the record they came from)."""
        headers, is_latest = self.headers, self.is_latest
        if headers is not None and offsets is not self._offsets:
            of = dict(zip(self.offsets, headers, strict=True))
            headers = [of.get(o) for o in offsets]
        if is_latest is not None and offsets is not self._offsets:
            latest = dict(zip(self.offsets, is_latest, strict=True))
            is_latest = [latest.get(o, True) for o in offsets]
        derived = Batch(
            self.topic, self.partition, keys, values, timestamps, offsets, old_values, headers
        )
        derived.is_latest = is_latest
        return derived

    def decoded(self) -> Batch:
        """The batch with its values as objects (itself if they are)."""
        if self.encoded is None:
            return self
        values = self.encoded.deserialize_batch(self.topic, self.values)
        decoded = Batch(
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
        )
        decoded.is_latest = self.is_latest
        return decoded

    def select(self, indices: list[int]) -> Batch:
        """The records at ``indices`` (a filter's survivors)."""
        if len(indices) == len(self):
            return self
        keys, values, ts, offs = self.keys, self.values, self.timestamps, self.offsets
        selected = Batch(
            self.topic,
            self.partition,
            [keys[i] for i in indices],
            [values[i] for i in indices],
            [ts[i] for i in indices],
            [offs[i] for i in indices],
            None if self.old_values is None else [self.old_values[i] for i in indices],
            None if self.headers is None else [self.headers[i] for i in indices],
            encoded=self.encoded,
            raw_keys=self.raw_keys,
        )
        if self.is_latest is not None:
            selected.is_latest = [self.is_latest[i] for i in indices]
        return selected
