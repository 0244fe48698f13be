//! Sliding-window aggregation: Kafka's `KStreamSlidingWindowAggregate`
//! processor, one batch per call.
//!
//! Windows are `[start, start + time difference]`, both bounds inclusive,
//! and exist only where records make them distinct: a record creates its
//! left window (ending at it), the right window of the record before it
//! (starting 1 ms after that record) when the new record falls in it, and
//! its own right window when later records are within reach; it is added
//! to every existing window that holds it. Records earlier than the time
//! difference go into the one window `[0, time difference]` instead (the
//! "early records" of Kafka). The kernel follows Kafka's reverse-iterator
//! path (the one Kafka's built-in stores take), window for window and in
//! the same order, including which updates are forwarded.
//!
//! Per record, in offset order: a null key or a null value is dropped;
//! observed stream time advances; close time = observed stream time -
//! grace; a record whose left window ends before the close time is dropped
//! (once); each window it would update that ends before the close time
//! counts a drop too. Results' timestamps are the largest record timestamp
//! in the window.
//!
//! Windows are read back through the window store, whose retention (2 *
//! time difference + grace by default) hides windows that started before
//! store time - retention (+ 1 ms for the key-ordered store of
//! [`EmitStrategy::OnWindowUpdate`]); store time is the largest window start
//! put. The kernel keeps the windows the store still shows, in memory, and
//! emulates exactly that. Behind a record cache (update mode), a lookup also
//! finds the windows the cache still holds, expired by the store or not, as
//! Kafka's `CachingWindowStore` merges its cache unfiltered over the store's
//! fetches: the kernel keeps an expired window while [`WindowRecordCache`]
//! says the cache holds it (or it was written in the current batch, whose
//! writes reach the cache after it).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::aggregate::Aggregate;
use super::column::{Batch, ValueColumn};
use super::keys::KeyTable;
use super::results::{BatchStats, StoreChanges, WindowedResults};
use super::spec::{DEFAULT_EMIT_INTERVAL_MS, EmitStrategy, NO_TIMESTAMP, SlidingWindows};
use crate::error::{Error, Result};
use crate::store::{SegmentFactory, WindowStore};

/// Whether the record cache in front of the window store holds a window
/// `(key, start)` (a value, not a cached removal).
pub type WindowRecordCache = Box<dyn Fn(&[u8], i64) -> bool + Send + Sync>;

/// Expired windows kept for the record cache are checked against it again
/// once there are this many (and then twice as many as survived).
const MIN_CACHE_RECHECK: usize = 1024;

/// One window's aggregate and result timestamp (its latest record).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Agg<S> {
    state: S,
    timestamp: i64,
}

/// One sliding-window aggregation processor (one per task and node).
pub struct SlidingWindowedAggregation<A: Aggregate> {
    agg: A,
    windows: SlidingWindows,
    emit: EmitStrategy,
    retention: i64,
    emit_interval: i64,
    observed_stream_time: i64,
    /// The window store's observed stream time: the largest start put.
    store_observed_time: i64,
    last_emit_close_time: i64,
    next_time_to_emit: i64,
    /// Per key, its windows the store still shows, by start.
    keys: KeyTable<BTreeMap<i64, Agg<A::State>>>,
    /// Keys with a window, per window start (for expiry and final results).
    by_start: BTreeMap<i64, Vec<u32>>,
    pending: StoreChanges<A::State>,
    totals: BatchStats,
    /// Whether results carry old values (Kafka's `sendOldValues`).
    send_old_values: bool,
    record_cache: Option<WindowRecordCache>,
    /// Windows the store has expired that the record cache still holds,
    /// as (start, key id); kept in `keys`, not in `by_start`.
    cache_held: BTreeSet<(i64, u32)>,
    recheck_at: usize,
    /// The windows written in the current batch (they reach the cache after it).
    batch_writes: HashSet<(i64, u32)>,
}

impl<A: Aggregate> std::fmt::Debug for SlidingWindowedAggregation<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlidingWindowedAggregation")
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

/// What one record needs while it updates and creates windows.
struct Record<V> {
    row: u32,
    ts: i64,
    value: V,
    close: i64,
}

impl<A: Aggregate> SlidingWindowedAggregation<A> {
    /// A processor with Kafka's defaults: retention 2 * time difference +
    /// grace, emit interval 1 s. A time difference of 0 is refused: Kafka
    /// accepts it in `SlidingWindows` but its processor then fails on the
    /// first record (a window cannot end where it starts).
    pub fn new(agg: A, windows: SlidingWindows, emit: EmitStrategy) -> Result<Self> {
        if windows.time_difference() == 0 {
            return Err(Error::Config(
                "sliding windows need a time difference above 0 ms to aggregate".into(),
            ));
        }
        Ok(Self {
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
            pending: StoreChanges::default(),
            totals: BatchStats::default(),
            send_old_values: false,
            record_cache: None,
            cache_held: BTreeSet::new(),
            recheck_at: MIN_CACHE_RECHECK,
            batch_writes: HashSet::new(),
        })
    }

    /// Lookups also find the expired windows `cache` says the record cache
    /// in front of the window store still holds (update mode only: Kafka
    /// turns caching off for final results of sliding windows).
    #[must_use]
    pub fn with_record_cache(mut self, cache: WindowRecordCache) -> Self {
        self.record_cache = Some(cache);
        self
    }

    /// Results carry each update's old value in
    /// [`WindowedResults::old_values`] (Kafka's `sendOldValues`): the
    /// aggregate the update started from, which for a new window is the
    /// initializer's (Kafka passes it to `Change` as is); None for a
    /// record's right window, which copies the later records' aggregate.
    #[must_use]
    pub fn with_old_values(mut self, send: bool) -> Self {
        self.send_old_values = send;
        self
    }

    /// The window store's retention; Kafka rejects less than 2 * time
    /// difference + grace.
    pub fn with_retention(mut self, retention_ms: i64) -> Result<Self> {
        self.windows.check_retention(retention_ms)?;
        self.retention = retention_ms;
        Ok(self)
    }

    /// See [`super::time::TimeWindowedAggregation::with_emit_interval`].
    pub fn with_emit_interval(mut self, interval_ms: i64) -> Result<Self> {
        if interval_ms < 0 {
            return Err(Error::Config(format!(
                "emit interval cannot be negative (got {interval_ms} ms)"
            )));
        }
        self.emit_interval = interval_ms;
        Ok(self)
    }

    pub fn windows(&self) -> &SlidingWindows {
        &self.windows
    }

    pub fn emit_strategy(&self) -> EmitStrategy {
        self.emit
    }

    pub fn retention(&self) -> i64 {
        self.retention
    }

    pub fn observed_stream_time(&self) -> i64 {
        self.observed_stream_time
    }

    pub fn last_emit_close_time(&self) -> i64 {
        self.last_emit_close_time
    }

    pub fn store_observed_time(&self) -> i64 {
        self.store_observed_time
    }

    pub fn totals(&self) -> BatchStats {
        self.totals
    }

    /// Windows held in memory.
    pub fn live_windows(&self) -> usize {
        self.by_start.values().map(Vec::len).sum()
    }

    /// Restores the times committed with the offsets, before any record or
    /// [`SlidingWindowedAggregation::restore_window`]. Times never go back.
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

    /// Loads one window from the store after a restart (windows the store
    /// no longer shows are ignored).
    pub fn restore_window(&mut self, key: &[u8], start: i64, state: A::State, timestamp: i64) {
        self.store_observed_time = self.store_observed_time.max(start);
        if start < self.min_visible_start() {
            return;
        }
        let id = self.keys.intern(key);
        let agg = Agg { state, timestamp };
        if self.keys.state_mut(id).insert(start, agg).is_none() {
            self.by_start.entry(start).or_default().push(id);
        }
    }

    /// Loads the windows of a window store written from
    /// [`SlidingWindowedAggregation::drain_changes`].
    pub fn restore_from_store<F: SegmentFactory>(&mut self, store: &WindowStore<F>) -> Result<()> {
        self.store_observed_time = self.store_observed_time.max(store.observed_stream_time());
        for entry in store.all()? {
            let (ts, value) = super::aggregate::split_value_and_timestamp(&entry.value)?;
            let state = self.agg.decode_state(value)?;
            self.restore_window(&entry.key, entry.start, state, ts);
        }
        Ok(())
    }

    /// The store writes since the last call, in order (one per put).
    pub fn drain_changes(&mut self) -> StoreChanges<A::State> {
        std::mem::take(&mut self.pending)
    }

    /// Writes changes to a window store as Kafka's timestamped window store
    /// holds them. Returns how many the store dropped as expired.
    pub fn write_changes<F: SegmentFactory>(
        &self,
        changes: &StoreChanges<A::State>,
        store: &mut WindowStore<F>,
    ) -> Result<u64> {
        write_window_changes(&self.agg, changes, store)
    }

    /// The earliest window start the store still shows.
    fn min_visible_start(&self) -> i64 {
        let bound = self.store_observed_time.saturating_sub(self.retention);
        match self.emit {
            // Kafka's time-ordered store (final results) shows one more.
            EmitStrategy::OnWindowClose => bound,
            EmitStrategy::OnWindowUpdate => bound.saturating_add(1),
        }
    }

    /// The first start a final emit has not covered yet.
    fn unemitted_from(&self) -> i64 {
        if self.last_emit_close_time == NO_TIMESTAMP {
            0
        } else {
            (self.last_emit_close_time - self.windows.time_difference()).max(0)
        }
    }

    /// Forgets the windows the store no longer shows.
    fn expire(&mut self, stats: &mut BatchStats) {
        let min_visible = self.min_visible_start();
        let unemitted_from = self.unemitted_from();
        while let Some(entry) = self.by_start.first_entry() {
            let start = *entry.key();
            if start >= min_visible {
                break;
            }
            let ids = entry.remove();
            if self.emit == EmitStrategy::OnWindowClose && start >= unemitted_from {
                stats.expired_before_emit += ids.len() as u64;
            }
            for id in ids {
                if self.cache_holds(id, start) {
                    self.cache_held.insert((start, id));
                } else {
                    self.forget(id, start);
                }
            }
        }
        if self.cache_held.len() >= self.recheck_at {
            let held: Vec<_> = self.cache_held.iter().copied().collect();
            for (start, id) in held {
                if !self.cache_holds(id, start) {
                    self.cache_held.remove(&(start, id));
                    self.forget(id, start);
                }
            }
            self.recheck_at = MIN_CACHE_RECHECK.max(2 * self.cache_held.len());
        }
    }

    /// Whether writes go through a record cache (update mode behind one).
    fn caches_writes(&self) -> bool {
        self.record_cache.is_some() && self.emit == EmitStrategy::OnWindowUpdate
    }

    /// Whether the record cache holds a window the store has expired: it
    /// does if it says so, or if the window was written in this batch.
    fn cache_holds(&self, id: u32, start: i64) -> bool {
        match &self.record_cache {
            Some(cache) if self.emit == EmitStrategy::OnWindowUpdate => {
                self.batch_writes.contains(&(start, id)) || cache(self.keys.key(id), start)
            }
            _ => false,
        }
    }

    fn forget(&mut self, id: u32, start: i64) {
        let wins = self.keys.state_mut(id);
        wins.remove(&start);
        if wins.is_empty() {
            self.keys.remove(id);
        }
    }

    /// Processes a batch; see [`SlidingWindowedAggregation::process_into`].
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

    /// Processes a batch in record order into `out` (emptied first). See
    /// [`super::time::TimeWindowedAggregation::process_into`].
    pub fn process_into<C>(
        &mut self,
        batch: &Batch<'_, C>,
        wall_clock_ms: i64,
        out: &mut WindowedResults<A::Output>,
    ) where
        C: ValueColumn<Value = A::Value>,
    {
        let mut stats = BatchStats::default();
        out.reset(self.emit == EmitStrategy::OnWindowClose);
        self.batch_writes.clear();
        for row in 0..batch.len() {
            // Kafka's sliding windows drop null values whatever the
            // aggregation.
            let Some(key) = batch.keys.get(row) else {
                stats.dropped_null_key += 1;
                continue;
            };
            if !batch.values.is_valid(row) {
                stats.dropped_null_value += 1;
                continue;
            }
            let ts = batch.timestamps[row];
            if ts < 0 {
                stats.dropped_invalid_timestamp += 1;
                continue;
            }
            self.observed_stream_time = self.observed_stream_time.max(ts);
            let close = self
                .observed_stream_time
                .saturating_sub(self.windows.grace());
            let td = self.windows.time_difference();
            if ts.saturating_add(td) < close {
                stats.dropped_expired += 1;
                continue;
            }
            self.expire(&mut stats);
            let record = Record {
                row: row as u32,
                ts,
                value: batch.values.value(row),
                close,
            };
            let id = self.keys.intern(key);
            if ts < td {
                self.process_early(id, key, &record, out, &mut stats);
            } else {
                self.process_reverse(id, key, &record, out, &mut stats);
                self.maybe_emit_final(record.row, close, wall_clock_ms, out, &mut stats);
            }
            if self.keys.state(id).is_empty() {
                self.keys.remove(id);
            }
        }
        self.totals.add(&stats);
        out.stats = stats;
    }

    /// Kafka's `processReverse`: the key's windows with start in `[ts - 2 *
    /// time difference, ts + 1]`, latest first.
    fn process_reverse(
        &mut self,
        id: u32,
        key: &[u8],
        r: &Record<A::Value>,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) {
        let td = self.windows.time_difference();
        let from = (r.ts - 2 * td).max(0);
        let found: Vec<(i64, Agg<A::State>)> = self
            .keys
            .state(id)
            .range(from..=r.ts + 1)
            .rev()
            .map(|(&s, &a)| (s, a))
            .collect();
        let mut starts = Vec::with_capacity(found.len());
        let mut left_agg = None;
        let mut right_agg = None;
        let mut left_exists = false;
        let mut right_exists = false;
        let mut previous_ts = None;
        for (start, agg) in found {
            starts.push(start);
            let end = start + td;
            if start == r.ts + 1 {
                right_exists = true;
            } else if end > r.ts {
                if right_agg.is_none() {
                    right_agg = Some(agg);
                }
                self.update(id, key, start, agg, r, out, stats);
            } else if end == r.ts {
                left_exists = true;
                self.update(id, key, start, agg, r, out, stats);
                if agg.timestamp < r.ts {
                    previous_ts = Some(agg.timestamp);
                } else {
                    // A record at this very timestamp already made every
                    // window this one needs.
                    return;
                }
            } else {
                left_agg = Some(agg);
                previous_ts = Some(agg.timestamp);
                break;
            }
        }
        // The previous record's right window, if the new record is in it.
        if let Some(p) = previous_ts {
            let start = p + 1;
            if !starts.contains(&start) && start + td >= r.ts {
                self.update(id, key, start, self.fresh(r.ts), r, out, stats);
            }
        }
        // The new record's left window.
        if !left_exists {
            let base = match (previous_ts, left_agg) {
                (Some(p), Some(left)) if r.ts - td <= p => Agg {
                    state: left.state,
                    timestamp: r.ts,
                },
                _ => self.fresh(r.ts),
            };
            self.update(id, key, r.ts - td, base, r, out, stats);
        }
        // The new record's right window, if later records are in reach.
        if !right_exists && let Some(right) = right_agg.filter(|a| a.timestamp > r.ts) {
            self.put_right_window(id, key, r.ts + 1, right, r, out);
        }
    }

    /// Kafka's `processEarly`: a record before the time difference goes
    /// into `[0, time difference]`; its right window and the previous
    /// record's are made as they would be later.
    fn process_early(
        &mut self,
        id: u32,
        key: &[u8],
        r: &Record<A::Value>,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) {
        let found: Vec<(i64, Agg<A::State>)> = self
            .keys
            .state(id)
            .range(0..=r.ts + 1)
            .map(|(&s, &a)| (s, a))
            .collect();
        let mut starts = Vec::with_capacity(found.len());
        let mut combined = None;
        let mut right_agg = None;
        let mut right_exists = false;
        let mut previous_ts = None;
        for (start, agg) in found {
            starts.push(start);
            if start == 0 {
                combined = Some(agg);
                if agg.timestamp < r.ts {
                    previous_ts = Some(agg.timestamp);
                }
            } else if start <= r.ts {
                right_agg = Some(agg);
                self.update(id, key, start, agg, r, out, stats);
            } else {
                right_exists = true;
            }
        }
        // Without a right window found, the combined window holds only
        // records after this one (if any).
        if right_agg.is_none()
            && let Some(c) = combined.filter(|c| c.timestamp > r.ts)
        {
            right_agg = Some(c);
        }
        if !right_exists && let Some(right) = right_agg.filter(|a| a.timestamp > r.ts) {
            self.put_right_window(id, key, r.ts + 1, right, r, out);
        }
        if let Some(p) = previous_ts
            && !starts.contains(&(p + 1))
        {
            self.update(id, key, p + 1, self.fresh(r.ts), r, out, stats);
        }
        let base = combined.unwrap_or_else(|| self.fresh(r.ts));
        self.update(id, key, 0, base, r, out, stats);
    }

    /// A new window's starting aggregate (Kafka's initializer, stamped with
    /// the record's timestamp).
    fn fresh(&self, ts: i64) -> Agg<A::State> {
        Agg {
            state: self.agg.init(),
            timestamp: ts,
        }
    }

    /// Kafka's `updateWindowAndForward`: adds the record to the window
    /// `[start, start + time difference]` whose aggregate was `base`,
    /// unless the window has closed (then the record counts a drop).
    #[allow(
        clippy::too_many_arguments,
        reason = "the processor's per-record context, kept in Kafka's shape"
    )]
    fn update(
        &mut self,
        id: u32,
        key: &[u8],
        start: i64,
        base: Agg<A::State>,
        r: &Record<A::Value>,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) {
        let end = start + self.windows.time_difference();
        if end < r.close {
            stats.dropped_expired += 1;
            return;
        }
        let new = Agg {
            state: self.agg.add(base.state, Some(r.value)),
            timestamp: r.ts.max(base.timestamp),
        };
        self.put(id, key, start, new);
        if self.emit == EmitStrategy::OnWindowUpdate {
            out.push(
                r.row,
                key,
                start,
                end,
                self.agg.output(new.state),
                new.timestamp,
            );
            if self.send_old_values {
                out.push_old(Some(self.agg.output(base.state)));
            }
        }
    }

    /// Kafka's `createCurrentRecordRightWindow`: the right window takes the
    /// later records' aggregate as it is (no close check, no aggregation).
    fn put_right_window(
        &mut self,
        id: u32,
        key: &[u8],
        start: i64,
        agg: Agg<A::State>,
        r: &Record<A::Value>,
        out: &mut WindowedResults<A::Output>,
    ) {
        self.put(id, key, start, agg);
        if self.emit == EmitStrategy::OnWindowUpdate {
            let end = start + self.windows.time_difference();
            out.push(
                r.row,
                key,
                start,
                end,
                self.agg.output(agg.state),
                agg.timestamp,
            );
            if self.send_old_values {
                out.push_old(None);
            }
        }
    }

    /// A window store put: store time advances first, and a window the
    /// store then hides is not kept, unless the record cache takes it.
    fn put(&mut self, id: u32, key: &[u8], start: i64, agg: Agg<A::State>) {
        self.store_observed_time = self.store_observed_time.max(start);
        self.pending.push(
            key,
            start,
            start + self.windows.time_difference(),
            Some(agg.state),
            agg.timestamp,
        );
        let hidden = start < self.min_visible_start();
        if self.caches_writes() {
            self.batch_writes.insert((start, id));
        } else if hidden {
            return;
        }
        if self.keys.state_mut(id).insert(start, agg).is_none() {
            if hidden {
                self.cache_held.insert((start, id));
            } else {
                self.by_start.entry(start).or_default().push(id);
            }
        }
    }

    /// Kafka's `maybeForwardFinalResult` for sliding windows: windows
    /// ending before the close time, by start then key.
    fn maybe_emit_final(
        &mut self,
        row: u32,
        close: i64,
        now: i64,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) {
        if self.emit != EmitStrategy::OnWindowClose || now < self.next_time_to_emit {
            return;
        }
        self.next_time_to_emit = now.saturating_add(self.emit_interval);
        if self.last_emit_close_time != NO_TIMESTAMP && self.last_emit_close_time >= close {
            return;
        }
        let td = self.windows.time_difference();
        let upper = close.saturating_sub(td).saturating_sub(1);
        if upper < 0 {
            return;
        }
        let lower = self.unemitted_from();
        // Kafka's time-ordered store hides windows that started before
        // store time - retention.
        let from = lower.max(self.store_observed_time.saturating_sub(self.retention));
        let mut hidden = Vec::new();
        for (&start, ids) in self.by_start.range(lower..=upper) {
            if start < from {
                stats.expired_before_emit += ids.len() as u64;
                hidden.push(start);
                continue;
            }
            let mut ids = ids.clone();
            ids.sort_unstable_by(|&a, &b| self.keys.key(a).cmp(self.keys.key(b)));
            for id in ids {
                let agg = self.keys.state(id)[&start];
                out.push(
                    row,
                    self.keys.key(id),
                    start,
                    start + td,
                    self.agg.output(agg.state),
                    agg.timestamp,
                );
                stats.emitted_final += 1;
            }
        }
        for start in hidden {
            for id in self.by_start.remove(&start).unwrap_or_default() {
                let wins = self.keys.state_mut(id);
                wins.remove(&start);
                if wins.is_empty() {
                    self.keys.remove(id);
                }
            }
        }
        self.last_emit_close_time = close;
    }
}

/// Writes window-store changes as Kafka's timestamped window store holds
/// them (`ValueAndTimestamp`: timestamp, then the encoded state). Returns
/// how many the store dropped as expired.
pub(crate) fn write_window_changes<A: Aggregate, F: SegmentFactory>(
    agg: &A,
    changes: &StoreChanges<A::State>,
    store: &mut WindowStore<F>,
) -> Result<u64> {
    let mut expired = 0;
    let mut value = Vec::with_capacity(8 + A::STATE_SIZE);
    for i in 0..changes.len() {
        let outcome = match changes.states[i] {
            Some(state) => {
                value.clear();
                value.extend_from_slice(&changes.timestamps[i].to_be_bytes());
                agg.encode_state(state, &mut value);
                store.put(changes.keys.get(i), Some(&value), changes.starts[i])?
            }
            None => store.put(changes.keys.get(i), None, changes.starts[i])?,
        };
        if outcome == crate::store::PutOutcome::Expired {
            expired += 1;
        }
    }
    Ok(expired)
}
