//! Kafka's default partitioner: murmur2 of the serialized key.
//!
//! Records keyed the same way land in the same partition as they would with
//! Kafka's Java producer, so co-partitioning holds across both transports.

const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// Kafka's `Utils.murmur2` (seed 0x9747b28c), as a signed 32-bit value.
pub fn murmur2(data: &[u8]) -> i32 {
    // Kafka mixes the length in as a Java int.
    let mut h = SEED ^ (data.len() as u32);
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let mut k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    // The tail bytes, the way Kafka's switch falls through from case 3 to 1.
    let tail = blocks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// `Utils.toPositive(murmur2(key)) % num_partitions`.
///
/// # Panics
/// If `num_partitions` is 0.
pub fn partition_for_key(key: &[u8], num_partitions: u32) -> u32 {
    assert!(num_partitions > 0, "a topic has at least one partition");
    // toPositive masks the sign bit rather than taking the absolute value.
    (murmur2(key) as u32 & 0x7fff_ffff) % num_partitions
}
