"""Runs a user's Processor inside the batch engine: records go in one at a
time, what it forwards is collected per child and passed on as batches."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from strom.errors import ErrorHandlerContext, StoreError, TopologyError
from strom.processor.api import (
    Cancellable,
    FixedKeyProcessor,
    FixedKeyRecord,
    Headers,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
    ValueTransformerWithKey,
)
from strom.processor.internals.batch import Batch
from strom.processor.internals.error_handling import processing_failed
from strom.processor.internals.nodes import Node
from strom.state.stores import epoch_millis

if TYPE_CHECKING:
    from strom.processor.internals.task import StreamTask
    from strom.serdes import Serde


# What a processor forwarded to one child: keys, values, timestamps, input
# offsets and headers.
_Forwarded = tuple[list[Any], list[Any], list[int], list[int], list[Headers | None]]


class _ContextOwner(Protocol):
    """What a context serves: a processor node, or a value transformer."""

    name: str
    store_names: list[str]
    current: RecordMetadata | None

    def collect(
        self, record: Record[Any, Any] | FixedKeyRecord[Any, Any], child: str | None
    ) -> None: ...

    def punctuate(self, callback: Callable[[int], None], timestamp: int) -> None: ...


@dataclass(order=True)
class _Schedule(Cancellable):
    """One scheduled punctuation (Kafka's ``PunctuationSchedule``)."""

    timestamp: int
    seq: int
    interval: int = field(compare=False)
    callback: Callable[[int], None] = field(compare=False)
    node: _ContextOwner = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True

    def next(self, now: int) -> int:
        """The next time to fire: one interval on, or, after missed
        punctuations, the next multiple of the interval after ``now``."""
        next_time = self.timestamp + self.interval
        if now >= next_time:
            missed = (now - self.timestamp) // self.interval
            next_time = self.timestamp + (missed + 1) * self.interval
        return next_time


class PunctuationQueue:
    """Schedules of one punctuation type in one task, earliest first."""

    _seq = itertools.count()

    def __init__(self) -> None:
        self._heap: list[_Schedule] = []

    def add(self, schedule: _Schedule) -> None:
        heapq.heappush(self._heap, schedule)

    def scheduled_nodes(self) -> list[str]:
        """The names of the nodes with a live schedule here."""
        return [s.node.name for s in sorted(self._heap) if not s.cancelled]

    def may_punctuate(self, now: int) -> bool:
        """Fires every schedule due at ``now`` (passing ``now``) and reschedules it."""
        punctuated = False
        while self._heap and self._heap[0].timestamp <= now:
            schedule = heapq.heappop(self._heap)
            if schedule.cancelled:
                continue
            schedule.node.punctuate(schedule.callback, now)
            if not schedule.cancelled:
                schedule.timestamp = schedule.next(now)
                schedule.seq = next(self._seq)
                heapq.heappush(self._heap, schedule)
            punctuated = True
        return punctuated


def _millis(interval: int | timedelta) -> int:
    millis = int(interval.total_seconds() * 1000) if isinstance(interval, timedelta) else interval
    if not isinstance(millis, int) or millis < 1:
        raise TopologyError(f"a punctuation interval must be at least 1 ms, got {interval!r}")
    return millis


def run_punctuation(
    task: StreamTask, name: str, callback: Callable[[int], None], timestamp: int
) -> None:
    """Calls a punctuation of node ``name`` at ``timestamp``. Kafka's
    processing exception handler is asked about punctuations too, with no
    record; skipping one drops no record."""
    task.current_timestamp = timestamp
    try:
        callback(timestamp)
    except Exception as exc:
        context = ErrorHandlerContext(None, -1, -1, timestamp, name, task.task_id)
        processing_failed(task, context, None, exc, f"a punctuation at {timestamp}")


class _NodeContext(ProcessorContext):
    def __init__(self, task: StreamTask, node: _ContextOwner) -> None:
        self._task = task
        self._node = node

    @property
    def application_id(self) -> str:
        return self._task.config.application_id

    @property
    def task_id(self) -> str:
        return self._task.task_id

    def forward(
        self, record: Record[Any, Any] | FixedKeyRecord[Any, Any], child: str | None = None
    ) -> None:
        self._node.collect(record, child)

    def schedule(self, *args: Any) -> Cancellable:
        """``(interval, type, callback)`` or ``(start_time, interval, type,
        callback)``, as Kafka's StreamTask schedules them."""
        if len(args) not in (3, 4):
            raise TypeError(
                "schedule takes (interval, punctuation_type, callback) or "
                f"(start_time, interval, punctuation_type, callback), got {len(args)} arguments"
            )
        *anchor, interval, punctuation_type, callback = args
        if not isinstance(punctuation_type, PunctuationType):
            raise TypeError(f"a punctuation type is a PunctuationType, got {punctuation_type!r}")
        millis = _millis(interval)
        stream_time = punctuation_type is PunctuationType.STREAM_TIME
        task = self._task
        queue = task.stream_time_punctuations if stream_time else task.wall_clock_punctuations
        now = task.stream_time if stream_time else self.current_system_time_ms()
        if anchor:
            start = epoch_millis(anchor[0])
            if start < 0:
                raise TopologyError(f"a punctuation cannot start before the epoch, got {start}")
        elif stream_time:
            start = 0  # aligned to 0: fires as soon as there is data, then at multiples
        else:
            start = now + millis
        schedule = _Schedule(start, next(PunctuationQueue._seq), millis, callback, self._node)
        if anchor and start < now:
            # Never before its time: the first of its times after now.
            schedule.timestamp = schedule.next(now)
        queue.add(schedule)
        return schedule

    def get_state_store(self, name: str) -> Any:
        if name in self._task.global_stores:
            return self._task.global_stores[name]
        if name not in self._node.store_names:
            raise StoreError(
                f"processor {self._node.name!r} has no access to state store {name!r}; "
                f"connect them with add_state_store(builder, {self._node.name!r})"
            )
        return self._task.store(name)

    def commit(self) -> None:
        self._task.commit_requested = True

    def record_metadata(self) -> RecordMetadata | None:
        return self._node.current

    def current_stream_time_ms(self) -> int:
        return self._task.stream_time

    def current_system_time_ms(self) -> int:
        return self._task.wall_clock_ms()

    @property
    def key_serde(self) -> Serde[Any] | None:
        return cast("Serde[Any] | None", self._task.config["default.key.serde"])

    @property
    def value_serde(self) -> Serde[Any] | None:
        return cast("Serde[Any] | None", self._task.config["default.value.serde"])

    @property
    def state_dir(self) -> Path:
        task_dir = self._task.state.task_dir
        task_dir.mkdir(parents=True, exist_ok=True)
        return task_dir

    def app_configs(self) -> dict[str, Any]:
        return dict(self._task.config)

    def app_configs_with_prefix(self, prefix: str) -> dict[str, Any]:
        return {
            key[len(prefix) :]: value
            for key, value in self._task.config.items()
            if key.startswith(prefix)
        }


class ProcessorAdapter(Node):
    """A node that runs a user ``Processor`` record by record (or, with
    ``fixed_key``, a ``FixedKeyProcessor``: ``KStream.process_values``)."""

    def __init__(
        self,
        supplier: Callable[[], Processor[Any, Any] | FixedKeyProcessor[Any, Any]],
        *,
        fixed_key: bool = False,
    ) -> None:
        super().__init__()
        self.supplier = supplier
        self.fixed_key = fixed_key
        self._record = FixedKeyRecord if fixed_key else Record
        self.store_names: list[str] = []
        self.current: RecordMetadata | None = None
        self._out: dict[str, _Forwarded] = {}
        self._origin: tuple[str, int, int] = ("", -1, -1)
        # Whether the records being processed came with headers.
        self._input_headers = False

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.store_names = task.node_stores.get(self.name, [])
        self.by_name = {child.name: child for child in self.children}
        processor = self.supplier()
        kind = FixedKeyProcessor if self.fixed_key else Processor
        if not isinstance(processor, kind):
            raise TopologyError(
                f"the supplier of processor {self.name!r} returned {processor!r}, "
                f"not a {kind.__name__}"
            )
        self.processor: Processor[Any, Any] | FixedKeyProcessor[Any, Any] = processor
        processor.init(_NodeContext(task, self))

    def collect(
        self, record: Record[Any, Any] | FixedKeyRecord[Any, Any], child: str | None
    ) -> None:
        if child is not None and child not in self.by_name:
            raise TopologyError(f"processor {self.name!r} has no child named {child!r}")
        if self.fixed_key and not isinstance(record, FixedKeyRecord):
            raise TopologyError(
                f"processor {self.name!r} (process_values) forwarded {record!r}: a "
                "FixedKeyProcessor forwards FixedKeyRecords derived from those it gets"
            )
        for name in [child] if child is not None else list(self.by_name):
            keys, values, stamps, offsets, headers = self._out.setdefault(
                name, ([], [], [], [], [])
            )
            keys.append(record.key)
            values.append(record.value)
            stamps.append(record.timestamp)
            offsets.append(self._origin[2])
            headers.append(record.headers)

    def _emit(self) -> None:
        topic, partition, _ = self._origin
        out, self._out = self._out, {}
        for name, (keys, values, stamps, offsets, headers) in out.items():
            # The forwarded records carry their own headers, as Kafka's do
            # (a new Record has none; with_value keeps the input's). With
            # none in or out, None says the same for less.
            has = self._input_headers or any(headers)
            batch = Batch(
                topic, partition, keys, values, stamps, offsets, headers=headers if has else None
            )
            self.by_name[name].process(batch)

    def process(self, batch: Batch) -> None:
        # A Processor gets Records, a FixedKeyProcessor FixedKeyRecords.
        process: Callable[[Any], None] = self.processor.process
        task, make = self.task, self._record
        keys, values, stamps, offsets = batch.keys, batch.values, batch.timestamps, batch.offsets
        topic, partition = batch.topic, batch.partition
        headers = task.record_headers(batch)
        self._input_headers = headers is not None
        if headers is None:
            headers = [None] * len(batch)

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                self._origin = (topic, partition, offsets[i])
                self.current = RecordMetadata(topic, partition, offsets[i])
                task.current_timestamp = stamps[i]
                process(make(keys[i], values[i], stamps[i], headers[i] or None))

        try:
            self.each_record(batch, run)
        finally:
            self.current = None
        # What it forwarded, also for a record it then failed on and the
        # handler skipped (Kafka would have passed it on already).
        self._emit()

    def punctuate(self, callback: Callable[[int], None], timestamp: int) -> None:
        self._origin = ("", -1, -1)
        self._input_headers = False
        run_punctuation(self.task, self.name, callback, timestamp)
        self._emit()

    def close(self) -> None:
        self.processor.close()


class ValueTransformerRunner:
    """A task's ``ValueTransformerWithKey`` (``KTable.transform_values``) and
    its context, which cannot forward (Kafka's
    ``ForwardingDisabledProcessorContext``): the transformer may only
    compute the value for the key it is given."""

    def __init__(
        self,
        task: StreamTask,
        name: str,
        store_names: list[str],
        supplier: Callable[[], ValueTransformerWithKey[Any, Any]],
    ) -> None:
        self.task = task
        self.name = name
        self.store_names = store_names
        self.current: RecordMetadata | None = None
        transformer = supplier()
        if not isinstance(transformer, ValueTransformerWithKey):
            raise TopologyError(
                f"the supplier of {name!r} returned {transformer!r}, not a ValueTransformerWithKey"
            )
        self.transformer = transformer
        transformer.init(_NodeContext(task, self))

    def transform(self, batch: Batch, i: int, value: Any) -> Any:
        """The transformer's value for record ``i`` of ``batch`` (or for
        ``value`` under its key: an old value)."""
        self.current = RecordMetadata(batch.topic, batch.partition, batch.offsets[i])
        self.task.current_timestamp = batch.timestamps[i]
        return self.transformer.transform(batch.keys[i], value)

    def collect(
        self, record: Record[Any, Any] | FixedKeyRecord[Any, Any], child: str | None
    ) -> None:
        raise TopologyError(
            f"{self.name!r}: a ValueTransformerWithKey cannot forward records (it could "
            "change their keys); return the new value from transform() instead"
        )

    def punctuate(self, callback: Callable[[int], None], timestamp: int) -> None:
        run_punctuation(self.task, self.name, callback, timestamp)

    def close(self) -> None:
        self.transformer.close()
