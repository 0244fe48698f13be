//! Keys of the ordered stores' trees (the persistent store's index, the
//! in-memory store): short keys (most Kafka keys: ids, longs, short
//! strings; a window store's key, start and seqnum for keys of up to 10
//! bytes) are stored inside the B-tree node, so a lookup compares bytes it
//! already has in cache instead of chasing a pointer per comparison, and
//! costs no heap allocation.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

const INLINE: usize = 22;

/// A key of the index: 24 bytes, inline up to 22 bytes, boxed beyond.
#[derive(Clone)]
pub(crate) enum IndexKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl IndexKey {
    /// The empty key (what a vacant slot of the hash table holds).
    pub const EMPTY: IndexKey = IndexKey::Inline {
        len: 0,
        bytes: [0; INLINE],
    };

    /// The key as an inline `IndexKey`, if it is short enough: lookups with
    /// it compare words instead of calling `memcmp` per node entry.
    #[inline]
    pub fn inline(key: &[u8]) -> Option<IndexKey> {
        (key.len() <= INLINE).then(|| {
            let mut bytes = [0u8; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            IndexKey::Inline {
                len: key.len() as u8,
                bytes,
            }
        })
    }
}

impl From<&[u8]> for IndexKey {
    fn from(key: &[u8]) -> Self {
        IndexKey::inline(key).unwrap_or_else(|| IndexKey::Heap(key.into()))
    }
}

/// Inline bytes as big-endian words: zero padding after `len` keeps the
/// order of the padded arrays that of the bytes, ties broken by length.
#[inline]
fn words(b: &[u8; INLINE]) -> (u64, u64, u64) {
    let w = |r: std::ops::Range<usize>| {
        let mut x = [0u8; 8];
        x[..r.len()].copy_from_slice(&b[r]);
        u64::from_be_bytes(x)
    };
    (w(0..8), w(8..16), w(16..INLINE))
}

impl Deref for IndexKey {
    type Target = [u8];

    #[inline]
    fn deref(&self) -> &[u8] {
        match self {
            IndexKey::Inline { len, bytes } => &bytes[..*len as usize],
            IndexKey::Heap(b) => b,
        }
    }
}

impl Borrow<[u8]> for IndexKey {
    #[inline]
    fn borrow(&self) -> &[u8] {
        self
    }
}

// Equality, order and hash are the bytes', as `Borrow` requires.
impl PartialEq for IndexKey {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for IndexKey {}

impl PartialOrd for IndexKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IndexKey {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (IndexKey::Inline { len: a, bytes: x }, IndexKey::Inline { len: b, bytes: y }) => {
                words(x).cmp(&words(y)).then(a.cmp(b))
            }
            _ => (**self).cmp(&**other),
        }
    }
}

impl Hash for IndexKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl std::fmt::Debug for IndexKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_boxed_keys_order_as_their_bytes() {
        assert_eq!(size_of::<IndexKey>(), 24);
        let long = [0xffu8; 40];
        let keys: Vec<&[u8]> = vec![
            b"",
            b"\x00",
            b"\x00\x00",
            b"ab",
            b"ab\x00",
            b"ab\x00\x01",
            b"abcdefgh\x00",
            b"abcdefgh",
            b"abcdefgh\xff",
            &long[..21],
            &long[..22],
            &long[..23],
            &long,
            b"a",
            b"\xfe",
        ];
        let mut sorted: Vec<IndexKey> = keys.iter().map(|k| IndexKey::from(*k)).collect();
        sorted.sort();
        let mut expected = keys.clone();
        expected.sort();
        let got: Vec<&[u8]> = sorted.iter().map(|k| &**k).collect();
        assert_eq!(got, expected);
        for a in &keys {
            for b in &keys {
                let (x, y) = (IndexKey::from(*a), IndexKey::from(*b));
                assert_eq!(x.cmp(&y), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
        assert!(matches!(
            IndexKey::from(&long[..22]),
            IndexKey::Inline { .. }
        ));
        assert!(matches!(IndexKey::from(&long[..23]), IndexKey::Heap(_)));
    }
}
