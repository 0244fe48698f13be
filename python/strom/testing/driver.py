"""TopologyTestDriver: runs a topology in-process, record by record, with no
broker and no log, on the same tasks and nodes as the real runtime."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from strom import _core
from strom.config import EMIT_INTERVAL_WINDOWED, StreamsConfig
from strom.errors import StoreError, TopologyError
from strom.keyvalue import KeyValue
from strom.processor.api import Headers, Record
from strom.processor.internals.task import (
    ListedRecords,
    RecordCollector,
    StreamTask,
    TaskFactory,
)
from strom.serdes import Serde
from strom.state.session import SessionStore
from strom.state.stores import (
    KEY_VALUE_KINDS,
    SESSION,
    VERSIONED,
    WINDOW,
    Duration,
    epoch_millis,
    to_millis,
)
from strom.state.versioned import VersionedKeyValueStore
from strom.state.views import PlainWindowValues, plain, plain_window
from strom.state.window import WindowStore
from strom.topology import Topology

__all__ = ["TestInputTopic", "TestOutputTopic", "TopologyTestDriver"]

# A record piped in: key and value bytes, timestamp, headers.
_Piped = tuple[bytes | None, bytes | None, int, Headers | None]
# What a task sent to one topic: keys, values, timestamps, each record's headers.
_Sent = tuple[str, list[Any], list[Any], list[int], list[Headers | None]]


def _checked_headers(headers: Headers | None) -> Headers | None:
    """Headers as Kafka takes them: (str name, bytes or None value) pairs."""
    if headers is None:
        return None
    checked = list(headers)
    for header in checked:
        if (
            not isinstance(header, tuple)
            or len(header) != 2
            or not isinstance(header[0], str)
            or not (header[1] is None or isinstance(header[1], bytes))
        ):
            raise TypeError(f"a header is a (str, bytes | None) pair, got {header!r}")
    return checked


def _ms(span: Duration, what: str) -> int:
    """A forward move of a clock, as Kafka's driver takes a Duration."""
    if (span.total_seconds() if isinstance(span, timedelta) else span) < 0:
        raise ValueError(f"{what} cannot go back ({span!r})")
    return to_millis(span, what)


@dataclass(frozen=True)
class _Output:
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: Headers | None = None


class _Collector(RecordCollector):
    """Keeps what the tasks send until the driver routes it."""

    def __init__(self) -> None:
        super().__init__(None, lambda _topic: 1)
        self.sent: deque[_Sent] = deque()

    def send(
        self,
        topic: str,
        keys: Any,
        values: Any,
        timestamps: Any,
        partitions: Any,
        headers: Sequence[Headers | None] | None = None,
    ) -> None:
        if keys:
            headers = [None] * len(keys) if headers is None else list(headers)
            self.sent.append((topic, list(keys), list(values), list(timestamps), headers))

    def flush(self) -> None:
        """Nothing to flush: the driver routes what was sent itself."""


class TopologyTestDriver:
    """Pipes records into a topology and reads what it writes, as Kafka's
    ``TopologyTestDriver`` does: every topic has one partition, the driver
    commits after every input record (so every update is emitted), fires
    stream-time punctuation on each input, advances wall-clock time only in
    ``advance_wall_clock_time``, and handles repartition topics in-process."""

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        initial_wall_clock_ms: int = 0,
    ) -> None:
        self._state_root = Path(tempfile.mkdtemp(prefix="strom-test-driver-"))
        props = {
            "application.id": "topology-test-driver",
            "bootstrap.servers": "test-driver:9092",
            "state.dir": str(self._state_root),
            # As Kafka's driver: emit-final aggregations check on every record.
            EMIT_INTERVAL_WINDOWED: 0,
            **(config or {}),
        }
        self.config = StreamsConfig(props)
        self._wall_clock = initial_wall_clock_ms
        builder = topology._internal
        self._builder = builder
        app_id = self.config.application_id
        self._collector = _Collector()
        # A cache of 0 bytes is no cache: the stores have no caching layer at
        # all, as Kafka's InternalTopologyBuilder.rewriteTopology strips them.
        cache_bytes = self.config["statestore.cache.max.bytes"]
        cache = _core.NativeThreadCache(cache_bytes) if cache_bytes > 0 else None
        self._tasks: list[StreamTask] = []
        self._task_of_topic: dict[str, StreamTask] = {}
        self._internal: set[str] = set()
        self._produced: set[str] = set()
        self._outputs: dict[str, deque[_Output]] = {}
        self._offsets: dict[str, itertools.count[int]] = {}
        factory = TaskFactory(
            builder,
            self.config,
            self._collector,
            lambda t: builder.physical_topic(app_id, t),
            self.config.state_dir / app_id,
            cache=cache,
            wall_clock=lambda: self._wall_clock,
        )
        try:
            global_sub = builder.global_subtopology()
            if global_sub is not None:
                global_task = factory.global_task(global_sub)
                self._tasks.append(global_task)
                for topic in global_sub.source_topics:
                    self._task_of_topic[topic] = global_task
            for sub in builder.subtopologies():
                task = factory.task(sub, 0)
                self._tasks.append(task)
                for topic in sub.source_topics:
                    name = builder.physical_topic(app_id, topic)
                    self._task_of_topic[name] = task
                    if topic in builder.repartition_topics:
                        self._internal.add(name)
        except BaseException:
            self.close()
            raise
        self._changelogs = {t for task in self._tasks for t in task.changelogs.values()}

    # --- input and output ------------------------------------------------------
    def create_input_topic(
        self,
        topic: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        start_timestamp: int | datetime | None = None,
        auto_advance: Duration = 0,
    ) -> TestInputTopic:
        """An input topic. Records piped without a timestamp get the topic's
        time: the driver's wall-clock time, or from ``start_timestamp`` (epoch
        ms or a datetime) on a clock of the topic's own that moves
        ``auto_advance`` (ms or a timedelta) after each of them and with
        :meth:`TestInputTopic.advance_time` (Kafka's ``createInputTopic(topic,
        keySerializer, valueSerializer, startTimestamp, autoAdvance)``)."""
        if topic not in self._task_of_topic or topic in self._internal:
            raise TopologyError(f"topic {topic!r} is not an input of this topology")
        start = None if start_timestamp is None else epoch_millis(start_timestamp)
        return TestInputTopic(
            self, topic, key_serde, value_serde, start, _ms(auto_advance, "auto_advance")
        )

    def create_output_topic(
        self, topic: str, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> TestOutputTopic:
        return TestOutputTopic(self, topic, key_serde, value_serde)

    def _pipe(self, topic: str, records: list[_Piped]) -> None:
        """Processes records one at a time, each followed by everything it
        caused (in-process hops through repartition topics)."""
        for key, value, timestamp, headers in records:
            self._process(topic, key, value, timestamp, headers)

    def _process(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        """Like Kafka's driver: every processed record, internal ones too, is
        followed by a commit (caches flushed, output captured and routed)."""
        offset = next(self._offsets.setdefault(topic, itertools.count()))
        self._task_of_topic[topic].process(
            ListedRecords(topic, 0, [key], [value], [timestamp], [offset], [headers or []])
        )
        self._commit()

    def _route(self) -> None:
        sent = self._collector.sent
        while sent:
            topic, keys, values, timestamps, headers = sent.popleft()
            self._produced.add(topic)
            if topic in self._changelogs:
                continue
            if topic not in self._internal:
                queue = self._outputs.setdefault(topic, deque())
                queue.extend(map(_Output, keys, values, timestamps, headers))
            if topic in self._task_of_topic:
                # A repartition topic, or a user topic read back (through):
                # one record at a time, as the broker would deliver them.
                for record in zip(keys, values, timestamps, headers, strict=True):
                    self._process(topic, *record)

    def _commit(self) -> None:
        for task in self._tasks:
            task.flush()
        self._route()

    def _output(self, topic: str) -> deque[_Output]:
        return self._outputs.setdefault(topic, deque())

    # --- time and state --------------------------------------------------------
    def advance_wall_clock_time(self, advance: Duration) -> None:
        """Moves the mock wall clock forward (ms or a timedelta) and fires due
        wall-clock punctuations."""
        self._wall_clock += _ms(advance, "wall-clock time")
        for task in self._tasks:
            task.maybe_punctuate_wall_clock()
            self._route()
        self._commit()

    def _store(self, name: str, kinds: frozenset[str], what: str) -> Any:
        """Store ``name`` of one of ``kinds`` as the tasks see it (a caching
        store reads through its cache, like the store it wraps)."""
        store_def = self._builder.stores.get(name)
        if store_def is not None and store_def.kind in kinds:
            for task in self._tasks:
                if name in task.stores:
                    return task.stores[name]
        raise StoreError(f"no {what} named {name!r} in this topology")

    def _timestamped(self, name: str, kinds: frozenset[str], what: str, plain_getter: str) -> Any:
        """``_store``, for a store that keeps timestamps only."""
        store = self._store(name, kinds, what)
        if not self._builder.stores[name].timestamped:
            raise StoreError(f"store {name!r} keeps no timestamps: get it with {plain_getter}")
        return store

    def get_state_store(self, name: str) -> Any:
        """Any store of the topology by name, as its processors see it (a
        table's or aggregation's key-value store with ``(value, timestamp)``
        values); a global store too."""
        for task in self._tasks:
            if name in task.stores:
                return task.stores[name]
        raise StoreError(f"no store named {name!r} in this topology")

    def get_all_state_stores(self) -> dict[str, Any]:
        """Every store of the topology by name (see :meth:`get_state_store`)."""
        return {name: store for task in self._tasks for name, store in task.stores.items()}

    def produced_topic_names(self) -> set[str]:
        """The topics the topology has written records to so far: outputs, and
        internal ones (repartition topics and changelogs) by their full names."""
        return set(self._produced)

    def get_timestamped_key_value_store(self, name: str) -> Any:
        """A timestamped key-value store (a table's, an aggregation's, one
        of ``Stores.timestamped_key_value_store_builder``) as it is: values
        are ``(value, timestamp)`` pairs. A StoreError for a store without
        timestamps (where Kafka's driver returns null)."""
        return self._timestamped(name, KEY_VALUE_KINDS, "key-value store", "get_key_value_store")

    def get_key_value_store(self, name: str) -> Any:
        """A key-value store with plain values: a timestamped one's
        timestamps hidden, as Kafka's driver hides them (its writes stamp
        values with -1, Kafka's ``NO_TIMESTAMP``)."""
        return plain(self._store(name, KEY_VALUE_KINDS, "key-value store"))

    def get_timestamped_window_store(self, name: str) -> WindowStore[Any, Any]:
        """A timestamped window store (a windowed aggregation's, one of
        ``Stores.timestamped_window_store_builder``) as it is: values are
        ``(value, timestamp)`` pairs. A StoreError for a store without
        timestamps (where Kafka's driver returns null)."""
        store: WindowStore[Any, Any] = self._timestamped(
            name, frozenset({WINDOW}), "window store", "get_window_store"
        )
        return store

    def get_window_store(self, name: str) -> WindowStore[Any, Any] | PlainWindowValues:
        """A window store with plain values: a timestamped one's timestamps
        hidden, as Kafka's driver hides them (``put`` stamps a value with -1,
        Kafka's ``NO_TIMESTAMP``)."""
        store: WindowStore[Any, Any] | PlainWindowValues = plain_window(
            self._store(name, frozenset({WINDOW}), "window store")
        )
        return store

    def get_session_store(self, name: str) -> SessionStore[Any, Any]:
        store: SessionStore[Any, Any] = self._store(name, frozenset({SESSION}), "session store")
        return store

    def get_versioned_key_value_store(self, name: str) -> VersionedKeyValueStore[Any, Any]:
        store: VersionedKeyValueStore[Any, Any] = self._store(
            name, frozenset({VERSIONED}), "versioned key-value store"
        )
        return store

    def metrics(self) -> dict[str, int]:
        """Task metrics summed over the driver's tasks, as ``KafkaStreams.metrics()``."""
        return {
            "records-processed": sum(t.metrics.records_processed for t in self._tasks),
            "dropped-records": sum(t.metrics.dropped_records for t in self._tasks),
            "skipped-records": sum(t.metrics.skipped_records for t in self._tasks),
        }

    def producer_wall_clock_ms(self) -> int:
        return self._wall_clock

    def close(self) -> None:
        for task in self._tasks:
            task.close()
        self._tasks.clear()
        shutil.rmtree(self._state_root, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _TestTopic:
    __test__ = False  # not a pytest test class

    def __init__(
        self,
        driver: TopologyTestDriver,
        topic: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
    ) -> None:
        self._driver = driver
        self.topic = topic
        self._key_serde = key_serde
        self._value_serde = value_serde


class TestInputTopic(_TestTopic):
    """Pipes typed records into one input topic of the driver."""

    def __init__(
        self,
        driver: TopologyTestDriver,
        topic: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        start_timestamp: int | None = None,
        auto_advance_ms: int = 0,
    ) -> None:
        super().__init__(driver, topic, key_serde, value_serde)
        # The topic's own clock (None: the driver's wall clock).
        self._time = start_timestamp
        self._auto_advance_ms = auto_advance_ms

    def advance_time(self, advance: Duration) -> None:
        """Moves the time of records piped without a timestamp forward (ms or
        a timedelta); a topic on the driver's wall clock gets a clock of its
        own from there."""
        self._time = self._now() + _ms(advance, "a topic's time")

    def _now(self) -> int:
        return self._driver.producer_wall_clock_ms() if self._time is None else self._time

    def _serialized(
        self, key: Any, value: Any, timestamp: int | None, headers: Headers | None = None
    ) -> _Piped:
        if timestamp is None:
            timestamp = self._now()
            if self._time is not None:
                self._time += self._auto_advance_ms
        return (
            self._key_serde.serialize(self.topic, key),
            self._value_serde.serialize(self.topic, value),
            timestamp,
            _checked_headers(headers),
        )

    def pipe_input(
        self,
        key: Any,
        value: Any = None,
        timestamp: int | None = None,
        *,
        headers: Headers | None = None,
    ) -> None:
        """One record; without a timestamp it gets the topic's time (see
        ``create_input_topic``); ``headers`` as (name, bytes or None) pairs."""
        self._driver._pipe(self.topic, [self._serialized(key, value, timestamp, headers)])

    def pipe_value_list(
        self,
        values: Iterable[Any],
        start_timestamp: int | datetime | None = None,
        advance: Duration = 0,
    ) -> None:
        """Records with null keys (timestamps as for ``pipe_key_value_list``)."""
        self.pipe_key_value_list(((None, v) for v in values), start_timestamp, advance)

    def pipe_key_value_list(
        self,
        pairs: Iterable[tuple[Any, Any] | KeyValue],
        start_timestamp: int | datetime | None = None,
        advance: Duration = 0,
    ) -> None:
        """Records with the topic's time, or, from ``start_timestamp`` (epoch
        ms or a datetime) on, each ``advance`` (ms or a timedelta) after the
        one before, the topic's time unchanged (Kafka's
        ``pipeKeyValueList(list, Instant, Duration)``)."""
        if start_timestamp is None:
            piped = [self._serialized(k, v, None) for k, v in pairs]
        else:
            start, step = epoch_millis(start_timestamp), _ms(advance, "advance")
            piped = [self._serialized(k, v, start + i * step) for i, (k, v) in enumerate(pairs)]
        self._driver._pipe(self.topic, piped)

    def pipe_records(self, records: Iterable[Record[Any, Any]]) -> None:
        self._driver._pipe(
            self.topic,
            [self._serialized(r.key, r.value, r.timestamp, r.headers) for r in records],
        )


class TestOutputTopic(_TestTopic):
    """Reads, typed, what the topology wrote to one topic (a queue: reading consumes)."""

    def _next(self) -> _Output:
        queue = self._driver._output(self.topic)
        if not queue:
            raise IndexError(f"empty topic: {self.topic}")
        return queue.popleft()

    def read_record(self) -> Record[Any, Any]:
        out = self._next()
        return Record(
            self._key_serde.deserialize(self.topic, out.key),
            self._value_serde.deserialize(self.topic, out.value),
            out.timestamp,
            out.headers or None,
        )

    def read_value(self) -> Any:
        return self.read_record().value

    def read_key_value(self) -> KeyValue:
        record = self.read_record()
        return KeyValue(record.key, record.value)

    def read_records_to_list(self) -> list[Record[Any, Any]]:
        return [self.read_record() for _ in range(self.get_queue_size())]

    def read_values_to_list(self) -> list[Any]:
        return [r.value for r in self.read_records_to_list()]

    def read_key_values_to_list(self) -> list[KeyValue]:
        return [KeyValue(r.key, r.value) for r in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict[Any, Any]:
        """The latest value per key, keys in last-update order (so the map
        iterates like the table it describes)."""
        latest: dict[Any, Any] = {}
        for record in self.read_records_to_list():
            latest.pop(record.key, None)
            latest[record.key] = record.value
        return latest

    def get_queue_size(self) -> int:
        return len(self._driver._output(self.topic))

    def is_empty(self) -> bool:
        return self.get_queue_size() == 0
