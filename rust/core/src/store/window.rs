//! The window store: Kafka's `WindowStore<Bytes, byte[]>` over time segments
//! (`RocksDBWindowStore` on a segmented bytes store), bytes in, bytes out.
//!
//! Store keys follow Kafka's `WindowKeySchema`, so they are also the keys of
//! the store's changelog records:
//!
//! ```text
//! key bytes ‖ window start (8 bytes, big-endian) ‖ seqnum (4 bytes, big-endian)
//! ```
//!
//! The seqnum is 0 unless the store retains duplicates (stream-stream join
//! buffers): then every put gets the next seqnum (`(seqnum + 1) & 0x7fffffff`,
//! so the first is 1), every duplicate of a key and window is kept, and they
//! come back in insertion order. Each segment covers window starts
//! `[id * interval, (id + 1) * interval)`; see [`super::time_segments`].
//!
//! Scans read one segment at a time in store-key order, like Kafka's `RocksDB`
//! store: a single-key fetch returns windows in start order; key-range and
//! all-key scans return segment by segment, and within a segment in store-key
//! byte order, which is by key, then start, except that a key that is a
//! prefix of another (`a`, `a\0`) can interleave with it. Because keys have
//! no length prefix, the byte range scanned for key `a` also holds key `aa`'s
//! windows; every entry is therefore checked against the decoded key, as
//! Kafka's `hasNextCondition` does.

use super::KeyValueBytes;
use super::time_segments::{
    InMemorySegmentFactory, PutOutcome, SegmentFactory, Segments, default_segment_interval,
    key_range_upper_bound,
};
use crate::error::{Error, Result};

pub const TIMESTAMP_SIZE: usize = 8;
pub const SEQNUM_SIZE: usize = 4;
/// Bytes after the key in a store key.
pub const SUFFIX_SIZE: usize = TIMESTAMP_SIZE + SEQNUM_SIZE;

/// Kafka's `WindowKeySchema.toStoreKeyBinary(key, windowStart, seqnum)`.
pub fn store_key(key: &[u8], window_start: i64, seqnum: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + SUFFIX_SIZE);
    out.extend_from_slice(key);
    out.extend_from_slice(&window_start.to_be_bytes());
    out.extend_from_slice(&seqnum.to_be_bytes());
    out
}

/// Splits a store key into (key bytes, window start, seqnum).
pub fn split_store_key(store_key: &[u8]) -> Result<(&[u8], i64, i32)> {
    let Some(key_len) = store_key.len().checked_sub(SUFFIX_SIZE) else {
        return Err(Error::Store(format!(
            "window store key of {} bytes is shorter than its {SUFFIX_SIZE}-byte suffix",
            store_key.len()
        )));
    };
    let (key, suffix) = store_key.split_at(key_len);
    let (ts, seq) = suffix.split_at(TIMESTAMP_SIZE);
    let start = i64::from_be_bytes(ts.try_into().expect("8 bytes"));
    let seqnum = i32::from_be_bytes(seq.try_into().expect("4 bytes"));
    Ok((key, start, seqnum))
}

/// The end of a window of `window_size` starting at `start`; Kafka's
/// `timeWindowForSize` caps an overflowing end at `i64::MAX`.
pub fn window_end(start: i64, window_size: i64) -> i64 {
    start.saturating_add(window_size)
}

/// One window of one key, as Kafka's `KeyValue<Windowed<Bytes>, byte[]>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowEntry {
    pub key: Vec<u8>,
    pub start: i64,
    /// `start + window size`.
    pub end: i64,
    pub value: Vec<u8>,
}

/// Consecutive puts into one segment, not written yet: their store keys
/// back to back in `keys`, each entry's key span and value.
#[derive(Default)]
struct SegmentRun<'a> {
    id: Option<i64>,
    keys: Vec<u8>,
    entries: Vec<(usize, usize, Option<&'a [u8]>)>,
}

/// A segmented window store; the same code runs on any [`SegmentFactory`].
pub struct WindowStore<F: SegmentFactory = InMemorySegmentFactory> {
    segments: Segments<F>,
    window_size: i64,
    retain_duplicates: bool,
    seqnum: i32,
}

pub type InMemoryWindowStore = WindowStore<InMemorySegmentFactory>;

impl<F: SegmentFactory> std::fmt::Debug for WindowStore<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowStore")
            .field("segments", &self.segments)
            .field("window_size", &self.window_size)
            .field("retain_duplicates", &self.retain_duplicates)
            .field("seqnum", &self.seqnum)
            .finish()
    }
}

impl WindowStore<InMemorySegmentFactory> {
    /// An in-memory window store with Kafka's default segment interval.
    pub fn in_memory(
        retention_ms: i64,
        window_size_ms: i64,
        retain_duplicates: bool,
    ) -> Result<Self> {
        Self::new(
            InMemorySegmentFactory,
            retention_ms,
            window_size_ms,
            retain_duplicates,
        )
    }
}

impl<F: SegmentFactory> WindowStore<F> {
    /// A window store with Kafka's default segment interval,
    /// `max(retention / 2, 60 s)`.
    pub fn new(
        factory: F,
        retention_ms: i64,
        window_size_ms: i64,
        retain_duplicates: bool,
    ) -> Result<Self> {
        Self::with_segment_interval(
            factory,
            retention_ms,
            window_size_ms,
            retain_duplicates,
            default_segment_interval(retention_ms),
        )
    }

    /// Validates as Kafka's `Stores.persistentWindowStore` does: retention and
    /// window size not negative, window size not above retention, interval
    /// at least 1 ms.
    pub fn with_segment_interval(
        factory: F,
        retention_ms: i64,
        window_size_ms: i64,
        retain_duplicates: bool,
        segment_interval_ms: i64,
    ) -> Result<Self> {
        if window_size_ms < 0 {
            return Err(Error::Config(format!(
                "window size cannot be negative (got {window_size_ms} ms)"
            )));
        }
        if window_size_ms > retention_ms {
            return Err(Error::Config(format!(
                "the retention period of a window store must be no smaller than its window size \
                 (size {window_size_ms} ms, retention {retention_ms} ms)"
            )));
        }
        Ok(Self {
            segments: Segments::new(factory, retention_ms, segment_interval_ms)?,
            window_size: window_size_ms,
            retain_duplicates,
            seqnum: 0,
        })
    }

    pub fn retention(&self) -> i64 {
        self.segments.retention()
    }

    pub fn segment_interval(&self) -> i64 {
        self.segments.segment_interval()
    }

    pub fn window_size(&self) -> i64 {
        self.window_size
    }

    pub fn retain_duplicates(&self) -> bool {
        self.retain_duplicates
    }

    /// The seqnum of the latest put (0 unless duplicates are retained), so a
    /// caller can build the changelog key with [`store_key`]. Like Kafka's, it
    /// is not persisted: a reopened store starts again from 0.
    pub fn seqnum(&self) -> i32 {
        self.seqnum
    }

    pub fn observed_stream_time(&self) -> i64 {
        self.segments.observed_stream_time()
    }

    /// Restores the observed stream time committed with the task's offsets;
    /// see [`Segments::restore_observed_stream_time`].
    pub fn restore_observed_stream_time(&mut self, timestamp: i64) {
        self.segments.restore_observed_stream_time(timestamp);
    }

    pub fn segments(&self) -> &Segments<F> {
        &self.segments
    }

    pub fn segment_ids(&self) -> Vec<i64> {
        self.segments.segment_ids()
    }

    pub fn approximate_num_entries(&self) -> usize {
        self.segments.approximate_num_entries()
    }

    pub fn flush(&mut self) -> Result<()> {
        self.segments.flush()
    }

    /// Kafka's `WindowStore.put(key, value, windowStartTimestamp)`: stores
    /// `value` for the window, or deletes it when `value` is None. Observed
    /// stream time advances to `window_start` first, so a put is
    /// [`PutOutcome::Expired`] when `window_start <= observed stream time -
    /// retention`. With `retain_duplicates` every put adds an entry and a None
    /// value is [`PutOutcome::Ignored`] (`RocksDBWindowStore` skips it).
    pub fn put(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        window_start: i64,
    ) -> Result<PutOutcome> {
        check_window_start(window_start)?;
        if value.is_none() && self.retain_duplicates {
            return Ok(PutOutcome::Ignored);
        }
        if self.retain_duplicates {
            self.seqnum = (self.seqnum.wrapping_add(1)) & 0x7fff_ffff;
        }
        self.segments.observe(window_start);
        let store_key = store_key(key, window_start, self.seqnum);
        match self.segments.live_segment_mut(window_start)? {
            Some(segment) => {
                segment.put(&store_key, value)?;
                Ok(PutOutcome::Written)
            }
            None => Ok(PutOutcome::Expired),
        }
    }

    /// [`put`](Self::put) of each `(key, value, window start)` in order,
    /// with the same outcomes (pushed onto `outcomes`), but each run of
    /// entries for one segment written to it as one batch: one store key
    /// buffer, one segment lookup, and the segment's index misses
    /// overlapped. On an error the entries before it are written.
    pub fn put_batch<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>, i64)>,
        outcomes: &mut Vec<PutOutcome>,
    ) -> Result<()> {
        if self.retain_duplicates {
            // Every put takes the next seqnum: one at a time.
            for (key, value, start) in entries {
                outcomes.push(self.put(key, value, start)?);
            }
            return Ok(());
        }
        let mut run = SegmentRun::default();
        for (key, value, start) in entries {
            if let Err(e) = check_window_start(start) {
                self.write_run(&mut run)?;
                return Err(e);
            }
            let id = self.segments.segment_id(start);
            if run.id != Some(id) {
                // Written before stream time moves on: a later segment's
                // window may expire this one.
                self.write_run(&mut run)?;
            }
            // Within one segment, observing a window drops only earlier
            // segments, so the run's segment stays live until it is written.
            self.segments.observe(start);
            if self.segments.is_expired(start) {
                outcomes.push(PutOutcome::Expired);
                continue;
            }
            run.id = Some(id);
            let from = run.keys.len();
            run.keys.extend_from_slice(key);
            run.keys.extend_from_slice(&start.to_be_bytes());
            run.keys.extend_from_slice(&self.seqnum.to_be_bytes());
            run.entries.push((from, run.keys.len(), value));
            outcomes.push(PutOutcome::Written);
        }
        self.write_run(&mut run)
    }

    fn write_run(&mut self, run: &mut SegmentRun<'_>) -> Result<()> {
        let Some(id) = run.id.take() else {
            return Ok(());
        };
        let entries: Vec<(&[u8], Option<&[u8]>)> = run
            .entries
            .iter()
            .map(|&(from, to, value)| (&run.keys[from..to], value))
            .collect();
        self.segments.open_segment(id)?.put_batch(&entries)?;
        run.keys.clear();
        run.entries.clear();
        Ok(())
    }

    /// Writes changelog records (store key, value or tombstone) during
    /// restoration, as Kafka's segmented store restores a batch: observed
    /// stream time first advances to the batch's latest window start, then
    /// the records still within retention are written with their own seqnums.
    /// Returns how many were dropped as expired.
    pub fn restore<'a>(
        &mut self,
        records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<u64> {
        let mut batch = Vec::new();
        for (store_key, value) in records {
            let (_, start, _) = split_store_key(store_key)?;
            if start < 0 {
                return Err(Error::Store(format!(
                    "window store changelog key has a negative window start ({start})"
                )));
            }
            self.segments.observe(start);
            batch.push((store_key, value, start));
        }
        let mut expired = 0;
        for (store_key, value, start) in batch {
            match self.segments.live_segment_mut(start)? {
                Some(segment) => segment.put(store_key, value)?,
                None => expired += 1,
            }
        }
        Ok(expired)
    }

    /// Kafka's `WindowStore.fetch(key, windowStartTimestamp)`: the value of
    /// one window, None when absent or expired. A store that retains
    /// duplicates holds no single value per window and returns None, as
    /// Kafka's `InMemoryWindowStore` does.
    pub fn fetch_one(&self, key: &[u8], window_start: i64) -> Result<Option<Vec<u8>>> {
        if self.retain_duplicates || window_start < 0 || self.segments.is_expired(window_start) {
            return Ok(None);
        }
        match self.segments.segment(window_start) {
            Some(segment) => segment.get(&store_key(key, window_start, 0)),
            None => Ok(None),
        }
    }

    /// Kafka's `fetch(key, timeFrom, timeTo)`: `(window start, value)` of every
    /// window of exactly `key` with `time_from <= start <= time_to`, in start
    /// order (duplicates in insertion order).
    pub fn fetch(&self, key: &[u8], time_from: i64, time_to: i64) -> Result<Vec<(i64, Vec<u8>)>> {
        self.fetch_key(key, time_from, time_to, true)
    }

    /// As [`WindowStore::fetch`], latest window first.
    pub fn backward_fetch(
        &self,
        key: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        self.fetch_key(key, time_from, time_to, false)
    }

    /// Kafka's `fetch(keyFrom, keyTo, timeFrom, timeTo)`: windows of the keys
    /// in `key_from..=key_to` (either open when None) with start in
    /// `time_from..=time_to`; empty when `key_from > key_to`.
    pub fn fetch_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<WindowEntry>> {
        self.scan(key_from, key_to, time_from, time_to, true)
    }

    pub fn backward_fetch_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
    ) -> Result<Vec<WindowEntry>> {
        self.scan(key_from, key_to, time_from, time_to, false)
    }

    /// Kafka's `fetchAll(timeFrom, timeTo)`: every key's windows with start in
    /// `time_from..=time_to`.
    pub fn fetch_all(&self, time_from: i64, time_to: i64) -> Result<Vec<WindowEntry>> {
        self.scan(None, None, time_from, time_to, true)
    }

    pub fn backward_fetch_all(&self, time_from: i64, time_to: i64) -> Result<Vec<WindowEntry>> {
        self.scan(None, None, time_from, time_to, false)
    }

    /// Kafka's `all()`: every window within retention.
    pub fn all(&self) -> Result<Vec<WindowEntry>> {
        self.scan(None, None, 0, i64::MAX, true)
    }

    pub fn backward_all(&self) -> Result<Vec<WindowEntry>> {
        self.scan(None, None, 0, i64::MAX, false)
    }

    /// Kafka's `getActualFrom`: reads never see expired windows, and window
    /// starts are never negative.
    fn actual_from(&self, time_from: i64) -> i64 {
        time_from.max(self.segments.min_live_time()).max(0)
    }

    fn fetch_key(
        &self,
        key: &[u8],
        time_from: i64,
        time_to: i64,
        forward: bool,
    ) -> Result<Vec<(i64, Vec<u8>)>> {
        let from = self.actual_from(time_from);
        let mut out = Vec::new();
        if time_to < from {
            return Ok(out);
        }
        for (id, segment) in self.segments.search(from, time_to, forward) {
            let (first, last) = self.segments.segment_bounds(id);
            let lower = store_key(key, from.max(first), 0);
            let upper = upper_suffix_key(key, time_to.min(last));
            for (k, v) in segment.range(Some(&lower), Some(&upper), !forward)? {
                let (k_key, start, _) = split_store_key(&k)?;
                // The byte range also holds longer keys starting with `key`.
                if k_key == key && (from..=time_to).contains(&start) {
                    out.push((start, v));
                }
            }
        }
        Ok(out)
    }

    fn scan(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
        forward: bool,
    ) -> Result<Vec<WindowEntry>> {
        let mut out = Vec::new();
        if let (Some(lo), Some(hi)) = (key_from, key_to)
            && lo > hi
        {
            log::warn!(
                "returning no windows for a fetch with an invalid key range (from > to); the \
                 key serde may not preserve ordering in its bytes"
            );
            return Ok(out);
        }
        let from = self.actual_from(time_from);
        if time_to < from {
            return Ok(out);
        }
        for (id, segment) in self.segments.search(from, time_to, forward) {
            let (_, last) = self.segments.segment_bounds(id);
            // Any store key of a key >= key_from sorts at or after key_from.
            let upper = key_to.map(|k| {
                let mut suffix = [0xffu8; SUFFIX_SIZE];
                suffix[..TIMESTAMP_SIZE].copy_from_slice(&time_to.min(last).to_be_bytes());
                key_range_upper_bound(k, &suffix)
            });
            for (k, v) in segment.range(key_from, upper.as_deref(), !forward)? {
                let (k_key, start, _) = split_store_key(&k)?;
                if key_from.is_none_or(|lo| k_key >= lo)
                    && key_to.is_none_or(|hi| k_key <= hi)
                    && (from..=time_to).contains(&start)
                {
                    out.push(WindowEntry {
                        key: k_key.to_vec(),
                        start,
                        end: window_end(start, self.window_size),
                        value: v,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// `key ‖ start ‖ ffffffff`: the last store key of `key` at `start`, whatever
/// the seqnum.
fn upper_suffix_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut out = store_key(key, start, 0);
    let n = out.len();
    out[n - SEQNUM_SIZE..].fill(0xff);
    out
}

/// Kafka's `Window` rejects negative starts.
fn check_window_start(window_start: i64) -> Result<()> {
    if window_start < 0 {
        return Err(Error::Config(format!(
            "window start cannot be negative (got {window_start})"
        )));
    }
    Ok(())
}
