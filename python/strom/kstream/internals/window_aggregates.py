"""Windowed aggregations with user functions, per record over the native
window and session stores: Kafka's KStreamWindowAggregate (time windows),
KStreamSlidingWindowAggregate and KStreamSessionWindowAggregate, with both
emit strategies (KIP-825).

Each processor tracks its own observed stream time (the largest timestamp
that reached it), persisted with the task's stores, and so does the close
time of its last final emit. Late records are dropped, counted in the task's
``dropped-records`` metric and logged at debug level.

With ``EmitStrategy.on_window_close()`` nothing is forwarded per update;
instead, at most once per ``__emit.interval.ms.kstreams.windowed.aggregation__``
of wall-clock time (0 in the test driver, as in Kafka's), the windows closed
since the last emit are read from the store and forwarded once each, ordered
by time then key, as Kafka's time-ordered stores return them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from strom.config import EMIT_INTERVAL_WINDOWED
from strom.processor.internals.batch import Batch
from strom.processor.internals.nodes import Node, log
from strom.state.internals.caching import CachingSessionStore, CachingWindowStore
from strom.windowed import SessionWindow, TimeWindow, Windowed

if TYPE_CHECKING:
    from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
    from strom.processor.internals.task import StreamTask

NO_TIMESTAMP = -1
# Kafka's minimum segment interval of its segmented stores.
MIN_SEGMENT_INTERVAL_MS = 60_000


def segment_interval(retention_ms: int) -> int:
    """Kafka's default segment interval: ``max(retention / 2, 60 s)``."""
    return max(retention_ms // 2, MIN_SEGMENT_INTERVAL_MS)


class _Results:
    """The changes one batch forwards, columnar."""

    __slots__ = ("keys", "news", "offsets", "olds", "stamps")

    def __init__(self) -> None:
        self.keys: list[Any] = []
        self.news: list[Any] = []
        self.olds: list[Any] = []
        self.stamps: list[int] = []
        self.offsets: list[int] = []

    def add(self, key: Any, new: Any, old: Any, timestamp: int, offset: int) -> None:
        self.keys.append(key)
        self.news.append(new)
        self.olds.append(old)
        self.stamps.append(timestamp)
        self.offsets.append(offset)


class _WindowedAggregate(Node):
    """What the three windowed aggregations share: the store, observed
    stream time, drops, and the emit-final throttle and bookkeeping."""

    # Whether records with a null value are dropped (Kafka drops them only
    # for sliding windows; time and session windows aggregate them).
    drops_null_values = True
    # Whether updates carry the headers of the record that made them.
    updates_keep_headers = True

    def __init__(self, store_name: str, final_only: bool) -> None:
        super().__init__()
        self.store_name = store_name
        self.final_only = final_only

    def init(self, task: StreamTask) -> None:
        super().init(task)
        self.store: Any = task.store(self.store_name)
        # Behind the record cache, updates reach the children when the cache
        # writes them out (the latest per window and commit), as in Kafka.
        self.caching = isinstance(self.store, CachingWindowStore | CachingSessionStore)
        if self.caching and not self.final_only:
            self.forward_cache_flushes(self.store, self.forward_flushed_results)
        self.forwards = not self.final_only and not self.caching
        self.observed = task.state.node_stream_time(self.name)
        self._emit_key = f"{self.name}#last-emit-close-time"
        self.last_emit_close = task.state.node_times.get(self._emit_key, NO_TIMESTAMP)
        self.emit_interval = int(task.config[EMIT_INTERVAL_WINDOWED])
        self.next_time_to_emit = 0
        self.dropped = 0

    def process(self, batch: Batch) -> None:
        out = _Results()
        self.dropped = 0

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                key, value = batch.keys[i], batch.values[i]
                if key is None or (value is None and self.drops_null_values):
                    self.dropped += 1
                    log.debug("%s: skipped a record with a null key or value", self.name)
                    continue
                timestamp = batch.timestamps[i]
                self.task.current_timestamp = timestamp
                self.observed = max(self.observed, timestamp)
                self.aggregate_record(key, value, timestamp, batch.offsets[i], out)

        try:
            self.each_record(batch, run)
        finally:
            self.task.state.set_node_stream_time(self.name, self.observed)
            if self.dropped:
                self.task.metrics.dropped_records += self.dropped
        results = batch.derive(out.keys, out.news, out.stamps, out.offsets, out.olds)
        if not self.updates_keep_headers and not self.final_only:
            results.headers = [None] * len(results)
        self.forward(results)

    @abstractmethod
    def aggregate_record(
        self, key: Any, value: Any, timestamp: int, offset: int, out: _Results
    ) -> None:
        raise NotImplementedError

    def forward_flushed_results(self, entries: list[tuple[Any, Any, Any, int]]) -> None:
        """What the record cache wrote out: window values are (aggregate,
        timestamp) pairs; session values plain, timestamped with their end."""
        self.forward_flushed(entries)

    def drop_expired(self, timestamp: int, window: str, close_time: int) -> None:
        self.dropped += 1
        log.debug(
            "%s: skipped a record for an expired window: timestamp=%d window=%s "
            "expiration=%d stream_time=%d",
            self.name,
            timestamp,
            window,
            close_time,
            self.observed,
        )

    def should_emit_final(self, close_time: int) -> bool:
        """Kafka's throttle: look at most once per emit interval of wall-clock
        time, and only when the close time moved on."""
        if not self.final_only:
            return False
        now = self.task.wall_clock_ms()
        if now < self.next_time_to_emit:
            return False
        self.next_time_to_emit = now + self.emit_interval
        return self.last_emit_close == NO_TIMESTAMP or self.last_emit_close < close_time

    def emitted_final(self, close_time: int) -> None:
        self.last_emit_close = close_time
        self.task.state.set_node_stream_time(self._emit_key, close_time)

    def emit_windows(self, lower: int, upper: int, size: int, offset: int, out: _Results) -> None:
        """Forwards every window of the window store starting in ``[lower,
        upper]`` (as ``[start, start + size]``), by start then key."""
        entries = sorted(self.store.fetch_all(lower, upper), key=lambda kv: kv.key.window.start)
        for entry in entries:
            start = entry.key.window.start
            agg, timestamp = entry.value
            windowed = Windowed(entry.key.key, TimeWindow(start, start + size))
            out.add(windowed, agg, None, timestamp, offset)


class KStreamWindowAggregate(_WindowedAggregate):
    """``windowed_by(TimeWindows)`` aggregations, as Kafka's
    KStreamWindowAggregate: a window closes once the processor's observed
    stream time passes its end plus grace; a record for a closed window is
    dropped (counted per window). Results are KTable updates keyed by
    ``Windowed`` and timestamped with the latest record of their window.
    ``initializer`` None means reduce: the first value is the aggregate.
    Only null keys are dropped: null values reach the aggregator, as in
    Kafka 4.x (its Javadoc says otherwise; its processor decides)."""

    drops_null_values = False

    def __init__(
        self,
        store_name: str,
        windows: TimeWindows,
        initializer: Callable[[], Any] | None,
        aggregator: Callable[[Any, Any, Any], Any],
        final_only: bool = False,
    ) -> None:
        super().__init__(store_name, final_only)
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator

    def init(self, task: StreamTask) -> None:
        super().init(task)
        # Final results read through a record cache (Kafka's
        # TimeOrderedCachingWindowStore) see every window the cache still
        # holds, also those the store's retention already hides: the windows
        # put since the task started and not emitted yet, by start, then
        # serialized key.
        self.cached: dict[int, dict[bytes, tuple[Any, Any]]] | None = (
            {} if self.final_only and self.caching else None
        )

    def aggregate_record(
        self, key: Any, value: Any, timestamp: int, offset: int, out: _Results
    ) -> None:
        store, windows = self.store, self.windows
        close_time = self.observed - windows.grace_ms
        for start, end in windows.windows_for(timestamp):
            if end <= close_time:
                self.drop_expired(timestamp, f"[{start},{end})", close_time)
                continue
            previous = store.fetch(key, start)
            if previous is None:
                old, result_time = None, timestamp
                if self.initializer is None:
                    new = value  # reduce: the first value is the aggregate
                else:
                    # A new window retracts the initializer's aggregate (the
                    # old value Kafka's KStreamWindowAggregate forwards).
                    old = self.initializer()
                    new = self.aggregator(key, value, old)
            else:
                old, old_time = previous
                result_time = max(timestamp, old_time)
                new = self.aggregator(key, value, old)
            # A None aggregate (reduce of a null first value) deletes, as
            # Kafka's ValueAndTimestamp.make(null, ...) does.
            stored = None if new is None else (new, result_time)
            store.put(key, stored, start)
            if self.cached is not None:
                raw_key = store.key_serde.serialize(self.store_name, key) or b""
                self.cached.setdefault(start, {})[raw_key] = (key, stored)
            if self.forwards:
                out.add(Windowed(key, TimeWindow(start, end)), new, old, result_time, offset)
        self.maybe_forward_final(close_time, offset, out)

    def maybe_forward_final(self, close_time: int, offset: int, out: _Results) -> None:
        if not self.should_emit_final(close_time):
            return
        size = self.windows.size_ms
        upper = close_time - size
        if upper < 0:
            return
        last = self.last_emit_close
        lower = 0 if last == NO_TIMESTAMP else max(0, last - size) + 1
        # Nothing new closed when both bounds fall in the same windows.
        if last != NO_TIMESTAMP and self.windows.windows_for(upper) == self.windows.windows_for(
            lower - 1
        ):
            return
        if self.cached is None:
            self.emit_windows(lower, upper, size, offset, out)
        else:
            self.emit_cached_windows(lower, upper, size, offset, out)
        self.emitted_final(close_time)

    def emit_cached_windows(
        self, lower: int, upper: int, size: int, offset: int, out: _Results
    ) -> None:
        """``emit_windows`` through the cache: the store's windows in range
        merged with the cached ones; no later emit reads below ``upper``."""
        assert self.cached is not None
        windows: dict[tuple[int, bytes], tuple[Any, Any]] = {}
        name, keys = self.store_name, self.store.key_serde
        for entry in self.store.fetch_all(lower, upper):
            raw_key = keys.serialize(name, entry.key.key) or b""
            windows[(entry.key.window.start, raw_key)] = (entry.key.key, entry.value)
        for start in [s for s in self.cached if s <= upper]:
            for raw_key, cached in self.cached.pop(start).items():
                if start >= lower:
                    windows[(start, raw_key)] = cached
        for (start, _raw_key), (key, stored) in sorted(windows.items()):
            if stored is not None:
                agg, timestamp = stored
                windowed = Windowed(key, TimeWindow(start, start + size))
                out.add(windowed, agg, None, timestamp, offset)


class KStreamSlidingWindowAggregate(_WindowedAggregate):
    """``windowed_by(SlidingWindows)`` aggregations, as Kafka's
    KStreamSlidingWindowAggregate (its reverse-iterator path): windows
    ``[start, start + d]`` with inclusive bounds. A record creates its left
    window ``[t - d, t]`` (seeded from the window before it when that holds
    the previous record), the previous record's right window ``[p + 1, p + 1
    + d]`` when the record falls in it, and its own right window ``[t + 1, t
    + 1 + d]`` (a copy of the aggregate of the later records) when later
    records are within reach; it is added to every existing window holding
    it. Records earlier than ``d`` share the window ``[0, d]``. Null keys and
    values are dropped."""

    def __init__(
        self,
        store_name: str,
        windows: SlidingWindows,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        final_only: bool = False,
    ) -> None:
        super().__init__(store_name, final_only)
        self.windows = windows
        self.initializer = initializer
        self.aggregator = aggregator

    def fresh(self, timestamp: int) -> tuple[Any, int]:
        return self.initializer(), timestamp

    def aggregate_record(
        self, key: Any, value: Any, timestamp: int, offset: int, out: _Results
    ) -> None:
        difference = self.windows.time_difference_ms
        close_time = self.observed - self.windows.grace_ms
        if timestamp + difference < close_time:
            self.drop_expired(timestamp, f"[{timestamp},{timestamp + difference}]", close_time)
            return
        record = (key, value, timestamp, offset, close_time, out)
        if timestamp < difference:
            self.process_early(*record)
            return
        self.process_reverse(*record)
        self.maybe_forward_final(close_time, offset, out)

    def process_reverse(
        self, key: Any, value: Any, ts: int, offset: int, close_time: int, out: _Results
    ) -> None:
        difference = self.windows.time_difference_ms
        found = self.store.backward_fetch(key, max(0, ts - 2 * difference), ts + 1)
        starts: set[int] = set()
        left_agg: tuple[Any, int] | None = None
        right_agg: tuple[Any, int] | None = None
        left_exists = right_exists = False
        previous_ts: int | None = None
        args = (key, value, ts, offset, close_time, out)
        for entry in found:
            start, agg = entry.key, entry.value
            starts.add(start)
            end = start + difference
            if start == ts + 1:
                right_exists = True
            elif end > ts:
                if right_agg is None:
                    right_agg = agg
                self.update(start, agg, *args)
            elif end == ts:
                left_exists = True
                self.update(start, agg, *args)
                if agg[1] < ts:
                    previous_ts = agg[1]
                else:
                    # A record at this very timestamp already made every
                    # window this one needs.
                    return
            else:
                left_agg = agg
                previous_ts = agg[1]
                break
        if previous_ts is not None:
            start = previous_ts + 1
            if start not in starts and start + difference >= ts:
                self.update(start, self.fresh(ts), *args)
        if not left_exists:
            if previous_ts is not None and left_agg is not None and ts - difference <= previous_ts:
                base = (left_agg[0], ts)
            else:
                base = self.fresh(ts)
            self.update(ts - difference, base, *args)
        if not right_exists and right_agg is not None and right_agg[1] > ts:
            self.put_right_window(key, ts + 1, right_agg, offset, out)

    def process_early(
        self, key: Any, value: Any, ts: int, offset: int, close_time: int, out: _Results
    ) -> None:
        """A record before the time difference goes into ``[0, d]``; its own
        right window and the previous record's are made as later ones would."""
        combined: tuple[Any, int] | None = None
        right_agg: tuple[Any, int] | None = None
        right_exists = False
        starts: set[int] = set()
        previous_ts: int | None = None
        args = (key, value, ts, offset, close_time, out)
        for entry in self.store.fetch(key, 0, ts + 1):
            start, agg = entry.key, entry.value
            starts.add(start)
            if start == 0:
                combined = agg
                if agg[1] < ts:
                    previous_ts = agg[1]
            elif start <= ts:
                right_agg = agg
                self.update(start, agg, *args)
            else:
                right_exists = True
        # Without a right window found, the combined window holds only
        # records after this one (if any).
        if right_agg is None and combined is not None and combined[1] > ts:
            right_agg = combined
        if not right_exists and right_agg is not None and right_agg[1] > ts:
            self.put_right_window(key, ts + 1, right_agg, offset, out)
        if previous_ts is not None and previous_ts + 1 not in starts:
            self.update(previous_ts + 1, self.fresh(ts), *args)
        self.update(0, combined if combined is not None else self.fresh(ts), *args)

    def update(
        self,
        start: int,
        base: tuple[Any, int],
        key: Any,
        value: Any,
        ts: int,
        offset: int,
        close_time: int,
        out: _Results,
    ) -> None:
        """Kafka's updateWindowAndForward: adds the record to the window
        starting at ``start`` whose aggregate was ``base``, unless the window
        has closed (then the record counts a drop)."""
        end = start + self.windows.time_difference_ms
        if end < close_time:
            self.drop_expired(ts, f"[{start},{end}]", close_time)
            return
        old, old_time = base
        new = self.aggregator(key, value, old)
        new_time = ts if old is None else max(ts, old_time)
        # A null aggregate deletes the window (Kafka's ValueAndTimestamp.make).
        self.store.put(key, None if new is None else (new, new_time), start)
        if self.forwards:
            out.add(Windowed(key, TimeWindow(start, end)), new, old, new_time, offset)

    def put_right_window(
        self, key: Any, start: int, agg: tuple[Any, int], offset: int, out: _Results
    ) -> None:
        """The record's right window takes the later records' aggregate as it
        is (no close check, no aggregation), as Kafka does."""
        self.store.put(key, agg, start)
        if self.forwards:
            end = start + self.windows.time_difference_ms
            out.add(Windowed(key, TimeWindow(start, end)), agg[0], None, agg[1], offset)

    def maybe_forward_final(self, close_time: int, offset: int, out: _Results) -> None:
        if not self.should_emit_final(close_time):
            return
        difference = self.windows.time_difference_ms
        # Both bounds are inclusive: a window ending at the close time is open.
        upper = close_time - difference - 1
        if upper < 0:
            return
        last = self.last_emit_close
        lower = 0 if last == NO_TIMESTAMP else max(0, last - difference)
        self.emit_windows(lower, upper, difference, offset, out)
        self.emitted_final(close_time)


class KStreamSessionWindowAggregate(_WindowedAggregate):
    """``windowed_by(SessionWindows)`` aggregations, as Kafka's
    KStreamSessionWindowAggregate: a record's sessions within the gap (ending
    at or after ``t - gap``, starting at or before ``t + gap``) are merged
    with ``[t, t]`` (their aggregates combined by the merger, from the
    initializer), unless the merged session ends before the close time
    (stream time - grace - gap), which drops the record. Each absorbed
    session is removed and forwarded as a tombstone, then the merged session
    with the record aggregated in. Results are timestamped with their
    session's end. Null keys are dropped; null values reach the aggregator,
    as in Kafka."""

    drops_null_values = False
    # Kafka forwards a session's updates as new records, without the input
    # record's headers (final results and cache write-outs have them).
    updates_keep_headers = False

    def forward_flushed_results(self, entries: list[tuple[Any, Any, Any, int]]) -> None:
        keys = [key for key, _, _, _ in entries]
        news = [new for _, new, _, _ in entries]
        olds = [old for _, _, old, _ in entries]
        stamps = [timestamp for _, _, _, timestamp in entries]
        self.forward(self.flushed_batch(keys, news, stamps, olds))

    def __init__(
        self,
        store_name: str,
        windows: SessionWindows,
        retention_ms: int,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        merger: Callable[[Any, Any, Any], Any],
        final_only: bool = False,
    ) -> None:
        super().__init__(store_name, final_only)
        self.windows = windows
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval(retention_ms)
        self.initializer = initializer
        self.aggregator = aggregator
        self.merger = merger

    def aggregate_record(
        self, key: Any, value: Any, timestamp: int, offset: int, out: _Results
    ) -> None:
        gap = self.windows.inactivity_gap_ms
        close_time = self.observed - self.windows.grace_ms - gap
        store = self.store
        found = list(store.find_sessions(key, timestamp - gap, timestamp + gap))
        if self.final_only:
            # The store keeps more for final results; lookups see what Kafka's
            # show: sessions ending after store time - retention.
            visible_from = store.observed_stream_time - self.retention_ms + 1
            found = [entry for entry in found if entry.key.window.end >= visible_from]
        agg = self.initializer()
        start = end = timestamp
        for entry in found:
            agg = self.merger(key, agg, entry.value)
            start = min(start, entry.key.window.start)
            end = max(end, entry.key.window.end)
        if end < close_time:
            self.drop_expired(timestamp, f"[{start},{end}]", close_time)
        else:
            if (start, end) != (timestamp, timestamp):
                for entry in found:
                    store.remove(entry.key)
                    if self.forwards:
                        out.add(entry.key, None, entry.value, entry.key.window.end, offset)
            agg = self.aggregator(key, value, agg)
            session = Windowed(key, SessionWindow(start, end))
            store.put(session, agg)
            if self.forwards:
                out.add(session, agg, None, end, offset)
        self.maybe_forward_final(close_time, offset, out)

    def maybe_forward_final(self, close_time: int, offset: int, out: _Results) -> None:
        if not self.should_emit_final(close_time):
            return
        # Session bounds are inclusive: a session ending at the close time is open.
        upper = close_time - 1
        if upper < 0:
            return
        lower = max(0, self.last_emit_close)
        if upper < lower:
            return
        # Kafka reads them from its time-ordered session store, which loses
        # sessions only with whole time segments.
        store_time = self.store.observed_stream_time
        seg = self.segment_interval_ms
        held_from = max(0, store_time - self.retention_ms) // seg * seg
        sessions = [
            entry
            for entry in self.store.find_sessions_range(None, None, lower, upper)
            if entry.key.window.end <= upper and entry.key.window.end >= held_from
        ]
        sessions.sort(key=lambda kv: (kv.key.window.end, kv.key.window.start))
        for entry in sessions:
            out.add(entry.key, entry.value, None, entry.key.window.end, offset)
        self.emitted_final(close_time)


# Value getters of windowed tables (how joins read them), as Kafka's
# KStreamWindowAggregateValueGetter and KTableSessionWindowValueGetter:
# (value, timestamp) of one window, or None.
WindowedLookup = Callable[[Any], "tuple[Any, int] | None"]


def window_getter(store_name: str) -> Callable[[StreamTask], WindowedLookup]:
    def supplier(task: StreamTask) -> WindowedLookup:
        store = task.store(store_name)

        def lookup(windowed: Any) -> tuple[Any, int] | None:
            found: tuple[Any, int] | None = store.fetch(windowed.key, windowed.window.start)
            return found

        return lookup

    return supplier


def session_getter(store_name: str) -> Callable[[StreamTask], WindowedLookup]:
    """A session's aggregate, timestamped with the session's end."""

    def supplier(task: StreamTask) -> WindowedLookup:
        store = task.store(store_name)

        def lookup(windowed: Any) -> tuple[Any, int] | None:
            window = windowed.window
            value = store.fetch_session(windowed.key, window.start, window.end)
            return None if value is None else (value, window.end)

        return lookup

    return supplier
