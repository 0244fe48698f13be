use std::collections::{BTreeMap, HashMap};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::bindings as rdsys;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use strom_core::log::Span;
use strom_core::serde::partitioner::partition_for_key;

use crate::client::{ClientConfig, Context, Events, lock};
use crate::consumer::Consumer;
use crate::error::{ClientError, Result, c_string, describe};

/// librdkafka's "no partition chosen": its partitioner picks one.
const RD_KAFKA_PARTITION_UA: i32 = -1;

/// A record's headers, in order: a name and a value (None: null), as Kafka
/// has them.
pub type Headers = Vec<(String, Option<Vec<u8>>)>;

/// Records to produce, columnar: record `i`'s key is `data[keys[i]]` (None: null).
#[derive(Debug, Default, Clone)]
pub struct Columns {
    pub data: Vec<u8>,
    pub keys: Vec<Option<Span>>,
    pub values: Vec<Option<Span>>,
    /// Per record; 0 lets the client stamp the record with the current time.
    pub timestamps: Vec<i64>,
    /// Per record up to the last one that has headers (so empty when none
    /// has, as is usual), as [`strom_core::log::ReadBatch::headers`].
    pub headers: Vec<Headers>,
}

impl Columns {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn bytes(&self, span: Option<Span>) -> Option<&[u8]> {
        span.map(|s| &self.data[s.start..s.start + s.len])
    }

    /// Record `i`'s headers (none for most records).
    pub fn headers(&self, i: usize) -> &[(String, Option<Vec<u8>>)] {
        self.headers.get(i).map_or(&[], Vec::as_slice)
    }
}

/// One record to queue, borrowed where it is (each part is copied once, into
/// the client's queue).
#[derive(Debug, Default, Clone, Copy)]
pub struct Record<'a> {
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// 0 lets the client stamp the record with the current time.
    pub timestamp: i64,
    /// Empty: the record has none.
    pub headers: &'a [(String, Option<Vec<u8>>)],
}

/// Where each record goes.
#[derive(Debug, Clone, Copy)]
pub enum Partitioning<'a> {
    /// The partition of each record.
    Explicit(&'a [i32]),
    /// Kafka's default: murmur2 of the key over the topic's partitions;
    /// null keys spread by the client.
    ByKey { partitions: u32 },
}

/// A record the client could not write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub topic: String,
    /// -1 when not chosen yet.
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: i64,
    pub headers: Headers,
    pub error: ClientError,
    /// The client had accepted it (a delivery report), else it refused it outright.
    pub queued: bool,
}

#[derive(Debug, Default)]
struct Deliveries {
    /// Per topic and partition: the offset after the last record
    /// acknowledged, and whether it moved since the last `take_written`.
    written: HashMap<String, HashMap<i32, (i64, bool)>>,
    failures: Vec<Failure>,
    /// The epoch records sent now belong to (see [`Producer::mark`]).
    epoch: u64,
    /// Per epoch: its records queued and not yet reported (acknowledged or failed).
    unreported: BTreeMap<u64, u64>,
}

impl Deliveries {
    fn acknowledged(&mut self, topic: &str, partition: i32, offset: i64) {
        let end = offset + 1;
        // Looked up by &str first: no allocation per record.
        let partitions = match self.written.get_mut(topic) {
            Some(partitions) => partitions,
            None => self.written.entry(topic.to_owned()).or_default(),
        };
        let slot = partitions.entry(partition).or_insert((-1, false));
        if end > slot.0 {
            *slot = (end, true);
        }
    }

    fn reported(&mut self, epoch: u64) {
        self.reported_many(epoch, 1);
    }

    fn reported_many(&mut self, epoch: u64, records: u64) {
        if let Some(count) = self.unreported.get_mut(&epoch) {
            *count = count.saturating_sub(records);
            if *count == 0 {
                self.unreported.remove(&epoch);
            }
        }
    }
}

/// The producer's context: log lines and client errors. Delivery reports
/// are served by [`Producer::serve`] (rdkafka's own poll waits out its whole
/// timeout even when a report came at once, which would make every flush
/// last 100 ms).
#[derive(Debug, Default)]
pub struct DeliveryContext {
    base: Context,
}

impl ClientContext for DeliveryContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.base.log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.base.error(error, reason);
    }
}

impl ProducerContext for DeliveryContext {
    /// The record's epoch, read back from its delivery report.
    type DeliveryOpaque = usize;

    fn delivery(&self, _: &DeliveryResult<'_>, _: usize) {}
}

/// A Kafka producer taking columns; transactional when configured with a
/// `transactional.id`.
pub struct Producer {
    // Dropped before `inner` (fields drop in order): they hold references into the client.
    queue: MainQueue,
    topics: Mutex<HashMap<String, TopicHandle>>,
    deliveries: Mutex<Deliveries>,
    /// Whether a thread of its own serves the delivery reports (see
    /// [`Producer::serve_in_background`]).
    background: AtomicBool,
    inner: BaseProducer<DeliveryContext>,
}

/// Owns one reference to a librdkafka topic handle: records are sent by
/// handle, not by name (a name costs a string copy and a lookup per record).
struct TopicHandle(*mut rdsys::rd_kafka_topic_t);

// SAFETY: librdkafka topic handles are thread-safe.
unsafe impl Send for TopicHandle {}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: we own one reference, taken by rd_kafka_topic_new.
        unsafe { rdsys::rd_kafka_topic_destroy(self.0) }
    }
}

/// Owns one reference to the client's main queue (delivery reports, errors).
struct MainQueue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka queues are thread-safe.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: we own one reference.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

/// The headers of a message, consumed or produced (none when it has none).
///
/// # Safety
/// `message` is a live message.
pub(crate) unsafe fn message_headers(message: *const rdsys::rd_kafka_message_t) -> Headers {
    let mut list: *mut rdsys::rd_kafka_headers_t = ptr::null_mut();
    // SAFETY: the caller's promise; the list stays owned by the message.
    let err = unsafe { rdsys::rd_kafka_message_headers(message, &raw mut list) };
    if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || list.is_null() {
        return Vec::new();
    }
    // SAFETY: a live list, read before the message goes.
    unsafe { header_list(list) }
}

/// The headers of a librdkafka header list, in order.
///
/// # Safety
/// `list` is a live header list.
unsafe fn header_list(list: *const rdsys::rd_kafka_headers_t) -> Headers {
    let mut out = Vec::new();
    for i in 0.. {
        let mut name: *const std::os::raw::c_char = ptr::null();
        let mut value: *const std::os::raw::c_void = ptr::null();
        let mut size = 0usize;
        // SAFETY: the list is live; name and value stay owned by it.
        let err = unsafe {
            rdsys::rd_kafka_header_get_all(list, i, &raw mut name, &raw mut value, &raw mut size)
        };
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            break;
        }
        // SAFETY: librdkafka nul-terminates names; a value has `size` bytes.
        let value = (!value.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }.to_vec());
        out.push((unsafe { c_string(name) }, value));
    }
    out
}

/// A librdkafka header list of our own, destroyed on drop unless given
/// away to a record that librdkafka accepted.
struct NativeHeaders(*mut rdsys::rd_kafka_headers_t);

impl NativeHeaders {
    /// librdkafka's copy of `headers`; None when there are none (the record
    /// then goes out without a header list, as before headers existed).
    fn new(headers: &[(String, Option<Vec<u8>>)]) -> Option<Self> {
        if headers.is_empty() {
            return None;
        }
        // SAFETY: returns a new, empty list that we own.
        let list = Self(unsafe { rdsys::rd_kafka_headers_new(headers.len()) });
        for (name, value) in headers {
            let (value_ptr, value_len) = value.as_deref().map_or((ptr::null(), 0), |v| {
                (v.as_ptr().cast::<std::os::raw::c_void>(), v.len())
            });
            // SAFETY: the list is ours; name and value are copied (sized, so
            // a name may hold any byte); a null value is a null header.
            unsafe {
                rdsys::rd_kafka_header_add(
                    list.0,
                    name.as_ptr().cast::<std::os::raw::c_char>(),
                    name.len() as isize,
                    value_ptr,
                    value_len as isize,
                );
            }
        }
        Some(list)
    }

    /// Leaves the list to the record librdkafka accepted with it.
    fn given_away(self) {
        std::mem::forget(self);
    }
}

impl Drop for NativeHeaders {
    fn drop(&mut self) {
        // SAFETY: we own the list (librdkafka did not take it).
        unsafe { rdsys::rd_kafka_headers_destroy(self.0) }
    }
}

/// How long `produce_columns` waits for room when the client's queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(20);
/// The longest the background thread waits for a report before it checks
/// that the producer is still alive.
const REPORT_WAIT: Duration = Duration::from_millis(50);
/// The longest a flush waits for a delivery report before it looks again.
const FLUSH_WAIT: Duration = Duration::from_millis(10);

fn millis(duration: Duration) -> i32 {
    i32::try_from(duration.as_millis()).unwrap_or(i32::MAX)
}

impl Producer {
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let inner: BaseProducer<DeliveryContext> = config
            .native()
            .create_with_context(DeliveryContext::default())
            .map_err(|e| ClientConfig::creation_error(&e))?;
        // SAFETY: the client is live; this takes a new reference.
        let queue = unsafe { rdsys::rd_kafka_queue_get_main(inner.client().native_ptr()) };
        Ok(Self {
            queue: MainQueue(queue),
            topics: Mutex::new(HashMap::new()),
            deliveries: Mutex::new(Deliveries::default()),
            background: AtomicBool::new(false),
            inner,
        })
    }

    /// Serves delivery reports and client errors on a thread of its own
    /// from now on, while the producer lives: the caller's thread only
    /// queues records (taking in a report costs about as much as queueing
    /// the record). The thread holds the producer only while it waits for
    /// a report (up to `REPORT_WAIT`), so the last owner still drops it.
    pub fn serve_in_background(self: &Arc<Self>) -> std::io::Result<()> {
        let producer = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("strom-kafka-reports".to_owned())
            .spawn(move || {
                while let Some(producer) = producer.upgrade() {
                    producer.serve(REPORT_WAIT);
                }
            })?;
        self.background.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Records in the client's queue or in flight to the brokers.
    pub fn in_flight(&self) -> usize {
        usize::try_from(self.inner.in_flight_count()).unwrap_or(0)
    }

    /// Serves delivery reports and client errors: waits up to `timeout` for
    /// the first event, then takes only those already there.
    pub fn serve(&self, timeout: Duration) {
        let mut wait = timeout;
        loop {
            // SAFETY: the queue is live; the event is ours until destroyed.
            let event = unsafe { rdsys::rd_kafka_queue_poll(self.queue.0, millis(wait)) };
            if event.is_null() {
                return;
            }
            wait = Duration::ZERO;
            // SAFETY: `event` is live until destroyed at the end.
            unsafe {
                match rdsys::rd_kafka_event_type(event) {
                    rdsys::RD_KAFKA_EVENT_DR => self.take_reports(event),
                    rdsys::RD_KAFKA_EVENT_ERROR => {
                        let code = rdsys::rd_kafka_event_error(event);
                        let reason = c_string(rdsys::rd_kafka_event_error_string(event));
                        let mut error = ClientError::new(code as i32, reason);
                        error.fatal = rdsys::rd_kafka_event_error_is_fatal(event) != 0;
                        self.events().error(error);
                    }
                    _ => {}
                }
                rdsys::rd_kafka_event_destroy(event);
            }
        }
    }

    /// # Safety
    /// `event` is a live delivery-report event.
    unsafe fn take_reports(&self, event: *mut rdsys::rd_kafka_event_t) {
        let count = unsafe { rdsys::rd_kafka_event_message_count(event) };
        let mut messages: Vec<*const rdsys::rd_kafka_message_t> = vec![ptr::null(); count];
        let count =
            unsafe { rdsys::rd_kafka_event_message_array(event, messages.as_mut_ptr(), count) };
        let mut deliveries = lock(&self.deliveries);
        let mut names: Vec<(*mut rdsys::rd_kafka_topic_t, String)> = Vec::new();
        // A report holds runs of one partition's records, mostly of one
        // epoch: counted and acknowledged per run, not per record.
        let mut epoch_run: Option<(u64, u64)> = None;
        let mut ack_run: Option<(usize, i32, i64)> = None;
        for &message in &messages[..count] {
            let m = unsafe { &*message };
            // The opaque `send` gave the record: its epoch.
            let epoch = m._private as usize as u64;
            match &mut epoch_run {
                Some((e, n)) if *e == epoch => *n += 1,
                run => {
                    if let Some((e, n)) = run.replace((epoch, 1)) {
                        deliveries.reported_many(e, n);
                    }
                }
            }
            // One name per topic handle, not one String per record.
            let slot = if let Some(slot) = names.iter().position(|(rkt, _)| *rkt == m.rkt) {
                slot
            } else {
                names.push((m.rkt, unsafe {
                    c_string(rdsys::rd_kafka_topic_name(m.rkt))
                }));
                names.len() - 1
            };
            if m.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                match &mut ack_run {
                    Some((s, p, end)) if *s == slot && *p == m.partition => {
                        *end = (*end).max(m.offset);
                    }
                    run => {
                        if let Some((s, p, end)) = run.replace((slot, m.partition, m.offset)) {
                            deliveries.acknowledged(&names[s].1, p, end);
                        }
                    }
                }
                continue;
            }
            let topic = &names[slot].1;
            // (rd_kafka_message_errstr would return the record's own
            // payload: it is meant for consumer errors.)
            let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
            let timestamp = unsafe { rdsys::rd_kafka_message_timestamp(message, &raw mut kind) };
            let bytes = |data: *const std::os::raw::c_void, len: usize| {
                (!data.is_null())
                    .then(|| unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec())
            };
            let mut error = ClientError::new(m.err as i32, describe(m.err as i32));
            error.fatal = self.inner.client().fatal_error().is_some();
            deliveries.failures.push(Failure {
                topic: topic.clone(),
                partition: m.partition,
                key: bytes(m.key, m.key_len),
                value: bytes(m.payload, m.len),
                timestamp,
                // SAFETY: the report's message is live until destroyed below.
                headers: unsafe { message_headers(message) },
                error,
                queued: true,
            });
        }
        if let Some((e, n)) = epoch_run {
            deliveries.reported_many(e, n);
        }
        if let Some((s, p, end)) = ack_run {
            deliveries.acknowledged(&names[s].1, p, end);
        }
    }

    pub fn events(&self) -> &Events {
        &self.inner.context().base.events
    }

    /// Queues every record of `columns` for `topic`; records the client
    /// refuses outright become failures (`queued: false`). Serves delivery
    /// reports once at the end (and while waiting for room).
    pub fn produce_columns(&self, topic: &str, columns: &Columns, partitioning: Partitioning<'_>) {
        self.produce_records(topic, columns.len(), partitioning, |i| Record {
            key: columns.bytes(columns.keys[i]),
            value: columns.bytes(columns.values[i]),
            timestamp: columns.timestamps.get(i).copied().unwrap_or(0),
            headers: columns.headers(i),
        });
    }

    /// As [`Producer::produce_columns`], for `count` records that
    /// `record(i)` gives.
    pub fn produce_records<'a>(
        &self,
        topic: &str,
        count: usize,
        partitioning: Partitioning<'_>,
        record: impl Fn(usize) -> Record<'a>,
    ) {
        let epoch = self.open_epoch(count);
        let rkt = match self.topic(topic) {
            Ok(rkt) => rkt,
            Err(error) => {
                let mut deliveries = lock(&self.deliveries);
                for i in 0..count {
                    let record = record(i);
                    deliveries.reported(epoch);
                    deliveries.failures.push(Failure {
                        topic: topic.to_owned(),
                        partition: -1,
                        key: record.key.map(<[u8]>::to_vec),
                        value: record.value.map(<[u8]>::to_vec),
                        timestamp: record.timestamp,
                        headers: record.headers.to_vec(),
                        error: error.clone(),
                        queued: false,
                    });
                }
                return;
            }
        };
        for i in 0..count {
            let record = record(i);
            let partition = match partitioning {
                Partitioning::Explicit(partitions) => partitions[i],
                Partitioning::ByKey { partitions } => {
                    record.key.map_or(RD_KAFKA_PARTITION_UA, |k| {
                        partition_for_key(k, partitions) as i32
                    })
                }
            };
            self.send_to(rkt, topic, &record, partition, epoch);
        }
        if !self.background.load(Ordering::Relaxed) {
            self.serve(Duration::ZERO);
        }
    }

    /// The handle of `topic` (opened on first use, kept until the producer closes).
    fn topic(&self, topic: &str) -> Result<*mut rdsys::rd_kafka_topic_t> {
        let mut topics = lock(&self.topics);
        if let Some(handle) = topics.get(topic) {
            return Ok(handle.0);
        }
        let name = std::ffi::CString::new(topic)
            .map_err(|_| ClientError::fail(format!("topic name {topic:?} has a nul byte")))?;
        // SAFETY: the client is live; a null config takes the producer's topic defaults.
        let rkt = unsafe {
            rdsys::rd_kafka_topic_new(
                self.inner.client().native_ptr(),
                name.as_ptr(),
                ptr::null_mut(),
            )
        };
        if rkt.is_null() {
            // SAFETY: reads librdkafka's thread-local last error.
            let err = unsafe { rdsys::rd_kafka_last_error() };
            return Err(ClientError::from_resp(
                err,
                &format!("producing to {topic}"),
            ));
        }
        topics.insert(topic.to_owned(), TopicHandle(rkt));
        Ok(rkt)
    }

    /// Queues one record by topic handle (`partition` may be
    /// `RD_KAFKA_PARTITION_UA`: the client's partitioner chooses); waits for
    /// room while the queue is full; a refused record becomes a failure.
    fn send_to(
        &self,
        rkt: *mut rdsys::rd_kafka_topic_t,
        topic: &str,
        record: &Record<'_>,
        partition: i32,
        epoch: u64,
    ) {
        let (key, value) = (record.key, record.value);
        let (key_ptr, key_len) = key.map_or((ptr::null(), 0), |k| (k.as_ptr(), k.len()));
        let (value_ptr, value_len) = value.map_or((ptr::null(), 0), |v| (v.as_ptr(), v.len()));
        let opaque = usize::try_from(epoch).unwrap_or(usize::MAX) as *mut std::os::raw::c_void;
        // 0: the client stamps the record with the current time.
        let timestamp = record.timestamp.max(0);
        // Built once, kept across QUEUE_FULL retries: librdkafka takes them
        // over only when it accepts the record.
        let headers = NativeHeaders::new(record.headers);
        let native_headers = headers.as_ref().map_or(ptr::null_mut(), |h| h.0);
        loop {
            let rk = self.inner.client().native_ptr();
            // SAFETY: the client and the topic handle are live; the key and
            // value are copied (F_COPY) before the call returns; the headers
            // are live, and librdkafka owns them only if it returns NO_ERROR.
            let err = unsafe {
                rdsys::rd_kafka_producev(
                    rk,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT,
                    rkt,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                    partition,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                    rdsys::RD_KAFKA_MSG_F_COPY,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                    value_ptr,
                    value_len,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
                    key_ptr,
                    key_len,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE,
                    opaque,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TIMESTAMP,
                    timestamp,
                    // A null list is no headers.
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
                    native_headers,
                    rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
                )
            };
            match err {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR => {
                    if let Some(headers) = headers {
                        headers.given_away(); // the record owns them now
                    }
                    return;
                }
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL => self.serve(QUEUE_FULL_WAIT),
                err => {
                    // Refused: the headers are still ours, destroyed on drop.
                    let mut deliveries = lock(&self.deliveries);
                    deliveries.reported(epoch); // refused: no report will come
                    deliveries.failures.push(Failure {
                        topic: topic.to_owned(),
                        partition,
                        key: key.map(<[u8]>::to_vec),
                        value: value.map(<[u8]>::to_vec),
                        timestamp,
                        headers: record.headers.to_vec(),
                        error: ClientError::from_resp(err, "producing"),
                        queued: false,
                    });
                    return;
                }
            }
        }
    }

    /// Counts `records` about to be sent in the current epoch (before they
    /// are sent: a report may come while `send` waits for room); returns it.
    fn open_epoch(&self, records: usize) -> u64 {
        let mut deliveries = lock(&self.deliveries);
        let epoch = deliveries.epoch;
        if records > 0 {
            *deliveries.unreported.entry(epoch).or_default() += records as u64;
        }
        epoch
    }

    /// Closes the current epoch: records sent from now on belong to the
    /// next. Returns the closed epoch, for [`Producer::reported_through`].
    pub fn mark(&self) -> u64 {
        let mut deliveries = lock(&self.deliveries);
        deliveries.epoch += 1;
        deliveries.epoch - 1
    }

    /// The number of closed epochs (from the first) whose every record has
    /// been reported, acknowledged or failed: epochs `0..n` are done. The
    /// runtime commits the input offsets of an epoch once it is done
    /// (`at_least_once` without waiting for a flush).
    pub fn reported_through(&self) -> u64 {
        let deliveries = lock(&self.deliveries);
        let first_open = deliveries.unreported.keys().next().copied();
        first_open.map_or(deliveries.epoch, |e| e.min(deliveries.epoch))
    }

    /// One record, with headers (dead letters), on the client's partitioner.
    pub fn produce(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &[(String, Option<Vec<u8>>)],
    ) {
        let mut owned = OwnedHeaders::new_with_capacity(headers.len());
        for (name, value) in headers {
            owned = owned.insert(Header {
                key: name,
                value: value.as_deref(),
            });
        }
        let epoch = self.open_epoch(1);
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(topic, usize::try_from(epoch).unwrap_or(usize::MAX));
        record.key = key;
        record.payload = value;
        if timestamp > 0 {
            record.timestamp = Some(timestamp);
        }
        record.headers = Some(owned);
        loop {
            match self.inner.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.serve(QUEUE_FULL_WAIT);
                }
                Err((error, back)) => {
                    let mut deliveries = lock(&self.deliveries);
                    deliveries.reported(epoch); // refused: no report will come
                    deliveries.failures.push(Failure {
                        topic: topic.to_owned(),
                        partition: -1,
                        key: back.key.map(<[u8]>::to_vec),
                        value: back.payload.map(<[u8]>::to_vec),
                        timestamp,
                        headers: headers.to_vec(),
                        error: ClientError::new(
                            error.rdkafka_error_code().map_or(-196, |c| c as i32),
                            error.to_string(),
                        ),
                        queued: false,
                    });
                    break;
                }
            }
        }
        self.serve(Duration::ZERO);
    }

    /// Waits until every queued record is acknowledged or failed, or the
    /// timeout passes; returns how many are still in flight.
    pub fn flush(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let rk = self.inner.client().native_ptr();
        loop {
            self.serve(Duration::ZERO);
            // With a zero timeout rd_kafka_flush wakes the brokers and tells
            // whether anything is left: in flight, or reported and not yet
            // served (with reports as events it cannot serve them itself,
            // so a longer wait in it would only wait for us). Records still
            // lingering leave within `linger.ms`.
            // SAFETY: the client is live.
            let left = unsafe { rdsys::rd_kafka_flush(rk, 0) };
            if left == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                return 0;
            }
            let now = Instant::now();
            if now >= deadline {
                return usize::try_from(self.inner.in_flight_count()).unwrap_or(0);
            }
            let wait = (deadline - now).min(FLUSH_WAIT);
            if self.background.load(Ordering::Relaxed) {
                // The report thread serves the reports (waiting on the queue
                // here could miss the last one): rd_kafka_flush wakes as soon
                // as it has, when the last record is let go.
                // SAFETY: the client is live.
                unsafe { rdsys::rd_kafka_flush(rk, millis(wait)) };
            } else {
                self.serve(wait);
            }
        }
    }

    /// Partitions whose acknowledged end moved since the last call, with
    /// the offset after their last acknowledged record.
    pub fn take_written(&self) -> Vec<(String, i32, i64)> {
        let mut deliveries = lock(&self.deliveries);
        let mut out = Vec::new();
        for (topic, partitions) in &mut deliveries.written {
            for (partition, (end, moved)) in partitions.iter_mut() {
                if std::mem::take(moved) {
                    out.push((topic.clone(), *partition, *end));
                }
            }
        }
        out
    }

    /// Forgets a partition's acknowledged end (a changelog being restored).
    pub fn forget_written(&self, topic: &str, partition: i32) {
        if let Some(partitions) = lock(&self.deliveries).written.get_mut(topic) {
            partitions.remove(&partition);
        }
    }

    pub fn take_failures(&self) -> Vec<Failure> {
        std::mem::take(&mut lock(&self.deliveries).failures)
    }

    /// The client's fatal error (fenced, or the transaction coordinator
    /// refused it for good), if it has one.
    pub fn fatal_error(&self) -> Option<ClientError> {
        self.inner
            .client()
            .fatal_error()
            .map(|(code, reason)| ClientError {
                fatal: true,
                ..ClientError::new(code as i32, reason)
            })
    }

    pub fn init_transactions(&self, timeout: Duration) -> Result<()> {
        self.inner
            .init_transactions(timeout)
            .map_err(|e| ClientError::from_kafka(&e, "initializing transactions"))
    }

    pub fn begin_transaction(&self) -> Result<()> {
        self.inner
            .begin_transaction()
            .map_err(|e| ClientError::from_kafka(&e, "beginning a transaction"))
    }

    /// Adds the consumer's input offsets to the open transaction.
    pub fn send_offsets_to_transaction(
        &self,
        offsets: &[(String, i32, i64, Option<String>)],
        consumer: &Consumer,
        timeout: Duration,
    ) -> Result<()> {
        let metadata = consumer.group_metadata().ok_or_else(|| {
            ClientError::fail("the consumer has no group metadata (not a group member)")
        })?;
        let mut list = TopicPartitionList::with_capacity(offsets.len());
        for (topic, partition, offset, meta) in offsets {
            let mut elem = list.add_partition(topic, *partition);
            elem.set_offset(Offset::from_raw(*offset))
                .map_err(|e| ClientError::from_kafka(&e, "setting an offset"))?;
            if let Some(meta) = meta {
                elem.set_metadata(meta.as_str());
            }
        }
        self.inner
            .send_offsets_to_transaction(&list, &metadata, timeout)
            .map_err(|e| ClientError::from_kafka(&e, "sending offsets to the transaction"))
    }

    pub fn commit_transaction(&self, timeout: Duration) -> Result<()> {
        // rdkafka flushes first, serving reports in 100 ms steps through a
        // context that ignores them: flush (and take the reports) here.
        self.flush(timeout);
        self.inner
            .commit_transaction(timeout)
            .map_err(|e| ClientError::from_kafka(&e, "committing the transaction"))
    }

    pub fn abort_transaction(&self, timeout: Duration) -> Result<()> {
        self.inner
            .abort_transaction(timeout)
            .map_err(|e| ClientError::from_kafka(&e, "aborting the transaction"))
            .inspect(|()| self.serve(Duration::ZERO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The headers of a librdkafka list, read back as we gave them.
    fn read_back(list: &NativeHeaders) -> Headers {
        // SAFETY: the list is live while `list` is.
        unsafe { header_list(list.0) }
    }

    #[test]
    fn native_headers_keep_order_duplicates_and_null_values() {
        let headers: Headers = vec![
            ("trace".to_owned(), Some(b"abc".to_vec())),
            ("null".to_owned(), None),
            ("empty".to_owned(), Some(Vec::new())),
            ("trace".to_owned(), Some(vec![0, 255])),
            ("\u{e9}t\u{e9}".to_owned(), Some(b"x".to_vec())),
        ];
        let list = NativeHeaders::new(&headers).expect("a list for records with headers");
        assert_eq!(read_back(&list), headers);
    }

    #[test]
    fn no_headers_is_no_list() {
        assert!(NativeHeaders::new(&[]).is_none());
    }
}
