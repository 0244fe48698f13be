use std::collections::HashMap;
use std::ffi::CString;
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _, ConsumerContext};
use rdkafka::groups::GroupList;
use rdkafka::metadata::Metadata;
use rdkafka::types::{RDKafkaRespErr, RDKafkaTopicPartitionList};
use rdkafka::{Offset, TopicPartitionList};
use strom_core::log::{ReadBatch, Span};

use crate::client::{ClientConfig, Context, Events, check, lock};
use crate::error::{ClientError, Result, c_string};
use crate::producer::message_headers;

/// A partition and an offset (and the metadata committed with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: Option<String>,
}

/// A committed offset as the group coordinator returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub topic: String,
    pub partition: i32,
    /// Negative when the group has none for the partition.
    pub offset: i64,
    pub metadata: String,
    pub error: Option<ClientError>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebalanceKind {
    Assign,
    Revoke,
    /// Revoked without a chance to commit (the member was fenced or timed out).
    Lost,
}

/// A group rebalance handed to the caller, who must (incrementally) assign
/// or unassign the partitions before polling on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebalanceEvent {
    Change {
        kind: RebalanceKind,
        partitions: Vec<(String, i32)>,
    },
    Error(ClientError),
}

/// What one [`Consumer::poll`] met.
#[derive(Debug, Default)]
pub struct Polled {
    /// Per partition, its records in offset order; partitions in the order first met.
    pub batches: Vec<(String, i32, ReadBatch)>,
    /// Partitions whose end was reached (with `enable.partition.eof`).
    pub eofs: Vec<(String, i32)>,
    /// Errors met: per partition (topic and partition known) or of the client.
    pub errors: Vec<(Option<(String, i32)>, ClientError)>,
    /// A rebalance ends the poll: records before it are in `batches`.
    pub rebalance: Option<RebalanceEvent>,
    /// Results of asynchronous commits: per partition, the offset and the
    /// error that kept it from being committed, if any.
    pub commits: Vec<(String, i32, i64, Option<ClientError>)>,
}

impl Polled {
    pub fn records(&self) -> usize {
        self.batches.iter().map(|(_, _, b)| b.len()).sum()
    }
}

/// Rebalances are events this module hands to its caller; the trait's
/// default (assign or unassign as told) runs only while the client closes.
impl ConsumerContext for Context {}

/// Owns one reference to a librdkafka queue.
struct Queue(*mut rdsys::rd_kafka_queue_t);

// SAFETY: librdkafka queues are thread-safe.
unsafe impl Send for Queue {}
unsafe impl Sync for Queue {}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: we own one reference, taken by rd_kafka_queue_get_*.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

/// A Kafka consumer: a group member (with `group.id`, after `subscribe`) or
/// manually assigned (no `group.id`: it joins no group, asks no coordinator,
/// and so needs no group ACL; librdkafka's assign needs a group, so its
/// partitions are read with the simple consumer's per-partition start/stop).
pub struct Consumer {
    // Dropped before `inner` (fields drop in order): they hold references into the client.
    queue: Queue,
    main: Option<Queue>,
    assigned: Mutex<HashMap<(String, i32), Topic>>,
    topics: Mutex<HashMap<String, Topic>>,
    group: bool,
    /// Whether polled records carry their headers (parsing them costs an
    /// allocation per record; the stream threads never read them).
    headers: AtomicBool,
    inner: BaseConsumer<Context>,
}

/// Owns one reference to a librdkafka topic handle.
#[derive(Clone, Copy)]
struct Topic(*mut rdsys::rd_kafka_topic_t);

// SAFETY: librdkafka topic handles are thread-safe.
unsafe impl Send for Topic {}

const FAR: Duration = Duration::from_secs(3600);

impl Consumer {
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let inner: BaseConsumer<Context> = config
            .native()
            .create_with_context(Context::default())
            .map_err(|e| ClientConfig::creation_error(&e))?;
        let rk = inner.client().native_ptr();
        let group = config.get("group.id").is_some();
        // SAFETY: rk is the live client; each call returns a new reference.
        let (queue, main) = unsafe {
            if group {
                (rdsys::rd_kafka_queue_get_consumer(rk), None)
            } else {
                (
                    rdsys::rd_kafka_queue_new(rk),
                    Some(Queue(rdsys::rd_kafka_queue_get_main(rk))),
                )
            }
        };
        if queue.is_null() {
            return Err(ClientError::fail("the consumer has no queue to poll"));
        }
        Ok(Self {
            queue: Queue(queue),
            main,
            assigned: Mutex::new(HashMap::new()),
            topics: Mutex::new(HashMap::new()),
            group,
            headers: AtomicBool::new(true),
            inner,
        })
    }

    pub fn events(&self) -> &Events {
        &self.inner.context().events
    }

    /// Whether records polled from now on carry their headers (else none).
    pub fn read_headers(&self, read: bool) {
        self.headers.store(read, Ordering::Relaxed);
    }

    fn rk(&self) -> *mut rdsys::rd_kafka_t {
        self.inner.client().native_ptr()
    }

    pub fn subscribe(&self, topics: &[String]) -> Result<()> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        check(self.inner.subscribe(&names), "subscribing")
    }

    /// Leaves the subscription (the group rebalances without this member).
    pub fn unsubscribe(&self) {
        self.inner.unsubscribe();
    }

    pub fn assign(&self, partitions: &[PartitionOffset]) -> Result<()> {
        if self.group {
            return check(self.inner.assign(&offset_list(partitions)?), "assigning");
        }
        self.unassign()?;
        self.incremental_assign(partitions)
    }

    pub fn unassign(&self) -> Result<()> {
        if self.group {
            return check(self.inner.unassign(), "unassigning");
        }
        let current: Vec<(String, i32)> = lock(&self.assigned).keys().cloned().collect();
        self.incremental_unassign(&current)
    }

    /// Adds partitions, each read from its offset (a partition already
    /// assigned moves to the new offset).
    pub fn incremental_assign(&self, partitions: &[PartitionOffset]) -> Result<()> {
        if self.group {
            return check(
                self.inner.incremental_assign(&offset_list(partitions)?),
                "assigning",
            );
        }
        for p in partitions {
            let key = (p.topic.clone(), p.partition);
            self.stop(&key)?;
            let topic = self.topic(&p.topic)?;
            // SAFETY: the topic handle and the queue are live.
            let started = unsafe {
                rdsys::rd_kafka_consume_start_queue(topic.0, p.partition, p.offset, self.queue.0)
            };
            if started == -1 {
                // SAFETY: reads librdkafka's thread-local last error.
                let err = unsafe { rdsys::rd_kafka_last_error() };
                return Err(ClientError::from_resp(
                    err,
                    &format!("reading {}-{}", p.topic, p.partition),
                ));
            }
            lock(&self.assigned).insert(key, topic);
        }
        Ok(())
    }

    pub fn incremental_unassign(&self, partitions: &[(String, i32)]) -> Result<()> {
        if self.group {
            return check(
                self.inner.incremental_unassign(&partition_list(partitions)),
                "unassigning",
            );
        }
        for key in partitions {
            self.stop(key)?;
        }
        Ok(())
    }

    /// Stops fetching from `partitions` (assigned ones; they stay assigned,
    /// so a group keeps them) until [`Consumer::resume`].
    pub fn pause(&self, partitions: &[(String, i32)]) -> Result<()> {
        check(self.inner.pause(&partition_list(partitions)), "pausing")
    }

    /// Fetches from paused `partitions` again.
    pub fn resume(&self, partitions: &[(String, i32)]) -> Result<()> {
        check(self.inner.resume(&partition_list(partitions)), "resuming")
    }

    fn stop(&self, key: &(String, i32)) -> Result<()> {
        let Some(topic) = lock(&self.assigned).remove(key) else {
            return Ok(());
        };
        // SAFETY: the topic handle is live.
        if unsafe { rdsys::rd_kafka_consume_stop(topic.0, key.1) } == -1 {
            let err = unsafe { rdsys::rd_kafka_last_error() };
            return Err(ClientError::from_resp(
                err,
                &format!("stopping {}-{}", key.0, key.1),
            ));
        }
        Ok(())
    }

    fn topic(&self, name: &str) -> Result<Topic> {
        let mut topics = lock(&self.topics);
        if let Some(topic) = topics.get(name) {
            return Ok(*topic);
        }
        let c_name =
            CString::new(name).map_err(|_| ClientError::fail("a topic name has a nul byte"))?;
        // SAFETY: rk is live; a null config takes the client's defaults.
        let handle =
            unsafe { rdsys::rd_kafka_topic_new(self.rk(), c_name.as_ptr(), ptr::null_mut()) };
        if handle.is_null() {
            let err = unsafe { rdsys::rd_kafka_last_error() };
            return Err(ClientError::from_resp(
                err,
                &format!("opening topic {name}"),
            ));
        }
        topics.insert(name.to_owned(), Topic(handle));
        Ok(Topic(handle))
    }

    /// Commits `offsets` (with their metadata); `wait`: for the coordinator,
    /// else the result comes with a later [`Consumer::poll`] (`commits`).
    pub fn commit(&self, offsets: &[PartitionOffset], wait: bool) -> Result<()> {
        let mode = if wait {
            CommitMode::Sync
        } else {
            CommitMode::Async
        };
        check(
            self.inner.commit(&offset_list(offsets)?, mode),
            "committing offsets",
        )
    }

    pub fn committed(
        &self,
        partitions: &[(String, i32)],
        timeout: Duration,
    ) -> Result<Vec<Committed>> {
        let list = self
            .inner
            .committed_offsets(partition_list(partitions), timeout)
            .map_err(|e| ClientError::from_kafka(&e, "reading the committed offsets"))?;
        Ok(list
            .elements()
            .iter()
            .map(|e| Committed {
                topic: e.topic().to_owned(),
                partition: e.partition(),
                offset: e.offset().to_raw().unwrap_or(-1),
                metadata: e.metadata().to_owned(),
                error: e
                    .error()
                    .err()
                    .map(|err| ClientError::from_kafka(&err, "reading the committed offset")),
            })
            .collect())
    }

    /// Per `(topic, partition, timestamp)`: the offset of the partition's
    /// first record whose timestamp is at least `timestamp`, or -1 when it
    /// has none (librdkafka's `offsets_for_times`, Kafka's `ListOffsets`).
    pub fn offsets_for_times(
        &self,
        wanted: &[(String, i32, i64)],
        timeout: Duration,
    ) -> Result<Vec<PartitionOffset>> {
        let asked: Vec<PartitionOffset> = wanted
            .iter()
            .map(|(topic, partition, timestamp)| PartitionOffset {
                topic: topic.clone(),
                partition: *partition,
                offset: *timestamp,
                metadata: None,
            })
            .collect();
        let list = self
            .inner
            .offsets_for_times(offset_list(&asked)?, timeout)
            .map_err(|e| ClientError::from_kafka(&e, "looking up offsets by timestamp"))?;
        list.elements()
            .iter()
            .map(|e| {
                if let Err(err) = e.error() {
                    let at = format!(
                        "looking up an offset by timestamp in {}-{}",
                        e.topic(),
                        e.partition()
                    );
                    return Err(ClientError::from_kafka(&err, &at));
                }
                Ok(PartitionOffset {
                    topic: e.topic().to_owned(),
                    partition: e.partition(),
                    offset: e.offset().to_raw().unwrap_or(-1),
                    metadata: None,
                })
            })
            .collect()
    }

    /// The next offset to fetch per partition (negative when not known yet).
    pub fn position(&self, partitions: &[(String, i32)]) -> Result<Vec<i64>> {
        let list = partition_list(partitions);
        // SAFETY: rk is live; list is a valid list we own.
        let err = unsafe { rdsys::rd_kafka_position(self.rk(), list.ptr()) };
        resp_result(err, "reading positions")?;
        Ok(list
            .elements()
            .iter()
            .map(|e| e.offset().to_raw().unwrap_or(-1))
            .collect())
    }

    /// Low and high watermark: the last ones fetched (`cached`; -1 when none
    /// yet) or asked of the partition's leader.
    pub fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        cached: bool,
        timeout: Duration,
    ) -> Result<(i64, i64)> {
        if !cached {
            return self
                .inner
                .fetch_watermarks(topic, partition, timeout)
                .map_err(|e| {
                    ClientError::from_kafka(
                        &e,
                        &format!("reading the offsets of {topic}-{partition}"),
                    )
                });
        }
        let name =
            CString::new(topic).map_err(|_| ClientError::fail("a topic name has a nul byte"))?;
        let (mut low, mut high) = (-1_i64, -1_i64);
        // SAFETY: rk is live; the out-pointers are ours.
        let err = unsafe {
            rdsys::rd_kafka_get_watermark_offsets(
                self.rk(),
                name.as_ptr(),
                partition,
                &raw mut low,
                &raw mut high,
            )
        };
        resp_result(err, "reading cached offsets")?;
        Ok((low, high))
    }

    pub fn fetch_metadata(&self, topic: Option<&str>, timeout: Duration) -> Result<Metadata> {
        self.inner
            .fetch_metadata(topic, timeout)
            .map_err(|e| ClientError::from_kafka(&e, "reading metadata"))
    }

    pub fn fetch_group_list(&self, group: Option<&str>, timeout: Duration) -> Result<GroupList> {
        self.inner
            .fetch_group_list(group, timeout)
            .map_err(|e| ClientError::from_kafka(&e, "listing groups"))
    }

    pub fn group_metadata(&self) -> Option<rdkafka::consumer::ConsumerGroupMetadata> {
        self.inner.group_metadata()
    }

    /// Polls records (at most `max_records`; waits up to `timeout` for the
    /// first, then takes only what is already fetched) and stops early at a
    /// rebalance, which the caller handles before polling again.
    pub fn poll(&self, max_records: usize, timeout: Duration) -> Polled {
        let mut polled = Polled::default();
        // The partition of each batch, by position (a few: searched from the
        // last, which a FETCH event's messages mostly belong to).
        let mut index: Vec<(*mut rdsys::rd_kafka_topic_t, i32)> = Vec::new();
        let mut count = 0usize;
        let headers = self.headers.load(Ordering::Relaxed);
        let deadline = Instant::now() + timeout.min(FAR);
        if let Some(main) = &self.main {
            // Client errors of a manually assigned consumer: its main queue.
            loop {
                // SAFETY: the queue is live; the event is destroyed below.
                let event = unsafe { rdsys::rd_kafka_queue_poll(main.0, 0) };
                if event.is_null() {
                    break;
                }
                unsafe {
                    if rdsys::rd_kafka_event_type(event) == rdsys::RD_KAFKA_EVENT_ERROR {
                        take_error(&mut polled, event);
                    }
                    rdsys::rd_kafka_event_destroy(event);
                }
            }
        }
        while count < max_records {
            let wait = if count > 0 || !polled.errors.is_empty() || !polled.eofs.is_empty() {
                Duration::ZERO
            } else {
                deadline.saturating_duration_since(Instant::now())
            };
            // SAFETY: the queue is live; the event is ours until destroyed below.
            let event = unsafe { rdsys::rd_kafka_queue_poll(self.queue.0, millis(wait)) };
            if event.is_null() {
                break;
            }
            let kind = unsafe { rdsys::rd_kafka_event_type(event) };
            let stop = match kind {
                rdsys::RD_KAFKA_EVENT_FETCH => {
                    // SAFETY: messages of a FETCH event, valid until it is destroyed.
                    loop {
                        let message = unsafe { rdsys::rd_kafka_event_message_next(event) };
                        if message.is_null() {
                            break;
                        }
                        count += unsafe { take_message(&mut polled, &mut index, message, headers) };
                    }
                    false
                }
                rdsys::RD_KAFKA_EVENT_ERROR => {
                    unsafe { take_error(&mut polled, event) };
                    false
                }
                rdsys::RD_KAFKA_EVENT_REBALANCE => {
                    polled.rebalance = Some(unsafe { self.take_rebalance(event) });
                    true
                }
                rdsys::RD_KAFKA_EVENT_OFFSET_COMMIT => {
                    unsafe { take_commit(&mut polled, event) };
                    false
                }
                // Stats, logs.
                _ => false,
            };
            unsafe { rdsys::rd_kafka_event_destroy(event) };
            if stop {
                break;
            }
        }
        polled
    }

    /// # Safety
    /// `event` is a live REBALANCE event.
    unsafe fn take_rebalance(&self, event: *mut rdsys::rd_kafka_event_t) -> RebalanceEvent {
        let err = unsafe { rdsys::rd_kafka_event_error(event) };
        let list = unsafe { rdsys::rd_kafka_event_topic_partition_list(event) };
        let partitions = unsafe { partitions_of(list) };
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => RebalanceEvent::Change {
                kind: RebalanceKind::Assign,
                partitions,
            },
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // SAFETY: rk is live.
                let lost = unsafe { rdsys::rd_kafka_assignment_lost(self.rk()) } != 0;
                RebalanceEvent::Change {
                    kind: if lost {
                        RebalanceKind::Lost
                    } else {
                        RebalanceKind::Revoke
                    },
                    partitions,
                }
            }
            other => RebalanceEvent::Error(ClientError::from_resp(other, "rebalancing")),
        }
    }

    /// Leaves the group (a group member) or stops reading its partitions.
    /// The caller has committed and closed its tasks: revocations met on
    /// the way out are only applied.
    pub fn close(&self) -> Result<()> {
        if !self.group {
            return self.unassign();
        }
        self.inner
            .close_queue()
            .map_err(|e| ClientError::from_kafka(&e, "closing the consumer"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.inner.closed() && Instant::now() < deadline {
            let polled = self.poll(usize::MAX, Duration::from_millis(100));
            if let Some(RebalanceEvent::Change { partitions, .. }) = polled.rebalance {
                self.incremental_unassign(&partitions)?;
            }
        }
        Ok(())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if !self.group {
            let _ = self.unassign();
        }
        for (_, topic) in lock(&self.topics).drain() {
            // SAFETY: we own this reference.
            unsafe { rdsys::rd_kafka_topic_destroy(topic.0) };
        }
    }
}

fn millis(duration: Duration) -> i32 {
    i32::try_from(duration.as_millis()).unwrap_or(i32::MAX)
}

fn resp_result(err: RDKafkaRespErr, what: &str) -> Result<()> {
    if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(ClientError::from_resp(err, what))
    }
}

fn partition_list(partitions: &[(String, i32)]) -> TopicPartitionList {
    let mut list = TopicPartitionList::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        list.add_partition(topic, *partition);
    }
    list
}

fn offset_list(offsets: &[PartitionOffset]) -> Result<TopicPartitionList> {
    let mut list = TopicPartitionList::with_capacity(offsets.len());
    for o in offsets {
        let mut elem = list.add_partition(&o.topic, o.partition);
        elem.set_offset(Offset::from_raw(o.offset))
            .map_err(|e| ClientError::from_kafka(&e, "setting an offset"))?;
        if let Some(metadata) = &o.metadata {
            elem.set_metadata(metadata.as_str());
        }
    }
    Ok(list)
}

/// # Safety
/// `list` is null or a valid list.
unsafe fn partitions_of(list: *mut RDKafkaTopicPartitionList) -> Vec<(String, i32)> {
    if list.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller's promise: `cnt` elements at `elems`.
    let elems = unsafe { std::slice::from_raw_parts((*list).elems, (*list).cnt as usize) };
    elems
        .iter()
        .map(|e| (unsafe { c_string(e.topic) }, e.partition))
        .collect()
}

/// Appends a fetched message (or its error) to `polled`; returns 1 for a record.
///
/// # Safety
/// `message` is a live message of a FETCH event.
unsafe fn take_message(
    polled: &mut Polled,
    index: &mut Vec<(*mut rdsys::rd_kafka_topic_t, i32)>,
    message: *const rdsys::rd_kafka_message_t,
    headers: bool,
) -> usize {
    let m = unsafe { &*message };
    if m.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        let topic = if m.rkt.is_null() {
            None
        } else {
            Some(unsafe { c_string(rdsys::rd_kafka_topic_name(m.rkt)) })
        };
        if m.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF {
            if let Some(topic) = topic {
                polled.eofs.push((topic, m.partition));
            }
            return 0;
        }
        let reason = unsafe { c_string(rdsys::rd_kafka_message_errstr(message)) };
        let where_ = topic.map(|t| (t, m.partition));
        let what = match &where_ {
            Some((t, p)) => format!("consuming {t}-{p}"),
            None => "consuming".to_owned(),
        };
        let mut error = ClientError::new(m.err as i32, format!("{what}: {reason}"));
        error.fatal = m.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__FATAL;
        polled.errors.push((where_, error));
        return 0;
    }
    let key = (m.rkt, m.partition);
    let slot = if let Some(slot) = index.iter().rposition(|k| *k == key) {
        slot
    } else {
        let topic = unsafe { c_string(rdsys::rd_kafka_topic_name(m.rkt)) };
        polled
            .batches
            .push((topic, m.partition, ReadBatch::default()));
        index.push(key);
        index.len() - 1
    };
    let batch = &mut polled.batches[slot].2;
    let key = unsafe { copy_span(&mut batch.data, m.key.cast(), m.key_len) };
    let value = unsafe { copy_span(&mut batch.data, m.payload.cast(), m.len) };
    batch.keys.push(key);
    batch.values.push(value);
    batch.offsets.push(m.offset as u64);
    batch.next_offset = m.offset as u64 + 1;
    let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
    let timestamp = unsafe { rdsys::rd_kafka_message_timestamp(message, &raw mut kind) };
    batch.timestamps.push(timestamp);
    if headers {
        batch.push_headers(unsafe { message_headers(message) });
    }
    1
}

/// # Safety
/// `data` is null or points at `len` readable bytes.
unsafe fn copy_span(buffer: &mut Vec<u8>, data: *const u8, len: usize) -> Option<Span> {
    if data.is_null() {
        return None;
    }
    let start = buffer.len();
    // SAFETY: the caller's promise.
    buffer.extend_from_slice(unsafe { std::slice::from_raw_parts(data, len) });
    Some(Span { start, len })
}

/// # Safety
/// `event` is a live ERROR event.
/// Takes the result of an asynchronous commit.
///
/// # Safety
/// `event` is a live `OFFSET_COMMIT` event.
unsafe fn take_commit(polled: &mut Polled, event: *mut rdsys::rd_kafka_event_t) {
    let err = unsafe { rdsys::rd_kafka_event_error(event) };
    let list = unsafe { rdsys::rd_kafka_event_topic_partition_list(event) };
    if list.is_null() {
        return;
    }
    // SAFETY: `cnt` elements at `elems`, live with the event.
    let elems = unsafe { std::slice::from_raw_parts((*list).elems, (*list).cnt as usize) };
    for e in elems {
        // A partition's own error, else the request's.
        let code = if e.err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            err
        } else {
            e.err
        };
        let error = (code != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR)
            .then(|| ClientError::from_resp(code, "committing offsets"));
        let topic = unsafe { c_string(e.topic) };
        polled.commits.push((topic, e.partition, e.offset, error));
    }
}

unsafe fn take_error(polled: &mut Polled, event: *mut rdsys::rd_kafka_event_t) {
    let err = unsafe { rdsys::rd_kafka_event_error(event) };
    if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        return;
    }
    let tp = unsafe { rdsys::rd_kafka_event_topic_partition(event) };
    let where_ = if tp.is_null() {
        None
    } else {
        let found = unsafe { (c_string((*tp).topic), (*tp).partition) };
        unsafe { rdsys::rd_kafka_topic_partition_destroy(tp) };
        Some(found)
    };
    if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF {
        if let Some(found) = where_ {
            polled.eofs.push(found);
        }
        return;
    }
    let reason = unsafe { c_string(rdsys::rd_kafka_event_error_string(event)) };
    let mut error = ClientError::new(err as i32, reason);
    error.fatal = unsafe { rdsys::rd_kafka_event_error_is_fatal(event) } != 0;
    polled.errors.push((where_, error));
}
