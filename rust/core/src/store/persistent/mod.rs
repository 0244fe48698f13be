//! The persistent key-value store: a log-structured table on local disk.
//!
//! Writes append CRC-framed records (the embedded log's frame format) to
//! segment files; an in-memory index (a hash map, with an ordered view of
//! the keys built for scans) maps every live key to where its latest value
//! is. Keys and the index live in RAM, values on disk.
//!
//! [`commit`](PersistentKeyValueStore::commit) appends a *commit marker*
//! carrying caller metadata (the changelog offset, processors' stream time)
//! and makes data and metadata durable in one step, as Kafka 4.3's KIP-1035
//! asks of stores that manage their own offsets. [`open`](PersistentKeyValueStore::open)
//! restores the store exactly as of its last commit marker and returns its
//! metadata; whatever was written after it is cut away.
//!
//! The on-disk format, recovery and compaction rules are in `store/README.md`.

pub(crate) mod files;
mod index;
pub(crate) mod mmap;
mod recovery;
mod segment_log;
mod snapshot;
mod table;

use std::fs;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use self::files::{io, list_segments, read_manifest, remove_if_exists, sync_dir};
use self::index::KeyIndex;
use self::recovery::COMMIT_HEADER;
use self::segment_log::{KEY_LEN_AT, SegmentLog, data_frame_size};
use self::snapshot::SegmentStamp;
use crate::error::{Error, Result};
use crate::fsutil::DirLock;
use crate::log::format::{self, BODY_AT, MIN_FRAME, OFFSET_AT};
use crate::log::{Header, ReadBatch};

/// The timestamp of records written without one (Kafka's `NO_TIMESTAMP`).
pub const NO_TIMESTAMP: i64 = -1;

/// Batch writes prefetch the index slots of the key this many writes ahead
/// (their cache misses then overlap).
const PREFETCH_AHEAD: usize = 8;

/// Tuning of a [`PersistentKeyValueStore`].
#[derive(Debug, Clone, PartialEq)]
pub struct PersistentStoreOptions {
    /// A segment rolls when the next frame would take it past this size
    /// (a larger frame gets a segment of its own). 64 MiB.
    pub segment_bytes: u64,
    /// Appends collect in a buffer in front of the active segment, written to
    /// the file when it reaches this size and at `flush`/`commit`. 1 MiB.
    pub write_buffer_bytes: usize,
    /// `commit` compacts only stores whose segments hold at least this many
    /// bytes. 16 MiB; `u64::MAX` turns automatic compaction off.
    pub compact_min_bytes: u64,
    /// `commit` compacts when at least this fraction of the bytes are dead
    /// (overwritten or deleted entries, tombstones, old commit markers). 0.5.
    pub compact_dead_ratio: f64,
}

impl Default for PersistentStoreOptions {
    fn default() -> Self {
        PersistentStoreOptions {
            segment_bytes: 64 << 20,
            write_buffer_bytes: 1 << 20,
            compact_min_bytes: 16 << 20,
            compact_dead_ratio: 0.5,
        }
    }
}

impl PersistentStoreOptions {
    fn validate(&self) -> Result<()> {
        let max_segment = i32::MAX as u64;
        if !(MIN_FRAME as u64..=max_segment).contains(&self.segment_bytes) {
            return Err(Error::Config(format!(
                "segment_bytes must be between {MIN_FRAME} and {max_segment}, not {}",
                self.segment_bytes
            )));
        }
        if !(self.compact_dead_ratio > 0.0 && self.compact_dead_ratio <= 1.0) {
            return Err(Error::Config(format!(
                "compact_dead_ratio must be in (0, 1], not {}",
                self.compact_dead_ratio
            )));
        }
        Ok(())
    }
}

/// Where a key's latest value is: 12 bytes per live key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Location {
    /// Index into the log's segments.
    seg: u32,
    /// Byte position of the frame in the segment.
    pos: u32,
    value_len: u32,
}

/// A persistent, log-structured key-value store in one directory.
///
/// RAM: a hash-table entry per live key (a 24-byte key slot that holds keys
/// up to 22 bytes inline, a 12-byte location; longer keys are boxed on the
/// heap), plus a 40-byte entry (key slot and location) per key once a scan
/// has needed key order (see `store/README.md`). Values stay on disk and are read back per
/// access.
pub struct PersistentKeyValueStore {
    dir: PathBuf,
    options: PersistentStoreOptions,
    index: KeyIndex,
    log: SegmentLog,
    /// Bytes of the frames the index points to.
    live_bytes: u64,
    /// Metadata of the last commit marker.
    committed: Option<Vec<u8>>,
    /// Writes since the last commit.
    dirty: bool,
    /// Holds the directory's exclusive lock while the store is open.
    _lock: DirLock,
}

impl std::fmt::Debug for PersistentKeyValueStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistentKeyValueStore")
            .field("dir", &self.dir)
            .field("entries", &self.index.len())
            .field("segments", &self.log.segments.len())
            .finish_non_exhaustive()
    }
}

impl PersistentKeyValueStore {
    /// Opens (or creates) the store in `dir`, as of its last commit marker,
    /// and returns that marker's metadata (None: no commit yet, the store is
    /// empty). Everything written after the last commit is discarded. Fails
    /// with `Error::Store` if another instance holds the directory.
    pub fn open(
        dir: impl AsRef<Path>,
        options: PersistentStoreOptions,
    ) -> Result<(Self, Option<Vec<u8>>)> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        io(&dir, fs::create_dir_all(&dir))?;
        let lock = DirLock::acquire_store(&dir, "state directory")?;
        let started = Instant::now();
        let mut hint = snapshot::take(&dir)?;
        let recovered = loop {
            let base = read_manifest(&dir)?;
            let mut files = list_segments(&dir)?;
            // Segments below the manifest's base were replaced by a compaction
            // whose old files were not all removed before a crash.
            let stale = files.partition_point(|(b, _)| *b < base);
            for (_, path) in files.drain(..stale) {
                ::log::info!("removing compacted segment {}", path.display());
                remove_if_exists(&path)?;
            }
            if stale > 0 {
                sync_dir(&dir)?;
            }
            if let Some(r) = hint
                .take()
                .map(|h| h.recovered(&files))
                .transpose()?
                .flatten()
            {
                ::log::debug!(
                    "state store {}: index loaded from its snapshot",
                    dir.display()
                );
                break r;
            }
            let r = recovery::recover(&dir, base, files)?;
            match r.compaction_base {
                // A compaction committed its output but did not switch the
                // manifest: finish it and read the store again from there.
                Some(c) if c > base => files::write_manifest(&dir, c)?,
                _ => break r,
            }
        };
        let live_bytes = recovered
            .index
            .iter()
            .map(|(k, loc)| data_frame_size(k.len(), loc.value_len as usize) as u64)
            .sum();
        let log = SegmentLog::new(
            &dir,
            options.segment_bytes,
            options.write_buffer_bytes,
            recovered.segments,
            recovered.next_seq,
        )?;
        ::log::debug!(
            "opened state store {} with {} entries in {:?}",
            dir.display(),
            recovered.index.len(),
            started.elapsed()
        );
        let committed = recovered.committed;
        let store = PersistentKeyValueStore {
            dir,
            options,
            index: recovered.index,
            log,
            live_bytes,
            committed: committed.clone(),
            dirty: false,
            _lock: lock,
        };
        Ok((store, committed))
    }

    /// Removes the store directory and everything in it. Fails if the store
    /// is open.
    pub fn destroy(dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        match fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(dir, e)),
            Ok(_) => {}
        }
        let lock = DirLock::acquire_store(dir, "state directory")?;
        io(dir, fs::remove_dir_all(dir))?;
        drop(lock);
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    #[inline]
    fn location(&self, key: &[u8]) -> Option<Location> {
        self.index.get(key)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.location(key) {
            Some(loc) => Ok(Some(self.log.read_value(key, loc)?.0)),
            None => Ok(None),
        }
    }

    /// Calls `f` with the value of `key` as the store holds it (no copy).
    pub fn get_with<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>> {
        match self.location(key) {
            Some(loc) => Ok(Some(self.log.with_value(key, loc, f)?)),
            None => Ok(None),
        }
    }

    /// [`super::KeyValueBytes::get_many_with`]: the keys are looked up in
    /// groups, each group's index lookups first (independent, so their cache
    /// misses overlap), prefetching each frame found, then the group's
    /// frames are read; a lone `get` waits for the index, then the frame.
    pub fn get_many_with<'k>(
        &self,
        n: usize,
        key: impl Fn(usize) -> &'k [u8],
        mut f: impl FnMut(usize, &[u8]),
    ) -> Result<()> {
        const GROUP: usize = 16;
        let mut locations = [None; GROUP];
        let mut base = 0;
        while base < n {
            let group = GROUP.min(n - base);
            for (j, loc) in locations[..group].iter_mut().enumerate() {
                let k = key(base + j);
                *loc = self.location(k);
                if let Some(l) = *loc {
                    self.log.prefetch_frame(k.len(), l);
                }
            }
            for (j, loc) in locations[..group].iter().enumerate() {
                if let Some(l) = *loc {
                    let i = base + j;
                    self.log.with_value(key(i), l, |v| f(i, v))?;
                }
            }
            base += group;
        }
        Ok(())
    }

    /// The value and the timestamp it was written with.
    pub fn get_with_timestamp(&self, key: &[u8]) -> Result<Option<(Vec<u8>, i64)>> {
        match self.location(key) {
            Some(loc) => Ok(Some(self.log.read_value(key, loc)?)),
            None => Ok(None),
        }
    }

    /// Stores `value`, or deletes the key when `value` is None.
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.put_with_timestamp(key, value, NO_TIMESTAMP)
    }

    /// Stores `value` with a record timestamp, or deletes the key when `value` is None.
    pub fn put_with_timestamp(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
    ) -> Result<()> {
        if let Some(v) = value {
            // Append first: if it fails, the index is unchanged.
            let (seg, pos, size) = self.log.append(Some(key), Some(v), timestamp, &[])?;
            let loc = Location {
                seg,
                pos,
                value_len: v.len() as u32,
            };
            self.live_bytes += size as u64;
            if let Some(old) = self.index.insert(key, loc) {
                self.live_bytes -= data_frame_size(key.len(), old.value_len as usize) as u64;
            }
        } else {
            // A key that is not in the index has no live value anywhere in
            // the log (a tombstone already follows any older one).
            let Some(old) = self.location(key) else {
                return Ok(());
            };
            self.log.append(Some(key), None, timestamp, &[])?;
            self.index.remove(key);
            self.live_bytes -= data_frame_size(key.len(), old.value_len as usize) as u64;
        }
        self.dirty = true;
        Ok(())
    }

    /// Room in the index for `additional` more keys without growing on the
    /// way (each growth moves every entry).
    pub fn reserve(&mut self, additional: usize) {
        self.index.reserve(additional);
    }

    /// After a restore's first batch, which brought `new_keys` keys in
    /// `applied` records: room in the index for the `rest` records still to
    /// come at that rate (all of them for a compacted changelog, few for a
    /// hot key's updates), so the index grows once instead of doubling its
    /// way up, each time moving every entry.
    pub fn reserve_for_restore(&mut self, new_keys: usize, applied: usize, rest: u64) {
        if applied > 0 {
            let expected = rest as f64 * new_keys.min(applied) as f64 / applied as f64;
            self.index.reserve(expected as usize);
        }
    }

    #[cfg(test)]
    fn index_capacity(&self) -> usize {
        self.index.capacity()
    }

    /// Writes `(key, value or None to delete, timestamp)` entries in order.
    pub fn write_batch<'a>(
        &mut self,
        entries: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>, i64)>,
    ) -> Result<()> {
        let entries: Vec<_> = entries.into_iter().collect();
        for (i, &(key, value, timestamp)) in entries.iter().enumerate() {
            if let Some(&(next, ..)) = entries.get(i + PREFETCH_AHEAD) {
                self.index.prefetch(next);
            }
            self.put_with_timestamp(key, value, timestamp)?;
        }
        Ok(())
    }

    /// Applies the first `n` records of a changelog batch (read from the
    /// embedded log or a Kafka consumer), in order (a null value deletes the
    /// key), without logging them again; each keeps its record timestamp.
    ///
    /// A changelog record's frame and a store frame have the same format, so
    /// a record the embedded log read without headers is copied into the
    /// store as it is, under the store's next sequence number, and its CRC
    /// (checked when the log read it) is carried over instead of computed
    /// again. Other records are written as puts.
    pub fn restore_batch(&mut self, batch: &ReadBatch, n: usize) -> Result<()> {
        for i in 0..n {
            if i + PREFETCH_AHEAD < n
                && let Some(next) = batch.key(i + PREFETCH_AHEAD)
            {
                self.index.prefetch(next);
            }
            let Some(key) = batch.key(i) else {
                return Err(Error::Store(format!(
                    "changelog record at offset {} has no key",
                    batch.offsets[i]
                )));
            };
            let value = batch.value(i);
            let Some(frame) = changelog_frame(batch, i) else {
                self.put_with_timestamp(key, value, batch.timestamps[i])?;
                continue;
            };
            let old = if let Some(v) = value {
                let (seg, pos) = self.log.append_copy(frame)?;
                let loc = Location {
                    seg,
                    pos,
                    value_len: v.len() as u32,
                };
                self.live_bytes += frame.len() as u64;
                self.index.insert(key, loc)
            } else {
                // As in `put_with_timestamp`: no value, no tombstone needed.
                if self.location(key).is_none() {
                    continue;
                }
                self.log.append_copy(frame)?;
                self.index.remove(key)
            };
            if let Some(old) = old {
                self.live_bytes -= data_frame_size(key.len(), old.value_len as usize) as u64;
            }
            self.dirty = true;
        }
        Ok(())
    }

    /// Stores `value` unless the key has a value; returns that value if so.
    pub fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(existing) = self.get(key)? {
            return Ok(Some(existing));
        }
        self.put(key, Some(value))?;
        Ok(None)
    }

    /// Deletes the key and returns its old value.
    pub fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let old = self.get(key)?;
        if old.is_some() {
            self.put(key, None)?;
        }
        Ok(old)
    }

    /// Entries with `from <= key <= to` (either bound open when None), in key
    /// order, or in reverse key order when `reverse`. An inverted range is empty.
    pub fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if matches!((from, to), (Some(f), Some(t)) if f > t) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        self.index.scan(
            from.map_or(Bound::Unbounded, Bound::Included),
            to.map_or(Bound::Unbounded, Bound::Included),
            |k, loc| {
                out.push((k.to_vec(), self.log.read_value(k, loc)?.0));
                Ok::<_, Error>(true)
            },
        )?;
        if reverse {
            out.reverse();
        }
        Ok(out)
    }

    /// Entries whose key starts with `prefix`, in key order.
    pub fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.index
            .scan(Bound::Included(prefix), Bound::Unbounded, |k, loc| {
                if !k.starts_with(prefix) {
                    return Ok(false);
                }
                out.push((k.to_vec(), self.log.read_value(k, loc)?.0));
                Ok::<_, Error>(true)
            })?;
        Ok(out)
    }

    /// The number of live keys (exact here).
    pub fn approximate_num_entries(&self) -> usize {
        self.index.len()
    }

    /// Bytes of the segment files (buffered appends included).
    pub fn size_on_disk(&self) -> u64 {
        self.log.size_on_disk()
    }

    /// The metadata of the last commit (the one `open` would return now).
    pub fn committed_metadata(&self) -> Option<&[u8]> {
        self.committed.as_deref()
    }

    /// Whether anything was written since the last commit.
    pub fn has_uncommitted_writes(&self) -> bool {
        self.dirty
    }

    /// Writes buffered appends to the files and fsyncs them. This is not a
    /// commit: `open` still discards everything after the last commit marker.
    pub fn flush(&mut self) -> Result<()> {
        self.log.sync()
    }

    /// Makes every write so far and `metadata` durable in one atomic step:
    /// `open` returns the store as of the last completed commit and its
    /// metadata. Compacts afterwards when enough of the log is dead.
    pub fn commit(&mut self, metadata: &[u8]) -> Result<()> {
        self.commit_marker(metadata, None)?;
        if self.should_compact() {
            self.compact_now()?;
        }
        Ok(())
    }

    /// Data first, then the marker: fsyncing the data before the marker is
    /// even written means a commit marker found on disk proves that
    /// everything before it was durable, so any bad frame before it is
    /// corruption, never a torn write.
    fn commit_marker(&mut self, metadata: &[u8], compaction_base: Option<u64>) -> Result<()> {
        self.log.sync()?;
        let base = compaction_base.map(u64::to_be_bytes);
        let header = Header {
            key: COMMIT_HEADER,
            value: base.as_ref().map(|b| &b[..]),
        };
        self.log.append(None, Some(metadata), now_ms(), &[header])?;
        self.log.sync()?;
        self.committed = Some(metadata.to_vec());
        self.dirty = false;
        Ok(())
    }

    fn should_compact(&self) -> bool {
        let total = self.log.total_bytes;
        let dead = total.saturating_sub(self.live_bytes);
        total >= self.options.compact_min_bytes
            && dead as f64 >= self.options.compact_dead_ratio * total as f64
    }

    /// Rewrites the live entries into fresh segments and drops the old ones
    /// (see "Compaction" in `store/README.md`). Needs every write committed.
    pub fn compact(&mut self) -> Result<()> {
        if self.dirty {
            return Err(Error::Store(format!(
                "state store {}: compact() needs every write committed first",
                self.dir.display()
            )));
        }
        self.compact_now()
    }

    fn compact_now(&mut self) -> Result<()> {
        // Nothing committed and nothing written: the store is empty.
        let Some(metadata) = self.committed.clone() else {
            return Ok(());
        };
        let started = Instant::now();
        let before = self.log.total_bytes;
        self.log.roll()?;
        let first_new = self.log.segments.len() - 1;
        let base = self.log.segments[first_new].base;
        // The copies are uncommitted until the compaction's own commit marker.
        self.dirty = true;
        let mut frame = Vec::new();
        // In key order, so that a scan afterwards reads the segments in order.
        let mut entries = self.index.sorted_entries();
        for (key, loc) in &mut entries {
            self.log.read_frame_into(key, *loc, &mut frame)?;
            (loc.seg, loc.pos) = self.log.append_copy(&frame)?;
        }
        self.index.relocate_all(entries);
        self.commit_marker(&metadata, Some(base))?;
        // From here on the new segments are the store; a crash before the
        // manifest names them makes `open` finish the switch.
        files::write_manifest(&self.dir, base)?;
        let old = self.log.forget_first(first_new);
        self.index.forget_segments(first_new as u32);
        for seg in &old {
            remove_if_exists(&seg.path)?;
        }
        sync_dir(&self.dir)?;
        ::log::debug!(
            "compacted state store {}: {before} -> {} bytes, {} entries, in {:?}",
            self.dir.display(),
            self.log.total_bytes,
            self.index.len(),
            started.elapsed()
        );
        Ok(())
    }
}

impl Drop for PersistentKeyValueStore {
    /// Leaves an index snapshot for the next `open` when the files end at
    /// the last commit (nothing uncommitted, no unfinished compaction).
    fn drop(&mut self) {
        if self.dirty || self.committed.is_none() {
            return;
        }
        let first = self.log.segments.first().map(|s| s.base);
        if read_manifest(&self.dir).ok() != first {
            return;
        }
        let written = self
            .log
            .segments
            .iter()
            .map(SegmentStamp::of)
            .collect::<Result<Vec<_>>>()
            .and_then(|segments| {
                snapshot::write(
                    &self.dir,
                    self.log.next_seq,
                    &segments,
                    self.committed.as_deref(),
                    &self.index,
                )
            });
        if let Err(e) = written {
            ::log::warn!(
                "state store {}: no index snapshot written ({e}); the next open scans",
                self.dir.display()
            );
        }
    }
}

/// The frame of record `i` of a batch the embedded log read, when it is a
/// data frame a store may hold as it is (no headers). The log reads whole
/// frames into `batch.data` and points the key and value spans into them;
/// the frame's own length, offset and timestamp fields are checked against
/// the batch, so any other layout is only a missed shortcut.
fn changelog_frame(batch: &ReadBatch, i: usize) -> Option<&[u8]> {
    // Only a read of the embedded log has frames around its keys (a Kafka
    // consumer's batch holds bare keys and values).
    if !batch.log_frames {
        return None;
    }
    let key = batch.keys[i]?;
    let start = key.start.checked_sub(KEY_LEN_AT + 4)?;
    let value_len = batch.values[i].map_or(0, |v| v.len);
    let size = data_frame_size(key.len, value_len);
    let frame = batch.data.get(start..start.checked_add(size)?)?;
    let value_at = start + KEY_LEN_AT + 8 + key.len;
    let fits = batch.headers(i).is_empty()
        && batch.values[i].is_none_or(|v| v.start == value_at)
        && format::frame_size(format::u32_at(frame, 0)) == Some(size)
        && format::u64_at(frame, OFFSET_AT) == batch.offsets[i]
        && format::i64_at(frame, BODY_AT) == batch.timestamps[i];
    fits.then_some(frame)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl super::KeyValueBytes for PersistentKeyValueStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        PersistentKeyValueStore::get(self, key)
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> Result<bool> {
        Ok(PersistentKeyValueStore::get_with(self, key, f)?.is_some())
    }

    fn get_many_with<'k>(
        &self,
        n: usize,
        key: &dyn Fn(usize) -> &'k [u8],
        f: &mut dyn FnMut(usize, &[u8]),
    ) -> Result<()> {
        PersistentKeyValueStore::get_many_with(self, n, key, f)
    }

    fn prefetch(&self, key: &[u8]) {
        self.index.prefetch(key);
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        PersistentKeyValueStore::put(self, key, value)
    }

    fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        PersistentKeyValueStore::range(self, from, to, reverse)
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        PersistentKeyValueStore::prefix_scan(self, prefix)
    }

    fn approximate_num_entries(&self) -> usize {
        self.index.len()
    }

    fn flush(&mut self) -> Result<()> {
        PersistentKeyValueStore::flush(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Log, RecordBatchBuilder, TopicConfig};

    /// A restore reserves index room at its first batch's rate of new keys:
    /// all of the rest for unique keys, little for a hot key's updates.
    #[test]
    fn restore_reserves_at_the_first_batchs_rate_of_new_keys() {
        let dir = tempfile::TempDir::new().unwrap();
        let log = Log::open(dir.path().join("log")).unwrap();
        log.create_topic("cl", TopicConfig::new(1)).unwrap();
        let mut b = RecordBatchBuilder::new();
        for i in 0..1000u32 {
            b.push(i64::from(i), Some(&i.to_be_bytes()), Some(b"v"), &[]);
        }
        for i in 0..1000u32 {
            b.push(i64::from(i), Some(&(i % 10).to_be_bytes()), Some(b"v"), &[]);
        }
        log.append("cl", 0, &b).unwrap();
        let (unique, hot) = (
            log.read("cl", 0, 0, 1000, usize::MAX).unwrap(),
            log.read("cl", 0, 1000, 1000, usize::MAX).unwrap(),
        );
        for (batch, dir_name, want_at_least, want_below) in
            [(&unique, "u", 100_000, usize::MAX), (&hot, "h", 0, 8192)]
        {
            let (mut store, _) = PersistentKeyValueStore::open(
                dir.path().join(dir_name),
                PersistentStoreOptions::default(),
            )
            .unwrap();
            let before = store.approximate_num_entries();
            store.restore_batch(batch, batch.len()).unwrap();
            let new_keys = store.approximate_num_entries() - before;
            store.reserve_for_restore(new_keys, batch.len(), 100_000);
            let capacity = store.index_capacity();
            assert!(
                (want_at_least..want_below).contains(&capacity),
                "{dir_name}: {new_keys} new keys in {} records, capacity {capacity}",
                batch.len()
            );
        }
    }

    /// Records without headers are copied (their frames found in the
    /// batch); a record with headers is not.
    #[test]
    fn changelog_frames_are_found_for_records_without_headers() {
        let dir = tempfile::TempDir::new().unwrap();
        let log = Log::open(dir.path()).unwrap();
        log.create_topic("cl", TopicConfig::new(1)).unwrap();
        let mut b = RecordBatchBuilder::new();
        let header = [Header {
            key: "h",
            value: None,
        }];
        b.push(7, Some(b"a"), Some(b"value"), &[]);
        b.push(8, Some(b"bb"), None, &[]);
        b.push(9, Some(b"c"), Some(b""), &[]);
        b.push(10, Some(b"d"), Some(b"v"), &header);
        log.append("cl", 0, &b).unwrap();
        let batch = log.read("cl", 0, 1, 10, usize::MAX).unwrap();
        assert_eq!(batch.offsets, [1, 2, 3]);
        let found: Vec<Option<&[u8]>> = (0..3).map(|i| changelog_frame(&batch, i)).collect();
        for (i, frame) in found[..2].iter().enumerate() {
            let frame = frame.expect("a frame without headers is found");
            assert_eq!(format::u64_at(frame, OFFSET_AT), batch.offsets[i]);
            assert!(format::crc_ok(frame));
            let view = format::decode(frame).unwrap();
            assert_eq!(view.key(frame), batch.key(i));
        }
        assert_eq!(found[2], None);
        // The same bytes not from a read of the log (a Kafka consumer's
        // batch holds bare keys and values): no frame is trusted.
        let foreign = ReadBatch {
            log_frames: false,
            ..batch
        };
        assert!((0..3).all(|i| changelog_frame(&foreign, i).is_none()));
    }
}
