"""KStream-KStream windowed joins, as Kafka Streams 4.x runs them.

Each side's records pass a ``KStreamJoinWindow`` node, which forwards them to
that side's join processor and then keeps them in the side's window store
(duplicates retained, retention = before + after + grace). The join processor
of a side looks up the other side's store for records of the same key within
the window and emits one result per match, timestamped with the larger of the
two timestamps.

Left and outer joins keep records without a match in a shared outer-join
store keyed by (timestamp, side, key) (Kafka's KIP-633 / KAFKA-10847 fix of
spurious results): a later match removes them; once stream time passes a
record's timestamp plus its side's look-ahead (``after`` on the left,
``before`` on the right) plus grace, it is emitted joined with None. The
bookkeeping (a stream time and a lower bound of the waiting timestamps, both
shared by the two processors of a join) follows Kafka's own so that the same
input gives the same output; unlike Kafka, the scan for closed windows is not
throttled by wall-clock time (Kafka's internal emit interval set to 0), so
results never depend on processing speed.

``stream_stream_join`` builds the graph behind ``KStream.join`` with another
stream: the repartition topics, the window stores and the nodes above.
"""

from __future__ import annotations

import struct
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from strom.errors import ConfigError, SerializationError, TopologyError
from strom.kstream import kstream
from strom.kstream.join_windows import JoinWindows
from strom.kstream.materialized import changelog_config
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node, PassThrough, log
from strom.processor.internals.topology_builder import StoreDef
from strom.serdes import Serde
from strom.state.stores import WINDOW, StoreSupplier

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.kstream import KStream
    from strom.processor.internals.task import StreamTask

# Kafka's Long.MAX_VALUE as "no record waits in the outer-join store".
NO_MIN_TIME = 2**63 - 1

_SIDE = struct.Struct(">qB")
_TIME = struct.Struct(">q")
_ENTRY = struct.Struct(">IB")


def _resolve(
    serde: Serde[Any] | None, task: StreamTask, default_key: str, where: str
) -> Serde[Any]:
    chosen = serde if serde is not None else task.config[default_key]
    if chosen is None:
        raise ConfigError(f"{where!r} has no serde: pass one to the join or set {default_key!r}")
    return chosen


class JoinSideKeySerde(Serde[tuple[int, bool, Any]]):
    """Keys of the outer-join store, as Kafka's ``TimestampedKeyAndJoinSide``:
    8-byte timestamp, one byte for the side (1 left, 0 right), then the key,
    so that a scan meets the oldest entries first."""

    def __init__(self, inner: Serde[Any] | None) -> None:
        self.inner = inner

    def serialize(self, topic: str, data: tuple[int, bool, Any] | None) -> bytes | None:
        if data is None:
            return None
        assert self.inner is not None, "resolved when the join processor starts"
        timestamp, is_left, key = data
        return _SIDE.pack(timestamp, is_left) + (self.inner.serialize(topic, key) or b"")

    def deserialize(self, topic: str, data: bytes | None) -> tuple[int, bool, Any] | None:
        if data is None:
            return None
        if len(data) < _SIDE.size:
            raise SerializationError(f"an outer-join store key needs 9 bytes, got {len(data)}")
        assert self.inner is not None, "resolved when the join processor starts"
        timestamp, side = _SIDE.unpack_from(data)
        return timestamp, side == 1, self.inner.deserialize(topic, data[_SIDE.size :])


class LeftOrRightListSerde(Serde[list[tuple[bool, Any]]]):
    """Values of the outer-join store: every record still waiting under one
    (timestamp, side, key), each as length, side byte and value."""

    def __init__(self, left: Serde[Any] | None, right: Serde[Any] | None) -> None:
        self.left = left
        self.right = right

    def serialize(self, topic: str, data: list[tuple[bool, Any]] | None) -> bytes | None:
        if data is None:
            return None
        assert self.left is not None and self.right is not None, "resolved at start"
        parts = []
        for is_left, value in data:
            raw = (self.left if is_left else self.right).serialize(topic, value) or b""
            parts.append(_ENTRY.pack(len(raw), is_left) + raw)
        return b"".join(parts)

    def deserialize(self, topic: str, data: bytes | None) -> list[tuple[bool, Any]] | None:
        if data is None:
            return None
        assert self.left is not None and self.right is not None, "resolved at start"
        out = []
        pos = 0
        while pos < len(data):
            if pos + _ENTRY.size > len(data):
                raise SerializationError("a truncated outer-join store value")
            length, side = _ENTRY.unpack_from(data, pos)
            pos += _ENTRY.size
            serde = self.left if side == 1 else self.right
            out.append((side == 1, serde.deserialize(topic, data[pos : pos + length])))
            pos += length
        return out


class TimeTracker:
    """What the two processors of one join share in a task (Kafka's
    ``TimeTracker``): the largest timestamp either side has seen, and a lower
    bound of the timestamps waiting in the outer-join store."""

    __slots__ = ("min_time", "stream_time")

    def __init__(self, stream_time: int, min_time: int) -> None:
        self.stream_time = stream_time
        self.min_time = min_time


class SharedTimeTrackers:
    """One TimeTracker per task for both processors of a join (Kafka's
    ``TimeTrackerSupplier``). Its times are kept with the task's store
    commits, so a restarted task continues exactly as an uninterrupted one."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.min_key = f"{key}:min-time"
        self._trackers: weakref.WeakKeyDictionary[StreamTask, TimeTracker] = (
            weakref.WeakKeyDictionary()
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled topology (a Spark replay ships it to executors) carries
        # no tasks, so no trackers either.
        return (SharedTimeTrackers, (self.key,))

    def get(self, task: StreamTask, stores: Iterable[Any], outer_store: Any | None) -> TimeTracker:
        """The task's tracker, made on first use from what was committed
        (or, when that was lost, from the restored stores)."""
        tracker = self._trackers.get(task)
        if tracker is None:
            state = task.state
            stream_time = max(
                [state.node_stream_time(self.key)] + [s.observed_stream_time for s in stores]
            )
            min_time = state.node_times.get(self.min_key)
            if min_time is None:
                min_time = NO_MIN_TIME
                if outer_store is not None:
                    for entry in outer_store.all():
                        min_time = entry.key[0]
                        break
            tracker = self._trackers[task] = TimeTracker(stream_time, min_time)
        return tracker

    def save(self, task: StreamTask, tracker: TimeTracker) -> None:
        task.state.set_node_stream_time(self.key, tracker.stream_time)
        task.state.set_node_stream_time(self.min_key, tracker.min_time)

    def remove(self, task: StreamTask) -> None:
        self._trackers.pop(task, None)


def _parents(task: StreamTask) -> dict[str, list[str]]:
    parents: dict[str, list[str]] = {name: [] for name in task.nodes}
    for name, node in task.nodes.items():
        for child in node.children:
            parents[child.name].append(name)
    return parents


def _ancestors(parents: dict[str, list[str]], name: str) -> set[str]:
    seen: set[str] = set()
    todo = list(parents.get(name, []))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(parents.get(node, []))
    return seen


def forward_per_record_at_forks(task: StreamTask, this_node: str, other_node: str) -> None:
    """When both inputs of a join come from one node (a self-join, or two
    branches of one stream), that node hands each record to all its children
    before the next record, as Kafka does; otherwise a batch would reach one
    side's store before the other side had joined its earlier records."""
    parents = _parents(task)
    for name in _ancestors(parents, this_node) & _ancestors(parents, other_node):
        node = task.nodes[name]
        if len(node.children) > 1:
            node.forward_per_record = True


class KStreamJoinWindow(Node):
    """Forwards each record to its side's join processor, then keeps it in
    the side's window store (Kafka's ``KStreamJoinWindow``). Records with a
    null key or value are not kept; a record already out of the store's
    retention is dropped from the store (counted in ``dropped-records``) but
    still joins with what the other side holds."""

    def __init__(self, store_name: str) -> None:
        super().__init__()
        self.store_name = store_name

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.store: Any = task.store(self.store_name)

    def process(self, batch: Batch) -> None:
        # The processor below reads the other side's store, never this one,
        # so forwarding the batch before storing it keeps Kafka's order.
        self.forward(batch)
        store = self.store
        retention = store.retention_ms
        observed = store.observed_stream_time
        kept: list[tuple[Any, Any, int]] = []
        dropped = 0
        for key, value, timestamp in zip(batch.keys, batch.values, batch.timestamps, strict=True):
            if key is None or value is None:
                continue
            observed = max(observed, timestamp)
            if timestamp <= observed - retention:
                dropped += 1
                continue
            kept.append((key, value, timestamp))
        if dropped:
            self.task.metrics.dropped_records += dropped
            log.debug(
                "%s: dropped %d record(s) older than the retention of %s",
                self.name,
                dropped,
                self.store_name,
            )
        if kept:
            self.task.current_timestamp = kept[-1][2]
            store.put_all(kept)


class KStreamKStreamJoinSide(Node):
    """The join processor of one side (Kafka's ``KStreamKStreamJoinLeftSide``
    / ``RightSide``): joins each record with the other side's stored records
    of the same key in ``[ts - before, ts + after]`` (mirrored on the right),
    and for left/outer joins manages the shared outer-join store."""

    def __init__(
        self,
        *,
        is_left: bool,
        this_store: str,
        other_store: str,
        outer_store: str | None,
        windows_before_ms: int,
        windows_after_ms: int,
        grace_ms: int,
        joiner: Callable[..., Any],
        outer: bool,
        trackers: SharedTimeTrackers,
        windowed_nodes: tuple[str, str],
        with_key: bool = False,
    ) -> None:
        super().__init__()
        self.is_left = is_left
        self.this_store_name = this_store
        self.other_store_name = other_store
        self.outer_store_name = outer_store
        # The window as this side sees it: the right side looks the other way.
        self.join_before_ms = windows_before_ms if is_left else windows_after_ms
        self.join_after_ms = windows_after_ms if is_left else windows_before_ms
        self.windows_before_ms = windows_before_ms
        self.windows_after_ms = windows_after_ms
        self.grace_ms = grace_ms
        self.joiner = joiner
        # joiner(key, left, right) (Kafka's ValueJoinerWithKey), else joiner(left, right).
        self.with_key = with_key
        self.outer = outer
        self.trackers = trackers
        self.windowed_nodes = windowed_nodes

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.this_store: Any = task.store(self.this_store_name)
        self.other_store: Any = task.store(self.other_store_name)
        self.outer_store: Any = None
        if self.outer_store_name is not None:
            self.outer_store = task.store(self.outer_store_name)
            keys, values = self.outer_store.key_serde, self.outer_store.value_serde
            where = self.outer_store_name
            keys.inner = _resolve(keys.inner, task, "default.key.serde", where)
            values.left = _resolve(values.left, task, "default.value.serde", where)
            values.right = _resolve(values.right, task, "default.value.serde", where)
        if self.is_left:
            forward_per_record_at_forks(task, *self.windowed_nodes)

    def _joined(self, key: Any, this_value: Any, other_value: Any) -> Any:
        if self.is_left:
            return self._join(key, this_value, other_value)
        return self._join(key, other_value, this_value)

    def _join(self, key: Any, left: Any, right: Any) -> Any:
        return self.joiner(key, left, right) if self.with_key else self.joiner(left, right)

    def process(self, batch: Batch) -> None:
        task = self.task
        other, outer_store = self.other_store, self.outer_store
        tracker = self.trackers.get(task, (self.this_store, other), outer_store)
        outer_keys: Any = None if outer_store is None else outer_store.key_serde
        keys: list[Any] = []
        values: list[Any] = []
        stamps: list[int] = []
        offsets: list[int] = []
        dropped = 0
        before, after = self.join_before_ms, self.join_after_ms

        def run(indices: Iterator[int]) -> None:
            nonlocal dropped
            for i in indices:
                key, value = batch.keys[i], batch.values[i]
                timestamp = batch.timestamps[i]
                offset = batch.offsets[i]
                task.current_timestamp = timestamp
                tracker.stream_time = max(tracker.stream_time, timestamp)
                if self.outer and key is None and value is not None:
                    values.append(self._joined(None, value, None))
                    keys.append(None)
                    stamps.append(timestamp)
                    offsets.append(offset)
                    continue
                if key is None or value is None:
                    dropped += 1
                    continue
                if outer_store is not None and timestamp == tracker.stream_time:
                    self._emit_closed(tracker, keys, values, stamps, offsets, offset)
                time_to = max(0, timestamp + after)
                matches = list(other.fetch(key, max(0, timestamp - before), time_to))
                for match in matches:
                    if outer_store is not None:
                        # The other record found its match: it must never be
                        # emitted with None.
                        waiting = (match.key, not self.is_left, key)
                        raw = outer_keys.serialize(self.outer_store_name, waiting)
                        if outer_store.native.get(raw) is not None:
                            outer_store.delete(waiting)
                    values.append(self._joined(key, value, match.value))
                    keys.append(key)
                    stamps.append(max(timestamp, match.key))
                    offsets.append(offset)
                if self.outer and not matches:
                    # Out of order and past its window already: emitted at
                    # once, as Kafka does.
                    if outer_store is None or time_to < tracker.stream_time:
                        values.append(self._joined(key, value, None))
                        keys.append(key)
                        stamps.append(timestamp)
                        offsets.append(offset)
                    else:
                        tracker.min_time = min(tracker.min_time, timestamp)
                        entry = (timestamp, self.is_left, key)
                        waiting_values = outer_store.get(entry) or []
                        outer_store.put(entry, [*waiting_values, (self.is_left, value)])

        try:
            self.each_record(batch, run)
        finally:
            self.trackers.save(task, tracker)
        if dropped:
            task.metrics.dropped_records += dropped
            log.debug("%s: skipped %d record(s) with a null key or value", self.name, dropped)
        self.forward(batch.derive(keys, values, stamps, offsets))

    def _emit_closed(
        self,
        tracker: TimeTracker,
        keys: list[Any],
        values: list[Any],
        stamps: list[int],
        offsets: list[int],
        offset: int,
    ) -> None:
        """Emits, joined with None, the waiting records whose window has
        closed, oldest first (Kafka's ``emitNonJoinedOuterRecords``)."""
        stream_time, grace = tracker.stream_time, self.grace_ms
        if tracker.min_time + self.join_after_ms + grace >= stream_time:
            return  # nothing can have closed yet
        tracker.min_time = NO_MIN_TIME
        left_open = right_open = False
        store = self.outer_store
        # Below this time every entry is visited (at least one side's windows
        # close there); above it the scan stops within a few entries.
        threshold = stream_time - grace - min(self.windows_after_ms, self.windows_before_ms)
        for entry_key, waiting in self._in_order(threshold, stream_time):
            timestamp, is_left, key = entry_key
            look_ahead = self.windows_after_ms if is_left else self.windows_before_ms
            emitted = stop = False
            # Value by value, as Kafka's ListValueStore iterates: the scan
            # stops at the value after both sides were found open (between
            # two values of one key, maybe), leaving min time there.
            for side_is_left, value in waiting:
                tracker.min_time = timestamp
                if left_open and right_open:
                    stop = True  # every later entry is still open
                    break
                if timestamp + look_ahead + grace >= stream_time:
                    if is_left:
                        left_open = True
                    else:
                        right_open = True
                    continue
                values.append(
                    self._join(key, value, None) if side_is_left else self._join(key, None, value)
                )
                keys.append(key)
                stamps.append(timestamp)
                offsets.append(offset)
                emitted = True
            if emitted:
                store.delete(entry_key)
            if stop:
                break

    def _in_order(self, threshold: int, stream_time: int) -> Iterator[tuple[Any, Any]]:
        """The outer-join store's entries in key order, read lazily: all those
        before ``threshold`` at once, the rest in growing time slices, so that
        a scan that stops early does not read (and decode) the whole store."""
        store = self.outer_store
        native, name = store.native, self.outer_store_name
        keys, values = store.key_serde, store.value_serde

        def decode(raw: list[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
            for raw_key, raw_value in raw:
                yield keys.deserialize(name, raw_key), values.deserialize(name, raw_value)

        # An 8-byte time bound sorts before every key with that time.
        low = max(0, threshold)
        yield from decode(native.range(None, _TIME.pack(low)))
        step = 16
        while low <= stream_time:
            yield from decode(native.range(_TIME.pack(low), _TIME.pack(low + step)))
            low, step = low + step, step * 2
        yield from decode(native.range(_TIME.pack(low), None))

    def close(self) -> None:
        self.trackers.remove(self.task)


# --- building ---------------------------------------------------------------------


# Kafka's StreamJoined.with(thisStoreSupplier, otherStoreSupplier): either may be None.
JoinStoreSuppliers = tuple[StoreSupplier | None, StoreSupplier | None]


def stream_stream_join(
    this: KStream,
    other: KStream,
    joiner: Callable[[Any, Any], Any],
    windows: Any,
    *,
    left_outer: bool,
    right_outer: bool,
    name: str | None,
    serdes: tuple[Serde[Any] | None, Serde[Any] | None, Serde[Any] | None],
    store_name: str | None,
    logging: bool | Mapping[str, str],
    with_key: bool = False,
    suppliers: JoinStoreSuppliers = (None, None),
    in_memory: bool = False,
) -> KStream:
    """A join of two KStreams (Kafka's KStreamImpl.doJoin + KStreamImplJoin.join):
    repartition each side that needs it, a window store per side, a join
    processor per side, their results merged. ``suppliers`` (Kafka's
    ``StreamJoined.with(thisSupplier, otherSupplier)``) name and place the
    sides' stores; ``in_memory`` (its in-memory ``DslStoreSuppliers``) keeps
    the others in memory."""
    if not isinstance(windows, JoinWindows):
        raise TopologyError(
            "a join with another KStream takes (other, joiner, join_windows), "
            f"not {type(windows).__name__} as the third argument"
        )
    _check_join_suppliers(suppliers, windows)
    this_supplier, other_supplier = suppliers
    if not callable(joiner):
        raise TopologyError(f"the joiner must be callable, got {joiner!r}")
    if other._builder is not this._builder:
        raise TopologyError("both streams of a join must come from the same StreamsBuilder")
    builder = this._builder
    keys = serdes[0] or this._key_serde or other._key_serde
    this_values = serdes[1] or this._value_serde
    other_values = serdes[2] or other._value_serde
    this_node, other_node = this._node, other._node
    if this._repartition_required:
        prefix = f"{name}-left" if name else this._node
        this_node = repartition_for_join(builder, prefix, this_node, keys, this_values)
    if other._repartition_required:
        if other is this or other._node == this._node:
            other_node = this_node  # a self-join repartitions once
        else:
            prefix = f"{name}-right" if name else other._node
            other_node = repartition_for_join(builder, prefix, other_node, keys, other_values)

    this_suffix = "-outer-this-join" if right_outer else "-this-join"
    other_suffix = "-outer-other-join" if left_outer else "-other-join"
    this_windowed = builder.processor_name(name, "KSTREAM-WINDOWED-", "-this-windowed")
    other_windowed = builder.processor_name(name, "KSTREAM-WINDOWED-", "-other-windowed")
    this_prefix = "KSTREAM-OUTERTHIS-" if right_outer else "KSTREAM-JOINTHIS-"
    this_generated = builder.new_name(this_prefix)
    other_generated = builder.new_name(
        "KSTREAM-OUTEROTHER-" if left_outer else "KSTREAM-JOINOTHER-"
    )
    this_join = f"{name}{this_suffix}" if name else this_generated
    other_join = f"{name}{other_suffix}" if name else other_generated
    merge = builder.processor_name(name, "KSTREAM-MERGE-", "-merge")
    this_store = f"{store_name}{this_suffix}-store" if store_name else f"{this_generated}-store"
    other_store = f"{store_name}{other_suffix}-store" if store_name else f"{other_generated}-store"
    this_store = this_supplier.name if this_supplier else this_store
    other_store = other_supplier.name if other_supplier else other_store
    outer_store = None
    if left_outer:
        shared = "-outer-shared-join" if right_outer else "-left-shared-join"
        base = this_supplier.name if this_supplier else store_name
        outer_store = (
            f"{base}{shared}-store"
            if base
            else f"KSTREAM-OUTERSHARED-{this_generated[len(this_prefix) :]}-store"
        )

    internal = builder.internal
    internal.add_processor(this_windowed, lambda: KStreamJoinWindow(this_store), this_node)
    internal.add_processor(other_windowed, lambda: KStreamJoinWindow(other_store), other_node)
    trackers = SharedTimeTrackers(this_join)

    def side(is_left: bool) -> Callable[[], Node]:
        return lambda: KStreamKStreamJoinSide(
            is_left=is_left,
            this_store=this_store if is_left else other_store,
            other_store=other_store if is_left else this_store,
            outer_store=outer_store,
            windows_before_ms=windows.before_ms,
            windows_after_ms=windows.after_ms,
            grace_ms=windows.grace_ms,
            joiner=joiner,
            outer=left_outer if is_left else right_outer,
            trackers=trackers,
            windowed_nodes=(this_windowed, other_windowed),
            with_key=with_key,
        )

    internal.add_processor(this_join, side(True), this_windowed)
    internal.add_processor(other_join, side(False), other_windowed)
    if left_outer:
        # Left and outer joins take records with a null key (KIP-962): the
        # repartition topics upstream keep them.
        builder.relax_null_keys(this_join, other_join)
    internal.add_processor(merge, PassThrough, this_join, other_join)

    log_config = changelog_config(logging, this_store)
    logged = logging if isinstance(logging, bool) else True

    def window_store(
        store: str, values: Serde[Any] | None, supplier: StoreSupplier | None
    ) -> StoreDef:
        return StoreDef(
            store,
            keys,
            values,
            logged=logged,
            log_config=log_config,
            persistent=supplier.persistent if supplier else not in_memory,
            kind="window",
            retention_ms=windows.retention_ms(),
            window_size_ms=windows.size_ms,
            retain_duplicates=True,
        )

    internal.add_store(
        window_store(this_store, this_values, this_supplier), this_windowed, other_join
    )
    internal.add_store(
        window_store(other_store, other_values, other_supplier), other_windowed, this_join
    )
    if outer_store is not None:
        # In memory with the in-memory suppliers, else where this side's store is.
        outer_persistent = not in_memory and (this_supplier is None or this_supplier.persistent)
        internal.add_store(
            StoreDef(
                outer_store,
                JoinSideKeySerde(keys),
                LeftOrRightListSerde(this_values, other_values),
                logged=logged,
                log_config=log_config,
                persistent=outer_persistent,
            ),
            this_join,
            other_join,
        )
    internal.co_partition(this_join)
    return kstream.KStream(builder, merge, keys, None)


def _check_join_suppliers(suppliers: JoinStoreSuppliers, windows: JoinWindows) -> None:
    """Kafka's KStreamImplJoin.assertWindowSettings and assertUniqueStoreNames:
    window store suppliers that keep duplicates, with the windows' size and
    exactly their retention, under two names."""
    for supplier in suppliers:
        if supplier is None:
            continue
        if supplier.kind != WINDOW:
            raise TopologyError(
                f"store {supplier.name!r}: a stream-stream join's store supplier is a "
                f"window store's (Stores.…_window_store), not a {supplier.kind} store's"
            )
        if not supplier.retain_duplicates:
            raise TopologyError(
                f"store {supplier.name!r}: a join's window store supplier must retain "
                "duplicates (retain_duplicates=True)"
            )
        if (supplier.window_size_ms, supplier.retention_ms) != (
            windows.size_ms,
            windows.retention_ms(),
        ):
            raise TopologyError(
                f"store {supplier.name!r}: its window size ({supplier.window_size_ms} ms) and "
                f"retention ({supplier.retention_ms} ms) must be the join windows' size "
                f"({windows.size_ms} ms) and size plus grace ({windows.retention_ms()} ms)"
            )
    this, other = suppliers
    if this is not None and other is not None and this.name == other.name:
        raise TopologyError(
            f"both sides' store suppliers are named {this.name!r}: they need names of their own"
        )


def repartition_for_join(
    builder: StreamsBuilder,
    prefix: str,
    parent: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
) -> str:
    """``<prefix>-repartition`` for one side of a join; a stream joined
    again reuses its repartition topic (Kafka still spends the names)."""
    source = builder.internal.source_of(f"{prefix}-repartition")
    if source is not None:
        for _ in range(3):
            builder.new_name("")
        return source
    return builder.repartition(prefix, parent, key_serde, value_serde)
