//! The same operation sequences against every key-value flavour, through the
//! `KeyValueBytes` trait: in memory, and persistent with default and with
//! tiny segments (many rolls, reads from closed files and the write buffer).

use std::collections::BTreeMap;

use strom_core::store::{
    InMemoryKeyValueStore, KeyValueBytes, PersistentKeyValueStore, PersistentStoreOptions,
};
use tempfile::TempDir;

type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Runs `test` against each flavour; the temp dirs live as long as the run.
fn for_each_flavour(test: impl Fn(&str, &mut dyn KeyValueBytes)) {
    test("in-memory", &mut InMemoryKeyValueStore::new());

    let dir = TempDir::new().unwrap();
    let (mut s, _) =
        PersistentKeyValueStore::open(dir.path(), PersistentStoreOptions::default()).unwrap();
    test("persistent", &mut s);

    let dir = TempDir::new().unwrap();
    let tiny = PersistentStoreOptions {
        segment_bytes: 120,
        write_buffer_bytes: 0,
        ..PersistentStoreOptions::default()
    };
    let (mut s, _) = PersistentKeyValueStore::open(dir.path(), tiny).unwrap();
    test("persistent, tiny segments", &mut s);
}

fn keys(entries: &Entries) -> Vec<Vec<u8>> {
    entries.iter().map(|(k, _)| k.clone()).collect()
}

fn put_all(s: &mut dyn KeyValueBytes, keys: &[&[u8]]) {
    for k in keys {
        let mut v = b"v-".to_vec();
        v.extend_from_slice(k);
        s.put(k, Some(&v)).unwrap();
    }
}

#[test]
fn keys_are_ordered_by_unsigned_bytes() {
    for_each_flavour(|name, s| {
        let ks: [&[u8]; 8] = [
            b"\xff",
            b"a",
            b"\x00",
            b"\x80",
            b"\x7f",
            b"\x01\x00",
            b"ab",
            b"",
        ];
        put_all(s, &ks);
        let all = s.range(None, None, false).unwrap();
        let expected: Vec<Vec<u8>> = [
            &b""[..],
            b"\x00",
            b"\x01\x00",
            b"a",
            b"ab",
            b"\x7f",
            b"\x80",
            b"\xff",
        ]
        .iter()
        .map(|k| k.to_vec())
        .collect();
        assert_eq!(keys(&all), expected, "{name}");
        assert_eq!(all[3].1, b"v-a", "{name}");
        assert_eq!(s.approximate_num_entries(), 8, "{name}");
    });
}

#[test]
fn range_bounds_are_inclusive_and_may_be_open() {
    for_each_flavour(|name, s| {
        put_all(s, &[b"a", b"b", b"c", b"d", b"da", b"e"]);
        let r = |from: Option<&[u8]>, to: Option<&[u8]>| keys(&s.range(from, to, false).unwrap());
        let v = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
        assert_eq!(r(Some(b"b"), Some(b"d")), v(&[b"b", b"c", b"d"]), "{name}");
        assert_eq!(
            r(Some(b"bb"), Some(b"db")),
            v(&[b"c", b"d", b"da"]),
            "{name}"
        );
        assert_eq!(r(Some(b"c"), Some(b"c")), v(&[b"c"]), "{name}");
        assert_eq!(r(Some(b"cc"), Some(b"cd")), v(&[]), "{name}");
        assert_eq!(r(None, Some(b"b")), v(&[b"a", b"b"]), "{name}");
        assert_eq!(r(Some(b"da"), None), v(&[b"da", b"e"]), "{name}");
        assert_eq!(r(Some(b"f"), None), v(&[]), "{name}");
    });
}

#[test]
fn inverted_range_is_empty_in_both_directions() {
    for_each_flavour(|name, s| {
        put_all(s, &[b"a", b"b", b"c", b"d"]);
        assert!(
            s.range(Some(b"d"), Some(b"b"), false).unwrap().is_empty(),
            "{name}"
        );
        assert!(
            s.range(Some(b"d"), Some(b"b"), true).unwrap().is_empty(),
            "{name}"
        );
        assert!(
            s.range(Some(b"b\x00"), Some(b"b"), false)
                .unwrap()
                .is_empty(),
            "{name}"
        );
    });
}

#[test]
fn reverse_range_is_descending() {
    for_each_flavour(|name, s| {
        put_all(s, &[b"a", b"b", b"c", b"d", b"\xff"]);
        let rev = s.range(Some(b"b"), None, true).unwrap();
        assert_eq!(
            keys(&rev),
            vec![
                b"\xff".to_vec(),
                b"d".to_vec(),
                b"c".to_vec(),
                b"b".to_vec()
            ],
            "{name}"
        );
        assert_eq!(rev[0].1, b"v-\xff", "{name}");
        let mut fwd = s.range(None, None, false).unwrap();
        fwd.reverse();
        assert_eq!(s.range(None, None, true).unwrap(), fwd, "{name}");
    });
}

#[test]
fn prefix_scan_includes_prefixes_ending_in_ff() {
    for_each_flavour(|name, s| {
        put_all(
            s,
            &[
                b"\x01\xfe\xff",
                b"\x01\xff",
                b"\x01\xff\x00",
                b"\x01\xff\xff",
                b"\x01\xff\xff\xff",
                b"\x02",
                b"\x02\x00",
                b"\xff",
                b"\xff\xff",
                b"ab",
                b"abc",
                b"abd",
                b"ac",
            ],
        );
        let p = |prefix: &[u8]| keys(&s.prefix_scan(prefix).unwrap());
        let v = |ks: &[&[u8]]| ks.iter().map(|k| k.to_vec()).collect::<Vec<_>>();
        assert_eq!(
            p(b"\x01\xff"),
            v(&[
                b"\x01\xff",
                b"\x01\xff\x00",
                b"\x01\xff\xff",
                b"\x01\xff\xff\xff"
            ]),
            "{name}"
        );
        assert_eq!(
            p(b"\x01\xff\xff"),
            v(&[b"\x01\xff\xff", b"\x01\xff\xff\xff"]),
            "{name}"
        );
        assert_eq!(p(b"\xff"), v(&[b"\xff", b"\xff\xff"]), "{name}");
        assert_eq!(p(b"\xff\xff\xff"), v(&[]), "{name}");
        assert_eq!(p(b"ab"), v(&[b"ab", b"abc", b"abd"]), "{name}");
        assert_eq!(p(b"b"), v(&[]), "{name}");
        assert_eq!(p(b"").len(), 13, "{name}");
        assert_eq!(s.prefix_scan(b"abc").unwrap()[0].1, b"v-abc", "{name}");
    });
}

#[test]
fn tombstones_delete_and_values_may_be_empty() {
    for_each_flavour(|name, s| {
        put_all(s, &[b"a", b"b", b"c"]);
        s.put(b"b", None).unwrap();
        s.put(b"zz", None).unwrap(); // deleting a missing key is a no-op
        assert_eq!(s.get(b"b").unwrap(), None, "{name}");
        assert_eq!(
            keys(&s.range(None, None, false).unwrap()),
            vec![b"a".to_vec(), b"c".to_vec()]
        );
        assert_eq!(s.approximate_num_entries(), 2, "{name}");
        s.put(b"b", Some(b"")).unwrap();
        assert_eq!(s.get(b"b").unwrap(), Some(Vec::new()), "{name}");
        assert_eq!(
            s.prefix_scan(b"b").unwrap(),
            vec![(b"b".to_vec(), Vec::new())],
            "{name}"
        );
        s.put(b"a", Some(b"new")).unwrap();
        assert_eq!(s.get(b"a").unwrap(), Some(b"new".to_vec()), "{name}");
        assert_eq!(s.approximate_num_entries(), 3, "{name}");
        s.flush().unwrap();
        assert_eq!(s.get(b"a").unwrap(), Some(b"new".to_vec()), "{name}");
    });
}

/// `SplitMix64`: a seeded generator with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, max_len: u64, alphabet: &[u8]) -> Vec<u8> {
        (0..self.below(max_len + 1))
            .map(|_| alphabet[self.below(alphabet.len() as u64) as usize])
            .collect()
    }
}

#[test]
fn random_operations_match_a_model() {
    for seed in 0..8u64 {
        for_each_flavour(|name, s| {
            let mut rng = Rng(seed);
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            // Few distinct bytes, so keys collide, share prefixes and hit 0x00/0xff.
            let alphabet = [0x00, 0x01, b'a', b'b', 0x7f, 0x80, 0xfe, 0xff];
            for step in 0..600 {
                let key = rng.bytes(3, &alphabet);
                match rng.below(10) {
                    0..=4 => {
                        let value = rng.bytes(40, &alphabet);
                        s.put(&key, Some(&value)).unwrap();
                        model.insert(key, value);
                    }
                    5 | 6 => {
                        s.put(&key, None).unwrap();
                        model.remove(&key);
                    }
                    7 => assert_eq!(s.get(&key).unwrap(), model.get(&key).cloned(), "{name}"),
                    8 => {
                        let (mut a, mut b) = (key, rng.bytes(3, &alphabet));
                        if rng.below(4) == 0 {
                            std::mem::swap(&mut a, &mut b); // inverted ranges too
                        } else if a > b {
                            std::mem::swap(&mut a, &mut b);
                        }
                        let reverse = rng.below(2) == 0;
                        let mut expected: Entries = if a > b {
                            Vec::new()
                        } else {
                            model
                                .range(a.clone()..=b.clone())
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect()
                        };
                        if reverse {
                            expected.reverse();
                        }
                        let got = s.range(Some(&a), Some(&b), reverse).unwrap();
                        assert_eq!(got, expected, "{name} seed {seed} step {step}");
                    }
                    _ => {
                        let prefix = &key[..key.len().min(2)];
                        let expected: Entries = model
                            .iter()
                            .filter(|(k, _)| k.starts_with(prefix))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        assert_eq!(s.prefix_scan(prefix).unwrap(), expected, "{name}");
                    }
                }
                assert_eq!(s.approximate_num_entries(), model.len(), "{name}");
            }
            let all: Entries = model.into_iter().collect();
            assert_eq!(
                s.range(None, None, false).unwrap(),
                all,
                "{name} seed {seed}"
            );
        });
    }
}
