//! Window store tests. Most follow scenarios of Kafka's own store tests
//! (`AbstractWindowBytesStoreTest`, `InMemoryWindowStoreTest`,
//! `WindowKeySchemaTest`, `AbstractRocksDBSegmentedBytesStoreTest`), rewritten
//! against the bytes API; each test names the one it follows.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use strom_core::Result;
use strom_core::store::time_segments::{PutOutcome, SegmentFactory};
use strom_core::store::window::{self, WindowEntry, WindowStore};
use strom_core::store::{InMemoryKeyValueStore, InMemoryWindowStore, KeyValueBytes};

const WINDOW_SIZE: i64 = 3;
const SEGMENT_INTERVAL: i64 = 60_000;
const RETENTION_PERIOD: i64 = 2 * SEGMENT_INTERVAL;
/// Kafka's `defaultStartTime`: close to a segment boundary, so the first
/// batch spans two segments.
const START: i64 = SEGMENT_INTERVAL - 4;

/// Kafka's `Serdes.Integer()`: 4 bytes big-endian.
fn k(i: i32) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

fn store(retain_duplicates: bool) -> InMemoryWindowStore {
    WindowStore::in_memory(RETENTION_PERIOD, WINDOW_SIZE, retain_duplicates).unwrap()
}

fn put(s: &mut InMemoryWindowStore, key: &[u8], value: &str, start: i64) -> PutOutcome {
    s.put(key, Some(value.as_bytes()), start).unwrap()
}

fn values(entries: Vec<(i64, Vec<u8>)>) -> Vec<String> {
    entries
        .into_iter()
        .map(|(_, v)| String::from_utf8(v).unwrap())
        .collect()
}

fn sorted_values(entries: Vec<(i64, Vec<u8>)>) -> Vec<String> {
    let mut v = values(entries);
    v.sort();
    v
}

/// (key as i32, value, start) of each entry, in order.
fn windows(entries: &[WindowEntry]) -> Vec<(i32, String, i64)> {
    entries
        .iter()
        .map(|e| {
            assert_eq!(e.end, e.start + WINDOW_SIZE);
            (
                i32::from_be_bytes(e.key.as_slice().try_into().unwrap()),
                String::from_utf8(e.value.clone()).unwrap(),
                e.start,
            )
        })
        .collect()
}

fn put_first_batch(s: &mut InMemoryWindowStore) {
    put(s, &k(0), "zero", START);
    put(s, &k(1), "one", START + 1);
    put(s, &k(2), "two", START + 2);
    put(s, &k(3), "three", START + 2);
    put(s, &k(4), "four", START + 4);
    put(s, &k(5), "five", START + 5);
}

fn put_second_batch(s: &mut InMemoryWindowStore) {
    for i in 1..=6 {
        put(s, &k(2), &format!("two+{i}"), START + 2 + i);
    }
}

fn first_batch(ids: &[i32]) -> Vec<(i32, String, i64)> {
    let all = [
        (0, "zero", 0),
        (1, "one", 1),
        (2, "two", 2),
        (3, "three", 2),
        (4, "four", 4),
        (5, "five", 5),
    ];
    ids.iter()
        .map(|&i| {
            let (key, v, off) = all[i as usize];
            (key, v.to_string(), START + off)
        })
        .collect()
}

// Follows WindowKeySchemaTest.shouldConvertToBinaryAndBack /
// shouldExtractSequenceFromBinary / shouldExtractStartTimeFromBinary.
#[test]
fn key_encoding_is_kafkas_window_key_schema() {
    assert_eq!(
        window::store_key(b"a", 1, 0),
        [0x61, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
    );
    let key = window::store_key(b"key", 0x0102_0304_0506_0708, 0x0a0b_0c0d);
    assert_eq!(
        key,
        [
            b'k', b'e', b'y', 1, 2, 3, 4, 5, 6, 7, 8, 0x0a, 0x0b, 0x0c, 0x0d
        ]
    );
    assert_eq!(
        window::split_store_key(&key).unwrap(),
        (&b"key"[..], 0x0102_0304_0506_0708, 0x0a0b_0c0d)
    );
    // An empty key is legal: the store key is the suffix alone.
    assert_eq!(window::split_store_key(&[0; 12]).unwrap(), (&b""[..], 0, 0));
    assert!(window::split_store_key(&[0; 11]).is_err());
    // Kafka's timeWindowForSize caps an overflowing end.
    assert_eq!(window::window_end(i64::MAX - 1, 10), i64::MAX);
}

// Follows AbstractWindowBytesStoreTest.testRangeAndSinglePointFetch.
#[test]
fn range_and_single_point_fetch() {
    let mut s = store(false);
    put_first_batch(&mut s);
    assert_eq!(
        values(
            s.fetch(&k(0), START - WINDOW_SIZE, START + WINDOW_SIZE)
                .unwrap()
        ),
        ["zero"]
    );
    put_second_batch(&mut s);
    for i in 1..=6 {
        assert_eq!(
            s.fetch_one(&k(2), START + 2 + i).unwrap(),
            Some(format!("two+{i}").into_bytes())
        );
    }
    assert_eq!(s.fetch_one(&k(2), START + 9).unwrap(), None);
    assert_eq!(s.fetch_one(&k(6), START).unwrap(), None);

    // fetch(2, t - size, t + size) for t = START - 2 ..= START + 12: both
    // bounds are inclusive.
    let expected: [&[&str]; 15] = [
        &[],
        &["two"],
        &["two", "two+1"],
        &["two", "two+1", "two+2"],
        &["two", "two+1", "two+2", "two+3"],
        &["two", "two+1", "two+2", "two+3", "two+4"],
        &["two", "two+1", "two+2", "two+3", "two+4", "two+5"],
        &["two", "two+1", "two+2", "two+3", "two+4", "two+5", "two+6"],
        &["two+1", "two+2", "two+3", "two+4", "two+5", "two+6"],
        &["two+2", "two+3", "two+4", "two+5", "two+6"],
        &["two+3", "two+4", "two+5", "two+6"],
        &["two+4", "two+5", "two+6"],
        &["two+5", "two+6"],
        &["two+6"],
        &[],
    ];
    for (offset, want) in (-2..=12).zip(expected) {
        let t = START + offset;
        assert_eq!(
            values(s.fetch(&k(2), t - WINDOW_SIZE, t + WINDOW_SIZE).unwrap()),
            want,
            "fetch around {offset}"
        );
    }
}

// Follows AbstractWindowBytesStoreTest.testPutAndFetchBefore and
// testPutAndFetchAfter.
#[test]
fn put_and_fetch_before_and_after() {
    let mut s = store(false);
    put_first_batch(&mut s);
    put_second_batch(&mut s);
    assert!(
        s.fetch(&k(2), START + 1 - WINDOW_SIZE, START + 1)
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        values(s.fetch(&k(2), START + 2 - WINDOW_SIZE, START + 2).unwrap()),
        ["two"]
    );
    assert_eq!(
        values(s.fetch(&k(2), START + 6 - WINDOW_SIZE, START + 6).unwrap()),
        ["two+1", "two+2", "two+3", "two+4"]
    );
    assert_eq!(
        values(s.fetch(&k(2), START + 8, START + 8 + WINDOW_SIZE).unwrap()),
        ["two+6"]
    );
    assert!(
        s.fetch(&k(2), START + 9, START + 9 + WINDOW_SIZE)
            .unwrap()
            .is_empty()
    );
}

// Follows AbstractWindowBytesStoreTest.shouldGetAll, shouldGetBackwardAll,
// shouldGetAllReturnTimestampOrderedRecords and shouldFetchAllInTimeRange.
#[test]
fn all_and_fetch_all() {
    let mut s = store(false);
    put_first_batch(&mut s);
    assert_eq!(windows(&s.all().unwrap()), first_batch(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(
        windows(&s.backward_all().unwrap()),
        first_batch(&[5, 4, 3, 2, 1, 0])
    );
    assert_eq!(
        windows(&s.fetch_all(START + 1, START + 4).unwrap()),
        first_batch(&[1, 2, 3, 4])
    );
    assert_eq!(
        windows(&s.fetch_all(START, START + 3).unwrap()),
        first_batch(&[0, 1, 2, 3])
    );
    assert_eq!(
        windows(&s.backward_fetch_all(START + 1, START + 5).unwrap()),
        first_batch(&[5, 4, 3, 2, 1])
    );

    let mut s = store(false);
    for i in [4, 0, 2, 3, 1] {
        put(&mut s, &k(i), "v", START + i64::from(i));
    }
    let order: Vec<i32> = windows(&s.all().unwrap()).iter().map(|w| w.0).collect();
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

// Follows AbstractWindowBytesStoreTest.testFetchRange and
// testBackwardFetchRange, including the open (null) key bounds.
/// (key from, key to, time from, time to, expected first-batch keys)
type RangeCase = (Option<i32>, Option<i32>, i64, i64, &'static [i32]);

#[test]
fn fetch_range_forward_and_backward() {
    let mut s = store(false);
    put_first_batch(&mut s);
    let lo = START - WINDOW_SIZE;
    let hi = START + WINDOW_SIZE;
    let cases: [RangeCase; 11] = [
        (Some(0), Some(1), lo, hi, &[0, 1]),
        (Some(1), Some(1), lo, hi, &[1]),
        (Some(1), Some(3), lo, hi, &[1, 2, 3]),
        (Some(0), Some(5), lo, hi, &[0, 1, 2, 3]),
        (Some(0), Some(5), lo, hi + 5, &[0, 1, 2, 3, 4, 5]),
        (Some(0), Some(5), START + 2, hi + 5, &[2, 3, 4, 5]),
        (Some(4), Some(5), START + 2, hi, &[]),
        (Some(0), Some(3), START + 3, hi + 5, &[]),
        (None, Some(2), lo, hi + 2, &[0, 1, 2]),
        (Some(2), None, lo, hi + 5, &[2, 3, 4, 5]),
        (None, None, lo, hi + 5, &[0, 1, 2, 3, 4, 5]),
    ];
    for (from, to, t0, t1, want) in cases {
        let (from, to) = (from.map(k), to.map(k));
        let forward = s
            .fetch_range(from.as_deref(), to.as_deref(), t0, t1)
            .unwrap();
        assert_eq!(windows(&forward), first_batch(want), "{from:?}..{to:?}");
        let backward = s
            .backward_fetch_range(from.as_deref(), to.as_deref(), t0, t1)
            .unwrap();
        let mut reversed = first_batch(want);
        reversed.reverse();
        assert_eq!(windows(&backward), reversed, "backward {from:?}..{to:?}");
    }
    // An inverted key range is empty, not an error (Kafka logs a warning).
    assert!(
        s.fetch_range(Some(&k(3)), Some(&k(1)), lo, hi)
            .unwrap()
            .is_empty()
    );
}

// Follows AbstractWindowBytesStoreTest.shouldReturnSameResultsForSingleKeyFetchAndEqualKeyRangeFetch.
#[test]
fn single_key_fetch_equals_equal_key_range_fetch() {
    let mut s = store(false);
    put(&mut s, &k(1), "one", 0);
    put(&mut s, &k(2), "two", 1);
    put(&mut s, &k(2), "two-2", 2);
    put(&mut s, &k(3), "three", 3);
    let single = values(s.fetch(&k(2), 0, 5).unwrap());
    let ranged: Vec<String> = s
        .fetch_range(Some(&k(2)), Some(&k(2)), 0, 5)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.value).unwrap())
        .collect();
    assert_eq!(single, ["two", "two-2"]);
    assert_eq!(single, ranged);
}

// Follows AbstractWindowBytesStoreTest.testDeleteAndUpdate.
#[test]
fn delete_and_update() {
    let mut s = store(false);
    put(&mut s, &k(1), "one", 0);
    put(&mut s, &k(1), "one v2", 0);
    assert_eq!(values(s.fetch(&k(1), 0, 0).unwrap()), ["one v2"]);
    assert_eq!(s.put(&k(1), None, 0).unwrap(), PutOutcome::Written);
    assert!(s.fetch(&k(1), 0, 0).unwrap().is_empty());
    assert_eq!(s.fetch_one(&k(1), 0).unwrap(), None);
}

// Follows AbstractWindowBytesStoreTest.testPutSameKeyTimestamp and
// testFetchDuplicates: with retain_duplicates every put is kept, in
// insertion order (seqnum order), reversed by a backward fetch.
#[test]
fn retained_duplicates_come_back_in_insertion_order() {
    let mut s = store(true);
    put(&mut s, &k(0), "zero", START);
    put(&mut s, &k(0), "zero", START);
    put(&mut s, &k(0), "zero+", START);
    put(&mut s, &k(0), "zero++", START);
    assert_eq!(s.seqnum(), 4);
    for offset in 0..=3 {
        let t = START + offset;
        assert_eq!(
            values(s.fetch(&k(0), t - WINDOW_SIZE, t + WINDOW_SIZE).unwrap()),
            ["zero", "zero", "zero+", "zero++"]
        );
    }
    assert!(
        s.fetch(&k(0), START + 4 - WINDOW_SIZE, START + 4 + WINDOW_SIZE)
            .unwrap()
            .is_empty()
    );

    let mut s = store(true);
    let mut t = 0;
    for name in ["one", "two", "three"] {
        put(&mut s, &k(1), name, t);
        put(&mut s, &k(1), &format!("{name}-2"), t);
        t += WINDOW_SIZE * 10;
    }
    let fetched = s.fetch(&k(1), 0, WINDOW_SIZE * 10).unwrap();
    let expected = [
        (0, "one"),
        (0, "one-2"),
        (WINDOW_SIZE * 10, "two"),
        (WINDOW_SIZE * 10, "two-2"),
    ];
    assert_eq!(
        fetched,
        expected.map(|(t, v)| (t, v.as_bytes().to_vec())).to_vec()
    );
    assert_eq!(
        values(s.backward_fetch(&k(1), 0, WINDOW_SIZE * 10).unwrap()),
        ["two-2", "two", "one-2", "one"]
    );
    // A delete is a no-op with duplicates, and there is no single value.
    assert_eq!(s.put(&k(1), None, 0).unwrap(), PutOutcome::Ignored);
    assert_eq!(s.fetch(&k(1), 0, 0).unwrap().len(), 2);
    assert_eq!(s.fetch_one(&k(1), 0).unwrap(), None);
    // Each duplicate is its own entry in the range scans too.
    assert_eq!(s.fetch_all(0, i64::MAX).unwrap().len(), 6);
}

// Follows AbstractWindowBytesStoreTest.shouldFetchAndIterateOverExactKeys: the
// byte range of key "a" also holds "aa"; only exact keys come back.
#[test]
fn fetch_returns_only_exact_keys_not_longer_keys_with_the_prefix() {
    let size = 0x7a00_0000_0000_0000;
    let mut s = WindowStore::in_memory(size, size, false).unwrap();
    put(&mut s, b"a", "0001", 0);
    put(&mut s, b"aa", "0002", 0);
    put(&mut s, b"a", "0003", 1);
    put(&mut s, b"aa", "0004", 1);
    put(&mut s, b"a", "0005", size - 1);
    assert_eq!(
        sorted_values(s.fetch(b"a", 0, i64::MAX).unwrap()),
        ["0001", "0003", "0005"]
    );
    let range: Vec<(Vec<u8>, i64, i64)> = s
        .fetch_range(Some(b"a"), Some(b"a"), 0, i64::MAX)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.start, e.end))
        .collect();
    assert_eq!(
        range,
        [
            (b"a".to_vec(), 0, size),
            (b"a".to_vec(), 1, size + 1),
            (b"a".to_vec(), size - 1, i64::MAX),
        ]
    );
    assert_eq!(
        s.fetch_range(Some(b"aa"), Some(b"aa"), 0, i64::MAX)
            .unwrap()
            .len(),
        2
    );
}

// Follows AbstractWindowBytesStoreTest.shouldFetchAndIterateOverExactBinaryKeys.
#[test]
fn fetch_returns_only_exact_binary_keys() {
    let mut s = store(true);
    let (k1, k2, k3) = (vec![0u8], vec![0u8, 0], vec![0u8, 0, 0]);
    for (key, v, t) in [
        (&k1, "1", 0),
        (&k2, "2", 0),
        (&k3, "3", 0),
        (&k1, "4", 1),
        (&k2, "5", 1),
        (&k3, "6", 59_999),
        (&k1, "7", 59_999),
        (&k2, "8", 59_999),
        (&k3, "9", 59_999),
    ] {
        put(&mut s, key, v, t);
    }
    assert_eq!(values(s.fetch(&k1, 0, i64::MAX).unwrap()), ["1", "4", "7"]);
    assert_eq!(values(s.fetch(&k2, 0, i64::MAX).unwrap()), ["2", "5", "8"]);
    assert_eq!(values(s.fetch(&k3, 0, i64::MAX).unwrap()), ["3", "6", "9"]);
}

// Beyond Kafka's tests: a key that is a proper prefix of the range's upper
// key can sort after that key's own upper bound ("a" ‖ 7 > "a\0" ‖ 10 in
// bytes); the key range must still include it.
#[test]
fn key_range_includes_keys_that_are_prefixes_of_the_upper_key() {
    let mut s = store(false);
    put(&mut s, b"a", "a@7", 7);
    put(&mut s, b"a\0", "a0@0", 0);
    put(&mut s, b"a\0\0", "a00@1", 1);
    let got: Vec<(Vec<u8>, i64)> = s
        .fetch_range(Some(b"a"), Some(b"a\0"), 0, 10)
        .unwrap()
        .into_iter()
        .map(|e| (e.key, e.start))
        .collect();
    assert_eq!(got, [(b"a\0".to_vec(), 0), (b"a".to_vec(), 7)]);
    assert_eq!(s.fetch_range(None, Some(b"a"), 0, 10).unwrap().len(), 1);
    assert_eq!(s.fetch_range(Some(b""), None, 0, 10).unwrap().len(), 3);
}

// Follows AbstractWindowBytesStoreTest.shouldMeasureExpiredRecords: a put at
// or before stream time - retention is dropped and reported.
#[test]
fn puts_beyond_retention_are_dropped_and_reported() {
    let mut s = store(false);
    assert_eq!(
        put(&mut s, &k(1), "initial record", 2 * RETENTION_PERIOD),
        PutOutcome::Written
    );
    assert_eq!(put(&mut s, &k(1), "late record", 0), PutOutcome::Expired);
    // Exactly stream time - retention is expired; one ms later is not.
    assert_eq!(
        put(&mut s, &k(1), "edge", RETENTION_PERIOD),
        PutOutcome::Expired
    );
    assert_eq!(
        put(
            &mut s,
            &k(1),
            "another on-time record",
            RETENTION_PERIOD + 1
        ),
        PutOutcome::Written
    );
    assert_eq!(s.observed_stream_time(), 2 * RETENTION_PERIOD);
    assert_eq!(
        values(s.fetch(&k(1), 0, i64::MAX).unwrap()),
        ["another on-time record", "initial record"]
    );
}

// Follows AbstractWindowBytesStoreTest.shouldNotThrowExceptionWhenFetchRangeIsExpired
// and InMemoryWindowStoreTest.testExpiration: windows beyond retention are
// not returned, by any read.
#[test]
fn windows_beyond_retention_are_not_returned() {
    let mut s = store(false);
    put(&mut s, &k(1), "one", 0);
    put(&mut s, &k(1), "two", 4 * RETENTION_PERIOD);
    assert!(s.fetch(&k(1), 0, 10).unwrap().is_empty());

    let mut s = store(false);
    let quarter = RETENTION_PERIOD / 4;
    for (i, name) in ["one", "two", "three", "four", "five"].iter().enumerate() {
        put(&mut s, &k(1), name, i as i64 * quarter);
    }
    let starts = |s: &InMemoryWindowStore| -> Vec<(String, i64)> {
        s.fetch_all(0, i64::MAX)
            .unwrap()
            .into_iter()
            .map(|e| (String::from_utf8(e.value).unwrap(), e.start))
            .collect()
    };
    // Stream time = retention: the window at 0 is exactly expired.
    assert_eq!(
        starts(&s),
        [
            ("two".to_string(), quarter),
            ("three".to_string(), 2 * quarter),
            ("four".to_string(), 3 * quarter),
            ("five".to_string(), 4 * quarter),
        ]
    );
    assert_eq!(s.fetch_one(&k(1), 0).unwrap(), None);
    assert_eq!(s.all().unwrap().len(), 4);
    put(&mut s, &k(1), "six", 5 * quarter);
    assert_eq!(
        starts(&s).first(),
        Some(&("three".to_string(), 2 * quarter))
    );
    assert_eq!(s.all().unwrap().len(), 4);
    assert!(s.fetch(&k(1), 0, quarter).unwrap().is_empty());
}

// Follows AbstractRocksDBSegmentedBytesStoreTest.shouldRollSegments: whole
// segments are dropped as stream time advances, the oldest live one kept.
#[test]
fn segments_are_dropped_as_stream_time_advances() {
    let mut s = store(false);
    assert_eq!(s.segment_interval(), SEGMENT_INTERVAL);
    assert_eq!(s.retention(), RETENTION_PERIOD);
    put(&mut s, b"a", "0", 0);
    put(&mut s, b"a", "1", SEGMENT_INTERVAL);
    put(&mut s, b"a", "2", 2 * SEGMENT_INTERVAL);
    assert_eq!(s.segment_ids(), [0, 1, 2]);
    put(&mut s, b"a", "3", 3 * SEGMENT_INTERVAL);
    // segment_id(3 * 60000 - 120000) = 1: segment 0 goes.
    assert_eq!(s.segment_ids(), [1, 2, 3]);
    assert_eq!(s.approximate_num_entries(), 3);
    put(&mut s, b"a", "4", 5 * SEGMENT_INTERVAL - 1);
    assert_eq!(s.segment_ids(), [2, 3, 4]);
    // A late window in a dropped segment is not stored.
    assert_eq!(put(&mut s, b"a", "late", 10), PutOutcome::Expired);
    assert_eq!(s.segment_ids(), [2, 3, 4]);
    // Segment 2 is kept, but its window at 120000 is itself expired
    // (<= 299999 - 120000): reads filter record by record.
    assert_eq!(values(s.fetch(b"a", 0, i64::MAX).unwrap()), ["3", "4"]);
}

// Kafka's Stores.persistentWindowStore validation; Kafka's Window rejects a
// negative start.
#[test]
fn invalid_arguments_are_config_errors() {
    assert!(WindowStore::in_memory(-1, 0, false).is_err());
    assert!(WindowStore::in_memory(10, -1, false).is_err());
    assert!(WindowStore::in_memory(10, 11, false).is_err());
    let mut s = store(false);
    let err = s.put(b"a", Some(b"v"), -1).unwrap_err();
    assert!(matches!(err, strom_core::Error::Config(_)), "{err}");
    assert!(
        WindowStore::with_segment_interval(
            strom_core::store::InMemorySegmentFactory,
            10,
            1,
            false,
            0
        )
        .is_err()
    );
}

// Follows InMemoryWindowStoreTest.shouldRestore and
// AbstractRocksDBSegmentedBytesStoreTest.shouldCreateWriteBatches: changelog
// records carry their seqnums; stream time advances to the batch's latest
// window before writing, so records already beyond retention are dropped.
#[test]
fn restore_from_changelog_keys() {
    let mut s = store(true);
    let changelog: Vec<(Vec<u8>, Option<Vec<u8>>)> = vec![
        (window::store_key(&k(1), 0, 1), Some(b"old".to_vec())),
        (window::store_key(&k(1), 100, 2), Some(b"a".to_vec())),
        (window::store_key(&k(1), 100, 3), Some(b"b".to_vec())),
        (
            window::store_key(&k(1), RETENTION_PERIOD, 4),
            Some(b"c".to_vec()),
        ),
        (window::store_key(&k(1), 100, 3), None),
    ];
    let expired = s
        .restore(changelog.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
        .unwrap();
    assert_eq!(expired, 1);
    assert_eq!(s.observed_stream_time(), RETENTION_PERIOD);
    assert_eq!(values(s.fetch(&k(1), 0, i64::MAX).unwrap()), ["a", "c"]);
    // Restoring does not move the store's own seqnum, as in Kafka.
    assert_eq!(s.seqnum(), 0);
    assert!(s.restore([(&[1u8, 2][..], None)]).is_err());
}

// The caller persists observed stream time with its commit and restores it,
// so a restarted store expires exactly what a running one would.
#[test]
fn observed_stream_time_can_be_restored() {
    let mut s = store(false);
    assert_eq!(s.observed_stream_time(), -1);
    put(&mut s, b"a", "v", 10);
    s.restore_observed_stream_time(RETENTION_PERIOD + 10);
    assert_eq!(s.observed_stream_time(), RETENTION_PERIOD + 10);
    assert!(s.fetch(b"a", 0, i64::MAX).unwrap().is_empty());
    assert_eq!(put(&mut s, b"a", "late", 10), PutOutcome::Expired);
    // Never backwards.
    s.restore_observed_stream_time(0);
    assert_eq!(s.observed_stream_time(), RETENTION_PERIOD + 10);
}

/// A factory whose segments live on a shared "disk" that outlives the store,
/// like a persistent flavour: reopening finds the segments, dropping deletes
/// them.
#[derive(Clone, Default)]
struct SharedDisk(Arc<Mutex<BTreeMap<i64, InMemoryKeyValueStore>>>);

struct DiskSegment {
    id: i64,
    disk: SharedDisk,
}

impl KeyValueBytes for DiskSegment {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let disk = self.disk.0.lock().unwrap();
        KeyValueBytes::get(&disk[&self.id], key)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let mut disk = self.disk.0.lock().unwrap();
        KeyValueBytes::put(disk.get_mut(&self.id).unwrap(), key, value)
    }

    fn range(
        &self,
        from: Option<&[u8]>,
        to: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let disk = self.disk.0.lock().unwrap();
        KeyValueBytes::range(&disk[&self.id], from, to, reverse)
    }

    fn prefix_scan(&self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let disk = self.disk.0.lock().unwrap();
        disk[&self.id].prefix_scan(prefix)
    }

    fn approximate_num_entries(&self) -> usize {
        self.disk.0.lock().unwrap()[&self.id].len()
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

impl SegmentFactory for SharedDisk {
    type Store = DiskSegment;

    fn existing(&mut self) -> Result<Vec<i64>> {
        Ok(self.0.lock().unwrap().keys().copied().collect())
    }

    fn open(&mut self, id: i64) -> Result<DiskSegment> {
        self.0.lock().unwrap().entry(id).or_default();
        Ok(DiskSegment {
            id,
            disk: self.clone(),
        })
    }

    fn destroy(&mut self, id: i64, _store: DiskSegment) -> Result<()> {
        self.0.lock().unwrap().remove(&id);
        Ok(())
    }
}

// The same store code over another segment factory: segments reopen with
// the store, and retention deletes them through the factory (Kafka's
// KeyValueSegmentsTest.shouldOpenExistingSegments / shouldCleanupSegmentsThatHaveExpired).
#[test]
fn generic_segment_factory_reopens_and_destroys_segments() {
    let disk = SharedDisk::default();
    let interval = 100;
    let mut s = WindowStore::with_segment_interval(disk.clone(), 400, 10, false, interval).unwrap();
    for t in [0, 150, 250, 399] {
        s.put(b"k", Some(t.to_string().as_bytes()), t).unwrap();
    }
    let committed_stream_time = s.observed_stream_time();
    drop(s);
    assert_eq!(
        disk.0.lock().unwrap().keys().copied().collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );

    let mut s = WindowStore::with_segment_interval(disk.clone(), 400, 10, false, interval).unwrap();
    assert_eq!(s.segment_ids(), [0, 1, 2, 3]);
    s.restore_observed_stream_time(committed_stream_time);
    assert_eq!(
        sorted_values(s.fetch(b"k", 0, 1000).unwrap()),
        ["0", "150", "250", "399"]
    );
    s.put(b"k", Some(b"601"), 601).unwrap();
    // segment_id(601 - 400) = 2: segments 0 and 1 are deleted from "disk".
    assert_eq!(s.segment_ids(), [2, 3, 6]);
    assert_eq!(
        disk.0.lock().unwrap().keys().copied().collect::<Vec<_>>(),
        [2, 3, 6]
    );
    assert_eq!(
        values(s.fetch(b"k", 0, 1000).unwrap()),
        ["250", "399", "601"]
    );
}

/// A small deterministic generator (splitmix64), so the test needs no crate.
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

    fn time(&mut self, around: i64, spread: i64) -> i64 {
        (around - spread + self.below((2 * spread + 1) as u64) as i64).max(0)
    }
}

/// The brute-force model: every entry with its seqnum, plus stream time.
struct Model {
    retention: i64,
    interval: i64,
    size: i64,
    dups: bool,
    seqnum: i32,
    stream_time: i64,
    entries: HashMap<(Vec<u8>, i64, i32), Vec<u8>>,
}

impl Model {
    fn put(&mut self, key: &[u8], value: Option<&[u8]>, t: i64) -> PutOutcome {
        if value.is_none() && self.dups {
            return PutOutcome::Ignored;
        }
        if self.dups {
            self.seqnum = (self.seqnum + 1) & 0x7fff_ffff;
        }
        self.stream_time = self.stream_time.max(t);
        if t <= self.stream_time - self.retention {
            return PutOutcome::Expired;
        }
        let id = (key.to_vec(), t, self.seqnum);
        match value {
            Some(v) => {
                self.entries.insert(id, v.to_vec());
            }
            None => {
                self.entries.remove(&id);
            }
        }
        PutOutcome::Written
    }

    fn live(&self) -> impl Iterator<Item = (&(Vec<u8>, i64, i32), &Vec<u8>)> {
        self.entries
            .iter()
            .filter(|((_, t, _), _)| *t > self.stream_time - self.retention)
    }

    fn fetch(&self, key: &[u8], from: i64, to: i64, forward: bool) -> Vec<(i64, Vec<u8>)> {
        let mut hits: Vec<_> = self
            .live()
            .filter(|((k, t, _), _)| k == key && (from..=to).contains(t))
            .map(|((_, t, seq), v)| ((*t, *seq), v.clone()))
            .collect();
        hits.sort_by_key(|(order, _)| *order);
        if !forward {
            hits.reverse();
        }
        hits.into_iter().map(|((t, _), v)| (t, v)).collect()
    }

    /// Range scans: segment by segment, then by store-key bytes (which is
    /// not (key, start) order when one key is a prefix of another).
    fn scan(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        from: i64,
        to: i64,
        forward: bool,
    ) -> Vec<WindowEntry> {
        if let (Some(a), Some(b)) = (key_from, key_to)
            && a > b
        {
            return Vec::new();
        }
        let mut hits: Vec<_> = self
            .live()
            .filter(|((k, t, _), _)| {
                key_from.is_none_or(|a| k.as_slice() >= a)
                    && key_to.is_none_or(|b| k.as_slice() <= b)
                    && (from..=to).contains(t)
            })
            .map(|((k, t, seq), v)| {
                let order = (t / self.interval, window::store_key(k, *t, *seq));
                (order, (k.clone(), *t), v.clone())
            })
            .collect();
        hits.sort_by(|a, b| a.0.cmp(&b.0));
        if !forward {
            hits.reverse();
        }
        hits.into_iter()
            .map(|(_, (key, start), value)| WindowEntry {
                key,
                start,
                end: start + self.size,
                value,
            })
            .collect()
    }
}

fn run_random_model(seed: u64, dups: bool) {
    const KEYS: [&[u8]; 7] = [b"", b"a", b"aa", b"a\0", b"a\0\0", b"b", b"\xff"];
    let (retention, interval, size) = (1_000, 300, 50);
    let mut rng = Rng(seed);
    let mut store = WindowStore::with_segment_interval(
        strom_core::store::InMemorySegmentFactory,
        retention,
        size,
        dups,
        interval,
    )
    .unwrap();
    let mut model = Model {
        retention,
        interval,
        size,
        dups,
        seqnum: 0,
        stream_time: -1,
        entries: HashMap::new(),
    };
    let mut clock = 0i64;
    for step in 0..4_000 {
        let key = KEYS[rng.below(KEYS.len() as u64) as usize];
        match rng.below(10) {
            0..=4 => {
                // Mostly near stream time, sometimes late, rarely a jump.
                if rng.below(50) == 0 {
                    clock += rng.below(2_000) as i64;
                }
                let t = rng.time(clock, 1_200);
                let value = format!("v{step}");
                let value = (rng.below(8) != 0).then_some(value.as_bytes());
                let want = model.put(key, value, t);
                assert_eq!(
                    store.put(key, value, t).unwrap(),
                    want,
                    "put at step {step}"
                );
                clock = clock.max(t);
            }
            5 | 6 => {
                let from = rng.time(clock, 1_500);
                let to = from + rng.below(1_500) as i64 - 100;
                let forward = rng.below(2) == 0;
                let got = if forward {
                    store.fetch(key, from, to).unwrap()
                } else {
                    store.backward_fetch(key, from, to).unwrap()
                };
                assert_eq!(
                    got,
                    model.fetch(key, from, to, forward),
                    "fetch at step {step}"
                );
            }
            7 | 8 => {
                let other = KEYS[rng.below(KEYS.len() as u64) as usize];
                let key_from = (rng.below(4) != 0).then_some(key);
                let key_to = (rng.below(4) != 0).then_some(other);
                let from = rng.time(clock, 1_500);
                let to = from + rng.below(1_500) as i64;
                let forward = rng.below(2) == 0;
                let got = if forward {
                    store.fetch_range(key_from, key_to, from, to).unwrap()
                } else {
                    store
                        .backward_fetch_range(key_from, key_to, from, to)
                        .unwrap()
                };
                assert_eq!(
                    got,
                    model.scan(key_from, key_to, from, to, forward),
                    "fetch_range {key_from:?}..{key_to:?} [{from}, {to}] at step {step}"
                );
            }
            _ => {
                assert_eq!(
                    store.all().unwrap(),
                    model.scan(None, None, 0, i64::MAX, true),
                    "all at step {step}"
                );
                let t = rng.time(clock, 1_200);
                let want = if dups {
                    None
                } else {
                    model.fetch(key, t, t, true).pop().map(|(_, v)| v)
                };
                assert_eq!(
                    store.fetch_one(key, t).unwrap(),
                    want,
                    "fetch_one at step {step}"
                );
            }
        }
        assert_eq!(store.observed_stream_time(), model.stream_time);
        // Only segments that can hold live windows are kept.
        let min_live_segment = (model.stream_time - retention) / interval;
        assert!(store.segment_ids().iter().all(|&id| id >= min_live_segment));
    }
    assert!(store.segment_ids().len() <= (retention / interval + 2) as usize);
}

// Seeded random operations against a brute-force model, with retention drops.
#[test]
fn random_operations_match_a_brute_force_model() {
    for seed in 1..=4 {
        run_random_model(seed, false);
        run_random_model(seed + 100, true);
    }
}

/// Seeded puts (late, expired, deleting, jumping segments) made one at a
/// time into one store and in batches of random sizes into another (`b`):
/// the same outcomes, stream time, segments and contents after each batch.
fn batched_puts_equal_single_puts<F: SegmentFactory>(
    seed: u64,
    batches: usize,
    mut a: WindowStore<F>,
    mut b: WindowStore<F>,
) {
    const KEYS: [&[u8]; 5] = [b"", b"a", b"aa", b"a\0", b"b"];
    let mut rng = Rng(seed);
    let mut clock = 0i64;
    let mut step = 0;
    for _ in 0..batches {
        let n = rng.below(40) as usize;
        let mut batch = Vec::with_capacity(n);
        for _ in 0..n {
            if rng.below(30) == 0 {
                clock += rng.below(2_000) as i64;
            }
            let t = rng.time(clock, 1_200);
            clock = clock.max(t);
            let key = KEYS[rng.below(KEYS.len() as u64) as usize];
            let value = (rng.below(8) != 0).then(|| format!("v{step}").into_bytes());
            step += 1;
            batch.push((key, value, t));
        }
        let entries = || batch.iter().map(|(k, v, t)| (*k, v.as_deref(), *t));
        let single: Vec<PutOutcome> = entries().map(|(k, v, t)| a.put(k, v, t).unwrap()).collect();
        let mut batched = Vec::new();
        b.put_batch(entries(), &mut batched).unwrap();
        assert_eq!(
            batched, single,
            "outcomes of the batch ending at put {step}"
        );
        assert_eq!(b.observed_stream_time(), a.observed_stream_time());
        assert_eq!(b.segment_ids(), a.segment_ids());
        assert_eq!(b.seqnum(), a.seqnum());
        assert_eq!(
            b.all().unwrap(),
            a.all().unwrap(),
            "contents after put {step}"
        );
    }
}

fn random_store(dups: bool) -> InMemoryWindowStore {
    WindowStore::with_segment_interval(
        strom_core::store::InMemorySegmentFactory,
        1_000,
        50,
        dups,
        300,
    )
    .unwrap()
}

#[test]
fn batched_puts_equal_puts_one_at_a_time() {
    for seed in 1..=4 {
        for dups in [false, true] {
            batched_puts_equal_single_puts(seed, 300, random_store(dups), random_store(dups));
        }
    }
}

// The persistent segments write a run as one batch (and size a new
// segment's index after the newest one's).
#[test]
fn batched_puts_equal_puts_one_at_a_time_on_disk() {
    for dups in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| {
            let options = strom_core::store::PersistentStoreOptions::default();
            let (factory, _) = strom_core::store::PersistentSegmentFactory::open(
                dir.path().join(name),
                300,
                options,
            )
            .unwrap();
            WindowStore::with_segment_interval(factory, 1_000, 50, dups, 300).unwrap()
        };
        batched_puts_equal_single_puts(7, 60, open("single"), open("batched"));
    }
}

// A bad window start fails the batch there: the puts before it are made.
#[test]
fn a_negative_window_start_fails_a_batch_after_the_puts_before_it() {
    let mut s = store(false);
    let mut outcomes = Vec::new();
    let keys = [k(1), k(2), k(3), k(4)];
    let batch = [
        (keys[0].as_slice(), Some(b"one".as_slice()), START),
        (
            keys[1].as_slice(),
            Some(b"two".as_slice()),
            START + SEGMENT_INTERVAL,
        ),
        (keys[2].as_slice(), Some(b"bad".as_slice()), -1),
        (keys[3].as_slice(), Some(b"never".as_slice()), START),
    ];
    let err = s
        .put_batch(batch.iter().copied(), &mut outcomes)
        .unwrap_err();
    assert!(matches!(err, strom_core::Error::Config(_)), "{err}");
    assert_eq!(outcomes, [PutOutcome::Written, PutOutcome::Written]);
    assert_eq!(
        windows(&s.all().unwrap()),
        [
            (1, "one".into(), START),
            (2, "two".into(), START + SEGMENT_INTERVAL)
        ]
    );
}

// The Python bindings hold stores across threads (the GIL is released).
#[test]
fn stores_are_send() {
    fn assert_send<T: Send>() {}
    assert_send::<InMemoryWindowStore>();
    assert_send::<strom_core::store::InMemorySessionStore>();
    assert_send::<WindowStore<SharedDisk>>();
}
