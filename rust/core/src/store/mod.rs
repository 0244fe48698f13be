//! Native state stores: bytes in, bytes out (the typed layer lives in Python,
//! like Kafka Streams' metered layer), and the kernels that update a store
//! for a whole batch of records in one call.

pub mod kernels;
pub mod kv;

pub use kv::InMemoryKeyValueStore;
