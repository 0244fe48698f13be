//! Persistent time segments: a [`SegmentFactory`] whose segments are
//! [`PersistentKeyValueStore`]s, so that window and session stores survive
//! restarts and commit their data atomically with the caller's metadata.
//!
//! # Layout
//!
//! ```text
//! <dir>/                     the window or session store (e.g. state.dir/<app>/<task>/<store>)
//!   .lock                    held while the store is open
//!   commit                   the last commit record (see below), replaced atomically
//!   <store>.<segment start>  one PersistentKeyValueStore per segment, e.g. `counts.120000`
//! ```
//!
//! `<store>` is the last component of `<dir>` and the segment start is
//! `id * segment interval`, as Kafka names segments ([`segment_name`]). The
//! interval is recorded in the commit record: reopening with another one is
//! refused, since segment ids would no longer match the timestamps inside.
//!
//! # Commits across segments
//!
//! A [commit](PersistentSegmentFactory::commit) has a *generation* number
//! (one more than the last) and a *commit record*: the generation, the
//! segment interval, the store's observed stream time, the caller's metadata,
//! and for every open segment the generation of the commit marker it will
//! carry afterwards. Segments with writes since their last marker get a new
//! marker whose metadata is the whole record, so they carry this generation;
//! clean segments keep the marker they have (so a commit costs fsyncs only
//! for the segments that changed). Then the record is written to `<dir>/commit`
//! (temp file, fsync, rename, fsync of the directory).
//!
//! The rule on open: the store is as of a commit record `C` when every segment
//! `C` lists exists and its last marker has the generation `C` expects. `C` is
//! the record of the highest generation found, in `commit` or in any
//! segment's marker (so a commit that reached every changed segment but not
//! `commit` is rolled forward). Segments `C` does not list are deleted: they
//! were created after `C` (their data is uncommitted) or dropped by retention
//! before it. When the rule fails, a crash interrupted a commit after some
//! segments had moved past the last complete commit; those cannot go back, so
//! every segment is deleted and `open` returns no metadata: the caller
//! restores the store from the whole changelog, as for a missing store.
//!
//! # Retention
//!
//! [`destroy`](SegmentFactory::destroy) closes the segment at once, but its
//! directory is deleted only after the next commit, because until then the
//! last commit still holds it: deleting it earlier would make a reopen after
//! a crash (or a close without commit) miss data that the commit it returns
//! to had. A reopened store drops such a segment again once the caller
//! restores the committed observed stream time.
//!
//! The factory is a handle: [`Segments`](super::Segments) owns one clone,
//! the caller keeps another to [`commit`](PersistentSegmentFactory::commit).
//! One factory serves one segmented store.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::persistent::NO_TIMESTAMP;
use super::time_segments::{SegmentFactory, segment_name};
use super::{KeyValueBytes, PersistentKeyValueStore, PersistentStoreOptions};
use crate::error::{Error, Result};
use crate::fsutil::{DirLock, io, remove_if_exists, sync_dir, write_atomic};

const COMMIT_FILE: &str = "commit";
const RECORD_MAGIC: &[u8; 8] = b"STROMSG1";
/// magic, generation, interval, stream time, segment count.
const RECORD_HEADER: usize = 8 + 8 + 8 + 8 + 4;
const CRC_SIZE: usize = 4;

/// What a segmented store's last commit holds besides its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentedCommit {
    /// The caller's metadata (changelog offset, …).
    pub metadata: Vec<u8>,
    /// The store's observed stream time at the commit; hand it to
    /// `restore_observed_stream_time` after reopening.
    pub observed_stream_time: i64,
}

/// A commit record, as written to `<dir>/commit` and into changed segments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    generation: u64,
    segment_interval: i64,
    observed_stream_time: i64,
    /// Segment id -> generation of its last marker (0: it has none).
    segments: BTreeMap<i64, u64>,
    metadata: Vec<u8>,
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(RECORD_HEADER + 16 * self.segments.len() + self.metadata.len());
        out.extend_from_slice(RECORD_MAGIC);
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.segment_interval.to_be_bytes());
        out.extend_from_slice(&self.observed_stream_time.to_be_bytes());
        out.extend_from_slice(&(self.segments.len() as u32).to_be_bytes());
        for (id, generation) in &self.segments {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&generation.to_be_bytes());
        }
        out.extend_from_slice(&self.metadata);
        out
    }

    /// None when `bytes` is not a commit record.
    fn decode(bytes: &[u8]) -> Option<Record> {
        if bytes.len() < RECORD_HEADER || &bytes[..8] != RECORD_MAGIC {
            return None;
        }
        let u64_at = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().expect("8"));
        let count = u32::from_be_bytes(bytes[32..36].try_into().expect("4")) as usize;
        let end = RECORD_HEADER.checked_add(count.checked_mul(16)?)?;
        if bytes.len() < end {
            return None;
        }
        let segments = (0..count)
            .map(|i| {
                let at = RECORD_HEADER + 16 * i;
                (u64_at(at) as i64, u64_at(at + 8))
            })
            .collect();
        Some(Record {
            generation: u64_at(8),
            segment_interval: u64_at(16) as i64,
            observed_stream_time: u64_at(24) as i64,
            segments,
            metadata: bytes[end..].to_vec(),
        })
    }
}

/// One segment: a [`PersistentKeyValueStore`] shared with the factory, which
/// commits it.
pub struct PersistentSegment {
    store: Arc<Mutex<PersistentKeyValueStore>>,
}

impl std::fmt::Debug for PersistentSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PersistentSegment")
            .field(&*lock(&self.store))
            .finish()
    }
}

/// A panic while a lock was held leaves a store that is still readable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl KeyValueBytes for PersistentSegment {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        lock(&self.store).get(key)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        lock(&self.store).put(key, value)
    }

    fn put_batch(&mut self, entries: &[(&[u8], Option<&[u8]>)]) -> Result<()> {
        lock(&self.store).write_batch(entries.iter().map(|&(k, v)| (k, v, NO_TIMESTAMP)))
    }

    fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        lock(&self.store).range(from, to, reverse)
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        lock(&self.store).prefix_scan(prefix)
    }

    fn approximate_num_entries(&self) -> usize {
        lock(&self.store).approximate_num_entries()
    }

    fn flush(&mut self) -> Result<()> {
        lock(&self.store).flush()
    }
}

struct OpenSegment {
    store: Arc<Mutex<PersistentKeyValueStore>>,
    /// Generation of the segment's last commit marker (0: none).
    generation: u64,
}

struct Shared {
    dir: PathBuf,
    name: String,
    segment_interval: i64,
    options: PersistentStoreOptions,
    /// The generation of the last commit (attempted: a failed commit uses
    /// up its number, so no two different records share one).
    generation: u64,
    open: BTreeMap<i64, OpenSegment>,
    /// Segments dropped by retention, deleted after the next commit.
    doomed: Vec<i64>,
    /// Whether a segment directory was created since the last commit.
    created: bool,
    _lock: DirLock,
}

impl Shared {
    fn segment_dir(&self, id: i64) -> PathBuf {
        self.dir
            .join(segment_name(&self.name, id, self.segment_interval))
    }
}

/// Creates, commits and deletes the persistent segments of one window or
/// session store (see the module docs for the layout and the commit rule).
#[derive(Clone)]
pub struct PersistentSegmentFactory {
    shared: Arc<Mutex<Shared>>,
}

impl std::fmt::Debug for PersistentSegmentFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.shared);
        f.debug_struct("PersistentSegmentFactory")
            .field("dir", &s.dir)
            .field("segment_interval", &s.segment_interval)
            .field("generation", &s.generation)
            .field("segments", &s.open.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl PersistentSegmentFactory {
    /// Opens (or creates) the segmented store in `dir` as of its last
    /// complete commit and returns what that commit recorded (None: no
    /// commit, or an interrupted one; the store is then empty). Fails with
    /// `Error::Store` if another instance holds `dir`, with `Error::Config`
    /// if the store was written with another segment interval.
    pub fn open(
        dir: impl AsRef<Path>,
        segment_interval_ms: i64,
        options: PersistentStoreOptions,
    ) -> Result<(Self, Option<SegmentedCommit>)> {
        if segment_interval_ms < 1 {
            return Err(Error::Config(format!(
                "segment interval cannot be zero or negative (got {segment_interval_ms} ms)"
            )));
        }
        let dir = dir.as_ref().to_path_buf();
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                Error::Config(format!(
                    "a segmented store directory needs a UTF-8 name: {}",
                    dir.display()
                ))
            })?
            .to_owned();
        io(&dir, fs::create_dir_all(&dir))?;
        let lock_file = DirLock::acquire_store(&dir, "segmented store")?;
        let root = read_commit_file(&dir)?;
        if let Some(r) = &root
            && r.segment_interval != segment_interval_ms
        {
            return Err(Error::Config(format!(
                "segmented store {} was written with a segment interval of {} ms, not {} ms",
                dir.display(),
                r.segment_interval,
                segment_interval_ms
            )));
        }
        let mut shared = Shared {
            dir,
            name,
            segment_interval: segment_interval_ms,
            options,
            generation: 0,
            open: BTreeMap::new(),
            doomed: Vec::new(),
            created: false,
            _lock: lock_file,
        };
        let committed = recover(&mut shared, root)?;
        Ok((
            Self {
                shared: Arc::new(Mutex::new(shared)),
            },
            committed,
        ))
    }

    /// Removes a segmented store's directory and everything in it. Fails if
    /// the store is open.
    pub fn destroy_store(dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        match fs::symlink_metadata(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(dir, e)),
            Ok(_) => {}
        }
        let lock_file = DirLock::acquire_store(dir, "segmented store")?;
        io(dir, fs::remove_dir_all(dir))?;
        drop(lock_file);
        Ok(())
    }

    pub fn dir(&self) -> PathBuf {
        lock(&self.shared).dir.clone()
    }

    pub fn segment_interval(&self) -> i64 {
        lock(&self.shared).segment_interval
    }

    /// The directory of segment `id`.
    pub fn segment_dir(&self, id: i64) -> PathBuf {
        lock(&self.shared).segment_dir(id)
    }

    /// Makes every write to every open segment durable together with
    /// `metadata` and the store's `observed_stream_time`, then deletes the
    /// segments retention dropped since the last commit. A reopen returns the
    /// store as of the last commit that completed.
    pub fn commit(&self, metadata: &[u8], observed_stream_time: i64) -> Result<()> {
        let mut s = lock(&self.shared);
        s.generation += 1;
        let generation = s.generation;
        let mut changed = Vec::new();
        let mut segments = BTreeMap::new();
        for (&id, seg) in &s.open {
            let dirty = lock(&seg.store).has_uncommitted_writes();
            if dirty {
                changed.push(id);
            }
            segments.insert(id, if dirty { generation } else { seg.generation });
        }
        let record = Record {
            generation,
            segment_interval: s.segment_interval,
            observed_stream_time,
            segments,
            metadata: metadata.to_vec(),
        }
        .encode();
        if s.created {
            // New segment directories must be durable before a commit names them.
            sync_dir(&s.dir)?;
            s.created = false;
        }
        for id in changed {
            let seg = s.open.get_mut(&id).expect("listed above");
            lock(&seg.store).commit(&record)?;
            seg.generation = generation;
        }
        write_commit_file(&s.dir, &record)?;
        for id in std::mem::take(&mut s.doomed) {
            let path = s.segment_dir(id);
            // Like Kafka, a segment that fails to delete is logged, not fatal:
            // the commit no longer lists it, so the next open deletes it.
            if let Err(e) = PersistentKeyValueStore::destroy(&path) {
                log::error!("error deleting expired segment {}: {e}", path.display());
            }
        }
        Ok(())
    }
}

impl SegmentFactory for PersistentSegmentFactory {
    type Store = PersistentSegment;

    fn existing(&mut self) -> Result<Vec<i64>> {
        Ok(lock(&self.shared).open.keys().copied().collect())
    }

    fn open(&mut self, id: i64) -> Result<PersistentSegment> {
        let mut s = lock(&self.shared);
        if let Some(seg) = s.open.get(&id) {
            return Ok(PersistentSegment {
                store: Arc::clone(&seg.store),
            });
        }
        if s.doomed.contains(&id) {
            // Segments only ever drop below observed stream time, which never
            // goes back, so the store cannot ask for a dropped one again.
            return Err(Error::Store(format!(
                "segment {id} of {} was dropped by retention and cannot be reopened",
                s.dir.display()
            )));
        }
        let (mut store, _) = PersistentKeyValueStore::open(s.segment_dir(id), s.options.clone())?;
        // A new segment likely takes about as many keys as the newest one
        // (a window store over a steady stream): room for them up front
        // spares its index the growths (each moves every entry).
        if store.approximate_num_entries() == 0
            && let Some(newest) = s.open.values().next_back()
        {
            store.reserve(lock(&newest.store).approximate_num_entries());
        }
        let store = Arc::new(Mutex::new(store));
        s.open.insert(
            id,
            OpenSegment {
                store: Arc::clone(&store),
                generation: 0,
            },
        );
        s.created = true;
        Ok(PersistentSegment { store })
    }

    fn destroy(&mut self, id: i64, store: PersistentSegment) -> Result<()> {
        // Closing now releases the segment's files and lock; deleting waits
        // for the next commit (see the module docs).
        drop(store);
        let mut s = lock(&self.shared);
        if s.open.remove(&id).is_some() {
            s.doomed.push(id);
        }
        Ok(())
    }
}

/// Opens the segments of `s.dir`, keeps those of the last complete commit
/// and deletes the rest (all of them when no commit is complete).
fn recover(s: &mut Shared, root: Option<Record>) -> Result<Option<SegmentedCommit>> {
    let mut found: BTreeMap<i64, (PersistentKeyValueStore, Option<Record>)> = BTreeMap::new();
    for (id, path) in list_segment_dirs(&s.dir, &s.name, s.segment_interval)? {
        let (store, marker) = PersistentKeyValueStore::open(&path, s.options.clone())?;
        let record = match marker {
            None => None,
            Some(bytes) => Some(Record::decode(&bytes).ok_or_else(|| Error::CorruptLog {
                path: path.clone(),
                position: 0,
                offset: None,
                reason:
                    "the segment's commit metadata is not a segmented-store commit record".into(),
            })?),
        };
        found.insert(id, (store, record));
    }
    let generation_of = |r: &Option<Record>| r.as_ref().map_or(0, |r| r.generation);
    // The commit of the highest generation anywhere.
    let mut candidate = root;
    for (_, record) in found.values() {
        if generation_of(record) > generation_of(&candidate) {
            candidate.clone_from(record);
        }
    }
    s.generation = generation_of(&candidate);
    let complete = candidate.as_ref().is_none_or(|c| {
        c.segment_interval == s.segment_interval
            && c.segments.iter().all(|(id, &expected)| {
                found
                    .get(id)
                    .is_some_and(|(_, r)| generation_of(r) == expected)
            })
    });
    let keep = match (&candidate, complete) {
        (Some(c), true) => c.segments.clone(),
        (None, _) => BTreeMap::new(),
        (Some(c), false) => {
            log::warn!(
                "segmented store {}: commit {} was interrupted after some segments had moved \
                 past the last complete commit; deleting every segment so that the store is \
                 restored from its changelog",
                s.dir.display(),
                c.generation
            );
            remove_if_exists(&s.dir.join(COMMIT_FILE))?;
            BTreeMap::new()
        }
    };
    for (id, (store, _)) in found {
        if let Some(&generation) = keep.get(&id) {
            let store = Arc::new(Mutex::new(store));
            s.open.insert(id, OpenSegment { store, generation });
        } else {
            drop(store);
            PersistentKeyValueStore::destroy(s.segment_dir(id))?;
        }
    }
    sync_dir(&s.dir)?;
    Ok(match candidate {
        Some(c) if complete => Some(SegmentedCommit {
            metadata: c.metadata,
            observed_stream_time: c.observed_stream_time,
        }),
        _ => None,
    })
}

/// `(id, path)` of the segment directories of `dir`, named `<name>.<start>`.
fn list_segment_dirs(dir: &Path, name: &str, interval: i64) -> Result<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in io(dir, fs::read_dir(dir))? {
        let path = io(dir, entry)?.path();
        let Some(start) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix(name))
            .and_then(|n| n.strip_prefix('.'))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<i64>().ok())
        else {
            continue;
        };
        if !path.is_dir() {
            continue;
        }
        if start % interval != 0 {
            return Err(Error::Config(format!(
                "segment {} does not start at a multiple of the segment interval ({interval} ms); \
                 was the store written with another interval?",
                path.display()
            )));
        }
        out.push((start / interval, path));
    }
    out.sort_unstable_by_key(|(id, _)| *id);
    Ok(out)
}

fn read_commit_file(dir: &Path) -> Result<Option<Record>> {
    let path = dir.join(COMMIT_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let corrupt = |reason: &str| Error::CorruptLog {
        path: path.clone(),
        position: 0,
        offset: None,
        reason: reason.to_owned(),
    };
    let Some(body_len) = bytes.len().checked_sub(CRC_SIZE) else {
        return Err(corrupt("commit file too short"));
    };
    let (body, crc) = bytes.split_at(body_len);
    if u32::from_be_bytes(crc.try_into().expect("4 bytes")) != crc32c::crc32c(body) {
        return Err(corrupt("commit file CRC mismatch"));
    }
    Record::decode(body)
        .map(Some)
        .ok_or_else(|| corrupt("not a segmented-store commit record"))
}

/// Replaces `<dir>/commit` atomically.
fn write_commit_file(dir: &Path, record: &[u8]) -> Result<()> {
    let mut bytes = Vec::with_capacity(record.len() + 4);
    bytes.extend_from_slice(record);
    bytes.extend_from_slice(&crc32c::crc32c(record).to_be_bytes());
    write_atomic(&dir.join(COMMIT_FILE), &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let record = Record {
            generation: 7,
            segment_interval: 60_000,
            observed_stream_time: 123_456,
            segments: [(0, 3), (2, 7), (5, 0)].into_iter().collect(),
            metadata: b"{\"offset\": 5}".to_vec(),
        };
        assert_eq!(Record::decode(&record.encode()), Some(record.clone()));
        let empty = Record {
            segments: BTreeMap::new(),
            metadata: Vec::new(),
            ..record
        };
        assert_eq!(Record::decode(&empty.encode()), Some(empty));
        assert_eq!(Record::decode(b"STROMSG1"), None);
        assert_eq!(
            Record::decode(b"not a record at all, really not at all"),
            None
        );
    }
}
