//! One topic partition: its segments, appends, reads, rolls, retention and compaction.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};
use crate::fsutil::{self, io, remove_if_exists, sync_dir, system_time_ms};
use crate::log::format::{self, LENGTH_SIZE};
use crate::log::segment::{
    self, CLEANED_LOG_SUFFIX, CLEANED_SUFFIX, INDEX_SUFFIX, IndexEntry, LOG_SUFFIX, SEGINFO_SUFFIX,
    Segment,
};
use crate::log::writeback::Writeback;
use crate::log::{CompactionStats, ReadBatch, RecordBatchBuilder, Span, TopicConfig};

/// A batch buffer bigger than this is not kept for the next append.
const SCRATCH_KEEP: usize = 64 << 20;
const READ_CHUNK_MIN: usize = 64 << 10;
const READ_CHUNK_MAX: usize = 64 << 20;
/// Frame size assumed before a read has seen any frame.
const FRAME_GUESS: usize = 128;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves nothing half-written on disk
    // that recovery would not also handle, so keep serving.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A partition's state and the lock that serializes its maintenance
/// (compaction, retention) without blocking appends and reads.
#[derive(Debug)]
pub(crate) struct PartitionHandle {
    pub state: Mutex<Partition>,
    cleaner: Mutex<()>,
    /// Held across a flush's fsyncs: a flush that finds nothing left to do
    /// must not return while another one is still making that data durable.
    flusher: Mutex<()>,
}

#[derive(Debug)]
pub(crate) struct Partition {
    topic: Arc<str>,
    id: u32,
    dir: PathBuf,
    config: Arc<TopicConfig>,
    /// Sorted by base offset; the last is the active segment.
    segments: Vec<Segment>,
    next_offset: u64,
    unflushed: bool,
    /// Segment files were created since the directory was last fsynced.
    dir_dirty: bool,
    /// The active segment's early writeback.
    writeback: Writeback,
    scratch: Vec<u8>,
}

/// What one positional read works from: a segment's file as of a moment.
struct SegmentView {
    base: u64,
    path: Arc<Path>,
    file: Arc<File>,
    start: u64,
    end: u64,
    /// The offset of the frame at `start`, when `start` came from the index.
    expect: Option<u64>,
    /// The log end offset when the view was taken, if this is the active segment.
    log_end: Option<u64>,
}

struct ReadState {
    target: u64,
    records_left: usize,
    bytes_left: usize,
    returned: usize,
    returned_bytes: usize,
    /// End of the last returned frame in `ReadBatch::data`.
    data_end: usize,
}

enum SegmentRead {
    Full,
    EndOfSegment,
    IndexMismatch,
}

fn corrupt(path: &Path, position: u64, offset: Option<u64>, reason: impl Into<String>) -> Error {
    Error::CorruptLog {
        path: path.to_path_buf(),
        position,
        offset,
        reason: reason.into(),
    }
}

impl PartitionHandle {
    pub fn open(root: &Path, topic: &Arc<str>, id: u32, config: &Arc<TopicConfig>) -> Result<Self> {
        let state = Partition::open(root, topic, id, config)?;
        Ok(PartitionHandle {
            state: Mutex::new(state),
            cleaner: Mutex::new(()),
            flusher: Mutex::new(()),
        })
    }

    pub fn read(&self, offset: u64, max_records: usize, max_bytes: usize) -> Result<ReadBatch> {
        let mut batch = ReadBatch {
            next_offset: offset,
            log_frames: true,
            ..ReadBatch::default()
        };
        let mut view = {
            let p = lock(&self.state);
            p.check_offset(offset)?;
            if offset == p.next_offset || max_records == 0 {
                return Ok(batch);
            }
            p.view_for(offset)
        };
        let capacity = max_records.min(1 << 16);
        batch.offsets.reserve(capacity);
        batch.timestamps.reserve(capacity);
        batch.keys.reserve(capacity);
        batch.values.reserve(capacity);
        let mut st = ReadState {
            target: offset,
            records_left: max_records,
            bytes_left: max_bytes,
            returned: 0,
            returned_bytes: 0,
            data_end: 0,
        };
        let mut reached_end = None;
        loop {
            match read_segment(&view, &mut batch, &mut st)? {
                SegmentRead::Full => break,
                SegmentRead::IndexMismatch => {
                    ::log::warn!(
                        "{}: index entry does not match the log; rebuilding the index",
                        view.path.display()
                    );
                    lock(&self.state).rebuild_index(view.base)?;
                    view.start = 0;
                    view.expect = None;
                }
                SegmentRead::EndOfSegment => {
                    let next = lock(&self.state).view_after(&view, st.target);
                    let Some(next) = next else {
                        reached_end = view.log_end;
                        break;
                    };
                    view = next;
                }
            }
        }
        batch.data.truncate(st.data_end);
        batch.next_offset = batch.offsets.last().map_or(offset, |o| o + 1);
        // Compaction can leave no record between the last one read and the
        // log end (an expired tombstone); step over that gap.
        if let Some(end) = reached_end {
            batch.next_offset = batch.next_offset.max(end);
        }
        Ok(batch)
    }

    /// The offset of the first record, in offset order, whose timestamp is
    /// at least `timestamp` (Kafka's `ListOffsets` by timestamp), or None
    /// when no record has one. Segments whose largest timestamp is smaller
    /// are skipped whole; the first that is not is read from its start.
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<u64>> {
        const READ_RECORDS: usize = 4096;
        const READ_BYTES: usize = 1 << 20;
        let start = {
            let p = lock(&self.state);
            p.segments
                .iter()
                .find(|s| s.max_timestamp.is_some_and(|max| max >= timestamp))
                .map(|s| s.base.max(p.log_start_offset()))
        };
        let Some(mut offset) = start else {
            return Ok(None);
        };
        loop {
            let batch = self.read(offset, READ_RECORDS, READ_BYTES)?;
            if let Some(i) = batch.timestamps.iter().position(|&t| t >= timestamp) {
                return Ok(Some(batch.offsets[i]));
            }
            if batch.is_empty() {
                return Ok(None);
            }
            offset = batch.next_offset;
        }
    }

    /// Whether [`Self::flush`] has anything to do now: appends not yet
    /// flushed, or another thread's flush still making them durable (which
    /// a flush waits for).
    pub fn needs_flush(&self) -> bool {
        let Ok(_flusher) = self.flusher.try_lock() else {
            return true;
        };
        let p = lock(&self.state);
        p.unflushed || p.dir_dirty
    }

    /// fsyncs the active segment and its index if anything was appended
    /// since the last flush, and the directory if segments were created.
    pub fn flush(&self) -> Result<()> {
        let _flusher = lock(&self.flusher);
        let (dir, log_file, log_path, index_file, index_path, dir_dirty) = {
            let mut guard = lock(&self.state);
            let p = &mut *guard;
            if !p.unflushed && !p.dir_dirty {
                return Ok(());
            }
            let seg = p.segments.last_mut().expect("a partition has a segment");
            let index_file = seg.persist_index()?;
            p.writeback.flushed_to(seg.size);
            let index_path = seg.sibling(INDEX_SUFFIX);
            let (log_file, log_path) = (Arc::clone(&seg.file), Arc::clone(&seg.path));
            p.unflushed = false;
            let dir_dirty = std::mem::take(&mut p.dir_dirty);
            (
                p.dir.clone(),
                log_file,
                log_path,
                index_file,
                index_path,
                dir_dirty,
            )
        };
        // fsync outside the lock so appends go on meanwhile; the log and its
        // index at once (each fsync waits mostly on the device: two in flight
        // overlap those waits).
        let result = std::thread::scope(|s| {
            let sync_index = || io(&index_path, index_file.sync_data());
            let index = std::thread::Builder::new().spawn_scoped(s, sync_index);
            let log = io(&log_path, log_file.sync_data());
            // Without a thread to spare, the index is synced after the log.
            log.and(index.map_or_else(
                |_| sync_index(),
                |t| t.join().expect("an fsync does not panic"),
            ))
        })
        .and_then(|()| if dir_dirty { sync_dir(&dir) } else { Ok(()) });
        if result.is_err() {
            let mut p = lock(&self.state);
            p.unflushed = true;
            p.dir_dirty |= dir_dirty;
        }
        result
    }

    /// On a clean close, after `flush`: lets the next open trust the active
    /// segment instead of scanning it (`Segment::recover_active`), unless
    /// something was appended since the flush.
    pub fn mark_clean(&self) -> Result<()> {
        let p = lock(&self.state);
        if p.unflushed {
            return Ok(());
        }
        p.active().mark_clean()
    }

    /// Deletes closed segments past `retention.ms` / `retention.bytes`, oldest first.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<u64> {
        let _cleaner = lock(&self.cleaner);
        let mut p = lock(&self.state);
        let (retention_ms, retention_bytes) = (p.config.retention_ms, p.config.retention_bytes);
        if retention_ms.is_none() && retention_bytes.is_none() {
            return Ok(0);
        }
        let mut total: u64 = p.segments.iter().map(|s| s.size).sum();
        let mut deleted = 0;
        while p.segments.len() > 1 {
            let seg = &p.segments[0];
            let expired = retention_ms.is_some_and(|ms| {
                seg.max_timestamp.unwrap_or(i64::MIN) < now_ms.saturating_sub(ms)
            });
            let over_size = retention_bytes.is_some_and(|bytes| total - seg.size >= bytes);
            if !expired && !over_size {
                break;
            }
            ::log::info!(
                "retention: deleting segment {} of {}-{} ({}, {} bytes)",
                seg.base,
                p.topic,
                p.id,
                if expired {
                    "expired"
                } else {
                    "over retention.bytes"
                },
                seg.size
            );
            seg.delete_files()?;
            total -= seg.size;
            p.segments.remove(0);
            deleted += 1;
        }
        if deleted > 0 {
            sync_dir(&p.dir)?;
        }
        Ok(deleted)
    }

    /// Keeps the latest record per key in the closed segments (see README).
    pub fn compact(&self, now_ms: i64) -> Result<CompactionStats> {
        let _cleaner = lock(&self.cleaner);
        let (closed, active, config) = {
            let p = lock(&self.state);
            let config = Arc::clone(&p.config);
            let mut segments = p.segments.iter();
            let active = p.view_of(segments.next_back().expect("a partition has a segment"), 0);
            // With min.compaction.lag.ms, as Kafka: only the closed segments
            // before the first one holding a record newer than now - lag.
            let cut = now_ms.saturating_sub(config.min_compaction_lag_ms);
            let closed: Vec<SegmentView> = segments
                .take_while(|s| {
                    config.min_compaction_lag_ms == 0 || s.max_timestamp.unwrap_or(i64::MIN) <= cut
                })
                .map(|s| p.view_of(s, 0))
                .collect();
            (closed, active, config)
        };
        let mut stats = CompactionStats::default();
        if closed.is_empty() {
            return Ok(stats);
        }
        // The latest offset of every key, the active segment included: its
        // records shadow older ones although it is not rewritten itself.
        // Under a compaction lag only the cleanable segments count (Kafka's
        // offset map covers no more), so a record still within the lag
        // shadows nothing.
        let shadowing = (config.min_compaction_lag_ms == 0).then_some(&active);
        let mut latest: HashMap<Box<[u8]>, u64> = HashMap::new();
        for v in closed.iter().chain(shadowing) {
            let scan = segment::scan(&v.file, &v.path, v.base, v.end, u64::MAX, |_, frame, f| {
                if let Some(key) = f.key(frame) {
                    if let Some(o) = latest.get_mut(key) {
                        *o = f.offset;
                    } else {
                        latest.insert(key.into(), f.offset);
                    }
                }
                Ok(())
            })?;
            if let Some((position, offset, reason)) = scan.bad {
                return Err(corrupt(&v.path, position, offset, reason));
            }
        }
        for v in &closed {
            let mtime = io(&v.path, v.file.metadata().and_then(|m| m.modified()))?;
            let remove_tombstones =
                now_ms >= system_time_ms(mtime).saturating_add(config.delete_retention_ms);
            let keep = |frame: &[u8], f: &format::FrameView| match f.key(frame) {
                None => true,
                Some(key) => {
                    latest.get(key) == Some(&f.offset) && !(f.is_tombstone() && remove_tombstones)
                }
            };
            let (mut removed, mut tombstones) = (0u64, 0u64);
            segment::scan(&v.file, &v.path, v.base, v.end, u64::MAX, |_, frame, f| {
                if !keep(frame, f) {
                    removed += 1;
                    tombstones += u64::from(f.is_tombstone());
                }
                Ok(())
            })?;
            if removed == 0 {
                continue;
            }
            let cleaned = Self::write_cleaned(v, &config, mtime, keep)?;
            self.install_cleaned(v, cleaned)?;
            stats.segments_cleaned += 1;
            stats.records_removed += removed;
            stats.tombstones_removed += tombstones;
        }
        Ok(stats)
    }

    /// Writes the kept frames of a segment to `<base>.log.cleaned`, durably,
    /// with the original's modification time (tombstone expiry counts from it).
    fn write_cleaned(
        v: &SegmentView,
        config: &TopicConfig,
        mtime: std::time::SystemTime,
        keep: impl Fn(&[u8], &format::FrameView) -> bool,
    ) -> Result<Segment> {
        let path = v
            .path
            .with_file_name(segment::file_name(v.base, CLEANED_LOG_SUFFIX));
        let file = io(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path),
        )?;
        let mut out = BufWriter::with_capacity(1 << 20, &file);
        let interval = u64::from(config.index_interval_bytes);
        let mut kept = Scanned::default();
        segment::scan(&v.file, &v.path, v.base, v.end, u64::MAX, |_, frame, f| {
            if !keep(frame, f) {
                return Ok(());
            }
            if kept.bytes_since_index >= interval {
                kept.index.push(IndexEntry {
                    relative_offset: (f.offset - v.base) as u32,
                    position: kept.size as u32,
                });
                kept.bytes_since_index = 0;
            }
            io(&path, out.write_all(frame))?;
            let len = frame.len() as u64;
            kept.size += len;
            kept.bytes_since_index += len;
            kept.max_timestamp = Some(
                kept.max_timestamp
                    .map_or(f.timestamp, |m| m.max(f.timestamp)),
            );
            kept.last_offset = Some(f.offset);
            Ok(())
        })?;
        io(&path, out.flush())?;
        drop(out);
        io(&path, file.set_modified(mtime))?;
        io(&path, file.sync_all())?;
        let mut seg = Segment::empty(v.base, v.path.to_path_buf(), file);
        seg.size = kept.size;
        seg.index = kept.index;
        seg.bytes_since_index = kept.bytes_since_index;
        seg.max_timestamp = kept.max_timestamp;
        seg.last_offset = kept.last_offset;
        Ok(seg)
    }

    /// Swaps a cleaned segment in. The index and summary go first: a crash
    /// leaves the old or the new `.log`, either one with no index, which is
    /// rebuilt on open.
    fn install_cleaned(&self, v: &SegmentView, mut cleaned: Segment) -> Result<()> {
        let mut p = lock(&self.state);
        let i = p
            .segments
            .iter()
            .position(|s| s.base == v.base)
            .expect("the cleaner lock keeps closed segments in place");
        let cleaned_path = v
            .path
            .with_file_name(segment::file_name(v.base, CLEANED_LOG_SUFFIX));
        remove_if_exists(&p.segments[i].sibling(INDEX_SUFFIX))?;
        remove_if_exists(&p.segments[i].sibling(SEGINFO_SUFFIX))?;
        if cleaned.size == 0 {
            ::log::info!("compaction emptied {}; deleting it", v.path.display());
            remove_if_exists(&cleaned_path)?;
            remove_if_exists(&v.path)?;
            p.segments.remove(i);
        } else {
            io(&v.path, fs::rename(&cleaned_path, &v.path))?;
            cleaned.write_index_file()?;
            cleaned.write_seginfo()?;
            cleaned.index_file = None;
            p.segments[i] = cleaned;
        }
        sync_dir(&p.dir)
    }
}

impl Partition {
    fn open(root: &Path, topic: &Arc<str>, id: u32, config: &Arc<TopicConfig>) -> Result<Self> {
        let dir = root.join(format!("{topic}-{id}"));
        io(&dir, fs::create_dir_all(&dir))?;
        let interval = u64::from(config.index_interval_bytes);
        let mut bases = Vec::new();
        let mut derived = Vec::new();
        for entry in io(&dir, fs::read_dir(&dir))? {
            let path = io(&dir, entry)?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if let Some(base) = segment::parse_base(name, LOG_SUFFIX) {
                bases.push(base);
            } else if name.ends_with(CLEANED_SUFFIX) || name.ends_with(fsutil::TMP_SUFFIX) {
                // A compaction or write cut short; the original is intact.
                ::log::info!("removing leftover {}", path.display());
                remove_if_exists(&path)?;
            } else if let Some(base) = segment::parse_base(name, INDEX_SUFFIX)
                .or_else(|| segment::parse_base(name, SEGINFO_SUFFIX))
            {
                derived.push((base, path));
            }
        }
        bases.sort_unstable();
        for (base, path) in derived {
            if bases.binary_search(&base).is_err() {
                // Its segment was deleted (retention, compaction) before it.
                remove_if_exists(&path)?;
            }
        }
        let mut segments = Vec::with_capacity(bases.len().max(1));
        let mut dir_dirty = false;
        if let Some((&last, closed)) = bases.split_last() {
            for &base in closed {
                segments.push(Segment::open_closed(&dir, base, interval)?);
            }
            segments.push(Segment::recover_active(&dir, last, interval)?);
        } else {
            segments.push(Segment::create(&dir, 0)?);
            dir_dirty = true;
        }
        for pair in segments.windows(2) {
            if pair[0].last_offset.is_some_and(|o| o >= pair[1].base) {
                return Err(corrupt(
                    &pair[0].path,
                    0,
                    pair[0].last_offset,
                    format!(
                        "segment ends at offset {:?}, past the next segment's base {}",
                        pair[0].last_offset, pair[1].base
                    ),
                ));
            }
        }
        let active = segments.last().expect("at least one segment");
        let next_offset = active.last_offset.map_or(active.base, |o| o + 1);
        let writeback = Writeback::starting_at(active.size);
        Ok(Partition {
            topic: Arc::clone(topic),
            id,
            dir,
            config: Arc::clone(config),
            segments,
            next_offset,
            unflushed: false,
            dir_dirty,
            writeback,
            scratch: Vec::new(),
        })
    }

    pub fn log_start_offset(&self) -> u64 {
        self.segments[0].base
    }

    pub fn end_offset(&self) -> u64 {
        self.next_offset
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("a partition has a segment")
    }

    fn check_offset(&self, offset: u64) -> Result<()> {
        let log_start = self.log_start_offset();
        if offset < log_start || offset > self.next_offset {
            return Err(Error::OffsetOutOfRange {
                topic: self.topic.to_string(),
                partition: self.id,
                offset,
                log_start,
                log_end: self.next_offset,
            });
        }
        Ok(())
    }

    fn view_of(&self, seg: &Segment, start: u64) -> SegmentView {
        let is_active = std::ptr::eq(seg, self.active());
        SegmentView {
            base: seg.base,
            path: Arc::clone(&seg.path),
            file: Arc::clone(&seg.file),
            start,
            end: seg.size,
            expect: None,
            log_end: is_active.then_some(self.next_offset),
        }
    }

    /// The segment holding `offset` (which `check_offset` accepted), positioned by the index.
    fn view_for(&self, offset: u64) -> SegmentView {
        let i = self.segments.partition_point(|s| s.base <= offset);
        let seg = &self.segments[i.max(1) - 1];
        let (start, expect) = seg.lookup(offset);
        let mut view = self.view_of(seg, start);
        view.expect = expect;
        view
    }

    /// Where a read that consumed `view` goes on: the rest of the same
    /// segment if appends grew it meanwhile, else the next segment.
    fn view_after(&self, view: &SegmentView, target: u64) -> Option<SegmentView> {
        let i = self.segments.partition_point(|s| s.base <= view.base);
        if let Some(seg) = i.checked_sub(1).map(|i| &self.segments[i])
            && seg.base == view.base
        {
            if Arc::ptr_eq(&seg.file, &view.file) {
                if seg.size > view.end {
                    return Some(self.view_of(seg, view.end));
                }
            } else if seg.last_offset.is_some_and(|o| o >= target) {
                // Compaction replaced the file: find the place again by offset.
                let (start, expect) = seg.lookup(target);
                let mut next = self.view_of(seg, start);
                next.expect = expect;
                return Some(next);
            }
        }
        self.segments.get(i).map(|s| self.view_of(s, 0))
    }

    fn rebuild_index(&mut self, base: u64) -> Result<()> {
        let interval = u64::from(self.config.index_interval_bytes);
        let Some(seg) = self.segments.iter_mut().find(|s| s.base == base) else {
            return Ok(());
        };
        let scan = segment::scan(&seg.file, &seg.path, base, seg.size, interval, |_, _, _| {
            Ok(())
        })?;
        if let Some((position, offset, reason)) = scan.bad {
            return Err(corrupt(&seg.path, position, offset, reason));
        }
        seg.index = scan.index;
        seg.bytes_since_index = scan.bytes_since_index;
        seg.write_index_file()
    }

    /// Closes the active segment and starts a new one at the log end offset.
    /// An empty active segment is kept: a new one would have the same base.
    pub fn roll(&mut self) -> Result<()> {
        let active = self.segments.last_mut().expect("a partition has a segment");
        if active.size == 0 {
            return Ok(());
        }
        active.close()?;
        let seg = Segment::create(&self.dir, self.next_offset)?;
        self.segments.push(seg);
        self.dir_dirty = true;
        self.writeback = Writeback::starting_at(0);
        Ok(())
    }

    pub fn append(&mut self, batch: &RecordBatchBuilder) -> Result<u64> {
        if batch.is_empty() {
            return Ok(self.next_offset);
        }
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        buf.extend_from_slice(&batch.buf);
        let result = self.append_frames(&mut buf, batch.has_null_key, batch.max_timestamp);
        if buf.capacity() <= SCRATCH_KEEP {
            self.scratch = buf;
        }
        result
    }

    /// `append`, finishing the frames in the batch's own buffer (no copy);
    /// the batch is left empty, its buffer kept for reuse.
    pub fn append_and_clear(&mut self, batch: &mut RecordBatchBuilder) -> Result<u64> {
        let (has_null_key, max_timestamp) = (batch.has_null_key, batch.max_timestamp);
        let result = self.append_frames(&mut batch.buf, has_null_key, max_timestamp);
        batch.clear();
        result
    }

    /// Appends encoded frames (offsets not set yet), finishing them in `buf`.
    fn append_frames(
        &mut self,
        buf: &mut [u8],
        has_null_key: bool,
        max_timestamp: i64,
    ) -> Result<u64> {
        let first = self.next_offset;
        if buf.is_empty() {
            return Ok(first);
        }
        if self.config.cleanup_policy.compact && has_null_key {
            return Err(Error::Config(format!(
                "cannot append a record with a null key to compacted topic '{}' \
                 (cleanup.policy={})",
                self.topic,
                if self.config.cleanup_policy.delete {
                    "compact,delete"
                } else {
                    "compact"
                }
            )));
        }
        // Like Kafka, segment.ms counts from the segment's first record timestamp.
        if let (Some(ms), Some(first_ts)) = (self.config.segment_ms, self.active().first_timestamp)
            && max_timestamp.saturating_sub(first_ts) > ms
        {
            self.roll()?;
        }
        let result = self.write_frames(buf, first);
        self.unflushed = true;
        let active = self.segments.last().expect("a partition has a segment");
        self.writeback.after_append(&active.file, active.size);
        result.map(|()| first)
    }

    /// Assigns offsets from `first` to the encoded frames in `buf` and writes
    /// them to the active segment, rolling where `segment.bytes` requires:
    /// one write per segment touched.
    fn write_frames(&mut self, buf: &mut [u8], first: u64) -> Result<()> {
        let segment_bytes = self.config.segment_bytes;
        let interval = u64::from(self.config.index_interval_bytes);
        let mut offset = first;
        let mut chunk_start = 0;
        let mut pos = 0;
        let mut pending = Pending::of(self.active());
        while pos < buf.len() {
            let total = LENGTH_SIZE + format::u32_at(buf, pos) as usize;
            let seg_base = self.active().base;
            let seg_size = self.active().size + (pos - chunk_start) as u64;
            let relative = offset - seg_base;
            if seg_size > 0
                && (seg_size + total as u64 > segment_bytes || relative > u64::from(u32::MAX))
            {
                self.commit_chunk(&mut buf[chunk_start..pos], &mut pending)?;
                self.roll()?;
                chunk_start = pos;
                pending = Pending::of(self.active());
                continue;
            }
            buf[pos + format::OFFSET_AT..pos + format::BODY_AT]
                .copy_from_slice(&offset.to_be_bytes());
            if pending.bytes_since_index >= interval {
                pending.index.push(IndexEntry {
                    relative_offset: relative as u32,
                    position: seg_size as u32,
                });
                pending.bytes_since_index = 0;
            }
            pending.bytes_since_index += total as u64;
            let ts = format::i64_at(buf, pos + format::BODY_AT);
            pending.first_timestamp.get_or_insert(ts);
            pending.max_timestamp = Some(pending.max_timestamp.map_or(ts, |m| m.max(ts)));
            pending.last_offset = Some(offset);
            offset += 1;
            pos += total;
        }
        self.commit_chunk(&mut buf[chunk_start..], &mut pending)
    }

    /// Finishes the CRCs of frames whose offsets are set, writes them to the
    /// active segment with one positional write, then makes them visible
    /// (size, index, log end offset).
    fn commit_chunk(&mut self, bytes: &mut [u8], pending: &mut Pending) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        format::seal_frames(bytes);
        let seg = self.segments.last_mut().expect("a partition has a segment");
        if let Err(e) = seg.file.write_all_at(bytes, seg.size) {
            // Leave no partial frames behind for a later append to follow.
            let _ = seg.file.set_len(seg.size);
            return Err(Error::io(&*seg.path, e));
        }
        seg.size += bytes.len() as u64;
        seg.index.append(&mut pending.index);
        seg.bytes_since_index = pending.bytes_since_index;
        seg.first_timestamp = pending.first_timestamp;
        seg.max_timestamp = pending.max_timestamp;
        seg.last_offset = pending.last_offset;
        self.next_offset = pending.last_offset.map_or(self.next_offset, |o| o + 1);
        Ok(())
    }
}

/// What the cleaner kept of a segment.
#[derive(Default)]
struct Scanned {
    size: u64,
    index: Vec<IndexEntry>,
    bytes_since_index: u64,
    max_timestamp: Option<i64>,
    last_offset: Option<u64>,
}

/// Index and summary updates of frames not yet written.
struct Pending {
    index: Vec<IndexEntry>,
    bytes_since_index: u64,
    first_timestamp: Option<i64>,
    max_timestamp: Option<i64>,
    last_offset: Option<u64>,
}

impl Pending {
    fn of(seg: &Segment) -> Self {
        Pending {
            index: Vec::new(),
            bytes_since_index: seg.bytes_since_index,
            first_timestamp: seg.first_timestamp,
            max_timestamp: seg.max_timestamp,
            last_offset: seg.last_offset,
        }
    }
}

/// Reads frames of one segment view into `batch` from `view.start` on.
/// Every frame returned has its CRC checked, three at a time (interleaved);
/// a mismatch among them wins over whatever else ended the read.
fn read_segment(
    view: &SegmentView,
    batch: &mut ReadBatch,
    st: &mut ReadState,
) -> Result<SegmentRead> {
    let mut unchecked = Unchecked::default();
    let result = read_frames(view, batch, st, &mut unchecked);
    unchecked.check(view, &batch.data)?;
    result
}

/// Frames taken into a read whose CRCs are not checked yet.
#[derive(Default)]
struct Unchecked {
    /// Per frame: its start in the batch data, size, segment position and offset.
    frames: [(usize, usize, u64, u64); 3],
    len: usize,
}

impl Unchecked {
    /// Adds a frame; checks the three when it is the third.
    fn push(
        &mut self,
        view: &SegmentView,
        data: &[u8],
        frame: (usize, usize, u64, u64),
    ) -> Result<()> {
        self.frames[self.len] = frame;
        self.len += 1;
        if self.len < self.frames.len() {
            return Ok(());
        }
        self.len = 0;
        let [a, b, c] = self
            .frames
            .map(|(start, total, _, _)| &data[start..start + total]);
        let crcs = format::frame_crc3([a, b, c]);
        for (i, &(start, _, pos, offset)) in self.frames.iter().enumerate() {
            if format::u32_at(data, start + format::CRC_AT) != crcs[i] {
                return Err(corrupt(&view.path, pos, Some(offset), "CRC mismatch"));
            }
        }
        Ok(())
    }

    /// Checks the frames left, in order.
    fn check(&mut self, view: &SegmentView, data: &[u8]) -> Result<()> {
        for &(start, total, pos, offset) in &self.frames[..std::mem::take(&mut self.len)] {
            if !format::crc_ok(&data[start..start + total]) {
                return Err(corrupt(&view.path, pos, Some(offset), "CRC mismatch"));
            }
        }
        Ok(())
    }
}

fn read_frames(
    view: &SegmentView,
    batch: &mut ReadBatch,
    st: &mut ReadState,
    unchecked: &mut Unchecked,
) -> Result<SegmentRead> {
    batch.data.truncate(st.data_end);
    let data_base = batch.data.len();
    let at = |pos: u64| data_base + (pos - view.start) as usize;
    let mut filled = view.start;
    let mut pos = view.start;
    let mut first = true;
    while pos < view.end {
        if st.records_left == 0 || (st.returned > 0 && st.bytes_left == 0) {
            return Ok(SegmentRead::Full);
        }
        let avg = st
            .returned_bytes
            .checked_div(st.returned)
            .unwrap_or(FRAME_GUESS);
        let chunk = st
            .records_left
            .saturating_mul(avg)
            .saturating_add(4096)
            .clamp(READ_CHUNK_MIN, READ_CHUNK_MAX)
            .min(st.bytes_left.saturating_add(READ_CHUNK_MIN));
        if filled < pos + LENGTH_SIZE as u64 {
            fill(
                view,
                &mut batch.data,
                &mut filled,
                pos + LENGTH_SIZE as u64,
                chunk,
            )?;
        }
        let length = format::u32_at(&batch.data, at(pos));
        let total = format::frame_size(length)
            .filter(|&t| pos + t as u64 <= view.end)
            .ok_or_else(|| {
                corrupt(
                    &view.path,
                    pos,
                    None,
                    format!("impossible frame length {length}"),
                )
            })?;
        if filled < pos + total as u64 {
            fill(
                view,
                &mut batch.data,
                &mut filled,
                pos + total as u64,
                chunk,
            )?;
        }
        let start = at(pos);
        let frame = &batch.data[start..start + total];
        let offset = format::u64_at(frame, format::OFFSET_AT);
        if std::mem::take(&mut first) && view.expect.is_some_and(|e| e != offset) {
            return Ok(SegmentRead::IndexMismatch);
        }
        if offset >= st.target {
            if st.returned > 0 && total > st.bytes_left {
                return Ok(SegmentRead::Full);
            }
            // A damaged frame is reported as such before what it seems to hold.
            let bad = |r: &str| {
                let reason = if format::crc_ok(frame) {
                    r
                } else {
                    "CRC mismatch"
                };
                corrupt(&view.path, pos, Some(offset), reason)
            };
            let f = format::decode(frame).map_err(bad)?;
            let span = |r: Option<(usize, usize)>| {
                r.map(|(s, len)| Span {
                    start: start + s,
                    len,
                })
            };
            batch.offsets.push(offset);
            batch.timestamps.push(f.timestamp);
            batch.keys.push(span(f.key));
            batch.values.push(span(f.value));
            if f.header_count > 0 {
                batch.push_headers(format::decode_headers(frame, &f).map_err(bad)?);
            }
            unchecked.push(view, &batch.data, (start, total, pos, offset))?;
            st.returned += 1;
            st.returned_bytes += total;
            st.records_left -= 1;
            st.bytes_left = st.bytes_left.saturating_sub(total);
            st.target = offset + 1;
            st.data_end = start + total;
        }
        pos += total as u64;
    }
    Ok(SegmentRead::EndOfSegment)
}

/// Extends `data` with the segment's bytes from `filled` to at least `need`
/// (more, up to `chunk` bytes, to save reads), stopping at the view end.
fn fill(
    view: &SegmentView,
    data: &mut Vec<u8>,
    filled: &mut u64,
    need: u64,
    chunk: usize,
) -> Result<()> {
    let to = need.max((*filled + chunk as u64).min(view.end));
    let n = (to - *filled) as usize;
    data.reserve(n);
    // Read into the spare capacity (not zeroed first: the kernel fills it).
    io(
        &view.path,
        read_exact_at_uninit(&view.file, &mut data.spare_capacity_mut()[..n], *filled),
    )?;
    // SAFETY: the read initialized all `n` bytes after the length.
    unsafe { data.set_len(data.len() + n) };
    *filled = to;
    Ok(())
}

/// `FileExt::read_exact_at` into memory not yet initialized; every byte of
/// `buf` is written when it returns Ok.
fn read_exact_at_uninit(
    file: &File,
    mut buf: &mut [std::mem::MaybeUninit<u8>],
    mut at: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    while !buf.is_empty() {
        let offset = libc::off_t::try_from(at)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`,
        // which is valid for writes (uninitialized bytes may be written).
        let read =
            unsafe { libc::pread(file.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), offset) };
        match read {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n if n > 0 => {
                let n = n.unsigned_abs();
                buf = &mut buf[n..];
                at += n as u64;
            }
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn segment_dir_name(topic: &str, partition: u32) -> String {
    format!("{topic}-{partition}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(segment_dir_name("t", 3), "t-3");
        assert_eq!(
            segment::file_name(42, LOG_SUFFIX),
            "00000000000000000042.log"
        );
        assert_eq!(
            segment::parse_base("00000000000000000042.log", LOG_SUFFIX),
            Some(42)
        );
        assert_eq!(segment::parse_base("42.log", LOG_SUFFIX), None);
    }

    /// A partition needs a flush after appends (and when new), not after
    /// a flush; and it does while another thread's flush is under way, so
    /// that a flush waits for that one to make its data durable.
    #[test]
    fn needs_flush_until_flushed_and_while_a_flush_runs() {
        let dir = tempfile::tempdir().unwrap();
        let config = Arc::new(TopicConfig::new(1));
        let p = PartitionHandle::open(dir.path(), &Arc::from("t"), 0, &config).unwrap();
        assert!(p.needs_flush(), "a new segment's directory entry");
        p.flush().unwrap();
        assert!(!p.needs_flush());
        let mut batch = RecordBatchBuilder::new();
        batch.push(1, Some(b"k"), Some(b"v"), &[]);
        lock(&p.state).append(&batch).unwrap();
        assert!(p.needs_flush());
        p.flush().unwrap();
        assert!(!p.needs_flush());
        let running = lock(&p.flusher);
        assert!(p.needs_flush(), "another flush is under way");
        drop(running);
        assert!(!p.needs_flush());
    }

    /// Reads into spare capacity give the file's bytes at any offset and
    /// length, and a read past the end is an error.
    #[test]
    fn reads_into_spare_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        for (at, n) in [(0, 0), (0, 1), (3, 4096), (99_000, 1000), (0, 100_000)] {
            let mut data: Vec<u8> = vec![9; 5];
            data.reserve(n);
            read_exact_at_uninit(&file, &mut data.spare_capacity_mut()[..n], at as u64).unwrap();
            // SAFETY: the read filled `n` bytes.
            unsafe { data.set_len(5 + n) };
            assert_eq!(&data[..5], &[9; 5]);
            assert_eq!(&data[5..], &bytes[at..at + n]);
        }
        let mut data: Vec<u8> = Vec::with_capacity(10);
        let past = read_exact_at_uninit(&file, &mut data.spare_capacity_mut()[..10], 99_995);
        assert_eq!(past.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
