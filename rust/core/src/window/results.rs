//! What the kernels return: results (`KTable` updates of windowed keys) and
//! the store changes that back them, both columnar.

use super::aggregate::KafkaValue;
use super::column::{BinaryBuffer, BinaryColumn};

/// Where the keys of results are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultKeys {
    /// Result `i`'s key is the key of input row `rows[i]` of the batch (every
    /// update: Kafka forwards a window's update under the record's own key),
    /// so the kernel copies no key bytes.
    InputRows,
    /// The keys themselves, one per result (final results, whose windows
    /// may have been filled by earlier batches).
    Owned(BinaryBuffer),
}

/// Per-batch counters. Kafka records every `dropped_*` count in its
/// `dropped-records` task metric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Late records, one per window that was already closed (Kafka records
    /// the drop sensor once per expired window, so a record of a hopping
    /// window can count more than once; for sessions and sliding windows
    /// see the kernels).
    pub dropped_expired: u64,
    /// Records skipped for a null key.
    pub dropped_null_key: u64,
    /// Records skipped for a null value (see
    /// [`super::aggregate::Aggregate::AGGREGATES_NULL_VALUES`]).
    pub dropped_null_value: u64,
    /// Records skipped for a negative timestamp (Kafka's source node drops
    /// them before any processor, in the same metric).
    pub dropped_invalid_timestamp: u64,
    /// Final results emitted (Kafka's `window-aggregate-final-emit` sensor).
    pub emitted_final: u64,
    /// Closed windows whose final result was never emitted because the store
    /// had already expired them when the emit ran (Kafka reads final results
    /// back from the store, so a jump in stream time of more than the
    /// retention between two emits loses them). Not a Kafka metric.
    pub expired_before_emit: u64,
}

impl BatchStats {
    /// Everything Kafka's `dropped-records` sensor counts.
    pub fn dropped_records(&self) -> u64 {
        self.dropped_expired
            + self.dropped_null_key
            + self.dropped_null_value
            + self.dropped_invalid_timestamp
    }

    pub(crate) fn add(&mut self, other: &BatchStats) {
        self.dropped_expired += other.dropped_expired;
        self.dropped_null_key += other.dropped_null_key;
        self.dropped_null_value += other.dropped_null_value;
        self.dropped_invalid_timestamp += other.dropped_invalid_timestamp;
        self.emitted_final += other.emitted_final;
        self.expired_before_emit += other.expired_before_emit;
    }
}

/// Results of one batch, in the order Kafka forwards them: each is a `KTable`
/// update `Windowed(key, window) -> value` with its record timestamp.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowedResults<O> {
    /// The input row whose processing forwarded the result (for a final
    /// result, the record that triggered the emit; Kafka forwards its
    /// headers).
    pub rows: Vec<u32>,
    pub keys: ResultKeys,
    pub starts: Vec<i64>,
    /// Window ends: exclusive for time windows, inclusive for sliding and
    /// session windows (as Kafka's `TimeWindow` and `SessionWindow`).
    pub ends: Vec<i64>,
    /// Result values; a tombstone's slot holds the default value.
    pub values: Vec<O>,
    /// Empty when no result is a tombstone; otherwise one flag per result
    /// (session merges forward a tombstone for each absorbed session).
    pub tombstones: Vec<bool>,
    /// Record timestamps of the results.
    pub timestamps: Vec<i64>,
    /// Empty unless the kernel sends old values (Kafka's
    /// `sendOldValues`); otherwise one per result: the window's previous
    /// result, None for a new window (and for final results, as Kafka).
    pub old_values: Vec<Option<O>>,
    /// Empty unless the kernel sends store values; otherwise each update's
    /// new aggregate state as the store holds it
    /// ([`super::aggregate::Aggregate::encode_state`]), `STATE_SIZE` bytes
    /// per result: what a caller that writes every update through a record
    /// cache puts.
    pub encoded_states: Vec<u8>,
    pub stats: BatchStats,
}

impl<O> Default for WindowedResults<O> {
    fn default() -> Self {
        Self {
            rows: Vec::new(),
            keys: ResultKeys::InputRows,
            starts: Vec::new(),
            ends: Vec::new(),
            values: Vec::new(),
            tombstones: Vec::new(),
            timestamps: Vec::new(),
            old_values: Vec::new(),
            encoded_states: Vec::new(),
            stats: BatchStats::default(),
        }
    }
}

impl<O: KafkaValue + Default> WindowedResults<O> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Empties the results, keeping their allocations; `owned_keys` picks
    /// how the next results give their keys.
    pub fn reset(&mut self, owned_keys: bool) {
        match (&mut self.keys, owned_keys) {
            (ResultKeys::Owned(keys), true) => keys.clear(),
            (_, true) => self.keys = ResultKeys::Owned(BinaryBuffer::new()),
            (_, false) => self.keys = ResultKeys::InputRows,
        }
        self.rows.clear();
        self.starts.clear();
        self.ends.clear();
        self.values.clear();
        self.tombstones.clear();
        self.timestamps.clear();
        self.old_values.clear();
        self.encoded_states.clear();
        self.stats = BatchStats::default();
    }

    pub fn reserve(&mut self, additional: usize) {
        self.rows.reserve(additional);
        self.starts.reserve(additional);
        self.ends.reserve(additional);
        self.values.reserve(additional);
        self.timestamps.reserve(additional);
    }

    /// Result `i`'s key: from the input keys of the batch that produced it,
    /// or owned.
    pub fn key<'a>(&'a self, i: usize, input_keys: &BinaryColumn<'a>) -> Option<&'a [u8]> {
        match &self.keys {
            ResultKeys::InputRows => input_keys.get(self.rows[i] as usize),
            ResultKeys::Owned(keys) => Some(keys.get(i)),
        }
    }

    /// Appends a result; `key` is only copied when keys are owned.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    pub(crate) fn push(&mut self, row: u32, key: &[u8], start: i64, end: i64, value: O, ts: i64) {
        self.rows.push(row);
        if let ResultKeys::Owned(keys) = &mut self.keys {
            keys.push(key);
        }
        self.starts.push(start);
        self.ends.push(end);
        self.values.push(value);
        self.timestamps.push(ts);
        if !self.tombstones.is_empty() {
            self.tombstones.push(false);
        }
    }

    /// Appends an update (keys as input rows, no tombstones: what
    /// [`WindowedResults::reset`] without owned keys gives).
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    pub(crate) fn push_update(&mut self, row: u32, start: i64, end: i64, value: O, ts: i64) {
        debug_assert!(matches!(self.keys, ResultKeys::InputRows) && self.tombstones.is_empty());
        self.rows.push(row);
        self.starts.push(start);
        self.ends.push(end);
        self.values.push(value);
        self.timestamps.push(ts);
    }

    /// Appends the old value of the result just pushed.
    #[inline]
    pub(crate) fn push_old(&mut self, old: Option<O>) {
        self.old_values.push(old);
    }

    /// Appends a tombstone (a session absorbed by a merge).
    pub(crate) fn push_tombstone(&mut self, row: u32, key: &[u8], start: i64, end: i64, ts: i64) {
        if self.tombstones.is_empty() {
            self.tombstones.resize(self.rows.len(), false);
        }
        self.rows.push(row);
        if let ResultKeys::Owned(keys) = &mut self.keys {
            keys.push(key);
        }
        self.starts.push(start);
        self.ends.push(end);
        self.values.push(O::default());
        self.timestamps.push(ts);
        self.tombstones.push(true);
    }

    /// Result `i`'s value, None for a tombstone.
    pub fn value(&self, i: usize) -> Option<O> {
        if self.tombstones.get(i).copied().unwrap_or(false) {
            None
        } else {
            Some(self.values[i])
        }
    }

    /// The values as Kafka serde bytes, 8 per result (tombstones as zeros;
    /// see [`WindowedResults::tombstones`]).
    pub fn encoded_values(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.values.len() * 8);
        for (i, v) in self.values.iter().enumerate() {
            if self.tombstones.get(i).copied().unwrap_or(false) {
                out.extend_from_slice(&[0; 8]);
            } else {
                out.extend_from_slice(&v.to_kafka_bytes());
            }
        }
        out
    }
}

/// Store writes that back the results, to apply to the window or session
/// store (and its changelog) in order: Kafka's `put(Windowed(key, window),
/// ValueAndTimestamp(state, timestamp))`, or a removal when `state` is None.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreChanges<S> {
    pub keys: BinaryBuffer,
    pub starts: Vec<i64>,
    /// Window ends as the store keys them (time windows: start + size).
    pub ends: Vec<i64>,
    pub states: Vec<Option<S>>,
    /// The result timestamps (time and sliding windows' stores keep them).
    pub timestamps: Vec<i64>,
}

impl<S> Default for StoreChanges<S> {
    fn default() -> Self {
        Self {
            keys: BinaryBuffer::new(),
            starts: Vec::new(),
            ends: Vec::new(),
            states: Vec::new(),
            timestamps: Vec::new(),
        }
    }
}

impl<S> StoreChanges<S> {
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    pub(crate) fn push(&mut self, key: &[u8], start: i64, end: i64, state: Option<S>, ts: i64) {
        self.keys.push(key);
        self.starts.push(start);
        self.ends.push(end);
        self.states.push(state);
        self.timestamps.push(ts);
    }
}
