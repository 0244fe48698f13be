//! Tumbling and hopping windowed aggregation: Kafka's
//! `KStreamWindowAggregate` processor, one batch per call.
//!
//! Per record, in offset order, as Kafka does:
//! 1. a null key is dropped (and, for aggregations of the value, a null
//!    value; see [`Aggregate::AGGREGATES_NULL_VALUES`]);
//! 2. observed stream time advances to the record's timestamp (before the
//!    drop check, so the record itself can close windows);
//! 3. close time = observed stream time - grace; for each window holding the
//!    record (`windowsFor`, ascending starts), a window whose end (exclusive)
//!    is `<= close time` drops the record for that window (counted once per
//!    window); any other is created or updated, its result timestamp being
//!    the max of the record's and the window's previous one;
//! 4. with [`EmitStrategy::OnWindowUpdate`] each update is a result; with
//!    [`EmitStrategy::OnWindowClose`] the closed windows are emitted instead,
//!    at most once per emit interval of wall-clock time, ordered by window
//!    start then key bytes (Kafka's time-ordered store).
//!
//! State: the kernel keeps the windows that can still change (and, in final
//! mode, the closed ones not yet emitted) in memory, keyed by interned key
//! and start, rather than reading and writing the window store per record;
//! the store is written from [`TimeWindowedAggregation::drain_changes`]
//! (one entry per changed window, its latest state) and read back after a
//! restart with [`TimeWindowedAggregation::restore_window`]. A closed window
//! can never change again, so in update mode it leaves memory as soon as it
//! closes; the store keeps it for its retention.

use std::collections::BTreeMap;

use super::aggregate::Aggregate;
use super::column::{Batch, ValueColumn};
use super::keys::KeyTable;
use super::results::{BatchStats, StoreChanges, WindowedResults};
use super::spec::{DEFAULT_EMIT_INTERVAL_MS, EmitStrategy, NO_TIMESTAMP, TimeWindows};
use crate::error::{Error, Result};
use crate::store::{SegmentFactory, WindowStore};

#[derive(Debug, Clone, Copy)]
struct Win<S> {
    start: i64,
    timestamp: i64,
    state: S,
    /// Changed since the last [`TimeWindowedAggregation::drain_changes`].
    dirty: bool,
}

/// One time-windowed aggregation processor (one per task and node).
pub struct TimeWindowedAggregation<A: Aggregate> {
    agg: A,
    windows: TimeWindows,
    emit: EmitStrategy,
    retention: i64,
    emit_interval: i64,
    observed_stream_time: i64,
    /// The window store's own observed stream time: the largest window
    /// start put. Final results are read back through it (see
    /// [`BatchStats::expired_before_emit`]).
    store_observed_time: i64,
    last_emit_close_time: i64,
    next_time_to_emit: i64,
    /// Per key, its live windows by ascending start.
    keys: KeyTable<Vec<Win<A::State>>>,
    /// Keys with a live window, per window start.
    by_start: BTreeMap<i64, Vec<u32>>,
    /// The smallest start in `by_start`, `i64::MAX` when empty.
    first_start: i64,
    dirty: Vec<(u32, i64)>,
    pending: StoreChanges<A::State>,
    totals: BatchStats,
}

impl<A: Aggregate> std::fmt::Debug for TimeWindowedAggregation<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeWindowedAggregation")
            .field("agg", &self.agg)
            .field("windows", &self.windows)
            .field("emit", &self.emit)
            .field("retention", &self.retention)
            .field("observed_stream_time", &self.observed_stream_time)
            .field("last_emit_close_time", &self.last_emit_close_time)
            .field("live_keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

impl<A: Aggregate> TimeWindowedAggregation<A> {
    /// A processor with Kafka's defaults: retention size + grace, emit
    /// interval 1 s.
    pub fn new(agg: A, windows: TimeWindows, emit: EmitStrategy) -> Self {
        Self {
            agg,
            windows,
            emit,
            retention: windows.default_retention(),
            emit_interval: DEFAULT_EMIT_INTERVAL_MS,
            observed_stream_time: NO_TIMESTAMP,
            store_observed_time: NO_TIMESTAMP,
            last_emit_close_time: NO_TIMESTAMP,
            next_time_to_emit: 0,
            keys: KeyTable::new(),
            by_start: BTreeMap::new(),
            first_start: i64::MAX,
            dirty: Vec::new(),
            pending: StoreChanges::default(),
            totals: BatchStats::default(),
        }
    }

    /// The window store's retention (`Materialized.withRetention`); Kafka
    /// rejects less than size + grace.
    pub fn with_retention(mut self, retention_ms: i64) -> Result<Self> {
        self.windows.check_retention(retention_ms)?;
        self.retention = retention_ms;
        Ok(self)
    }

    /// How often, in wall-clock ms, final results are looked for (Kafka's
    /// internal `__emit.interval.ms.kstreams.windowed.aggregation__`, 1000
    /// by default; 0 looks on every record).
    pub fn with_emit_interval(mut self, interval_ms: i64) -> Result<Self> {
        if interval_ms < 0 {
            return Err(Error::Config(format!(
                "emit interval cannot be negative (got {interval_ms} ms)"
            )));
        }
        self.emit_interval = interval_ms;
        Ok(self)
    }

    pub fn windows(&self) -> &TimeWindows {
        &self.windows
    }

    pub fn emit_strategy(&self) -> EmitStrategy {
        self.emit
    }

    pub fn retention(&self) -> i64 {
        self.retention
    }

    pub fn aggregation(&self) -> &A {
        &self.agg
    }

    /// The largest record timestamp seen ([`NO_TIMESTAMP`] before any);
    /// commit it with the offsets and hand it back after a restart.
    pub fn observed_stream_time(&self) -> i64 {
        self.observed_stream_time
    }

    /// The close time of the last final emit (Kafka keeps it as processor
    /// metadata with the committed offsets); [`NO_TIMESTAMP`] before any.
    pub fn last_emit_close_time(&self) -> i64 {
        self.last_emit_close_time
    }

    pub fn store_observed_time(&self) -> i64 {
        self.store_observed_time
    }

    /// Counters since creation.
    pub fn totals(&self) -> BatchStats {
        self.totals
    }

    /// Keys with live windows in memory.
    pub fn live_keys(&self) -> usize {
        self.keys.len()
    }

    /// Windows held in memory.
    pub fn live_windows(&self) -> usize {
        self.by_start.values().map(Vec::len).sum()
    }

    /// Restores the times committed with the offsets, before any record or
    /// [`TimeWindowedAggregation::restore_window`]. Times never go back.
    pub fn restore_times(
        &mut self,
        observed_stream_time: i64,
        last_emit_close_time: i64,
        store_observed_time: i64,
    ) {
        self.observed_stream_time = self.observed_stream_time.max(observed_stream_time);
        self.last_emit_close_time = self.last_emit_close_time.max(last_emit_close_time);
        self.store_observed_time = self.store_observed_time.max(store_observed_time);
    }

    /// Loads one window from the store after a restart. Windows that can no
    /// longer change (update mode) or whose final result was already
    /// emitted (final mode) are ignored, so a caller may pass every window
    /// of the store.
    pub fn restore_window(&mut self, key: &[u8], start: i64, state: A::State, timestamp: i64) {
        self.store_observed_time = self.store_observed_time.max(start);
        let end = self.windows.window_end(start);
        let keep = match self.emit {
            EmitStrategy::OnWindowUpdate => end > self.close_time(),
            EmitStrategy::OnWindowClose => {
                self.last_emit_close_time == NO_TIMESTAMP
                    || start > self.last_emit_close_time - self.windows.size()
            }
        };
        if !keep {
            return;
        }
        let id = self.keys.intern(key);
        let wins = self.keys.state_mut(id);
        match wins.binary_search_by_key(&start, |w| w.start) {
            Ok(i) => {
                wins[i].state = state;
                wins[i].timestamp = timestamp;
            }
            Err(i) => {
                wins.insert(
                    i,
                    Win {
                        start,
                        timestamp,
                        state,
                        dirty: false,
                    },
                );
                self.index_window(id, start);
            }
        }
    }

    /// Loads the windows of a window store written from
    /// [`TimeWindowedAggregation::drain_changes`] (values as Kafka's
    /// `ValueAndTimestamp` bytes), after [`TimeWindowedAggregation::restore_times`].
    pub fn restore_from_store<F: SegmentFactory>(&mut self, store: &WindowStore<F>) -> Result<()> {
        self.store_observed_time = self.store_observed_time.max(store.observed_stream_time());
        for entry in store.all()? {
            let (ts, value) = super::aggregate::split_value_and_timestamp(&entry.value)?;
            let state = self.agg.decode_state(value)?;
            self.restore_window(&entry.key, entry.start, state, ts);
        }
        Ok(())
    }

    fn close_time(&self) -> i64 {
        self.observed_stream_time
            .saturating_sub(self.windows.grace())
    }

    /// Processes a batch; see [`TimeWindowedAggregation::process_into`].
    pub fn process<C>(
        &mut self,
        batch: &Batch<'_, C>,
        wall_clock_ms: i64,
    ) -> WindowedResults<A::Output>
    where
        C: ValueColumn<Value = A::Value>,
    {
        let mut out = WindowedResults::new();
        self.process_into(batch, wall_clock_ms, &mut out);
        out
    }

    /// Processes a batch in record order, appending its results to `out`
    /// (whose stats are replaced by this batch's). `wall_clock_ms` is the
    /// system time for the emit-interval throttle of final results.
    pub fn process_into<C>(
        &mut self,
        batch: &Batch<'_, C>,
        wall_clock_ms: i64,
        out: &mut WindowedResults<A::Output>,
    ) where
        C: ValueColumn<Value = A::Value>,
    {
        let mut stats = BatchStats::default();
        let update_mode = self.emit == EmitStrategy::OnWindowUpdate;
        if update_mode {
            out.reserve(batch.len() * self.windows.window_starts(i64::MAX / 2).len());
        }
        for row in 0..batch.len() {
            let Some(key) = batch.keys.get(row) else {
                stats.dropped_null_key += 1;
                continue;
            };
            let value = if batch.values.is_valid(row) {
                Some(batch.values.value(row))
            } else if A::AGGREGATES_NULL_VALUES {
                None
            } else {
                stats.dropped_null_value += 1;
                continue;
            };
            let ts = batch.timestamps[row];
            if ts > self.observed_stream_time {
                self.observed_stream_time = ts;
            }
            let close = self.close_time();
            if update_mode && self.first_start != i64::MAX {
                self.evict_closed(close);
            }
            let mut id = None;
            for start in self.windows.window_starts(ts) {
                let end = self.windows.window_end(start);
                if end <= close {
                    stats.dropped_expired += 1;
                    continue;
                }
                let id = *id.get_or_insert_with(|| self.keys.intern(key));
                let (state, new_ts) = self.update(id, start, value, ts);
                if update_mode {
                    out.push(row as u32, key, start, end, self.agg.output(state), new_ts);
                }
            }
            if !update_mode {
                self.maybe_emit_final(row as u32, close, wall_clock_ms, out, &mut stats);
            }
        }
        self.totals.add(&stats);
        out.stats = stats;
    }

    /// Aggregates `value` into window `start` of key `id`, creating it.
    #[inline]
    fn update(&mut self, id: u32, start: i64, value: Option<A::Value>, ts: i64) -> (A::State, i64) {
        let wins = self.keys.state_mut(id);
        // Windows are kept by ascending start; records mostly hit the latest.
        let found = wins.iter().rposition(|w| w.start <= start);
        if let Some(i) = found
            && wins[i].start == start
        {
            let w = &mut wins[i];
            w.state = self.agg.add(w.state, value);
            w.timestamp = w.timestamp.max(ts);
            if !w.dirty {
                w.dirty = true;
                self.dirty.push((id, start));
            }
            return (w.state, w.timestamp);
        }
        let state = self.agg.add(self.agg.init(), value);
        let at = found.map_or(0, |i| i + 1);
        wins.insert(
            at,
            Win {
                start,
                timestamp: ts,
                state,
                dirty: true,
            },
        );
        self.dirty.push((id, start));
        self.index_window(id, start);
        self.store_observed_time = self.store_observed_time.max(start);
        (state, ts)
    }

    fn index_window(&mut self, id: u32, start: i64) {
        self.by_start.entry(start).or_default().push(id);
        self.first_start = self.first_start.min(start);
    }

    /// Update mode: forgets windows that closed (end <= close time); they
    /// can no longer change.
    fn evict_closed(&mut self, close: i64) {
        while self.first_start != i64::MAX && self.windows.window_end(self.first_start) <= close {
            let (start, ids) = self.by_start.pop_first().expect("first_start is indexed");
            for id in ids {
                if let Some(w) = self.take_window(id, start) {
                    self.capture_if_dirty(id, &w);
                }
                self.forget_key_if_idle(id);
            }
            self.first_start = self
                .by_start
                .first_key_value()
                .map_or(i64::MAX, |(&s, _)| s);
        }
    }

    fn take_window(&mut self, id: u32, start: i64) -> Option<Win<A::State>> {
        let wins = self.keys.state_mut(id);
        let i = wins.iter().position(|w| w.start == start)?;
        Some(wins.remove(i))
    }

    fn capture_if_dirty(&mut self, id: u32, w: &Win<A::State>) {
        if w.dirty {
            let key = self.keys.key(id);
            self.pending.push(
                key,
                w.start,
                self.windows.window_end(w.start),
                Some(w.state),
                w.timestamp,
            );
        }
    }

    fn forget_key_if_idle(&mut self, id: u32) {
        if self.keys.state(id).is_empty() {
            self.keys.remove(id);
        }
    }

    /// Kafka's `maybeForwardFinalResult` for time windows.
    fn maybe_emit_final(
        &mut self,
        row: u32,
        close: i64,
        now: i64,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) {
        // The throttle is taken whether or not anything is emitted.
        if now < self.next_time_to_emit {
            return;
        }
        self.next_time_to_emit = now.saturating_add(self.emit_interval);
        if self.last_emit_close_time != NO_TIMESTAMP && self.last_emit_close_time >= close {
            return;
        }
        let size = self.windows.size();
        let upper = close.saturating_sub(size);
        if upper < 0 {
            return;
        }
        let lower = if self.last_emit_close_time == NO_TIMESTAMP {
            0
        } else {
            (self.last_emit_close_time - size).max(0) + 1
        };
        // Kafka skips the range fetch (without recording the emit) when no
        // window start lies in [lower, upper].
        if self.last_emit_close_time != NO_TIMESTAMP
            && self
                .windows
                .window_starts(upper)
                .eq(self.windows.window_starts(lower - 1))
        {
            return;
        }
        // Kafka fetches [lower, upper] from its time-ordered store, which
        // hides windows that started before store time - retention.
        let actual_from = lower.max(self.store_observed_time.saturating_sub(self.retention));
        while self.first_start <= upper {
            let (start, mut ids) = self.by_start.pop_first().expect("first_start is indexed");
            let emit = start >= actual_from;
            if emit {
                ids.sort_unstable_by(|&a, &b| self.keys.key(a).cmp(self.keys.key(b)));
            }
            for id in ids {
                let Some(w) = self.take_window(id, start) else {
                    continue;
                };
                if emit {
                    out.push(
                        row,
                        self.keys.key(id),
                        start,
                        self.windows.window_end(start),
                        self.agg.output(w.state),
                        w.timestamp,
                    );
                    stats.emitted_final += 1;
                } else {
                    stats.expired_before_emit += 1;
                }
                self.capture_if_dirty(id, &w);
                self.forget_key_if_idle(id);
            }
            self.first_start = self
                .by_start
                .first_key_value()
                .map_or(i64::MAX, |(&s, _)| s);
        }
        self.last_emit_close_time = close;
    }

    /// The store writes since the last call: each changed window once, with
    /// its latest state and result timestamp. Apply them to the window store
    /// (values as [`super::aggregate::value_and_timestamp`] bytes, as Kafka's
    /// timestamped window store holds them), e.g. with
    /// [`TimeWindowedAggregation::write_changes`].
    pub fn drain_changes(&mut self) -> StoreChanges<A::State> {
        let mut changes = std::mem::take(&mut self.pending);
        for (id, start) in std::mem::take(&mut self.dirty) {
            let key_live = self.keys.entry(id);
            let Ok(i) = key_live.state.binary_search_by_key(&start, |w| w.start) else {
                continue;
            };
            let w = key_live.state[i];
            if !w.dirty {
                continue;
            }
            changes.push(
                &key_live.key,
                start,
                self.windows.window_end(start),
                Some(w.state),
                w.timestamp,
            );
            self.keys.state_mut(id)[i].dirty = false;
        }
        changes
    }

    /// Writes changes to a window store as Kafka's timestamped window store
    /// holds them. Returns how many the store dropped as expired.
    pub fn write_changes<F: SegmentFactory>(
        &self,
        changes: &StoreChanges<A::State>,
        store: &mut WindowStore<F>,
    ) -> Result<u64> {
        let mut expired = 0;
        let mut value = Vec::with_capacity(8 + A::STATE_SIZE);
        for i in 0..changes.len() {
            value.clear();
            value.extend_from_slice(&changes.timestamps[i].to_be_bytes());
            match changes.states[i] {
                Some(state) => {
                    self.agg.encode_state(state, &mut value);
                    let outcome =
                        store.put(changes.keys.get(i), Some(&value), changes.starts[i])?;
                    if outcome == crate::store::PutOutcome::Expired {
                        expired += 1;
                    }
                }
                None => {
                    store.put(changes.keys.get(i), None, changes.starts[i])?;
                }
            }
        }
        Ok(expired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::aggregate::Count;
    use crate::window::column::{BinaryBuffer, NoValues};

    fn run(
        p: &mut TimeWindowedAggregation<Count>,
        records: &[(&str, i64)],
    ) -> WindowedResults<i64> {
        let keys = BinaryBuffer::from_rows(records.iter().map(|r| r.0));
        let ts: Vec<i64> = records.iter().map(|r| r.1).collect();
        let batch = Batch::new(keys.column(), &ts, NoValues::new(ts.len())).unwrap();
        p.process(&batch, 0)
    }

    #[test]
    fn evicts_closed_windows_and_forgets_idle_keys() {
        let w = TimeWindows::of_size_with_no_grace(10).unwrap();
        let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
        run(&mut p, &[("a", 1), ("b", 2)]);
        assert_eq!((p.live_keys(), p.live_windows()), (2, 2));
        run(&mut p, &[("a", 10)]);
        // [0,10) closed at stream time 10; b has no window left.
        assert_eq!((p.live_keys(), p.live_windows()), (1, 1));
        let changes = p.drain_changes();
        assert_eq!(changes.len(), 3);
        assert!(p.drain_changes().is_empty());
    }
}
