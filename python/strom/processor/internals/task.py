"""A stream task: one partition of one sub-topology, with its nodes and stores."""

from __future__ import annotations

import bisect
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from strom import _core
from strom.errors import (
    ConfigError,
    ErrorHandlerContext,
    FailedRecord,
    SerializationError,
    StoreError,
)
from strom.processor.api import Headers
from strom.processor.internals.batch import Batch
from strom.processor.internals.error_handling import handle_failure
from strom.processor.internals.metrics import DEBUG, Sensor, recording_level
from strom.processor.internals.nodes import Node, PassThrough, SinkNode, deliver
from strom.processor.internals.processor_node import PunctuationQueue
from strom.processor.internals.state_manager import ChangelogRange, StateManager
from strom.processor.internals.topology_builder import (
    InternalTopologyBuilder,
    ProcessorDef,
    SinkDef,
    SourceDef,
    StoreDef,
    Subtopology,
)
from strom.serdes import ByteArray, Json, String, WrappingSerde
from strom.state.internals.metered import MeteredStore
from strom.state.internals.registry import store_kind, typed_value_serde
from strom.state.stores import KEY_VALUE

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.serdes import Serde

log = logging.getLogger("strom.task")


class InputRecords(Protocol):
    """Records of one input partition, columnar (the native ``RecordBatch``
    has this shape; the test driver makes its own)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    def __len__(self) -> int: ...
    def keys(self) -> list[bytes | None]: ...
    def values(self) -> list[bytes | None]: ...
    def offsets(self) -> list[int]: ...
    def timestamps(self) -> list[int]: ...
    def headers(self) -> list[Headers]: ...
    def has_headers(self) -> bool: ...


@dataclass
class ListedRecords:
    """``InputRecords`` held in Python lists: what the test driver pipes,
    where no native ``RecordBatch`` exists (a Spark replay builds those)."""

    topic: str
    partition: int
    _keys: list[bytes | None]
    _values: list[bytes | None]
    _timestamps: list[int]
    _offsets: list[int]
    _headers: list[Headers] | None = None

    def __len__(self) -> int:
        return len(self._keys)

    def headers(self) -> list[Headers]:
        return self._headers or [[] for _ in self._keys]

    def has_headers(self) -> bool:
        return self._headers is not None and any(self._headers)

    def keys(self) -> list[bytes | None]:
        return self._keys

    def values(self) -> list[bytes | None]:
        return self._values

    def timestamps(self) -> list[int]:
        return self._timestamps

    def offsets(self) -> list[int]:
        return self._offsets


@dataclass
class _Queued:
    batch: Batch
    end_offset: int  # the offset after the raw batch (records may have been dropped)
    # As read: a record that fails to process names its bytes (dead letters).
    records: InputRecords | None = None
    position: int = 0


@dataclass
class _Queue:
    """One input partition's deserialized records waiting to be processed."""

    partition_time: int = -1
    batches: deque[_Queued] = field(default_factory=deque)
    processed_to: int | None = None
    skipped_to: int | None = None

    def head_timestamp(self) -> int:
        head = self.batches[0]
        return head.batch.timestamps[head.position]

    def take_run(self, bound: int | None) -> Batch:
        """The head records up to the first one whose timestamp exceeds
        ``bound`` (at least one record)."""
        head = self.batches[0]
        batch, start = head.batch, head.position
        stop = len(batch)
        if bound is not None:
            stamps = batch.timestamps
            stop = start + 1
            while stop < len(batch) and stamps[stop] <= bound:
                stop += 1
        run = batch if start == 0 and stop == len(batch) else batch.select(list(range(start, stop)))
        if stop == len(batch):
            self.batches.popleft()
            self.processed_to = head.end_offset
        else:
            head.position = stop
            self.processed_to = batch.offsets[stop - 1] + 1
        return run

    def committable(self) -> int | None:
        offsets = [o for o in (self.processed_to, self.skipped_to) if o is not None]
        if not self.batches and offsets:
            return max(offsets)
        return self.processed_to


@dataclass
class TaskMetrics:
    records_processed: int = 0
    dropped_records: int = 0
    skipped_records: int = 0


class RecordCollector:
    """Collects a thread's output (sinks and changelogs) into its producer."""

    def __init__(self, producer: Any, topic_partitions: Callable[[str], int]) -> None:
        self.producer = producer
        self.partition_count = topic_partitions

    def send(
        self,
        topic: str,
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        timestamps: Sequence[int],
        partitions: Sequence[int] | None,
        headers: Sequence[Headers | None] | None = None,
    ) -> None:
        if keys:
            self.producer.produce_columns(
                topic, keys, values, timestamps, partitions, headers=headers
            )

    def send_strings(
        self,
        topic: str,
        keys: list[str | None],
        values: list[str | None],
        timestamps: list[int],
    ) -> bool:
        """``send`` of keys and values for the String serde, serialized by a
        producer that can (the embedded log's); False, having sent nothing,
        where it cannot or a key or value is not a ``str`` it can encode."""
        produce = getattr(self.producer, "produce_strings", None)
        return produce is not None and (not keys or produce(topic, keys, values, timestamps))

    def native_string_producer(self) -> Any:
        """The producer ``_core.flat_map_select_strings`` buffers into (the
        embedded log's native one, which ``send_strings`` uses), or None."""
        if not hasattr(self.producer, "produce_strings"):
            return None
        return self.producer.native

    def send_record(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: list[tuple[str, bytes | None]],
        *,
        durable: bool = False,
    ) -> None:
        """One record with headers (a dead letter); ``durable``: flushed now,
        because the task is about to fail. Collectors without a producer
        (those that capture columns) get it as a one-record send."""
        if self.producer is None:
            self.send(topic, [key], [value], [timestamp], None, [headers])
            return
        stamp = timestamp if timestamp >= 0 else None  # unknown: the producer's now
        self.producer.produce(topic, key, value, timestamp=stamp, headers=headers)
        if durable:
            try:
                self.producer.flush()
            except Exception:  # the failure being reported matters more
                log.warning("flushing the dead letter for %s failed", topic, exc_info=True)

    def flush(self) -> None:
        self.producer.flush()


def _index_of(records: InputRecords | None, topic: str, partition: int, offset: int) -> int | None:
    """Where input record ``topic-partition@offset`` is among ``records``."""
    if records is None or (records.topic, records.partition) != (topic, partition) or offset < 0:
        return None
    offsets = records.offsets()
    i = bisect.bisect_left(offsets, offset)
    return i if i < len(offsets) and offsets[i] == offset else None


@dataclass(frozen=True)
class _Fused:
    """A sub-topology run natively, batch by batch: from its source through
    its expression steps to its sink's ``topic``, by the thread's producer
    (the embedded log's or Kafka's, whose ``produce_fused`` takes a batch
    read by the native consumer)."""

    producer: Any
    topic: str
    pipeline: _core.ExprPipeline
    source: Node  # counts the records the pipeline takes (its steps are not nodes then)


@dataclass(frozen=True)
class _ConsumedView:
    """What a timestamp extractor receives: the record, deserialized."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any


class StreamTask:
    """One partition of one sub-topology: its nodes, its stores, and the
    queues of its input partitions. Made by a :class:`TaskFactory`."""

    def __init__(
        self,
        factory: TaskFactory,
        subtopology: Subtopology,
        partition: int,
        task_id: str,
        cache: _core.NativeThreadCache | None,
    ) -> None:
        builder, config, topic_name = factory.builder, factory.config, factory.topic_name
        self.task_id = task_id
        # Global stores belong to the global task; every task may read them.
        self.global_stores = factory.global_stores
        self._cache = cache
        self.partition = partition
        self.config = config
        self.collector = factory.collector
        self.metrics = TaskMetrics()
        # record-lateness (DEBUG), set by the thread's metrics when recorded.
        self.lateness: Sensor | None = None
        # The stores behind Kafka's metered layer (DEBUG), by name.
        self.metered_stores: dict[str, MeteredStore] = {}
        self._meter_stores = recording_level(config) >= DEBUG
        self._topic_name = topic_name
        # Typed stores by name (each behind its record cache when cached).
        self.stores: dict[str, Any] = {}
        self._store_defs = builder.stores
        # The caching stores: flushed on commit, closed with the task.
        self._caching: list[Any] = []
        # What else closes with the task, after its nodes (value getters'
        # transformers).
        self._on_close: list[Callable[[], None]] = []
        # Per caching store: the headers of the record that last updated each key.
        self._cached_headers: dict[int, dict[Any, Headers]] = {}
        self.changelogs: dict[str, str] = {}
        # Read-only stores and the source topics they are restored from
        # (their changelogs, which they do not write).
        self.source_changelogs: dict[str, str] = {}
        # Logged native stores and their changelog topics.
        self._logged: list[tuple[Any, str]] = []
        self.state = StateManager(
            self.task_id, factory.state_dir / self.task_id, partition, factory.changelog_range
        )
        self.queues: dict[tuple[str, int], _Queue] = {}
        self._committed_times: dict[tuple[str, int], str] = {}
        # This task's input partitions (a smaller topic may lack partition p).
        self._input_partitions = [
            (name, partition)
            for name in map(topic_name, subtopology.source_topics)
            if partition < self.collector.partition_count(name)
        ]
        self.stream_time_punctuations = PunctuationQueue()
        self.wall_clock_punctuations = PunctuationQueue()
        self.commit_requested = False
        # The timestamp of the record (or punctuation) being processed.
        self.current_timestamp = -1
        # The input topic of the records being processed: what a record
        # cache's entries were written under (Kafka keeps the record context
        # with each entry; a suppression buffer sizes records by it).
        self.current_topic = ""
        # The input records (as read) of the run being processed, and the
        # headers of those that have any, by offset (None: not looked at yet).
        self._processing: InputRecords | None = None
        self._input_headers: dict[int, Headers] | None = None
        # The records being deserialized (a bad one's headers go to the handler).
        self._reading: InputRecords | None = None
        self._wall_clock = factory.wall_clock or (lambda: time.time_ns() // 1_000_000)
        app_id = config.application_id
        for store_name in subtopology.stores:
            store_def = builder.stores[store_name]
            source_topic = builder.source_changelogs.get(store_name)
            if source_topic is not None:
                source_topic = self.source_changelogs[store_name] = topic_name(source_topic)
                native = self.state.open(store_def, source_topic, from_source=True)
                self.stores[store_name] = self._typed_store(store_def, native)
                continue
            changelog_topic = f"{app_id}-{store_name}-changelog" if store_def.logged else None
            native = self.state.open(store_def, changelog_topic)
            if changelog_topic is not None:
                self.changelogs[store_name] = changelog_topic
                native.enable_changelog()
                self._logged.append((native, changelog_topic))
            self.stores[store_name] = self._typed_store(store_def, native)
        # Stream time survives restarts through the stores' commits.
        self.stream_time = self.state.stream_time

        # Fresh node instances per task, wired like the definitions.
        self.node_stores = {
            name: list(node_def.stores)
            for name in subtopology.nodes
            if isinstance(node_def := builder.nodes[name], ProcessorDef)
        }
        self.nodes: dict[str, Node] = {}
        self.sources: dict[str, tuple[Node, SourceDef]] = {}
        for name in subtopology.nodes:
            node_def = builder.nodes[name]
            node = self._instantiate(node_def)
            node.name = name
            self.nodes[name] = node
            if isinstance(node_def, SourceDef):
                for topic in node_def.topics:
                    self.sources[topic_name(topic)] = (node, node_def)
        for name in subtopology.nodes:
            node_def = builder.nodes[name]
            if not isinstance(node_def, SinkDef):
                self.nodes[name].children = [self.nodes[c] for c in node_def.children]
        for node in self.nodes.values():
            node.init(self)
        self._fused = self._fuse(subtopology)
        # Records the fused pipeline processed since ``process_ready`` last counted.
        self._fused_processed = 0

    def _fuse(self, subtopology: Subtopology) -> _Fused | None:
        """The native pipeline of a sub-topology that reads one partition
        and whose steps from its source to its sink are all expressions over
        ``Json`` values (``filter``, ``filter_not``, ``map_values`` of a
        ``struct``), keys passing through as bytes; None for any other (and
        where the output has no native producer: the test driver, a replay)."""
        producer = self.collector.producer
        if not hasattr(producer, "produce_fused") or subtopology.stores:
            return None
        if len(self.sources) != 1 or len(self._input_partitions) != 1:
            return None
        ((node, source),) = self.sources.values()
        source_node = node
        if (source.timestamp_extractor or self.config["default.timestamp.extractor"]) is not None:
            return None
        # Without raising for a missing serde: the ordinary path reports it.
        keys = source.key_serde or self.config["default.key.serde"]
        values = source.value_serde or self.config["default.value.serde"]
        if not isinstance(values, Json) or type(keys) not in (String, ByteArray):
            return None
        steps: list[tuple[str, _core.ExprPlan]] = []
        while len(node.children) == 1:
            node = node.children[0]
            if isinstance(node, SinkNode):
                plain = node.partitioner is None and node.topic_extractor is None
                if not plain or node.key_serde != keys or node.value_serde != values:
                    return None
                pipeline = _core.ExprPipeline(steps, utf8_keys=isinstance(keys, String))
                return _Fused(producer, node.topic, pipeline, source_node)
            step = node.native_step()
            if step is None:
                return None
            steps.append(step)
        return None

    def _typed_store(self, store_def: StoreDef, native: Any) -> Any:
        """The typed store over an opened native one (serdes in Python),
        behind the thread's record cache when the store is cached."""
        name = store_def.name
        kind = store_kind(store_def)
        keys = self._serde(store_def.key_serde, "default.key.serde", name)
        values = self._serde(store_def.value_serde, "default.value.serde", name)
        clock = lambda: self.current_timestamp  # noqa: E731 - the changelog's timestamps
        typed = kind.typed(store_def, keys, typed_value_serde(store_def, values), native, clock)
        if store_def.caching and self._cache is not None:
            typed = kind.caching(typed, self._cache, f"{self.task_id}-{name}", clock)
            self._caching.append(typed)
        if self._meter_stores:
            typed = self._metered(store_def, typed)
        return typed

    def _metered(self, store_def: StoreDef, store: Any) -> MeteredStore:
        flavour = "persistent" if store_def.persistent else "in-memory"
        suffix = "" if store_def.kind == KEY_VALUE else f"-{store_def.kind}"
        window_ms, samples = (
            self.config["metrics.sample.window.ms"],
            self.config["metrics.num.samples"],
        )
        metered = MeteredStore(store, flavour + suffix, lambda: Sensor(window_ms, samples))
        self.metered_stores[store_def.name] = metered
        if self._caching and self._caching[-1] is store:  # a commit's flush is metered too
            self._caching[-1] = metered
        return metered

    def _serde(self, serde: Serde[Any] | None, default_key: str, where: str) -> Serde[Any]:
        chosen = serde if serde is not None else self.config[default_key]
        if chosen is None:
            raise ConfigError(
                f"{where!r} has no serde: pass one in the DSL call or set {default_key!r}"
            )
        if isinstance(chosen, WrappingSerde):
            # A composite value around a serde the DSL did not know.
            return chosen.with_default(self.config["default.value.serde"], where)
        return chosen

    def _send_changelogs(self) -> None:
        """Hands what the logged stores wrote since the last call to the
        record collector, a store's writes as one batch of columns."""
        for native, topic in self._logged:
            keys, values, timestamps = native.take_changelog()
            if keys:
                self.collector.send(topic, keys, values, timestamps, [self.partition] * len(keys))

    def _instantiate(self, node_def: SourceDef | ProcessorDef | SinkDef) -> Node:
        if isinstance(node_def, SourceDef):
            return PassThrough()
        if isinstance(node_def, ProcessorDef):
            return node_def.supplier()
        sink: SinkNode = SinkNode(
            self._topic_name(node_def.topic),
            self._serde(node_def.key_serde, "default.key.serde", node_def.name),
            self._serde(node_def.value_serde, "default.value.serde", node_def.name),
            node_def.partitioner,
            node_def.topic_extractor,
        )
        return sink

    # --- runtime hooks ------------------------------------------------------
    def store(self, name: str) -> Any:
        store = self.stores.get(name)
        if store is None:
            store = self.global_stores.get(name)
        if store is None:
            raise StoreError(f"task {self.task_id} has no state store named {name!r}")
        return store

    def key_value_store(self, name: str) -> Any:
        """A KeyValueStore, or the CachingKeyValueStore in front of one."""
        store = self.store(name)
        store_def = self._store_defs.get(name)
        if store_def is not None and store_def.kind != KEY_VALUE:
            raise StoreError(f"state store {name!r} is not a key-value store")
        return store

    def partition_count(self, topic: str) -> int:
        return self.collector.partition_count(topic)

    # --- input: Kafka's PartitionGroup ----------------------------------------
    def add_records(self, records: InputRecords) -> None:
        """Deserializes a polled batch (timestamps extracted, bad records
        handled) into its partition's queue."""
        key = (records.topic, records.partition)
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = _Queue(self._restored_partition_time(key))
        if not queue.batches and self._run_fused(records, queue):
            return
        if not len(records):
            return
        end = (
            records.next_offset
            if isinstance(records, _core.RecordBatch)
            else records.offsets()[-1] + 1
        )
        self._reading = records
        try:
            batch = self._deserialize(records, self.sources[records.topic][1], queue)
        finally:
            self._reading = None
        if batch is None:
            queue.skipped_to = end  # every record dropped: still consumed
        else:
            queue.batches.append(_Queued(batch, end, records))

    def input_partitions(self) -> list[tuple[str, int]]:
        """The (physical topic, partition) pairs this task reads."""
        return list(self._input_partitions)

    def _run_fused(self, records: InputRecords, queue: _Queue) -> bool:
        """Processes a batch read from the log in one native call, if the
        task has a fused pipeline and the batch is clean; False when it is to
        take the ordinary path (whose nodes hand bad records to the handlers).
        With one input partition and nothing queued, processing it now is
        processing it in order."""
        fused = self._fused
        if fused is None or not isinstance(records, _core.RecordBatch) or records.has_headers():
            return False  # the native pipeline does not carry headers
        done = fused.producer.produce_fused(fused.topic, records, fused.pipeline)
        if done is None:
            return False
        max_timestamp, end = done
        count = len(records)
        fused.source.records_in += count
        self.current_topic = records.topic
        self.metrics.records_processed += count
        self._fused_processed += count
        if self.lateness is not None:
            self._record_lateness(records.timestamps())
        self.stream_time = max(self.stream_time, max_timestamp)
        queue.partition_time = max(queue.partition_time, max_timestamp)
        queue.processed_to = end
        return True

    def process(self, records: InputRecords) -> None:
        """Queues the records and processes everything (the test driver and
        the global task: nothing to wait for)."""
        self.add_records(records)
        self.process_ready(lambda _topic, _partition: False)

    def process_ready(self, must_wait: Callable[[str, int], bool]) -> int:
        """Processes queued records in timestamp order across the task's
        partitions: always from the partition whose head record has the
        smallest timestamp, as far as it stays the smallest. While an input
        partition has nothing queued and ``must_wait(topic, partition)``, the
        task waits (Kafka's ``max.task.idle.ms``). Returns records processed;
        what the stores wrote goes to their changelogs."""
        processed = self._process_runs(must_wait) + self._fused_processed
        self._fused_processed = 0
        self._send_changelogs()
        return processed

    def _process_runs(self, must_wait: Callable[[str, int], bool]) -> int:
        processed = 0
        while True:
            ready = [(k, q) for k, q in self.queues.items() if q.batches]
            if not ready:
                return processed
            for topic, partition in self._input_partitions:
                queue = self.queues.get((topic, partition))
                if (queue is None or not queue.batches) and must_wait(topic, partition):
                    return processed
            bound = None
            if len(ready) > 1:
                ready.sort(key=lambda kq: kq[1].head_timestamp())
                bound = ready[1][1].head_timestamp()
            (topic, _), queue = ready[0]
            self._processing = queue.batches[0].records
            self._input_headers = None
            run = queue.take_run(bound)
            node, _source = self.sources[topic]
            self.current_topic = run.topic
            self.metrics.records_processed += len(run)
            processed += len(run)
            if self.lateness is not None:
                self._record_lateness(run.timestamps)
            self.stream_time = max(self.stream_time, run.max_timestamp())
            deliver(node, run)
            self._processing = self._input_headers = None
            self.stream_time_punctuations.may_punctuate(self.stream_time)

    def input_bytes(
        self, topic: str, partition: int, offset: int
    ) -> tuple[bytes | None, bytes | None]:
        """The key and value bytes of input record ``topic-partition@offset``
        as they were read, if it is among the records being processed (else
        Nones: a record a cache wrote out, a punctuation's)."""
        records = self._processing
        i = _index_of(records, topic, partition, offset)
        if records is None or i is None:
            return None, None
        return records.keys()[i], records.values()[i]

    def record_headers(self, batch: Batch) -> list[Headers | None] | None:
        """The headers of ``batch``'s records, or None when none has any:
        their own (``Batch.headers``), else those of the input records they
        came from (Kafka forwards the current record's context), found by
        offset among the records being processed."""
        if batch.headers is not None:
            return batch.headers if any(batch.headers) else None
        by_offset = self._headers_by_offset(batch.topic, batch.partition)
        if not by_offset:
            return None
        headers = [by_offset.get(o) for o in batch.offsets]
        return headers if any(headers) else None

    def _headers_by_offset(self, topic: str, partition: int) -> dict[int, Headers]:
        records = self._processing
        if records is None or (records.topic, records.partition) != (topic, partition):
            return {}
        if self._input_headers is None:
            self._input_headers = (
                {o: h for o, h in zip(records.offsets(), records.headers(), strict=True) if h}
                if records.has_headers()
                else {}
            )
        return self._input_headers

    def _input_record_headers(self, topic: str, partition: int, offset: int) -> Headers:
        """The headers of input record ``topic-partition@offset`` if it is
        being read or processed (else none)."""
        for records in (self._reading, self._processing):
            if records is not None and records.has_headers():
                i = _index_of(records, topic, partition, offset)
                if i is not None:
                    return records.headers()[i]
        return []

    def all_inputs_queued(self) -> bool:
        return all(
            (queue := self.queues.get(key)) is not None and bool(queue.batches)
            for key in self._input_partitions
        )

    def has_queued(self) -> bool:
        return any(q.batches for q in self.queues.values())

    def _record_lateness(self, timestamps: Sequence[int]) -> None:
        """Kafka's record-lateness: how far each record's timestamp is
        behind the stream time it arrives at (0 when not behind)."""
        assert self.lateness is not None
        stream_time, total, worst = self.stream_time, 0, 0
        for ts in timestamps:
            if ts < stream_time:
                total += stream_time - ts
                worst = max(worst, stream_time - ts)
            else:
                stream_time = ts
        self.lateness.record(total, len(timestamps), worst)

    def committable_offsets(self) -> dict[tuple[str, int], tuple[int, str]]:
        """Per input partition: the offset after the last record processed
        (or dropped), with the partition time as offset metadata."""
        out = {}
        for key, queue in self.queues.items():
            offset = queue.committable()
            if offset is not None:
                out[key] = (offset, str(queue.partition_time))
        return out

    def restore_partition_times(self, committed: dict[tuple[str, int], str]) -> None:
        """Partition times committed as offset metadata by an earlier run."""
        self._committed_times = committed

    def _restored_partition_time(self, key: tuple[str, int]) -> int:
        raw = self._committed_times.get(key, "")
        return int(raw) if raw.lstrip("-").isdigit() else -1

    def wall_clock_ms(self) -> int:
        return self._wall_clock()

    def maybe_punctuate_wall_clock(self) -> bool:
        punctuated = self.wall_clock_punctuations.may_punctuate(self.wall_clock_ms())
        self._send_changelogs()
        return punctuated

    def cached_headers(self, store: Any) -> dict[Any, Headers]:
        """The headers ``store``'s record cache keeps by key, shared by the
        nodes that write it (see ``Node.cached_headers``)."""
        return self._cached_headers.setdefault(id(store), {})

    def flush(self) -> None:
        """On commit: the caches write and forward their dirty entries first,
        then the nodes flush, then what the stores wrote goes to their
        changelogs."""
        for store in self._caching:
            store.flush()
        for node in self.nodes.values():
            if node.cached_headers:
                node.cached_headers.clear()  # every entry written out
            node.flush()
        self._send_changelogs()

    def commit_state(self, changelog_ends: dict[str, int]) -> None:
        """After the output is durable: commits the stores with the changelog
        offsets they reflect (``changelog_ends`` by changelog topic; a
        read-only store: the offset its source is processed up to)."""
        self.state.stream_time = self.stream_time
        ends = {store: changelog_ends[topic] for store, topic in self.changelogs.items()}
        if self.source_changelogs:
            processed = self.committable_offsets()
            for store, topic in self.source_changelogs.items():
                if (topic, self.partition) in processed:
                    ends[store] = processed[(topic, self.partition)][0]
        self.state.commit(ends)

    def on_close(self, close: Callable[[], None]) -> None:
        """Runs ``close`` when the task closes, after its nodes."""
        self._on_close.append(close)

    def close(self) -> None:
        for node in self.nodes.values():
            node.close()
        for close in self._on_close:
            close()
        for store in self._caching:
            store.close()
        self.state.close()

    # --- input --------------------------------------------------------------
    def _deserialize(self, records: InputRecords, source: SourceDef, queue: _Queue) -> Batch | None:
        topic, partition = records.topic, records.partition
        key_serde = self._serde(source.key_serde, "default.key.serde", source.name)
        value_serde = self._serde(source.value_serde, "default.value.serde", source.name)
        extractor = source.timestamp_extractor or self.config["default.timestamp.extractor"]
        # JSON values stay bytes when every child of the source takes them so
        # (native expression steps, a sink with the same serde, …).
        children = self.sources[topic][0].children
        encoded = (
            value_serde
            if extractor is None
            and isinstance(value_serde, Json)
            and children
            and all(c.takes_encoded for c in children)
            else None
        )
        raw_values = records.values() if encoded is not None else None
        if (
            raw_values is not None
            and not all(getattr(c, "reads_json", False) for c in children)
            and _core.json_errors(raw_values)
        ):
            # A child that does not parse them (a sink) would pass a bad one
            # on: read this batch the ordinary way, which finds and handles it.
            encoded = None
        # Keys and values stay the bytes read for a child that takes them so
        # (a cached count), checked as their serdes would but not decoded.
        raw = (
            extractor is None
            and len(children) == 1
            and children[0].raw_key_serde is not None
            and children[0].raw_key_serde == key_serde
            and type(key_serde) in (String, ByteArray)
            and type(value_serde) in (String, ByteArray)
            and (
                _core.read_utf8(
                    records, isinstance(key_serde, String), isinstance(value_serde, String)
                )
                if isinstance(records, _core.RecordBatch)
                else all(
                    _core.all_utf8(column)
                    for serde, column in (
                        (key_serde, records.keys()),
                        (value_serde, records.values()),
                    )
                    if isinstance(serde, String)
                )
            )
        )
        if raw and isinstance(records, _core.RecordBatch):
            low, high = _core.timestamp_range(records) or (0, -1)
            if low >= 0:
                # Left as read (not empty): the child reads it natively.
                queue.partition_time = max(queue.partition_time, high)
                return Batch.of_read(records, key_serde, value_serde)
        raw_keys = records.keys()
        if raw_values is None:
            raw_values = records.values()
        offsets, timestamps = records.offsets(), records.timestamps()
        try:
            keys = raw_keys if raw else key_serde.deserialize_batch(topic, raw_keys)
            values = (
                raw_values if encoded or raw else value_serde.deserialize_batch(topic, raw_values)
            )
            native = extractor is None and isinstance(records, _core.RecordBatch)
            read = (records, key_serde, value_serde) if native else None
        except SerializationError:
            raw = False
            read = None
            kept = self._deserialize_one_by_one(
                topic, partition, raw_keys, raw_values, offsets, key_serde, value_serde, timestamps
            )
            encoded = None  # the values were read on the way
            keys = [k for k, _, _ in kept]
            values = [v for _, v, _ in kept]
            timestamps = [timestamps[i] for _, _, i in kept]
            offsets = [offsets[i] for _, _, i in kept]

        if extractor is not None:
            partition_time = queue.partition_time
            extracted = []
            for i in range(len(keys)):
                view = _ConsumedView(
                    topic, partition, offsets[i], timestamps[i], keys[i], values[i]
                )
                ts = int(extractor(view, partition_time))
                extracted.append(ts)
                partition_time = max(partition_time, ts)
            timestamps = extracted
        # While the timestamps are the batch's as read, compared natively.
        if read is not None and isinstance(records, _core.RecordBatch):
            low, high = _core.timestamp_range(records) or (0, -1)
        else:
            low, high = (min(timestamps), max(timestamps)) if timestamps else (0, -1)
        if low < 0:
            keep = [i for i, ts in enumerate(timestamps) if ts >= 0]
            dropped = len(timestamps) - len(keep)
            self.metrics.dropped_records += dropped
            log.warning(
                "task %s: dropped %d record(s) of %s-%d with a negative timestamp",
                self.task_id,
                dropped,
                topic,
                partition,
            )
            keys = [keys[i] for i in keep]
            values = [values[i] for i in keep]
            timestamps = [timestamps[i] for i in keep]
            offsets = [offsets[i] for i in keep]
            read = None
            high = max(timestamps, default=-1)
        if not keys:
            return None
        queue.partition_time = max(queue.partition_time, high)
        return Batch(
            topic,
            partition,
            keys,
            values,
            timestamps,
            offsets,
            encoded=encoded,
            raw_keys=raw,
            read=read,
        )

    def _deserialize_one_by_one(
        self,
        topic: str,
        partition: int,
        raw_keys: list[bytes | None],
        raw_values: list[bytes | None],
        offsets: list[int],
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        timestamps: list[int] | None = None,
    ) -> list[tuple[Any, Any, int]]:
        """The slow path after a batch failed: finds the bad records and
        applies the deserialization exception handler to each."""
        kept = []
        for i in range(len(raw_keys)):
            what = "key"
            try:
                key = key_serde.deserialize(topic, raw_keys[i])
                what = "value"
                value = value_serde.deserialize(topic, raw_values[i])
            except SerializationError as exc:
                stamp = timestamps[i] if timestamps is not None else -1
                self.deserialization_failed(
                    topic, partition, offsets[i], stamp, raw_keys[i], raw_values[i], what, exc
                )
                continue
            kept.append((key, value, i))
        return kept

    def deserialization_failed(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        raw_key: bytes | None,
        raw_value: bytes | None,
        what: str,
        exc: SerializationError,
    ) -> None:
        """Applies the ``deserialization.exception.handler`` to a record that
        cannot be read: returns if the record is to be skipped (counted), raises
        if the task is to fail."""
        handler = self.config["deserialization.exception.handler"]
        error = SerializationError(
            f"cannot deserialize the {what} of record {topic}-{partition}@{offset} "
            f"in task {self.task_id}: {exc}"
        )
        context = ErrorHandlerContext(
            topic,
            partition,
            offset,
            timestamp,
            None,
            self.task_id,
            raw_key,
            raw_value,
            headers=self._input_record_headers(topic, partition, offset),
        )
        if callable(handler) and takes_the_error_only(handler):
            # strom's first signature, fn(error) -> "continue" or "fail".
            handler = _with_the_error_only(handler, error)
        go_on = handle_failure(
            self,
            handler,
            context,
            FailedRecord(topic, partition, raw_key, raw_value, timestamp),
            error,
            setting="deserialization.exception.handler",
            subject=f"record {topic}-{partition}@{offset}",
            error=SerializationError,
            cause=exc,  # the dead letter names the serde's error, as before
        )
        if not go_on:
            raise error from exc
        self.metrics.skipped_records += 1
        log.warning("%s; skipping it (log_and_continue)", error)


def takes_the_error_only(handler: Callable[..., Any]) -> bool:
    """Whether a deserialization handler is strom's first kind, ``fn(error)``,
    rather than Kafka's ``fn(context, record, exception)``."""
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return len(positional) == 1 and not variadic


def _with_the_error_only(
    handler: Callable[[SerializationError], Any], error: SerializationError
) -> Callable[..., Any]:
    return lambda _context, _record, _exc: handler(error)


@dataclass
class TaskFactory:
    """Makes every task of a stream thread (Kafka's ActiveTaskCreator): the
    runtimes, the Kafka global thread and standbys, the test driver and the
    Spark replay all build their tasks here, from what their tasks share."""

    builder: InternalTopologyBuilder
    config: StreamsConfig
    collector: RecordCollector
    # Logical topic name -> physical (the application id's prefix on internal topics).
    topic_name: Callable[[str], str]
    # ``state.dir/<application.id>``: each task keeps its stores under its id.
    state_dir: Path
    # The thread's record cache (None: every store runs uncached).
    cache: _core.NativeThreadCache | None = None
    # Where a changelog partition starts and ends, to trust a store's commit.
    changelog_range: ChangelogRange | None = None
    # Milliseconds now (the test driver's mock clock; default: the system's).
    wall_clock: Callable[[], int] | None = None
    # The global task's stores, readable by every task made after it.
    global_stores: dict[str, Any] = field(default_factory=dict)

    def task(self, subtopology: Subtopology, partition: int) -> StreamTask:
        """Task ``partition`` of ``subtopology``, its stores opened as of
        their last commit (not restored)."""
        return StreamTask(self, subtopology, partition, f"{subtopology.id}_{partition}", self.cache)

    def global_task(self, subtopology: Subtopology) -> StreamTask:
        """The task of the global stores: uncached, emptied (they are rebuilt
        from their topics on every start), and readable by every task made
        after it."""
        task = StreamTask(self, subtopology, 0, "global", None)
        for store in task.stores.values():
            store.native.clear()
        self.global_stores = task.stores
        return task
