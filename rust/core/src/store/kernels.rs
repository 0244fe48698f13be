//! Batch kernels: one call updates a store for a whole batch of records, in
//! record order, so the result equals Kafka Streams' record-at-a-time run.

use super::KeyValueBytes;
use super::cache::{CachingKeyValueStore, FlushedEntry, NamedCacheId, ThreadCache};
use crate::error::Result;
use crate::serde::codec::decode_long;

/// `KGroupedStream.count()`: for each key in order, the count after the
/// record. Values are stored as Kafka `LongSerializer` bytes; the new
/// serialized values are appended to `encoded` (for the changelog).
pub fn count<'k>(
    store: &mut dyn KeyValueBytes,
    keys: impl IntoIterator<Item = &'k [u8]>,
    encoded: &mut Vec<[u8; 8]>,
) -> Result<Vec<i64>> {
    let keys = keys.into_iter();
    let mut counts = Vec::with_capacity(keys.size_hint().0);
    for key in keys {
        let current = match store.get(key)? {
            Some(bytes) => decode_long(&bytes)?,
            None => 0,
        };
        let next = current + 1;
        let bytes = next.to_be_bytes();
        store.put(key, Some(&bytes))?;
        counts.push(next);
        encoded.push(bytes);
    }
    Ok(counts)
}

/// `count()` over a timestamped store (Kafka's `ValueAndTimestamp` layout:
/// 8-byte timestamp, then the `LongSerializer` count). Each result carries
/// the larger of the record's timestamp and the previous result's, as
/// Kafka's `KStreamAggregate` does. Returns the counts and result timestamps;
/// the new serialized values are appended to `encoded`.
pub fn count_timestamped<'k>(
    store: &mut dyn KeyValueBytes,
    records: impl IntoIterator<Item = (&'k [u8], i64)>,
    encoded: &mut Vec<[u8; 16]>,
) -> Result<(Vec<i64>, Vec<i64>)> {
    let records = records.into_iter();
    let mut counts = Vec::with_capacity(records.size_hint().0);
    let mut stamps = Vec::with_capacity(records.size_hint().0);
    for (key, timestamp) in records {
        let (current, result_time) = match store.get(key)? {
            Some(bytes) if bytes.len() == 16 => (
                decode_long(&bytes[8..])?,
                decode_long(&bytes[..8])?.max(timestamp),
            ),
            Some(bytes) => {
                return Err(crate::Error::Serialization(format!(
                    "a timestamped count needs 16 bytes, the store holds {}",
                    bytes.len()
                )));
            }
            None => (0, timestamp),
        };
        let next = current + 1;
        let mut value = [0u8; 16];
        value[..8].copy_from_slice(&result_time.to_be_bytes());
        value[8..].copy_from_slice(&next.to_be_bytes());
        store.set_record_timestamp(result_time);
        store.put(key, Some(&value))?;
        counts.push(next);
        stamps.push(result_time);
        encoded.push(value);
    }
    Ok((counts, stamps))
}

/// Writes a batch of `(key, value, timestamp)` records (a None value
/// deletes) one after the other, as a table source or an aggregation writes
/// its results: each record's old value (the previous record's for a key
/// repeated in the batch) is appended to `olds` when `want_old`. A logged
/// store logs each write with its record's timestamp.
///
/// With a record cache (`Some((cache, id))`) each write goes through the
/// [`CachingKeyValueStore`], exactly as a put per record would: what its
/// evictions flush is written to `store` at once (so the next record reads it
/// there) and appended to `flushed`, in emission order; the caller forwards
/// it. Without a cache, each write goes straight to `store`.
pub fn upsert<'k>(
    store: &mut dyn KeyValueBytes,
    cache: Option<(&mut ThreadCache, NamedCacheId)>,
    records: impl IntoIterator<Item = (&'k [u8], Option<&'k [u8]>, i64)>,
    want_old: bool,
    olds: &mut Vec<Option<Vec<u8>>>,
    flushed: &mut Vec<FlushedEntry>,
) -> Result<()> {
    let Some((cache, id)) = cache else {
        for (key, value, timestamp) in records {
            if want_old {
                olds.push(store.get(key)?);
            }
            store.set_record_timestamp(timestamp);
            store.put(key, value)?;
        }
        return Ok(());
    };
    let mut caching = CachingKeyValueStore::new(store, cache, id);
    for (key, value, timestamp) in records {
        if want_old {
            // A get counts as a use, as a per-record read would.
            olds.push(caching.get(key)?);
        }
        caching.put(key, value, timestamp, flushed)?;
    }
    Ok(())
}

/// Read-modify-write of a batch, one record after the other: for record `i`
/// with `(key, timestamp)`, `update(i, old, buf)` gets the key's current
/// value (None when absent), writes the new value into the empty `buf` and
/// returns true, or returns false to delete. With a record cache the read
/// and the write are one [`CachingKeyValueStore::update`], exactly a get (a
/// use) and a put per record (see [`upsert`]). Without a cache both go to
/// `store`, the write logged with the record's timestamp.
pub fn update_each<'k>(
    store: &mut dyn KeyValueBytes,
    cache: Option<(&mut ThreadCache, NamedCacheId)>,
    records: impl IntoIterator<Item = (&'k [u8], i64)>,
    mut update: impl FnMut(usize, Option<&[u8]>, &mut Vec<u8>) -> Result<bool>,
    flushed: &mut Vec<FlushedEntry>,
) -> Result<()> {
    let Some((cache, id)) = cache else {
        let mut buf = Vec::new();
        for (i, (key, timestamp)) in records.into_iter().enumerate() {
            buf.clear();
            let keep = update(i, store.get(key)?.as_deref(), &mut buf)?;
            store.set_record_timestamp(timestamp);
            store.put(key, keep.then_some(&buf[..]))?;
        }
        return Ok(());
    };
    let mut caching = CachingKeyValueStore::new(store, cache, id);
    for (i, (key, timestamp)) in records.into_iter().enumerate() {
        caching.update(key, timestamp, |old, buf| update(i, old, buf), flushed)?;
    }
    Ok(())
}

/// A timestamped Long (8-byte timestamp, then the count), or an error.
fn timestamped_long(bytes: &[u8]) -> Result<(i64, i64)> {
    if bytes.len() != 16 {
        return Err(crate::Error::Serialization(format!(
            "a timestamped count needs 16 bytes, the store holds {}",
            bytes.len()
        )));
    }
    Ok((decode_long(&bytes[8..])?, decode_long(&bytes[..8])?))
}

/// Appends a timestamped Long to `out`.
fn write_timestamped_long(count: i64, timestamp: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(&timestamp.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
}

/// What a count kernel did to one record: the count before and after (None:
/// absent) and the result's timestamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountChange {
    pub old: Option<i64>,
    pub new: Option<i64>,
    pub timestamp: i64,
}

/// `KGroupedTable.count()` over a timestamped store (Kafka's `KTableAggregate`
/// with count's adder and subtractor): each record is a change of a grouped
/// table, `(key, timestamp, has_new, has_old)`; the old value's retraction
/// takes one off an existing count, the new value adds one (from 0). A
/// count is kept at 0; a retraction of an absent count with no new value
/// deletes. The result carries the later of the record's timestamp and the
/// stored one. Through a record cache when given (see [`update_each`]).
pub fn table_count(
    store: &mut dyn KeyValueBytes,
    cache: Option<(&mut ThreadCache, NamedCacheId)>,
    records: &[(&[u8], i64, bool, bool)],
    flushed: &mut Vec<FlushedEntry>,
) -> Result<Vec<CountChange>> {
    let mut changes = Vec::with_capacity(records.len());
    update_each(
        store,
        cache,
        records
            .iter()
            .map(|&(key, timestamp, _, _)| (key, timestamp)),
        |i, stored, buf| {
            let (_, record_time, has_new, has_old) = records[i];
            let (old, timestamp) = match stored {
                Some(bytes) => {
                    let (count, stored_time) = timestamped_long(bytes)?;
                    (Some(count), record_time.max(stored_time))
                }
                None => (None, record_time),
            };
            let mut new = old;
            if has_old && let Some(count) = new {
                new = Some(count - 1);
            }
            if has_new {
                new = Some(new.unwrap_or(0) + 1);
            }
            changes.push(CountChange {
                old,
                new,
                timestamp,
            });
            if let Some(count) = new {
                write_timestamped_long(count, timestamp, buf);
            }
            Ok(new.is_some())
        },
        flushed,
    )?;
    Ok(changes)
}

/// `KGroupedStream.count()` through a record cache (see
/// [`count_timestamped`] for the values): the new count of each record.
pub fn count_timestamped_cached(
    store: &mut dyn KeyValueBytes,
    cache: (&mut ThreadCache, NamedCacheId),
    records: &[(&[u8], i64)],
    flushed: &mut Vec<FlushedEntry>,
) -> Result<()> {
    update_each(
        store,
        Some(cache),
        records.iter().copied(),
        |i, stored, buf| {
            let record_time = records[i].1;
            let (count, timestamp) = match stored {
                Some(bytes) => {
                    let (count, stored_time) = timestamped_long(bytes)?;
                    (count + 1, record_time.max(stored_time))
                }
                None => (1, record_time),
            };
            write_timestamped_long(count, timestamp, buf);
            Ok(true)
        },
        flushed,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InMemoryKeyValueStore;

    type Record<'a> = (&'a [u8], Option<&'a [u8]>, i64);

    #[test]
    fn count_follows_record_order() {
        let mut store = InMemoryKeyValueStore::new();
        let mut encoded = Vec::new();
        let keys: [&[u8]; 4] = [b"a", b"b", b"a", b"a"];
        let counts = count(&mut store, keys, &mut encoded).unwrap();
        assert_eq!(counts, vec![1, 1, 2, 3]);
        assert_eq!(encoded[3], 3i64.to_be_bytes());
        assert_eq!(store.get(b"a"), Some(&3i64.to_be_bytes()[..]));
    }

    #[test]
    fn timestamped_count_keeps_the_latest_timestamp() {
        let mut store = InMemoryKeyValueStore::new();
        let mut encoded = Vec::new();
        let records: [(&[u8], i64); 3] = [(b"a", 10), (b"a", 5), (b"b", 7)];
        let (counts, stamps) = count_timestamped(&mut store, records, &mut encoded).unwrap();
        assert_eq!((counts, stamps), (vec![1, 2, 1], vec![10, 10, 7]));
        assert_eq!(&encoded[1][..8], &10i64.to_be_bytes());
        assert_eq!(&encoded[1][8..], &2i64.to_be_bytes());
    }

    #[test]
    fn count_rejects_a_corrupt_stored_value() {
        let mut store = InMemoryKeyValueStore::new();
        store.put(b"a", Some(b"xyz"));
        let err = count(&mut store, [&b"a"[..]], &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("not 8"), "{err}");
    }

    #[test]
    fn upsert_returns_olds_in_record_order() {
        let mut store = InMemoryKeyValueStore::new();
        store.put(b"a", Some(b"0"));
        let (mut olds, mut flushed) = (Vec::new(), Vec::new());
        let records: [Record<'_>; 4] = [
            (b"a", Some(b"1"), 1),
            (b"b", Some(b"2"), 2),
            (b"a", None, 3),
            (b"a", Some(b"4"), 4),
        ];
        upsert(&mut store, None, records, true, &mut olds, &mut flushed).unwrap();
        let want: Vec<Option<Vec<u8>>> = vec![Some(b"0".to_vec()), None, Some(b"1".to_vec()), None];
        assert_eq!(olds, want);
        assert!(flushed.is_empty());
        assert_eq!(store.get(b"a"), Some(&b"4"[..]));
    }

    #[test]
    fn upsert_through_a_cache_flushes_as_puts_one_by_one() {
        // Budget for about two entries: the third put evicts the first,
        // which flushes every dirty entry of the cache.
        let size = crate::store::cache::entry_size(b"a", Some(b"1"));
        let run = |batched: bool| {
            let mut store = InMemoryKeyValueStore::new();
            let mut cache = ThreadCache::new(2 * size);
            let id = cache.named("t-s");
            let records: [Record<'_>; 4] = [
                (b"a", Some(b"1"), 1),
                (b"b", Some(b"2"), 2),
                (b"a", Some(b"3"), 3),
                (b"c", Some(b"4"), 4),
            ];
            let (mut olds, mut flushed) = (Vec::new(), Vec::new());
            if batched {
                upsert(
                    &mut store,
                    Some((&mut cache, id)),
                    records,
                    true,
                    &mut olds,
                    &mut flushed,
                )
                .unwrap();
            } else {
                for record in records {
                    upsert(
                        &mut store,
                        Some((&mut cache, id)),
                        [record],
                        true,
                        &mut olds,
                        &mut flushed,
                    )
                    .unwrap();
                }
            }
            (olds, flushed, store.get(b"b").map(<[u8]>::to_vec))
        };
        let (olds, flushed, b) = run(true);
        assert_eq!(run(false), (olds.clone(), flushed.clone(), b.clone()));
        assert_eq!(olds[2], Some(b"1".to_vec()));
        // "c" evicts "b" (least recently used), which flushes "b", then the
        // other dirty entries in last-update order.
        let keys: Vec<&[u8]> = flushed.iter().map(|f| f.key.as_slice()).collect();
        assert_eq!(keys, vec![&b"b"[..], b"a", b"c"]);
        assert_eq!(flushed[1].new_value, Some(b"3".to_vec()));
        assert_eq!(b, Some(b"2".to_vec()));
    }

    #[test]
    fn table_count_retracts_and_adds() {
        let mut store = InMemoryKeyValueStore::new();
        let mut flushed = Vec::new();
        // (key, ts, has_new, has_old): add a, add a, move one away from a,
        // retract from an absent b, add b.
        let records: [(&[u8], i64, bool, bool); 5] = [
            (b"a", 10, true, false),
            (b"a", 5, true, false),
            (b"a", 7, false, true),
            (b"b", 3, false, true),
            (b"b", 4, true, true),
        ];
        let changes = table_count(&mut store, None, &records, &mut flushed).unwrap();
        let got: Vec<_> = changes
            .iter()
            .map(|c| (c.old, c.new, c.timestamp))
            .collect();
        assert_eq!(
            got,
            vec![
                (None, Some(1), 10),
                (Some(1), Some(2), 10),
                (Some(2), Some(1), 10),
                (None, None, 3),
                (None, Some(1), 4),
            ]
        );
        let mut one_at_10 = Vec::new();
        write_timestamped_long(1, 10, &mut one_at_10);
        assert_eq!(store.get(b"a").unwrap(), &one_at_10[..]);
    }

    #[test]
    fn cached_count_matches_the_uncached_kernel_after_a_flush() {
        let mut cached = InMemoryKeyValueStore::new();
        let mut plain = InMemoryKeyValueStore::new();
        let mut cache = ThreadCache::new(100);
        let id = cache.named("t-s");
        let records: Vec<(&[u8], i64)> = (0..50)
            .map(|i| (if i % 3 == 0 { &b"x"[..] } else { &b"y"[..] }, i))
            .collect();
        let mut flushed = Vec::new();
        count_timestamped_cached(&mut cached, (&mut cache, id), &records, &mut flushed).unwrap();
        assert!(!flushed.is_empty(), "a 100-byte cache evicts");
        for entry in cache.flush(id) {
            cached.put(&entry.key, entry.value.as_deref());
        }
        count_timestamped(&mut plain, records.iter().copied(), &mut Vec::new()).unwrap();
        assert_eq!(cached.get(b"x"), plain.get(b"x"));
        assert_eq!(cached.get(b"y"), plain.get(b"y"));
    }
}
