//! Batch kernels: one call updates a store for a whole batch of records, in
//! record order, so the result equals Kafka Streams' record-at-a-time run.

use super::KeyValueBytes;
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
        store.put(key, Some(&value))?;
        counts.push(next);
        stamps.push(result_time);
        encoded.push(value);
    }
    Ok((counts, stamps))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InMemoryKeyValueStore;

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
}
