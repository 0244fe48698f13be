//! The changelog side of a logged store (Kafka's `ChangeLogging*BytesStore`).
//!
//! Kafka's logging layer hands every write of a store to the record
//! collector, stamped with the timestamp of the record being processed. Here a
//! logged store keeps its writes in a [`ChangelogBuffer`] instead, and the task
//! hands the buffer to its record collector as columns once per batch: the
//! writes themselves (a kernel's, a cache flush's) never come back up to the
//! caller one by one. The buffer keeps the writes in order, so the changelog
//! partition receives them as Kafka's would.

use super::KeyValueBytes;
use crate::error::Result;

/// Changelog records waiting to be sent, in write order: store keys, values
/// (None: a tombstone) and timestamps, their bytes in one buffer.
#[derive(Debug, Default, Clone)]
pub struct ChangelogBuffer {
    data: Vec<u8>,
    /// `(start, len)` in `data`.
    keys: Vec<(usize, usize)>,
    /// `(start, len)` in `data`; None for a tombstone.
    values: Vec<Option<(usize, usize)>>,
    timestamps: Vec<i64>,
}

impl ChangelogBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    fn span(&mut self, bytes: &[u8]) -> (usize, usize) {
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        (start, bytes.len())
    }

    /// Appends one write.
    pub fn push(&mut self, key: &[u8], value: Option<&[u8]>, timestamp: i64) {
        let key = self.span(key);
        let value = value.map(|v| self.span(v));
        self.keys.push(key);
        self.values.push(value);
        self.timestamps.push(timestamp);
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        let (start, len) = self.keys[i];
        &self.data[start..start + len]
    }

    pub fn value(&self, i: usize) -> Option<&[u8]> {
        self.values[i].map(|(start, len)| &self.data[start..start + len])
    }

    pub fn timestamps(&self) -> &[i64] {
        &self.timestamps
    }

    /// Takes the records out, leaving the buffer empty.
    #[must_use]
    pub fn take(&mut self) -> ChangelogBuffer {
        std::mem::take(self)
    }
}

/// A key-value store seen through its changelog: every `put` (a delete too)
/// is also appended to `log`, stamped with the record timestamp last given
/// to [`KeyValueBytes::set_record_timestamp`]. Without a log it only passes
/// the calls on, so callers need not tell logged stores from others.
pub struct ChangeLogging<'a> {
    inner: &'a mut dyn KeyValueBytes,
    log: Option<&'a mut ChangelogBuffer>,
    timestamp: i64,
}

impl<'a> ChangeLogging<'a> {
    pub fn new(inner: &'a mut dyn KeyValueBytes, log: Option<&'a mut ChangelogBuffer>) -> Self {
        ChangeLogging {
            inner,
            log,
            timestamp: 0,
        }
    }

    /// Appends a tombstone without touching the store: Kafka's logging layer
    /// logs a delete even of an absent key.
    pub fn log_delete(&mut self, key: &[u8]) {
        if let Some(log) = self.log.as_deref_mut() {
            log.push(key, None, self.timestamp);
        }
    }
}

impl KeyValueBytes for ChangeLogging<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        self.inner.get_with(key, f)
    }

    fn prefers_key_order(&self) -> bool {
        self.inner.prefers_key_order()
    }

    fn prefetch(&self, key: &[u8]) {
        self.inner.prefetch(key);
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.inner.put(key, value)?;
        if let Some(log) = self.log.as_deref_mut() {
            log.push(key, value, self.timestamp);
        }
        Ok(())
    }

    fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.range(from, to, reverse)
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.inner.prefix_scan(prefix)
    }

    fn approximate_num_entries(&self) -> usize {
        self.inner.approximate_num_entries()
    }

    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }

    fn set_record_timestamp(&mut self, timestamp: i64) {
        self.timestamp = timestamp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InMemoryKeyValueStore;

    #[test]
    fn logs_every_write_in_order_with_the_record_timestamp() {
        let mut store = InMemoryKeyValueStore::new();
        let mut log = ChangelogBuffer::new();
        let mut logged = ChangeLogging::new(&mut store, Some(&mut log));
        logged.set_record_timestamp(7);
        logged.put(b"a", Some(b"1")).unwrap();
        logged.set_record_timestamp(9);
        logged.put(b"a", None).unwrap();
        logged.log_delete(b"b");
        assert_eq!(store.get(b"a"), None);
        let taken = log.take();
        assert!(log.is_empty());
        assert_eq!(taken.len(), 3);
        assert_eq!((taken.key(0), taken.value(0)), (&b"a"[..], Some(&b"1"[..])));
        assert_eq!((taken.key(1), taken.value(1)), (&b"a"[..], None));
        assert_eq!(taken.key(2), b"b");
        assert_eq!(taken.timestamps(), &[7, 9, 9]);
    }

    #[test]
    fn without_a_log_it_only_passes_writes_on() {
        let mut store = InMemoryKeyValueStore::new();
        let mut plain = ChangeLogging::new(&mut store, None);
        plain.put(b"k", Some(b"v")).unwrap();
        plain.log_delete(b"k");
        assert_eq!(store.get(b"k"), Some(&b"v"[..]));
    }
}
