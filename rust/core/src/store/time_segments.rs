//! Time segments shared by the window and session stores (Kafka's
//! `Segments` / `AbstractSegments`).
//!
//! A segmented store keeps one [`KeyValueBytes`] store per time segment of
//! `segment_interval` ms: segment id = timestamp / segment interval (the
//! window start for window stores, the session end for session stores). The
//! store tracks *observed stream time*, the largest timestamp ever put; a
//! segment is dropped whole, through its [`SegmentFactory`], once its id is
//! below `segment_id(observed_stream_time - retention)`, so retention costs
//! one directory deletion in the persistent flavour rather than a scan.
//!
//! Record-level expiry is finer than segment dropping: a timestamp `t` is
//! expired once `t <= observed_stream_time - retention`. Expired records are
//! never returned by reads and puts of them are dropped (reported as
//! [`PutOutcome::Expired`] so callers can count Kafka's "dropped records" for
//! expired windows), as Kafka's `InMemoryWindowStore` and
//! `InMemorySessionStore` do. (Kafka's `RocksDB` store only drops puts whose
//! whole segment is gone; the records it keeps beyond that are expired and
//! unreadable, so reads agree, only the drop count differs.)
//!
//! Timestamps are never negative: Kafka's `Window` rejects negative starts,
//! and the key schemas' scan bounds assume it.
//!
//! A persistent [`SegmentFactory`] keeps each segment in its own directory,
//! named `<store>.<segment start>` by [`segment_name`] as Kafka names them;
//! `existing` parses those names back into ids (start / interval) and
//! `destroy` deletes the directory. Observed stream time is not stored in the
//! segments: the caller commits it with its offsets and hands it back through
//! `restore_observed_stream_time` after reopening, before processing.

use std::collections::BTreeMap;

use super::{InMemoryKeyValueStore, KeyValueBytes};
use crate::error::{Error, Result};

/// Kafka's `ConsumerRecord.NO_TIMESTAMP`: the observed stream time of a store
/// that has seen no record.
pub const NO_TIMESTAMP: i64 = -1;

/// The smallest segment interval Kafka picks by default.
pub const MIN_SEGMENT_INTERVAL_MS: i64 = 60_000;

/// Kafka's default segment interval for persistent window and session stores
/// (`Stores.persistentWindowStore`, `RocksDbSessionBytesStoreSupplier`):
/// `max(retention / 2, 60_000)`.
pub fn default_segment_interval(retention_ms: i64) -> i64 {
    (retention_ms / 2).max(MIN_SEGMENT_INTERVAL_MS)
}

/// Kafka's segment name: `<store name>.<segment start timestamp>`, e.g.
/// `store.120000` for segment 2 of a 60 s interval. Persistent factories use
/// it as the segment's directory name.
pub fn segment_name(store_name: &str, segment_id: i64, segment_interval: i64) -> String {
    format!(
        "{store_name}.{}",
        segment_id.saturating_mul(segment_interval)
    )
}

/// What a put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The value was stored, or the key deleted for a `None` value.
    Written,
    /// The timestamp is beyond retention (`<= observed stream time -
    /// retention`): nothing was written. Kafka counts these as dropped records.
    Expired,
    /// A `None` value put into a window store that retains duplicates: a
    /// no-op, as in Kafka (there is no single entry to delete).
    Ignored,
}

/// Creates, opens and destroys the per-segment stores. The in-memory flavour
/// is [`InMemorySegmentFactory`]; a persistent one keeps one directory per
/// segment (named by [`segment_name`]).
pub trait SegmentFactory: Send {
    type Store: KeyValueBytes;

    /// Ids of the segments that already exist, opened when the segmented
    /// store is created (Kafka's `openExisting`). In memory: none.
    fn existing(&mut self) -> Result<Vec<i64>>;

    /// Opens segment `id`, creating it when it does not exist.
    fn open(&mut self, id: i64) -> Result<Self::Store>;

    /// Deletes a segment that fell out of retention, with all its data.
    fn destroy(&mut self, id: i64, store: Self::Store) -> Result<()>;
}

/// Segments held in memory, each an [`InMemoryKeyValueStore`].
#[derive(Debug, Default, Clone, Copy)]
pub struct InMemorySegmentFactory;

impl SegmentFactory for InMemorySegmentFactory {
    type Store = InMemoryKeyValueStore;

    fn existing(&mut self) -> Result<Vec<i64>> {
        Ok(Vec::new())
    }

    fn open(&mut self, _id: i64) -> Result<InMemoryKeyValueStore> {
        Ok(InMemoryKeyValueStore::new())
    }

    fn destroy(&mut self, _id: i64, _store: InMemoryKeyValueStore) -> Result<()> {
        Ok(())
    }
}

/// The live segments of one window or session store, keyed by segment id,
/// with the store's observed stream time.
pub struct Segments<F: SegmentFactory> {
    factory: F,
    by_id: BTreeMap<i64, F::Store>,
    retention: i64,
    segment_interval: i64,
    observed_stream_time: i64,
}

impl<F: SegmentFactory> std::fmt::Debug for Segments<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments")
            .field("retention", &self.retention)
            .field("segment_interval", &self.segment_interval)
            .field("observed_stream_time", &self.observed_stream_time)
            .field("segment_ids", &self.segment_ids())
            .finish_non_exhaustive()
    }
}

impl<F: SegmentFactory> Segments<F> {
    /// Opens the segments the factory already holds. Observed stream time
    /// starts at [`NO_TIMESTAMP`], as in Kafka; restore the committed value
    /// with [`Segments::restore_observed_stream_time`].
    pub fn new(mut factory: F, retention_ms: i64, segment_interval_ms: i64) -> Result<Self> {
        if retention_ms < 0 {
            return Err(Error::Config(format!(
                "retention period cannot be negative (got {retention_ms} ms)"
            )));
        }
        if segment_interval_ms < 1 {
            return Err(Error::Config(format!(
                "segment interval cannot be zero or negative (got {segment_interval_ms} ms)"
            )));
        }
        let mut ids = factory.existing()?;
        ids.sort_unstable();
        ids.dedup();
        let mut by_id = BTreeMap::new();
        // Open in id order, as Kafka does; negative ids cannot hold data.
        for id in ids.into_iter().filter(|&id| id >= 0) {
            by_id.insert(id, factory.open(id)?);
        }
        let mut this = Self {
            factory,
            by_id,
            retention: retention_ms,
            segment_interval: segment_interval_ms,
            observed_stream_time: NO_TIMESTAMP,
        };
        this.drop_expired_segments();
        Ok(this)
    }

    pub fn retention(&self) -> i64 {
        self.retention
    }

    pub fn segment_interval(&self) -> i64 {
        self.segment_interval
    }

    /// The largest timestamp put so far ([`NO_TIMESTAMP`] before the first).
    pub fn observed_stream_time(&self) -> i64 {
        self.observed_stream_time
    }

    /// Advances observed stream time to `timestamp` if it is later (never
    /// backwards) and drops the segments that fell out of retention. Callers
    /// restore the value they committed with their offsets, so a restarted
    /// task expires exactly what an uninterrupted one would.
    pub fn restore_observed_stream_time(&mut self, timestamp: i64) {
        self.observe(timestamp);
    }

    pub fn segment_id(&self, timestamp: i64) -> i64 {
        timestamp / self.segment_interval
    }

    /// The first and last timestamp of segment `id`, both inclusive.
    pub fn segment_bounds(&self, id: i64) -> (i64, i64) {
        let first = id.saturating_mul(self.segment_interval);
        (first, first.saturating_add(self.segment_interval - 1))
    }

    /// The earliest timestamp still within retention: Kafka's
    /// `observedStreamTime - retentionPeriod + 1`.
    pub fn min_live_time(&self) -> i64 {
        self.observed_stream_time
            .saturating_sub(self.retention)
            .saturating_add(1)
    }

    pub fn is_expired(&self, timestamp: i64) -> bool {
        timestamp < self.min_live_time()
    }

    /// Ids of the segments currently held, ascending.
    pub fn segment_ids(&self) -> Vec<i64> {
        self.by_id.keys().copied().collect()
    }

    /// Advances observed stream time with a record's timestamp (Kafka does
    /// this before checking the record's own expiry).
    pub fn observe(&mut self, timestamp: i64) {
        if timestamp > self.observed_stream_time {
            self.observed_stream_time = timestamp;
            self.drop_expired_segments();
        }
    }

    /// The segment for `timestamp`, created if needed, or None when the
    /// record is expired (the caller then drops the write).
    pub fn live_segment_mut(&mut self, timestamp: i64) -> Result<Option<&mut F::Store>> {
        if self.is_expired(timestamp) {
            return Ok(None);
        }
        self.open_segment(self.segment_id(timestamp)).map(Some)
    }

    /// Segment `id`, created if needed. The caller knows it is live: it
    /// holds a timestamp that was not expired, and observed stream time has
    /// not moved past that segment since.
    pub fn open_segment(&mut self, id: i64) -> Result<&mut F::Store> {
        Ok(match self.by_id.entry(id) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => e.insert(self.factory.open(id)?),
        })
    }

    /// The existing segment holding `timestamp`, if any.
    pub fn segment(&self, timestamp: i64) -> Option<&F::Store> {
        self.by_id.get(&self.segment_id(timestamp))
    }

    pub fn segment_mut(&mut self, timestamp: i64) -> Option<&mut F::Store> {
        let id = self.segment_id(timestamp);
        self.by_id.get_mut(&id)
    }

    /// The segments whose ids cover `time_from..=time_to`, in id order (or
    /// reverse id order when `!forward`), as `(id, store)`.
    pub fn search(&self, time_from: i64, time_to: i64, forward: bool) -> Vec<(i64, &F::Store)> {
        let from = self.segment_id(time_from);
        let to = self.segment_id(time_to);
        if from > to {
            return Vec::new();
        }
        let range = self.by_id.range(from..=to).map(|(&id, s)| (id, s));
        if forward {
            range.collect()
        } else {
            range.rev().collect()
        }
    }

    pub fn approximate_num_entries(&self) -> usize {
        self.by_id
            .values()
            .map(KeyValueBytes::approximate_num_entries)
            .sum()
    }

    pub fn flush(&mut self) -> Result<()> {
        for store in self.by_id.values_mut() {
            store.flush()?;
        }
        Ok(())
    }

    /// Drops every segment below `segment_id(observed - retention)`, Kafka's
    /// `cleanupExpiredSegments`.
    fn drop_expired_segments(&mut self) {
        let min_live_segment =
            self.segment_id(self.observed_stream_time.saturating_sub(self.retention));
        let live = self.by_id.split_off(&min_live_segment);
        let expired = std::mem::replace(&mut self.by_id, live);
        for (id, store) in expired {
            // Like Kafka, a segment that fails to delete is logged, not fatal:
            // it holds only expired data, and the next open retries.
            if let Err(e) = self.factory.destroy(id, store) {
                log::error!("error destroying expired segment {id}: {e}");
            }
        }
    }
}

/// The inclusive upper scan bound covering every composite key `k ‖ s` with
/// `k <= key_to` (byte order) and a fixed-size suffix `s <= max_suffix`.
///
/// `key_to ‖ max_suffix` alone is not enough: a key that is a proper prefix of
/// `key_to` (say `a` for `key_to = a\0`) followed by its suffix can sort after
/// it. The bound is the largest `key_to[..i] ‖ max_suffix` over all prefixes;
/// Kafka's `OrderedBytes.upperRange` approximates the same. Entries past the
/// caller's real bounds are filtered by the caller on the decoded key.
pub(crate) fn key_range_upper_bound(key_to: &[u8], max_suffix: &[u8]) -> Vec<u8> {
    let s0 = max_suffix[0];
    let candidate = |i: usize| key_to[..i].iter().chain(max_suffix.iter());
    // candidate(i) vs candidate(i + 1) first differ at byte i: `s0` against
    // `key_to[i]`. A smaller key byte makes candidate(i) beat every longer
    // prefix; a larger one makes it lose to candidate(i + 1); ties need a
    // full comparison.
    let stop = key_to.iter().position(|&b| b < s0).unwrap_or(key_to.len());
    let mut best = stop;
    for i in (0..stop).filter(|&i| key_to[i] == s0) {
        if candidate(i).cmp(candidate(best)).is_gt() {
            best = i;
        }
    }
    candidate(best).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(retention: i64, interval: i64) -> Segments<InMemorySegmentFactory> {
        Segments::new(InMemorySegmentFactory, retention, interval).unwrap()
    }

    #[test]
    fn default_interval_follows_kafka() {
        assert_eq!(default_segment_interval(0), 60_000);
        assert_eq!(default_segment_interval(100_000), 60_000);
        assert_eq!(default_segment_interval(86_400_000), 43_200_000);
    }

    // Follows Kafka's KeyValueSegmentsTest.shouldGetSegmentNameFromId.
    #[test]
    fn segment_names_carry_the_start_timestamp() {
        assert_eq!(segment_name("test", 0, 60_000), "test.0");
        assert_eq!(segment_name("test", 2, 60_000), "test.120000");
    }

    // Follows Kafka's KeyValueSegmentsTest.shouldRollSegments: interval 100,
    // retention 400, one segment created per step of stream time.
    #[test]
    fn segments_roll_as_stream_time_advances() {
        let mut s = segments(400, 100);
        for step in 0..=6 {
            let t = step * 100;
            s.observe(t);
            assert!(s.live_segment_mut(t).unwrap().is_some());
        }
        assert_eq!(s.segment_ids(), vec![2, 3, 4, 5, 6]);
        // A timestamp in a dropped segment is expired; one in the oldest live
        // segment but at or before stream time - retention is expired too.
        assert!(s.live_segment_mut(150).unwrap().is_none());
        assert!(s.live_segment_mut(200).unwrap().is_none());
        assert!(s.live_segment_mut(201).unwrap().is_some());
    }

    // Follows Kafka's KeyValueSegmentsTest.futureEventsShouldNotCauseSegmentRoll.
    #[test]
    fn restored_stream_time_drops_segments_but_never_goes_back() {
        let mut s = segments(400, 100);
        for t in [0, 100, 200] {
            s.observe(t);
            s.live_segment_mut(t).unwrap();
        }
        s.restore_observed_stream_time(50);
        assert_eq!(s.observed_stream_time(), 200);
        s.restore_observed_stream_time(600);
        assert_eq!(s.segment_ids(), vec![2]);
    }

    #[test]
    fn upper_bound_covers_prefix_keys() {
        let suffix = [0u8, 0, 0, 7];
        // Plain text keys: the key itself with the suffix.
        assert_eq!(
            key_range_upper_bound(b"bb", &suffix),
            b"bb\0\0\0\x07".to_vec()
        );
        // `a ‖ 0007` sorts after `a\0 ‖ 0007`, so the bound is the shorter one.
        assert_eq!(
            key_range_upper_bound(b"a\0", &suffix),
            b"a\0\0\0\x07".to_vec()
        );
        let high = [0x7fu8, 0xff];
        // A key byte below the suffix's first byte: cut there (the empty key
        // counts as a prefix too).
        assert_eq!(
            key_range_upper_bound(b"\x90\x10c", &high),
            b"\x90\x7f\xff".to_vec()
        );
        assert_eq!(key_range_upper_bound(b"b", &high), b"\x7f\xff".to_vec());
    }
}
