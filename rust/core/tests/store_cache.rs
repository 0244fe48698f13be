//! The record cache against Kafka Streams' behaviour. Scenarios follow
//! Kafka's `ThreadCacheTest`, `NamedCacheTest` and
//! `CachingInMemoryKeyValueStoreTest` (named per test); the two seeded random
//! tests check the cache against a naive transcription of Kafka's algorithm
//! and the caching store against plain ordered maps.

use std::collections::BTreeMap;

use strom_core::store::cache::{
    CachingKeyValueStore, DirtyEntry, ENTRY_OVERHEAD_BYTES, FlushedEntry, NamedCacheId,
    ThreadCache, entry_size, write_through,
};
use strom_core::store::{ChangeLogging, ChangelogBuffer, InMemoryKeyValueStore, KeyValueBytes};

fn dirty(key: &[u8], value: Option<&[u8]>, timestamp: i64) -> DirtyEntry {
    DirtyEntry {
        key: key.to_vec(),
        value: value.map(<[u8]>::to_vec),
        timestamp,
    }
}

fn keys(entries: &[DirtyEntry]) -> Vec<&[u8]> {
    entries.iter().map(|e| e.key.as_slice()).collect()
}

/// Size of an entry with a 1-byte key and a 1-byte value, as in Kafka's tests.
const SMALL: u64 = 47;

// ---------------------------------------------------------------------------
// ThreadCache / NamedCache

/// `ThreadCacheTest.shouldCalculateSizeInBytes`, `shouldResizeAndShrink`;
/// `NamedCacheTest.shouldKeepTrackOfSize`: the same byte counts as Kafka.
#[test]
fn sizes_match_kafka_and_shrinking_evicts() {
    assert_eq!(entry_size(&[1], Some(&[0])), SMALL);
    assert_eq!(entry_size(b"key", None), 3 + ENTRY_OVERHEAD_BYTES);

    let mut cache = ThreadCache::new(10_000);
    let a = cache.named(&ThreadCache::namespace("0_0", "a"));
    let b = cache.named(&ThreadCache::namespace("0_0", "b"));
    for k in 1..=3u8 {
        assert!(
            cache
                .put(a, &[k], Some(&[0]), -1, false)
                .unwrap()
                .is_empty()
        );
    }
    assert_eq!(cache.size_bytes(), 141);
    assert_eq!(cache.named_size_bytes(a), 141);

    // Clean entries leave silently, least recently used first.
    assert!(cache.resize(100).is_empty());
    assert_eq!(cache.size_bytes(), 94);
    assert!(cache.get(a, &[1]).is_none());
    assert!(cache.get(a, &[2]).is_some());

    // Over budget because of `a`, a put into `b` can only evict from `b`.
    assert!(
        cache
            .put(b, &[4], Some(&[0]), -1, false)
            .unwrap()
            .is_empty()
    );
    assert_eq!(cache.size_bytes(), 94);
    assert_eq!(cache.len(b), 0);
    assert_eq!(cache.len(a), 2);
    assert_eq!(cache.max_bytes(), 100);
}

/// `NamedCache.put` ("remove then add" keeps arrival order) and
/// `ThreadCacheTest.shouldFlushDirtyEntriesForNamespace`.
#[test]
fn dirty_order_is_last_update_order() {
    let mut cache = ThreadCache::new(100_000);
    let ns1 = cache.named("0_0-s1");
    let ns2 = cache.named("0_0-s2");
    cache.put(ns1, b"a", Some(b"1"), 1, true).unwrap();
    cache.put(ns1, b"b", Some(b"2"), 2, true).unwrap();
    cache.put(ns1, b"c", Some(b"3"), 3, true).unwrap();
    cache.put(ns2, b"x", Some(b"9"), 9, true).unwrap();
    cache.put(ns1, b"a", Some(b"4"), 4, true).unwrap();
    // A read moves the entry in LRU order only, not in dirty order.
    assert_eq!(cache.get(ns1, b"b").unwrap().value, Some(&b"2"[..]));

    let flushed = cache.flush(ns1);
    assert_eq!(
        flushed,
        vec![
            dirty(b"b", Some(b"2"), 2),
            dirty(b"c", Some(b"3"), 3),
            dirty(b"a", Some(b"4"), 4),
        ]
    );
    assert!(cache.flush(ns1).is_empty());
    let a = cache.get(ns1, b"a").unwrap();
    assert!(!a.dirty);
    assert_eq!(a.value, Some(&b"4"[..]));
    assert_eq!(cache.flush(ns2), vec![dirty(b"x", Some(b"9"), 9)]);
}

/// `ThreadCacheTest.shouldNotFlushCleanEntriesForNamespace`.
#[test]
fn clean_entries_are_never_flushed() {
    let mut cache = ThreadCache::new(100_000);
    let ns = cache.named("ns");
    for k in 0..3u8 {
        cache.put(ns, &[k], Some(&[k]), -1, false).unwrap();
    }
    assert!(cache.flush(ns).is_empty());
    assert_eq!(cache.len(ns), 3);
}

/// `NamedCacheTest.shouldFlushDirtEntriesOnEviction`: the evicted entry first,
/// then the other dirty entries in dirty order; only that named cache.
#[test]
fn evicting_a_dirty_entry_flushes_the_named_cache() {
    let mut cache = ThreadCache::new(4 * SMALL);
    let ns = cache.named("ns");
    let other = cache.named("other");
    cache.put(other, b"x", Some(b"x"), 0, true).unwrap();
    cache.put(ns, b"a", Some(b"a"), 1, true).unwrap();
    cache.put(ns, b"c", Some(b"c"), 3, true).unwrap();
    cache.put(ns, b"b", Some(b"b"), -1, false).unwrap();
    cache.get(ns, b"a").unwrap();
    // LRU order c, b, a; dirty order a, c.
    let flushed = cache.put(ns, b"d", Some(b"d"), 4, true).unwrap();
    assert_eq!(
        flushed,
        vec![
            dirty(b"c", Some(b"c"), 3),
            dirty(b"a", Some(b"a"), 1),
            dirty(b"d", Some(b"d"), 4),
        ]
    );
    assert!(cache.get(ns, b"c").is_none());
    assert!(!cache.get(ns, b"d").unwrap().dirty);
    assert_eq!(cache.len(ns), 3);
    assert_eq!(cache.size_bytes(), 4 * SMALL);
    assert_eq!(cache.flush(other), vec![dirty(b"x", Some(b"x"), 0)]);
}

/// `ThreadCacheTest.evict`: a budget of one entry; each dirty eviction flushes
/// the evicted entry and the newly put one, the next eviction is silent.
#[test]
fn one_entry_budget_evicts_on_every_put() {
    let mut cache = ThreadCache::new(entry_size(b"K1", Some(b"V1")));
    let ns = cache.named("ns");
    let mut flushed = Vec::new();
    for i in 1..=5 {
        let k = format!("K{i}");
        let v = format!("V{i}");
        flushed.extend(
            cache
                .put(ns, k.as_bytes(), Some(v.as_bytes()), i, true)
                .unwrap(),
        );
    }
    assert_eq!(keys(&flushed), vec![&b"K1"[..], b"K2", b"K3", b"K4"]);
    assert_eq!(cache.stats().evicts, 4);
    assert_eq!(cache.stats().puts, 5);
    assert_eq!(cache.flush(ns), vec![dirty(b"K5", Some(b"V5"), 5)]);
}

/// `ThreadCacheTest.shouldEvictImmediatelyIfCacheSizeIsZero` / `…IsVerySmall`,
/// `shouldNotForwardCleanEntryOnEviction`.
#[test]
fn tiny_budgets_evict_at_once_and_clean_evictions_are_silent() {
    for budget in [0, 1] {
        let mut cache = ThreadCache::new(budget);
        let ns = cache.named("ns");
        assert!(
            cache
                .put(ns, &[1], Some(&[0]), 0, false)
                .unwrap()
                .is_empty()
        );
        assert_eq!(cache.len(ns), 0);
        let flushed = cache.put(ns, &[0], Some(&[5]), 7, true).unwrap();
        assert_eq!(flushed, vec![dirty(&[0], Some(&[5]), 7)]);
        assert!(cache.flush(ns).is_empty());
        assert_eq!(cache.size_bytes(), 0);
    }
}

/// `NamedCacheTest.shouldKeepTrackOfMostRecentlyAndLeastRecentlyUsed`: a read
/// makes an entry the most recently used.
#[test]
fn get_updates_lru_order() {
    let mut cache = ThreadCache::new(3 * SMALL);
    let ns = cache.named("ns");
    for k in 1..=3u8 {
        cache.put(ns, &[k], Some(&[k]), 0, false).unwrap();
    }
    assert!(cache.get(ns, &[1]).is_some());
    cache.put(ns, &[4], Some(&[4]), 0, false).unwrap();
    assert!(cache.get(ns, &[2]).is_none());
    for k in [1u8, 3, 4] {
        assert!(cache.get(ns, &[k]).is_some(), "key {k}");
    }
    let stats = cache.named_stats(ns).unwrap();
    assert_eq!((stats.hits, stats.misses), (4, 1));
}

/// A batch's counted peeks count hits and misses for the hit ratio but leave
/// the LRU order alone: the least recently used entry is still evicted first.
#[test]
fn counted_peeks_count_hits_and_misses_without_a_use() {
    let mut inner = InMemoryKeyValueStore::new();
    let mut cache = ThreadCache::new(2 * SMALL);
    let id = cache.named("ns");
    cache.put(id, &[1], Some(&[1]), 0, false).unwrap();
    cache.put(id, &[2], Some(&[2]), 0, false).unwrap();
    {
        let mut logged = ChangeLogging::new(&mut inner, None);
        let mut store = CachingKeyValueStore::new(&mut logged, &mut cache, id);
        assert_eq!(store.peek_counted(&[1]).unwrap(), Some(vec![1]));
        assert_eq!(store.peek_counted(&[3]).unwrap(), None);
    }
    let stats = cache.named_stats(id).unwrap();
    assert_eq!((stats.hits, stats.misses), (1, 1));
    cache.put(id, &[3], Some(&[3]), 0, false).unwrap();
    assert!(
        cache.peek(id, &[1]).is_none(),
        "key 1 was not used: evicted first"
    );
}

/// Kafka's cache iterator reads each key through `NamedCache.get`, so a scan
/// counts as a use in key order (`ThreadCache.MemoryLRUCacheBytesIterator`).
#[test]
fn range_scans_count_as_use_in_key_order() {
    let mut cache = ThreadCache::new(3 * SMALL);
    let ns = cache.named("ns");
    for k in [b"c", b"b", b"a"] {
        cache.put(ns, k, Some(b"v"), 0, false).unwrap();
    }
    let scanned = cache.range(ns, None, None, false);
    let scanned: Vec<&[u8]> = scanned.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(scanned, vec![&b"a"[..], b"b", b"c"]);
    // Without the scan "c" would be the eldest; after it, "a" is.
    cache.put(ns, b"d", Some(b"v"), 0, false).unwrap();
    assert!(cache.get(ns, b"a").is_none());
    assert!(cache.get(ns, b"c").is_some());

    let rev = cache.range(ns, Some(b"b"), Some(b"d"), true);
    let rev: Vec<&[u8]> = rev.iter().map(|(k, _)| k.as_slice()).collect();
    assert_eq!(rev, vec![&b"d"[..], b"c", b"b"]);
    assert!(cache.range(ns, Some(b"d"), Some(b"b"), false).is_empty());
}

/// `ThreadCacheTest.shouldNotLoopForEverWhenEvictingAndCurrentCacheIsEmpty`:
/// eviction stops once the cache that was put into is empty.
#[test]
fn eviction_only_from_the_named_cache_put_into() {
    let mut cache = ThreadCache::new(100);
    let a = cache.named("a");
    let b = cache.named("b");
    cache.put(a, &[1], Some(&[1]), 1, true).unwrap();
    cache.put(a, &[2], Some(&[2]), 2, true).unwrap();
    let big = vec![7u8; 100];
    let flushed = cache.put(b, &[9], Some(&big), 9, true).unwrap();
    assert_eq!(flushed, vec![dirty(&[9], Some(&big), 9)]);
    assert_eq!(cache.len(b), 0);
    assert_eq!(cache.len(a), 2);
    assert_eq!(cache.size_bytes(), 2 * SMALL);
    assert_eq!(keys(&cache.flush(a)), vec![&[1u8][..], &[2]]);
}

/// `NamedCacheTest.shouldRemoveDeletedValuesOnFlush`: a cached delete hides
/// the key until flushed, then leaves the cache.
#[test]
fn tombstones_are_cached_until_flushed() {
    let mut cache = ThreadCache::new(100_000);
    let ns = cache.named("ns");
    cache.put(ns, &[0], None, 5, true).unwrap();
    cache.put(ns, &[1], Some(&[20]), 6, true).unwrap();
    let tomb = cache.get(ns, &[0]).unwrap();
    assert!(tomb.is_tombstone() && tomb.dirty);
    assert_eq!(
        cache.flush(ns),
        vec![dirty(&[0], None, 5), dirty(&[1], Some(&[20]), 6)]
    );
    assert_eq!(cache.len(ns), 1);
    assert!(cache.get(ns, &[0]).is_none());
    assert_eq!(cache.size_bytes(), SMALL);
}

/// `NamedCacheTest.shouldThrowIllegalStateExceptionWhenTryingToOverwriteDirtyEntryWithCleanEntry`.
#[test]
fn clean_put_over_dirty_entry_is_refused() {
    let mut cache = ThreadCache::new(100_000);
    let ns = cache.named("ns");
    cache.put(ns, &[0], Some(&[10]), 1, true).unwrap();
    let err = cache.put(ns, &[0], Some(&[11]), 2, false).unwrap_err();
    assert!(err.to_string().contains("dirty"), "{err}");
    let entry = cache.get(ns, &[0]).unwrap();
    assert_eq!((entry.value, entry.dirty), (Some(&[10u8][..]), true));
    cache.flush(ns);
    cache.put(ns, &[0], Some(&[11]), 2, false).unwrap();
}

/// `ThreadCacheTest.shouldCleanupNamedCacheOnClose`; sizes go back to zero.
#[test]
fn flush_and_close_bring_the_size_back_to_zero() {
    let mut cache = ThreadCache::new(100_000);
    let a = cache.named("a");
    let b = cache.named("b");
    for i in 0..50u8 {
        cache.put(a, &[i], Some(&[i; 3]), i.into(), true).unwrap();
        cache
            .put(b, &[i, i], (i % 3 != 0).then_some(&[i][..]), 0, true)
            .unwrap();
    }
    assert_eq!(cache.flush(a).len(), 50);
    assert_eq!(cache.flush(b).len(), 50);
    assert_eq!(cache.num_entries(), 50 + 33);
    cache.close(a);
    assert_eq!(cache.num_entries(), 33);
    cache.close(b);
    assert_eq!(cache.size_bytes(), 0);
    assert_eq!(cache.num_entries(), 0);

    // Closed handles go stale, even when the slot is reused.
    assert!(!cache.is_open(a));
    assert!(cache.put(a, &[1], Some(&[1]), 0, true).is_err());
    assert!(cache.get(a, &[1]).is_none());
    let a2 = cache.named("a");
    assert_ne!(a, a2);
    assert_eq!(cache.len(a), 0);
    assert_eq!(cache.find("a"), Some(a2));
    assert_eq!(cache.find("b"), None);
}

/// `ThreadCache.clear` (Kafka's `clearCache`): dirty writes are dropped unflushed.
#[test]
fn clear_drops_dirty_entries_without_flushing() {
    let mut cache = ThreadCache::new(100_000);
    let ns = cache.named("ns");
    cache.put(ns, b"k", Some(b"v"), 0, true).unwrap();
    cache.clear(ns);
    assert_eq!(cache.size_bytes(), 0);
    assert!(cache.flush(ns).is_empty());
    assert!(cache.is_open(ns));
}

/// `ThreadCache.resize`: round-robin eviction over the named caches; dirty
/// evictions flush their own cache only.
#[test]
fn shrinking_evicts_round_robin_and_reports_flushes_per_cache() {
    let mut cache = ThreadCache::new(100_000);
    let a = cache.named("a");
    let b = cache.named("b");
    for k in 0..3u8 {
        cache.put(a, &[k], Some(&[k]), k.into(), true).unwrap();
        cache.put(b, &[k], Some(&[k]), k.into(), false).unwrap();
    }
    let flushed = cache.resize(4 * SMALL);
    // a evicts 0 (flushing 0, 1, 2), b evicts 0 silently.
    assert_eq!(flushed.len(), 1);
    assert_eq!(flushed[0].0, a);
    assert_eq!(keys(&flushed[0].1), vec![&[0u8][..], &[1], &[2]]);
    assert_eq!((cache.len(a), cache.len(b)), (2, 2));
    assert!(cache.resize(1_000_000).is_empty());
}

// ---------------------------------------------------------------------------
// CachingKeyValueStore

/// An in-memory store with its named cache in a thread cache of its own.
struct Fixture {
    inner: InMemoryKeyValueStore,
    cache: ThreadCache,
    id: NamedCacheId,
}

impl Fixture {
    fn caching(&mut self) -> CachingKeyValueStore<'_> {
        CachingKeyValueStore::new(&mut self.inner, &mut self.cache, self.id)
    }

    fn flush(&mut self) -> Vec<FlushedEntry> {
        let mut out = Vec::new();
        self.caching().flush(&mut out).unwrap();
        out
    }
}

fn store_with(budget: u64, pairs: &[(&[u8], &[u8])]) -> Fixture {
    let mut inner = InMemoryKeyValueStore::new();
    for (k, v) in pairs {
        inner.put(k, Some(v));
    }
    let mut cache = ThreadCache::new(budget);
    let id = cache.named("0_0-store");
    Fixture { inner, cache, id }
}

fn flushed(key: &[u8], new: Option<&[u8]>, old: Option<&[u8]>, ts: i64) -> FlushedEntry {
    FlushedEntry {
        key: key.to_vec(),
        new_value: new.map(<[u8]>::to_vec),
        old_value: old.map(<[u8]>::to_vec),
        timestamp: ts,
    }
}

fn pairs(entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<(&str, &str)> {
    entries
        .iter()
        .map(|(k, v)| {
            (
                std::str::from_utf8(k).unwrap(),
                std::str::from_utf8(v).unwrap(),
            )
        })
        .collect()
}

/// `CachingInMemoryKeyValueStoreTest.shouldPutGetToFromCache`.
#[test]
fn writes_stay_in_the_cache_until_flushed() {
    let mut f = store_with(100_000, &[]);
    let mut out = Vec::new();
    let mut store = f.caching();
    store.put(b"key", Some(b"value"), 10, &mut out).unwrap();
    store.put(b"key2", Some(b"value2"), 11, &mut out).unwrap();
    assert_eq!(store.get(b"key").unwrap(), Some(b"value".to_vec()));
    assert!(out.is_empty());
    assert_eq!(f.inner.approximate_num_entries(), 0);
    assert_eq!(
        f.flush(),
        vec![
            flushed(b"key", Some(b"value"), None, 10),
            flushed(b"key2", Some(b"value2"), None, 11),
        ]
    );
    assert_eq!(f.inner.approximate_num_entries(), 2);
}

/// `CachingInMemoryKeyValueStoreTest.shouldFlushEvictedItemsIntoUnderlyingStore`,
/// `shouldForwardDirtyItemToListenerWhenEvicted`.
#[test]
fn evicted_items_reach_the_underlying_store() {
    let mut f = store_with(10 * SMALL, &[]);
    let mut out = Vec::new();
    let mut added = 0;
    while out.is_empty() {
        let k = [b'0' + added];
        f.caching().put(&k, Some(&k), 0, &mut out).unwrap();
        added += 1;
    }
    assert_eq!(added, 11);
    assert_eq!(out.len(), 11);
    assert_eq!(f.inner.approximate_num_entries(), 11);
    assert_eq!(f.inner.get(b"0"), Some(&b"0"[..]));
}

/// `CachingInMemoryKeyValueStoreTest.shouldForwardOldValuesWhenEnabled` /
/// `shouldAvoidFlushingDeletionsWithoutDirtyKeys`: a flush carries the
/// store's old value, and a delete of a key the store never had is neither
/// written nor forwarded (`CachingKeyValueStore.putAndMaybeForward`).
#[test]
fn flushes_carry_old_values_and_skip_deletes_of_absent_keys() {
    let mut f = store_with(100_000, &[]);
    let mut out = Vec::new();
    f.caching().put(b"1", Some(b"a"), 1, &mut out).unwrap();
    assert_eq!(f.flush(), vec![flushed(b"1", Some(b"a"), None, 1)]);
    f.caching().put(b"1", Some(b"b"), 2, &mut out).unwrap();
    f.caching().put(b"1", Some(b"c"), 3, &mut out).unwrap();
    assert_eq!(f.flush(), vec![flushed(b"1", Some(b"c"), Some(b"a"), 3)]);
    f.caching().put(b"1", None, 4, &mut out).unwrap();
    assert_eq!(f.flush(), vec![flushed(b"1", None, Some(b"c"), 4)]);
    f.caching().put(b"1", Some(b"a"), 5, &mut out).unwrap();
    f.caching().put(b"1", Some(b"b"), 6, &mut out).unwrap();
    f.caching().put(b"1", None, 7, &mut out).unwrap();
    f.caching().put(b"never", None, 8, &mut out).unwrap();
    assert!(f.flush().is_empty());
    assert!(out.is_empty());
    assert_eq!(f.inner.approximate_num_entries(), 0);
}

/// A logged store under the cache logs what a flush writes, each entry
/// stamped with its record's timestamp, and nothing for the skipped delete.
#[test]
fn flushes_reach_the_changelog_of_a_logged_store() {
    let mut inner = InMemoryKeyValueStore::new();
    let mut log = ChangelogBuffer::new();
    let mut cache = ThreadCache::new(100_000);
    let id = cache.named("0_0-store");
    let mut out = Vec::new();
    {
        let mut logged = ChangeLogging::new(&mut inner, Some(&mut log));
        let mut store = CachingKeyValueStore::new(&mut logged, &mut cache, id);
        store.put(b"a", Some(b"1"), 5, &mut out).unwrap();
        store.put(b"absent", None, 6, &mut out).unwrap();
        store.put(b"b", Some(b"2"), 7, &mut out).unwrap();
        store.flush(&mut out).unwrap();
    }
    assert_eq!(out.len(), 2);
    assert_eq!(log.len(), 2);
    assert_eq!((log.key(0), log.value(0)), (&b"a"[..], Some(&b"1"[..])));
    assert_eq!((log.key(1), log.value(1)), (&b"b"[..], Some(&b"2"[..])));
    assert_eq!(log.timestamps(), &[5, 7]);
}

/// `CachingInMemoryKeyValueStoreTest.shouldDeleteItemsFromCache` /
/// `shouldNotShowItemsDeletedFromCacheButFlushedToStoreBeforeDelete`.
#[test]
fn cached_deletes_hide_the_underlying_value() {
    let mut f = store_with(100_000, &[(b"a", b"a")]);
    let mut out = Vec::new();
    let mut store = f.caching();
    assert_eq!(
        store.delete(b"a", 3, &mut out).unwrap(),
        Some(b"a".to_vec())
    );
    assert_eq!(store.get(b"a").unwrap(), None);
    assert_eq!(store.peek(b"a").unwrap(), None);
    assert!(
        store
            .range(Some(b"a"), Some(b"b"), false)
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .range(Some(b"a"), Some(b"b"), true)
            .unwrap()
            .is_empty()
    );
    assert!(store.range(None, None, false).unwrap().is_empty());
    assert!(store.range(None, None, true).unwrap().is_empty());
    assert_eq!(f.inner.get(b"a"), Some(&b"a"[..]));

    assert_eq!(f.flush(), vec![flushed(b"a", None, Some(b"a"), 3)]);
    assert_eq!(f.inner.get(b"a"), None);
    assert_eq!(f.cache.len(f.id), 0);
    assert_eq!(f.cache.size_bytes(), 0);
}

/// `CachingInMemoryKeyValueStoreTest.shouldIterateAllStoredItems`,
/// `shouldIterateOverRange`, `shouldReverseIterate*`, `shouldGetRecordsWithPrefixKey*`:
/// the cache over the store in key order (`MergedSortedCacheKeyValueBytesStoreIterator`;
/// deletes hide store entries wherever they sit, as fixed by KAFKA-18326).
#[test]
fn scans_merge_the_cache_over_the_store() {
    let mut f = store_with(
        100_000,
        &[(b"a", b"1"), (b"c", b"1"), (b"e", b"1"), (b"g", b"1")],
    );
    let mut out = Vec::new();
    let mut store = f.caching();
    store.put(b"b", Some(b"2"), 0, &mut out).unwrap();
    store.put(b"c", Some(b"2"), 0, &mut out).unwrap();
    store.put(b"e", None, 0, &mut out).unwrap();
    store.put(b"f", Some(b"2"), 0, &mut out).unwrap();
    store.put(b"h", None, 0, &mut out).unwrap();

    let all = store.range(None, None, false).unwrap();
    assert_eq!(
        pairs(&all),
        vec![("a", "1"), ("b", "2"), ("c", "2"), ("f", "2"), ("g", "1")]
    );
    let mut rev = store.range(None, None, true).unwrap();
    rev.reverse();
    assert_eq!(rev, all);
    assert_eq!(
        pairs(&store.range(Some(b"b"), Some(b"f"), false).unwrap()),
        vec![("b", "2"), ("c", "2"), ("f", "2")]
    );
    assert_eq!(
        pairs(&store.range(Some(b"d"), None, true).unwrap()),
        vec![("g", "1"), ("f", "2")]
    );
    assert!(
        store
            .range(Some(b"f"), Some(b"b"), false)
            .unwrap()
            .is_empty()
    );

    let mut f = store_with(100_000, &[(b"p11", b"2"), (b"k1", b"1"), (b"abcdd", b"1")]);
    let mut store = f.caching();
    for key in [&b"p2"[..], b"p1", b"p0", b"abcd", b"abce", b"abc"] {
        store.put(key, Some(b"2"), 0, &mut out).unwrap();
    }
    assert_eq!(
        pairs(&store.prefix_scan(b"p1").unwrap()),
        vec![("p1", "2"), ("p11", "2")]
    );
    assert_eq!(
        pairs(&store.prefix_scan(b"abcd").unwrap()),
        vec![("abcd", "2"), ("abcdd", "1")]
    );
    assert!(out.is_empty());
}

/// Unlike Kafka's `CachingKeyValueStore.getInternal`, a read that misses the
/// cache leaves the cache as it was (see `CachingKeyValueStore`); a hit
/// counts as a use, a peek does not.
#[test]
fn reads_do_not_fill_the_cache() {
    let mut f = store_with(2 * SMALL, &[(b"y", b"1"), (b"z", b"1")]);
    let mut out = Vec::new();
    let mut store = f.caching();
    store.put(b"x", Some(b"9"), 5, &mut out).unwrap();
    assert_eq!(store.get(b"y").unwrap(), Some(b"1".to_vec()));
    assert_eq!(store.get(b"z").unwrap(), Some(b"1".to_vec()));
    assert_eq!(store.peek(b"x").unwrap(), Some(b"9".to_vec()));
    assert!(out.is_empty());
    assert_eq!(f.cache.len(f.id), 1);
}

/// `CachingKeyValueStore.putIfAbsent` reads through the cache.
#[test]
fn put_if_absent_sees_cache_and_store() {
    let mut f = store_with(100_000, &[(b"s", b"stored")]);
    let mut out = Vec::new();
    let mut store = f.caching();
    assert_eq!(
        store.put_if_absent(b"s", b"new", 0, &mut out).unwrap(),
        Some(b"stored".to_vec())
    );
    assert_eq!(
        store.put_if_absent(b"n", b"new", 1, &mut out).unwrap(),
        None
    );
    assert_eq!(
        store.put_if_absent(b"n", b"newer", 2, &mut out).unwrap(),
        Some(b"new".to_vec())
    );
    assert_eq!(f.flush(), vec![flushed(b"n", Some(b"new"), None, 1)]);
}

/// `ThreadCache.resize` flushes go to their stores through `write_through`.
#[test]
fn resize_flushes_are_written_by_their_store() {
    let mut f = store_with(100_000, &[]);
    let mut out = Vec::new();
    f.caching().put(b"a", Some(b"1"), 1, &mut out).unwrap();
    f.caching().put(b"b", Some(b"2"), 2, &mut out).unwrap();
    let evicted = f.cache.resize(SMALL);
    assert_eq!(evicted.len(), 1);
    let (id, entries) = evicted.into_iter().next().unwrap();
    assert_eq!(id, f.id);
    write_through(&mut f.inner, entries, &mut out).unwrap();
    assert_eq!(
        out,
        vec![
            flushed(b"a", Some(b"1"), None, 1),
            flushed(b"b", Some(b"2"), None, 2)
        ]
    );
    assert_eq!(f.inner.approximate_num_entries(), 2);
    assert_eq!(f.caching().get(b"a").unwrap(), Some(b"1".to_vec()));
}

// ---------------------------------------------------------------------------
// Seeded random tests

/// splitmix64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pct(&mut self, p: u64) -> bool {
        self.below(100) < p
    }

    fn key(&mut self, space: u64) -> Vec<u8> {
        // Variable-length keys so prefixes and byte order matter.
        let k = self.below(space) as u8;
        if k.is_multiple_of(3) {
            vec![k % 4]
        } else {
            vec![k % 4, k]
        }
    }

    fn value(&mut self) -> Vec<u8> {
        let len = self.below(24) as usize;
        (0..len).map(|_| self.next() as u8).collect()
    }

    fn bound(&mut self, space: u64) -> Option<Vec<u8>> {
        self.pct(70).then(|| self.key(space))
    }
}

/// key, value (None: delete), timestamp, dirty
type RefEntry = (Vec<u8>, Option<Vec<u8>>, i64, bool);

/// Kafka's `NamedCache`/`ThreadCache` algorithm written the slow, obvious way:
/// vectors in LRU order (front = eldest) and dirty order.
#[derive(Default)]
struct RefNamed {
    lru: Vec<RefEntry>,
    dirty: Vec<Vec<u8>>,
}

impl RefNamed {
    fn size(&self) -> u64 {
        self.lru
            .iter()
            .map(|(k, v, _, _)| entry_size(k, v.as_deref()))
            .sum()
    }

    fn pos(&self, key: &[u8]) -> Option<usize> {
        self.lru.iter().position(|e| e.0 == key)
    }

    fn flush(&mut self, evicted: Option<DirtyEntry>, out: &mut Vec<DirtyEntry>) {
        if let Some(e) = evicted {
            self.dirty.retain(|k| *k != e.key);
            out.push(e);
        }
        let mut deleted = Vec::new();
        for key in std::mem::take(&mut self.dirty) {
            let p = self.pos(&key).unwrap();
            let e = &mut self.lru[p];
            e.3 = false;
            out.push(dirty(&e.0, e.1.as_deref(), e.2));
            if e.1.is_none() {
                deleted.push(key);
            }
        }
        self.lru.retain(|e| !deleted.contains(&e.0));
    }

    fn evict(&mut self, out: &mut Vec<DirtyEntry>) {
        let (k, v, t, d) = self.lru.remove(0);
        if d {
            self.flush(Some(dirty(&k, v.as_deref(), t)), out);
        }
    }
}

struct RefCache {
    max: u64,
    caches: Vec<RefNamed>,
}

impl RefCache {
    fn size(&self) -> u64 {
        self.caches.iter().map(RefNamed::size).sum()
    }

    fn put(
        &mut self,
        ns: usize,
        key: &[u8],
        value: Option<&[u8]>,
        t: i64,
        d: bool,
    ) -> Option<Vec<DirtyEntry>> {
        let c = &mut self.caches[ns];
        if let Some(p) = c.pos(key) {
            if c.lru[p].3 && !d {
                return None;
            }
            c.lru.remove(p);
        }
        c.lru.push((key.to_vec(), value.map(<[u8]>::to_vec), t, d));
        if d {
            c.dirty.retain(|k| k != key);
            c.dirty.push(key.to_vec());
        }
        let mut out = Vec::new();
        while self.size() > self.max && !self.caches[ns].lru.is_empty() {
            self.caches[ns].evict(&mut out);
        }
        Some(out)
    }

    fn get(&mut self, ns: usize, key: &[u8]) -> Option<(Option<Vec<u8>>, i64, bool)> {
        let c = &mut self.caches[ns];
        let p = c.pos(key)?;
        let e = c.lru.remove(p);
        let seen = (e.1.clone(), e.2, e.3);
        c.lru.push(e);
        Some(seen)
    }

    fn range(
        &mut self,
        ns: usize,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        if matches!((from, to), (Some(f), Some(t)) if f > t) {
            return Vec::new();
        }
        let mut ks: Vec<Vec<u8>> = self.caches[ns]
            .lru
            .iter()
            .map(|e| e.0.clone())
            .filter(|k| {
                from.is_none_or(|f| k.as_slice() >= f) && to.is_none_or(|t| k.as_slice() <= t)
            })
            .collect();
        ks.sort();
        if reverse {
            ks.reverse();
        }
        ks.iter()
            .map(|k| (k.clone(), self.get(ns, k).unwrap().0))
            .collect()
    }

    fn resize(&mut self, max: u64) -> Vec<(usize, Vec<DirtyEntry>)> {
        let shrink = max < self.max;
        self.max = max;
        let mut flushed = Vec::new();
        let mut ns = 0;
        while shrink && self.size() > self.max {
            let this = ns;
            ns = (ns + 1) % self.caches.len();
            if self.caches[this].lru.is_empty() {
                continue;
            }
            let mut out = Vec::new();
            self.caches[this].evict(&mut out);
            if !out.is_empty() {
                flushed.push((this, out));
            }
        }
        flushed
    }
}

/// Random operations on a `ThreadCache` with three named caches and a tiny
/// budget, compared step by step with the reference transcription: every
/// emitted entry, in order, every read, every size.
#[test]
fn random_operations_match_kafkas_algorithm() {
    for seed in 0..40u64 {
        let mut rng = Rng(seed);
        let budget = 150 + rng.below(500);
        let mut cache = ThreadCache::new(budget);
        let names = ["0_0-a", "0_1-a", "1_0-b"];
        let mut ids: Vec<NamedCacheId> = names.iter().map(|n| cache.named(n)).collect();
        let mut model = RefCache {
            max: budget,
            caches: (0..3).map(|_| RefNamed::default()).collect(),
        };
        for step in 0..3_000 {
            let ns = rng.below(3) as usize;
            let id = ids[ns];
            let ctx = format!("seed {seed} step {step}");
            match rng.below(100) {
                0..=44 => {
                    let key = rng.key(24);
                    let value = rng.pct(80).then(|| rng.value());
                    let d = rng.pct(85);
                    let t = step;
                    let got = cache.put(id, &key, value.as_deref(), t, d);
                    match model.put(ns, &key, value.as_deref(), t, d) {
                        Some(expected) => assert_eq!(got.unwrap(), expected, "{ctx}"),
                        None => assert!(got.is_err(), "{ctx}"),
                    }
                }
                45..=69 => {
                    let key = rng.key(24);
                    let got = cache
                        .get(id, &key)
                        .map(|e| (e.value.map(<[u8]>::to_vec), e.timestamp, e.dirty));
                    assert_eq!(got, model.get(ns, &key), "{ctx}");
                }
                70..=79 => {
                    let (from, to) = (rng.bound(24), rng.bound(24));
                    let reverse = rng.pct(50);
                    assert_eq!(
                        cache.range(id, from.as_deref(), to.as_deref(), reverse),
                        model.range(ns, from.as_deref(), to.as_deref(), reverse),
                        "{ctx}"
                    );
                }
                80..=84 => {
                    let prefix = vec![rng.below(4) as u8];
                    let upper = vec![prefix[0], u8::MAX];
                    assert_eq!(
                        cache.prefix_scan(id, &prefix),
                        model.range(ns, Some(&prefix), Some(&upper), false),
                        "{ctx}"
                    );
                }
                85..=94 => {
                    let mut expected = Vec::new();
                    model.caches[ns].flush(None, &mut expected);
                    assert_eq!(cache.flush(id), expected, "{ctx}");
                }
                95..=97 => {
                    let max = 100 + rng.below(600);
                    let got: Vec<(usize, Vec<DirtyEntry>)> = cache
                        .resize(max)
                        .into_iter()
                        .map(|(id, es)| (ids.iter().position(|i| *i == id).unwrap(), es))
                        .collect();
                    assert_eq!(got, model.resize(max), "{ctx}");
                }
                _ => {
                    // Close and reopen: the cache comes back empty, in the same slot.
                    cache.close(id);
                    ids[ns] = cache.named(names[ns]);
                    model.caches[ns] = RefNamed::default();
                }
            }
            assert_eq!(cache.size_bytes(), model.size(), "{ctx}");
            for (i, id) in ids.iter().enumerate() {
                assert_eq!(cache.len(*id), model.caches[i].lru.len(), "{ctx}");
                assert_eq!(cache.named_size_bytes(*id), model.caches[i].size(), "{ctx}");
            }
        }
    }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn contents(store: &InMemoryKeyValueStore) -> Model {
    store
        .range(None, None)
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
        .collect()
}

fn model_range(
    model: &Model,
    from: Option<&[u8]>,
    to: Option<&[u8]>,
    reverse: bool,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out: Vec<_> = model
        .iter()
        .filter(|(k, _)| {
            from.is_none_or(|f| k.as_slice() >= f) && to.is_none_or(|t| k.as_slice() <= t)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if matches!((from, to), (Some(f), Some(t)) if f > t) {
        out.clear();
    }
    if reverse {
        out.reverse();
    }
    out
}

/// Applies flushed entries to the model of the underlying store, checking
/// each old value against it first.
fn apply(flushed_model: &mut Model, entries: &[FlushedEntry], ctx: &str) {
    for e in entries {
        let before = flushed_model.get(&e.key).cloned();
        assert_eq!(e.old_value, before, "{ctx}: old value of {:?}", e.key);
        assert!(
            e.new_value.is_some() || before.is_some(),
            "{ctx}: delete of an absent key emitted"
        );
        match &e.new_value {
            Some(v) => flushed_model.insert(e.key.clone(), v.clone()),
            None => flushed_model.remove(&e.key),
        };
    }
}

/// Two caching stores over in-memory stores sharing one tiny thread cache:
/// reads (and the old values updates see) always equal a plain map of everything written; the flushed
/// entries, applied in order, always reproduce the underlying store; after
/// a final flush the underlying store equals the map.
#[test]
fn random_caching_store_reads_like_a_map_and_flushes_reproduce_the_store() {
    for seed in 0..30u64 {
        let mut rng = Rng(1000 + seed);
        let mut cache = ThreadCache::new(100 + rng.below(400));
        let ids = [cache.named("0_0-s"), cache.named("0_1-s")];
        let mut inners = [InMemoryKeyValueStore::new(), InMemoryKeyValueStore::new()];
        let mut models = [Model::new(), Model::new()];
        let mut flushed_models = [Model::new(), Model::new()];

        for step in 0..2_500i64 {
            let n = rng.below(2) as usize;
            let ctx = format!("seed {seed} step {step} store {n}");
            let mut store = CachingKeyValueStore::new(&mut inners[n], &mut cache, ids[n]);
            let model = &mut models[n];
            let mut out = Vec::new();
            let mut resized = Vec::new();
            match rng.below(100) {
                30..=39 => {
                    let key = rng.key(30);
                    let byte = rng.next() as u8;
                    let mut seen = None;
                    store
                        .update(
                            &key,
                            step,
                            |old, buf| {
                                seen = Some(old.map(<[u8]>::to_vec));
                                Ok(grow(old, byte, buf))
                            },
                            &mut out,
                        )
                        .unwrap();
                    let old = model.get(&key).cloned();
                    assert_eq!(seen, Some(old.clone()), "{ctx}");
                    let mut buf = Vec::new();
                    if grow(old.as_deref(), byte, &mut buf) {
                        model.insert(key, buf);
                    } else {
                        model.remove(&key);
                    }
                }
                0..=29 => {
                    let key = rng.key(30);
                    let value = rng.pct(85).then(|| rng.value());
                    store.put(&key, value.as_deref(), step, &mut out).unwrap();
                    match value {
                        Some(v) => model.insert(key, v),
                        None => model.remove(&key),
                    };
                }
                40..=49 => {
                    let key = rng.key(30);
                    let old = store.delete(&key, step, &mut out).unwrap();
                    assert_eq!(old, model.remove(&key), "{ctx}");
                }
                50..=54 => {
                    let key = rng.key(30);
                    let value = rng.value();
                    let old = store.put_if_absent(&key, &value, step, &mut out).unwrap();
                    assert_eq!(old.as_ref(), model.get(&key), "{ctx}");
                    model.entry(key).or_insert(value);
                }
                55..=69 => {
                    let key = rng.key(30);
                    assert_eq!(store.get(&key).unwrap().as_ref(), model.get(&key), "{ctx}");
                }
                70..=74 => {
                    let key = rng.key(30);
                    assert_eq!(store.peek(&key).unwrap().as_ref(), model.get(&key), "{ctx}");
                }
                75..=84 => {
                    let (from, to) = (rng.bound(30), rng.bound(30));
                    let reverse = rng.pct(50);
                    assert_eq!(
                        store
                            .range(from.as_deref(), to.as_deref(), reverse)
                            .unwrap(),
                        model_range(model, from.as_deref(), to.as_deref(), reverse),
                        "{ctx}"
                    );
                }
                85..=87 => {
                    let prefix = vec![rng.below(4) as u8];
                    let upper = vec![prefix[0], u8::MAX];
                    assert_eq!(
                        store.prefix_scan(&prefix).unwrap(),
                        model_range(model, Some(&prefix), Some(&upper), false),
                        "{ctx}"
                    );
                }
                88..=96 => store.flush(&mut out).unwrap(),
                _ => resized = cache.resize(60 + rng.below(500)),
            }
            for (id, entries) in resized {
                let m = ids.iter().position(|i| *i == id).unwrap();
                let mut written = Vec::new();
                write_through(&mut inners[m], entries, &mut written).unwrap();
                apply(&mut flushed_models[m], &written, &ctx);
            }
            apply(&mut flushed_models[n], &out, &ctx);
            for (inner, fm) in inners.iter().zip(&flushed_models) {
                assert_eq!(&contents(inner), fm, "{ctx}");
            }
        }
        for n in 0..2 {
            let mut out = Vec::new();
            CachingKeyValueStore::new(&mut inners[n], &mut cache, ids[n])
                .flush(&mut out)
                .unwrap();
            apply(&mut flushed_models[n], &out, "final flush");
            assert_eq!(flushed_models[n], models[n], "seed {seed}");
            assert_eq!(contents(&inners[n]), models[n], "seed {seed}");
        }
    }
}

// ---------------------------------------------------------------------------
// update_into: a get then a put with one lookup

/// A read-modify-write as `update_into` takes it: the new value is the old
/// one (or `stored` on a miss) with `byte` appended, and a delete once it
/// reaches 6 bytes.
fn grow(old: Option<&[u8]>, byte: u8, buf: &mut Vec<u8>) -> bool {
    let old = old.unwrap_or_default();
    if old.len() >= 5 {
        return false;
    }
    buf.extend_from_slice(old);
    buf.push(byte);
    true
}

/// A read-modify-write: key, the store's value below, the byte appended.
type Step<'a> = (&'a [u8], Option<&'a [u8]>, u8);

/// One read-modify-write of `key` (`grow` by `byte`) over `stored` below:
/// with `update_into` when `fused`, else as a get, a store read on a miss,
/// and a put. Returns what it flushed.
fn rmw(
    cache: &mut ThreadCache,
    id: NamedCacheId,
    (key, stored, byte): Step<'_>,
    t: i64,
    fused: bool,
) -> Vec<DirtyEntry> {
    if fused {
        let mut out = Vec::new();
        cache
            .update_into(
                id,
                key,
                t,
                || Ok(stored.map(<[u8]>::to_vec)),
                |old, buf| Ok(grow(old, byte, buf)),
                &mut out,
            )
            .unwrap();
        return out;
    }
    let old = match cache.get(id, key) {
        Some(hit) => hit.value.map(<[u8]>::to_vec),
        None => stored.map(<[u8]>::to_vec),
    };
    let mut buf = Vec::new();
    let keep = grow(old.as_deref(), byte, &mut buf);
    cache
        .put(id, key, keep.then_some(&buf[..]), t, true)
        .unwrap()
}

/// Each cache's observable state: its entries in key order (each read
/// counts as a use in both, in the same order) and its counters.
fn observe(cache: &mut ThreadCache, id: NamedCacheId) -> impl PartialEq + std::fmt::Debug {
    (
        cache.size_bytes(),
        cache.len(id),
        cache.stats(),
        cache.named_stats(id),
    )
}

/// Scenario: with room for two entries, updates hit, miss, evict (a dirty
/// eviction flushes in dirty order, a clean one is silent), re-insert an
/// evicted key from the store's value and delete (a cached tombstone, dropped
/// at flush), exactly as a get and a put each would.
#[test]
fn update_into_is_a_get_then_a_put() {
    let budget = 2 * entry_size(b"a", Some(b"xy"));
    let (mut twin, mut cache) = (ThreadCache::new(budget), ThreadCache::new(budget));
    let (tid, id) = (twin.named("0_0-s"), cache.named("0_0-s"));
    let script: [Step<'_>; 10] = [
        (b"a", None, b'1'),        // miss, absent below: "1"
        (b"b", Some(b"q"), b'2'),  // miss, read below: "q2"
        (b"a", Some(b"zz"), b'3'), // hit, below not read: "13"; LRU b, a
        (b"c", None, b'4'),        // evicts b (dirty): b, then a, c
        (b"a", None, b'5'),        // hit on a clean entry: "135", dirty again
        (b"b", Some(b"q2"), b'6'), // re-insert: evicts c (clean), a (dirty): a, b
        (b"a", Some(b"zz"), b'7'), // evicted: read below again, "zz7"
        (b"a", None, b'8'),        // evicts b (clean) silently
        (b"a", None, b'9'),        // "zz789"
        (b"a", None, b'0'),        // 5 bytes: a delete, cached as a tombstone
    ];
    let mut emitted = Vec::new();
    for (t, step) in script.into_iter().enumerate() {
        let t = t as i64;
        let want = rmw(&mut twin, tid, step, t, false);
        let got = rmw(&mut cache, id, step, t, true);
        assert_eq!(got, want, "step {t}");
        assert_eq!(observe(&mut cache, id), observe(&mut twin, tid), "step {t}");
        emitted.extend(got);
    }
    assert_eq!(
        emitted,
        vec![
            dirty(b"b", Some(b"q2"), 1),
            dirty(b"a", Some(b"13"), 2),
            dirty(b"c", Some(b"4"), 3),
            dirty(b"a", Some(b"135"), 4),
            dirty(b"b", Some(b"q26"), 5),
        ]
    );
    assert_eq!(cache.len(id), 1);
    let hit = cache.get(id, b"a").unwrap();
    assert!(hit.is_tombstone() && hit.dirty);
    twin.get(tid, b"a");
    let flushed = cache.flush(id);
    assert_eq!(flushed, twin.flush(tid));
    assert_eq!(flushed, vec![dirty(b"a", None, 9)]);
    assert!(
        cache.get(id, b"a").is_none(),
        "a flushed delete leaves the cache"
    );
    twin.get(tid, b"a");
    assert_eq!(observe(&mut cache, id), observe(&mut twin, tid));
    assert_eq!(cache.size_bytes(), 0);
}

/// A failing read below or a failing update leaves the entry's value and
/// the sizes as they were, and reaches the caller.
#[test]
fn update_into_failures_change_no_value() {
    let mut cache = ThreadCache::new(10_000);
    let id = cache.named("0_0-s");
    cache.put(id, b"a", Some(b"1"), 0, true).unwrap();
    let size = cache.size_bytes();
    let fail = || strom_core::Error::Store("boom".into());
    let mut out = Vec::new();
    let err = cache.update_into(id, b"a", 1, || Ok(None), |_, _| Err(fail()), &mut out);
    assert!(err.is_err());
    let err = cache.update_into(id, b"b", 1, || Err(fail()), |_, _| Ok(true), &mut out);
    assert!(err.is_err());
    assert_eq!(cache.get(id, b"a").unwrap().value, Some(&b"1"[..]));
    assert!(cache.get(id, b"b").is_none());
    assert_eq!((cache.size_bytes(), cache.len(id)), (size, 1));
    cache.close(id);
    let err = cache.update_into(id, b"a", 1, || Ok(None), |_, _| Ok(true), &mut out);
    assert!(err.unwrap_err().to_string().contains("closed"));
}

/// Random updates, puts, gets and flushes on two named caches under a tiny
/// budget, each applied to a cache with `update_into` and to its twin with a
/// get and a put: every emitted entry, read and counter is the same.
#[test]
fn random_updates_match_gets_then_puts() {
    for seed in 0..40u64 {
        let mut rng = Rng(5000 + seed);
        let budget = 120 + rng.below(400);
        let (mut twin, mut cache) = (ThreadCache::new(budget), ThreadCache::new(budget));
        let tids = [twin.named("0_0-s"), twin.named("0_1-s")];
        let ids = [cache.named("0_0-s"), cache.named("0_1-s")];
        for step in 0..3_000i64 {
            let n = rng.below(2) as usize;
            let (tid, id) = (tids[n], ids[n]);
            let ctx = format!("seed {seed} step {step}");
            let key = rng.key(24);
            match rng.below(100) {
                0..=59 => {
                    let stored = rng.pct(50).then(|| rng.value());
                    let byte = rng.next() as u8;
                    let op = (&key[..], stored.as_deref(), byte);
                    let want = rmw(&mut twin, tid, op, step, false);
                    let got = rmw(&mut cache, id, op, step, true);
                    assert_eq!(got, want, "{ctx}");
                }
                60..=74 => {
                    let value = rng.pct(80).then(|| rng.value());
                    let want = twin.put(tid, &key, value.as_deref(), step, true).unwrap();
                    let got = cache.put(id, &key, value.as_deref(), step, true).unwrap();
                    assert_eq!(got, want, "{ctx}");
                }
                75..=89 => {
                    let want = twin
                        .get(tid, &key)
                        .map(|e| (e.value.map(<[u8]>::to_vec), e.timestamp, e.dirty));
                    let got = cache
                        .get(id, &key)
                        .map(|e| (e.value.map(<[u8]>::to_vec), e.timestamp, e.dirty));
                    assert_eq!(got, want, "{ctx}");
                }
                _ => assert_eq!(cache.flush(id), twin.flush(tid), "{ctx}"),
            }
            assert_eq!(observe(&mut cache, id), observe(&mut twin, tid), "{ctx}");
            assert_eq!(
                cache.range(id, None, None, false),
                twin.range(tid, None, None, false),
                "{ctx}"
            );
        }
    }
}
