//! strom-core: the native core of strom, with no Python in it.
//!
//! - [`log`]: the embedded log (Kafka's log design on local disk).
//! - [`store`]: native state stores and the kernels that update them.
//! - [`expr`]: column expressions over JSON values (the DSL's native fast paths).
//! - [`serde`]: Kafka-compatible built-in serdes and the murmur2 partitioner.

mod bytes;
pub mod error;
pub mod expr;
mod fsutil;
pub mod log;
pub mod serde;
pub mod store;
pub mod window;

pub use error::{Error, Result};
