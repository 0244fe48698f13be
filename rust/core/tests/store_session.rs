//! Session store tests. Most follow scenarios of Kafka's own store tests
//! (`AbstractSessionBytesStoreTest`, `SessionKeySchemaTest`), rewritten
//! against the bytes API; each test names the one it follows.

use std::collections::{BTreeSet, HashMap};

use strom_core::store::InMemorySessionStore;
use strom_core::store::session::{self, SessionEntry, SessionStore};
use strom_core::store::time_segments::{InMemorySegmentFactory, PutOutcome};

const SEGMENT_INTERVAL: i64 = 60_000;
const RETENTION_PERIOD: i64 = 10_000;

fn store() -> InMemorySessionStore {
    SessionStore::in_memory(RETENTION_PERIOD).unwrap()
}

/// Kafka's `Serdes.Long()`: 8 bytes big-endian.
fn long(v: i64) -> Vec<u8> {
    v.to_be_bytes().to_vec()
}

fn put(s: &mut InMemorySessionStore, key: &str, start: i64, end: i64, v: i64) -> PutOutcome {
    s.put(key.as_bytes(), start, end, Some(&long(v))).unwrap()
}

/// (key, start, end, value) of each entry, in order.
fn sessions(entries: &[SessionEntry]) -> Vec<(String, i64, i64, i64)> {
    entries
        .iter()
        .map(|e| {
            (
                String::from_utf8(e.key.clone()).unwrap(),
                e.start,
                e.end,
                i64::from_be_bytes(e.value.as_slice().try_into().unwrap()),
            )
        })
        .collect()
}

fn value_set(entries: &[SessionEntry]) -> BTreeSet<i64> {
    sessions(entries).into_iter().map(|s| s.3).collect()
}

fn s(key: &str, start: i64, end: i64, v: i64) -> (String, i64, i64, i64) {
    (key.to_string(), start, end, v)
}

// Follows SessionKeySchemaTest.shouldConvertToBinaryAndBack /
// shouldExtractEndTimeFromBinary / shouldExtractStartTimeFromBinary: the end
// comes before the start.
#[test]
fn key_encoding_is_kafkas_session_key_schema() {
    assert_eq!(
        session::store_key(b"a", 1, 2),
        [0x61, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1]
    );
    let key = session::store_key(b"key", 0x0102_0304_0506_0708, 0x1112_1314_1516_1718);
    assert_eq!(
        key,
        [
            b'k', b'e', b'y', 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 1, 2, 3, 4, 5, 6, 7,
            8
        ]
    );
    assert_eq!(
        session::split_store_key(&key).unwrap(),
        (&b"key"[..], 0x0102_0304_0506_0708, 0x1112_1314_1516_1718)
    );
    assert_eq!(
        session::split_store_key(&[0; 16]).unwrap(),
        (&b""[..], 0, 0)
    );
    assert!(session::split_store_key(&[0; 15]).is_err());
}

// Follows AbstractSessionBytesStoreTest.shouldPutAndFindSessionsInRange and
// shouldPutAndBackwardFindSessionsInRange.
#[test]
fn put_and_find_sessions_in_range() {
    let mut st = store();
    put(&mut st, "a", 10, 10, 1);
    put(&mut st, "a", 500, 1000, 2);
    put(&mut st, "a", 1500, 2000, 1);
    put(&mut st, "a", 2500, 3000, 2);
    let expected = [s("a", 10, 10, 1), s("a", 500, 1000, 2)];
    assert_eq!(
        sessions(&st.find_sessions(b"a", 0, 1000).unwrap()),
        expected
    );
    let mut reversed = expected.to_vec();
    reversed.reverse();
    assert_eq!(
        sessions(&st.backward_find_sessions(b"a", 0, 1000).unwrap()),
        reversed
    );
    assert_eq!(
        sessions(&st.find_sessions(b"a", 400, 600).unwrap()),
        [s("a", 500, 1000, 2)]
    );
    assert_eq!(
        sessions(&st.backward_find_sessions(b"a", 400, 600).unwrap()),
        [s("a", 500, 1000, 2)]
    );
}

// Follows AbstractSessionBytesStoreTest.shouldFindSessionsToMerge and
// shouldFindValuesWithinMergingSessionWindowRange: earliest end and latest
// start are both inclusive.
#[test]
fn find_sessions_bounds_are_inclusive() {
    let mut st = store();
    put(&mut st, "a", 0, 100, 1);
    put(&mut st, "a", 101, 200, 2);
    put(&mut st, "a", 201, 300, 3);
    put(&mut st, "a", 301, 400, 4);
    put(&mut st, "a", 401, 500, 5);
    assert_eq!(
        sessions(&st.find_sessions(b"a", 150, 300).unwrap()),
        [s("a", 101, 200, 2), s("a", 201, 300, 3)]
    );
    assert_eq!(
        sessions(&st.backward_find_sessions(b"a", 150, 300).unwrap()),
        [s("a", 201, 300, 3), s("a", 101, 200, 2)]
    );
    // End == earliest end, start == latest start: both found.
    assert_eq!(
        value_set(&st.find_sessions(b"a", 200, 201).unwrap()),
        BTreeSet::from([2, 3])
    );
    // One past either bound: not found.
    assert_eq!(
        value_set(&st.find_sessions(b"a", 201, 200).unwrap()),
        BTreeSet::from([])
    );
    assert_eq!(
        value_set(&st.find_sessions(b"a", 400, 401).unwrap()),
        BTreeSet::from([4, 5])
    );
    assert_eq!(
        value_set(&st.find_sessions(b"a", 501, i64::MAX).unwrap()),
        BTreeSet::from([])
    );

    let mut st = store();
    put(&mut st, "a", 0, 0, 1);
    put(&mut st, "a", 1000, 1000, 2);
    assert_eq!(
        sessions(&st.find_sessions(b"a", -1, 1000).unwrap()),
        [s("a", 0, 0, 1), s("a", 1000, 1000, 2)]
    );
}

// Follows AbstractSessionBytesStoreTest.shouldFetchAllSessionsWithSameRecordKey
// and shouldBackwardFetchAllSessionsWithSameRecordKey.
#[test]
fn fetch_returns_all_sessions_of_exactly_the_key() {
    let mut st = store();
    let expected = [
        s("a", 0, 0, 1),
        s("a", 10, 10, 2),
        s("a", 100, 100, 3),
        s("a", 1000, 1000, 4),
    ];
    for (k, start, end, v) in &expected {
        put(&mut st, k, *start, *end, *v);
    }
    put(&mut st, "aa", 0, 0, 5);
    assert_eq!(sessions(&st.fetch(b"a").unwrap()), expected);
    let mut reversed = expected.to_vec();
    reversed.reverse();
    assert_eq!(sessions(&st.backward_fetch(b"a").unwrap()), reversed);
}

// Follows AbstractSessionBytesStoreTest.shouldFetchAllSessionsWithinKeyRange
// and shouldBackwardFetchAllSessionsWithinKeyRange, with open bounds.
#[test]
fn fetch_sessions_within_key_range() {
    let mut st = store();
    let mut expected = vec![
        s("aa", 10, 10, 2),
        s("aaa", 100, 100, 3),
        s("aaaa", 100, 100, 6),
        s("b", 1000, 1000, 4),
        s("bb", 1500, 2000, 5),
    ];
    for (k, start, end, v) in &expected {
        put(&mut st, k, *start, *end, *v);
    }
    put(&mut st, "a", 0, 0, 1);
    put(&mut st, "bbb", 2500, 3000, 6);

    let check = |st: &InMemorySessionStore, from: Option<&str>, to: Option<&str>, want: &[_]| {
        let (from, to) = (from.map(str::as_bytes), to.map(str::as_bytes));
        assert_eq!(sessions(&st.fetch_range(from, to).unwrap()), want);
        assert_eq!(
            sessions(&st.find_sessions_range(from, to, 0, i64::MAX).unwrap()),
            want
        );
        let mut reversed = want.to_vec();
        reversed.reverse();
        assert_eq!(
            sessions(&st.backward_fetch_range(from, to).unwrap()),
            reversed
        );
    };
    check(&st, Some("aa"), Some("bb"), &expected);
    expected.insert(0, s("a", 0, 0, 1));
    check(&st, None, Some("bb"), &expected);
    expected.remove(0);
    expected.push(s("bbb", 2500, 3000, 6));
    check(&st, Some("aa"), None, &expected);
    expected.insert(0, s("a", 0, 0, 1));
    check(&st, None, None, &expected);
    // An inverted key range is empty (Kafka logs a warning).
    assert!(st.fetch_range(Some(b"b"), Some(b"a")).unwrap().is_empty());
}

// Follows AbstractSessionBytesStoreTest.shouldFetchExactSession and
// shouldReturnNullOnSessionNotFound.
#[test]
fn fetch_exact_session() {
    let mut st = store();
    put(&mut st, "a", 0, 4, 1);
    put(&mut st, "aa", 0, 3, 2);
    put(&mut st, "aa", 0, 4, 3);
    put(&mut st, "aa", 1, 4, 4);
    put(&mut st, "aaa", 0, 4, 5);
    assert_eq!(st.fetch_session(b"aa", 0, 4).unwrap(), Some(long(3)));
    assert_eq!(st.fetch_session(b"any key", 0, 5).unwrap(), None);
    assert_eq!(st.fetch_session(b"aa", 0, 5).unwrap(), None);
}

// Follows AbstractSessionBytesStoreTest.shouldRemove,
// shouldRemoveOnNullAggValue and shouldNotThrowExceptionRemovingNonexistentKey.
#[test]
fn remove_and_null_aggregate_delete_the_session() {
    let mut st = store();
    put(&mut st, "a", 0, 1000, 1);
    put(&mut st, "a", 1500, 2500, 2);
    st.remove(b"a", 0, 1000).unwrap();
    assert!(st.find_sessions(b"a", 0, 1000).unwrap().is_empty());
    assert_eq!(st.find_sessions(b"a", 1500, 2500).unwrap().len(), 1);

    let mut st = store();
    put(&mut st, "a", 0, 1000, 1);
    put(&mut st, "a", 1500, 2500, 2);
    assert_eq!(st.put(b"a", 0, 1000, None).unwrap(), PutOutcome::Written);
    assert!(st.find_sessions(b"a", 0, 1000).unwrap().is_empty());
    assert_eq!(st.find_sessions(b"a", 1500, 2500).unwrap().len(), 1);

    st.remove(b"a", 0, 1).unwrap();
    st.remove(b"nope", 0, 1_000_000).unwrap();
    // Removing does not advance stream time.
    assert_eq!(st.observed_stream_time(), 2500);
}

// Follows AbstractSessionBytesStoreTest.shouldFetchExactKeys and
// shouldBackwardFetchExactKeys: "aa" shares "a"'s byte range.
#[test]
fn find_sessions_returns_only_exact_keys() {
    let retention = 0x7a00_0000_0000_0000;
    let mut st = SessionStore::in_memory(retention).unwrap();
    put(&mut st, "a", 0, 0, 1);
    put(&mut st, "aa", 0, 10, 2);
    put(&mut st, "a", 10, 20, 3);
    put(&mut st, "aa", 10, 20, 4);
    put(&mut st, "a", retention - 2, retention - 1, 5);
    for forward in [true, false] {
        let find = |k: &[u8], e, l| {
            if forward {
                st.find_sessions(k, e, l).unwrap()
            } else {
                st.backward_find_sessions(k, e, l).unwrap()
            }
        };
        let find_range = |a: Option<&[u8]>, b: Option<&[u8]>, e, l| {
            if forward {
                st.find_sessions_range(a, b, e, l).unwrap()
            } else {
                st.backward_find_sessions_range(a, b, e, l).unwrap()
            }
        };
        assert_eq!(
            value_set(&find(b"a", 0, i64::MAX)),
            BTreeSet::from([1, 3, 5])
        );
        assert_eq!(value_set(&find(b"aa", 0, i64::MAX)), BTreeSet::from([2, 4]));
        let all = BTreeSet::from([1, 2, 3, 4, 5]);
        assert_eq!(
            value_set(&find_range(Some(b"a"), Some(b"aa"), 0, i64::MAX)),
            all
        );
        assert_eq!(
            value_set(&find_range(Some(b"a"), Some(b"aa"), 10, 0)),
            BTreeSet::from([2])
        );
        assert_eq!(value_set(&find_range(None, Some(b"aa"), 0, i64::MAX)), all);
        assert_eq!(value_set(&find_range(Some(b"a"), None, 0, i64::MAX)), all);
        assert_eq!(value_set(&find_range(None, None, 0, i64::MAX)), all);
    }
}

// Follows AbstractSessionBytesStoreTest.shouldFetchAndIterateOverExactBinaryKeys.
#[test]
fn find_sessions_returns_only_exact_binary_keys() {
    let mut st = store();
    let keys: [&[u8]; 3] = [&[0], &[0, 0], &[0, 0, 0]];
    for i in 0..9 {
        let key = keys[i % 3];
        st.put(key, i as i64 + 1, 100, Some(&long(i as i64 + 1)))
            .unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        let got = st.find_sessions(key, 0, i64::MAX).unwrap();
        let want: Vec<i64> = (0..3).map(|j| (i + 3 * j) as i64 + 1).collect();
        assert_eq!(sessions(&got).iter().map(|s| s.3).collect::<Vec<_>>(), want);
    }
}

// Beyond Kafka's tests: a key that is a proper prefix of the range's upper
// key can sort after that key's own sessions in bytes; it is still included.
#[test]
fn key_range_includes_keys_that_are_prefixes_of_the_upper_key() {
    let mut st = store();
    st.put(b"a", 0, 7, Some(&long(1))).unwrap();
    st.put(b"a\0", 0, 0, Some(&long(2))).unwrap();
    let got = st
        .find_sessions_range(Some(b"a"), Some(b"a\0"), 0, 10)
        .unwrap();
    assert_eq!(value_set(&got), BTreeSet::from([1, 2]));
}

// Follows AbstractSessionBytesStoreTest.shouldMeasureExpiredRecords.
#[test]
fn sessions_beyond_retention_are_dropped_and_reported() {
    let mut st = store();
    assert_eq!(
        put(&mut st, "initial record", 0, 2 * SEGMENT_INTERVAL, 0),
        PutOutcome::Written
    );
    assert_eq!(put(&mut st, "late record", 0, 0, 0), PutOutcome::Expired);
    assert_eq!(
        put(
            &mut st,
            "another on-time record",
            0,
            2 * SEGMENT_INTERVAL,
            0
        ),
        PutOutcome::Written
    );
    // Exactly stream time - retention is expired, by end time.
    assert_eq!(
        put(
            &mut st,
            "edge",
            0,
            2 * SEGMENT_INTERVAL - RETENTION_PERIOD,
            0
        ),
        PutOutcome::Expired
    );
    assert_eq!(
        put(
            &mut st,
            "edge",
            0,
            2 * SEGMENT_INTERVAL - RETENTION_PERIOD + 1,
            0
        ),
        PutOutcome::Written
    );
    assert_eq!(st.observed_stream_time(), 2 * SEGMENT_INTERVAL);
}

// Follows AbstractSessionBytesStoreTest.shouldRemoveExpired (both the
// in-memory and the RocksDB variant of its data).
#[test]
fn expired_sessions_are_not_returned() {
    let mut st = store();
    put(&mut st, "a", 0, 0, 1);
    put(&mut st, "aa", 0, 10, 2);
    put(&mut st, "a", 10, 20, 3);
    put(&mut st, "aa", 10, RETENTION_PERIOD, 4);
    assert_eq!(
        value_set(
            &st.find_sessions_range(Some(b"a"), Some(b"b"), 0, i64::MAX)
                .unwrap()
        ),
        BTreeSet::from([2, 3, 4])
    );

    let mut st = store();
    put(&mut st, "a", 0, 0, 1);
    put(&mut st, "aa", 0, SEGMENT_INTERVAL, 2);
    put(&mut st, "a", 10, SEGMENT_INTERVAL, 3);
    put(&mut st, "aa", 10, 2 * SEGMENT_INTERVAL, 4);
    assert_eq!(
        value_set(
            &st.find_sessions_range(Some(b"a"), Some(b"b"), 0, i64::MAX)
                .unwrap()
        ),
        BTreeSet::from([4])
    );
    assert_eq!(st.fetch_session(b"aa", 0, SEGMENT_INTERVAL).unwrap(), None);
    assert!(st.fetch(b"a").unwrap().is_empty());
}

// Follows AbstractSessionBytesStoreTest.shouldNotFetchExpiredSessions.
#[test]
fn expired_sessions_are_not_fetched() {
    let now = 1_700_000_000_000;
    let r = RETENTION_PERIOD;
    let mut st = store();
    put(&mut st, "p", now - 3 * r, now - 2 * r, 1);
    put(&mut st, "q", now - 2 * r, now - r, 4);
    put(&mut st, "r", now - r, now - r / 2, 3);
    put(&mut st, "p", now - r, now - r / 2, 2);
    assert_eq!(
        value_set(&st.find_sessions(b"p", now - 2 * r, now - r).unwrap()),
        BTreeSet::from([2])
    );
    assert!(
        st.backward_find_sessions(b"p", now - 5 * r, now - 4 * r)
            .unwrap()
            .is_empty()
    );
    assert!(
        st.find_sessions_range(Some(b"p"), Some(b"r"), now - 5 * r, now - 4 * r)
            .unwrap()
            .is_empty()
    );
    let all = BTreeSet::from([2, 3, 4]);
    assert_eq!(
        value_set(
            &st.find_sessions_range(Some(b"p"), Some(b"r"), now - r, now - r / 2)
                .unwrap()
        ),
        all
    );
    assert_eq!(
        value_set(
            &st.find_sessions_range(Some(b"p"), Some(b"r"), now - 2 * r, now - r)
                .unwrap()
        ),
        all
    );
    assert_eq!(
        value_set(
            &st.backward_find_sessions_range(Some(b"p"), Some(b"r"), now - 2 * r, now - r)
                .unwrap()
        ),
        all
    );
}

// Segments are by session end: a long session lives as long as its end, and
// whole segments go as stream time advances (AbstractRocksDBSegmentedBytesStoreTest.shouldRollSegments).
#[test]
fn segments_follow_session_end_time() {
    let mut st = SessionStore::with_segment_interval(InMemorySegmentFactory, 1_000, 500).unwrap();
    assert_eq!(st.retention(), 1_000);
    assert_eq!(st.segment_interval(), 500);
    st.put(b"k", 0, 100, Some(b"short")).unwrap();
    st.put(b"k", 0, 1_200, Some(b"long")).unwrap();
    assert_eq!(st.segment_ids(), [0, 2]);
    st.put(b"x", 1_600, 1_600, Some(b"later")).unwrap();
    // segment_id(1600 - 1000) = 1: segment 0 is dropped.
    assert_eq!(st.segment_ids(), [2, 3]);
    let got: Vec<(i64, i64)> = st
        .fetch(b"k")
        .unwrap()
        .iter()
        .map(|e| (e.start, e.end))
        .collect();
    assert_eq!(got, [(0, 1_200)]);
    // Kafka's default interval for sessions.
    assert_eq!(store().segment_interval(), SEGMENT_INTERVAL);
}

// Follows AbstractSessionBytesStoreTest.shouldRestore: the changelog keys
// are the store keys.
#[test]
fn restore_from_changelog_keys() {
    let mut st = store();
    let changelog: Vec<(Vec<u8>, Option<Vec<u8>>)> = vec![
        (session::store_key(b"a", 0, 0), Some(long(1))),
        (session::store_key(b"a", 10, 10), Some(long(2))),
        (session::store_key(b"a", 100, 100), Some(long(3))),
        (session::store_key(b"a", 1000, 1000), Some(long(4))),
        (session::store_key(b"a", 10, 10), None),
        (session::store_key(b"a", 0, 20_000), Some(long(5))),
    ];
    let expired = st
        .restore(changelog.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
        .unwrap();
    // Stream time jumps to 20000 first: sessions ending at or before 10000
    // are dropped.
    assert_eq!(expired, 5);
    assert_eq!(sessions(&st.fetch(b"a").unwrap()), [s("a", 0, 20_000, 5)]);

    let mut st = store();
    let expired = st
        .restore(
            changelog[..5]
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref())),
        )
        .unwrap();
    assert_eq!(expired, 0);
    assert_eq!(
        sessions(&st.fetch(b"a").unwrap()),
        [s("a", 0, 0, 1), s("a", 100, 100, 3), s("a", 1000, 1000, 4)]
    );
    assert!(st.restore([(&[0u8; 3][..], None)]).is_err());
}

#[test]
fn observed_stream_time_can_be_restored() {
    let mut st = store();
    put(&mut st, "a", 0, 10, 1);
    st.restore_observed_stream_time(RETENTION_PERIOD + 10);
    assert_eq!(st.observed_stream_time(), RETENTION_PERIOD + 10);
    assert!(st.fetch(b"a").unwrap().is_empty());
    assert_eq!(put(&mut st, "a", 0, 10, 1), PutOutcome::Expired);
}

// Kafka's SessionWindow rejects a negative start and an end before start.
#[test]
fn invalid_sessions_are_config_errors() {
    let mut st = store();
    assert!(matches!(
        st.put(b"a", -1, 0, Some(b"v")).unwrap_err(),
        strom_core::Error::Config(_)
    ));
    assert!(st.put(b"a", 5, 4, Some(b"v")).is_err());
    assert!(st.remove(b"a", 5, 4).is_err());
    assert!(SessionStore::in_memory(-1).is_err());
}

/// splitmix64, so the test needs no crate.
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
}

// Seeded random operations against a brute-force model of sessions, with
// retention drops.
#[test]
fn random_operations_match_a_brute_force_model() {
    const KEYS: [&[u8]; 6] = [b"", b"a", b"aa", b"a\0", b"b", b"\xff"];
    let (retention, interval) = (1_000, 300);
    for seed in 1..=6u64 {
        let mut rng = Rng(seed);
        let mut st =
            SessionStore::with_segment_interval(InMemorySegmentFactory, retention, interval)
                .unwrap();
        let mut model: HashMap<(Vec<u8>, i64, i64), Vec<u8>> = HashMap::new();
        let mut stream_time = -1i64;
        let mut clock = 0i64;
        for step in 0..3_000 {
            let key = KEYS[rng.below(KEYS.len() as u64) as usize];
            match rng.below(8) {
                0..=3 => {
                    if rng.below(40) == 0 {
                        clock += rng.below(2_000) as i64;
                    }
                    let end = (clock - 1_200 + rng.below(1_400) as i64).max(0);
                    let start = (end - rng.below(400) as i64).max(0);
                    let value = format!("v{step}").into_bytes();
                    let remove = rng.below(6) == 0;
                    stream_time = stream_time.max(end);
                    let expired = end <= stream_time - retention;
                    let want = if expired {
                        PutOutcome::Expired
                    } else {
                        if remove {
                            model.remove(&(key.to_vec(), start, end));
                        } else {
                            model.insert((key.to_vec(), start, end), value.clone());
                        }
                        PutOutcome::Written
                    };
                    let got = st
                        .put(key, start, end, (!remove).then_some(value.as_slice()))
                        .unwrap();
                    assert_eq!(got, want, "put at step {step}");
                    clock = clock.max(end);
                }
                4 | 5 => {
                    let earliest_end = clock - rng.below(1_500) as i64;
                    let latest_start = earliest_end + rng.below(800) as i64 - 200;
                    let forward = rng.below(2) == 0;
                    let other = KEYS[rng.below(KEYS.len() as u64) as usize];
                    let ranged = rng.below(2) == 0;
                    let key_from = (rng.below(4) != 0).then_some(key);
                    let key_to = (rng.below(4) != 0).then_some(other);
                    let got = match (ranged, forward) {
                        (false, true) => st.find_sessions(key, earliest_end, latest_start),
                        (false, false) => {
                            st.backward_find_sessions(key, earliest_end, latest_start)
                        }
                        (true, true) => {
                            st.find_sessions_range(key_from, key_to, earliest_end, latest_start)
                        }
                        (true, false) => st.backward_find_sessions_range(
                            key_from,
                            key_to,
                            earliest_end,
                            latest_start,
                        ),
                    }
                    .unwrap();
                    let (key_from, key_to) = if ranged {
                        (key_from, key_to)
                    } else {
                        (Some(key), Some(key))
                    };
                    let inverted = matches!((key_from, key_to), (Some(a), Some(b)) if a > b);
                    let mut want: Vec<_> = model
                        .iter()
                        .filter(|((k, start, end), _)| {
                            !inverted
                                && *end > stream_time - retention
                                && key_from.is_none_or(|a| k.as_slice() >= a)
                                && key_to.is_none_or(|b| k.as_slice() <= b)
                                && *end >= earliest_end
                                && *start <= latest_start
                        })
                        .map(|((k, start, end), v)| {
                            let order = (end / interval, session::store_key(k, *start, *end));
                            (
                                order,
                                SessionEntry {
                                    key: k.clone(),
                                    start: *start,
                                    end: *end,
                                    value: v.clone(),
                                },
                            )
                        })
                        .collect();
                    want.sort_by(|a, b| a.0.cmp(&b.0));
                    if !forward {
                        want.reverse();
                    }
                    let want: Vec<SessionEntry> = want.into_iter().map(|(_, e)| e).collect();
                    assert_eq!(got, want, "find {key_from:?}..{key_to:?} at step {step}");
                }
                _ => {
                    let Some(((k, start, end), _)) = model.iter().next() else {
                        continue;
                    };
                    let want = if *end > stream_time - retention {
                        model.get(&(k.clone(), *start, *end)).cloned()
                    } else {
                        None
                    };
                    assert_eq!(st.fetch_session(k, *start, *end).unwrap(), want);
                }
            }
            assert_eq!(st.observed_stream_time(), stream_time);
        }
    }
}
