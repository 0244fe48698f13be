//! Hashing of keys for the kernels' in-memory state: a fast multiplicative
//! hash (64 bits per step) seeded per process from std's random state.
//! `SipHash` costs more than the rest of a tumbling count, and keys come
//! from the application's own topics.

use std::hash::{BuildHasher, Hasher};

const K: u64 = 0xf135_7aea_2e62_a9c5;

/// A seeded multiply-rotate hasher (in the style of rustc's `FxHasher`) with
/// a final avalanche, so the low bits hashbrown indexes with are mixed.
#[derive(Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(26) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        let h = self.0;
        (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
    }
}

/// Builds [`FastHasher`]s with one random seed per table.
#[derive(Clone, Copy)]
pub(crate) struct FastState(u64);

impl Default for FastState {
    fn default() -> Self {
        Self(std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64))
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;

    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hasher_separates_lengths_and_bytes() {
        let s = FastState::default();
        let h = |b: &[u8]| s.hash_one(b);
        assert_ne!(h(b"a"), h(b"a\0"));
        assert_ne!(h(b"abcdefgh"), h(b"abcdefgi"));
        assert_eq!(h(b"key-1"), h(b"key-1"));
    }
}
