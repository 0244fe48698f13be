//! The embedded log: Kafka's log design on local disk.
//!
//! API SKELETON — signatures are fixed (the bindings crate is written against
//! them); bodies are being filled in. Split into submodules freely
//! (segment, index, partition, config, group, consumer, …) but keep these
//! public names and signatures.
#![allow(clippy::unused_self, clippy::needless_pass_by_value, unused_variables)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;

/// One record header; Kafka headers are a string key and nullable bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// Records to append, encoded into one contiguous buffer as they are pushed,
/// so that appending a batch is one write. Offsets are assigned on append.
#[derive(Debug, Default, Clone)]
pub struct RecordBatchBuilder {}

impl RecordBatchBuilder {
    pub fn new() -> Self {
        todo!()
    }
    pub fn with_capacity(records: usize, bytes: usize) -> Self {
        todo!()
    }
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) {
        todo!()
    }
    pub fn len(&self) -> usize {
        todo!()
    }
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    pub fn clear(&mut self) {
        todo!()
    }
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
    /// Per record; an empty Vec (no allocation) for records without headers.
    pub headers: Vec<Vec<(String, Option<Vec<u8>>)>>,
    pub data: Vec<u8>,
    /// The offset to read from next (last offset + 1, or the offset asked for when empty).
    pub next_offset: u64,
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
    /// `index.interval.bytes` (default 4096).
    pub index_interval_bytes: u32,
}

impl TopicConfig {
    pub fn new(partitions: u32) -> Self {
        todo!()
    }
    /// Sets one config by its Kafka key; unknown keys and bad values are `Error::Config`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        todo!()
    }
    /// The non-partition settings as Kafka key/value pairs.
    pub fn to_properties(&self) -> Vec<(String, String)> {
        todo!()
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

/// An open embedded log directory. Cheap to share: `open` returns the same
/// `Arc<Log>` for the same directory within one process.
#[derive(Debug)]
pub struct Log {}

impl Log {
    pub fn open(path: impl AsRef<Path>) -> Result<Arc<Log>> {
        todo!()
    }
    pub fn path(&self) -> &Path {
        todo!()
    }
    pub fn create_topic(&self, name: &str, config: TopicConfig) -> Result<()> {
        todo!()
    }
    pub fn topics(&self) -> Vec<String> {
        todo!()
    }
    pub fn topic_config(&self, topic: &str) -> Result<TopicConfig> {
        todo!()
    }
    pub fn partition_count(&self, topic: &str) -> Result<u32> {
        todo!()
    }
    /// Appends the batch to one partition; returns the offset of its first record.
    pub fn append(&self, topic: &str, partition: u32, batch: &RecordBatchBuilder) -> Result<u64> {
        todo!()
    }
    /// Reads up to `max_records` (and about `max_bytes`, at least one record)
    /// from `offset` on. Reading at the end offset returns an empty batch.
    pub fn read(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<ReadBatch> {
        todo!()
    }
    pub fn log_start_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        todo!()
    }
    pub fn end_offset(&self, topic: &str, partition: u32) -> Result<u64> {
        todo!()
    }
    /// End offsets of every partition of the topic, indexed by partition.
    pub fn end_offsets(&self, topic: &str) -> Result<Vec<u64>> {
        todo!()
    }
    /// fsyncs every partition that has appends not yet flushed.
    pub fn flush(&self) -> Result<()> {
        todo!()
    }
    /// Closes the active segment of a partition and starts a new one.
    pub fn roll(&self, topic: &str, partition: u32) -> Result<()> {
        todo!()
    }
    /// Deletes whole closed segments past `retention.ms` / `retention.bytes`
    /// of topics whose policy includes delete; returns the number deleted.
    pub fn enforce_retention(&self, now_ms: i64) -> Result<u64> {
        todo!()
    }
    /// Compacts the closed segments of a `compact` topic.
    pub fn compact(&self, topic: &str, now_ms: i64) -> Result<CompactionStats> {
        todo!()
    }
    /// Durably and atomically records a group's offsets (merged with the
    /// offsets it committed before for other partitions).
    pub fn commit_offsets(&self, group_id: &str, offsets: &[CommittedOffset]) -> Result<()> {
        todo!()
    }
    pub fn committed_offsets(&self, group_id: &str) -> Result<Vec<CommittedOffset>> {
        todo!()
    }
    /// A counter bumped by every append, for waiting on new data.
    pub fn append_sequence(&self) -> u64 {
        todo!()
    }
    /// Blocks until the append counter moves past `seen` or the timeout
    /// passes; returns the counter.
    pub fn wait_for_appends(&self, seen: u64, timeout: Duration) -> u64 {
        todo!()
    }
}

/// Records one partition returned by [`Consumer::poll`].
#[derive(Debug, Clone)]
pub struct PolledBatch {
    pub topic: String,
    pub partition: u32,
    pub batch: ReadBatch,
}

/// A consumer of a group, assigned every partition of its topics.
#[derive(Debug)]
pub struct Consumer {}

impl Consumer {
    pub fn new(
        log: Arc<Log>,
        group_id: &str,
        topics: &[String],
        reset: OffsetReset,
    ) -> Result<Self> {
        todo!()
    }
    pub fn group_id(&self) -> &str {
        todo!()
    }
    pub fn assignment(&self) -> Vec<(String, u32)> {
        todo!()
    }
    /// Up to `max_records` in total, one batch per partition that had data,
    /// partitions visited round-robin across calls; waits up to `timeout`
    /// when there is nothing to read.
    pub fn poll(&mut self, max_records: usize, timeout: Duration) -> Result<Vec<PolledBatch>> {
        todo!()
    }
    pub fn position(&self, topic: &str, partition: u32) -> Result<u64> {
        todo!()
    }
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        todo!()
    }
    /// Commits the current position of every assigned partition.
    pub fn commit(&mut self) -> Result<()> {
        todo!()
    }
    /// Commits explicit offsets (with metadata, e.g. stream time).
    pub fn commit_offsets(&mut self, offsets: &[CommittedOffset]) -> Result<()> {
        todo!()
    }
    pub fn committed(&self) -> Result<Vec<CommittedOffset>> {
        todo!()
    }
}
