//! Session-window aggregation: Kafka's `KStreamSessionWindowAggregate`
//! processor, one batch per call.
//!
//! Per record, in offset order: a null key is dropped (a null value too for
//! the aggregations of the value); observed stream time advances; close
//! time = observed stream time - grace - gap. The key's sessions that end
//! at or after `ts - gap` and start at or before `ts + gap` are found (in
//! end, then start order) and merged with the new point session `[ts, ts]`
//! (their aggregates combined by the session merger, in that order). If the
//! merged session ends before the close time the record is dropped.
//! Otherwise, when the merged session is larger than `[ts, ts]`, each found
//! session is removed and forwarded as a tombstone, then the record is
//! aggregated and the merged session is put and forwarded. Every result's
//! timestamp is its session's end.
//!
//! Sessions are read back through the session store: lookups by key hide
//! sessions that end at or before store time - retention (store time is the
//! largest session end put; retention gap + grace by default), and final
//! results are read from Kafka's time-ordered session store, which only
//! loses sessions with the store's time segments (`max(retention / 2, 60
//! s)` long). The kernel emulates both. Behind a record cache (update mode),
//! a lookup also finds the sessions the cache still holds, expired by the
//! store or not, as Kafka's `CachingSessionStore.findSessions` does: the
//! kernel keeps an expired session while [`RecordCache`] says the cache
//! holds it (or it was written in the current batch, whose writes reach the
//! cache after it).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::aggregate::Aggregate;
use super::column::{Batch, ValueColumn};
use super::keys::KeyTable;
use super::results::{BatchStats, StoreChanges, WindowedResults};
use super::spec::{DEFAULT_EMIT_INTERVAL_MS, EmitStrategy, NO_TIMESTAMP, SessionWindows};
use crate::error::{Error, Result};
use crate::store::time_segments::default_segment_interval;
use crate::store::{PutOutcome, SegmentFactory, SessionStore};

/// Whether the record cache in front of the session store holds a session
/// `(key, start, end)` (a value, not a cached removal).
pub type RecordCache = Box<dyn Fn(&[u8], i64, i64) -> bool + Send + Sync>;

/// Expired sessions kept for the record cache are checked against it again
/// once there are this many (and then twice as many as survived).
const MIN_CACHE_RECHECK: usize = 1024;

/// One session-window aggregation processor (one per task and node).
pub struct SessionWindowedAggregation<A: Aggregate> {
    agg: A,
    windows: SessionWindows,
    emit: EmitStrategy,
    retention: i64,
    segment_interval: i64,
    emit_interval: i64,
    observed_stream_time: i64,
    /// The session store's observed stream time: the largest end put.
    store_observed_time: i64,
    last_emit_close_time: i64,
    next_time_to_emit: i64,
    /// Per key, its sessions by (end, start), as the store orders them.
    keys: KeyTable<BTreeMap<(i64, i64), A::State>>,
    /// Every session the store holds, by (end, key, start).
    by_end: BTreeSet<(i64, u32, i64)>,
    /// The record cache in front of the store, if any.
    record_cache: Option<RecordCache>,
    /// Sessions the store has expired that the record cache may still hold,
    /// by (end, key, start); and when to check them all again.
    cache_held: BTreeSet<(i64, u32, i64)>,
    recheck_at: usize,
    /// Sessions written in the current batch (in the cache once it is done).
    batch_writes: HashSet<(i64, u32, i64)>,
    pending: StoreChanges<A::State>,
    totals: BatchStats,
}

impl<A: Aggregate> std::fmt::Debug for SessionWindowedAggregation<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWindowedAggregation")
            .field("agg", &self.agg)
            .field("windows", &self.windows)
            .field("emit", &self.emit)
            .field("retention", &self.retention)
            .field("observed_stream_time", &self.observed_stream_time)
            .field("last_emit_close_time", &self.last_emit_close_time)
            .field("live_sessions", &self.by_end.len())
            .finish_non_exhaustive()
    }
}

impl<A: Aggregate> SessionWindowedAggregation<A> {
    /// A processor with Kafka's defaults: retention gap + grace, emit
    /// interval 1 s.
    pub fn new(agg: A, windows: SessionWindows, emit: EmitStrategy) -> Self {
        let retention = windows.default_retention();
        Self {
            agg,
            windows,
            emit,
            retention,
            segment_interval: default_segment_interval(retention),
            emit_interval: DEFAULT_EMIT_INTERVAL_MS,
            observed_stream_time: NO_TIMESTAMP,
            store_observed_time: NO_TIMESTAMP,
            last_emit_close_time: NO_TIMESTAMP,
            next_time_to_emit: 0,
            keys: KeyTable::new(),
            by_end: BTreeSet::new(),
            record_cache: None,
            cache_held: BTreeSet::new(),
            recheck_at: MIN_CACHE_RECHECK,
            batch_writes: HashSet::new(),
            pending: StoreChanges::default(),
            totals: BatchStats::default(),
        }
    }

    /// The session store's retention; Kafka rejects less than gap + grace.
    /// The store's segment interval follows (Kafka's `max(retention / 2,
    /// 60 s)`).
    pub fn with_retention(mut self, retention_ms: i64) -> Result<Self> {
        self.windows.check_retention(retention_ms)?;
        self.retention = retention_ms;
        self.segment_interval = default_segment_interval(retention_ms);
        Ok(self)
    }

    /// The record cache in front of the session store: lookups (update mode)
    /// also find the expired sessions it still holds.
    #[must_use]
    pub fn with_record_cache(mut self, cache: RecordCache) -> Self {
        self.record_cache = Some(cache);
        self
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

    pub fn windows(&self) -> &SessionWindows {
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

    /// Sessions held in memory.
    pub fn live_sessions(&self) -> usize {
        self.by_end.len()
    }

    /// Restores the times committed with the offsets, before any record or
    /// [`SessionWindowedAggregation::restore_session`]. Times never go back.
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

    /// Loads one session from the store after a restart (sessions the store
    /// no longer holds are ignored).
    pub fn restore_session(&mut self, key: &[u8], start: i64, end: i64, state: A::State) {
        self.store_observed_time = self.store_observed_time.max(end);
        if !self.is_held(end) {
            return;
        }
        let id = self.keys.intern(key);
        self.keys.state_mut(id).insert((end, start), state);
        self.by_end.insert((end, id, start));
    }

    /// Loads the sessions of a session store written from
    /// [`SessionWindowedAggregation::drain_changes`].
    pub fn restore_from_store<F: SegmentFactory>(&mut self, store: &SessionStore<F>) -> Result<()> {
        self.store_observed_time = self.store_observed_time.max(store.observed_stream_time());
        for entry in store.fetch_range(None, None)? {
            let state = self.agg.decode_state(&entry.value)?;
            self.restore_session(&entry.key, entry.start, entry.end, state);
        }
        Ok(())
    }

    /// The store writes since the last call, in order: removals of merged
    /// sessions (state None) and puts.
    pub fn drain_changes(&mut self) -> StoreChanges<A::State> {
        std::mem::take(&mut self.pending)
    }

    /// Writes changes to a session store (values as the encoded state, as
    /// Kafka's session store holds them). Returns how many puts the store
    /// dropped as expired.
    pub fn write_changes<F: SegmentFactory>(
        &self,
        changes: &StoreChanges<A::State>,
        store: &mut SessionStore<F>,
    ) -> Result<u64> {
        let mut expired = 0;
        let mut value = Vec::with_capacity(A::STATE_SIZE);
        for i in 0..changes.len() {
            let (key, start, end) = (changes.keys.get(i), changes.starts[i], changes.ends[i]);
            match changes.states[i] {
                Some(state) => {
                    value.clear();
                    self.agg.encode_state(state, &mut value);
                    if store.put(key, start, end, Some(&value))? == PutOutcome::Expired {
                        expired += 1;
                    }
                }
                None => store.remove(key, start, end)?,
            }
        }
        Ok(expired)
    }

    /// The earliest session end that lookups by key still find (Kafka's
    /// `actualFrom`).
    fn min_visible_end(&self) -> i64 {
        self.store_observed_time
            .saturating_sub(self.retention)
            .saturating_add(1)
    }

    /// Whether the store still holds a session ending at `end`: visible to
    /// lookups, or (final results) in a live time segment.
    fn is_held(&self, end: i64) -> bool {
        match self.emit {
            EmitStrategy::OnWindowUpdate => end >= self.min_visible_end(),
            EmitStrategy::OnWindowClose => end >= self.min_live_segment_start(),
        }
    }

    /// The first end of the oldest live segment of the time-ordered store.
    fn min_live_segment_start(&self) -> i64 {
        let t = self.store_observed_time.saturating_sub(self.retention);
        // Segment ids of negative times are never below the first segment.
        t.max(0) / self.segment_interval * self.segment_interval
    }

    /// Forgets the sessions the store no longer holds; in final mode, those
    /// not emitted yet are lost (Kafka drops whole segments).
    fn expire(&mut self, stats: &mut BatchStats) {
        while let Some(&(end, id, start)) = self.by_end.first() {
            if self.is_held(end) {
                break;
            }
            self.by_end.pop_first();
            if self.emit == EmitStrategy::OnWindowClose && end >= self.last_emit_close_time {
                stats.expired_before_emit += 1;
            }
            if self.cache_holds(id, start, end) {
                self.cache_held.insert((end, id, start));
            } else {
                self.forget(id, start, end);
            }
        }
        if self.cache_held.len() >= self.recheck_at {
            let held: Vec<_> = self.cache_held.iter().copied().collect();
            for (end, id, start) in held {
                if !self.cache_holds(id, start, end) {
                    self.cache_held.remove(&(end, id, start));
                    self.forget(id, start, end);
                }
            }
            self.recheck_at = MIN_CACHE_RECHECK.max(2 * self.cache_held.len());
        }
    }

    /// Whether the record cache (update mode) holds a session the store has
    /// expired: it does if it says so, or if the session was written in this
    /// batch.
    fn cache_holds(&self, id: u32, start: i64, end: i64) -> bool {
        let Some(cache) = &self.record_cache else {
            return false;
        };
        self.emit == EmitStrategy::OnWindowUpdate
            && (self.batch_writes.contains(&(end, id, start))
                || cache(self.keys.key(id), start, end))
    }

    fn forget(&mut self, id: u32, start: i64, end: i64) {
        let sessions = self.keys.state_mut(id);
        sessions.remove(&(end, start));
        if sessions.is_empty() {
            self.keys.remove(id);
        }
    }

    /// Processes a batch; see [`SessionWindowedAggregation::process_into`].
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
    /// [`super::time::TimeWindowedAggregation::process_into`]; tombstones
    /// of merged sessions are flagged in [`WindowedResults::tombstones`].
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
        out.reset(!update_mode);
        self.batch_writes.clear();
        let gap = self.windows.inactivity_gap();
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
            if ts < 0 {
                stats.dropped_invalid_timestamp += 1;
                continue;
            }
            self.observed_stream_time = self.observed_stream_time.max(ts);
            let close = self
                .observed_stream_time
                .saturating_sub(self.windows.grace())
                .saturating_sub(gap);
            self.expire(&mut stats);

            // Kafka's findSessions(key, ts - gap, ts + gap), merged in order;
            // sessions the store has expired only if the cache holds them.
            let min_visible = self.min_visible_end().max(ts.saturating_sub(gap));
            let earliest_end = if self.cache_held.is_empty() {
                min_visible
            } else {
                ts.saturating_sub(gap)
            };
            let latest_start = ts.saturating_add(gap);
            let id = self.keys.intern(key);
            let mut found: Vec<((i64, i64), A::State)> = self
                .keys
                .state(id)
                .range((earliest_end, i64::MIN)..)
                .filter(|((_, start), _)| *start <= latest_start)
                .map(|(&k, &v)| (k, v))
                .collect();
            found.retain(|&((e, s), _)| {
                if e >= min_visible || !self.cache_held.contains(&(e, id, s)) {
                    return true;
                }
                if self.cache_holds(id, s, e) {
                    return true;
                }
                // Evicted since: gone (the key is dropped below if empty).
                self.cache_held.remove(&(e, id, s));
                self.keys.state_mut(id).remove(&(e, s));
                false
            });
            let mut state = self.agg.init();
            let (mut start, mut end) = (ts, ts);
            for &((e, s), st) in &found {
                state = self.agg.merge(state, st);
                start = start.min(s);
                end = end.max(e);
            }
            if end < close {
                stats.dropped_expired += 1;
            } else {
                if (start, end) != (ts, ts) {
                    for &((e, s), _) in &found {
                        self.by_end.remove(&(e, id, s));
                        self.cache_held.remove(&(e, id, s));
                        self.batch_writes.remove(&(e, id, s));
                        self.keys.state_mut(id).remove(&(e, s));
                        self.pending.push(key, s, e, None, e);
                        if update_mode {
                            out.push_tombstone(row as u32, key, s, e, e);
                        }
                    }
                }
                state = self.agg.add(state, value);
                self.put(id, key, start, end, state);
                if update_mode {
                    out.push(row as u32, key, start, end, self.agg.output(state), end);
                }
            }
            if self.keys.state(id).is_empty() {
                self.keys.remove(id);
            }
            if !update_mode {
                // The put may have dropped time segments: Kafka reads final
                // results after it.
                self.expire(&mut stats);
                self.maybe_emit_final(row as u32, close, wall_clock_ms, out, &mut stats);
            }
        }
        self.totals.add(&stats);
        out.stats = stats;
    }

    /// A session store put: store time advances first; a session the store
    /// then no longer holds is not kept.
    fn put(&mut self, id: u32, key: &[u8], start: i64, end: i64, state: A::State) {
        self.store_observed_time = self.store_observed_time.max(end);
        self.pending.push(key, start, end, Some(state), end);
        self.batch_writes.insert((end, id, start));
        if self.is_held(end) {
            self.keys.state_mut(id).insert((end, start), state);
            self.by_end.insert((end, id, start));
        } else if self.cache_holds(id, start, end) {
            self.keys.state_mut(id).insert((end, start), state);
            self.cache_held.insert((end, id, start));
        }
    }

    /// Kafka's `maybeForwardFinalResult` for sessions: sessions ending
    /// before the close time, by end, start, then key.
    fn maybe_emit_final(
        &mut self,
        row: u32,
        close: i64,
        now: i64,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) {
        if now < self.next_time_to_emit {
            return;
        }
        self.next_time_to_emit = now.saturating_add(self.emit_interval);
        if self.last_emit_close_time != NO_TIMESTAMP && self.last_emit_close_time >= close {
            return;
        }
        let upper = close.saturating_sub(1);
        if upper < 0 {
            return;
        }
        let lower = self.last_emit_close_time.max(0);
        // A session can be a single point, so a range of one end counts.
        if upper < lower {
            return;
        }
        let mut emitted: Vec<(i64, i64, u32)> = self
            .by_end
            .range((lower, 0, i64::MIN)..=(upper, u32::MAX, i64::MAX))
            .map(|&(end, id, start)| (end, start, id))
            .collect();
        emitted.sort_unstable_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| self.keys.key(a.2).cmp(self.keys.key(b.2)))
        });
        for (end, start, id) in emitted {
            let state = self.keys.state(id)[&(end, start)];
            out.push(
                row,
                self.keys.key(id),
                start,
                end,
                self.agg.output(state),
                end,
            );
            stats.emitted_final += 1;
        }
        self.last_emit_close_time = close;
    }
}
