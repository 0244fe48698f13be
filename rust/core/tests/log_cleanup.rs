//! Embedded log: retention (time and size) and compaction.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use strom_core::Error;
use strom_core::log::{Log, RecordBatchBuilder, TopicConfig};

fn config(pairs: &[(&str, &str)]) -> TopicConfig {
    let mut c = TopicConfig::new(1);
    c.set("segment.bytes", "1000").unwrap();
    c.set("index.interval.bytes", "100").unwrap();
    for (k, v) in pairs {
        c.set(k, v).unwrap();
    }
    c
}

/// Records `range`, each with timestamp = offset, key `k{offset % keys}`, value `v{offset}`.
fn keyed(range: std::ops::Range<u64>, keys: u64) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    for i in range {
        let key = format!("k{}", i % keys);
        let value = format!("v{i}");
        b.push(i as i64, Some(key.as_bytes()), Some(value.as_bytes()), &[]);
    }
    b
}

fn one(key: &str, value: Option<&str>, ts: i64) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    b.push(ts, Some(key.as_bytes()), value.map(str::as_bytes), &[]);
    b
}

type Entry = (u64, String, Option<String>);

fn read_all(log: &Log, topic: &str) -> Vec<Entry> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset(topic, 0).unwrap();
    loop {
        let b = log.read(topic, 0, offset, 7, usize::MAX).unwrap();
        if b.is_empty() {
            assert_eq!(b.next_offset, log.end_offset(topic, 0).unwrap());
            return out;
        }
        for i in 0..b.len() {
            let s = |v: Option<&[u8]>| v.map(|v| String::from_utf8(v.to_vec()).unwrap());
            out.push((b.offsets[i], s(b.key(i)).unwrap(), s(b.value(i))));
        }
        offset = b.next_offset;
    }
}

/// (base offset, size) of each segment file, oldest first.
fn segments(dir: &Path, topic: &str) -> Vec<(u64, u64, PathBuf)> {
    let mut segs: Vec<(u64, u64, PathBuf)> = fs::read_dir(dir.join(format!("{topic}-0")))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| {
            let base = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            (base, fs::metadata(&p).unwrap().len(), p)
        })
        .collect();
    segs.sort();
    segs
}

fn mtime_ms(path: &Path) -> i64 {
    let t = fs::metadata(path).unwrap().modified().unwrap();
    t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn retention_by_time_deletes_whole_closed_segments() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path()).unwrap();
        log.create_topic("t", config(&[("retention.ms", "50")]))
            .unwrap();
        log.create_topic("keep", config(&[])).unwrap();
        for i in (0..100).step_by(4) {
            log.append("t", 0, &keyed(i..i + 4, 10)).unwrap();
            log.append("keep", 0, &keyed(i..i + 4, 10)).unwrap();
        }
        let before = segments(dir.path(), "t");
        assert!(before.len() >= 5);
        // Timestamps equal offsets: segments whose last offset (the next
        // base - 1) is below 50 go.
        let expect_start = before
            .iter()
            .zip(before.iter().skip(1))
            .find(|(_, next)| next.0 > 50)
            .map(|(s, _)| s.0)
            .unwrap();
        assert!(expect_start > 0);
        let deleted = log.enforce_retention(100).unwrap();
        assert_eq!(
            deleted as usize,
            before.iter().filter(|s| s.0 < expect_start).count()
        );
        assert_eq!(log.log_start_offset("t", 0).unwrap(), expect_start);
        assert_eq!(segments(dir.path(), "t")[0].0, expect_start);
        assert!(matches!(
            log.read("t", 0, 0, 1, 1),
            Err(Error::OffsetOutOfRange { log_start, .. }) if log_start == expect_start
        ));
        assert_eq!(read_all(&log, "t")[0].0, expect_start);
        // Nothing more is due at the same time; the unlimited topic keeps all.
        assert_eq!(log.enforce_retention(100).unwrap(), 0);
        assert_eq!(log.log_start_offset("keep", 0).unwrap(), 0);
        assert_eq!(read_all(&log, "keep").len(), 100);
    }
    let log = Log::open(dir.path()).unwrap();
    let start = log.log_start_offset("t", 0).unwrap();
    assert!(start > 0);
    assert_eq!(read_all(&log, "t").len() as u64, 100 - start);
    // Even with everything expired, the active segment stays.
    log.enforce_retention(i64::MAX).unwrap();
    let left = segments(dir.path(), "t");
    assert_eq!(left.len(), 1);
    assert_eq!(log.log_start_offset("t", 0).unwrap(), left[0].0);
    assert_eq!(log.end_offset("t", 0).unwrap(), 100);
    assert_eq!(log.append("t", 0, &keyed(100..101, 10)).unwrap(), 100);
}

#[test]
fn retention_by_size_keeps_at_least_retention_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", config(&[("retention.bytes", "2500")]))
        .unwrap();
    log.append("t", 0, &keyed(0..100, 10)).unwrap();
    let before = segments(dir.path(), "t");
    let total: u64 = before.iter().map(|s| s.1).sum();
    assert!(total > 4000);
    let deleted = log.enforce_retention(0).unwrap();
    assert!(deleted >= 1);
    let after = segments(dir.path(), "t");
    let left: u64 = after.iter().map(|s| s.1).sum();
    assert!(left >= 2500, "{left}");
    assert!(left - after[0].1 < 2500, "one more could have gone");
    assert_eq!(after.len(), before.len() - deleted as usize);
    assert_eq!(log.log_start_offset("t", 0).unwrap(), after[0].0);
}

#[test]
fn retention_skips_compact_only_topics_but_not_compact_delete() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic(
        "c",
        config(&[("cleanup.policy", "compact"), ("retention.ms", "0")]),
    )
    .unwrap();
    log.create_topic(
        "cd",
        config(&[("cleanup.policy", "compact,delete"), ("retention.ms", "0")]),
    )
    .unwrap();
    for t in ["c", "cd"] {
        log.append(t, 0, &keyed(0..100, 10)).unwrap();
    }
    log.enforce_retention(1_000_000).unwrap();
    assert_eq!(log.log_start_offset("c", 0).unwrap(), 0);
    assert!(log.log_start_offset("cd", 0).unwrap() > 0);
}

#[test]
fn compaction_keeps_the_latest_record_per_key_and_preserves_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", config(&[("cleanup.policy", "compact")]))
        .unwrap();
    for i in (0..200).step_by(10) {
        log.append("t", 0, &keyed(i..i + 10, 7)).unwrap();
    }
    let segs = segments(dir.path(), "t");
    let active_base = segs.last().unwrap().0;
    let mut latest = HashMap::new();
    for o in 0..200u64 {
        latest.insert(o % 7, o);
    }
    let expected: Vec<u64> = (0..200)
        .filter(|&o| o >= active_base || latest[&(o % 7)] == o)
        .collect();
    let stats = log.compact("t", 0).unwrap();
    assert_eq!(stats.records_removed, 200 - expected.len() as u64);
    assert_eq!(stats.tombstones_removed, 0);
    assert!(stats.segments_cleaned >= 1);
    let after = read_all(&log, "t");
    assert_eq!(after.iter().map(|e| e.0).collect::<Vec<_>>(), expected);
    for (o, key, value) in &after {
        assert_eq!(key, &format!("k{}", o % 7));
        assert_eq!(value.as_deref(), Some(format!("v{o}").as_str()));
    }
    // Fully shadowed segments are gone; the log start moved past them.
    assert!(segments(dir.path(), "t").len() < segs.len());
    assert_eq!(
        log.log_start_offset("t", 0).unwrap(),
        segments(dir.path(), "t")[0].0
    );
    // Reads land right in the gaps and through the rebuilt index.
    for o in 0..200 {
        if o < log.log_start_offset("t", 0).unwrap() {
            continue;
        }
        let b = log.read("t", 0, o, 1, usize::MAX).unwrap();
        let want = expected.iter().copied().find(|&e| e >= o).unwrap();
        assert_eq!(b.offsets, vec![want], "read at {o}");
    }
    // A second pass has nothing to do; appends go on at the end.
    assert_eq!(log.compact("t", 0).unwrap().records_removed, 0);
    assert_eq!(log.append("t", 0, &keyed(200..201, 7)).unwrap(), 200);
    drop(log);
    let log = Log::open(dir.path()).unwrap();
    let mut reopened = expected.clone();
    reopened.push(200);
    assert_eq!(
        read_all(&log, "t").iter().map(|e| e.0).collect::<Vec<_>>(),
        reopened
    );
}

#[test]
fn tombstones_stay_until_delete_retention_ms_after_the_segment_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic(
        "t",
        config(&[
            ("cleanup.policy", "compact"),
            ("delete.retention.ms", "1000"),
        ]),
    )
    .unwrap();
    log.append("t", 0, &one("a", Some("1"), 0)).unwrap();
    log.append("t", 0, &one("b", Some("2"), 0)).unwrap();
    log.append("t", 0, &one("a", None, 0)).unwrap();
    log.roll("t", 0).unwrap();
    log.append("t", 0, &one("c", Some("3"), 0)).unwrap();
    let seg = segments(dir.path(), "t")[0].2.clone();
    let written = mtime_ms(&seg);

    let s = log.compact("t", written + 999).unwrap();
    assert_eq!((s.records_removed, s.tombstones_removed), (1, 0));
    let entries = read_all(&log, "t");
    assert_eq!(
        entries,
        vec![
            (1, "b".into(), Some("2".into())),
            (2, "a".into(), None),
            (3, "c".into(), Some("3".into())),
        ]
    );
    assert_eq!(mtime_ms(&seg), written, "cleaning keeps the segment's time");

    let s = log.compact("t", written + 1000).unwrap();
    assert_eq!((s.records_removed, s.tombstones_removed), (1, 1));
    assert_eq!(
        read_all(&log, "t").iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![1, 3]
    );
}

#[test]
fn reads_step_over_offsets_compaction_removed_at_the_end_of_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic(
        "t",
        config(&[("cleanup.policy", "compact"), ("delete.retention.ms", "0")]),
    )
    .unwrap();
    log.append("t", 0, &one("a", Some("1"), 0)).unwrap();
    log.append("t", 0, &one("b", Some("2"), 0)).unwrap();
    log.append("t", 0, &one("b", None, 0)).unwrap();
    log.roll("t", 0).unwrap();
    log.compact("t", i64::MAX).unwrap();
    let b = log.read("t", 0, 1, 10, usize::MAX).unwrap();
    assert!(b.is_empty());
    assert_eq!(b.next_offset, 3, "moves to the log end past the gap");
    let b = log.read("t", 0, 0, 10, usize::MAX).unwrap();
    assert_eq!(b.offsets, vec![0]);
    assert_eq!(b.next_offset, 3);
}

#[test]
fn compaction_rules() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("c", config(&[("cleanup.policy", "compact")]))
        .unwrap();
    log.create_topic("d", config(&[])).unwrap();
    let mut b = RecordBatchBuilder::new();
    b.push(0, Some(b"k"), Some(b"v"), &[]);
    b.push(0, None, Some(b"v"), &[]);
    match log.append("c", 0, &b) {
        Err(Error::Config(msg)) => assert!(msg.contains("null key"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        log.end_offset("c", 0).unwrap(),
        0,
        "nothing of the batch appended"
    );
    assert_eq!(log.append("d", 0, &b).unwrap(), 0);
    assert!(matches!(log.compact("d", 0), Err(Error::Config(_))));
    assert!(matches!(log.compact("x", 0), Err(Error::UnknownTopic(_))));
    assert_eq!(log.compact("c", 0).unwrap().segments_cleaned, 0);
}

/// `min.compaction.lag.ms`, as Kafka: only the closed segments before the
/// first one holding a record newer than now - lag are compacted, and only
/// their records shadow older ones (what a versioned store's changelog
/// needs: every version stays until the history no longer reaches it).
#[test]
fn compaction_lag_keeps_recent_records_and_what_they_would_shadow() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    let lagged = config(&[
        ("cleanup.policy", "compact"),
        ("min.compaction.lag.ms", "100"),
    ]);
    log.create_topic("t", lagged).unwrap();
    // Timestamps = offsets: records 0..200 over 7 keys, several segments.
    for i in (0..200).step_by(10) {
        log.append("t", 0, &keyed(i..i + 10, 7)).unwrap();
    }
    let segs = segments(dir.path(), "t");
    // At now = 150, records up to timestamp 50 are past the lag.
    let cut = 50u64;
    let cleanable: Vec<(u64, u64)> = segs
        .windows(2)
        .map(|w| (w[0].0, w[1].0 - 1))
        .take_while(|&(_, last)| last <= cut)
        .collect();
    assert!(!cleanable.is_empty() && cleanable.len() < segs.len() - 1);
    let end = cleanable.last().unwrap().1;
    let mut latest = HashMap::new();
    for o in 0..=end {
        latest.insert(o % 7, o);
    }
    let expected: Vec<u64> = (0..200)
        .filter(|&o| o > end || latest[&(o % 7)] == o)
        .collect();
    log.compact("t", 150).unwrap();
    assert_eq!(
        read_all(&log, "t").iter().map(|e| e.0).collect::<Vec<_>>(),
        expected
    );
    // The config survives a reopen; a bad value is an error.
    drop(log);
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(log.topic_config("t").unwrap().min_compaction_lag_ms, 100);
    let mut c = TopicConfig::new(1);
    assert!(matches!(
        c.set("min.compaction.lag.ms", "-1"),
        Err(Error::Config(_))
    ));
}
