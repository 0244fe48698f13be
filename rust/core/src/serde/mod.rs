//! Kafka-compatible built-in serdes and the default partitioner.

pub mod codec;
pub mod partitioner;
