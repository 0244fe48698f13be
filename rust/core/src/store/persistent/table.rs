//! The hash table behind the store's index: open addressing with linear
//! probing over a byte array of tags, and a slot array of key, location and
//! hash.
//!
//! Why not `std`'s `HashMap`: a batch of writes to a large store is a cache
//! miss or two per key (the probe, then the entry written), one after the
//! other. Here a caller that knows the next keys of its batch prefetches
//! their tag and slot lines ([`KeyTable::prefetch`]) a few keys ahead, so
//! the misses overlap. Deletion shifts the following entries back (no
//! tombstones), so probes stay short under churn.

use std::hash::BuildHasher;

use super::Location;
use crate::store::key::IndexKey;
use crate::window::keys::FastState;

/// Tag of an empty slot; a full one has the high bit set.
const EMPTY: u8 = 0;

/// The table grows when it would be more than this fraction full
/// (numerator over 8): linear probes stay a few slots long.
const MAX_LOAD_EIGHTHS: usize = 6;

#[derive(Clone)]
struct Slot {
    key: IndexKey,
    loc: Location,
    /// The low 32 bits of the key's hash: its home slot without hashing the
    /// key again when the table grows or an entry shifts back.
    hash: u32,
}

impl Slot {
    const VACANT: Slot = Slot {
        key: IndexKey::EMPTY,
        loc: Location {
            seg: 0,
            pos: 0,
            value_len: 0,
        },
        hash: 0,
    };
}

#[inline]
fn tag(hash: u64) -> u8 {
    0x80 | (hash >> 57) as u8
}

pub(super) struct KeyTable {
    hasher: FastState,
    /// One byte per slot: [`EMPTY`] or the slot's [`tag`].
    tags: Vec<u8>,
    slots: Vec<Slot>,
    len: usize,
}

impl KeyTable {
    pub fn with_hasher(hasher: FastState) -> Self {
        KeyTable {
            hasher,
            tags: Vec::new(),
            slots: Vec::new(),
            len: 0,
        }
    }

    pub fn hasher(&self) -> FastState {
        self.hasher
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    /// The slot holding `key`, or the empty slot that ends its probe.
    #[inline]
    fn probe(&self, key: &[u8], hash: u64) -> Result<usize, usize> {
        let (mask, t) = (self.mask(), tag(hash));
        let mut i = hash as usize & mask;
        loop {
            match self.tags[i] {
                EMPTY => return Err(i),
                x if x == t && *self.slots[i].key == *key => return Ok(i),
                _ => i = (i + 1) & mask,
            }
        }
    }

    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<Location> {
        if self.len == 0 {
            return None;
        }
        self.probe(key, self.hash(key))
            .ok()
            .map(|i| self.slots[i].loc)
    }

    #[inline]
    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Location> {
        if self.len == 0 {
            return None;
        }
        let i = self.probe(key, self.hash(key)).ok()?;
        Some(&mut self.slots[i].loc)
    }

    /// Hints the CPU to fetch what inserting or looking up `key` reads and
    /// writes first: its home tag and the slots there.
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        if self.slots.is_empty() {
            return;
        }
        let i = self.hash(key) as usize & self.mask();
        crate::window::prefetch_read(self.tags.as_ptr().wrapping_add(i).cast());
        let slot = self.slots.as_ptr().wrapping_add(i).cast::<u8>();
        crate::window::prefetch_read(slot.cast());
        crate::window::prefetch_read(slot.wrapping_add(64).cast());
    }

    /// Points `key` at `loc`; returns where it pointed before.
    #[inline]
    pub fn insert(&mut self, key: &[u8], loc: Location) -> Option<Location> {
        if (self.len + 1) * 8 > self.slots.len() * MAX_LOAD_EIGHTHS {
            self.grow(self.len + 1);
        }
        let hash = self.hash(key);
        match self.probe(key, hash) {
            Ok(i) => Some(std::mem::replace(&mut self.slots[i].loc, loc)),
            Err(i) => {
                self.tags[i] = tag(hash);
                self.slots[i] = Slot {
                    key: key.into(),
                    loc,
                    hash: hash as u32,
                };
                self.len += 1;
                None
            }
        }
    }

    /// How many keys fit before the next growth.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.slots.len() * MAX_LOAD_EIGHTHS / 8
    }

    /// Room for `additional` more keys without growing on the way.
    pub fn reserve(&mut self, additional: usize) {
        let want = self.len + additional;
        if want * 8 > self.slots.len() * MAX_LOAD_EIGHTHS {
            self.grow(want);
        }
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Location> {
        if self.len == 0 {
            return None;
        }
        let mut hole = self.probe(key, self.hash(key)).ok()?;
        let removed = self.slots[hole].loc;
        let mask = self.mask();
        // Shift back each following entry whose probe passes the hole, so
        // that no probe meets an empty slot before its key.
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.tags[j] == EMPTY {
                break;
            }
            let home = self.slots[j].hash as usize & mask;
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.tags[hole] = self.tags[j];
                self.slots.swap(hole, j);
                hole = j;
            }
        }
        self.tags[hole] = EMPTY;
        self.slots[hole] = Slot::VACANT;
        self.len -= 1;
        Some(removed)
    }

    /// Doubles the slots until `want` keys fit, moving every entry (in slot
    /// order, so from ascending homes: nearly sequential writes).
    #[cold]
    fn grow(&mut self, want: usize) {
        let mut n = self.slots.len().max(16);
        while want * 8 > n * MAX_LOAD_EIGHTHS {
            n *= 2;
        }
        assert!(n <= 1 << 32, "the index holds at most 3 * 2^29 keys");
        let tags = std::mem::replace(&mut self.tags, vec![EMPTY; n]);
        let slots = std::mem::replace(&mut self.slots, vec![Slot::VACANT; n]);
        let mask = n - 1;
        for (t, slot) in tags.into_iter().zip(slots) {
            if t == EMPTY {
                continue;
            }
            let mut i = slot.hash as usize & mask;
            while self.tags[i] != EMPTY {
                i = (i + 1) & mask;
            }
            self.tags[i] = t;
            self.slots[i] = slot;
        }
    }

    /// Every entry, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&IndexKey, &Location)> {
        self.tags
            .iter()
            .zip(&self.slots)
            .filter(|(t, _)| **t != EMPTY)
            .map(|(_, s)| (&s.key, &s.loc))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Location> {
        self.tags
            .iter()
            .zip(&mut self.slots)
            .filter(|(t, _)| **t != EMPTY)
            .map(|(_, s)| &mut s.loc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn loc(n: u32) -> Location {
        Location {
            seg: n % 3,
            pos: n,
            value_len: n % 17,
        }
    }

    fn check(table: &KeyTable, model: &HashMap<Vec<u8>, Location>) {
        assert_eq!(table.len(), model.len());
        assert_eq!(table.iter().count(), model.len());
        for (k, l) in table.iter() {
            assert_eq!(model.get(&**k), Some(l));
        }
        for (k, l) in model {
            assert_eq!(table.get(k), Some(*l));
        }
    }

    /// Inserts, overwrites and deletes (short and long keys) against a
    /// model, through many growths; every key stays reachable after each
    /// backward shift.
    #[test]
    fn follows_a_model_through_growth_and_deletes() {
        let mut table = KeyTable::with_hasher(FastState::default());
        let mut model = HashMap::new();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for step in 0..200_000u32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = state % 30_000;
            let key = if n.is_multiple_of(5) {
                format!("a long key of more than twenty-two bytes {n}").into_bytes()
            } else {
                n.to_be_bytes()[..(n % 9) as usize].to_vec()
            };
            if state.is_multiple_of(3) {
                assert_eq!(table.remove(&key), model.remove(&key), "step {step}");
            } else {
                assert_eq!(table.insert(&key, loc(step)), model.insert(key, loc(step)));
            }
            if step.is_multiple_of(20_000) {
                check(&table, &model);
            }
        }
        check(&table, &model);
        assert_eq!(table.get(b"never inserted"), None);
    }

    /// A hasher that sends every key to slot 0 or 1 (of any size), so
    /// probes run long and wrap around the end of the table.
    #[test]
    fn colliding_keys_wrap_and_shift_back() {
        let mut table = KeyTable::with_hasher(FastState::with_seed(7));
        let mut model = HashMap::new();
        // Keys whose homes land at the table's last slots, to wrap.
        let keys: Vec<Vec<u8>> = (0..4000u32)
            .map(|i| i.to_be_bytes().to_vec())
            .filter(|k| {
                let h = table.hash(k) as usize;
                h & 63 >= 60
            })
            .take(40)
            .collect();
        assert_eq!(keys.len(), 40);
        for (i, k) in keys.iter().enumerate() {
            table.insert(k, loc(i as u32));
            model.insert(k.clone(), loc(i as u32));
        }
        check(&table, &model);
        for k in keys.iter().step_by(3) {
            assert_eq!(table.remove(k), model.remove(k));
            check(&table, &model);
        }
        for (i, k) in keys.iter().enumerate().step_by(2) {
            assert_eq!(
                table.insert(k, loc(100 + i as u32)),
                model.insert(k.clone(), loc(100 + i as u32))
            );
        }
        check(&table, &model);
    }

    #[test]
    fn reserve_and_values_mut() {
        let mut table = KeyTable::with_hasher(FastState::default());
        table.reserve(1000);
        let slots = table.slots.len();
        for i in 0..1000u32 {
            table.insert(&i.to_le_bytes(), loc(i));
        }
        assert_eq!(table.slots.len(), slots, "no growth after reserve");
        for l in table.values_mut() {
            l.pos += 1;
        }
        assert_eq!(table.get(&7u32.to_le_bytes()).map(|l| l.pos), Some(8));
        assert_eq!(table.remove(b"absent"), None);
    }
}
