//! The embedded log: Kafka's log design on local disk, so that strom apps
//! run with no broker. The on-disk format is described in `README.md` next
//! to this file.
//!
//! - [`Log`]: a directory of topics, each with partitions of segment files.
//! - [`RecordBatchBuilder`] / [`ReadBatch`]: batches in and out (columnar out).
//! - [`Consumer`]: a group member assigned every partition of its topics.

mod config;
mod consumer;
mod crc;
pub(crate) mod format;
mod group;
mod partition;
mod segment;
pub(crate) mod writeback;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fsutil::{self, DirLock, Refused, io};
use group::GroupOffsets;
use partition::{PartitionHandle, lock};

/// Partitions a flush fsyncs at once.
const FLUSH_PARALLELISM: usize = 16;

pub use consumer::{Consumer, PolledBatch};

/// One record header; Kafka headers are a string key and nullable bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// Records to append, encoded into one contiguous buffer as they are pushed,
/// so that appending a batch is one write. Offsets are assigned on append.
#[derive(Debug, Clone)]
pub struct RecordBatchBuilder {
    /// Frames with offset 0 and crc 0: both are set when they are appended
    /// (`format::seal_frames`).
    pub(crate) buf: Vec<u8>,
    count: usize,
    pub(crate) has_null_key: bool,
    pub(crate) max_timestamp: i64,
}

impl Default for RecordBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBatchBuilder {
    pub fn new() -> Self {
        RecordBatchBuilder {
            buf: Vec::new(),
            count: 0,
            has_null_key: false,
            max_timestamp: i64::MIN,
        }
    }
    /// Room for `records` records whose keys, values and headers take `bytes` in all.
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        let mut b = Self::new();
        b.buf = Vec::with_capacity(bytes.saturating_add(records.saturating_mul(format::MIN_FRAME)));
        b
    }
    /// Room for `records` more records whose keys and values take `bytes`.
    pub fn reserve(&mut self, records: usize, bytes: usize) {
        self.buf
            .reserve(bytes.saturating_add(records.saturating_mul(format::MIN_FRAME)));
    }
    /// Encodes one record.
    ///
    /// # Panics
    /// If the record would exceed the 2 GiB frame limit.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) {
        format::put_frame(&mut self.buf, timestamp, key, value, headers);
        self.count += 1;
        self.has_null_key |= key.is_none();
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }
    /// Encodes one record without headers whose value `value` writes
    /// straight into the batch's buffer (false: a null value, nothing
    /// written); returns the value's length (None: null).
    ///
    /// # Panics
    /// If the record would exceed the 2 GiB frame limit.
    pub fn push_with(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: impl FnOnce(&mut Vec<u8>) -> bool,
    ) -> Option<usize> {
        let len = format::put_frame_with(&mut self.buf, timestamp, key, value);
        self.count += 1;
        self.has_null_key |= key.is_none();
        self.max_timestamp = self.max_timestamp.max(timestamp);
        len
    }
    /// Where the batch stands, for [`RecordBatchBuilder::rewind`].
    pub fn mark(&self) -> BuilderMark {
        BuilderMark {
            len: self.buf.len(),
            count: self.count,
            has_null_key: self.has_null_key,
            max_timestamp: self.max_timestamp,
        }
    }
    /// Drops every record pushed since `mark` was taken.
    pub fn rewind(&mut self, mark: BuilderMark) {
        debug_assert!(mark.len <= self.buf.len() && mark.count <= self.count);
        self.buf.truncate(mark.len);
        self.count = mark.count;
        self.has_null_key = mark.has_null_key;
        self.max_timestamp = mark.max_timestamp;
    }
    pub fn len(&self) -> usize {
        self.count
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Encoded size: the bytes the batch adds to the log.
    pub fn size_in_bytes(&self) -> usize {
        self.buf.len()
    }
    /// The bytes its buffer holds without growing.
    pub fn capacity_in_bytes(&self) -> usize {
        self.buf.capacity()
    }
    /// Empties the builder, keeping its buffer for reuse.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
        self.has_null_key = false;
        self.max_timestamp = i64::MIN;
    }
}

/// A [`RecordBatchBuilder`]'s state at some point ([`RecordBatchBuilder::mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuilderMark {
    len: usize,
    count: usize,
    has_null_key: bool,
    max_timestamp: i64,
}

/// A byte range inside [`ReadBatch::data`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

/// Records read from one partition, columnar: record `i` has `offsets[i]`,
/// `timestamps[i]`, key bytes `data[keys[i]]` (None = null key), and so on.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    pub offsets: Vec<u64>,
    pub timestamps: Vec<i64>,
    pub keys: Vec<Option<Span>>,
    pub values: Vec<Option<Span>>,
    /// Per record up to the last one that has headers (so empty when none
    /// has, as is usual: a column of empty Vecs cost a write of 24 bytes
    /// per record); read with [`ReadBatch::headers`], add with
    /// [`ReadBatch::push_headers`].
    pub headers: Vec<Vec<(String, Option<Vec<u8>>)>>,
    pub data: Vec<u8>,
    /// The offset to read from next (last offset + 1, or the offset asked for when empty).
    pub next_offset: u64,
    /// `data` holds the records' whole frames as the embedded log stores
    /// them (a read of the log), not only their keys and values.
    pub log_frames: bool,
}

impl ReadBatch {
    pub fn len(&self) -> usize {
        self.offsets.len()
    }
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }
    pub fn key(&self, i: usize) -> Option<&[u8]> {
        self.keys[i].map(|s| &self.data[s.start..s.start + s.len])
    }
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        self.values[i].map(|s| &self.data[s.start..s.start + s.len])
    }
    /// Record `i`'s headers (none for most records).
    pub fn headers(&self, i: usize) -> &[(String, Option<Vec<u8>>)] {
        self.headers.get(i).map_or(&[], Vec::as_slice)
    }
    /// Sets the headers of the record just pushed (the last of `offsets`).
    pub fn push_headers(&mut self, headers: Vec<(String, Option<Vec<u8>>)>) {
        if !headers.is_empty() {
            let i = self.offsets.len() - 1;
            self.headers.resize_with(i, Vec::new);
            self.headers.push(headers);
        }
    }
}

/// `cleanup.policy`: `delete`, `compact`, or both (`compact,delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

/// Topic configuration with Kafka's keys. Defaults are Kafka's, except
/// `retention.ms`, which is -1 (keep forever) in the embedded log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    pub partitions: u32,
    /// `segment.bytes` (default 1 GiB).
    pub segment_bytes: u64,
    /// `segment.ms`; None = never roll on time.
    pub segment_ms: Option<i64>,
    /// `retention.ms`; None = -1 = unlimited.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`; None = -1 = unlimited.
    pub retention_bytes: Option<u64>,
    pub cleanup_policy: CleanupPolicy,
    /// `delete.retention.ms` (default 1 day).
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms` (default 0): records newer than this are
    /// not compacted (and shadow nothing yet).
    pub min_compaction_lag_ms: i64,
    /// `index.interval.bytes` (default 4096).
    pub index_interval_bytes: u32,
}

impl TopicConfig {
    pub fn new(partitions: u32) -> Self {
        config::new_config(partitions)
    }
    /// Sets one config by its Kafka key; unknown keys and bad values are `Error::Config`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        config::set(self, key, value)
    }
    /// The non-partition settings as Kafka key/value pairs.
    pub fn to_properties(&self) -> Vec<(String, String)> {
        config::to_properties(self)
    }
}

/// A consumer group's committed position for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub metadata: String,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    #[default]
    Earliest,
    Latest,
    /// No reset: a missing or out-of-range position is an error.
    None,
}

/// Result of one compaction pass over a topic.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CompactionStats {
    pub segments_cleaned: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
}

const TOPICS_DIR: &str = ".topics";
/// Short enough that a 249-character topic name still fits a file name.
const TOPIC_SUFFIX: &str = ".conf";
/// How long `open` waits for a handle of this process that is being dropped
/// (or a spawning child's copy of it) to release the lock file.
const SELF_LOCK_WAIT: Duration = Duration::from_secs(10);

/// Open logs of this process by canonical path: flock would conflict with
/// itself, and handles of one process are meant to share one log.
static REGISTRY: Mutex<BTreeMap<PathBuf, Weak<Log>>> = Mutex::new(BTreeMap::new());

struct Topic {
    name: Arc<str>,
    config: Arc<TopicConfig>,
    partitions: Vec<PartitionHandle>,
}

impl Topic {
    fn partition(&self, partition: u32) -> Result<&PartitionHandle> {
        self.partitions
            .get(partition as usize)
            .ok_or_else(|| Error::UnknownPartition {
                topic: self.name.to_string(),
                partition,
                count: self.partitions.len() as u32,
            })
    }
}

/// An open embedded log directory. Cheap to share: `open` returns the same
/// `Arc<Log>` for the same directory within one process.
pub struct Log {
    root: PathBuf,
    /// Held while the log is open; released in `drop`.
    lock: Option<DirLock>,
    /// In `REGISTRY` (a log that failed to open never is).
    registered: bool,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    groups: Mutex<HashMap<String, Arc<Mutex<Option<GroupOffsets>>>>>,
    append_seq: AtomicU64,
    waiters: AtomicUsize,
    seq_lock: Mutex<()>,
    seq_cond: Condvar,
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Log {
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Log>> {
        let path = path.as_ref();
        io(path, fs::create_dir_all(path))?;
        let root = io(path, fs::canonicalize(path))?;
        let deadline = Instant::now() + SELF_LOCK_WAIT;
        loop {
            let mut registry = lock(&REGISTRY);
            registry.retain(|_, log| log.strong_count() > 0);
            if let Some(log) = registry.get(&root).and_then(Weak::upgrade) {
                return Ok(log);
            }
            match Self::open_new(&root) {
                Ok(mut log) => {
                    log.registered = true;
                    let log = Arc::new(log);
                    registry.insert(root, Arc::downgrade(&log));
                    return Ok(log);
                }
                // Not waited for inside `acquire`: the handle being dropped
                // needs the registry to release its lock.
                Err(Refused::ThisProcess) if Instant::now() < deadline => {
                    drop(registry);
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(Refused::Io(e)) => return Err(e),
                Err(refused) => {
                    return Err(Error::LogInUse {
                        path: root,
                        holder: refused.holder(),
                    });
                }
            }
        }
    }

    fn open_new(root: &Path) -> std::result::Result<Log, Refused> {
        let lock = DirLock::acquire(root, Duration::ZERO)?;
        let log = Log {
            root: root.to_path_buf(),
            lock: Some(lock),
            registered: false,
            topics: RwLock::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
            append_seq: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            seq_lock: Mutex::new(()),
            seq_cond: Condvar::new(),
        };
        log.load().map_err(Refused::Io)?;
        Ok(log)
    }

    /// Recovers every topic listed in `.topics/`.
    fn load(&self) -> Result<()> {
        let topics_dir = self.root.join(TOPICS_DIR);
        let groups_dir = self.root.join(group::GROUPS_DIR);
        for dir in [&topics_dir, &groups_dir] {
            io(dir, fs::create_dir_all(dir))?;
            fsutil::remove_tmp_files(dir)?;
        }
        let mut topics = self
            .topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for entry in io(&topics_dir, fs::read_dir(&topics_dir))? {
            let path = io(&topics_dir, entry)?.path();
            let Some(name) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(TOPIC_SUFFIX))
            else {
                continue;
            };
            if config::validate_topic_name(name).is_err() {
                ::log::warn!("ignoring {}: not a valid topic name", path.display());
                continue;
            }
            let text = io(&path, fs::read_to_string(&path))?;
            let config = config::parse_topic_file(&path, &text)?;
            let topic = self.open_topic(name, config)?;
            topics.insert(name.to_owned(), Arc::new(topic));
        }
        Ok(())
    }

    fn open_topic(&self, name: &str, config: TopicConfig) -> Result<Topic> {
        let name: Arc<str> = name.into();
        let config = Arc::new(config);
        let partitions = (0..config.partitions)
            .map(|p| PartitionHandle::open(&self.root, &name, p, &config))
            .collect::<Result<Vec<_>>>()?;
        Ok(Topic {
            name,
            config,
            partitions,
        })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
            .ok_or_else(|| Error::UnknownTopic(name.to_owned()))
    }

    fn all_topics(&self) -> Vec<Arc<Topic>> {
        self.topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Creates the topic's partition directories, then writes its metadata
    /// file atomically: the topic exists once that file does.
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<()> {
        config::validate_topic_name(name)?;
        config::validate(&config)?;
        let mut topics = self
            .topics
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if topics.contains_key(name) {
            return Err(Error::TopicExists(name.to_owned()));
        }
        let text = config::render_topic_file(&config);
        for p in 0..config.partitions {
            self.remove_partition_dir(name, p)?;
        }
        let topic = self.open_topic(name, config)?;
        for p in 0..topic.config.partitions {
            fsutil::sync_dir(&self.root.join(partition::segment_dir_name(name, p)))?;
        }
        fsutil::sync_dir(&self.root)?;
        let path = self
            .root
            .join(TOPICS_DIR)
            .join(format!("{name}{TOPIC_SUFFIX}"));
        fsutil::write_atomic(&path, text.as_bytes())?;
        topics.insert(name.to_owned(), Arc::new(topic));
        Ok(())
    }

    /// Deletes a topic, as Kafka's `deleteTopics` does: its metadata file
    /// goes first (from then on the topic is gone, also after a crash), then
    /// its partition directories, then every group's committed offsets for it
    /// (Kafka's group coordinator drops the offsets of a deleted topic too).
    /// Handles that still read or write it get `UnknownTopic`.
    pub fn delete_topic(&self, name: &str) -> Result<()> {
        let topic = {
            let mut topics = self
                .topics
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let topic = topics
                .get(name)
                .cloned()
                .ok_or_else(|| Error::UnknownTopic(name.to_owned()))?;
            let topics_dir = self.root.join(TOPICS_DIR);
            let path = topics_dir.join(format!("{name}{TOPIC_SUFFIX}"));
            io(&path, fs::remove_file(&path))?;
            fsutil::sync_dir(&topics_dir)?;
            topics.remove(name);
            topic
        };
        for p in 0..topic.partitions.len() as u32 {
            self.remove_partition_dir(name, p)?;
        }
        fsutil::sync_dir(&self.root)?;
        self.forget_offsets(name)
    }

    /// Removes a partition directory of a topic that no longer exists (or is
    /// about to be created again: a delete interrupted by a crash leaves them).
    fn remove_partition_dir(&self, topic: &str, partition: u32) -> Result<()> {
        let dir = self
            .root
            .join(partition::segment_dir_name(topic, partition));
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&dir, e)),
            _ => Ok(()),
        }
    }

    /// Drops every group's committed offsets for `topic`.
    fn forget_offsets(&self, topic: &str) -> Result<()> {
        let dir = self.root.join(group::GROUPS_DIR);
        for entry in io(&dir, fs::read_dir(&dir))? {
            let path = io(&dir, entry)?.path();
            let is_group_file = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(group::OFFSETS_SUFFIX));
            if !is_group_file {
                continue;
            }
            let group_id = group::stored_group_id(&path, &io(&path, fs::read(&path))?)?;
            let slot = self.group_slot(&group_id);
            let mut slot = lock(&slot);
            let offsets = self.load_group(&group_id, &mut slot)?;
            if !offsets.keys().any(|(t, _)| t == topic) {
                continue;
            }
            let mut kept = offsets.clone();
            kept.retain(|(t, _), _| t != topic);
            fsutil::write_atomic(
                &self.group_path(&group_id),
                &group::encode(&group_id, &kept),
            )?;
            *slot = Some(kept);
        }
        Ok(())
    }

    pub fn topics(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .topics
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        names.sort_unstable();
        names
    }

    pub fn topic_config(&self, topic: &str) -> Result<TopicConfig> {
        Ok(TopicConfig::clone(&self.topic(topic)?.config))
    }

    pub fn partition_count(&self, topic: &str) -> Result<u32> {
        Ok(self.topic(topic)?.partitions.len() as u32)
    }

    /// Appends the batch to one partition; returns the offset of its first record.
    pub fn append(&self, topic: &str, partition: u32, batch: &RecordBatchBuilder) -> Result<u64> {
        let t = self.topic(topic)?;
        let first = lock(&t.partition(partition)?.state).append(batch)?;
        if !batch.is_empty() {
            self.bump_append_sequence();
        }
        Ok(first)
    }

    /// `append` that finishes the frames in the batch's own buffer instead
    /// of a copy, and leaves the batch empty (its buffer kept for reuse).
    pub fn append_and_clear(
        &self,
        topic: &str,
        partition: u32,
        batch: &mut RecordBatchBuilder,
    ) -> Result<u64> {
        let t = self.topic(topic)?;
        let appended = !batch.is_empty();
        let first = lock(&t.partition(partition)?.state).append_and_clear(batch)?;
        if appended {
            self.bump_append_sequence();
        }
        Ok(first)
    }

    /// Reads up to `max_records` (and about `max_bytes`, at least one record)
    /// from `offset` on. Reading at the end offset returns an empty batch.
    ///
    /// `next_offset` is past the last record returned; when the read reached
    /// the log end it is the end offset (compaction may leave offsets with
    /// no record before it).
    pub fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<ReadBatch> {
        self.topic(topic)?
            .partition(partition)?
            .read(offset, max_records, max_bytes)
    }

    /// The offset of the first record of a partition whose timestamp is at
    /// least `timestamp`, or None when there is none (a consumer resetting
    /// by time then starts at the end, as Kafka's does).
    pub fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: u32,
        timestamp: i64,
    ) -> Result<Option<u64>> {
        self.topic(topic)?
            .partition(partition)?
            .offset_for_timestamp(timestamp)
    }

    pub fn log_start_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        Ok(lock(&self.topic(topic)?.partition(partition)?.state).log_start_offset())
    }

    pub fn end_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        Ok(lock(&self.topic(topic)?.partition(partition)?.state).end_offset())
    }

    /// End offsets of every partition of the topic, indexed by partition.
    pub fn end_offsets(&self, topic: &str) -> Result<Vec<u64>> {
        Ok(self
            .topic(topic)?
            .partitions
            .iter()
            .map(|p| lock(&p.state).end_offset())
            .collect())
    }

    /// fsyncs every partition that has appends not yet flushed, several at
    /// once: an fsync mostly waits on the device, and a commit of an app
    /// with a few topics' partitions paid each wait in turn.
    pub fn flush(&self) -> Result<()> {
        let topics = self.all_topics();
        let dirty: Vec<&PartitionHandle> = topics
            .iter()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.needs_flush())
            .collect();
        let mut first_error = None;
        for wave in dirty.chunks(FLUSH_PARALLELISM) {
            let results: Vec<Result<()>> = std::thread::scope(|s| {
                // A partition no thread could be started for is flushed here.
                let started: Vec<_> = wave
                    .iter()
                    .map(|p| {
                        let thread = (wave.len() > 1)
                            .then(|| std::thread::Builder::new().spawn_scoped(s, || p.flush()))
                            .and_then(std::io::Result::ok);
                        (p, thread)
                    })
                    .collect();
                started
                    .into_iter()
                    .map(|(p, thread)| match thread {
                        Some(t) => t.join().expect("a flush does not panic"),
                        None => p.flush(),
                    })
                    .collect()
            });
            for result in results {
                if let Err(e) = result {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Closes the active segment of a partition and starts a new one.
    /// A no-op while the active segment is empty.
    pub fn roll(&self, topic: &str, partition: u32) -> Result<()> {
        lock(&self.topic(topic)?.partition(partition)?.state).roll()
    }

    /// Deletes whole closed segments past `retention.ms` / `retention.bytes`
    /// of topics whose policy includes delete; returns the number deleted.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<u64> {
        let mut deleted = 0;
        for topic in self.all_topics() {
            if !topic.config.cleanup_policy.delete {
                continue;
            }
            for p in &topic.partitions {
                deleted += p.enforce_retention(now_ms)?;
            }
        }
        Ok(deleted)
    }

    /// Compacts the closed segments of a `compact` topic; a topic without
    /// `compact` in its `cleanup.policy` is an `Error::Config`.
    pub fn compact(&self, topic: &str, now_ms: i64) -> Result<CompactionStats> {
        let t = self.topic(topic)?;
        if !t.config.cleanup_policy.compact {
            return Err(Error::Config(format!(
                "topic '{topic}' has cleanup.policy=delete; only compacted topics can be compacted"
            )));
        }
        let mut total = CompactionStats::default();
        for p in &t.partitions {
            let s = p.compact(now_ms)?;
            total.segments_cleaned += s.segments_cleaned;
            total.records_removed += s.records_removed;
            total.tombstones_removed += s.tombstones_removed;
        }
        Ok(total)
    }

    fn group_slot(&self, group_id: &str) -> Arc<Mutex<Option<GroupOffsets>>> {
        Arc::clone(lock(&self.groups).entry(group_id.to_owned()).or_default())
    }

    fn group_path(&self, group_id: &str) -> PathBuf {
        self.root
            .join(group::GROUPS_DIR)
            .join(group::file_name(group_id))
    }

    /// The group's offsets, read from disk on first use.
    fn load_group<'a>(
        &self,
        group_id: &str,
        slot: &'a mut Option<GroupOffsets>,
    ) -> Result<&'a mut GroupOffsets> {
        if slot.is_none() {
            let path = self.group_path(group_id);
            let offsets = match fs::read(&path) {
                Ok(bytes) => group::decode(&path, &bytes, group_id)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => GroupOffsets::new(),
                Err(e) => return Err(Error::io(&path, e)),
            };
            *slot = Some(offsets);
        }
        Ok(slot.as_mut().expect("loaded above"))
    }

    /// Durably and atomically records a group's offsets (merged with the
    /// offsets it committed before for other partitions). Offsets equal to
    /// the committed ones are not written again.
    pub fn commit_offsets(&self, group_id: &str, offsets: &[CommittedOffset]) -> Result<()> {
        if group_id.is_empty() {
            return Err(Error::Config(
                "committing offsets needs a non-empty group id".into(),
            ));
        }
        for o in offsets {
            self.topic(&o.topic)?.partition(o.partition)?;
        }
        let slot = self.group_slot(group_id);
        let mut slot = lock(&slot);
        let current = self.load_group(group_id, &mut slot)?;
        // What the file already holds is durable: a commit that changes
        // nothing (a bounded run's last commits) costs no fsync.
        let unchanged = offsets.iter().all(|o| {
            current
                .get(&(o.topic.clone(), o.partition))
                .is_some_and(|(offset, metadata)| *offset == o.offset && *metadata == o.metadata)
        });
        if unchanged {
            return Ok(());
        }
        let mut merged = current.clone();
        for o in offsets {
            merged.insert(
                (o.topic.clone(), o.partition),
                (o.offset, o.metadata.clone()),
            );
        }
        fsutil::write_atomic(
            &self.group_path(group_id),
            &group::encode(group_id, &merged),
        )?;
        *slot = Some(merged);
        Ok(())
    }

    /// The group's committed offsets sorted by topic and partition; empty
    /// for a group that never committed.
    pub fn committed_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        let slot = self.group_slot(group_id);
        let mut slot = lock(&slot);
        Ok(group::to_committed(self.load_group(group_id, &mut slot)?))
    }

    fn bump_append_sequence(&self) {
        self.append_seq.fetch_add(1, Ordering::SeqCst);
        // Waiters register before they check the counter, so either they see
        // the new value or this sees them (both orders are SeqCst).
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.seq_lock);
            self.seq_cond.notify_all();
        }
    }

    /// A counter bumped by every append, for waiting on new data.
    pub fn append_sequence(&self) -> u64 {
        self.append_seq.load(Ordering::SeqCst)
    }

    /// Blocks until the append counter moves past `seen` or the timeout
    /// passes; returns the counter.
    pub fn wait_for_appends(&self, seen: u64, timeout: Duration) -> u64 {
        let current = self.append_sequence();
        if current > seen || timeout.is_zero() {
            return current;
        }
        let deadline = Instant::now().checked_add(timeout);
        let mut guard = lock(&self.seq_lock);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let result = loop {
            let current = self.append_sequence();
            if current > seen {
                break current;
            }
            let now = Instant::now();
            let wait = match deadline {
                Some(d) if d <= now => break current,
                Some(d) => d - now,
                None => Duration::from_secs(3600),
            };
            guard = self
                .seq_cond
                .wait_timeout(guard, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        drop(guard);
        result
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            ::log::warn!(
                "flushing embedded log {} on close: {e}",
                self.root.display()
            );
        } else {
            for topic in self.all_topics() {
                for p in &topic.partitions {
                    if let Err(e) = p.mark_clean() {
                        // An optimization only: the next open scans instead.
                        ::log::debug!("marking {} closed cleanly: {e}", self.root.display());
                    }
                }
            }
        }
        if !self.registered {
            // `open` failed and holds the registry.
            return;
        }
        // Release the lock file while holding the registry, so that `open`
        // never sees this log gone from the registry but its lock still held
        // for longer than this.
        let mut registry = lock(&REGISTRY);
        self.lock = None;
        let me: *const Log = self;
        if registry
            .get(&self.root)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), me))
        {
            registry.remove(&self.root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One flush makes every partition of every topic with appends durable
    /// (several at once), and leaves nothing to flush.
    #[test]
    fn a_flush_covers_every_partition_with_appends() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path()).unwrap();
        for name in ["a", "b", "c"] {
            log.create_topic(name, TopicConfig::new(7)).unwrap();
        }
        log.flush().unwrap();
        let mut batch = RecordBatchBuilder::new();
        batch.push(1, Some(b"k"), Some(b"v"), &[]);
        for (name, partition) in [("a", 0), ("a", 6), ("b", 3), ("c", 1), ("c", 2)] {
            log.append(name, partition, &batch).unwrap();
        }
        let dirty = |log: &Log| {
            log.all_topics()
                .iter()
                .map(|t| t.partitions.iter().filter(|p| p.needs_flush()).count())
                .sum::<usize>()
        };
        assert_eq!(dirty(&log), 5);
        log.flush().unwrap();
        assert_eq!(dirty(&log), 0);
    }
}
