//! Bindings of strom-kafka: `KafkaConsumer` and `KafkaProducer`, used by
//! python/strom/kafka/clients.py. Errors are raised as confluent-kafka's
//! `KafkaException(KafkaError(...))`, the types the runtime already handles
//! for the admin client.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBytes, PyList, PyTuple};
use strom_core::log::{PolledBatch, Span};
use strom_kafka::{
    ClientConfig, ClientError, Columns, Consumer, Events, PartitionOffset, Partitioning, Producer,
    RebalanceEvent, RebalanceKind, Record,
};

use crate::expr::ExprPipeline;
use crate::log::{RecordBatch, headers_column, headers_list, record_batch};

/// How often a waiting call comes back for Ctrl-C.
const SIGNAL_CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// Queued records up to which a produce call keeps the GIL: librdkafka's default
/// `queue.buffering.max.messages` (strom sets 1,000,000), so it does not wait
/// for room unless the queue was configured below that.
const ROOM_WITHOUT_WAITING: usize = 100_000;

/// confluent-kafka's `KafkaError` for `error`.
fn kafka_error<'py>(py: Python<'py>, error: &ClientError) -> PyResult<Bound<'py, PyAny>> {
    let class = py.import("confluent_kafka")?.getattr("KafkaError")?;
    let kwargs = [
        ("fatal", error.fatal),
        ("retriable", error.retriable),
        ("txn_requires_abort", error.txn_requires_abort),
    ]
    .into_py_dict(py)?;
    class.call((error.code, error.message.as_str()), Some(&kwargs))
}

fn to_py_err(py: Python<'_>, error: &ClientError) -> PyErr {
    let raised = || -> PyResult<PyErr> {
        let exception = py.import("confluent_kafka")?.getattr("KafkaException")?;
        Ok(PyErr::from_value(
            exception.call1((kafka_error(py, error)?,))?,
        ))
    };
    raised().unwrap_or_else(|e| e)
}

trait KafkaResult<T> {
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> KafkaResult<T> for strom_kafka::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py_err(py, &e))
    }
}

fn seconds(seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds).map_err(|_| {
        PyValueError::new_err(format!(
            "timeout must be a finite number of seconds >= 0, not {seconds}"
        ))
    })
}

fn client_config(config: HashMap<String, String>) -> ClientConfig {
    ClientConfig::new(config)
}

/// `(logs, dropped)`: librdkafka's log lines as `(level, facility, message)`.
fn take_logs(events: &Events) -> (Vec<(i32, String, String)>, u64) {
    let (lines, dropped) = events.take_logs();
    (
        lines
            .into_iter()
            .map(|l| (l.level, l.facility, l.message))
            .collect(),
        dropped,
    )
}

fn take_errors<'py>(py: Python<'py>, events: &Events) -> PyResult<Vec<Bound<'py, PyAny>>> {
    events
        .take_errors()
        .iter()
        .map(|e| kafka_error(py, e))
        .collect()
}

/// A consumer: a group member when its config has a `group.id`, else read
/// by assignment with no group at all.
#[pyclass(module = "strom._core", frozen)]
pub struct KafkaConsumer {
    inner: Arc<Consumer>,
}

#[pymethods]
#[allow(
    clippy::needless_pass_by_value,
    reason = "pyo3 hands Python lists over as owned Vecs"
)]
impl KafkaConsumer {
    #[new]
    fn new(py: Python<'_>, config: HashMap<String, String>) -> PyResult<Self> {
        let config = client_config(config);
        let inner = py.detach(|| Consumer::new(&config)).py(py)?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// Whether records polled from now on carry their headers (else each
    /// has none): parsing them costs an allocation per record.
    fn read_headers(&self, read: bool) {
        self.inner.read_headers(read);
    }

    fn subscribe(&self, py: Python<'_>, topics: Vec<String>) -> PyResult<()> {
        py.detach(|| self.inner.subscribe(&topics)).py(py)
    }

    fn unsubscribe(&self, py: Python<'_>) {
        py.detach(|| self.inner.unsubscribe());
    }

    /// `partitions`: `(topic, partition, offset)`; negative offsets are
    /// librdkafka's logical ones (-2 beginning, -1 end).
    fn assign(&self, py: Python<'_>, partitions: Vec<(String, i32, i64)>) -> PyResult<()> {
        let offsets = partition_offsets(partitions);
        py.detach(|| self.inner.assign(&offsets)).py(py)
    }

    fn incremental_assign(
        &self,
        py: Python<'_>,
        partitions: Vec<(String, i32, i64)>,
    ) -> PyResult<()> {
        let offsets = partition_offsets(partitions);
        py.detach(|| self.inner.incremental_assign(&offsets)).py(py)
    }

    fn incremental_unassign(&self, py: Python<'_>, partitions: Vec<(String, i32)>) -> PyResult<()> {
        py.detach(|| self.inner.incremental_unassign(&partitions))
            .py(py)
    }

    fn unassign(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.unassign()).py(py)
    }

    /// Stops fetching from assigned `partitions` until `resume`.
    fn pause(&self, py: Python<'_>, partitions: Vec<(String, i32)>) -> PyResult<()> {
        py.detach(|| self.inner.pause(&partitions)).py(py)
    }

    fn resume(&self, py: Python<'_>, partitions: Vec<(String, i32)>) -> PyResult<()> {
        py.detach(|| self.inner.resume(&partitions)).py(py)
    }

    /// Commits `(topic, partition, offset, metadata)`; `wait`: for the
    /// coordinator, else the result comes with a later `poll`.
    #[pyo3(signature = (offsets, wait=true))]
    fn commit(
        &self,
        py: Python<'_>,
        offsets: Vec<(String, i32, i64, Option<String>)>,
        wait: bool,
    ) -> PyResult<()> {
        let offsets: Vec<PartitionOffset> = offsets
            .into_iter()
            .map(|(topic, partition, offset, metadata)| PartitionOffset {
                topic,
                partition,
                offset,
                metadata,
            })
            .collect();
        py.detach(|| self.inner.commit(&offsets, wait)).py(py)
    }

    /// `(topic, partition, offset, metadata, error)` per partition; the
    /// offset is negative where the group has none, `error` a `KafkaError`.
    fn committed<'py>(
        &self,
        py: Python<'py>,
        partitions: Vec<(String, i32)>,
        timeout: f64,
    ) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        let timeout = seconds(timeout)?;
        let committed = py
            .detach(|| self.inner.committed(&partitions, timeout))
            .py(py)?;
        committed
            .into_iter()
            .map(|c| {
                let error = c.error.as_ref().map(|e| kafka_error(py, e)).transpose()?;
                (c.topic, c.partition, c.offset, c.metadata, error).into_pyobject(py)
            })
            .collect()
    }

    /// `(topic, partition, offset)` per `(topic, partition, timestamp)`: the
    /// first offset at or after the timestamp, -1 where there is none.
    fn offsets_for_times(
        &self,
        py: Python<'_>,
        wanted: Vec<(String, i32, i64)>,
        timeout: f64,
    ) -> PyResult<Vec<(String, i32, i64)>> {
        let timeout = seconds(timeout)?;
        let found = py
            .detach(|| self.inner.offsets_for_times(&wanted, timeout))
            .py(py)?;
        Ok(found
            .into_iter()
            .map(|o| (o.topic, o.partition, o.offset))
            .collect())
    }

    /// Local bookkeeping of librdkafka: read holding the GIL (see poll).
    fn position(&self, py: Python<'_>, partitions: Vec<(String, i32)>) -> PyResult<Vec<i64>> {
        self.inner.position(&partitions).py(py)
    }

    #[pyo3(signature = (topic, partition, *, cached=false, timeout=10.0))]
    fn get_watermark_offsets(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        cached: bool,
        timeout: f64,
    ) -> PyResult<(i64, i64)> {
        let timeout = seconds(timeout)?;
        if cached {
            // From the last fetch response, no request: read holding the GIL (see poll).
            return self
                .inner
                .watermarks(topic, partition, true, timeout)
                .py(py);
        }
        py.detach(|| self.inner.watermarks(topic, partition, false, timeout))
            .py(py)
    }

    /// Partition counts of `topic` (or every topic), as the cluster's metadata has them.
    #[pyo3(signature = (topic=None, timeout=10.0))]
    fn partition_counts(
        &self,
        py: Python<'_>,
        topic: Option<&str>,
        timeout: f64,
    ) -> PyResult<HashMap<String, usize>> {
        let timeout = seconds(timeout)?;
        let metadata = py
            .detach(|| self.inner.fetch_metadata(topic, timeout))
            .py(py)?;
        Ok(metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_owned(), t.partitions().len()))
            .collect())
    }

    /// Polls up to `max_records` (waiting up to `timeout` for the first)
    /// and returns `(batches, eofs, errors, rebalance, commits)`: a `RecordBatch` per
    /// partition; `(topic, partition)` of partitions at their end; errors as
    /// `((topic, partition) | None, KafkaError)`; and a rebalance the caller
    /// must apply before polling again: `("assign" | "revoke" | "lost",
    /// [(topic, partition)])`, `("error", KafkaError)` or None; the results
    /// of asynchronous commits, `(topic, partition, offset, KafkaError | None)`.
    fn poll<'py>(
        &self,
        py: Python<'py>,
        max_records: usize,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if max_records == 0 {
            return Err(PyValueError::new_err("max_records must be at least 1"));
        }
        let deadline = Instant::now() + seconds(timeout)?;
        let mut first = true;
        let polled = loop {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK_INTERVAL);
            // What is already fetched is taken without letting go of the GIL: with
            // several stream threads, a thread that let go for a short call waits
            // for the next to hand it back (up to the interpreter's switch interval).
            let polled = if first {
                first = false;
                self.inner.poll(max_records, Duration::ZERO)
            } else {
                py.detach(|| self.inner.poll(max_records, wait))
            };
            let met_something = !polled.batches.is_empty()
                || !polled.eofs.is_empty()
                || !polled.errors.is_empty()
                || polled.rebalance.is_some()
                || !polled.commits.is_empty();
            if met_something || Instant::now() >= deadline {
                break polled;
            }
            py.check_signals()?;
        };
        let batches = PyList::empty(py);
        for (topic, partition, batch) in polled.batches {
            let polled = PolledBatch {
                topic,
                partition: partition as u32,
                batch,
            };
            batches.append(Py::new(py, record_batch(py, polled))?)?;
        }
        let errors = polled
            .errors
            .iter()
            .map(|(where_, e)| Ok((where_.clone(), kafka_error(py, e)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let rebalance = match polled.rebalance {
            None => py.None().into_bound(py),
            Some(RebalanceEvent::Change { kind, partitions }) => {
                let kind = match kind {
                    RebalanceKind::Assign => "assign",
                    RebalanceKind::Revoke => "revoke",
                    RebalanceKind::Lost => "lost",
                };
                (kind, partitions).into_pyobject(py)?.into_any()
            }
            Some(RebalanceEvent::Error(e)) => ("error", kafka_error(py, &e)?)
                .into_pyobject(py)?
                .into_any(),
        };
        let commits = polled
            .commits
            .iter()
            .map(|(topic, partition, offset, e)| {
                let error = e.as_ref().map(|e| kafka_error(py, e)).transpose()?;
                Ok((topic.clone(), *partition, *offset, error))
            })
            .collect::<PyResult<Vec<_>>>()?;
        (batches, polled.eofs, errors, rebalance, commits).into_pyobject(py)
    }

    fn take_logs(&self) -> (Vec<(i32, String, String)>, u64) {
        take_logs(self.inner.events())
    }

    fn take_errors<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        take_errors(py, self.inner.events())
    }

    /// Leaves the group (or stops reading); the client is released when
    /// the object is.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.close()).py(py)
    }
}

fn partition_offsets(partitions: Vec<(String, i32, i64)>) -> Vec<PartitionOffset> {
    partitions
        .into_iter()
        .map(|(topic, partition, offset)| PartitionOffset {
            topic,
            partition,
            offset,
            metadata: None,
        })
        .collect()
}

/// A producer taking columns of bytes; transactional with a `transactional.id`.
#[pyclass(module = "strom._core", frozen)]
pub struct KafkaProducer {
    inner: Arc<Producer>,
}

/// Appends the bytes of `item` (bytes or None) to `data`.
/// `item` as bytes (None stays None), or a `TypeError` naming `what[i]`.
fn bytes_of<'py>(
    item: &Bound<'py, PyAny>,
    what: &str,
    i: usize,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if item.is_none() {
        return Ok(None);
    }
    let bytes = item.cast::<PyBytes>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{what}[{i}] must be bytes or None, not {}",
            item.get_type()
                .name()
                .map_or_else(|_| "?".to_owned(), |n| n.to_string())
        ))
    })?;
    Ok(Some(bytes.clone()))
}

fn span_of(
    data: &mut Vec<u8>,
    item: &Bound<'_, PyAny>,
    what: &str,
    i: usize,
) -> PyResult<Option<Span>> {
    let Some(bytes) = bytes_of(item, what, i)? else {
        return Ok(None);
    };
    let start = data.len();
    data.extend_from_slice(bytes.as_bytes());
    Ok(Some(Span {
        start,
        len: data.len() - start,
    }))
}

#[pymethods]
#[allow(
    clippy::needless_pass_by_value,
    reason = "pyo3 hands Python lists over as owned Vecs"
)]
impl KafkaProducer {
    #[new]
    fn new(py: Python<'_>, config: HashMap<String, String>) -> PyResult<Self> {
        let config = client_config(config);
        let inner = Arc::new(py.detach(|| Producer::new(&config)).py(py)?);
        inner.serve_in_background().map_err(|e| {
            PyRuntimeError::new_err(format!("cannot start the producer's report thread: {e}"))
        })?;
        Ok(Self { inner })
    }

    /// Queues records: `keys`/`values` are bytes or None; `partitions`
    /// gives each record's partition, else keyed records go to
    /// murmur2(key) % `partition_count` (Kafka's default) and null keys
    /// where the client spreads them; `headers` is None (no record has any)
    /// or per record None or a list of `(str, bytes | None)` pairs.
    /// Failures are kept for `take_failures`.
    #[pyo3(signature = (topic, keys, values, timestamps=None, partitions=None, partition_count=1, headers=None))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn produce_columns(
        &self,
        py: Python<'_>,
        topic: &str,
        keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        timestamps: Option<Vec<i64>>,
        partitions: Option<Vec<i32>>,
        partition_count: u32,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let n = keys.len()?;
        let headers = headers.map(headers_column).transpose()?;
        if values.len()? != n
            || timestamps.as_ref().is_some_and(|t| t.len() != n)
            || partitions.as_ref().is_some_and(|p| p.len() != n)
            || headers.as_ref().is_some_and(|(len, _)| *len != n)
        {
            return Err(PyValueError::new_err(
                "keys, values, timestamps, partitions and headers must have the same length",
            ));
        }
        if partitions.is_none() && partition_count == 0 {
            return Err(PyValueError::new_err("partition_count must be at least 1"));
        }
        let partitioning = match &partitions {
            Some(p) => Partitioning::Explicit(p),
            None => Partitioning::ByKey {
                partitions: partition_count,
            },
        };
        let timestamps = timestamps.unwrap_or_default();
        let headers = headers.map(|(_, column)| column).unwrap_or_default();
        // Copying into librdkafka's queue is short: done holding the GIL (see
        // poll), straight from the bytes objects, unless the queue may fill
        // up and the call wait for room (then from a copy, without the GIL).
        if self.inner.in_flight() + n <= ROOM_WITHOUT_WAITING {
            let mut items = Vec::with_capacity(n);
            for (i, (key, value)) in keys.try_iter()?.zip(values.try_iter()?).enumerate() {
                items.push((bytes_of(&key?, "keys", i)?, bytes_of(&value?, "values", i)?));
            }
            self.inner.produce_records(topic, n, partitioning, |i| {
                let (key, value) = &items[i];
                Record {
                    key: key.as_ref().map(PyBytesMethods::as_bytes),
                    value: value.as_ref().map(PyBytesMethods::as_bytes),
                    timestamp: timestamps.get(i).copied().unwrap_or(0),
                    headers: headers.get(i).map_or(&[], Vec::as_slice),
                }
            });
            return Ok(());
        }
        let mut columns = Columns {
            timestamps,
            headers,
            ..Columns::default()
        };
        columns.keys.reserve(n);
        columns.values.reserve(n);
        for (i, (key, value)) in keys.try_iter()?.zip(values.try_iter()?).enumerate() {
            let key = span_of(&mut columns.data, &key?, "keys", i)?;
            let value = span_of(&mut columns.data, &value?, "values", i)?;
            columns.keys.push(key);
            columns.values.push(value);
        }
        py.detach(|| self.inner.produce_columns(topic, &columns, partitioning));
        Ok(())
    }

    /// The embedded producer's `produce_fused` for a batch read from Kafka:
    /// queued, partitioned as `produce_columns` does.
    fn produce_fused(
        &self,
        py: Python<'_>,
        topic: &str,
        records: &RecordBatch,
        pipeline: &ExprPipeline,
        partition_count: u32,
    ) -> PyResult<Option<(i64, u64)>> {
        if partition_count == 0 {
            return Err(PyValueError::new_err("partition_count must be at least 1"));
        }
        Ok(py.detach(|| {
            let fused = pipeline.pipeline.run_batch(&records.batch)?;
            let mut columns = Columns::default();
            let span = |data: &mut Vec<u8>, bytes: Option<&[u8]>| {
                bytes.map(|b| {
                    let start = data.len();
                    data.extend_from_slice(b);
                    Span {
                        start,
                        len: b.len(),
                    }
                })
            };
            for (key, value, timestamp) in fused.records() {
                let key = span(&mut columns.data, key);
                let value = span(&mut columns.data, value);
                columns.keys.push(key);
                columns.values.push(value);
                columns.timestamps.push(timestamp);
            }
            let partitioning = Partitioning::ByKey {
                partitions: partition_count,
            };
            self.inner.produce_columns(topic, &columns, partitioning);
            Some((fused.max_timestamp, fused.end_offset))
        }))
    }

    /// One record with headers, on the client's partitioner.
    #[pyo3(signature = (topic, key, value, timestamp=0, headers=Vec::new()))]
    fn produce(
        &self,
        py: Python<'_>,
        topic: &str,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        timestamp: i64,
        headers: Vec<(String, Option<Vec<u8>>)>,
    ) {
        py.detach(|| {
            self.inner
                .produce(topic, key.as_deref(), value.as_deref(), timestamp, &headers);
        });
    }

    fn poll(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = seconds(timeout)?;
        py.detach(|| self.inner.serve(timeout));
        Ok(())
    }

    /// Waits up to `timeout` for every record to be acknowledged; returns
    /// how many are still in flight.
    fn flush(&self, py: Python<'_>, timeout: f64) -> PyResult<usize> {
        let deadline = Instant::now() + seconds(timeout)?;
        loop {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(SIGNAL_CHECK_INTERVAL);
            let left = py.detach(|| self.inner.flush(wait));
            if left == 0 || Instant::now() >= deadline {
                return Ok(left);
            }
            py.check_signals()?;
        }
    }

    /// Closes the current epoch (records sent from now on belong to the
    /// next) and returns it.
    fn mark(&self) -> u64 {
        self.inner.mark()
    }

    /// How many epochs, from the first, have every record reported
    /// (acknowledged or failed): epochs below it are done.
    fn reported_through(&self) -> u64 {
        self.inner.reported_through()
    }

    /// `(topic, partition, end)` of partitions whose acknowledged end moved.
    fn take_written(&self) -> Vec<(String, i32, i64)> {
        self.inner.take_written()
    }

    fn forget_written(&self, topic: &str, partition: i32) {
        self.inner.forget_written(topic, partition);
    }

    /// Records that failed since the last call: `(topic, partition, key,
    /// value, timestamp, KafkaError, queued)`.
    fn take_failures<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.inner
            .take_failures()
            .into_iter()
            .map(|f| {
                let key = f.key.as_deref().map(|k| PyBytes::new(py, k));
                let value = f.value.as_deref().map(|v| PyBytes::new(py, v));
                let error = kafka_error(py, &f.error)?;
                let headers = headers_list(py, &f.headers)?;
                (
                    f.topic,
                    f.partition,
                    key,
                    value,
                    f.timestamp,
                    error,
                    f.queued,
                    headers,
                )
                    .into_pyobject(py)
            })
            .collect()
    }

    fn fatal_error<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner
            .fatal_error()
            .map(|e| kafka_error(py, &e))
            .transpose()
    }

    fn init_transactions(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = seconds(timeout)?;
        py.detach(|| self.inner.init_transactions(timeout)).py(py)
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.begin_transaction()).py(py)
    }

    /// Adds `(topic, partition, offset, metadata)` of `consumer`'s group to
    /// the open transaction.
    fn send_offsets_to_transaction(
        &self,
        py: Python<'_>,
        offsets: Vec<(String, i32, i64, Option<String>)>,
        consumer: &KafkaConsumer,
        timeout: f64,
    ) -> PyResult<()> {
        let timeout = seconds(timeout)?;
        let consumer = Arc::clone(&consumer.inner);
        py.detach(|| {
            self.inner
                .send_offsets_to_transaction(&offsets, &consumer, timeout)
        })
        .py(py)
    }

    fn commit_transaction(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = seconds(timeout)?;
        py.detach(|| self.inner.commit_transaction(timeout)).py(py)
    }

    fn abort_transaction(&self, py: Python<'_>, timeout: f64) -> PyResult<()> {
        let timeout = seconds(timeout)?;
        py.detach(|| self.inner.abort_transaction(timeout)).py(py)
    }

    fn take_logs(&self) -> (Vec<(i32, String, String)>, u64) {
        take_logs(self.inner.events())
    }

    fn take_errors<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        take_errors(py, self.inner.events())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KafkaConsumer>()?;
    m.add_class::<KafkaProducer>()?;
    Ok(())
}
