//! The record cache: Kafka Streams' `ThreadCache` / `NamedCache` and the
//! caching key-value store built on them.
//!
//! One [`ThreadCache`] per stream thread holds, within one byte budget
//! (`statestore.cache.max.bytes`), one named cache per (task, store). Writes
//! land in the cache as *dirty* entries; reads count as use. When a put takes
//! the thread cache over budget, the least recently used entries of the named
//! cache that was put into are evicted; evicting a dirty entry flushes that
//! whole named cache (the evicted entry first, then every other dirty entry in
//! last-update order). A commit flushes every named cache. Flushed entries are
//! what a caching store writes to its underlying store, logs to its changelog
//! and forwards downstream, so the cache decides *when* and *in which order*
//! updates are emitted, exactly as in Kafka Streams.
//!
//! Size accounting follows Kafka's `LRUNode.size()`: key bytes + value bytes +
//! [`ENTRY_OVERHEAD_BYTES`] (three 8-byte references of the LRU node, the dirty
//! flag, and the record context's timestamp, offset and partition). Kafka also
//! counts the topic name and headers of the record context; strom's cache keeps
//! only the timestamp, so its sizes equal Kafka's for an empty topic name and
//! no headers (which is what Kafka's own cache tests use).
//!
//! Data structure: each named cache is a slab of nodes threaded by two
//! intrusive doubly linked lists (LRU order and dirty order), plus an ordered
//! index for range scans and a hash table of node numbers for point lookups
//! (a get, a put or a count finds its node with one hash probe instead of a
//! walk down the ordered index). A `hashlink::LinkedHashMap` would give one of
//! the two orders; we need both orders and the key order over the same
//! entries, so a small slab keeps each key stored twice (slab + ordered index)
//! instead of three times, with O(1) touch/dirty-append; the hash table holds
//! only node numbers and hashes the slab's keys.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasher;
use std::ops::Bound;

use hashbrown::HashTable;

use super::KeyValueBytes;
use crate::error::{Error, Result};
use crate::window::keys::FastState;

/// Bytes counted per cache entry on top of its key and value: Kafka's
/// `LRUNode` (3 × 8) + `LRUCacheEntry` dirty flag (1) + record context
/// timestamp (8), offset (8) and partition (4).
pub const ENTRY_OVERHEAD_BYTES: u64 = 45;

/// The bytes one entry counts against the budget.
pub fn entry_size(key: &[u8], value: Option<&[u8]>) -> u64 {
    (key.len() + value.map_or(0, <[u8]>::len)) as u64 + ENTRY_OVERHEAD_BYTES
}

/// A write leaving the cache, in emission order: by eviction or by flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyEntry {
    pub key: Vec<u8>,
    /// None for a delete (tombstone).
    pub value: Option<Vec<u8>>,
    /// Timestamp of the record that last wrote the entry.
    pub timestamp: i64,
}

/// A cached entry as seen by [`ThreadCache::get`]. `value` None is a cached
/// delete: the key is known to be absent, the store below must not be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedEntry<'a> {
    pub value: Option<&'a [u8]>,
    pub timestamp: i64,
    pub dirty: bool,
}

impl CachedEntry<'_> {
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

/// Handle of a named cache inside a [`ThreadCache`]. Slots are reused, so a
/// generation makes a handle of a closed cache stale rather than aliased.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NamedCacheId {
    slot: u32,
    generation: u32,
}

/// Thread-level counters, as Kafka's `ThreadCache` keeps them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub puts: u64,
    pub gets: u64,
    pub evicts: u64,
    pub flushes: u64,
}

/// Per named cache counters (Kafka's hit-ratio metric is hits / (hits + misses)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamedCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub overwrites: u64,
    pub flushes: u64,
}

// ---------------------------------------------------------------------------
// Slab with two intrusive lists

const NIL: usize = usize::MAX;

#[derive(Debug, Clone, Copy)]
struct Link {
    prev: usize,
    next: usize,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
};

/// Ends of one list; `head` is the oldest (next to evict / to flush first).
#[derive(Debug, Clone, Copy)]
struct Ends {
    head: usize,
    tail: usize,
}

const EMPTY: Ends = Ends {
    head: NIL,
    tail: NIL,
};

#[derive(Debug, Clone, Copy)]
enum Chain {
    Lru,
    Dirty,
}

#[derive(Debug)]
struct Node {
    key: Vec<u8>,
    value: Option<Vec<u8>>,
    timestamp: i64,
    /// Member of the dirty list exactly when true.
    dirty: bool,
    lru: Link,
    dirty_link: Link,
}

impl Node {
    fn link(&mut self, chain: Chain) -> &mut Link {
        match chain {
            Chain::Lru => &mut self.lru,
            Chain::Dirty => &mut self.dirty_link,
        }
    }

    fn size(&self) -> u64 {
        entry_size(&self.key, self.value.as_deref())
    }
}

fn unlink(nodes: &mut [Node], ends: &mut Ends, i: usize, chain: Chain) {
    let Link { prev, next } = *nodes[i].link(chain);
    if prev == NIL {
        ends.head = next;
    } else {
        nodes[prev].link(chain).next = next;
    }
    if next == NIL {
        ends.tail = prev;
    } else {
        nodes[next].link(chain).prev = prev;
    }
    *nodes[i].link(chain) = UNLINKED;
}

fn push_back(nodes: &mut [Node], ends: &mut Ends, i: usize, chain: Chain) {
    let tail = ends.tail;
    *nodes[i].link(chain) = Link {
        prev: tail,
        next: NIL,
    };
    if tail == NIL {
        ends.head = i;
    } else {
        nodes[tail].link(chain).next = i;
    }
    ends.tail = i;
}

// ---------------------------------------------------------------------------
// NamedCache

struct NamedCache {
    name: String,
    /// Node numbers in key order, for range scans.
    index: BTreeMap<Vec<u8>, usize>,
    /// Node numbers hashed by their nodes' keys, for point lookups.
    lookup: HashTable<usize>,
    hasher: FastState,
    nodes: Vec<Node>,
    free: Vec<usize>,
    lru: Ends,
    dirty: Ends,
    size_bytes: u64,
    stats: NamedCacheStats,
    /// Where [`update`](Self::update) writes a new value, reused.
    scratch: Vec<u8>,
}

impl NamedCache {
    fn new(name: &str) -> Self {
        NamedCache {
            name: name.to_owned(),
            index: BTreeMap::new(),
            lookup: HashTable::new(),
            hasher: FastState::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            lru: EMPTY,
            dirty: EMPTY,
            size_bytes: 0,
            stats: NamedCacheStats::default(),
            scratch: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.lookup.len()
    }

    /// The node holding `key`, if any.
    fn find(&self, key: &[u8]) -> Option<usize> {
        let nodes = &self.nodes;
        self.lookup
            .find(self.hasher.hash_one(key), |&i| nodes[i].key == key)
            .copied()
    }

    /// Looks a key up, counting a hit or a miss, and marks it most recently used.
    fn get(&mut self, key: &[u8]) -> Option<usize> {
        let Some(i) = self.find(key) else {
            self.stats.misses += 1;
            return None;
        };
        self.stats.hits += 1;
        self.touch(i);
        Some(i)
    }

    fn touch(&mut self, i: usize) {
        unlink(&mut self.nodes, &mut self.lru, i, Chain::Lru);
        push_back(&mut self.nodes, &mut self.lru, i, Chain::Lru);
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>, timestamp: i64, dirty: bool) -> Result<()> {
        if let Some(i) = self.find(key) {
            self.overwrite(i, timestamp, dirty, |slot| match (slot, value) {
                (Some(buf), Some(v)) => {
                    buf.clear();
                    buf.extend_from_slice(v);
                }
                (slot, v) => *slot = v.map(<[u8]>::to_vec),
            })
        } else {
            self.insert(key, value.map(<[u8]>::to_vec), timestamp, dirty);
            Ok(())
        }
    }

    /// Kafka's put over the existing node `i`: `write` sets its value in
    /// place; the node becomes the most recently used and, when `dirty`, the
    /// last of the dirty order.
    fn overwrite(
        &mut self,
        i: usize,
        timestamp: i64,
        dirty: bool,
        write: impl FnOnce(&mut Option<Vec<u8>>),
    ) -> Result<()> {
        // A clean write over a dirty one would lose an update (Kafka throws too).
        if !dirty && self.nodes[i].dirty {
            return Err(Error::Store(format!(
                "clean entry put over a dirty entry for the same key in cache '{}'",
                self.name
            )));
        }
        self.stats.overwrites += 1;
        let node = &mut self.nodes[i];
        self.size_bytes -= node.size();
        write(&mut node.value);
        node.timestamp = timestamp;
        let was_dirty = node.dirty;
        node.dirty = dirty;
        self.size_bytes += node.size();
        self.touch(i);
        if dirty {
            // Remove then append: dirty order is last-update order.
            if was_dirty {
                unlink(&mut self.nodes, &mut self.dirty, i, Chain::Dirty);
            }
            push_back(&mut self.nodes, &mut self.dirty, i, Chain::Dirty);
        }
        Ok(())
    }

    /// A get then a dirty put of `key`, with one hash probe on a hit (see
    /// [`ThreadCache::update_into`]).
    fn update(
        &mut self,
        key: &[u8],
        timestamp: i64,
        missing: impl FnOnce() -> Result<Option<Vec<u8>>>,
        update: impl FnOnce(Option<&[u8]>, &mut Vec<u8>) -> Result<bool>,
    ) -> Result<()> {
        let mut buf = std::mem::take(&mut self.scratch);
        buf.clear();
        let result = match self.get(key) {
            Some(i) => update(self.nodes[i].value.as_deref(), &mut buf).and_then(|keep| {
                self.overwrite(i, timestamp, true, |slot| match (slot, keep) {
                    (Some(value), true) => {
                        value.clear();
                        value.extend_from_slice(&buf);
                    }
                    (slot, keep) => *slot = keep.then(|| buf.clone()),
                })
            }),
            None => missing()
                .and_then(|stored| update(stored.as_deref(), &mut buf))
                .map(|keep| self.insert(key, keep.then(|| buf.clone()), timestamp, true)),
        };
        self.scratch = buf;
        result
    }

    /// Adds a node for a key the cache does not hold.
    fn insert(&mut self, key: &[u8], value: Option<Vec<u8>>, timestamp: i64, dirty: bool) {
        let node = Node {
            key: key.to_vec(),
            value,
            timestamp,
            dirty,
            lru: UNLINKED,
            dirty_link: UNLINKED,
        };
        self.size_bytes += node.size();
        let i = if let Some(i) = self.free.pop() {
            self.nodes[i] = node;
            i
        } else {
            self.nodes.push(node);
            self.nodes.len() - 1
        };
        self.index.insert(key.to_vec(), i);
        let (nodes, hasher) = (&self.nodes, self.hasher);
        self.lookup.insert_unique(hasher.hash_one(key), i, |&j| {
            hasher.hash_one(nodes[j].key.as_slice())
        });
        push_back(&mut self.nodes, &mut self.lru, i, Chain::Lru);
        if dirty {
            push_back(&mut self.nodes, &mut self.dirty, i, Chain::Dirty);
        }
    }

    /// Takes node `i` out of both indexes, both lists and the size.
    fn remove(&mut self, i: usize) -> Node {
        unlink(&mut self.nodes, &mut self.lru, i, Chain::Lru);
        if self.nodes[i].dirty {
            unlink(&mut self.nodes, &mut self.dirty, i, Chain::Dirty);
        }
        let hash = self.hasher.hash_one(self.nodes[i].key.as_slice());
        if let Ok(entry) = self.lookup.find_entry(hash, |&j| j == i) {
            entry.remove();
        }
        let node = std::mem::replace(
            &mut self.nodes[i],
            Node {
                key: Vec::new(),
                value: None,
                timestamp: 0,
                dirty: false,
                lru: UNLINKED,
                dirty_link: UNLINKED,
            },
        );
        self.index.remove(&node.key);
        self.free.push(i);
        self.size_bytes -= node.size();
        node
    }

    /// Evicts the least recently used entry; a dirty one flushes the cache.
    fn evict(&mut self, out: &mut Vec<DirtyEntry>) {
        let i = self.lru.head;
        if i == NIL {
            return;
        }
        let node = self.remove(i);
        if node.dirty {
            self.flush(
                Some(DirtyEntry {
                    key: node.key,
                    value: node.value,
                    timestamp: node.timestamp,
                }),
                out,
            );
        }
    }

    /// Emits `evicted` (already out of the cache) then every dirty entry in
    /// dirty order, marks them clean and drops the flushed deletes.
    fn flush(&mut self, evicted: Option<DirtyEntry>, out: &mut Vec<DirtyEntry>) {
        self.stats.flushes += 1;
        if evicted.is_none() && self.dirty.head == NIL {
            return;
        }
        out.extend(evicted);
        let mut tombstones = Vec::new();
        let mut i = self.dirty.head;
        while i != NIL {
            let node = &mut self.nodes[i];
            let next = node.dirty_link.next;
            node.dirty_link = UNLINKED;
            node.dirty = false;
            out.push(DirtyEntry {
                key: node.key.clone(),
                value: node.value.clone(),
                timestamp: node.timestamp,
            });
            if node.value.is_none() {
                tombstones.push(i);
            }
            i = next;
        }
        self.dirty = EMPTY;
        // A flushed delete has reached the store; caching it would only cost budget.
        for i in tombstones {
            self.remove(i);
        }
    }

    /// Cached entries with keys in range, in key order (reversed when asked),
    /// each counted as a use in iteration order as Kafka's cache iterator does.
    fn scan(
        &mut self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        prefix: Option<&[u8]>,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let range = self.index.range::<[u8], _>((lower, upper));
        let mut hits: Vec<usize> = match prefix {
            Some(p) => range
                .take_while(|(k, _)| k.starts_with(p))
                .map(|(_, &i)| i)
                .collect(),
            None => range.map(|(_, &i)| i).collect(),
        };
        if reverse {
            hits.reverse();
        }
        hits.into_iter()
            .map(|i| {
                self.stats.hits += 1;
                self.touch(i);
                let node = &self.nodes[i];
                (node.key.clone(), node.value.clone())
            })
            .collect()
    }

    fn clear(&mut self) {
        self.index.clear();
        self.lookup.clear();
        self.nodes.clear();
        self.free.clear();
        self.lru = EMPTY;
        self.dirty = EMPTY;
        self.size_bytes = 0;
    }
}

// ---------------------------------------------------------------------------
// ThreadCache

struct Slot {
    generation: u32,
    cache: Option<NamedCache>,
}

/// The record cache of one stream thread: named caches sharing one byte budget.
pub struct ThreadCache {
    max_bytes: u64,
    /// Sum of the named caches' sizes.
    size_bytes: u64,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    names: HashMap<String, NamedCacheId>,
    stats: CacheStats,
}

impl fmt::Debug for ThreadCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let caches: Vec<(&str, usize, u64)> = self
            .slots
            .iter()
            .filter_map(|s| s.cache.as_ref())
            .map(|c| (c.name.as_str(), c.len(), c.size_bytes))
            .collect();
        f.debug_struct("ThreadCache")
            .field("max_bytes", &self.max_bytes)
            .field("size_bytes", &self.size_bytes)
            .field("caches", &caches)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn named_mut(slots: &mut [Slot], id: NamedCacheId) -> Option<&mut NamedCache> {
    let slot = slots.get_mut(id.slot as usize)?;
    if slot.generation == id.generation {
        slot.cache.as_mut()
    } else {
        None
    }
}

fn closed(id: NamedCacheId) -> Error {
    Error::Store(format!("named cache {id:?} is closed"))
}

impl ThreadCache {
    /// A cache of at most `max_bytes` (Kafka's `statestore.cache.max.bytes`
    /// divided among the stream threads); 0 disables caching in effect:
    /// every put is evicted (and a dirty one flushed) at once.
    pub fn new(max_bytes: u64) -> Self {
        ThreadCache {
            max_bytes,
            size_bytes: 0,
            slots: Vec::new(),
            free_slots: Vec::new(),
            names: HashMap::new(),
            stats: CacheStats::default(),
        }
    }

    /// Kafka's namespace of a store's cache: `<task id>-<store name>`.
    pub fn namespace(task_id: &str, store_name: &str) -> String {
        format!("{task_id}-{store_name}")
    }

    /// The named cache for `namespace`, created empty if it is not open.
    pub fn named(&mut self, namespace: &str) -> NamedCacheId {
        if let Some(&id) = self.names.get(namespace) {
            return id;
        }
        let cache = Some(NamedCache::new(namespace));
        let id = if let Some(slot) = self.free_slots.pop() {
            let s = &mut self.slots[slot as usize];
            s.cache = cache;
            NamedCacheId {
                slot,
                generation: s.generation,
            }
        } else {
            self.slots.push(Slot {
                generation: 0,
                cache,
            });
            NamedCacheId {
                slot: (self.slots.len() - 1) as u32,
                generation: 0,
            }
        };
        self.names.insert(namespace.to_owned(), id);
        id
    }

    /// The open named cache for `namespace`, if any.
    pub fn find(&self, namespace: &str) -> Option<NamedCacheId> {
        self.names.get(namespace).copied()
    }

    /// Looks `key` up; a hit becomes the most recently used entry.
    pub fn get(&mut self, id: NamedCacheId, key: &[u8]) -> Option<CachedEntry<'_>> {
        self.stats.gets += 1;
        let cache = named_mut(&mut self.slots, id)?;
        let i = cache.get(key)?;
        let node = &cache.nodes[i];
        Some(CachedEntry {
            value: node.value.as_deref(),
            timestamp: node.timestamp,
            dirty: node.dirty,
        })
    }

    /// Looks `key` up without counting a use or a hit: the entry stays where
    /// it is in the LRU order (a batch reads its old values this way, then
    /// puts each key, which moves it exactly as a get and a put would).
    pub fn peek(&self, id: NamedCacheId, key: &[u8]) -> Option<CachedEntry<'_>> {
        let cache = self
            .slots
            .get(id.slot as usize)
            .filter(|s| s.generation == id.generation)?
            .cache
            .as_ref()?;
        let node = &cache.nodes[cache.find(key)?];
        Some(CachedEntry {
            value: node.value.as_deref(),
            timestamp: node.timestamp,
            dirty: node.dirty,
        })
    }

    /// Counts a read that only [`peek`](Self::peek)ed as a hit or a miss of
    /// the named cache (its `hit-ratio`), leaving the LRU order as it is.
    pub fn count_read(&mut self, id: NamedCacheId, hit: bool) {
        if let Some(cache) = named_mut(&mut self.slots, id) {
            if hit {
                cache.stats.hits += 1;
            } else {
                cache.stats.misses += 1;
            }
        }
    }

    /// Caches `value` for `key` (None caches a delete) as the most recently
    /// used entry; a dirty entry moves to the end of the dirty order. Returns
    /// what the evictions this put caused flushed, in emission order (mostly
    /// nothing). Fails on a closed cache, or on a clean put over a dirty entry.
    pub fn put(
        &mut self,
        id: NamedCacheId,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        dirty: bool,
    ) -> Result<Vec<DirtyEntry>> {
        let mut out = Vec::new();
        self.put_into(id, key, value, timestamp, dirty, &mut out)?;
        Ok(out)
    }

    /// [`put`](Self::put), appending the flushed entries to `out`.
    pub fn put_into(
        &mut self,
        id: NamedCacheId,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        dirty: bool,
        out: &mut Vec<DirtyEntry>,
    ) -> Result<()> {
        self.stats.puts += 1;
        let cache = named_mut(&mut self.slots, id).ok_or_else(|| closed(id))?;
        let before = cache.size_bytes;
        cache.put(key, value, timestamp, dirty)?;
        self.size_bytes = self.size_bytes - before + cache.size_bytes;
        self.evict_over_budget(id, out);
        Ok(())
    }

    /// A [`get`](Self::get) then a dirty [`put_into`](Self::put_into) of
    /// `key` (a caching store's read-modify-write), finding the entry once:
    /// `update(old, buf)` gets the cached value, or on a miss what
    /// `missing()` reads from the store below (None: absent), writes the new
    /// value into the empty `buf` and returns true, or returns false to
    /// delete. Hits, misses, LRU and dirty order, sizes and evictions are
    /// exactly those of the get and the put. Fails on a closed cache (before
    /// `missing` runs) or with what `missing` or `update` fail with, leaving
    /// the entry's value as it was.
    pub fn update_into(
        &mut self,
        id: NamedCacheId,
        key: &[u8],
        timestamp: i64,
        missing: impl FnOnce() -> Result<Option<Vec<u8>>>,
        update: impl FnOnce(Option<&[u8]>, &mut Vec<u8>) -> Result<bool>,
        out: &mut Vec<DirtyEntry>,
    ) -> Result<()> {
        let cache = named_mut(&mut self.slots, id).ok_or_else(|| closed(id))?;
        self.stats.gets += 1;
        self.stats.puts += 1;
        let before = cache.size_bytes;
        let updated = cache.update(key, timestamp, missing, update);
        self.size_bytes = self.size_bytes - before + cache.size_bytes;
        updated?;
        self.evict_over_budget(id, out);
        Ok(())
    }

    /// Evicts from the named cache `id` only, least recently used first,
    /// until the budget holds or it is empty; once it is empty the budget may
    /// stay exceeded by other caches, which their own puts will shrink.
    fn evict_over_budget(&mut self, id: NamedCacheId, out: &mut Vec<DirtyEntry>) {
        let Some(cache) = named_mut(&mut self.slots, id) else {
            return;
        };
        while self.size_bytes > self.max_bytes && cache.len() > 0 {
            let before = cache.size_bytes;
            cache.evict(out);
            self.size_bytes = self.size_bytes - before + cache.size_bytes;
            self.stats.evicts += 1;
        }
    }

    /// Flushes every dirty entry of the named cache, in dirty order, marking
    /// them clean; flushed deletes leave the cache. Nothing for a closed cache.
    pub fn flush(&mut self, id: NamedCacheId) -> Vec<DirtyEntry> {
        let mut out = Vec::new();
        self.stats.flushes += 1;
        if let Some(cache) = named_mut(&mut self.slots, id) {
            let before = cache.size_bytes;
            cache.flush(None, &mut out);
            self.size_bytes = self.size_bytes - before + cache.size_bytes;
        }
        out
    }

    /// Cached entries (deletes as None) with `from <= key <= to` (either bound
    /// open when None), in key order or reverse key order. Each one counts as
    /// a use, in that order. An inverted range is empty.
    pub fn range(
        &mut self,
        id: NamedCacheId,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        if matches!((from, to), (Some(f), Some(t)) if f > t) {
            return Vec::new();
        }
        let lower = from.map_or(Bound::Unbounded, Bound::Included);
        let upper = to.map_or(Bound::Unbounded, Bound::Included);
        named_mut(&mut self.slots, id)
            .map_or_else(Vec::new, |c| c.scan(lower, upper, reverse, None))
    }

    /// Cached entries whose key starts with `prefix`, in key order; each one
    /// counts as a use.
    pub fn prefix_scan(
        &mut self,
        id: NamedCacheId,
        prefix: &[u8],
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        named_mut(&mut self.slots, id).map_or_else(Vec::new, |c| {
            c.scan(
                Bound::Included(prefix),
                Bound::Unbounded,
                false,
                Some(prefix),
            )
        })
    }

    /// Sets a new budget. Shrinking evicts round-robin over the named caches
    /// (one entry each per turn) until the cache fits, as Kafka does when
    /// threads are added; returns what each dirty eviction flushed, per named
    /// cache, in emission order. The owner of each named cache must write
    /// those entries to its store (see [`write_through`]).
    pub fn resize(&mut self, max_bytes: u64) -> Vec<(NamedCacheId, Vec<DirtyEntry>)> {
        let shrink = max_bytes < self.max_bytes;
        self.max_bytes = max_bytes;
        let mut flushed = Vec::new();
        if !shrink {
            return flushed;
        }
        let slots = self.slots.len();
        let mut slot = 0;
        while self.size_bytes > self.max_bytes {
            // Terminates: size > 0 means some open cache holds an entry.
            let s = &mut self.slots[slot];
            let id = NamedCacheId {
                slot: slot as u32,
                generation: s.generation,
            };
            slot = (slot + 1) % slots;
            let Some(cache) = s.cache.as_mut() else {
                continue;
            };
            if cache.len() == 0 {
                continue;
            }
            let before = cache.size_bytes;
            let mut out = Vec::new();
            cache.evict(&mut out);
            self.size_bytes = self.size_bytes - before + cache.size_bytes;
            self.stats.evicts += 1;
            if !out.is_empty() {
                flushed.push((id, out));
            }
        }
        flushed
    }

    /// Drops every entry of the named cache, dirty ones included, without
    /// flushing (Kafka's `clear`, used when a task's uncommitted state is
    /// thrown away).
    pub fn clear(&mut self, id: NamedCacheId) {
        if let Some(cache) = named_mut(&mut self.slots, id) {
            self.size_bytes -= cache.size_bytes;
            cache.clear();
        }
    }

    /// Drops the named cache and its entries, without flushing; `id` goes stale.
    pub fn close(&mut self, id: NamedCacheId) {
        let Some(slot) = self.slots.get_mut(id.slot as usize) else {
            return;
        };
        if slot.generation != id.generation {
            return;
        }
        if let Some(cache) = slot.cache.take() {
            self.size_bytes -= cache.size_bytes;
            self.names.remove(&cache.name);
            slot.generation = slot.generation.wrapping_add(1);
            self.free_slots.push(id.slot);
        }
    }

    /// Whether `id` names an open cache.
    pub fn is_open(&self, id: NamedCacheId) -> bool {
        self.slots
            .get(id.slot as usize)
            .is_some_and(|s| s.generation == id.generation && s.cache.is_some())
    }

    /// Bytes counted over all named caches.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Entries in the named cache (0 when closed).
    pub fn len(&self, id: NamedCacheId) -> usize {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.cache.as_ref())
            .map_or(0, NamedCache::len)
    }

    /// Bytes counted in the named cache (0 when closed).
    pub fn named_size_bytes(&self, id: NamedCacheId) -> u64 {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.cache.as_ref())
            .map_or(0, |c| c.size_bytes)
    }

    /// Entries over all named caches.
    pub fn num_entries(&self) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.cache.as_ref())
            .map(NamedCache::len)
            .sum()
    }

    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    pub fn named_stats(&self, id: NamedCacheId) -> Option<NamedCacheStats> {
        self.slots
            .get(id.slot as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.cache.as_ref())
            .map(|c| c.stats)
    }
}

// ---------------------------------------------------------------------------
// CachingKeyValueStore

/// An update that reached the underlying store on a flush or an eviction,
/// ready to be forwarded downstream (Kafka's `Record<key, Change<new, old>>`
/// with the cached record's timestamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushedEntry {
    pub key: Vec<u8>,
    /// None for a delete.
    pub new_value: Option<Vec<u8>>,
    /// The store's value before this write (None when absent).
    pub old_value: Option<Vec<u8>>,
    pub timestamp: i64,
}

/// Kafka's `CachingKeyValueStore`: a bytes store seen through its named cache
/// of a thread cache. Reads see the cache first; writes land in the cache as
/// dirty entries; what an eviction or a flush takes out of the cache is
/// written to the store (which logs it, when it is a [`ChangeLogging`]
/// layer, stamped with the entry's timestamp) and appended to the caller's
/// `flushed`, in emission order, with the store's old value: the caller
/// forwards it.
///
/// One difference from Kafka, on purpose: a read that misses the cache does
/// not cache what the store answered (Kafka's `getInternal` does, from the
/// stream thread). Reads never change what the cache holds, so a batch can
/// read all its old values before it writes and still evict exactly where
/// writes one by one would.
///
/// If the store fails while flushed entries are written, the cache has
/// already marked them clean: as in Kafka, the task must then be closed dirty
/// and its state restored from the changelog.
///
/// [`ChangeLogging`]: super::ChangeLogging
pub struct CachingKeyValueStore<'a> {
    store: &'a mut dyn KeyValueBytes,
    cache: &'a mut ThreadCache,
    id: NamedCacheId,
}

/// The flush listener of Kafka's caching store (`putAndMaybeForward`): reads
/// the store's old value and writes the entry, except a delete of a key the
/// store does not have, which is neither written nor forwarded ("this key
/// did not exist in underlying store and also not in the cache").
pub fn write_through(
    store: &mut dyn KeyValueBytes,
    dirty: impl IntoIterator<Item = DirtyEntry>,
    flushed: &mut Vec<FlushedEntry>,
) -> Result<()> {
    for entry in dirty {
        let old_value = store.get(&entry.key)?;
        if entry.value.is_none() && old_value.is_none() {
            continue;
        }
        store.set_record_timestamp(entry.timestamp);
        store.put(&entry.key, entry.value.as_deref())?;
        flushed.push(FlushedEntry {
            key: entry.key,
            new_value: entry.value,
            old_value,
            timestamp: entry.timestamp,
        });
    }
    Ok(())
}

/// Merges cached entries over stored ones, both in the same key order: the
/// cache wins on equal keys and its deletes hide stored entries (Kafka's
/// `MergedSortedCacheKeyValueBytesStoreIterator`, as fixed by KAFKA-18326).
fn merge(
    cached: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    stored: Vec<(Vec<u8>, Vec<u8>)>,
    reverse: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(cached.len() + stored.len());
    let mut cached = cached.into_iter().peekable();
    let mut stored = stored.into_iter().peekable();
    loop {
        let order = match (cached.peek(), stored.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((c, _)), Some((s, _))) if reverse => s.cmp(c),
            (Some((c, _)), Some((s, _))) => c.cmp(s),
        };
        if order == Ordering::Greater {
            out.extend(stored.next());
            continue;
        }
        if order == Ordering::Equal {
            stored.next();
        }
        if let Some((key, Some(value))) = cached.next() {
            out.push((key, value));
        }
    }
    out
}

impl<'a> CachingKeyValueStore<'a> {
    /// `store` seen through the named cache `id` of `cache`.
    pub fn new(
        store: &'a mut dyn KeyValueBytes,
        cache: &'a mut ThreadCache,
        id: NamedCacheId,
    ) -> Self {
        CachingKeyValueStore { store, cache, id }
    }

    /// The value of `key`: the cached one (None for a cached delete), which
    /// counts as a use, else the store's.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.cache.get(self.id, key) {
            Some(hit) => Ok(hit.value.map(<[u8]>::to_vec)),
            None => self.store.get(key),
        }
    }

    /// [`get`](Self::get) without counting a use.
    pub fn peek(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.cache.peek(self.id, key) {
            Some(hit) => Ok(hit.value.map(<[u8]>::to_vec)),
            None => self.store.get(key),
        }
    }

    /// [`peek`](Self::peek), counted as a hit or a miss (but not as a use):
    /// a batch's reads of its old values, before it puts.
    pub fn peek_counted(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let cached = self
            .cache
            .peek(self.id, key)
            .map(|hit| hit.value.map(<[u8]>::to_vec));
        self.cache.count_read(self.id, cached.is_some());
        match cached {
            Some(value) => Ok(value),
            None => self.store.get(key),
        }
    }

    /// Writes `value` (None deletes) into the cache as a dirty entry carrying
    /// the record's `timestamp`; what the put evicts is written through.
    pub fn put(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        flushed: &mut Vec<FlushedEntry>,
    ) -> Result<()> {
        let mut dirty = Vec::new();
        self.cache
            .put_into(self.id, key, value, timestamp, true, &mut dirty)?;
        write_through(self.store, dirty, flushed)
    }

    /// A [`get`](Self::get) then a [`put`](Self::put) of `key` with one
    /// cache lookup: `update(old, buf)` writes the new value into `buf` and
    /// returns true, or returns false to delete (see
    /// [`ThreadCache::update_into`]).
    pub fn update(
        &mut self,
        key: &[u8],
        timestamp: i64,
        update: impl FnOnce(Option<&[u8]>, &mut Vec<u8>) -> Result<bool>,
        flushed: &mut Vec<FlushedEntry>,
    ) -> Result<()> {
        let mut dirty = Vec::new();
        let store = &*self.store;
        self.cache.update_into(
            self.id,
            key,
            timestamp,
            || store.get(key),
            update,
            &mut dirty,
        )?;
        write_through(self.store, dirty, flushed)
    }

    /// Puts `value` unless the key has a value; returns the existing value.
    pub fn put_if_absent(
        &mut self,
        key: &[u8],
        value: &[u8],
        timestamp: i64,
        flushed: &mut Vec<FlushedEntry>,
    ) -> Result<Option<Vec<u8>>> {
        let existing = self.get(key)?;
        if existing.is_none() {
            self.put(key, Some(value), timestamp, flushed)?;
        }
        Ok(existing)
    }

    /// Caches a delete; returns the value the key had.
    pub fn delete(
        &mut self,
        key: &[u8],
        timestamp: i64,
        flushed: &mut Vec<FlushedEntry>,
    ) -> Result<Option<Vec<u8>>> {
        let existing = self.get(key)?;
        self.put(key, None, timestamp, flushed)?;
        Ok(existing)
    }

    /// Entries with `from <= key <= to` (either bound open when None), cache
    /// over store, in key order or reverse key order; a snapshot. Each
    /// cached entry in range counts as a use, as Kafka's cache iterator does.
    pub fn range(
        &mut self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if matches!((from, to), (Some(f), Some(t)) if f > t) {
            return Ok(Vec::new());
        }
        let cached = self.cache.range(self.id, from, to, reverse);
        let stored = self.store.range(from, to, reverse)?;
        Ok(merge(cached, stored, reverse))
    }

    /// Entries whose key starts with `prefix`, cache over store, in key order.
    pub fn prefix_scan(&mut self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let cached = self.cache.prefix_scan(self.id, prefix);
        let stored = self.store.prefix_scan(prefix)?;
        Ok(merge(cached, stored, false))
    }

    /// Writes every dirty entry of the named cache through to the store, in
    /// last-update order (Kafka's `flushCache`, the first step of a commit).
    pub fn flush(&mut self, flushed: &mut Vec<FlushedEntry>) -> Result<()> {
        let dirty = self.cache.flush(self.id);
        write_through(self.store, dirty, flushed)
    }
}
