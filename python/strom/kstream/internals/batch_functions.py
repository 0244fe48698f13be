"""``map_batches`` and ``filter_batches``: user functions over a whole batch
as a ``pyarrow.RecordBatch``, for numpy/pyarrow-vectorized logic.

The batch has the columns ``key``, ``value``, ``timestamp``, ``partition``
and ``offset``, then one column per field asked for (read natively from the
JSON values, typed as pyarrow would infer them). ``value`` holds the
value's JSON bytes while they are still unread (``binary``), else the
values as pyarrow infers them. While a batch's rows are still those the
consumer read, its columns come from the native batch through the Arrow C
data interface (``timestamp`` and ``offset`` share its memory), with no
Python object per record; a boolean mask comes back the same way. pyarrow is
optional (the ``spark`` extra brings it): it is imported when the first
batch runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from strom import _core
from strom.errors import TaskError
from strom.expr import col
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node
from strom.serdes import ByteArray, Json, String


def _pyarrow() -> Any:
    try:
        import pyarrow  # noqa: PLC0415 - optional: only batch functions need it
    except ImportError as exc:
        raise TaskError(
            "map_batches/filter_batches need pyarrow: pip install 'strom[spark]' (or pyarrow>=15)"
        ) from exc
    return pyarrow


def _kind(serde: Any) -> str | None:
    """The Arrow type a column read with ``serde`` is built as natively
    (None: from the Python objects)."""
    return {String: "utf8", ByteArray: "binary"}.get(type(serde))


def _to_list(pa: Any, column: Any) -> list[Any]:
    """A result column as the Python list the next node takes (pyarrow's
    own conversion: measured faster than a native one for every type)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    values: list[Any] = column.to_pylist()
    return values


class _BatchFunction(Node):
    takes_encoded = True

    def __init__(self, fn: Callable[[Any], Any], fields: Sequence[str]) -> None:
        super().__init__()
        self.fn = fn
        self.fields = list(fields)
        self.plans = [col(name).plan for name in self.fields]
        self.paths = [plan.fields[0] for plan in self.plans]
        # Reading fields parses each JSON value whole, and a value that is not
        # JSON goes to the deserialization handler here: the source need not
        # check the batch first.
        self.reads_json = bool(self.fields)

    def where(self, batch: Batch) -> str:
        return f"{batch.topic}-{batch.partition} (offsets {batch.offsets[0]}..{batch.offsets[-1]})"

    def record_batch(self, batch: Batch) -> tuple[Batch, Any]:
        """The batch as a RecordBatch, without the records whose fields
        could not be read and their handler skipped (the batch returned is
        the one the RecordBatch holds)."""
        pa = _pyarrow()
        raw = isinstance(batch.encoded, Json)
        if batch.encoded is not None and not raw:
            batch = batch.decoded()
        fields, failed = self.field_columns(pa, batch, raw)
        try:
            columns = [*self.record_columns(pa, batch, raw), *fields]
            names = ["key", "value", "timestamp", "partition", "offset", *self.fields]
            record_batch = pa.RecordBatch.from_arrays(columns, names=names)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: cannot make a pyarrow "
                f"RecordBatch of {self.where(batch)}: {exc}"
            ) from exc
        if failed:
            kept = [i for i in range(len(batch)) if i not in failed]
            batch = batch.select(kept)
            record_batch = record_batch.take(pa.array(kept, pa.int64()))
        return batch, record_batch

    def record_columns(self, pa: Any, batch: Batch, raw: bool) -> list[Any]:
        """``key``, ``value``, ``timestamp``, ``partition``, ``offset``:
        from the native batch read while the rows are its rows, else from
        the lists; a key or value column left to pyarrow where its objects
        are not all ``str`` or all ``bytes``."""
        if batch.read is not None:
            records, key_serde, value_serde = batch.read
            value_kind = "binary" if raw else _kind(value_serde)
            native = _core.arrow_columns(records, key=_kind(key_serde), value=value_kind)
        else:
            native = _core.arrow_list_columns(
                batch.keys, batch.values, batch.timestamps, batch.offsets, batch.partition
            )
        fallback = [
            lambda: pa.array(batch.keys),
            lambda: pa.array(batch.values, pa.binary()) if raw else pa.array(batch.values),
        ]
        return [fallback[i]() if c is None else pa.array(c) for i, c in enumerate(native)]

    def field_columns(self, pa: Any, batch: Batch, raw: bool) -> tuple[list[Any], set[int]]:
        """The fields asked for, one column each, and the rows whose fields
        could not be read: a value that is not JSON is the deserialization
        handler's (as at a source), a field that cannot be converted the
        processing handler's; either raises unless it skips the record."""
        if not self.fields:
            return [], set()
        columns: list[Any] = [None] * len(self.fields)
        errors: list[tuple[int, str]] = []
        if raw:
            # JSON bytes: decoded natively in one pass, from the batch read if any.
            source = batch.values if batch.read is None else batch.read[0]
            native, errors = _core.arrow_json_fields(source, self.paths)
            columns = [None if c is None else pa.array(c) for c in native]
        for i, plan in enumerate(self.plans):
            if columns[i] is None:  # objects, lists, mixed types: as pyarrow infers them
                values, plan_errors = plan.to_python(batch.values, raw=raw)
                columns[i] = values
                if not raw:
                    errors += [(row, message) for row, _what, message in plan_errors]
        failed: set[int] = set()
        for row, message in sorted(errors):
            if row in failed:
                continue
            failed.add(row)
            # Both handlers raise unless they skip the record.
            if raw:
                self.value_not_json(batch, row, message)
            else:
                self.record_failed(batch, row, ValueError(message))
        return [c if isinstance(c, pa.Array) else pa.array(c) for c in columns], failed

    def call(self, batch: Batch, record_batch: Any) -> Any:
        try:
            return self.fn(record_batch)
        except Exception as exc:
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r} failed on the batch "
                f"{batch.topic}-{batch.partition}@{batch.offsets[0]}..{batch.offsets[-1]}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


class KStreamFilterBatches(_BatchFunction):
    """``filter_batches(fn)``: ``fn(record_batch)`` returns a boolean mask
    (a pyarrow or numpy array, or a list) with one entry per row; the rows
    whose entry is true are kept (a null entry drops the row)."""

    def process(self, batch: Batch) -> None:
        batch, record_batch = self.record_batch(batch)
        mask = self.call(batch, record_batch)
        count, kept = self.kept_rows(mask, batch)
        if count != len(batch):
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: filter_batches' function "
                f"returned {count} flags for a batch of {len(batch)} records"
            )
        self.forward(batch.select(kept))

    def kept_rows(self, mask: Any, batch: Batch) -> tuple[int, list[int]]:
        """The mask's length and the rows it keeps: Arrow and numpy boolean
        masks read natively through the C data interface, others by truth."""
        pa = _pyarrow()
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        elif getattr(getattr(mask, "dtype", None), "kind", None) == "b":  # numpy bool
            mask = pa.array(mask)
        if not isinstance(mask, pa.Array):
            flags = list(mask)
            return len(flags), [i for i, keep in enumerate(flags) if keep]
        try:
            count, kept = _core.arrow_mask_rows(mask)
        except TypeError as exc:
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: filter_batches' function "
                f"returned {exc}, for {self.where(batch)}"
            ) from exc
        return count, kept


class KStreamMapBatches(_BatchFunction):
    """``map_batches(fn)``: ``fn(record_batch)`` returns a RecordBatch with
    ``key`` and ``value`` columns (``timestamp`` too if the row count
    changes): its rows are the new records."""

    def process(self, batch: Batch) -> None:
        batch, record_batch = self.record_batch(batch)
        out = self.call(batch, record_batch)
        schema = getattr(out, "schema", None)
        names = set(schema.names) if schema is not None else set()
        if not {"key", "value"} <= names:
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: map_batches' function must "
                f"return a pyarrow RecordBatch with 'key' and 'value' columns, not {out!r:.200}"
            )
        pa = _pyarrow()
        rows = out.num_rows
        if "timestamp" in names:
            timestamps = _to_list(pa, out.column("timestamp"))
        elif rows == len(batch):
            timestamps = batch.timestamps
        else:
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: map_batches' function returned "
                f"{rows} rows for {len(batch)} records: give them a 'timestamp' column"
            )
        # Each output row keeps an input offset for error messages: its own
        # row's when the rows line up, else the batch's first.
        offsets = batch.offsets if rows == len(batch) else [batch.offsets[0]] * rows
        self.forward(
            Batch(
                batch.topic,
                batch.partition,
                _to_list(pa, out.column("key")),
                _to_list(pa, out.column("value")),
                timestamps,
                offsets,
            )
        )
