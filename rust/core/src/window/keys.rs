//! Hashing of keys for the kernels' in-memory state: a fast multiplicative
//! hash (64 bits per step) seeded per process from std's random state.
//! `SipHash` costs more than the rest of a tumbling count, and keys come
//! from the application's own topics.

use std::collections::HashMap;
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

impl FastState {
    /// The state of this seed (e.g. one saved with a table's contents).
    pub fn with_seed(seed: u64) -> Self {
        Self(seed)
    }

    pub fn seed(self) -> u64 {
        self.0
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;

    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

/// Interned keys, each with the caller's per-key state `W` (the sliding and
/// session kernels keep each key's windows or sessions in order). Ids of
/// removed keys are reused.
pub(crate) struct KeyTable<W> {
    ids: HashMap<Box<[u8]>, u32, FastState>,
    entries: Vec<Entry<W>>,
    free: Vec<u32>,
}

struct Entry<W> {
    key: Box<[u8]>,
    state: W,
}

impl<W: Default> KeyTable<W> {
    pub fn new() -> Self {
        Self {
            ids: HashMap::default(),
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The id of `key`, interned if new (with a default state).
    pub fn intern(&mut self, key: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let boxed: Box<[u8]> = key.into();
        let entry = Entry {
            key: boxed.clone(),
            state: W::default(),
        };
        let id = if let Some(id) = self.free.pop() {
            self.entries[id as usize] = entry;
            id
        } else {
            let id = u32::try_from(self.entries.len()).expect("fewer than 2^32 live keys");
            self.entries.push(entry);
            id
        };
        self.ids.insert(boxed, id);
        id
    }

    #[cfg(test)]
    pub fn get(&self, key: &[u8]) -> Option<u32> {
        self.ids.get(key).copied()
    }

    pub fn key(&self, id: u32) -> &[u8] {
        &self.entries[id as usize].key
    }

    pub fn state(&self, id: u32) -> &W {
        &self.entries[id as usize].state
    }

    pub fn state_mut(&mut self, id: u32) -> &mut W {
        &mut self.entries[id as usize].state
    }

    /// Forgets `id`'s key; the id may be handed out again.
    pub fn remove(&mut self, id: u32) {
        let entry = &mut self.entries[id as usize];
        let key = std::mem::take(&mut entry.key);
        entry.state = W::default();
        self.ids.remove(&key);
        self.free.push(id);
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        self.ids.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intern_reuses_ids_of_removed_keys() {
        let mut t: KeyTable<u8> = KeyTable::new();
        let a = t.intern(b"a");
        let b = t.intern(b"bb");
        assert_ne!(a, b);
        assert_eq!(t.intern(b"a"), a);
        *t.state_mut(a) = 7;
        t.remove(a);
        assert_eq!(t.get(b"a"), None);
        assert_eq!(t.len(), 1);
        let c = t.intern(b"ccc");
        assert_eq!(c, a);
        assert_eq!(*t.state(c), 0);
        assert_eq!(t.key(c), b"ccc");
        assert_eq!(t.key(b), b"bb");
    }

    #[test]
    fn hasher_separates_lengths_and_bytes() {
        let s = FastState::default();
        let h = |b: &[u8]| s.hash_one(b);
        assert_ne!(h(b"a"), h(b"a\0"));
        assert_ne!(h(b"abcdefgh"), h(b"abcdefgi"));
        assert_eq!(h(b"key-1"), h(b"key-1"));
    }
}
