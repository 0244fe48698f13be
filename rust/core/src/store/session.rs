//! The session store: Kafka's `SessionStore<Bytes, byte[]>` over time
//! segments (`RocksDBSessionStore` on a segmented bytes store), bytes in,
//! bytes out.
//!
//! Store keys follow Kafka's `SessionKeySchema`, so they are also the keys of
//! the store's changelog records:
//!
//! ```text
//! key bytes ‖ session end (8 bytes, big-endian) ‖ session start (8 bytes, big-endian)
//! ```
//!
//! End before start puts a key's sessions in end order, which is what
//! `find_sessions(key, earliest_end, latest_start)` needs: every session that
//! overlaps `[earliest_end, latest_start]` ends at or after `earliest_end`.
//! Segments are by session *end*, so retention drops a session once its end
//! is `<= observed stream time - retention`, and a search opens every segment
//! from `earliest_end` on.
//!
//! As for windows, a key's byte range also holds longer keys that start with
//! it, so every entry is checked against the decoded key. Single-key results
//! come in (end, start) order; key-range results segment by segment, then in
//! store-key byte order (key, end, start, except that a key that is a prefix
//! of another can interleave with it), like Kafka's `RocksDB` store.

use super::KeyValueBytes;
use super::time_segments::{
    InMemorySegmentFactory, PutOutcome, SegmentFactory, Segments, default_segment_interval,
    key_range_upper_bound,
};
use crate::error::{Error, Result};

pub const TIMESTAMP_SIZE: usize = 8;
/// Bytes after the key in a store key.
pub const SUFFIX_SIZE: usize = 2 * TIMESTAMP_SIZE;

/// Kafka's `SessionKeySchema.toBinary(key, startTime, endTime)`: the end
/// comes first.
pub fn store_key(key: &[u8], start: i64, end: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + SUFFIX_SIZE);
    out.extend_from_slice(key);
    out.extend_from_slice(&end.to_be_bytes());
    out.extend_from_slice(&start.to_be_bytes());
    out
}

/// Splits a store key into (key bytes, session start, session end).
pub fn split_store_key(store_key: &[u8]) -> Result<(&[u8], i64, i64)> {
    let Some(key_len) = store_key.len().checked_sub(SUFFIX_SIZE) else {
        return Err(Error::Store(format!(
            "session store key of {} bytes is shorter than its {SUFFIX_SIZE}-byte suffix",
            store_key.len()
        )));
    };
    let (key, suffix) = store_key.split_at(key_len);
    let (end, start) = suffix.split_at(TIMESTAMP_SIZE);
    let end = i64::from_be_bytes(end.try_into().expect("8 bytes"));
    let start = i64::from_be_bytes(start.try_into().expect("8 bytes"));
    Ok((key, start, end))
}

/// One session of one key, as Kafka's `KeyValue<Windowed<Bytes>, byte[]>`
/// with a `SessionWindow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEntry {
    pub key: Vec<u8>,
    pub start: i64,
    pub end: i64,
    pub value: Vec<u8>,
}

/// A segmented session store; the same code runs on any [`SegmentFactory`].
pub struct SessionStore<F: SegmentFactory = InMemorySegmentFactory> {
    segments: Segments<F>,
}

pub type InMemorySessionStore = SessionStore<InMemorySegmentFactory>;

impl<F: SegmentFactory> std::fmt::Debug for SessionStore<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore")
            .field("segments", &self.segments)
            .finish()
    }
}

impl SessionStore<InMemorySegmentFactory> {
    /// An in-memory session store with Kafka's default segment interval.
    pub fn in_memory(retention_ms: i64) -> Result<Self> {
        Self::new(InMemorySegmentFactory, retention_ms)
    }
}

impl<F: SegmentFactory> SessionStore<F> {
    /// A session store with Kafka's default segment interval,
    /// `max(retention / 2, 60 s)` (`RocksDbSessionBytesStoreSupplier`).
    pub fn new(factory: F, retention_ms: i64) -> Result<Self> {
        Self::with_segment_interval(
            factory,
            retention_ms,
            default_segment_interval(retention_ms),
        )
    }

    pub fn with_segment_interval(
        factory: F,
        retention_ms: i64,
        segment_interval_ms: i64,
    ) -> Result<Self> {
        Ok(Self {
            segments: Segments::new(factory, retention_ms, segment_interval_ms)?,
        })
    }

    pub fn retention(&self) -> i64 {
        self.segments.retention()
    }

    pub fn segment_interval(&self) -> i64 {
        self.segments.segment_interval()
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

    /// Kafka's `SessionStore.put(Windowed(key, SessionWindow(start, end)),
    /// aggregate)`; a None value removes the session. Observed stream time
    /// advances to `end` first, and a session with `end <= observed stream
    /// time - retention` is [`PutOutcome::Expired`].
    pub fn put(
        &mut self,
        key: &[u8],
        start: i64,
        end: i64,
        value: Option<&[u8]>,
    ) -> Result<PutOutcome> {
        check_session(start, end)?;
        self.segments.observe(end);
        let store_key = store_key(key, start, end);
        match self.segments.live_segment_mut(end)? {
            Some(segment) => {
                segment.put(&store_key, value)?;
                Ok(PutOutcome::Written)
            }
            None => Ok(PutOutcome::Expired),
        }
    }

    /// Kafka's `remove(sessionKey)`: deletes the session if present. It does
    /// not advance observed stream time (as in Kafka's in-memory store).
    pub fn remove(&mut self, key: &[u8], start: i64, end: i64) -> Result<()> {
        check_session(start, end)?;
        if let Some(segment) = self.segments.segment_mut(end) {
            segment.put(&store_key(key, start, end), None)?;
        }
        Ok(())
    }

    /// Writes changelog records (store key, value or tombstone) during
    /// restoration: observed stream time first advances to the batch's latest
    /// session end, then the sessions still within retention are written.
    /// Returns how many were dropped as expired.
    pub fn restore<'a>(
        &mut self,
        records: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) -> Result<u64> {
        let mut batch = Vec::new();
        for (store_key, value) in records {
            let (_, start, end) = split_store_key(store_key)?;
            if start < 0 || end < start {
                return Err(Error::Store(format!(
                    "session store changelog key has an invalid session [{start}, {end}]"
                )));
            }
            self.segments.observe(end);
            batch.push((store_key, value, end));
        }
        let mut expired = 0;
        for (store_key, value, end) in batch {
            match self.segments.live_segment_mut(end)? {
                Some(segment) => segment.put(store_key, value)?,
                None => expired += 1,
            }
        }
        Ok(expired)
    }

    /// Kafka's `fetchSession(key, sessionStartTime, sessionEndTime)`: the
    /// aggregate of exactly that session, None when absent or expired.
    pub fn fetch_session(&self, key: &[u8], start: i64, end: i64) -> Result<Option<Vec<u8>>> {
        if start < 0 || end < start || self.segments.is_expired(end) {
            return Ok(None);
        }
        match self.segments.segment(end) {
            Some(segment) => segment.get(&store_key(key, start, end)),
            None => Ok(None),
        }
    }

    /// Kafka's `findSessions(key, earliestSessionEndTime,
    /// latestSessionStartTime)`: the sessions of exactly `key` with
    /// `end >= earliest_session_end` and `start <= latest_session_start`
    /// (both inclusive), in (end, start) order.
    pub fn find_sessions(
        &self,
        key: &[u8],
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> Result<Vec<SessionEntry>> {
        self.find_key(key, earliest_session_end, latest_session_start, true)
    }

    /// As [`SessionStore::find_sessions`], in reverse order.
    pub fn backward_find_sessions(
        &self,
        key: &[u8],
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> Result<Vec<SessionEntry>> {
        self.find_key(key, earliest_session_end, latest_session_start, false)
    }

    /// Kafka's `findSessions(keyFrom, keyTo, earliestSessionEndTime,
    /// latestSessionStartTime)`, either key bound open when None; empty when
    /// `key_from > key_to`.
    pub fn find_sessions_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> Result<Vec<SessionEntry>> {
        self.scan(
            key_from,
            key_to,
            earliest_session_end,
            latest_session_start,
            true,
        )
    }

    pub fn backward_find_sessions_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> Result<Vec<SessionEntry>> {
        self.scan(
            key_from,
            key_to,
            earliest_session_end,
            latest_session_start,
            false,
        )
    }

    /// Kafka's `fetch(key)`: every session of `key` within retention.
    pub fn fetch(&self, key: &[u8]) -> Result<Vec<SessionEntry>> {
        self.find_key(key, 0, i64::MAX, true)
    }

    pub fn backward_fetch(&self, key: &[u8]) -> Result<Vec<SessionEntry>> {
        self.find_key(key, 0, i64::MAX, false)
    }

    /// Kafka's `fetch(keyFrom, keyTo)`: every session of the keys in range.
    pub fn fetch_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> Result<Vec<SessionEntry>> {
        self.scan(key_from, key_to, 0, i64::MAX, true)
    }

    pub fn backward_fetch_range(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> Result<Vec<SessionEntry>> {
        self.scan(key_from, key_to, 0, i64::MAX, false)
    }

    /// The earliest session end to read: Kafka's `getActualFrom`.
    fn actual_from(&self, earliest_session_end: i64) -> i64 {
        earliest_session_end
            .max(self.segments.min_live_time())
            .max(0)
    }

    fn find_key(
        &self,
        key: &[u8],
        earliest_session_end: i64,
        latest_session_start: i64,
        forward: bool,
    ) -> Result<Vec<SessionEntry>> {
        let from = self.actual_from(earliest_session_end);
        let mut out = Vec::new();
        if latest_session_start < 0 {
            return Ok(out);
        }
        for (id, segment) in self.segments.search(from, i64::MAX, forward) {
            let (first, last) = self.segments.segment_bounds(id);
            let lower = store_key(key, 0, from.max(first));
            let upper = store_key(key, latest_session_start.min(last), last);
            for (k, v) in segment.range(Some(&lower), Some(&upper), !forward)? {
                let (k_key, start, end) = split_store_key(&k)?;
                // The byte range also holds longer keys starting with `key`.
                if k_key == key && end >= from && start <= latest_session_start {
                    out.push(SessionEntry {
                        key: k_key.to_vec(),
                        start,
                        end,
                        value: v,
                    });
                }
            }
        }
        Ok(out)
    }

    fn scan(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_session_end: i64,
        latest_session_start: i64,
        forward: bool,
    ) -> Result<Vec<SessionEntry>> {
        let mut out = Vec::new();
        if let (Some(lo), Some(hi)) = (key_from, key_to)
            && lo > hi
        {
            log::warn!(
                "returning no sessions for a fetch with an invalid key range (from > to); the \
                 key serde may not preserve ordering in its bytes"
            );
            return Ok(out);
        }
        let from = self.actual_from(earliest_session_end);
        if latest_session_start < 0 {
            return Ok(out);
        }
        for (id, segment) in self.segments.search(from, i64::MAX, forward) {
            let (_, last) = self.segments.segment_bounds(id);
            // Any store key of a key >= key_from sorts at or after key_from.
            let upper = key_to.map(|k| {
                let mut suffix = [0u8; SUFFIX_SIZE];
                suffix[..TIMESTAMP_SIZE].copy_from_slice(&last.to_be_bytes());
                suffix[TIMESTAMP_SIZE..]
                    .copy_from_slice(&latest_session_start.min(last).to_be_bytes());
                key_range_upper_bound(k, &suffix)
            });
            for (k, v) in segment.range(key_from, upper.as_deref(), !forward)? {
                let (k_key, start, end) = split_store_key(&k)?;
                if key_from.is_none_or(|lo| k_key >= lo)
                    && key_to.is_none_or(|hi| k_key <= hi)
                    && end >= from
                    && start <= latest_session_start
                {
                    out.push(SessionEntry {
                        key: k_key.to_vec(),
                        start,
                        end,
                        value: v,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// Kafka's `SessionWindow` rejects a negative start and an end before start.
fn check_session(start: i64, end: i64) -> Result<()> {
    if start < 0 {
        return Err(Error::Config(format!(
            "session start cannot be negative (got {start})"
        )));
    }
    if end < start {
        return Err(Error::Config(format!(
            "session end {end} cannot be before its start {start}"
        )));
    }
    Ok(())
}
