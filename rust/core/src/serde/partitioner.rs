//! Kafka's default partitioner: murmur2 of the serialized key.
//! SKELETON — to be implemented.

/// Kafka's `Utils.murmur2` (seed 0x9747b28c), as a signed 32-bit value.
pub fn murmur2(data: &[u8]) -> i32 {
    todo!()
}

/// `Utils.toPositive(murmur2(key)) % num_partitions`.
pub fn partition_for_key(key: &[u8], num_partitions: u32) -> u32 {
    todo!()
}
