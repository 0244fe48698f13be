//! The in-memory key-value store: an ordered map of serialized keys, so range
//! scans follow serialized-key order as Kafka's stores do.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Bound;

#[derive(Debug, Default, Clone)]
pub struct InMemoryKeyValueStore {
    map: BTreeMap<Key, Vec<u8>>,
}

/// Bytes of a key kept inline up to this many.
const INLINE: usize = 22;

/// A serialized key in the tree, ordered as its bytes. Its first 16 bytes
/// are kept as two big-endian words, so that most comparisons of a lookup
/// are two integer compares in the node rather than a `memcmp` call (which
/// were a third of a windowed count's writes into an in-memory window
/// store); short keys (most, and a window store's key, start and seqnum
/// for keys of up to 10 bytes) are inline too.
#[derive(Clone)]
struct Key {
    head: [u64; 2],
    body: Body,
}

#[derive(Clone)]
enum Body {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Key {
    fn new(key: &[u8]) -> Self {
        let mut first = [0; 16];
        let n = key.len().min(16);
        first[..n].copy_from_slice(&key[..n]);
        let [a, b] =
            [&first[..8], &first[8..]].map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes")));
        let body = if key.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            Body::Inline {
                len: key.len() as u8,
                bytes,
            }
        } else {
            Body::Heap(key.into())
        };
        Key { head: [a, b], body }
    }

    #[inline]
    fn as_slice(&self) -> &[u8] {
        match &self.body {
            Body::Inline { len, bytes } => &bytes[..*len as usize],
            Body::Heap(b) => b,
        }
    }
}

/// Range scans look keys up as byte slices: the order is the same.
impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.head == other.head && self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    /// The zero-padded heads order keys as their bytes do, unless equal
    /// (then one may be a prefix of the other, padded with zeros).
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| self.as_slice().cmp(other.as_slice()))
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl InMemoryKeyValueStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(&Key::new(key)).map(Vec::as_slice)
    }

    /// Stores `value`, or deletes the key when `value` is None (a tombstone).
    pub fn put(&mut self, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(v) => {
                let key = Key::new(key);
                if let Some(slot) = self.map.get_mut(&key) {
                    slot.clear();
                    slot.extend_from_slice(v);
                } else {
                    self.map.insert(key, v.to_vec());
                }
            }
            None => {
                self.map.remove(&Key::new(key));
            }
        }
    }

    pub fn put_if_absent(&mut self, key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        let key = Key::new(key);
        if let Some(existing) = self.map.get(&key) {
            return Some(existing.clone());
        }
        self.map.insert(key, value.to_vec());
        None
    }

    pub fn delete(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        self.map.remove(&Key::new(key))
    }

    /// Entries with `from <= key <= to` (both inclusive, as Kafka's `range`),
    /// either bound open when None.
    pub fn range<'a>(
        &'a self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let lower = from.map_or(Bound::Unbounded, Bound::Included);
        let upper = to.map_or(Bound::Unbounded, Bound::Included);
        // An inverted range is empty in Kafka; BTreeMap would panic on it.
        let inverted = matches!((from, to), (Some(f), Some(t)) if f > t);
        let iter = if inverted {
            None
        } else {
            Some(self.map.range::<[u8], _>((lower, upper)))
        };
        iter.into_iter()
            .flatten()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

impl super::KeyValueBytes for InMemoryKeyValueStore {
    fn get(&self, key: &[u8]) -> crate::Result<Option<Vec<u8>>> {
        Ok(InMemoryKeyValueStore::get(self, key).map(<[u8]>::to_vec))
    }

    fn get_with(&self, key: &[u8], f: &mut dyn FnMut(&[u8])) -> crate::Result<bool> {
        let value = InMemoryKeyValueStore::get(self, key);
        if let Some(v) = value {
            f(v);
        }
        Ok(value.is_some())
    }

    fn prefers_key_order(&self) -> bool {
        true
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> crate::Result<()> {
        InMemoryKeyValueStore::put(self, key, value);
        Ok(())
    }

    /// In key order (see [`super::key_order`]): a windowed count's store
    /// writes (60k scattered windows a batch, into segments of 100k+)
    /// took 1.4-1.6x less time so.
    fn put_batch(&mut self, entries: &[(&[u8], Option<&[u8]>)]) -> crate::Result<()> {
        for i in super::key_order(true, entries.len(), &|i| entries[i].0) {
            let (key, value) = entries[i as usize];
            InMemoryKeyValueStore::put(self, key, value);
        }
        Ok(())
    }

    fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> crate::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out: Vec<_> = InMemoryKeyValueStore::range(self, from, to)
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect();
        if reverse {
            out.reverse();
        }
        Ok(out)
    }

    fn prefix_scan(&self, prefix: &[u8]) -> crate::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .map
            .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.as_slice().starts_with(prefix))
            .map(|(k, v)| (k.as_slice().to_vec(), v.clone()))
            .collect())
    }

    fn approximate_num_entries(&self) -> usize {
        self.len()
    }

    fn flush(&mut self) -> crate::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_order_as_their_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            b"ab".to_vec(),
            b"ab\0".to_vec(),
            b"abcdefghijklmnop".to_vec(),
            b"abcdefghijklmnop\0".to_vec(),
            b"abcdefghijklmnopqrstuvwxyz".to_vec(),
            b"abcdefghijklmnopqrstuvwxyz0123".to_vec(),
            vec![0xff; 30],
            vec![0xff; 8],
        ];
        keys.sort();
        for a in &keys {
            for b in &keys {
                assert_eq!(Key::new(a).cmp(&Key::new(b)), a.cmp(b), "{a:?} {b:?}");
                assert_eq!(Key::new(a) == Key::new(b), a == b);
            }
            assert_eq!(Key::new(a).as_slice(), &a[..]);
        }
    }

    #[test]
    fn put_get_delete_and_tombstone() {
        let mut s = InMemoryKeyValueStore::new();
        s.put(b"a", Some(b"1"));
        s.put(b"a", Some(b"22"));
        assert_eq!(s.get(b"a"), Some(&b"22"[..]));
        s.put(b"a", None);
        assert_eq!(s.get(b"a"), None);
        assert_eq!(s.put_if_absent(b"b", b"x"), None);
        assert_eq!(s.put_if_absent(b"b", b"y"), Some(b"x".to_vec()));
        assert_eq!(s.delete(b"b"), Some(b"x".to_vec()));
        assert!(s.is_empty());
    }

    #[test]
    fn range_is_inclusive_and_ordered_by_bytes() {
        let mut s = InMemoryKeyValueStore::new();
        for k in [&b"c"[..], b"a", b"b", b"\xff", b"ab"] {
            s.put(k, Some(k));
        }
        let keys: Vec<&[u8]> = s.range(Some(b"ab"), Some(b"c")).map(|(k, _)| k).collect();
        assert_eq!(keys, vec![&b"ab"[..], b"b", b"c"]);
        assert_eq!(s.range(Some(b"c"), Some(b"a")).count(), 0);
        assert_eq!(s.range(None, None).last().unwrap().0, b"\xff");
    }

    /// A batch large enough to be applied in key order ends as its puts
    /// one after the other would: the last of a key's puts or deletes wins.
    #[test]
    fn a_batch_in_key_order_ends_as_its_puts_in_order() {
        let keys: Vec<Vec<u8>> = (0..1_000u32)
            .map(|i| format!("key-{}", (i * 7_919) % 300).into_bytes())
            .collect();
        let values: Vec<Vec<u8>> = (0..1_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let entries: Vec<(&[u8], Option<&[u8]>)> = keys
            .iter()
            .zip(&values)
            .enumerate()
            .map(|(i, (k, v))| (k.as_slice(), (i % 7 != 3).then_some(v.as_slice())))
            .collect();
        let mut batched = InMemoryKeyValueStore::new();
        let mut one_by_one = InMemoryKeyValueStore::new();
        batched.put(b"key-1", Some(b"before"));
        one_by_one.put(b"key-1", Some(b"before"));
        crate::store::KeyValueBytes::put_batch(&mut batched, &entries).unwrap();
        for &(k, v) in &entries {
            one_by_one.put(k, v);
        }
        assert!(batched.len() > 200 && batched.len() < 300);
        assert!(batched.range(None, None).eq(one_by_one.range(None, None)));
    }
}
