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
    fn count_rejects_a_corrupt_stored_value() {
        let mut store = InMemoryKeyValueStore::new();
        store.put(b"a", Some(b"xyz"));
        let err = count(&mut store, [&b"a"[..]], &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("not 8"), "{err}");
    }
}
