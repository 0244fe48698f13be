//! The embedded log's native classes: `NativeLog`, `NativeProducer`,
//! `NativeConsumer`, and the records they return (`RecordBatch`, `ConsumedRecord`).
//!
//! Batches cross the boundary, not records: a produce call copies the bytes out
//! of Python into a `RecordBatchBuilder` while attached; appends, reads, fsyncs
//! and polls run detached from the interpreter. Every call into the core is
//! detached, not only the slow ones: the core logs through `pyo3_log`, which
//! attaches, so a thread that waited on a core lock while attached could
//! deadlock with a thread logging under that lock.

use std::collections::HashMap;
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyDict, PyList, PySequence, PyString};

use strom_core::Error;
use strom_core::expr::pipeline::FrameSink;
use strom_core::log::{
    CommittedOffset, Consumer, Header, Log, OffsetReset, PolledBatch, ReadBatch,
    RecordBatchBuilder, Span, TopicConfig,
};
use strom_core::serde::partitioner;

use crate::errors::{IntoPyResult, new_error, to_py_err};
use crate::expr::ExprPipeline;

/// A producer appends a partition's buffer once it holds this much.
const APPEND_THRESHOLD_BYTES: usize = 1 << 20;
/// Per-record framing the builder adds on top of key, value and headers (an estimate).
const RECORD_OVERHEAD_BYTES: usize = 24;
/// `read` stops after about this much unless told otherwise (it always returns
/// at least one record, so a larger record still comes through).
const DEFAULT_READ_MAX_BYTES: usize = 64 << 20;
/// A blocking poll wakes this often to let Ctrl-C through.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);

type OwnedHeaders = Vec<(String, Option<Vec<u8>>)>;
type OffsetTuple = (String, u32, u64, String);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Locks a mutex whose data stays consistent even if a holder panicked
/// (every critical section leaves it valid).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn headers_list<'py>(
    py: Python<'py>,
    headers: &[(String, Option<Vec<u8>>)],
) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref().map(|v| PyBytes::new(py, v)))),
    )
}

// --- records ------------------------------------------------------------------

/// One record as a consumer sees it. Immutable; equal when every field is.
#[pyclass(module = "strom._core", frozen)]
pub struct ConsumedRecord {
    topic: Py<PyString>,
    partition: u32,
    offset: u64,
    timestamp: i64,
    key: Option<Py<PyBytes>>,
    value: Option<Py<PyBytes>>,
    // Kept as Rust data: the getter hands out a fresh list, so a frozen
    // record never exposes a mutable one (and records without headers cost nothing).
    headers: OwnedHeaders,
}

fn opt_bytes_eq(py: Python<'_>, a: Option<&Py<PyBytes>>, b: Option<&Py<PyBytes>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.as_bytes(py) == b.as_bytes(py),
        _ => false,
    }
}

#[pymethods]
impl ConsumedRecord {
    #[new]
    #[pyo3(signature = (topic, partition, offset, timestamp, key, value, headers=None))]
    fn new(
        topic: Py<PyString>,
        partition: u32,
        offset: u64,
        timestamp: i64,
        key: Option<Py<PyBytes>>,
        value: Option<Py<PyBytes>>,
        headers: Option<OwnedHeaders>,
    ) -> Self {
        Self {
            topic,
            partition,
            offset,
            timestamp,
            key,
            value,
            headers: headers.unwrap_or_default(),
        }
    }

    #[getter]
    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    #[getter]
    fn partition(&self) -> u32 {
        self.partition
    }
    #[getter]
    fn offset(&self) -> u64 {
        self.offset
    }
    #[getter]
    fn timestamp(&self) -> i64 {
        self.timestamp
    }
    #[getter]
    fn key(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.key.as_ref().map(|k| k.clone_ref(py))
    }
    #[getter]
    fn value(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.value.as_ref().map(|v| v.clone_ref(py))
    }
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        headers_list(py, &self.headers)
    }

    fn __eq__(&self, py: Python<'_>, other: &Self) -> PyResult<bool> {
        Ok(self.partition == other.partition
            && self.offset == other.offset
            && self.timestamp == other.timestamp
            && self.topic.bind(py).to_str()? == other.topic.bind(py).to_str()?
            && opt_bytes_eq(py, self.key.as_ref(), other.key.as_ref())
            && opt_bytes_eq(py, self.value.as_ref(), other.value.as_ref())
            && self.headers == other.headers)
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<u64> {
        // A subset of the fields `__eq__` compares, so equal records hash equal.
        let mut h = DefaultHasher::new();
        self.topic.bind(py).to_str()?.hash(&mut h);
        self.partition.hash(&mut h);
        self.offset.hash(&mut h);
        Ok(h.finish())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let key = self.key.as_ref().map(|k| k.bind(py).clone());
        let value = self.value.as_ref().map(|v| v.bind(py).clone());
        Ok(format!(
            "ConsumedRecord(topic={}, partition={}, offset={}, timestamp={}, key={}, value={}, headers={})",
            self.topic.bind(py).repr()?,
            self.partition,
            self.offset,
            self.timestamp,
            key.into_pyobject(py)?.repr()?,
            value.into_pyobject(py)?.repr()?,
            headers_list(py, &self.headers)?.repr()?,
        ))
    }
}

fn span_bytes<'py>(
    py: Python<'py>,
    data: &[u8],
    span: Option<Span>,
) -> Option<Bound<'py, PyBytes>> {
    span.map(|s| PyBytes::new(py, &data[s.start..s.start + s.len]))
}

/// Batches at least this large pause the cyclic GC while their objects are built.
const GC_PAUSE_MIN_OBJECTS: usize = 256;

/// Pauses Python's cyclic garbage collector while a batch of container
/// objects is built (pyclass instances are GC-tracked): otherwise every 700
/// allocations start a collection that traverses everything built so far,
/// which cost a third of `read()`. No Python code runs while it is paused.
struct GcPause<'py> {
    gc: Option<Bound<'py, PyModule>>,
}

impl<'py> GcPause<'py> {
    fn new(py: Python<'py>, objects: usize) -> PyResult<Self> {
        if objects >= GC_PAUSE_MIN_OBJECTS {
            let gc = py.import("gc")?;
            if gc.call_method0("isenabled")?.is_truthy()? {
                gc.call_method0("disable")?;
                return Ok(Self { gc: Some(gc) });
            }
        }
        Ok(Self { gc: None })
    }
}

impl Drop for GcPause<'_> {
    fn drop(&mut self) {
        if let Some(gc) = &self.gc
            && let Err(e) = gc.call_method0("enable")
        {
            e.write_unraisable(gc.py(), None);
        }
    }
}

/// `ConsumedRecord`s for a whole batch; `headers` hands over record `i`'s headers.
fn records_of(
    py: Python<'_>,
    topic: &Bound<'_, PyString>,
    partition: u32,
    batch: &ReadBatch,
    mut headers: impl FnMut(usize) -> OwnedHeaders,
    out: &Bound<'_, PyList>,
) -> PyResult<()> {
    let _pause = GcPause::new(py, batch.len())?;
    for i in 0..batch.len() {
        let record = ConsumedRecord {
            topic: topic.clone().unbind(),
            partition,
            offset: batch.offsets[i],
            timestamp: batch.timestamps[i],
            key: span_bytes(py, &batch.data, batch.keys[i]).map(Bound::unbind),
            value: span_bytes(py, &batch.data, batch.values[i]).map(Bound::unbind),
            headers: headers(i),
        };
        out.append(Py::new(py, record)?)?;
    }
    Ok(())
}

/// Records of one partition, columnar; the columns become Python lists only
/// when asked for, one call per column.
#[pyclass(module = "strom._core", frozen)]
pub struct RecordBatch {
    pub(crate) topic: Py<PyString>,
    pub(crate) partition: u32,
    pub(crate) batch: ReadBatch,
}

impl RecordBatch {
    fn bytes_column<'py>(
        &self,
        py: Python<'py>,
        spans: &[Option<Span>],
    ) -> PyResult<Bound<'py, PyList>> {
        let data = &self.batch.data;
        PyList::new(py, spans.iter().map(|s| span_bytes(py, data, *s)))
    }
}

#[pymethods]
impl RecordBatch {
    #[getter]
    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    #[getter]
    fn partition(&self) -> u32 {
        self.partition
    }
    #[getter]
    fn next_offset(&self) -> u64 {
        self.batch.next_offset
    }
    fn __len__(&self) -> usize {
        self.batch.len()
    }
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.batch.offsets)
    }
    fn timestamps<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.batch.timestamps)
    }
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.bytes_column(py, &self.batch.keys)
    }
    fn values<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.bytes_column(py, &self.batch.values)
    }
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let _pause = GcPause::new(py, self.batch.len())?;
        let out = PyList::empty(py);
        for i in 0..self.batch.len() {
            out.append(headers_list(py, self.batch.headers(i))?)?;
        }
        Ok(out)
    }
    /// Whether any record of the batch has at least one header.
    fn has_headers(&self) -> bool {
        self.batch.headers.iter().any(|h| !h.is_empty())
    }
    fn records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        let batch = &self.batch;
        records_of(
            py,
            self.topic.bind(py),
            self.partition,
            batch,
            |i| batch.headers(i).to_vec(),
            &out,
        )?;
        Ok(out)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let b = &self.batch;
        let range = match (b.offsets.first(), b.offsets.last()) {
            (Some(first), Some(last)) => format!("offsets {first}..={last}"),
            _ => "empty".to_owned(),
        };
        Ok(format!(
            "RecordBatch(topic={}, partition={}, {} record(s), {range}, next_offset={})",
            self.topic.bind(py).repr()?,
            self.partition,
            b.len(),
            b.next_offset
        ))
    }
}

pub(crate) fn record_batch(py: Python<'_>, polled: PolledBatch) -> RecordBatch {
    RecordBatch {
        topic: PyString::new(py, &polled.topic).unbind(),
        partition: polled.partition,
        batch: polled.batch,
    }
}

// --- the log --------------------------------------------------------------------

/// An open embedded log directory (shared by every handle in the process).
#[pyclass(module = "strom._core", frozen)]
pub struct NativeLog {
    pub(crate) log: Arc<Log>,
}

#[pymethods]
impl NativeLog {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        // Opening recovers the active segments, which can take a while.
        let log = py.detach(move || Log::open(path)).py_err(py)?;
        Ok(Self { log })
    }

    #[getter]
    fn path(&self) -> String {
        self.log.path().display().to_string()
    }

    #[pyo3(signature = (name, partitions, config))]
    fn create_topic(
        &self,
        py: Python<'_>,
        name: &str,
        partitions: u32,
        config: Option<HashMap<String, String>>,
    ) -> PyResult<()> {
        py.detach(move || {
            let mut topic_config = TopicConfig::new(partitions);
            // Sorted so that the first bad key reported does not depend on hashing.
            let mut entries: Vec<_> = config.into_iter().flatten().collect();
            entries.sort();
            for (key, value) in entries {
                topic_config.set(&key, &value)?;
            }
            self.log.create_topic(name, topic_config)
        })
        .py_err(py)
    }

    fn delete_topic(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        py.detach(|| self.log.delete_topic(name)).py_err(py)
    }

    fn topics(&self, py: Python<'_>) -> Vec<String> {
        py.detach(|| self.log.topics())
    }

    fn partitions(&self, py: Python<'_>, topic: &str) -> PyResult<u32> {
        py.detach(|| self.log.partition_count(topic)).py_err(py)
    }

    fn topic_config<'py>(&self, py: Python<'py>, topic: &str) -> PyResult<Bound<'py, PyDict>> {
        let config = py.detach(|| self.log.topic_config(topic)).py_err(py)?;
        let out = PyDict::new(py);
        for (key, value) in config.to_properties() {
            out.set_item(key, value)?;
        }
        Ok(out)
    }

    fn end_offsets(&self, py: Python<'_>, topic: &str) -> PyResult<Vec<u64>> {
        py.detach(|| self.log.end_offsets(topic)).py_err(py)
    }

    fn log_start_offsets(&self, py: Python<'_>, topic: &str) -> PyResult<Vec<u64>> {
        py.detach(|| {
            (0..self.log.partition_count(topic)?)
                .map(|p| self.log.log_start_offset(topic, p))
                .collect::<strom_core::Result<Vec<_>>>()
        })
        .py_err(py)
    }

    /// Per partition of `topic`, the offset of its first record whose
    /// timestamp is at least `timestamp`, or None.
    fn offsets_for_timestamp(
        &self,
        py: Python<'_>,
        topic: &str,
        timestamp: i64,
    ) -> PyResult<Vec<Option<u64>>> {
        py.detach(|| {
            (0..self.log.partition_count(topic)?)
                .map(|p| self.log.offset_for_timestamp(topic, p, timestamp))
                .collect::<strom_core::Result<Vec<_>>>()
        })
        .py_err(py)
    }

    #[pyo3(signature = (topic, partition, offset, max_records, max_bytes=DEFAULT_READ_MAX_BYTES))]
    fn read(
        &self,
        py: Python<'_>,
        topic: &Bound<'_, PyString>,
        partition: u32,
        offset: u64,
        max_records: usize,
        max_bytes: usize,
    ) -> PyResult<RecordBatch> {
        let name = topic.to_str()?;
        let batch = py
            .detach(|| {
                self.log
                    .read(name, partition, offset, max_records, max_bytes)
            })
            .py_err(py)?;
        Ok(RecordBatch {
            topic: topic.clone().unbind(),
            partition,
            batch,
        })
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.log.flush()).py_err(py)
    }

    fn roll(&self, py: Python<'_>, topic: &str, partition: u32) -> PyResult<()> {
        py.detach(|| self.log.roll(topic, partition)).py_err(py)
    }

    fn enforce_retention(&self, py: Python<'_>, now_ms: i64) -> PyResult<u64> {
        py.detach(|| self.log.enforce_retention(now_ms)).py_err(py)
    }

    /// Returns `(segments_cleaned, records_removed, tombstones_removed)`.
    fn compact(&self, py: Python<'_>, topic: &str, now_ms: i64) -> PyResult<(u64, u64, u64)> {
        let stats = py.detach(|| self.log.compact(topic, now_ms)).py_err(py)?;
        Ok((
            stats.segments_cleaned,
            stats.records_removed,
            stats.tombstones_removed,
        ))
    }

    fn commit_offsets(
        &self,
        py: Python<'_>,
        group_id: &str,
        offsets: Vec<OffsetTuple>,
    ) -> PyResult<()> {
        let offsets = to_committed(offsets);
        py.detach(|| self.log.commit_offsets(group_id, &offsets))
            .py_err(py)
    }

    fn committed_offsets(&self, py: Python<'_>, group_id: &str) -> PyResult<Vec<OffsetTuple>> {
        let offsets = py
            .detach(|| self.log.committed_offsets(group_id))
            .py_err(py)?;
        Ok(from_committed(offsets))
    }

    fn __repr__(&self) -> String {
        format!("NativeLog({:?})", self.log.path().display().to_string())
    }
}

fn to_committed(offsets: Vec<OffsetTuple>) -> Vec<CommittedOffset> {
    offsets
        .into_iter()
        .map(|(topic, partition, offset, metadata)| CommittedOffset {
            topic,
            partition,
            offset,
            metadata,
        })
        .collect()
}

fn from_committed(offsets: Vec<CommittedOffset>) -> Vec<OffsetTuple> {
    offsets
        .into_iter()
        .map(|c| (c.topic, c.partition, c.offset, c.metadata))
        .collect()
}

// --- the producer -----------------------------------------------------------------

#[derive(Default)]
pub(crate) struct PartitionBuffer {
    pub(crate) builder: RecordBatchBuilder,
    bytes: usize,
}

pub(crate) struct TopicBuffers {
    pub(crate) partitions: Vec<PartitionBuffer>,
    /// Next partition for a record with a null key.
    round_robin: u32,
}

impl TopicBuffers {
    fn new(count: u32) -> Self {
        // Start anywhere, so that short-lived producers do not all favour partition 0.
        let start = RandomState::new().build_hasher().finish() % u64::from(count.max(1));
        Self {
            partitions: (0..count).map(|_| PartitionBuffer::default()).collect(),
            round_robin: start as u32,
        }
    }

    fn count(&self) -> u32 {
        self.partitions.len() as u32
    }

    pub(crate) fn partition_for(&mut self, key: Option<&[u8]>) -> u32 {
        if self.count() == 1 {
            return 0;
        }
        if let Some(key) = key {
            partitioner::partition_for_key(key, self.count())
        } else {
            let p = self.round_robin;
            self.round_robin = (p + 1) % self.count();
            p
        }
    }

    /// Buffers one record; returns whether its partition is due to be appended.
    pub(crate) fn push(
        &mut self,
        partition: u32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[Header<'_>],
    ) -> bool {
        let buffer = &mut self.partitions[partition as usize];
        buffer.builder.push(timestamp, key, value, headers);
        buffer.bytes += RECORD_OVERHEAD_BYTES
            + key.map_or(0, <[u8]>::len)
            + value.map_or(0, <[u8]>::len)
            + headers
                .iter()
                .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len) + 8)
                .sum::<usize>();
        buffer.bytes >= APPEND_THRESHOLD_BYTES
    }
}

/// A topic's buffers as the output of a fused pipeline.
struct FusedSink<'b> {
    buffers: &'b mut TopicBuffers,
    /// Whether a partition is due to be appended.
    due: bool,
}

impl FrameSink for FusedSink<'_> {
    fn reserve(&mut self, records: usize, bytes: usize) {
        let n = self.buffers.partitions.len();
        for buffer in &mut self.buffers.partitions {
            buffer
                .builder
                .reserve(records.div_ceil(n), bytes.div_ceil(n));
        }
    }

    fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: impl FnOnce(&mut Vec<u8>) -> bool,
    ) {
        let partition = self.buffers.partition_for(key);
        let buffer = &mut self.buffers.partitions[partition as usize];
        let len = buffer.builder.push_with(timestamp, key, value);
        buffer.bytes += RECORD_OVERHEAD_BYTES + key.map_or(0, <[u8]>::len) + len.unwrap_or(0);
        self.due |= buffer.bytes >= APPEND_THRESHOLD_BYTES;
    }
}

/// Buffers records per partition and appends them in batches.
///
/// Thread-safe. Records of one partition reach the log in the order they were
/// produced: a batch is taken out of its buffer only while `append_lock` is
/// held, and appended before that lock is released.
#[pyclass(module = "strom._core", frozen)]
pub struct NativeProducer {
    log: Arc<Log>,
    buffers: Mutex<HashMap<String, TopicBuffers>>,
    append_lock: Mutex<()>,
}

/// A `bytes | None` argument, borrowed; anything else is a `TypeError`.
pub(crate) fn bytes_or_none<'py>(
    item: Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if item.is_none() {
        return Ok(None);
    }
    item.cast_into::<PyBytes>().map(Some).map_err(|e| {
        let type_name = e
            .into_inner()
            .get_type()
            .name()
            .map_or_else(|_| "?".to_owned(), |n| n.to_string());
        pyo3::exceptions::PyTypeError::new_err(format!(
            "{what} must be bytes or None, not {type_name}"
        ))
    })
}

/// Any sequence as a list (a list as itself), so that it is read without
/// running Python code while the buffers are locked.
fn as_list<'py>(seq: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
    match seq.cast::<PyList>() {
        Ok(list) => Ok(list.clone()),
        Err(_) => Ok(seq.cast::<PySequence>()?.to_list()?),
    }
}

/// The `headers` argument of a `produce_columns`: a sequence with one item
/// per record, None or a list of `(str, bytes | None)` pairs. Returns its
/// length and the headers as [`ReadBatch::headers`] holds them (per record
/// up to the last one that has any, so empty when none has).
pub(crate) fn headers_column(headers: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<OwnedHeaders>)> {
    let list = as_list(headers)?;
    let mut column = Vec::new();
    for (i, item) in list.iter().enumerate() {
        if item.is_none() {
            continue;
        }
        let record: OwnedHeaders = item.extract().map_err(|e| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "headers[{i}] must be None or a list of (str, bytes | None) pairs: {e}"
            ))
        })?;
        if !record.is_empty() {
            column.resize_with(i, Vec::new);
            column.push(record);
        }
    }
    Ok((list.len(), column))
}

fn check_partition(py: Python<'_>, topic: &str, partition: i64, count: u32) -> PyResult<u32> {
    match u32::try_from(partition) {
        Ok(p) if p < count => Ok(p),
        Ok(p) => Err(to_py_err(
            py,
            Error::UnknownPartition {
                topic: topic.to_owned(),
                partition: p,
                count,
            },
        )),
        Err(_) => Err(new_error(
            py,
            "UnknownTopicError",
            format!(
                "topic '{topic}' has {count} partition(s); partition {partition} does not exist"
            ),
        )),
    }
}

impl NativeProducer {
    pub(crate) fn lock_buffers(
        &self,
        py: Python<'_>,
    ) -> MutexGuard<'_, HashMap<String, TopicBuffers>> {
        // Waits detached: another thread may hold the lock while it appends.
        self.buffers
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The topic's partition count, fetched from the log the first time
    /// (partition counts never change).
    pub(crate) fn partition_count(&self, py: Python<'_>, topic: &str) -> PyResult<u32> {
        if let Some(buffers) = self.lock_buffers(py).get(topic) {
            return Ok(buffers.count());
        }
        let count = py.detach(|| self.log.partition_count(topic)).py_err(py)?;
        self.lock_buffers(py)
            .entry(topic.to_owned())
            .or_insert_with(|| TopicBuffers::new(count));
        Ok(count)
    }

    /// Appends the buffers that reached the threshold (or all of them), then
    /// fsyncs when asked. Every batch is attempted; the first error is returned.
    pub(crate) fn append_buffers(&self, py: Python<'_>, all: bool, sync: bool) -> PyResult<()> {
        py.detach(|| {
            let _appending = lock(&self.append_lock);
            let mut batches: Vec<(String, u32, RecordBatchBuilder)> = {
                let mut buffers = lock(&self.buffers);
                let mut taken = Vec::new();
                for (topic, topic_buffers) in buffers.iter_mut() {
                    for (p, buffer) in topic_buffers.partitions.iter_mut().enumerate() {
                        let due = if all {
                            !buffer.builder.is_empty()
                        } else {
                            buffer.bytes >= APPEND_THRESHOLD_BYTES
                        };
                        if due {
                            buffer.bytes = 0;
                            taken.push((
                                topic.clone(),
                                p as u32,
                                std::mem::take(&mut buffer.builder),
                            ));
                        }
                    }
                }
                taken
            };
            let mut first_error = None;
            for (topic, partition, batch) in &mut batches {
                if let Err(e) = self.log.append_and_clear(topic, *partition, batch) {
                    first_error.get_or_insert(e);
                }
            }
            // The emptied builders go back where nothing was buffered since,
            // so the next batches reuse their memory (not a huge one).
            {
                let mut buffers = lock(&self.buffers);
                for (topic, partition, builder) in batches {
                    if let Some(buffer) = buffers
                        .get_mut(&topic)
                        .and_then(|b| b.partitions.get_mut(partition as usize))
                        && buffer.builder.is_empty()
                        && builder.capacity_in_bytes() <= 4 * APPEND_THRESHOLD_BYTES
                    {
                        buffer.builder = builder;
                    }
                }
            }
            if sync && first_error.is_none() {
                self.log.flush()?;
            }
            first_error.map_or(Ok(()), Err)
        })
        .py_err(py)
    }
}

#[pymethods]
impl NativeProducer {
    #[new]
    fn new(log: &NativeLog) -> Self {
        Self {
            log: Arc::clone(&log.log),
            buffers: Mutex::new(HashMap::new()),
            append_lock: Mutex::new(()),
        }
    }

    #[pyo3(signature = (topic, key, value, timestamp=None, partition=None, headers=None))]
    #[allow(clippy::too_many_arguments, reason = "mirrors Kafka's ProducerRecord")]
    fn produce(
        &self,
        py: Python<'_>,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: Option<i64>,
        partition: Option<i64>,
        headers: Option<OwnedHeaders>,
    ) -> PyResult<()> {
        let count = self.partition_count(py, topic)?;
        let explicit = partition
            .map(|p| check_partition(py, topic, p, count))
            .transpose()?;
        let headers = headers.unwrap_or_default();
        let headers: Vec<Header<'_>> = headers
            .iter()
            .map(|(k, v)| Header {
                key: k,
                value: v.as_deref(),
            })
            .collect();
        let due = {
            let mut buffers = self.lock_buffers(py);
            let topic_buffers = buffers
                .get_mut(topic)
                .expect("registered by partition_count");
            let partition = explicit.unwrap_or_else(|| topic_buffers.partition_for(key));
            topic_buffers.push(
                partition,
                timestamp.unwrap_or_else(now_ms),
                key,
                value,
                &headers,
            )
        };
        if due {
            self.append_buffers(py, false, false)?;
        }
        Ok(())
    }

    /// The batch path: one call for many records of one topic. `headers`:
    /// None (no record has any) or per record None or a list of
    /// `(str, bytes | None)` pairs.
    #[pyo3(signature = (topic, keys, values, timestamps=None, partitions=None, headers=None))]
    #[allow(
        clippy::needless_pass_by_value,
        reason = "PyO3 extracts owned sequences"
    )]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn produce_columns(
        &self,
        py: Python<'_>,
        topic: &str,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        timestamps: Option<Vec<i64>>,
        partitions: Option<Vec<i64>>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let keys = as_list(keys)?;
        let values = as_list(values)?;
        let headers = headers.map(headers_column).transpose()?;
        let n = keys.len();
        let lengths_match = values.len() == n
            && timestamps.as_ref().is_none_or(|t| t.len() == n)
            && partitions.as_ref().is_none_or(|p| p.len() == n)
            && headers.as_ref().is_none_or(|(len, _)| *len == n);
        if !lengths_match {
            let len_of = |len: Option<usize>| len.map_or("-".into(), |l| l.to_string());
            return Err(to_py_err(
                py,
                Error::Config(format!(
                    "produce_columns: keys ({n}), values ({}), timestamps ({}), partitions ({}) \
                     and headers ({}) must have the same length",
                    values.len(),
                    len_of(timestamps.as_ref().map(Vec::len)),
                    len_of(partitions.as_ref().map(Vec::len)),
                    len_of(headers.as_ref().map(|(len, _)| *len)),
                )),
            ));
        }
        let headers = headers.map(|(_, column)| column).unwrap_or_default();
        let count = self.partition_count(py, topic)?;
        // Check everything before buffering anything, so a bad record leaves
        // the whole call without effect.
        let explicit = partitions
            .map(|ps| {
                ps.into_iter()
                    .map(|p| check_partition(py, topic, p, count))
                    .collect::<PyResult<Vec<u32>>>()
            })
            .transpose()?;
        let mut rows = Vec::with_capacity(n);
        for (key, value) in keys.iter().zip(values.iter()) {
            rows.push((bytes_or_none(key, "key")?, bytes_or_none(value, "value")?));
        }
        let default_timestamp = now_ms();
        let mut due = false;
        {
            let mut buffers = self.lock_buffers(py);
            let topic_buffers = buffers
                .get_mut(topic)
                .expect("registered by partition_count");
            // One record's headers as the builder takes them (reused).
            let mut record_headers: Vec<Header<'_>> = Vec::new();
            for (i, (key, value)) in rows.iter().enumerate() {
                let key = key.as_ref().map(PyBytesMethods::as_bytes);
                let value = value.as_ref().map(PyBytesMethods::as_bytes);
                let partition = match &explicit {
                    Some(ps) => ps[i],
                    None => topic_buffers.partition_for(key),
                };
                let timestamp = timestamps.as_ref().map_or(default_timestamp, |t| t[i]);
                record_headers.clear();
                if let Some(owned) = headers.get(i) {
                    record_headers.extend(owned.iter().map(|(k, v)| Header {
                        key: k,
                        value: v.as_deref(),
                    }));
                }
                due |= topic_buffers.push(partition, timestamp, key, value, &record_headers);
            }
        }
        if due {
            self.append_buffers(py, false, false)?;
        }
        Ok(())
    }

    /// A sub-topology of expression steps in one call, without the GIL:
    /// runs `pipeline` over a batch read from the log and buffers what comes
    /// through for `topic` (keys and timestamps as read, partitioned by key
    /// as `produce_columns` does). Returns the batch's largest timestamp and
    /// the offset after its last record; or None, having buffered nothing,
    /// when the batch must take the ordinary path (`Pipeline::run_batch`).
    fn produce_fused(
        &self,
        py: Python<'_>,
        topic: &str,
        records: &RecordBatch,
        pipeline: &ExprPipeline,
    ) -> PyResult<Option<(i64, u64)>> {
        self.partition_count(py, topic)?;
        let outcome = py.detach(|| {
            // Held for the batch: its values are written into the partition
            // buffers as they are made (the stream thread owns this producer).
            let mut buffers = lock(&self.buffers);
            let topic_buffers = buffers
                .get_mut(topic)
                .expect("registered by partition_count");
            let marks: Vec<_> = topic_buffers
                .partitions
                .iter()
                .map(|b| (b.builder.mark(), b.bytes))
                .collect();
            let round_robin = topic_buffers.round_robin;
            let mut sink = FusedSink {
                buffers: topic_buffers,
                due: false,
            };
            let Some((max_timestamp, end)) =
                pipeline.pipeline.run_batch_into(&records.batch, &mut sink)
            else {
                // The ordinary path takes the batch: drop what it pushed.
                for (buffer, (mark, bytes)) in topic_buffers.partitions.iter_mut().zip(marks) {
                    buffer.builder.rewind(mark);
                    buffer.bytes = bytes;
                }
                topic_buffers.round_robin = round_robin;
                return None;
            };
            Some((max_timestamp, end, sink.due))
        });
        let Some((max_timestamp, end, due)) = outcome else {
            return Ok(None);
        };
        if due {
            self.append_buffers(py, false, false)?;
        }
        Ok(Some((max_timestamp, end)))
    }

    /// Appends everything buffered, then fsyncs: once this returns, the
    /// records survive a crash.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.append_buffers(py, true, true)
    }
}

// --- the consumer -----------------------------------------------------------------

fn parse_reset(py: Python<'_>, reset: &str) -> PyResult<OffsetReset> {
    match reset {
        "earliest" => Ok(OffsetReset::Earliest),
        "latest" => Ok(OffsetReset::Latest),
        "none" => Ok(OffsetReset::None),
        other => Err(to_py_err(
            py,
            Error::Config(format!(
                "auto.offset.reset must be 'earliest', 'latest' or 'none', not '{other}'"
            )),
        )),
    }
}

fn parse_timeout(py: Python<'_>, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        to_py_err(
            py,
            Error::Config(format!(
                "timeout must be a finite number of seconds >= 0, not {seconds}"
            )),
        )
    })
}

/// A consumer of a group, assigned every partition of its topics.
#[pyclass(module = "strom._core", frozen)]
pub struct NativeConsumer {
    // Locked only while detached (a poll holds it while it waits).
    consumer: Mutex<Consumer>,
    group_id: String,
}

impl NativeConsumer {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Consumer) -> strom_core::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| f(&mut lock(&self.consumer))).py_err(py)
    }

    /// Polls until records come or the timeout passes, waking now and then
    /// for Ctrl-C.
    fn poll_native(
        &self,
        py: Python<'_>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Vec<PolledBatch>> {
        if max_records == 0 {
            return Err(to_py_err(
                py,
                Error::Config("max_records must be at least 1".to_owned()),
            ));
        }
        let timeout = parse_timeout(py, timeout)?;
        let deadline = Instant::now() + timeout;
        loop {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK_INTERVAL);
            let polled = self.with(py, |c| c.poll(max_records, wait))?;
            if !polled.is_empty() || Instant::now() >= deadline {
                return Ok(polled);
            }
            py.check_signals()?;
        }
    }
}

#[pymethods]
impl NativeConsumer {
    #[new]
    #[pyo3(signature = (log, group_id, topics, offset_reset="earliest"))]
    fn new(
        py: Python<'_>,
        log: &NativeLog,
        group_id: &str,
        topics: Vec<String>,
        offset_reset: &str,
    ) -> PyResult<Self> {
        let reset = parse_reset(py, offset_reset)?;
        let log = Arc::clone(&log.log);
        let consumer = py
            .detach(move || Consumer::new(log, group_id, &topics, reset))
            .py_err(py)?;
        Ok(Self {
            consumer: Mutex::new(consumer),
            group_id: group_id.to_owned(),
        })
    }

    #[getter]
    fn group_id(&self) -> &str {
        &self.group_id
    }

    fn assignment(&self, py: Python<'_>) -> PyResult<Vec<(String, u32)>> {
        self.with(py, |c| Ok(c.assignment()))
    }

    fn poll_batches(
        &self,
        py: Python<'_>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Vec<RecordBatch>> {
        let polled = self.poll_native(py, max_records, timeout)?;
        Ok(polled.into_iter().map(|p| record_batch(py, p)).collect())
    }

    fn poll<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyList>> {
        let polled = self.poll_native(py, max_records, timeout)?;
        let out = PyList::empty(py);
        for mut p in polled {
            let topic = PyString::new(py, &p.topic);
            let mut headers = std::mem::take(&mut p.batch.headers);
            records_of(
                py,
                &topic,
                p.partition,
                &p.batch,
                |i| headers.get_mut(i).map(std::mem::take).unwrap_or_default(),
                &out,
            )?;
        }
        Ok(out)
    }

    fn position(&self, py: Python<'_>, topic: &str, partition: u32) -> PyResult<u64> {
        self.with(py, |c| c.position(topic, partition))
    }

    fn seek(&self, py: Python<'_>, topic: &str, partition: u32, offset: u64) -> PyResult<()> {
        self.with(py, |c| c.seek(topic, partition, offset))
    }

    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, Consumer::commit)
    }

    fn commit_offsets(&self, py: Python<'_>, offsets: Vec<OffsetTuple>) -> PyResult<()> {
        let offsets = to_committed(offsets);
        self.with(py, |c| c.commit_offsets(&offsets))
    }

    fn committed(&self, py: Python<'_>) -> PyResult<Vec<OffsetTuple>> {
        self.with(py, |c| c.committed().map(from_committed))
    }
}

// --- the partitioner ----------------------------------------------------------------

/// Kafka's `Utils.murmur2` of the bytes, as a signed 32-bit int.
#[pyfunction]
fn murmur2(data: &[u8]) -> i32 {
    partitioner::murmur2(data)
}

/// The partition Kafka's default partitioner picks for a (serialized) key.
#[pyfunction]
fn partition_for_key(py: Python<'_>, key: &[u8], num_partitions: u32) -> PyResult<u32> {
    if num_partitions == 0 {
        return Err(to_py_err(
            py,
            Error::Config("num_partitions must be at least 1".to_owned()),
        ));
    }
    Ok(partitioner::partition_for_key(key, num_partitions))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ConsumedRecord>()?;
    m.add_class::<RecordBatch>()?;
    m.add_class::<NativeLog>()?;
    m.add_class::<NativeProducer>()?;
    m.add_class::<NativeConsumer>()?;
    m.add_function(wrap_pyfunction!(murmur2, m)?)?;
    m.add_function(wrap_pyfunction!(partition_for_key, m)?)?;
    Ok(())
}
