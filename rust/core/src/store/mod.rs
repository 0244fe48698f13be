//! Native state stores: bytes in, bytes out (the typed layer lives in Python,
//! like Kafka Streams' metered layer), and the kernels that update a store
//! for a whole batch of records in one call.
//!
//! Every key-value flavour implements [`KeyValueBytes`]; window and session
//! stores are built from time segments, each segment one such store, so that
//! retention drops whole segments. A key-value store is layered as in Kafka:
//! the record cache ([`CachingKeyValueStore`]) over the changelog
//! ([`ChangeLogging`]) over the bytes store.

pub mod cache;
pub mod changelog;
pub mod kernels;
mod key;
pub mod kv;
pub mod persistent;
pub mod persistent_time_segments;
pub mod session;
pub mod time_segments;
pub mod window;

pub use cache::{CachingKeyValueStore, ThreadCache};
pub use changelog::{ChangeLogging, ChangelogBuffer};
pub use kv::InMemoryKeyValueStore;
pub use persistent::{PersistentKeyValueStore, PersistentStoreOptions};
pub use persistent_time_segments::{PersistentSegment, PersistentSegmentFactory, SegmentedCommit};
pub use session::{InMemorySessionStore, SessionEntry, SessionStore};
pub use time_segments::{InMemorySegmentFactory, PutOutcome, SegmentFactory, Segments};
pub use window::{InMemoryWindowStore, WindowEntry, WindowStore};

use crate::error::Result;

/// The interface shared by the in-memory and persistent key-value stores.
///
/// Keys are ordered by their bytes (unsigned lexicographic), as in Kafka's
/// stores. Scans return snapshots, so callers may write while they iterate.
pub trait KeyValueBytes: Send {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Calls `f` with the value of `key` where the store holds it, without
    /// copying it out first (for a caller that copies it elsewhere anyway);
    /// returns whether the key has a value.
    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        let value = self.get(key)?;
        if let Some(v) = &value {
            f(v);
        }
        Ok(value.is_some())
    }

    /// Looks up `n` keys (`key(i)` for `i < n`) and calls `f(i, value)`, in
    /// order of `i`, for each one that has a value. A store may overlap the
    /// cache misses of several lookups (the persistent store does).
    fn get_many_with<'k>(
        &self,
        n: usize,
        key: &dyn Fn(usize) -> &'k [u8],
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        for i in 0..n {
            self.get_with(key(i), &mut |v| f(i, v))?;
        }
        Ok(())
    }

    /// Whether a batch of reads or writes runs faster in key order (an
    /// ordered index then walks its nodes in order; a hash index gains
    /// nothing from the sort).
    fn prefers_key_order(&self) -> bool {
        false
    }

    /// A hint from a batch that `key` is read or written soon: a store may
    /// start fetching what that touches (the persistent store's index
    /// slots), so that the cache misses of a batch's keys overlap.
    fn prefetch(&self, _key: &[u8]) {}

    /// Stores `value`, or deletes the key when `value` is None.
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()>;

    /// `put` of each entry in order. A store may overlap the cache misses
    /// of the batch's keys (the persistent store does).
    fn put_batch(&mut self, entries: &[(&[u8], Option<&[u8]>)]) -> Result<()> {
        for &(key, value) in entries {
            self.put(key, value)?;
        }
        Ok(())
    }

    /// Entries with `from <= key <= to` (either bound open when None), in key
    /// order, or in reverse key order when `reverse`.
    fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

    /// Entries whose key starts with `prefix`, in key order.
    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;

    fn approximate_num_entries(&self) -> usize;

    /// Makes every write so far durable (a no-op in memory).
    fn flush(&mut self) -> Result<()>;

    /// The timestamp of the record being processed (Kafka's record context):
    /// a logging layer ([`ChangeLogging`]) stamps the changelog records of
    /// the writes that follow with it. Stores without a changelog ignore it.
    fn set_record_timestamp(&mut self, _timestamp: i64) {}
}

/// Batches at least this large are applied in key order (see [`key_order`]).
const SORT_MIN_BATCH: usize = 256;

/// The order in which to apply a batch of writes or reads: for a store
/// whose index is ordered ([`KeyValueBytes::prefers_key_order`]), by key,
/// and by position among equal keys, so the store ends up exactly as if the
/// writes were applied one after the other (if a write fails, some of the
/// batch may be applied, as with any failed batch). Updating an ordered
/// index in key order walks its nodes in order, so they are in cache when
/// the next write needs them; on large batches of scattered keys that more
/// than pays for the sort. Small batches, and stores with a hash index,
/// keep the batch's own order.
pub fn key_order<'a>(sort: bool, n: usize, key: &impl Fn(usize) -> &'a [u8]) -> Vec<u32> {
    if !sort || n < SORT_MIN_BATCH {
        return (0..n as u32).collect();
    }
    // Sort on the first eight bytes (zero-padded, big-endian: the same order
    // as the bytes) and compare whole keys only on a tie.
    let prefix = |k: &[u8]| {
        let mut p = [0u8; 8];
        let len = k.len().min(8);
        p[..len].copy_from_slice(&k[..len]);
        u64::from_be_bytes(p)
    };
    let mut order: Vec<(u64, u32)> = (0..n).map(|i| (prefix(key(i)), i as u32)).collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| key(a.1 as usize).cmp(key(b.1 as usize)))
            .then(a.1.cmp(&b.1))
    });
    order.into_iter().map(|(_, i)| i).collect()
}
