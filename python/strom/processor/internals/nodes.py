"""The engine's nodes: the base every node of a task's sub-topology extends,
the pass-through node, and the sink. Each takes a batch and forwards
batches to its children (Kafka's ProcessorNode and SinkNode).

User callbacks run once per record (they are the user's Python); everything
around them works on whole columns.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import ErrorHandlerContext, FailedRecord, ProductionError, TaskError
from strom.processor.api import RecordContext
from strom.processor.internals.batch import Batch
from strom.processor.internals.error_handling import (
    continue_after,
    dead_letter_headers,
    describe_source,
)

if TYPE_CHECKING:
    from strom.processor.internals.task import StreamTask

log = logging.getLogger("strom.processor")


class Node(ABC):
    """A node of one task's instance of a sub-topology."""

    name: str = ""
    children: list[Node]
    # Set where the two inputs of a stream-stream join fork from one node:
    # each record then reaches every child before the next record does, as
    # in Kafka's record-at-a-time processing.
    forward_per_record: bool = False
    # Whether process() takes a batch whose values are still encoded
    # (Batch.encoded); the others get it decoded.
    takes_encoded: bool = False

    def __init__(self) -> None:
        self.children = []

    def init(self, task: StreamTask) -> None:
        self.task = task

    @abstractmethod
    def process(self, batch: Batch) -> None: ...

    def forward(self, batch: Batch) -> None:
        if batch.encoded is not None and not all(c.takes_encoded for c in self.children):
            batch = batch.decoded()
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
        self.forward(self.flushed_batch(keys, news, stamps, olds))

    def flushed_batch(
        self, keys: list[Any], news: list[Any], stamps: list[int], olds: list[Any]
    ) -> Batch:
        """A batch of what a record cache wrote out, under the topic of the
        records the task processed last."""
        return Batch(self.task.current_topic, -1, keys, news, stamps, [-1] * len(keys), olds)

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
    takes_encoded = True  # its forward() decodes for the children that need it

    def process(self, batch: Batch) -> None:
        self.forward(batch)


class SinkNode(Node):
    """Writes to its topic, or to the topic ``topic_extractor(key, value,
    record_context)`` picks for each record. Values still encoded with the
    sink's own value serde are written as they are."""

    takes_encoded = True

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
        if batch.encoded is not None and (
            self.topic_extractor is not None or batch.encoded != self.value_serde
        ):
            batch = batch.decoded()
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
            values = (
                batch.values
                if batch.encoded is not None
                else self.value_serde.serialize_batch(topic, batch.values)
            )
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
                value_bytes = (
                    value if batch.encoded is not None else self.value_serde.serialize(topic, value)
                )
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
