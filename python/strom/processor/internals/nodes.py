"""The engine's nodes: the base every node of a task's sub-topology extends,
the pass-through node, and the sink. Each takes a batch and forwards
batches to its children (Kafka's ProcessorNode and SinkNode).

User callbacks run once per record (they are the user's Python); everything
around them works on whole columns. A node runs them through ``call_each``
or ``each_record``, which know the record each call is for: a record whose
processing raises is named, and goes to the ``processing.exception.handler``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from functools import partial
from itertools import compress, groupby
from operator import index, length_hint, not_
from typing import TYPE_CHECKING, Any, cast

from strom import _core
from strom.errors import ErrorHandlerContext, FailedRecord, ProductionError, SerializationError
from strom.processor.api import Headers, Partitioner, Record, RecordContext, StreamPartitioner
from strom.processor.internals.batch import Batch
from strom.processor.internals.error_handling import (
    describe_source,
    handle_failure,
    processing_failed,
)
from strom.serdes import String
from strom.windowed import Windowed

if TYPE_CHECKING:
    from strom.processor.internals.task import StreamTask

log = logging.getLogger("strom.processor")


def deliver(node: Node, batch: Batch) -> None:
    """Hands ``batch`` to ``node``, counting its records there."""
    node.records_in += len(batch)
    if node.cached_headers is not None:
        node.remember_headers(batch)
    node.process(batch)


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
    # Records that reached this node (Kafka's processor-node process-total),
    # counted once per batch by whoever hands it the batch.
    records_in: int = 0
    # The key serde of a node that takes keys still as the bytes read
    # (Batch.raw_keys) when it is the source's only child and the source's
    # key serde is this one; its values are then bytes too.
    raw_key_serde: Any = None
    # A node whose record cache forwards its updates: the headers of the
    # record that last updated each key (only while any had headers), which
    # the cache's write-out carries, as Kafka keeps each entry's record context.
    cached_headers: dict[Any, Headers] | None = None

    def __init__(self) -> None:
        self.children = []

    def init(self, task: StreamTask) -> None:
        self.task = task

    @abstractmethod
    def process(self, batch: Batch) -> None: ...

    def native_step(self) -> tuple[str, _core.ExprPlan] | None:
        """This node as a step of a fused native pipeline (``("filter",
        plan)``, see ``_core.ExprPipeline``), or None if it runs Python."""
        return None

    def forward(self, batch: Batch) -> None:
        if batch.encoded is not None and not all(c.takes_encoded for c in self.children):
            batch = batch.decoded()
        if self.forward_per_record and len(batch) > 1 and len(self.children) > 1:
            for i in range(len(batch)):
                one = batch.select([i])
                for child in self.children:
                    deliver(child, one)
        elif len(batch):
            for child in self.children:
                deliver(child, batch)

    def forward_cache_flushes(
        self, store: Any, listener: Callable[[list[Any]], None] | None = None
    ) -> None:
        """Has ``store``'s record cache hand what it writes out to
        ``listener`` (``forward_flushed``), with the updates' headers."""
        store.listener = self.forward_flushed if listener is None else listener
        # Per store, not per node: a cogroup's nodes write one cache, whose
        # entries keep the headers of whichever record last updated them.
        self.cached_headers = self.task.cached_headers(store)

    def remember_headers(self, batch: Batch) -> None:
        """Notes the headers of ``batch``'s records by key (see ``cached_headers``)."""
        remembered = self.cached_headers
        assert remembered is not None
        headers = self.task.record_headers(batch)
        keys = batch.keys
        if batch.raw_keys and (headers is not None or remembered):
            keys = [self.raw_key_serde.deserialize(batch.topic, k) for k in keys]
        if headers is not None:
            for key, h in zip(keys, headers, strict=True):
                if h:
                    remembered[key] = h
                else:
                    remembered.pop(key, None)
        elif remembered:
            for key in keys:
                remembered.pop(key, None)

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
        records the task processed last, with the headers of the records
        that last updated them."""
        headers = None
        if remembered := self.cached_headers:
            # A windowed store's entries are keyed by window too.
            headers = [remembered.get(k.key if isinstance(k, Windowed) else k) for k in keys]
        return Batch(
            self.task.current_topic, -1, keys, news, stamps, [-1] * len(keys), olds, headers
        )

    def flush(self) -> None:  # noqa: B027 - an optional hook
        """Called on commit, before the task's output is flushed."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Called when the task closes."""

    # --- user code, record by record ------------------------------------------
    # A batch runs through a node in one go; the index of a record whose
    # processing raises is read off the iterator the loop was taking records
    # from (length_hint: how many it has left), so the loop itself carries
    # no per-record bookkeeping.
    def call_each(
        self, batch: Batch, fn: Callable[..., Any], *columns: list[Any]
    ) -> tuple[list[Any], Batch]:
        """``fn`` called once per record of ``batch`` with that record's
        ``columns`` (``fn(key, value)`` over ``batch.keys, batch.values``),
        with no Python around each call. Returns the results and the batch
        they belong to: ``batch`` itself, or its other records when the
        ``processing.exception.handler`` skipped records ``fn`` failed on."""
        first, *rest = [iter(column) for column in columns]
        if not rest and self.task.config["processing.exception.handler"] == "log_and_fail":
            # A comprehension is faster with one argument (~10%); what it
            # computed is lost if a record fails, but then the task fails.
            try:
                return [fn(x) for x in first], batch
            except Exception as exc:
                self._failed_at(batch, first, exc)
                raise  # not reached: log_and_fail raised
        out: list[Any] = []
        skipped: list[int] = []
        while True:
            try:
                # extend() keeps the results before a failure, and the
                # iterators go on after the failed record.
                out.extend(map(fn, first, *rest))
            except Exception as exc:
                skipped.append(self._failed_at(batch, first, exc))
                continue
            if len(out) + len(skipped) < len(batch):
                # fn raised StopIteration, which map() took for its end.
                stopped = RuntimeError(f"{fn!r} raised StopIteration")
                skipped.append(self._failed_at(batch, first, stopped))
                continue
            return out, without(batch, skipped)

    def each_record(self, batch: Batch, run: Callable[..., None], *columns: list[Any]) -> list[int]:
        """Calls ``run(indices)``, which processes the records of ``batch``
        whose indices it takes from the iterator, in that order; or, given
        ``columns``, ``run(*iterators)`` over them, taken in step (zipped,
        the first one first). If it raises, the record it took last failed;
        when the ``processing.exception.handler`` skips that record, ``run``
        is called again with the same iterators, to go on with the next one
        (what it did for the failed record before the failure stays done,
        as in Kafka). Returns the indices of the skipped records."""
        taken = [iter(column) for column in columns] or [iter(range(len(batch)))]
        skipped: list[int] = []
        while True:
            try:
                run(*taken)
            except Exception as exc:
                skipped.append(self._failed_at(batch, taken[0], exc))
                continue
            return skipped

    def matching(self, batch: Batch, verdicts: list[Any], wanted: bool = True) -> list[int]:
        """The indices of the records whose predicate said ``wanted``
        (``verdicts`` from ``call_each``). A verdict whose truth cannot be
        told (an array's) is its record's failure."""
        truths = verdicts if wanted else map(not_, verdicts)
        try:
            return list(compress(range(len(verdicts)), truths))
        except Exception:
            kept = []
            for i, verdict in enumerate(verdicts):
                try:
                    if bool(verdict) is wanted:
                        kept.append(i)
                except Exception as exc:  # noqa: PERF203 - finding the failed record
                    self.record_failed(batch, i, exc)
            return kept

    def _failed_at(self, batch: Batch, taken: Iterator[Any], exc: Exception) -> int:
        """The index of the record last taken from ``taken`` (an iterator
        over the batch's records or one of its columns), after
        ``record_failed``."""
        index = len(batch) - length_hint(taken) - 1
        if index < 0:
            raise exc  # nothing was taken: not a record's failure
        self.record_failed(batch, index, exc)
        return index

    def record_failed(self, batch: Batch, index: int, exc: Exception) -> None:
        """Record ``index`` of ``batch`` failed at this node: returns if the
        ``processing.exception.handler`` skips it (counted in
        ``dropped-records``), else raises a TaskError naming the task, the
        node and the record (its topic, partition, offset and key)."""
        task = self.task
        offset, timestamp, key = batch.offsets[index], batch.timestamps[index], batch.keys[index]
        raw_key, raw_value = task.input_bytes(batch.topic, batch.partition, offset)
        headers = task.record_headers(batch)
        context = ErrorHandlerContext(
            batch.topic,
            batch.partition,
            offset,
            timestamp,
            self.name,
            task.task_id,
            raw_key,
            raw_value,
            headers_at(headers, index),
        )
        record = Record(key, batch.values[index], timestamp)
        if offset >= 0:
            where = f"record {batch.topic}-{batch.partition}@{offset} (key={key!r})"
        else:  # a record cache wrote it out: its entries keep no input offset
            where = f"a record of {batch.topic} with key {key!r} (offset unknown: from a cache)"
        processing_failed(task, context, record, exc, where)

    def value_not_json(self, batch: Batch, index: int, message: str) -> None:
        """Record ``index``'s value, JSON bytes a native step read, is not
        JSON: the deserialization handler's, as if the source had read it
        (returns if it skips the record, else raises)."""
        self.task.deserialization_failed(
            batch.topic,
            batch.partition,
            batch.offsets[index],
            batch.timestamps[index],
            None,  # the key was read at the source; its bytes are not kept
            batch.values[index],
            "value",
            SerializationError(f"Json serde cannot deserialize: {message}"),
        )


def headers_at(headers: list[Headers | None] | None, i: int) -> Headers:
    """Record ``i``'s headers from ``StreamTask.record_headers`` ([] for none)."""
    return (headers[i] or []) if headers is not None else []


def without(batch: Batch, skipped: list[int]) -> Batch:
    """The batch without the records at ``skipped``."""
    if not skipped:
        return batch
    dropped = set(skipped)
    return batch.select([i for i in range(len(batch)) if i not in dropped])


def drop(items: list[Any], skipped: list[int]) -> list[Any]:
    """``items`` without those at ``skipped``."""
    if not skipped:
        return items
    dropped = set(skipped)
    return [item for i, item in enumerate(items) if i not in dropped]


def partitions_function(partitioner: Partitioner) -> Callable[[str, Any, Any, int], Any]:
    """``partitioner`` called as Kafka calls a ``StreamPartitioner``: with
    the topic, the key, the value and the topic's partition count (a plain
    function ``fn(key, value, num_partitions)`` is not given the topic)."""
    if isinstance(partitioner, StreamPartitioner):
        return partitioner.partitions
    if not callable(partitioner):
        raise TypeError(
            f"a partitioner is a StreamPartitioner or a function "
            f"fn(key, value, num_partitions), got {partitioner!r}"
        )
    return lambda _topic, key, value, count: partitioner(key, value, count)


def checked_partitions(answer: Any, count: int) -> tuple[int, ...] | None:
    """A partitioner's answer for a record as partitions: None (the default
    partitioner), or the distinct partitions it named, in its order (none:
    drop the record), each checked against the topic's ``count``."""
    if answer is None:
        return None
    try:
        partitions: tuple[int, ...] = (index(answer),)
    except TypeError:
        try:
            partitions = tuple(dict.fromkeys(map(index, answer)))
        except TypeError:
            raise TypeError(
                f"partitioner returned {answer!r}: return a partition (an int), "
                "a collection of partitions, or None for the default partitioner"
            ) from None
    for p in partitions:
        if not 0 <= p < count:
            raise ValueError(f"partitioner returned {p}, topic has {count} partitions")
    return partitions


def one_partition(answer: Any, count: int, what: str) -> int | None:
    """A partitioner's answer where one partition is wanted (a foreign-key
    join's internal topics, a key's query metadata, as Kafka's): None for
    the default partitioner, else the one partition it named."""
    partitions = checked_partitions(answer, count)
    if partitions is None:
        return None
    if len(partitions) != 1:
        raise ValueError(f"{what}: the partitioner returned {answer!r}; it must name one partition")
    return partitions[0]


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
        partitioner: Partitioner | None,
        topic_extractor: Callable[[Any, Any, RecordContext], str] | None = None,
    ) -> None:
        super().__init__()
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.partitioner = partitioner
        if partitioner is not None:
            partitions_function(partitioner)  # refuses what is not a partitioner
        self.topic_extractor = topic_extractor
        # String keys and values with the default partitioner: the producer
        # may serialize them natively as it buffers them.
        self.strings = (
            type(key_serde) is String and type(value_serde) is String and partitioner is None
        )

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

        headers = self.task.record_headers(batch)
        raw_input = self.task.input_bytes

        def run(indices: Iterator[int]) -> None:
            keys, values, offsets, stamps = (
                batch.keys,
                batch.values,
                batch.offsets,
                batch.timestamps,
            )
            for i in indices:
                context = RecordContext(
                    batch.topic,
                    batch.partition,
                    offsets[i],
                    stamps[i],
                    headers_at(headers, i),
                    partial(raw_input, batch.topic, batch.partition, offsets[i]),
                )
                by_topic.setdefault(extract(keys[i], values[i], context), []).append(i)

        self.each_record(batch, run)
        for topic, indices in by_topic.items():
            self._send(topic, batch.select(indices))

    def _send(self, topic: str, batch: Batch) -> None:
        task = self.task
        if (
            self.strings
            and batch.encoded is None
            and task.record_headers(batch) is None  # the native string send has no headers
            and task.collector.send_strings(topic, batch.keys, batch.values, batch.timestamps)
        ):
            return
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
        partitioner = self.partitioner
        if partitioner is None:
            task.collector.send(
                topic, keys, values, batch.timestamps, None, task.record_headers(batch)
            )
            return
        count = task.partition_count(topic)
        choose = (
            partial(partitioner.partitions, topic)
            if isinstance(partitioner, StreamPartitioner)
            else partitioner
        )
        batch_keys, batch_values = batch.keys, batch.values
        # One partition per record, the common answer, kept as plain ints
        # until a record answers otherwise; then every answer as a tuple.
        single: list[int] = []
        chosen: list[tuple[int, ...] | None] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                answer = choose(batch_keys[i], batch_values[i], count)
                if type(answer) is int and 0 <= answer < count and not chosen:
                    single.append(answer)
                    continue
                if not chosen:
                    chosen.extend((p,) for p in single)
                chosen.append(checked_partitions(answer, count))

        skipped = self.each_record(batch, run)
        if skipped:
            batch, keys, values = (
                without(batch, skipped),
                drop(keys, skipped),
                drop(values, skipped),
            )
        if not chosen:
            task.collector.send(
                topic, keys, values, batch.timestamps, single, task.record_headers(batch)
            )
            return
        self._send_to_partitions(topic, batch, keys, values, chosen)

    def _send_to_partitions(
        self,
        topic: str,
        batch: Batch,
        keys: list[bytes | None],
        values: list[bytes | None],
        chosen: list[tuple[int, ...] | None],
    ) -> None:
        """Sends record ``i`` to each of the partitions ``chosen[i]`` (Kafka's
        RecordCollectorImpl with KIP-837): one copy per partition; none, and
        the record is dropped (counted in ``dropped-records``); None, and the
        producer's default partitioner places it."""
        task = self.task
        timestamps, headers = batch.timestamps, task.record_headers(batch)
        if all(c is not None and len(c) == 1 for c in chosen):  # one partition each
            partitions = [c[0] for c in chosen if c is not None]
            task.collector.send(topic, keys, values, timestamps, partitions, headers)
            return
        copies: list[tuple[int, int | None]] = []  # (record, partition or None)
        dropped = 0
        for i, partitions_of_record in enumerate(chosen):
            if partitions_of_record is None:
                copies.append((i, None))
            elif not partitions_of_record:
                dropped += 1
            else:
                copies.extend((i, p) for p in partitions_of_record)
        if dropped:
            task.metrics.dropped_records += dropped
            log.warning(
                "dropping %d record(s) for topic %s: the partitioner returned no partitions",
                dropped,
                topic,
            )
        # In order, in runs that go to partitions chosen or to the default
        # partitioner's, so each partition gets its records in order.
        for by_default, run in groupby(copies, key=lambda copy: copy[1] is None):
            rows, partitions_of_rows = zip(*run, strict=True)
            task.collector.send(
                topic,
                [keys[i] for i in rows],
                [values[i] for i in rows],
                [timestamps[i] for i in rows],
                None if by_default else cast("list[int]", list(partitions_of_rows)),
                None if headers is None else [headers[i] for i in rows],
            )

    def _serialize_one_by_one(
        self, topic: str, batch: Batch
    ) -> tuple[Batch, list[bytes | None], list[bytes | None]]:
        """The slow path after a batch failed to serialize: each bad record
        goes to the ``production.exception.handler`` (Kafka's KIP-399), which
        drops it (counted in ``dropped-records``) or fails the task."""
        handler = self.task.config["production.exception.handler"]
        keep: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        headers = self.task.record_headers(batch)
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
                    headers=headers_at(headers, i),
                )
                record = FailedRecord(topic, -1, key, value, batch.timestamps[i])
                message = (
                    f"cannot serialize the {what} of a record for topic {topic}"
                    f"{describe_source(context)} in task {self.task.task_id}: "
                    f"{type(exc).__name__}: {exc}"
                )
                # The input record's raw bytes are not in the context: the
                # dead letter's headers name it.
                go_on = handle_failure(
                    self.task,
                    handler,
                    context,
                    record,
                    exc,
                    setting="production.exception.handler",
                    subject="a record",
                    error=ProductionError,
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
