use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use strom_core::log::Span;
use strom_core::serde::partitioner::partition_for_key;

use crate::client::{ClientConfig, Context, Events, lock};
use crate::consumer::Consumer;
use crate::error::{ClientError, Result};

/// Records to produce, columnar: record `i`'s key is `data[keys[i]]` (None: null).
#[derive(Debug, Default, Clone)]
pub struct Columns {
    pub data: Vec<u8>,
    pub keys: Vec<Option<Span>>,
    pub values: Vec<Option<Span>>,
    /// Per record; 0 lets the client stamp the record with the current time.
    pub timestamps: Vec<i64>,
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
}

/// The producer's context: delivery reports are folded in here as the
/// client serves them (inside `poll`/`flush`, on the caller's thread).
#[derive(Debug, Default)]
pub struct DeliveryContext {
    base: Context,
    deliveries: Mutex<Deliveries>,
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
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, (): ()) {
        let mut deliveries = lock(&self.deliveries);
        match result {
            Ok(message) => {
                let end = message.offset() + 1;
                let topic = message.topic();
                // Looked up by &str first: no allocation per record.
                let partitions = match deliveries.written.get_mut(topic) {
                    Some(partitions) => partitions,
                    None => deliveries.written.entry(topic.to_owned()).or_default(),
                };
                let slot = partitions.entry(message.partition()).or_insert((-1, false));
                if end > slot.0 {
                    *slot = (end, true);
                }
            }
            Err((error, message)) => {
                let what = format!("producing to {}-{}", message.topic(), message.partition());
                deliveries.failures.push(Failure {
                    topic: message.topic().to_owned(),
                    partition: message.partition(),
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec),
                    timestamp: message.timestamp().to_millis().unwrap_or(-1),
                    error: ClientError::from_kafka(error, &what),
                    queued: true,
                });
            }
        }
    }
}

/// A Kafka producer taking columns; transactional when configured with a
/// `transactional.id`.
pub struct Producer {
    inner: BaseProducer<DeliveryContext>,
}

/// How long `produce_columns` waits for room when the client's queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(20);

impl Producer {
    pub fn new(config: &ClientConfig) -> Result<Self> {
        let inner: BaseProducer<DeliveryContext> = config
            .native()
            .create_with_context(DeliveryContext::default())
            .map_err(|e| ClientConfig::creation_error(&e))?;
        Ok(Self { inner })
    }

    pub fn events(&self) -> &Events {
        &self.inner.context().base.events
    }

    /// Queues every record of `columns` for `topic`; records the client
    /// refuses outright become failures (`queued: false`). Serves delivery
    /// reports once at the end (and while waiting for room).
    pub fn produce_columns(&self, topic: &str, columns: &Columns, partitioning: Partitioning<'_>) {
        for i in 0..columns.len() {
            let key = columns.bytes(columns.keys[i]);
            let value = columns.bytes(columns.values[i]);
            let partition = match partitioning {
                Partitioning::Explicit(partitions) => Some(partitions[i]),
                Partitioning::ByKey { partitions } => {
                    key.map(|k| partition_for_key(k, partitions) as i32)
                }
            };
            let timestamp = columns.timestamps.get(i).copied().unwrap_or(0);
            self.send(topic, key, value, partition, timestamp, None);
        }
        self.inner.poll(Duration::ZERO);
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
        self.send(topic, key, value, None, timestamp, Some(owned));
        self.inner.poll(Duration::ZERO);
    }

    fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        partition: Option<i32>,
        timestamp: i64,
        headers: Option<OwnedHeaders>,
    ) {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic);
        record.key = key;
        record.payload = value;
        record.partition = partition;
        if timestamp > 0 {
            record.timestamp = Some(timestamp);
        }
        record.headers = headers;
        loop {
            match self.inner.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.inner.poll(QUEUE_FULL_WAIT);
                }
                Err((error, back)) => {
                    let what = format!("producing to {topic}");
                    lock(&self.inner.context().deliveries)
                        .failures
                        .push(Failure {
                            topic: topic.to_owned(),
                            partition: back.partition.unwrap_or(-1),
                            key: back.key.map(<[u8]>::to_vec),
                            value: back.payload.map(<[u8]>::to_vec),
                            timestamp,
                            error: ClientError::from_kafka(&error, &what),
                            queued: false,
                        });
                    return;
                }
            }
        }
    }

    /// Serves delivery reports, waiting up to `timeout` for one.
    pub fn poll(&self, timeout: Duration) {
        self.inner.poll(timeout);
    }

    /// Waits until every queued record is acknowledged or failed, or the
    /// timeout passes; returns how many are still in flight.
    pub fn flush(&self, timeout: Duration) -> usize {
        // A timeout is not an error here: the caller is told what is left.
        let _ = self.inner.flush(timeout);
        self.inner.poll(Duration::ZERO);
        usize::try_from(self.inner.in_flight_count()).unwrap_or(0)
    }

    /// Partitions whose acknowledged end moved since the last call, with
    /// the offset after their last acknowledged record.
    pub fn take_written(&self) -> Vec<(String, i32, i64)> {
        let mut deliveries = lock(&self.inner.context().deliveries);
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
        if let Some(partitions) = lock(&self.inner.context().deliveries)
            .written
            .get_mut(topic)
        {
            partitions.remove(&partition);
        }
    }

    pub fn take_failures(&self) -> Vec<Failure> {
        std::mem::take(&mut lock(&self.inner.context().deliveries).failures)
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
        self.inner
            .commit_transaction(timeout)
            .map_err(|e| ClientError::from_kafka(&e, "committing the transaction"))
    }

    pub fn abort_transaction(&self, timeout: Duration) -> Result<()> {
        self.inner
            .abort_transaction(timeout)
            .map_err(|e| ClientError::from_kafka(&e, "aborting the transaction"))
    }
}
