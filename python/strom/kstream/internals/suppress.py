"""``KTable.suppress``: Kafka's KTableSuppressProcessorSupplier over its
InMemoryTimeOrderedKeyValueChangeBuffer.

Updates wait in a buffer, the latest per key, until the processor's observed
stream time passes their buffer time plus the suppression duration; a full
buffer emits early or stops the task. The buffer is ordered as Kafka's
(``BufferKey``): by buffer time, then by the serialized key's bytes, so
records due at the same time leave in key-byte order, and sized as Kafka
sizes it, so a ``max_bytes`` buffer fills up at the same record. Its entries
live in a changelogged store, so a restart loses nothing.
"""

from __future__ import annotations

import heapq
import struct
from typing import TYPE_CHECKING, Any, NamedTuple

from strom.errors import SerializationError, TaskError
from strom.kstream.internals.table_processors import old_values_of
from strom.processor.api import Headers
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node
from strom.serdes import Serde, WrappingSerde

if TYPE_CHECKING:
    from strom.processor.internals.task import StreamTask


class Buffered(NamedTuple):
    """A buffered update (Kafka's BufferKey time and BufferValue): the
    change to emit (``new``, ``old``), the old value of the key's first
    buffered update (``prior``), and the record context it was buffered
    with (timestamp, topic, headers' size, headers: emitted with it)."""

    time: int
    timestamp: int
    new: Any
    old: Any
    prior: Any
    topic: str
    headers_size: int
    headers: Headers | None = None


_HEAD = struct.Struct(">qqiH")  # buffer time, timestamp, headers' size, topic length
_LENGTH = struct.Struct(">i")  # a value's length, -1 for null
_NAME = struct.Struct(">H")  # a header name's length


class BufferedSerde(WrappingSerde[Buffered]):
    """A buffer entry in the store's changelog: the head, the topic, then
    prior, old and new values through the table's value serde (Kafka's
    FullChangeSerde around it), then the headers if any (count, then each
    name and value; entries written before headers were kept end before)."""

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner

    def serialize(self, topic: str, data: Buffered | None) -> bytes | None:
        if data is None:
            return None
        inner = self._inner()
        name = data.topic.encode()
        parts = [_HEAD.pack(data.time, data.timestamp, data.headers_size, len(name)), name]
        for value in (data.prior, data.old, data.new):
            raw = inner.serialize(topic, value)
            parts.append(_LENGTH.pack(-1 if raw is None else len(raw)))
            parts.append(raw or b"")
        if data.headers:
            parts.append(_LENGTH.pack(len(data.headers)))
            for header, value in data.headers:
                encoded = header.encode()
                parts += (_NAME.pack(len(encoded)), encoded)
                parts += (_LENGTH.pack(-1 if value is None else len(value)), value or b"")
        return b"".join(parts)

    def deserialize(self, topic: str, data: bytes | None) -> Buffered | None:
        if data is None:
            return None
        inner = self._inner()
        try:
            time, timestamp, headers_size, name_length = _HEAD.unpack_from(data)
            at = _HEAD.size + name_length
            values = []
            for _ in range(3):
                (length,) = _LENGTH.unpack_from(data, at)
                at += _LENGTH.size
                raw = None if length < 0 else data[at : at + length]
                at += max(length, 0)
                values.append(inner.deserialize(topic, raw))
            headers = None
            if at < len(data):
                (count,) = _LENGTH.unpack_from(data, at)
                at += _LENGTH.size
                headers = []
                for _ in range(count):
                    (size,) = _NAME.unpack_from(data, at)
                    name = data[at + _NAME.size : at + _NAME.size + size].decode()
                    at += _NAME.size + size
                    (length,) = _LENGTH.unpack_from(data, at)
                    at += _LENGTH.size
                    headers.append((name, None if length < 0 else data[at : at + length]))
                    at += max(length, 0)
                if at > len(data):
                    raise struct.error("headers cut short")
        except struct.error as exc:
            raise SerializationError(f"a suppression buffer entry in {topic} is cut short") from exc
        prior, old, new = values
        record_topic = data[_HEAD.size : _HEAD.size + name_length].decode()
        return Buffered(time, timestamp, new, old, prior, record_topic, headers_size, headers)


def _headers_size(headers: Any) -> int:
    """Kafka's ProcessorRecordContext estimate of a record's headers."""
    return sum(len(key) + len(value or b"") for key, value in headers or ())


class KTableSuppress(Node):
    """``KTable.suppress`` (Kafka's KTableSuppressProcessor). Buffer time is
    the window end for ``until_window_closes`` (TimeDefinitions'
    WindowEndTimeDefinition), else the record's timestamp; an update of a
    buffered key keeps its place and its prior value (non-resetting). Emitted
    changes carry the latest update's new and old values, at its timestamp;
    final results never carry a tombstone."""

    def __init__(
        self,
        store_name: str,
        duration_ms: int,
        by_window_end: bool,
        max_records: int,
        max_bytes: int,
        emit_early: bool,
    ) -> None:
        super().__init__()
        self.store_name = store_name
        self.duration_ms = duration_ms
        self.by_window_end = by_window_end
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.emit_early = emit_early
        # Final results never need to carry a delete (safeToDropTombstones).
        self.drop_tombstones = by_window_end

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.store = task.key_value_store(self.store_name)
        self.key_serde: Serde[Any] = self.store.key_serde
        self.value_serde: Serde[Any] = self.store.value_serde.inner
        self.observed = task.state.node_stream_time(self.name)
        # The eviction order: a heap of (buffer time, serialized key); an
        # entry is current while ``times`` holds its time for its key.
        self.heap: list[tuple[int, bytes]] = []
        self.times: dict[bytes, int] = {}
        self.keys: dict[bytes, Any] = {}
        self.sizes: dict[bytes, int] = {}
        self.total_size = 0
        for entry in self.store.all():
            self._index(self._raw_key(entry.key), entry.key, entry.value)

    def _raw_key(self, key: Any) -> bytes:
        return self.key_serde.serialize(self.store_name, key) or b""

    def _size(self, raw_key: bytes, value: Buffered) -> int:
        """Kafka's computeRecordSize: buffer time, key, prior, old (unless
        equal to prior), new, and the record context (timestamp, offset,
        topic, partition, headers)."""
        name, serde = self.store_name, self.value_serde
        prior = serde.serialize(name, value.prior)
        old = serde.serialize(name, value.old)
        new = serde.serialize(name, value.new)
        size = 8 + len(raw_key) + len(prior or b"") + len(new or b"")
        if old != prior:
            size += len(old or b"")
        return size + 8 + 8 + len(value.topic) + 4 + value.headers_size

    def _index(self, raw_key: bytes, key: Any, value: Buffered) -> None:
        if raw_key not in self.times:
            heapq.heappush(self.heap, (value.time, raw_key))
            self.times[raw_key] = value.time
            self.keys[raw_key] = key
        size = self._size(raw_key, value)
        self.total_size += size - self.sizes.get(raw_key, 0)
        self.sizes[raw_key] = size

    def _min_time(self) -> int | None:
        heap, times = self.heap, self.times
        while heap:
            time, raw_key = heap[0]
            if times.get(raw_key) == time:
                return time
            heapq.heappop(heap)  # evicted since
        return None

    def process(self, batch: Batch) -> None:
        # Emitted records carry the context they were buffered with.
        out = Batch(batch.topic, batch.partition, [], [], [], [], [], [])
        store = self.store
        headers = self.task.record_headers(batch)
        for i, (key, new, old) in enumerate(
            zip(batch.keys, batch.values, old_values_of(batch), strict=True)
        ):
            timestamp = batch.timestamps[i]
            self.observed = max(self.observed, timestamp)
            raw_key = self._raw_key(key)
            buffered = store.get(key)
            if buffered is None:
                time = key.window.end if self.by_window_end else timestamp
                prior = old
            else:
                time, prior = buffered.time, buffered.prior
            value = Buffered(
                time,
                timestamp,
                new,
                old,
                prior,
                batch.topic,
                0 if headers is None else _headers_size(headers[i]),
                None if headers is None else headers[i],
            )
            store.put(key, value)
            self._index(raw_key, key, value)
            self._enforce(out, batch.offsets[i])
        self.task.state.set_node_stream_time(self.name, self.observed)
        self.forward(out)

    def _over_capacity(self) -> bool:
        return len(self.times) > self.max_records or self.total_size > self.max_bytes

    def _enforce(self, out: Batch, offset: int) -> None:
        expiry = self.observed - self.duration_ms
        while (time := self._min_time()) is not None and time <= expiry:
            self._emit(out, offset)
        if self._over_capacity():
            if not self.emit_early:
                raise TaskError(
                    f"task {self.task.task_id} node {self.name!r}: the suppression buffer "
                    f"exceeded its capacity ({len(self.times)}/{self.max_records} records, "
                    f"{self.total_size}/{self.max_bytes} bytes)"
                )
            while self._over_capacity() and self._min_time() is not None:
                self._emit(out, offset)

    def _emit(self, out: Batch, offset: int) -> None:
        """Evicts the first entry in (buffer time, serialized key) order."""
        _time, raw_key = heapq.heappop(self.heap)
        del self.times[raw_key]
        key = self.keys.pop(raw_key)
        self.total_size -= self.sizes.pop(raw_key)
        buffered = self.store.get(key)
        assert buffered is not None, "indexed entries are in the store"
        self.store.delete(key)
        if buffered.new is None and self.drop_tombstones:
            return
        out.keys.append(key)
        out.values.append(buffered.new)
        assert out.old_values is not None
        out.old_values.append(buffered.old)
        out.timestamps.append(buffered.timestamp)
        out.offsets.append(offset)
        assert out.headers is not None
        out.headers.append(buffered.headers)
