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

use super::aggregate::Aggregate;
use super::column::{Batch, ValueColumn};
use super::results::{BatchStats, StoreChanges, WindowedResults};

use super::spec::{DEFAULT_EMIT_INTERVAL_MS, EmitStrategy, NO_TIMESTAMP, TimeWindows};
use super::table::{Hint, Probe, StartTable, Tables, Upsert};
use crate::error::{Error, Result};
use crate::store::{SegmentFactory, WindowStore};

/// Rows per chunk: the kernel first prepares a chunk's rows (validity,
/// timestamps, key hashes, first window starts) in one tight loop, then
/// aggregates them, prefetching the window slots a few rows ahead. Keeping
/// the two loops apart keeps each short; the chunk's arrays stay in cache.
const CHUNK: usize = 256;

/// How many rows ahead the aggregation loop prefetches window slots; the
/// control bytes that find them are prefetched twice as far ahead.
const LOOKAHEAD: usize = 16;

/// Windows of a row prefetched (and hinted, see [`Hint`]); a hopping
/// window's others are looked up without.
const PREFETCHED_WINDOWS: usize = 8;

/// By default, live tables whose slots take more bytes than this are
/// prefetched (half a core's L2 cache on the machines measured; smaller
/// ones stay in cache).
pub const DEFAULT_PREFETCH_ABOVE_BYTES: usize = 512 << 10;

/// Rows whose hints are kept: a row's hints are used [`LOOKAHEAD`] rows
/// after they are taken, so a small ring (4 KiB, not a chunk's worth that
/// would crowd the L1 cache) holds them.
const HINT_ROWS: usize = 32;
const _: () = assert!(LOOKAHEAD < HINT_ROWS && HINT_ROWS.is_power_of_two());

/// Why a prepared row is skipped.
const KEEP: u8 = 0;
const NULL_KEY: u8 = 1;
const NULL_VALUE: u8 = 2;
const NEGATIVE_TS: u8 = 3;

/// One chunk of prepared rows, as scalar arrays (a struct copied through
/// memory here would stall on store forwarding).
struct Prepared {
    skip: [u8; CHUNK],
    /// Where each key is in the batch's key data.
    key_from: [usize; CHUNK],
    key_to: [usize; CHUNK],
    tags: [u64; CHUNK],
    words0: [u64; CHUNK],
    words1: [u64; CHUNK],
    firsts: [i64; CHUNK],
    /// Where the prefetches of row `j`'s windows found their slots, at
    /// `j % HINT_ROWS`.
    hints: [[Hint; PREFETCHED_WINDOWS]; HINT_ROWS],
}

impl Prepared {
    fn new() -> Box<Self> {
        Box::new(Self {
            skip: [KEEP; CHUNK],
            key_from: [0; CHUNK],
            key_to: [0; CHUNK],
            tags: [0; CHUNK],
            words0: [0; CHUNK],
            words1: [0; CHUNK],
            firsts: [0; CHUNK],
            hints: [[Hint::NONE; PREFETCHED_WINDOWS]; HINT_ROWS],
        })
    }

    #[inline]
    fn probe(&self, j: usize) -> Probe {
        Probe {
            tag: self.tags[j],
            words: [self.words0[j], self.words1[j]],
        }
    }
}

/// One time-windowed aggregation processor (one per task and node).
pub struct TimeWindowedAggregation<A: Aggregate> {
    agg: A,
    windows: TimeWindows,
    emit: EmitStrategy,
    retention: i64,
    emit_interval: i64,
    /// Whether updates carry the window's previous result (Kafka's
    /// `sendOldValues`).
    send_old_values: bool,
    /// Whether updates carry their encoded state (see
    /// [`WindowedResults::encoded_states`]).
    send_states: bool,
    observed_stream_time: i64,
    /// The window store's own observed stream time: the largest window
    /// start put. Final results are read back through it (see
    /// [`BatchStats::expired_before_emit`]).
    store_observed_time: i64,
    last_emit_close_time: i64,
    next_time_to_emit: i64,
    /// The windows that can still change (and, in final mode, the closed
    /// ones not yet emitted), one table per start.
    tables: Tables<A::State>,
    /// The first window start computed last (see `first_start`).
    last_first_start: i64,
    /// Scratch space for one chunk of prepared rows (taken while in use).
    prepared: Option<Box<Prepared>>,
    /// Slot bytes above which window slots are prefetched.
    prefetch_above: usize,
    pending: StoreChanges<A::State>,
    /// Update mode: tables of closed windows, most of whose slots changed
    /// since the last drain, oldest first; the drain copies their changes
    /// out (see `evict_closed`).
    closed: Vec<StartTable<A::State>>,
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
            .field("live_windows", &self.tables.len())
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
            send_old_values: false,
            send_states: false,
            observed_stream_time: NO_TIMESTAMP,
            store_observed_time: NO_TIMESTAMP,
            last_emit_close_time: NO_TIMESTAMP,
            next_time_to_emit: 0,
            tables: Tables::new(),
            last_first_start: 0,
            prepared: None,
            prefetch_above: DEFAULT_PREFETCH_ABOVE_BYTES,
            pending: StoreChanges::default(),
            closed: Vec::new(),
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

    /// Updates carry the window's previous result in
    /// [`WindowedResults::old_values`] (Kafka's `sendOldValues`, which a
    /// downstream table operation that retracts old values turns on).
    #[must_use]
    pub fn with_old_values(mut self, send: bool) -> Self {
        self.send_old_values = send;
        self
    }

    /// Prefetches window slots, a few records ahead, once the live tables'
    /// slots take more than `bytes` (default
    /// [`DEFAULT_PREFETCH_ABOVE_BYTES`]): below, they stay in cache and the
    /// prefetches only cost. 0 always prefetches, `usize::MAX` never does;
    /// results are the same either way.
    #[must_use]
    pub fn with_prefetch_above(mut self, bytes: usize) -> Self {
        self.prefetch_above = bytes;
        self
    }

    /// Updates carry their new state as the store holds it, in
    /// [`WindowedResults::encoded_states`] (for a caller that writes every
    /// update through a record cache, as Kafka's caching store sees them).
    #[must_use]
    pub fn with_states(mut self, send: bool) -> Self {
        self.send_states = send;
        self
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

    /// Windows held in memory.
    pub fn live_windows(&self) -> usize {
        self.tables.len()
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
        let keep = match self.emit {
            EmitStrategy::OnWindowUpdate => self.windows.window_end(start) > self.close_time(),
            EmitStrategy::OnWindowClose => {
                self.last_emit_close_time == NO_TIMESTAMP
                    || start > self.last_emit_close_time - self.windows.size()
            }
        };
        if !keep {
            return;
        }
        let probe = self.tables.probe(key);
        let table = self.tables.get_or_create(start);
        let i = match table.upsert(key, &probe) {
            Upsert::Found(i) | Upsert::Created(i) => i,
        };
        let slot = table.slot_mut(i);
        slot.state = state;
        slot.timestamp = timestamp;
    }

    /// Loads the windows of a window store written from
    /// [`TimeWindowedAggregation::drain_changes`] (values as Kafka's
    /// `ValueAndTimestamp` bytes), after
    /// [`TimeWindowedAggregation::restore_times`]. In final mode, a closed
    /// window not yet emitted that the store already hides (start at store
    /// time - retention exactly: Kafka's time-ordered store still shows it,
    /// strom's store does not) is lost; give the store 1 ms more retention
    /// to keep it.
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

    /// Processes a batch in record order into `out` (emptied first, its
    /// allocations reused). `wall_clock_ms` is the system time for the
    /// emit-interval throttle of final results. Updates give their keys as
    /// input rows, final results own theirs (see
    /// [`super::results::ResultKeys`]).
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
        if update_mode {
            let per_record = self.windows.window_starts(i64::MAX / 2).len();
            out.reserve(batch.len() * per_record);
            if self.send_old_values {
                out.old_values.reserve(batch.len() * per_record);
            }
        }
        let mut prepared = self.prepared.take().unwrap_or_else(Prepared::new);
        let mut base = 0;
        while base < batch.len() {
            let n = CHUNK.min(batch.len() - base);
            self.prepare(batch, base, n, &mut prepared);
            self.aggregate(
                batch,
                base,
                n,
                &mut prepared,
                wall_clock_ms,
                out,
                &mut stats,
            );
            base += n;
        }
        self.prepared = Some(prepared);
        self.totals.add(&stats);
        out.stats = stats;
    }

    /// The first loop over a chunk: why each row is skipped, or its key's
    /// probe and first window start.
    fn prepare<C>(&mut self, batch: &Batch<'_, C>, base: usize, n: usize, p: &mut Prepared)
    where
        C: ValueColumn<Value = A::Value>,
    {
        let timestamps = &batch.timestamps[base..base + n];
        for (j, &ts) in timestamps.iter().enumerate() {
            let row = base + j;
            let Some((from, to)) = batch.keys.span(row) else {
                p.skip[j] = NULL_KEY;
                continue;
            };
            if !A::AGGREGATES_NULL_VALUES && !batch.values.is_valid(row) {
                p.skip[j] = NULL_VALUE;
                continue;
            }
            if ts < 0 {
                p.skip[j] = NEGATIVE_TS;
                continue;
            }
            let probe = self.tables.probe(batch.keys.bytes(from, to));
            p.skip[j] = KEEP;
            p.key_from[j] = from;
            p.key_to[j] = to;
            p.firsts[j] = self.first_start(ts);
            p.tags[j] = probe.tag;
            p.words0[j] = probe.words[0];
            p.words1[j] = probe.words[1];
        }
    }

    /// Prefetches the window slots of prepared row `j` (of its first
    /// [`PREFETCHED_WINDOWS`] windows) and notes where they are, or only
    /// the control bytes that find them.
    #[inline]
    fn prefetch(&self, ts: i64, p: &mut Prepared, j: usize, ctrl_only: bool) {
        if p.skip[j] != KEEP {
            return;
        }
        let mut start = p.firsts[j];
        let advance = self.windows.advance();
        let last = ts.min(start.saturating_add((PREFETCHED_WINDOWS as i64 - 1) * advance));
        let mut nth = 0;
        while start <= last {
            if ctrl_only {
                self.tables.prefetch_ctrl(start, p.tags[j]);
            } else {
                p.hints[j % HINT_ROWS][nth] = self.tables.prefetch(start, p.tags[j]);
            }
            start += advance;
            nth += 1;
        }
    }

    /// The second loop over a chunk: Kafka's `process` per row.
    #[allow(
        clippy::too_many_arguments,
        reason = "the batch, the chunk and the results of one call"
    )]
    fn aggregate<C>(
        &mut self,
        batch: &Batch<'_, C>,
        base: usize,
        n: usize,
        p: &mut Prepared,
        wall_clock_ms: i64,
        out: &mut WindowedResults<A::Output>,
        stats: &mut BatchStats,
    ) where
        C: ValueColumn<Value = A::Value>,
    {
        let update_mode = self.emit == EmitStrategy::OnWindowUpdate;
        let send_old = update_mode && self.send_old_values;
        let send_states = update_mode && self.send_states;
        let timestamps = &batch.timestamps[base..base + n];
        let (size, advance, grace) = (
            self.windows.size(),
            self.windows.advance(),
            self.windows.grace(),
        );
        // Tables that stay in cache gain nothing from prefetches (measured
        // about 10% slower with them at 1,000 keys), and their hints are
        // then never taken.
        let prefetching = self.tables.slot_bytes() > self.prefetch_above;
        if prefetching {
            for (j, &ts) in timestamps.iter().enumerate().take(2 * LOOKAHEAD) {
                self.prefetch(ts, p, j, true);
            }
            for (j, &ts) in timestamps.iter().enumerate().take(LOOKAHEAD) {
                self.prefetch(ts, p, j, false);
            }
        }
        let (mut expired, mut null_keys, mut null_values, mut negative) = (0, 0, 0, 0);
        for (j, &ts) in timestamps.iter().enumerate() {
            if prefetching {
                if let Some(&ahead) = timestamps.get(j + 2 * LOOKAHEAD) {
                    self.prefetch(ahead, p, j + 2 * LOOKAHEAD, true);
                }
                if let Some(&ahead) = timestamps.get(j + LOOKAHEAD) {
                    self.prefetch(ahead, p, j + LOOKAHEAD, false);
                }
            }
            match p.skip[j] {
                KEEP => {}
                NULL_KEY => {
                    null_keys += 1;
                    continue;
                }
                NULL_VALUE => {
                    null_values += 1;
                    continue;
                }
                _ => {
                    negative += 1;
                    continue;
                }
            }
            let row = base + j;
            let key = batch.keys.bytes(p.key_from[j], p.key_to[j]);
            let value = if batch.values.is_valid(row) {
                Some(batch.values.value(row))
            } else {
                None
            };
            if ts > self.observed_stream_time {
                self.observed_stream_time = ts;
            }
            let close = self.observed_stream_time.saturating_sub(grace);
            if update_mode && self.tables.first_start().saturating_add(size) <= close {
                self.evict_closed(close);
            }
            let probe = p.probe(j);
            let mut start = p.firsts[j];
            let mut nth = 0;
            while start <= ts {
                let end = start.saturating_add(size);
                if end > close {
                    let agg = &self.agg;
                    let table = self.tables.get_or_create(start);
                    let hint = if prefetching {
                        p.hints[j % HINT_ROWS]
                            .get(nth)
                            .copied()
                            .unwrap_or(Hint::NONE)
                    } else {
                        Hint::NONE
                    };
                    let (state, new_ts, old) = match table.upsert_hinted(key, &probe, hint) {
                        Upsert::Found(i) => {
                            let slot = table.slot_mut(i);
                            let old = slot.state;
                            slot.state = agg.add(slot.state, value);
                            slot.timestamp = slot.timestamp.max(ts);
                            let r = (slot.state, slot.timestamp, Some(old));
                            table.touch(i);
                            r
                        }
                        Upsert::Created(i) => {
                            let state = agg.add(agg.init(), value);
                            let slot = table.slot_mut(i);
                            slot.state = state;
                            slot.timestamp = ts;
                            table.touch(i);
                            self.store_observed_time = self.store_observed_time.max(start);
                            (state, ts, None)
                        }
                    };
                    if update_mode {
                        out.push_update(row as u32, start, end, agg.output(state), new_ts);
                        if send_old {
                            out.push_old(old.map(|o| agg.output(o)));
                        }
                        if send_states {
                            agg.encode_state(state, &mut out.encoded_states);
                        }
                    }
                } else {
                    expired += 1;
                }
                nth += 1;
                match start.checked_add(advance) {
                    Some(next) => start = next,
                    None => break,
                }
            }
            if !update_mode {
                self.maybe_emit_final(row as u32, close, wall_clock_ms, out, stats);
            }
        }
        stats.dropped_expired += expired;
        stats.dropped_null_key += null_keys;
        stats.dropped_null_value += null_values;
        stats.dropped_invalid_timestamp += negative;
    }

    /// The first window start of `ts` (`i64::MAX` when it has none),
    /// without a division when it is the previous row's.
    #[inline]
    fn first_start(&mut self, ts: i64) -> i64 {
        if ts < 0 {
            return i64::MAX;
        }
        let x = (ts - self.windows.size() + self.windows.advance()).max(0);
        let cached = self.last_first_start;
        if x >= cached && x - cached < self.windows.advance() {
            return cached;
        }
        let first = x / self.windows.advance() * self.windows.advance();
        self.last_first_start = first;
        first
    }

    /// Update mode: forgets windows that closed (end <= close time); they
    /// can no longer change. A table most of whose windows changed since
    /// the last drain is kept whole until the drain, which copies them out
    /// once: copying them into the pending changes here cost about a
    /// sixth of a tumbling count's time at 100k keys (the list's fresh
    /// pages), and the table's slots hold them as compactly. A table with
    /// few changes has them copied and is reused at once.
    fn evict_closed(&mut self, close: i64) {
        while self.windows.window_end(self.tables.first_start()) <= close {
            let Some(mut table) = self.tables.take_first() else {
                return;
            };
            if table.dirty.len() * 2 >= table.capacity() {
                self.closed.push(table);
            } else {
                // The pending changes stay in start order (the store's
                // retention follows the starts it is given).
                self.capture_closed();
                let end = self.windows.window_end(table.start);
                Self::capture(&mut self.pending, end, &mut table);
                self.tables.recycle(table);
            }
        }
    }

    /// Copies the closed tables' changes into the pending ones and reuses
    /// the tables.
    fn capture_closed(&mut self) {
        for mut table in std::mem::take(&mut self.closed) {
            let end = self.windows.window_end(table.start);
            Self::capture(&mut self.pending, end, &mut table);
            self.tables.recycle(table);
        }
    }

    /// Final mode: records the changes of the oldest table, about to be
    /// dropped.
    fn capture_first_dirty(&mut self) {
        if let Some(table) = self.tables.first_mut() {
            let end = self.windows.window_end(table.start);
            Self::capture(&mut self.pending, end, table);
        }
    }

    /// Records the changes of a table's windows not yet drained.
    fn capture(pending: &mut StoreChanges<A::State>, end: i64, table: &mut StartTable<A::State>) {
        for i in table.take_dirty() {
            let slot = table.slot(i);
            if slot.is_dirty() {
                pending.push(
                    table.key(i),
                    table.start,
                    end,
                    Some(slot.state),
                    slot.timestamp,
                );
            }
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
        while self.tables.first_start() <= upper {
            let table = self.tables.first().expect("a first table");
            let start = table.start;
            let end = self.windows.window_end(start);
            if start >= actual_from {
                let mut slots: Vec<u32> = table.occupied().collect();
                slots.sort_unstable_by(|&a, &b| table.key(a).cmp(table.key(b)));
                for i in slots {
                    let slot = table.slot(i);
                    out.push(
                        row,
                        table.key(i),
                        start,
                        end,
                        self.agg.output(slot.state),
                        slot.timestamp,
                    );
                }
                stats.emitted_final += table.len() as u64;
            } else {
                stats.expired_before_emit += table.len() as u64;
            }
            self.capture_first_dirty();
            self.tables.pop_first();
        }
        self.last_emit_close_time = close;
    }

    /// The store writes since the last call: each changed window once, with
    /// its latest state and result timestamp. Apply them to the window store
    /// (values as [`super::aggregate::value_and_timestamp`] bytes, as Kafka's
    /// timestamped window store holds them), e.g. with
    /// [`TimeWindowedAggregation::write_changes`].
    pub fn drain_changes(&mut self) -> StoreChanges<A::State> {
        self.capture_closed();
        let mut changes = std::mem::take(&mut self.pending);
        for table in self.tables.iter_mut() {
            let end = self.windows.window_end(table.start);
            for i in table.take_dirty() {
                let slot = table.slot_mut(i);
                if !slot.is_dirty() {
                    continue;
                }
                slot.clear_dirty();
                let (state, ts) = (slot.state, slot.timestamp);
                changes.push(table.key(i), table.start, end, Some(state), ts);
            }
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
        super::sliding::write_window_changes(&self.agg, changes, store)
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
    fn evicts_closed_windows() {
        let w = TimeWindows::of_size_with_no_grace(10).unwrap();
        let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
        run(&mut p, &[("a", 1), ("b", 2)]);
        assert_eq!(p.live_windows(), 2);
        run(&mut p, &[("a", 10)]);
        // [0,10) closed at stream time 10.
        assert_eq!(p.live_windows(), 1);
        let changes = p.drain_changes();
        assert_eq!(changes.len(), 3);
        assert!(p.drain_changes().is_empty());
    }

    #[test]
    fn old_values_are_the_previous_results() {
        let w = TimeWindows::of_size_with_no_grace(10)
            .unwrap()
            .advance_by(5)
            .unwrap();
        let mut p = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate)
            .with_old_values(true);
        let out = run(&mut p, &[("a", 7), ("a", 8), ("b", 9)]);
        // a@7 creates [0,10) and [5,15); a@8 updates both; b@9 creates both.
        assert_eq!(out.values, [1, 1, 2, 2, 1, 1]);
        assert_eq!(out.old_values, [None, None, Some(1), Some(1), None, None]);
        let mut q = TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate);
        assert!(run(&mut q, &[("a", 7)]).old_values.is_empty());
        let mut s =
            TimeWindowedAggregation::new(Count, w, EmitStrategy::OnWindowUpdate).with_states(true);
        let out = run(&mut s, &[("a", 7), ("a", 8)]);
        let states: Vec<i64> = out
            .encoded_states
            .chunks(8)
            .map(|c| i64::from_be_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(states, [1, 1, 2, 2]);
    }
}
