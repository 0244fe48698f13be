//! strom's Kafka clients: librdkafka (through the `rdkafka` crate) with
//! records in and out as columnar batches, so that a stream thread's fetch,
//! processing and produce never build one object per record in Python.
//!
//! - [`Consumer`]: group or manually assigned; [`Consumer::poll`] returns
//!   one [`strom_core::log::ReadBatch`] per partition (the embedded log's
//!   batch type, so the engine takes both transports' batches alike) and the
//!   rebalance events it met, for the caller to act on.
//! - [`Producer`]: columns in, Kafka's default partitioning (murmur2) for
//!   keyed records, delivery reports folded into per-partition end offsets
//!   and a list of failures; transactions.
//! - Client log lines and errors are kept for the caller ([`Events`]), never
//!   written to stderr.

mod client;
mod consumer;
mod error;
mod producer;

pub use client::{ClientConfig, Events, LogLine};
pub use consumer::{Committed, Consumer, PartitionOffset, Polled, RebalanceEvent, RebalanceKind};
pub use error::{ClientError, Result};
pub use producer::{Columns, Failure, Headers, Partitioning, Producer, Record};
