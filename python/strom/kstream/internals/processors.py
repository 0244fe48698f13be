"""The DSL's stateless nodes (Kafka's KStreamFilter, KStreamMap, …), the
null-key filter before a repartition sink, and the native count.

User callbacks run once per record (they are the user's Python); everything
around them works on whole columns.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from strom import _core
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node, SinkNode, deliver, log, without

if TYPE_CHECKING:
    from strom.processor.internals.task import StreamTask


class KStreamFilter(Node):
    def __init__(self, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        super().__init__()
        self.predicate = predicate
        self.negate = negate

    def process(self, batch: Batch) -> None:
        verdicts, batch = self.call_each(batch, self.predicate, batch.keys, batch.values)
        self.forward(batch.select(self.matching(batch, verdicts, not self.negate)))


class KStreamMap(Node):
    """``map`` and ``select_key`` (which keeps the value)."""

    def __init__(self, mapper: Callable[[Any, Any], Any], key_only: bool) -> None:
        super().__init__()
        self.mapper = mapper
        self.key_only = key_only

    def process(self, batch: Batch) -> None:
        fn = self.mapper
        if self.key_only:
            selected, batch = self.call_each(batch, fn, batch.keys, batch.values)
            self.forward(batch.derive(selected, batch.values, batch.timestamps, batch.offsets))
            return
        keys, values = batch.keys, batch.values
        new_keys: list[Any] = []
        new_values: list[Any] = []

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                k2, v2 = fn(keys[i], values[i])
                new_keys.append(k2)
                new_values.append(v2)

        batch = without(batch, self.each_record(batch, run))
        self.forward(batch.derive(new_keys, new_values, batch.timestamps, batch.offsets))


class KStreamMapValues(Node):
    def __init__(self, mapper: Callable[..., Any], with_key: bool) -> None:
        super().__init__()
        self.mapper = mapper
        self.with_key = with_key

    def process(self, batch: Batch) -> None:
        if self.with_key:
            out, batch = self.call_each(batch, self.mapper, batch.keys, batch.values)
        else:
            out, batch = self.call_each(batch, self.mapper, batch.values)
        self.forward(batch.derive(batch.keys, out, batch.timestamps, batch.offsets))


class KStreamFlatMap(Node):
    """``flat_map`` (pairs out) and ``flat_map_values`` (values out)."""

    def __init__(
        self, mapper: Callable[..., Iterable[Any]], values_only: bool, with_key: bool = False
    ) -> None:
        super().__init__()
        self.mapper = mapper
        self.values_only = values_only
        # flat_map_values(with_key=True): mapper(key, value) -> values.
        self.with_key = with_key
        self.into_sink: tuple[KStreamMap, DropNullKeys, SinkNode, Any] | None = None

    def init(self, task: StreamTask) -> None:
        super().init(task)
        if self.with_key:
            return
        # group_by(fn) right after flat_map_values, String keys and values
        # repartitioned on the embedded log (the README's word count): the
        # four nodes run as one native pass, no Python list between them.
        producer = task.collector.native_string_producer()
        if not self.values_only or producer is None or len(self.children) != 1:
            return
        select = self.children[0]
        if type(select) is not KStreamMap or not select.key_only or len(select.children) != 1:
            return
        drop = select.children[0]
        if type(drop) is not DropNullKeys or len(drop.children) != 1:
            return
        sink = drop.children[0]
        if type(sink) is SinkNode and sink.strings and sink.topic_extractor is None:
            self.into_sink = (select, drop, sink, producer)

    def process(self, batch: Batch) -> None:
        if self.into_sink is not None and self.task.record_headers(batch) is None:
            self._process_into_sink(batch, *self.into_sink)
            return
        if self.values_only and not self.with_key:
            self._process_values(batch)
            return
        fn = self.mapper
        keys, values, stamps, offsets = batch.keys, batch.values, batch.timestamps, batch.offsets
        out_k: list[Any] = []
        out_v: list[Any] = []
        out_t: list[int] = []
        out_o: list[int] = []

        def run_pairs(indices: Iterator[int]) -> None:
            for i in indices:
                for k2, v2 in fn(keys[i], values[i]):
                    out_k.append(k2)
                    out_v.append(v2)
                    out_t.append(stamps[i])
                    out_o.append(offsets[i])

        def run_values_with_key(indices: Iterator[int]) -> None:
            for i in indices:
                key = keys[i]
                for v2 in fn(key, values[i]):
                    out_k.append(key)
                    out_v.append(v2)
                    out_t.append(stamps[i])
                    out_o.append(offsets[i])

        if self.values_only:
            run_pairs = run_values_with_key

        self.each_record(batch, run_pairs)
        self.forward(batch.derive(out_k, out_v, out_t, out_o))

    def _process_values(self, batch: Batch) -> None:
        """One native loop over the batch calls the mapper per record; a
        record whose call raises goes to the handler, then the loop goes on
        after it (what it yielded before failing goes on, as in Kafka)."""
        out: tuple[list[Any], list[Any], list[int], list[int]] = ([], [], [], [])
        columns = (batch.keys, batch.values, batch.timestamps, batch.offsets)
        start = 0
        while failed := _core.flat_map_values(self.mapper, *columns, start, out):
            index, exc = failed
            self.record_failed(batch, index, exc)
            start = index + 1
        self.forward(batch.derive(*out))

    def _process_into_sink(
        self, batch: Batch, select: KStreamMap, drop: DropNullKeys, sink: SinkNode, producer: Any
    ) -> None:
        """The mapper, then the key selector on each value it yields, each
        record with a key buffered for the sink, in one native loop. Where a
        function raises, the record goes to that node's handler; a key or
        value the sink's serde cannot write goes through the sink's ordinary
        path (the production handler); the loop then goes on after it."""
        keys, values, stamps = batch.keys, batch.values, batch.timestamps
        start, pending, pending_from = 0, None, 0
        while True:
            calls, selected, sent, stop = _core.flat_map_select_strings(
                self.mapper,
                select.mapper,
                producer,
                sink.topic,
                keys,
                values,
                stamps,
                start,
                pending,
                pending_from,
            )
            select.records_in += calls
            drop.records_in += selected
            sink.records_in += sent
            if stop is None:
                return
            kind, start, index, pending, payload = stop
            if kind == "map":
                self.record_failed(batch, start, payload)
                pending_from = 0  # what it yielded before failing goes on
                continue
            pending_from = index + 1
            # The one record, as the node at fault would have had it.
            key = keys[start] if kind == "select" else payload
            one = Batch(
                batch.topic,
                batch.partition,
                [key],
                [pending[index]],
                [stamps[start]],
                [batch.offsets[start]],
            )
            if kind == "select":
                select.record_failed(one, 0, payload)
            else:
                deliver(sink, one)


class KStreamPeek(Node):
    """``peek`` (forwards) and ``foreach`` (terminal)."""

    def __init__(self, action: Callable[[Any, Any], Any]) -> None:
        super().__init__()
        self.action = action

    def process(self, batch: Batch) -> None:
        _, batch = self.call_each(batch, self.action, batch.keys, batch.values)
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
        predicates = list(enumerate(self.predicates))
        default = routes[-1]

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                for branch, predicate in predicates:
                    if predicate(keys[i], values[i]):
                        routes[branch].append(i)
                        break
                else:
                    default.append(i)

        self.each_record(batch, run)
        # Children are the branches in order, then the default branch.
        for branch, child in enumerate(self.children):
            indices = routes[branch] if branch < len(self.predicates) else routes[-1]
            if indices:
                deliver(child, batch.select(indices))


class PrintFile:
    """The file of a ``print(file_path=)``: truncated when ``print`` is
    called, as Kafka's ``Printed.toFile`` does; opened by the first task that
    prints to it and closed by the last. Tasks of other threads share it, so
    a batch's lines are written whole, under a lock."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._users = 0
        self._out: TextIO | None = None
        open(path, "w", encoding="utf-8").close()

    def acquire(self) -> None:
        with self._lock:
            if self._users == 0:
                self._out = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by release()
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._out is not None:
                self._out.close()
                self._out = None

    def write(self, text: str) -> None:
        with self._lock:
            if self._out is None:
                raise RuntimeError(f"{self.path!r} is not open for printing")
            self._out.write(text)
            self._out.flush()


class KStreamPrint(Node):
    """``print()``: writes ``[label]: key, value`` lines (or ``[label]:
    mapper(key, value)``) to standard output, or to a :class:`PrintFile`."""

    def __init__(
        self,
        label: str,
        mapper: Callable[[Any, Any], Any] | None = None,
        file: PrintFile | None = None,
    ) -> None:
        super().__init__()
        self.label = label
        self.mapper = mapper
        self.file = file
        self._acquired = False

    def init(self, task: StreamTask) -> None:
        super().init(task)
        if self.file is not None and not self._acquired:
            self.file.acquire()
            self._acquired = True

    def close(self) -> None:
        if self.file is not None and self._acquired:
            self.file.release()
            self._acquired = False

    def process(self, batch: Batch) -> None:
        if not len(batch):
            return
        pairs = zip(batch.keys, batch.values, strict=True)
        if self.mapper is None:
            lines = [f"[{self.label}]: {k}, {v}" for k, v in pairs]
        else:
            lines = [f"[{self.label}]: {self.mapper(k, v)}" for k, v in pairs]
        text = "\n".join(lines) + "\n"
        if self.file is None:
            sys.stdout.write(text)
        else:
            self.file.write(text)


class DropNullKeys(Node):
    """The filter before a repartition sink: Kafka drops null-keyed records there."""

    takes_encoded = True  # reads keys only

    def process(self, batch: Batch) -> None:
        keys = batch.keys
        if _core.any_none(keys):
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
            self.forward_cache_flushes(self.store)
            if hasattr(self.store, "count_raw"):
                # Keys go to the cache as bytes: no need to read them first.
                self.raw_key_serde = self.store.key_serde

    def process(self, batch: Batch) -> None:
        # Keys as read, counted where the read holds them (no list made).
        read = batch.read[0] if self.caching and batch.raw_keys and batch.read else None
        if read is not None and not _core.read_has_null(read):
            self.store.count_read(read)
            return
        if _core.any_none(batch.keys, batch.values):
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
            if batch.raw_keys:
                self.store.count_raw(batch.keys, batch.timestamps)
            else:
                self.store.count(batch.keys, batch.timestamps)
            return
        counts, stamps = self.store.count(batch.keys, batch.timestamps)
        # The old value is the previous count, or the initializer's 0 for a
        # new key (Kafka's KStreamAggregate with countInitializer): count - 1.
        olds = [count - 1 for count in counts]
        self.forward(batch.derive(batch.keys, counts, stamps, batch.offsets, olds))
