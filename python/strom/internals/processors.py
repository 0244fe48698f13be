"""Runtime nodes: each takes a batch and forwards batches to its children.

User callbacks run once per record (they are the user's Python); everything
around them works on whole columns.
"""

from __future__ import annotations

import logging
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from strom.errors import ErrorHandlerContext, FailedRecord, ProductionError, TaskError
from strom.internals.batch import Batch
from strom.internals.error_handling import continue_after, dead_letter_headers, describe_source
from strom.processor.api import RecordContext

if TYPE_CHECKING:
    from strom.internals.task import StreamTask

log = logging.getLogger("strom.processor")


class Node(ABC):
    """A node of one task's instance of a sub-topology."""

    name: str = ""
    children: list[Node]
    # Set where the two inputs of a stream-stream join fork from one node:
    # each record then reaches every child before the next record does, as
    # in Kafka's record-at-a-time processing.
    forward_per_record: bool = False

    def __init__(self) -> None:
        self.children = []

    def init(self, task: StreamTask) -> None:
        self.task = task

    @abstractmethod
    def process(self, batch: Batch) -> None: ...

    def forward(self, batch: Batch) -> None:
        if self.forward_per_record and len(batch) > 1 and len(self.children) > 1:
            for i in range(len(batch)):
                one = batch.select([i])
                for child in self.children:
                    child.process(one)
        elif len(batch):
            for child in self.children:
                child.process(batch)

    def forward_flushed(self, entries: list[tuple[Any, Any, Any, int]]) -> None:
        """Forwards what a record cache wrote out: (key, new, old, timestamp),
        values being (value, result timestamp) pairs of a timestamped store."""
        keys, news, olds, stamps = [], [], [], []
        for key, new, old, timestamp in entries:
            keys.append(key)
            news.append(None if new is None else new[0])
            olds.append(None if old is None else old[0])
            stamps.append(timestamp if new is None else new[1])
        self.forward(Batch("", -1, keys, news, stamps, [-1] * len(keys), olds))

    def flush(self) -> None:  # noqa: B027 - an optional hook
        """Called on commit, before the task's output is flushed."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Called when the task closes."""

    def callback_failed(self, batch: Batch, index: int, exc: BaseException) -> TaskError:
        """Wraps an exception from a user callback with where it happened."""
        offset = batch.offsets[index] if index < len(batch.offsets) else -1
        return TaskError(
            f"task {self.task.task_id} node {self.name!r} failed on record "
            f"{batch.topic}-{batch.partition}@{offset} (key={batch.keys[index]!r}): "
            f"{type(exc).__name__}: {exc}"
        )


class PassThrough(Node):
    def process(self, batch: Batch) -> None:
        self.forward(batch)


class KStreamFilter(Node):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        super().__init__()
        self.predicate = predicate
        self.negate = negate

    def process(self, batch: Batch) -> None:
        pred, keep = self.predicate, not self.negate
        keys, values = batch.keys, batch.values
        i = 0
        try:
            kept = []
            for i in range(len(keys)):
                if bool(pred(keys[i], values[i])) is keep:
                    kept.append(i)
        except Exception as exc:
            raise self.callback_failed(batch, i, exc) from exc
        self.forward(batch.select(kept))


class KStreamMap(Node):
    """``map`` and ``select_key`` (which keeps the value)."""

    def __init__(self, mapper: Callable[[Any, Any], Any], key_only: bool) -> None:
        super().__init__()
        self.mapper = mapper
        self.key_only = key_only

    def process(self, batch: Batch) -> None:
        fn = self.mapper
        keys, values = batch.keys, batch.values
        new_keys: list[Any] = []
        new_values: list[Any] = []
        i = 0
        try:
            if self.key_only:
                new_keys = [fn(k, v) for k, v in zip(keys, values, strict=True)]
                new_values = values
            else:
                for i in range(len(keys)):
                    k2, v2 = fn(keys[i], values[i])
                    new_keys.append(k2)
                    new_values.append(v2)
        except Exception as exc:
            i = len(new_keys) if self.key_only else i
            raise self.callback_failed(batch, i, exc) from exc
        self.forward(batch.derive(new_keys, new_values, batch.timestamps, batch.offsets))


class KStreamMapValues(Node):
    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        super().__init__()
        self.mapper = mapper
        self.with_key = with_key

    def process(self, batch: Batch) -> None:
        fn = self.mapper
        out: list[Any] = []
        try:
            if self.with_key:
                out = [fn(k, v) for k, v in zip(batch.keys, batch.values, strict=True)]
            else:
                out = [fn(v) for v in batch.values]
        except Exception as exc:
            raise self.callback_failed(batch, len(out), exc) from exc
        self.forward(batch.derive(batch.keys, out, batch.timestamps, batch.offsets))


class KStreamFlatMap(Node):
    """``flat_map`` (pairs out) and ``flat_map_values`` (values out)."""

    def __init__(self, mapper: Callable[..., Iterable[Any]], values_only: bool) -> None:
        super().__init__()
        self.mapper = mapper
        self.values_only = values_only

    def process(self, batch: Batch) -> None:
        fn = self.mapper
        keys, values, stamps, offsets = batch.keys, batch.values, batch.timestamps, batch.offsets
        out_k: list[Any] = []
        out_v: list[Any] = []
        out_t: list[int] = []
        out_o: list[int] = []
        i = 0
        try:
            if self.values_only:
                for i in range(len(keys)):
                    produced = fn(values[i])
                    before = len(out_v)
                    out_v.extend(produced)
                    n = len(out_v) - before
                    if n:
                        out_k.extend([keys[i]] * n)
                        out_t.extend([stamps[i]] * n)
                        out_o.extend([offsets[i]] * n)
            else:
                for i in range(len(keys)):
                    for k2, v2 in fn(keys[i], values[i]):
                        out_k.append(k2)
                        out_v.append(v2)
                        out_t.append(stamps[i])
                        out_o.append(offsets[i])
        except Exception as exc:
            raise self.callback_failed(batch, i, exc) from exc
        self.forward(batch.derive(out_k, out_v, out_t, out_o))


class KStreamPeek(Node):
    """``peek`` (forwards) and ``foreach`` (terminal)."""

    def __init__(self, action: Callable[[Any, Any], Any]) -> None:
        super().__init__()
        self.action = action

    def process(self, batch: Batch) -> None:
        action = self.action
        keys, values = batch.keys, batch.values
        i = 0
        try:
            for i in range(len(keys)):
                action(keys[i], values[i])
        except Exception as exc:
            raise self.callback_failed(batch, i, exc) from exc
        self.forward(batch)


class KStreamBranch(Node):
    """``split()``: each record goes to the child of the first predicate it
    matches, else to the default branch (if any), else nowhere."""

    def __init__(self, predicates: list[Callable[[Any, Any], bool]]) -> None:
        super().__init__()
        self.predicates = predicates

    def process(self, batch: Batch) -> None:
        routes: list[list[int]] = [[] for _ in range(len(self.predicates) + 1)]
        keys, values = batch.keys, batch.values
        i = 0
        try:
            for i in range(len(keys)):
                for branch, predicate in enumerate(self.predicates):
                    if predicate(keys[i], values[i]):
                        routes[branch].append(i)
                        break
                else:
                    routes[-1].append(i)
        except Exception as exc:
            raise self.callback_failed(batch, i, exc) from exc
        # Children are the branches in order, then the default branch.
        for branch, child in enumerate(self.children):
            indices = routes[branch] if branch < len(self.predicates) else routes[-1]
            if indices:
                child.process(batch.select(indices))


class KStreamPrint(Node):
    """``print()``: writes ``[label]: key, value`` lines to standard output."""

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def process(self, batch: Batch) -> None:
        lines = [f"[{self.label}]: {k}, {v}" for k, v in zip(batch.keys, batch.values, strict=True)]
        sys.stdout.write("\n".join(lines) + "\n")


class DropNullKeys(Node):
    """The filter before a repartition sink: Kafka drops null-keyed records there."""

    def process(self, batch: Batch) -> None:
        keys = batch.keys
        if None in keys:
            self.forward(batch.select([i for i, k in enumerate(keys) if k is not None]))
        else:
            self.forward(batch)


class KStreamCount(Node):
    """``KGroupedStream.count()``: the native count kernel over the store."""

    def __init__(self, store_name: str) -> None:
        super().__init__()
        self.store_name = store_name

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.store = task.key_value_store(self.store_name)
        self.caching = hasattr(self.store, "listener")
        if self.caching:
            self.store.listener = self.forward_flushed

    def process(self, batch: Batch) -> None:
        if None in batch.keys or None in batch.values:
            # Kafka's aggregations ignore records with a null key or value.
            keep = [
                i
                for i, (k, v) in enumerate(zip(batch.keys, batch.values, strict=True))
                if k is not None and v is not None
            ]
            self.task.metrics.dropped_records += len(batch) - len(keep)
            log.debug(
                "%s: skipped %d record(s) with a null key or value",
                self.name,
                len(batch) - len(keep),
            )
            batch = batch.select(keep)
            if not len(batch):
                return
        if self.caching:
            # Through the cache, record by record; the cache forwards on flush.
            self.store.count(batch.keys, batch.timestamps)
            return
        counts, stamps = self.store.count(batch.keys, batch.timestamps)
        self.forward(batch.derive(batch.keys, counts, stamps, batch.offsets))


class SinkNode(Node):
    """Writes to its topic, or to the topic ``topic_extractor(key, value,
    record_context)`` picks for each record."""

    def __init__(
        self,
        topic: str,
        key_serde: Any,
        value_serde: Any,
        partitioner: Callable[[Any, Any, int], int] | None,
        topic_extractor: Callable[[Any, Any, RecordContext], str] | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.partitioner = partitioner
        self.topic_extractor = topic_extractor

    def process(self, batch: Batch) -> None:
        if self.topic_extractor is None:
            self._send(self.topic, batch)
            return
        extract = self.topic_extractor
        by_topic: dict[str, list[int]] = {}
        i = 0
        try:
            for i, (k, v) in enumerate(zip(batch.keys, batch.values, strict=True)):
                context = RecordContext(
                    batch.topic, batch.partition, batch.offsets[i], batch.timestamps[i]
                )
                by_topic.setdefault(extract(k, v, context), []).append(i)
        except Exception as exc:
            raise self.callback_failed(batch, i, exc) from exc
        for topic, indices in by_topic.items():
            self._send(topic, batch.select(indices))

    def _send(self, topic: str, batch: Batch) -> None:
        try:
            keys = self.key_serde.serialize_batch(topic, batch.keys)
            values = self.value_serde.serialize_batch(topic, batch.values)
        except Exception:
            batch, keys, values = self._serialize_one_by_one(topic, batch)
            if not keys:
                return
        partitions = None
        if self.partitioner is not None:
            count = self.task.partition_count(topic)
            fn = self.partitioner
            partitions = []
            i = 0
            try:
                for i in range(len(keys)):
                    p = fn(batch.keys[i], batch.values[i], count)
                    if not 0 <= p < count:
                        raise ValueError(f"partitioner returned {p}, topic has {count} partitions")
                    partitions.append(p)
            except Exception as exc:
                raise self.callback_failed(batch, i, exc) from exc
        self.task.collector.send(topic, keys, values, batch.timestamps, partitions)

    def _serialize_one_by_one(
        self, topic: str, batch: Batch
    ) -> tuple[Batch, list[bytes | None], list[bytes | None]]:
        """The slow path after a batch failed to serialize: each bad record
        goes to the ``production.exception.handler`` (Kafka's KIP-399), which
        drops it (counted in ``dropped-records``) or fails the task."""
        config = self.task.config
        handler = config["production.exception.handler"]
        dead_letters = config["errors.dead.letter.queue.topic.name"]
        keep: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for i, (key, value) in enumerate(zip(batch.keys, batch.values, strict=True)):
            what = "key"
            try:
                key_bytes = self.key_serde.serialize(topic, key)
                what = "value"
                value_bytes = self.value_serde.serialize(topic, value)
            except Exception as exc:
                context = ErrorHandlerContext(
                    batch.topic,
                    batch.partition,
                    batch.offsets[i],
                    batch.timestamps[i],
                    self.name,
                    self.task.task_id,
                )
                record = FailedRecord(topic, -1, key, value, batch.timestamps[i])
                message = (
                    f"cannot serialize the {what} of a record for topic {topic}"
                    f"{describe_source(context)} in task {self.task.task_id}: "
                    f"{type(exc).__name__}: {exc}"
                )
                go_on = continue_after(handler, context, record, exc)
                if dead_letters is not None:
                    # The input record's raw bytes are not kept: the headers name it.
                    self.task.collector.send_record(
                        dead_letters,
                        None,
                        None,
                        batch.timestamps[i],
                        dead_letter_headers(exc, context),
                        durable=not go_on,
                    )
                if not go_on:
                    raise ProductionError(message) from exc
                self.task.metrics.dropped_records += 1
                log.warning("%s; dropping it (production.exception.handler)", message)
                continue
            keep.append(i)
            keys.append(key_bytes)
            values.append(value_bytes)
        return batch.select(keep), keys, values
