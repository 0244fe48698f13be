"""``map_batches`` and ``filter_batches``: user functions over a whole batch
as a ``pyarrow.RecordBatch``, for numpy/pyarrow-vectorized logic.

The batch has the columns ``key``, ``value``, ``timestamp``, ``partition``
and ``offset``, then one column per field asked for (read natively from the
JSON values by the same plans as ``strom.col``). ``value`` holds the value's
JSON bytes while they are still unread (``binary``), else the values as
pyarrow infers them. pyarrow is optional (the ``spark`` extra brings it):
it is imported when the first batch runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from strom.errors import TaskError
from strom.expr import col
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node
from strom.serdes import Json


def _pyarrow() -> Any:
    try:
        import pyarrow  # noqa: PLC0415 - optional: only batch functions need it
    except ImportError as exc:
        raise TaskError(
            "map_batches/filter_batches need pyarrow: pip install 'strom[spark]' (or pyarrow>=15)"
        ) from exc
    return pyarrow


class _BatchFunction(Node):
    takes_encoded = True

    def __init__(self, fn: Callable[[Any], Any], fields: Sequence[str]) -> None:
        super().__init__()
        self.fn = fn
        self.fields = list(fields)
        self.plans = [col(name).plan for name in self.fields]

    def record_batch(self, batch: Batch) -> tuple[Batch, Any]:
        """The batch as a RecordBatch, without the records whose fields
        could not be read and the processing handler skipped (the batch
        returned is the one the RecordBatch holds)."""
        pa = _pyarrow()
        raw = isinstance(batch.encoded, Json)
        if batch.encoded is not None and not raw:
            batch = batch.decoded()
        fields: dict[str, list[Any]] = {}
        failed: set[int] = set()
        for name, plan in zip(self.fields, self.plans, strict=True):
            fields[name], errors = plan.to_python(batch.values, raw=raw)
            for row, _kind, message in errors:
                if row not in failed:
                    self.record_failed(batch, row, ValueError(message))  # raises unless skipped
                    failed.add(row)
        if failed:
            kept = [i for i in range(len(batch)) if i not in failed]
            batch = batch.select(kept)
            fields = {name: [values[i] for i in kept] for name, values in fields.items()}
        columns = {
            "key": batch.keys,
            "value": batch.values,
            "timestamp": pa.array(batch.timestamps, pa.int64()),
            "partition": pa.array([batch.partition] * len(batch), pa.int32()),
            "offset": pa.array(batch.offsets, pa.int64()),
            **fields,
        }
        try:
            return batch, pa.RecordBatch.from_pydict(
                {name: c if isinstance(c, pa.Array) else pa.array(c) for name, c in columns.items()}
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: cannot make a pyarrow "
                f"RecordBatch of {batch.topic}-{batch.partition} (offsets "
                f"{batch.offsets[0]}..{batch.offsets[-1]}): {exc}"
            ) from exc

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
        flags = mask.to_pylist() if hasattr(mask, "to_pylist") else list(mask)
        if len(flags) != len(batch):
            raise TaskError(
                f"task {self.task.task_id} node {self.name!r}: filter_batches' function "
                f"returned {len(flags)} flags for a batch of {len(batch)} records"
            )
        self.forward(batch.select([i for i, keep in enumerate(flags) if keep]))


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
        rows = out.num_rows
        if "timestamp" in names:
            timestamps = out.column("timestamp").to_pylist()
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
                out.column("key").to_pylist(),
                out.column("value").to_pylist(),
                timestamps,
                offsets,
            )
        )
