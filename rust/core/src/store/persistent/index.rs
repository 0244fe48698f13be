//! The store's in-memory index: a hash map from key to location for point
//! reads and writes, and an ordered view of the entries for range scans,
//! built the first time a scan needs it.
//!
//! A B-tree alone made every `get` and `put` walk six or seven nodes of a
//! large tree (a cache miss each); the hash map takes one or two. Stores
//! that are never scanned (most key-value stores of an application:
//! aggregations, joins) never pay for key order. Once built, the ordered
//! view is kept up to date: a sorted run of entries, plus a small ordered
//! map of the keys added since, merged into the run when it grows; a
//! deleted entry stays in the run, marked, until the next merge. The view
//! holds the locations too, so a scan reads no hash entries.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Mutex, PoisonError};

use super::Location;
use super::table::KeyTable;
use crate::store::key::IndexKey;
use crate::window::keys::FastState;

/// The keys added since the run was sorted are merged into it once there
/// are at least this many…
const MERGE_MIN: usize = 4096;
/// …and at least this fraction of the run (so merging costs O(1) per key).
const MERGE_FRACTION: usize = 2;

/// Marks an entry of the run whose key was deleted (no frame is this long).
const DELETED: u32 = u32::MAX;

/// Every live key and where its latest value is.
pub(super) struct KeyIndex {
    map: KeyTable,
    /// Locked only by scans (`&self`); writers reach it with `get_mut`.
    order: Mutex<Order>,
}

#[derive(Default)]
struct Order {
    /// Whether the view exists; until a scan needs it, nothing is kept.
    built: bool,
    /// Sorted entries; `stale` of them are deleted ones
    /// (`value_len == DELETED`).
    run: Vec<(IndexKey, Location)>,
    /// Keys added since the run was sorted, none of them in `run`.
    added: BTreeMap<IndexKey, Location>,
    stale: usize,
}

impl Order {
    fn find(&mut self, key: &[u8]) -> Option<&mut Location> {
        let i = self.run.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&mut self.run[i].1)
    }

    /// `key` now points at `loc`; `new` when it had no value.
    fn on_write(&mut self, key: &[u8], loc: Location, new: bool) {
        if !self.built {
            return;
        }
        if let Some(l) = self.added.get_mut(key) {
            *l = loc;
        } else if let Some(l) = self.find(key) {
            *l = loc;
            // A key deleted and written again is still in the run.
            if new {
                self.stale -= 1;
            }
        } else {
            self.added.insert(key.into(), loc);
        }
    }

    fn on_remove(&mut self, key: &[u8]) {
        if !self.built || self.added.remove(key).is_some() {
            return;
        }
        if let Some(l) = self.find(key) {
            l.value_len = DELETED;
            self.stale += 1;
        }
    }

    /// Builds the view, or folds the added keys into the run when there
    /// are enough of them (or enough deleted entries in it).
    fn refresh(&mut self, map: &KeyTable) {
        if !self.built {
            self.run = map.iter().map(|(k, l)| (k.clone(), *l)).collect();
            self.run.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            self.built = true;
            return;
        }
        let many_added =
            self.added.len() >= MERGE_MIN && self.added.len() * MERGE_FRACTION >= self.run.len();
        let many_stale = self.stale >= MERGE_MIN && self.stale * 2 >= self.run.len();
        if !many_added && !many_stale {
            return;
        }
        let old = std::mem::take(&mut self.run);
        let added = std::mem::take(&mut self.added);
        let mut run = Vec::with_capacity(map.len());
        let mut old = old
            .into_iter()
            .filter(|(_, l)| l.value_len != DELETED)
            .peekable();
        let mut added = added.into_iter().peekable();
        loop {
            let take_old = match (old.peek(), added.peek()) {
                (Some(a), Some(b)) => a.0 < b.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_old { old.next() } else { added.next() };
            run.extend(next);
        }
        self.run = run;
        self.stale = 0;
    }
}

impl KeyIndex {
    pub fn new() -> Self {
        Self::with_hasher(FastState::default())
    }

    /// An empty index hashing with `hasher`. Keys inserted in the order
    /// another index of the same hasher iterates them land in ascending
    /// buckets: sequential writes.
    pub fn with_hasher(hasher: FastState) -> Self {
        KeyIndex {
            map: KeyTable::with_hasher(hasher),
            order: Mutex::new(Order::default()),
        }
    }

    pub fn hasher(&self) -> FastState {
        self.map.hasher()
    }

    #[inline]
    pub fn get(&self, key: &[u8]) -> Option<Location> {
        self.map.get(key)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Points `key` at `loc`; returns where it pointed before.
    #[inline]
    pub fn insert(&mut self, key: &[u8], loc: Location) -> Option<Location> {
        let old = self.map.insert(key, loc);
        self.order_mut().on_write(key, loc, old.is_none());
        old
    }

    /// Hints the CPU to fetch what a write or lookup of `key` touches
    /// first (a batch prefetches a few keys ahead).
    #[inline]
    pub fn prefetch(&self, key: &[u8]) {
        self.map.prefetch(key);
    }

    /// Room for `additional` more keys without growing on the way.
    pub fn reserve(&mut self, additional: usize) {
        self.map.reserve(additional);
    }

    /// How many keys fit before the next growth.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.map.capacity()
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Location> {
        let old = self.map.remove(key)?;
        self.order_mut().on_remove(key);
        Some(old)
    }

    fn order_mut(&mut self) -> &mut Order {
        self.order.get_mut().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&IndexKey, &Location)> {
        self.map.iter()
    }

    /// Moves every location `n` segments down (the first `n` segments were
    /// dropped).
    pub fn forget_segments(&mut self, n: u32) {
        for loc in self.map.values_mut() {
            loc.seg -= n;
        }
        let order = self.order.get_mut().unwrap_or_else(PoisonError::into_inner);
        let run = order.run.iter_mut().map(|(_, l)| l);
        for loc in run.chain(order.added.values_mut()) {
            if loc.value_len != DELETED {
                loc.seg -= n;
            }
        }
    }

    /// Points every key at its new location after a compaction, given every
    /// entry in key order (from [`KeyIndex::sorted_entries`]): the ordered
    /// view, if built, becomes that list, with nothing added or deleted.
    pub fn relocate_all(&mut self, entries: Vec<(IndexKey, Location)>) {
        for (key, loc) in &entries {
            if let Some(l) = self.map.get_mut(key) {
                *l = *loc;
            }
        }
        let order = self.order.get_mut().unwrap_or_else(PoisonError::into_inner);
        if order.built {
            order.run = entries;
            order.added.clear();
            order.stale = 0;
        }
    }

    /// Calls `f` with the entries whose keys lie within the bounds, in key
    /// order, until it returns `Ok(false)`.
    pub fn scan<E>(
        &self,
        from: Bound<&[u8]>,
        to: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], Location) -> Result<bool, E>,
    ) -> Result<(), E> {
        let mut order = self.order.lock().unwrap_or_else(PoisonError::into_inner);
        order.refresh(&self.map);
        let order = &*order;
        let after_from = |k: &[u8]| match from {
            Bound::Included(f) => k < f,
            Bound::Excluded(f) => k <= f,
            Bound::Unbounded => false,
        };
        let within_to = |k: &[u8]| match to {
            Bound::Included(t) => k <= t,
            Bound::Excluded(t) => k < t,
            Bound::Unbounded => true,
        };
        let start = order.run.partition_point(|(k, _)| after_from(k));
        let mut run = order.run[start..]
            .iter()
            .map(|(k, l)| (&**k, *l))
            .peekable();
        let mut added = order
            .added
            .range::<[u8], _>((from, Bound::Unbounded))
            .map(|(k, l)| (&**k, *l))
            .peekable();
        loop {
            let take_run = match (run.peek(), added.peek()) {
                (Some(a), Some(b)) => a.0 < b.0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => return Ok(()),
            };
            let (key, loc) = (if take_run { run.next() } else { added.next() }).expect("peeked");
            if !within_to(key) {
                return Ok(());
            }
            if loc.value_len != DELETED && !f(key, loc)? {
                return Ok(());
            }
        }
    }

    /// Every entry in key order, keys copied (for a compaction, which
    /// updates the locations as it goes).
    pub fn sorted_entries(&self) -> Vec<(IndexKey, Location)> {
        let mut out = Vec::with_capacity(self.map.len());
        let _: Result<(), ()> = self.scan(Bound::Unbounded, Bound::Unbounded, |k, loc| {
            out.push((k.into(), loc));
            Ok(true)
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(n: u32) -> Location {
        Location {
            seg: 0,
            pos: n,
            value_len: 1,
        }
    }

    fn entries(index: &KeyIndex, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Vec<(Vec<u8>, Location)> {
        let mut out = Vec::new();
        let _: Result<(), ()> = index.scan(from, to, |k, loc| {
            out.push((k.to_vec(), loc));
            Ok(true)
        });
        out
    }

    /// The ordered view stays equal to a sorted copy of the live keys
    /// through inserts, overwrites, deletes and re-inserts, across merges.
    #[test]
    fn scans_follow_key_order_through_writes_and_merges() {
        let mut index = KeyIndex::new();
        let mut model = std::collections::BTreeMap::new();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for step in 0..60_000u32 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = format!("k{}", state % 20_000).into_bytes();
            if state.is_multiple_of(3) {
                assert_eq!(index.remove(&key).is_some(), model.remove(&key).is_some());
            } else {
                assert_eq!(
                    index.insert(&key, loc(step)),
                    model.insert(key.clone(), loc(step))
                );
            }
            if step.is_multiple_of(7_919) {
                let all: Vec<(Vec<u8>, Location)> =
                    model.iter().map(|(k, l)| (k.clone(), *l)).collect();
                assert_eq!(entries(&index, Bound::Unbounded, Bound::Unbounded), all);
                let (a, b) = (&b"k12"[..], &b"k5"[..]);
                let some: Vec<(Vec<u8>, Location)> = model
                    .range::<[u8], _>((Bound::Included(a), Bound::Excluded(b)))
                    .map(|(k, l)| (k.clone(), *l))
                    .collect();
                assert_eq!(
                    entries(&index, Bound::Included(a), Bound::Excluded(b)),
                    some
                );
            }
        }
        let sorted = index.sorted_entries();
        assert_eq!(sorted.len(), model.len());
        for ((k, l), (mk, ml)) in sorted.iter().zip(&model) {
            assert_eq!((&**k, l), (&mk[..], ml));
        }
    }

    /// A compaction drops the old segments: every location moves down,
    /// in the hash map and in the ordered view (deleted entries stay marked).
    #[test]
    fn forgetting_segments_moves_every_location() {
        let mut index = KeyIndex::new();
        for (i, k) in [&b"a"[..], b"b", b"c"].iter().enumerate() {
            index.insert(
                k,
                Location {
                    seg: 3,
                    ..loc(i as u32)
                },
            );
        }
        let _ = entries(&index, Bound::Unbounded, Bound::Unbounded);
        index.remove(b"b");
        index.insert(b"d", Location { seg: 2, ..loc(9) });
        index.forget_segments(2);
        let got = entries(&index, Bound::Unbounded, Bound::Unbounded);
        let segs: Vec<(Vec<u8>, u32)> = got.into_iter().map(|(k, l)| (k, l.seg)).collect();
        assert_eq!(
            segs,
            [(b"a".to_vec(), 1), (b"c".to_vec(), 1), (b"d".to_vec(), 0)]
        );
        assert_eq!(index.get(b"c").map(|l| l.seg), Some(1));
    }

    #[test]
    fn a_scan_stops_when_asked() {
        let mut index = KeyIndex::new();
        for (i, k) in [&b"a"[..], b"b", b"c"].iter().enumerate() {
            index.insert(k, loc(i as u32));
        }
        let mut seen = Vec::new();
        let _: Result<(), ()> = index.scan(Bound::Unbounded, Bound::Unbounded, |k, _| {
            seen.push(k.to_vec());
            Ok(seen.len() < 2)
        });
        assert_eq!(seen, [b"a".to_vec(), b"b".to_vec()]);
    }
}
