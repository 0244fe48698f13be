"""Windowed aggregations on the native kernels (``strom.agg``): one kernel
call per batch, no per-record Python for the aggregation itself.

The node is a drop-in for ``KStreamWindowAggregate`` with a built-in
aggregation: same drops, results, timestamps and emission order, for both
emit strategies. It keeps the task's window store current after every
batch (the kernel reports the windows it changed), so changelogs,
interactive queries, commits and restores work as with the Python path; the
kernel's own copy of the open windows is reloaded from the store before the
first batch after a (re)start, together with the node's observed stream
time and last final emit. Behind a record cache every update is written
through the cache (one native cache call per update, no aggregation in
Python), which forwards them as it does for the Python path.
"""

from __future__ import annotations

import struct
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from strom import _core
from strom.config import EMIT_INTERVAL_WINDOWED
from strom.errors import ExpressionError, SerializationError, TaskError
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node, log
from strom.serdes import Json, Serde
from strom.state.internals.caching import CachingSessionStore, CachingWindowStore
from strom.windowed import SessionWindow, TimeWindow, Window, Windowed

if TYPE_CHECKING:
    from strom.agg import Aggregation
    from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
    from strom.processor.internals.task import StreamTask


# What a record cache shows a final-results kernel: every window put (Kafka's
# cache, 10 MiB by default, holds far more than the windows awaiting their
# final result).
_CACHE_RETENTION = 2**62


class MeanState(Serde[float]):
    """The window store's value of a native mean: the sum as a ``Double``
    and the count as a ``Long`` (16 bytes); read back as the mean."""

    def serialize(self, topic: str, data: float | None) -> bytes | None:
        if data is None:
            return None
        raise SerializationError(
            f"store {topic!r} holds a native mean's sum and count; a mean alone cannot be written"
        )

    def deserialize(self, topic: str, data: bytes | None) -> float | None:
        if data is None:
            return None
        if len(data) != 16:
            raise SerializationError(f"a stored mean is 16 bytes, got {len(data)} in {topic!r}")
        total, count = struct.unpack(">dq", data)
        return float(total / count) if count else float("nan")


def _kernel_input(node: Node, aggregation: Aggregation, batch: Batch) -> tuple[Batch, str | None]:
    """The batch with the values the kernel aggregates, and the field it reads
    from them (a plain field is read by the kernel; an expression is
    evaluated over the batch first)."""
    raw = isinstance(batch.encoded, Json)
    if batch.encoded is not None and not aggregation.reads_raw_json(raw):
        batch = batch.decoded()
        raw = False
    try:
        values, field = aggregation.kernel_input(batch.values, raw=raw)
    except ExpressionError as exc:
        raise TaskError(
            f"task {node.task.task_id} node {node.name!r} cannot aggregate a record of "
            f"{batch.topic}-{batch.partition} (offsets {batch.offsets[0]}.."
            f"{batch.offsets[-1]}): {exc}"
        ) from exc
    if values is batch.values:
        return batch, field
    return batch.derive(batch.keys, values, batch.timestamps, batch.offsets), field


class NativeTimeWindowAggregate(Node):
    """``windowed_by(TimeWindows)`` with a ``strom.agg`` aggregation, on
    ``_core.NativeTimeWindowedAggregation`` (see ``KStreamWindowAggregate``
    for the semantics, which are the same)."""

    # A count reads no value, an expression reads JSON bytes itself.
    takes_encoded = True

    def __init__(
        self,
        store_name: str,
        windows: TimeWindows,
        aggregation: Aggregation,
        value_type: str | None,
        retention_ms: int,
        *,
        emit_final: bool = False,
    ) -> None:
        super().__init__()
        self.store_name = store_name
        self.windows = windows
        self.aggregation = aggregation
        self.value_type = value_type
        # Kafka's retention (the store keeps 1 ms more for final results).
        self.retention_ms = retention_ms
        self.emit_final = emit_final

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.window_type, self.windowed_type = TimeWindow, Windowed
        self.store = task.store(self.store_name)
        # Behind the record cache, updates reach the children when the cache
        # writes them out (the latest per window and commit), as in Kafka.
        self.caching = isinstance(self.store, CachingWindowStore)
        if self.aggregation.kind == "count":
            # A count reads no value: its keys can come as the bytes read
            # (deserialized only for the results it forwards).
            self.raw_key_serde = self.store.key_serde
        if self.caching and self.children and not self.emit_final:
            # Nothing downstream (a terminal count): the flushed entries are
            # not deserialized into windowed results for nobody.
            self.forward_cache_flushes(self.store)
        w = self.windows
        # Final results read through a record cache (Kafka's
        # TimeOrderedCachingWindowStore) see every window the cache still
        # holds, also those the store's retention already hides.
        visible_ms = _CACHE_RETENTION if self.caching else self.retention_ms
        self.kernel = _core.NativeTimeWindowedAggregation(
            self.aggregation.kind,
            self.value_type,
            w.size_ms,
            w.advance_ms,
            w.grace_ms,
            emit_final=self.emit_final,
            retention_ms=visible_ms,
            emit_interval_ms=int(task.config[EMIT_INTERVAL_WINDOWED]),
            send_old_values=not self.caching,
            send_store_values=self.caching and not self.emit_final,
        )
        self.emit_key = f"{self.name}#last-emit-close-time"
        # The store is restored from its changelog after the nodes are
        # initialized: load the kernel on the first batch.
        self.loaded = False

    def _load(self) -> None:
        observed = self.task.state.node_stream_time(self.name)
        last_emit = self.task.state.node_times.get(self.emit_key, -1)
        self.kernel.restore_times(observed, last_emit, self.store.observed_stream_time)
        self.kernel.restore(*self.store.native.all())
        self.loaded = True

    def process(self, batch: Batch) -> None:
        if not self.loaded:
            self._load()
        task = self.task
        raw = batch.raw_keys
        batch, field = _kernel_input(self, self.aggregation, batch)
        keys, values = batch.keys, batch.values
        raw_keys = keys if raw else self.store.key_serde.serialize_batch(self.store_name, keys)
        if self.aggregation.kind != "count" and None in values:
            # count() counts null values, as Kafka 4.x's KStreamWindowAggregate
            # hands them to the aggregator; an aggregation of the value skips
            # them before they count towards stream time, as a null key is.
            raw_keys = [None if v is None else k for k, v in zip(raw_keys, values, strict=True)]
        try:
            results = self.kernel.process(
                raw_keys,
                batch.timestamps,
                None if self.aggregation.kind == "count" else values,
                field=field,
                wall_clock_ms=task.wall_clock_ms(),
            )
        except (TypeError, ValueError) as exc:
            raise TaskError(
                f"task {task.task_id} node {self.name!r} cannot aggregate a record of "
                f"{batch.topic}-{batch.partition} (offsets {batch.offsets[0]}.."
                f"{batch.offsets[-1]}): {exc}"
            ) from exc
        task.current_timestamp = batch.timestamps[-1]
        if self.caching and not self.emit_final:
            self._write_through_cache(raw_keys, batch.timestamps, results)
        else:
            self._write_changes()
        task.state.set_node_stream_time(self.name, self.kernel.observed_stream_time)
        if self.emit_final and self.kernel.last_emit_close_time != -1:
            task.state.set_node_stream_time(self.emit_key, self.kernel.last_emit_close_time)
        stats = results.stats
        if stats["dropped_records"]:
            task.metrics.dropped_records += stats["dropped_records"]
            log.debug(
                "%s: dropped %d record(s) (%d for closed windows)",
                self.name,
                stats["dropped_records"],
                stats["dropped_expired"],
            )
        # Updates behind a cache go downstream as the cache writes them out;
        # final results right away.
        if len(results) and (self.emit_final or not self.caching) and self.children:
            self.forward(self._results(batch, results, raw))

    def _write_through_cache(
        self, raw_keys: list[bytes | None], timestamps: list[int], results: Any
    ) -> None:
        """Every update into the record cache, in order, as the Python path
        puts them (the cache writes the store when it flushes or evicts)."""
        self.kernel.drain_changes(packed=True)  # the cache writes the store
        if not len(results) or self.store.put_results(raw_keys, timestamps, results):
            return
        rows = results.rows()
        self.store.put_raw_all(
            [raw_keys[r] for r in rows],
            results.store_values(),
            results.starts(),
            [timestamps[r] for r in rows],
        )

    def _write_changes(self) -> None:
        # The kernel writes the store natively, without a Python object per
        # write; a logged store logs each write natively too.
        self.kernel.drain_into(self.store.native)

    def _results(self, batch: Batch, results: Any, raw: bool) -> Batch:
        rows: list[int] = results.rows()
        owned = results.keys()
        if owned is None:
            source = batch.keys
            keys = [source[r] for r in rows]
            if raw:
                keys = self.store.key_serde.deserialize_batch(self.store_name, keys)
        else:
            keys = self.store.key_serde.deserialize_batch(self.store_name, owned)
        window, windowed = self.window_type, self.windowed_type
        windowed_keys = [
            windowed(k, window(s, e))
            for k, s, e in zip(keys, results.starts(), results.ends(), strict=True)
        ]
        offsets = batch.offsets
        olds = results.old_values() or [None] * len(rows)
        if self.aggregation.kind == "count" and not self.emit_final:
            # A new window retracts the initializer's 0, as Kafka's
            # KStreamWindowAggregate forwards countInitializer's aggregate
            # (final results carry no old value).
            olds = [0 if old is None else old for old in olds]
        return batch.derive(
            windowed_keys, results.values(), results.timestamps(), [offsets[r] for r in rows], olds
        )


class _NativeSlidingOrSession(Node):
    """What the sliding and session aggregations on the native kernels
    share: the kernel's reload from the store, drops, the persisted times,
    and the record cache. Behind the cache every store write the kernel
    makes (in order, as the Python processor puts them) goes through the
    cache, which forwards what it writes out as for the Python path."""

    # Whether updates carry the headers of the record that made them (see
    # KStreamSessionWindowAggregate).
    updates_keep_headers = True
    # The results' windows: Kafka's TimeWindow for sliding windows.
    window_class: type[Window] = TimeWindow

    takes_encoded = True  # as NativeTimeWindowAggregate

    def __init__(
        self,
        store_name: str,
        aggregation: Aggregation,
        value_type: str | None,
        retention_ms: int,
        *,
        emit_final: bool,
    ) -> None:
        super().__init__()
        self.store_name = store_name
        self.aggregation = aggregation
        self.value_type = value_type
        self.retention_ms = retention_ms
        self.emit_final = emit_final

    @abstractmethod
    def make_kernel(self, task: StreamTask, send_old_values: bool) -> Any:
        raise NotImplementedError

    @abstractmethod
    def forward_flushed_results(self, entries: list[tuple[Any, Any, Any, int]]) -> None:
        raise NotImplementedError

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.window_type, self.windowed_type = self.window_class, Windowed
        self.store: Any = task.store(self.store_name)
        self.caching = isinstance(self.store, CachingWindowStore | CachingSessionStore)
        if self.caching and self.children:
            # With nothing downstream the cache writes out in batches.
            self.forward_cache_flushes(self.store, self.forward_flushed_results)
        self.kernel = self.make_kernel(task, not self.caching and not self.emit_final)
        self.emit_key = f"{self.name}#last-emit-close-time"
        # The store is restored from its changelog after the nodes are
        # initialized: load the kernel on the first batch.
        self.loaded = False

    def _load(self) -> None:
        observed = self.task.state.node_stream_time(self.name)
        last_emit = self.task.state.node_times.get(self.emit_key, -1)
        self.kernel.restore_times(observed, last_emit, self.store.observed_stream_time)
        self.kernel.restore(*self.stored())
        self.loaded = True

    def stored(self) -> Any:
        return self.store.native.all()

    def raw_keys(self, batch: Batch) -> list[bytes | None]:
        keys: list[bytes | None] = self.store.key_serde.serialize_batch(self.store_name, batch.keys)
        if self.skips_null_values and None in batch.values:
            # Dropped before they count towards stream time, as a null key is.
            keys = [None if v is None else k for k, v in zip(keys, batch.values, strict=True)]
        return keys

    @property
    def skips_null_values(self) -> bool:
        return self.aggregation.kind != "count"

    def process(self, batch: Batch) -> None:
        if not self.loaded:
            self._load()
        task = self.task
        batch, field = _kernel_input(self, self.aggregation, batch)
        raw_keys = self.raw_keys(batch)
        count = self.aggregation.kind == "count"
        try:
            results = self.kernel.process(
                raw_keys,
                batch.timestamps,
                None if count else batch.values,
                field=field,
                wall_clock_ms=task.wall_clock_ms(),
            )
        except (TypeError, ValueError) as exc:
            raise TaskError(
                f"task {task.task_id} node {self.name!r} cannot aggregate a record of "
                f"{batch.topic}-{batch.partition} (offsets {batch.offsets[0]}.."
                f"{batch.offsets[-1]}): {exc}"
            ) from exc
        task.current_timestamp = batch.timestamps[-1]
        # Old values are read before the store takes this batch's changes.
        out = self._results(batch, results) if len(results) and not self.caching else None
        self.write_changes()
        task.state.set_node_stream_time(self.name, self.kernel.observed_stream_time)
        if self.emit_final and self.kernel.last_emit_close_time != -1:
            task.state.set_node_stream_time(self.emit_key, self.kernel.last_emit_close_time)
        stats = results.stats
        if stats["dropped_records"]:
            task.metrics.dropped_records += stats["dropped_records"]
            log.debug(
                "%s: dropped %d record(s) (%d for closed windows)",
                self.name,
                stats["dropped_records"],
                stats["dropped_expired"],
            )
        if out is not None and self.children:
            self.forward(out)

    @abstractmethod
    def write_changes(self) -> None:
        """The kernel's store writes into the store (or through its cache)."""
        raise NotImplementedError

    @abstractmethod
    def old_values(self, batch: Batch, rows: list[int], keys: list[Any], results: Any) -> list[Any]:
        raise NotImplementedError

    def _results(self, batch: Batch, results: Any) -> Batch:
        rows: list[int] = results.rows()
        owned = results.keys()
        if owned is None:
            source = batch.keys
            keys = [source[r] for r in rows]
        else:
            keys = self.store.key_serde.deserialize_batch(self.store_name, owned)
        window, windowed = self.window_type, self.windowed_type
        windowed_keys = [
            windowed(k, window(s, e))
            for k, s, e in zip(keys, results.starts(), results.ends(), strict=True)
        ]
        olds = (
            [None] * len(rows) if self.emit_final else self.old_values(batch, rows, keys, results)
        )
        offsets = batch.offsets
        out = batch.derive(
            windowed_keys,
            results.values(),
            results.timestamps(),
            [offsets[r] for r in rows],
            olds,
        )
        if not self.updates_keep_headers and not self.emit_final:
            out.headers = [None] * len(out)
        return out


class NativeSlidingWindowAggregate(_NativeSlidingOrSession):
    """``windowed_by(SlidingWindows)`` with a ``strom.agg`` aggregation on
    ``_core.NativeSlidingWindowedAggregation`` (the semantics of
    ``KStreamSlidingWindowAggregate``: null values are dropped, whatever
    the aggregation)."""

    def __init__(
        self,
        store_name: str,
        windows: SlidingWindows,
        aggregation: Aggregation,
        value_type: str | None,
        retention_ms: int,
        *,
        emit_final: bool = False,
    ) -> None:
        super().__init__(store_name, aggregation, value_type, retention_ms, emit_final=emit_final)
        self.windows = windows

    @property
    def skips_null_values(self) -> bool:
        return True

    def make_kernel(self, task: StreamTask, send_old_values: bool) -> Any:
        w = self.windows
        # Behind a cache the kernel also finds the windows the cache holds.
        cache, cache_id = self.store.cache_handle if self.caching else (None, 0)
        return _core.NativeSlidingWindowedAggregation(
            self.aggregation.kind,
            self.value_type,
            w.time_difference_ms,
            w.grace_ms,
            emit_final=self.emit_final,
            retention_ms=self.retention_ms,
            emit_interval_ms=int(task.config[EMIT_INTERVAL_WINDOWED]),
            send_old_values=send_old_values,
            record_cache=cache,
            record_cache_id=cache_id,
        )

    def forward_flushed_results(self, entries: list[tuple[Any, Any, Any, int]]) -> None:
        self.forward_flushed(entries)  # (aggregate, timestamp) pairs

    def write_changes(self) -> None:
        keys, starts, _ends, values, timestamps = self.kernel.drain_changes()
        if keys:
            self.store.put_raw_all(keys, values, starts, timestamps)

    def old_values(self, batch: Batch, rows: list[int], keys: list[Any], results: Any) -> list[Any]:
        olds: list[Any] = results.old_values()
        return olds


class NativeSessionWindowAggregate(_NativeSlidingOrSession):
    """``windowed_by(SessionWindows)`` with a ``strom.agg`` aggregation on
    ``_core.NativeSessionWindowedAggregation`` (the semantics of
    ``KStreamSessionWindowAggregate``: count() counts null values, the
    aggregations of the value skip them)."""

    updates_keep_headers = False
    window_class = SessionWindow

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        aggregation: Aggregation,
        value_type: str | None,
        retention_ms: int,
        *,
        emit_final: bool = False,
    ) -> None:
        super().__init__(store_name, aggregation, value_type, retention_ms, emit_final=emit_final)
        self.windows = windows

    def make_kernel(self, task: StreamTask, send_old_values: bool) -> Any:
        w = self.windows
        # Behind a cache the kernel also finds the sessions the cache holds.
        cache, cache_id = self.store.cache_handle if self.caching else (None, 0)
        return _core.NativeSessionWindowedAggregation(
            self.aggregation.kind,
            self.value_type,
            w.inactivity_gap_ms,
            w.grace_ms,
            emit_final=self.emit_final,
            retention_ms=self.retention_ms,
            emit_interval_ms=int(task.config[EMIT_INTERVAL_WINDOWED]),
            record_cache=cache,
            record_cache_id=cache_id,
        )

    def forward_flushed_results(self, entries: list[tuple[Any, Any, Any, int]]) -> None:
        # Session values are plain, timestamped with their end.
        self.forward(
            self.flushed_batch(
                [key for key, _, _, _ in entries],
                [new for _, new, _, _ in entries],
                [timestamp for _, _, _, timestamp in entries],
                [old for _, _, old, _ in entries],
            )
        )

    def stored(self) -> Any:
        return self.store.native.find_sessions_range(None, None, 0, 2**63 - 1)

    def write_changes(self) -> None:
        keys, starts, ends, values, timestamps = self.kernel.drain_changes()
        if keys:
            self.store.put_raw_all(keys, starts, ends, values, timestamps)

    def old_values(self, batch: Batch, rows: list[int], keys: list[Any], results: Any) -> list[Any]:
        # A merged session is new (no old value); an absorbed one's tombstone
        # carries its aggregate: from this batch's results, else from the store.
        tombstones = results.tombstones()
        values = results.values()
        starts, ends = results.starts(), results.ends()
        olds: list[Any] = []
        latest: dict[tuple[Any, int, int], Any] = {}
        for i, key in enumerate(keys):
            session = (key, starts[i], ends[i])
            if tombstones is not None and tombstones[i]:
                old = latest.pop(session) if session in latest else None
                if old is None:
                    old = self.store.fetch_session(key, starts[i], ends[i])
                olds.append(old)
            else:
                latest[session] = values[i]
                olds.append(None)
        return olds
