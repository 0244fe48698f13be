//! Embedded log: appends, reads, segments and the index, reopen, topics and config.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strom_core::Error;
use strom_core::log::{Header, Log, RecordBatchBuilder, TopicConfig};

type Rec = (u64, i64, Option<Vec<u8>>, Option<Vec<u8>>);
/// A timestamp, key and value to push.
type Pushed<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>);

fn config(partitions: u32, pairs: &[(&str, &str)]) -> TopicConfig {
    let mut c = TopicConfig::new(partitions);
    for (k, v) in pairs {
        c.set(k, v).unwrap();
    }
    c
}

fn values(range: std::ops::Range<u64>) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    for i in range {
        let key = format!("k{}", i % 10);
        let value = format!("value-{i:06}");
        b.push(
            i as i64 * 10,
            Some(key.as_bytes()),
            Some(value.as_bytes()),
            &[],
        );
    }
    b
}

fn read_all(log: &Log, topic: &str, partition: u32, from: u64) -> Vec<Rec> {
    let mut out = Vec::new();
    let mut offset = from;
    loop {
        let b = log.read(topic, partition, offset, 37, usize::MAX).unwrap();
        if b.is_empty() {
            assert_eq!(b.next_offset, log.end_offset(topic, partition).unwrap());
            return out;
        }
        for i in 0..b.len() {
            out.push((
                b.offsets[i],
                b.timestamps[i],
                b.key(i).map(<[u8]>::to_vec),
                b.value(i).map(<[u8]>::to_vec),
            ));
        }
        offset = b.next_offset;
    }
}

fn segment_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

#[test]
fn append_and_read_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(2)).unwrap();
    let mut b = RecordBatchBuilder::new();
    assert!(b.is_empty());
    b.push(5, Some(b"key"), Some(b"value"), &[]);
    b.push(-7, None, None, &[]);
    b.push(
        i64::MAX,
        Some(b""),
        Some(b""),
        &[
            Header {
                key: "h1",
                value: Some(b"x"),
            },
            Header {
                key: "ü",
                value: None,
            },
            Header {
                key: "",
                value: Some(b""),
            },
        ],
    );
    assert_eq!(b.len(), 3);
    assert_eq!(log.append("t", 1, &b).unwrap(), 0);
    assert_eq!(log.append("t", 1, &b).unwrap(), 3);
    assert_eq!(log.end_offsets("t").unwrap(), vec![0, 6]);

    let r = log.read("t", 1, 0, 100, usize::MAX).unwrap();
    assert_eq!(r.offsets, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(r.next_offset, 6);
    assert_eq!(r.timestamps[..3], [5, -7, i64::MAX]);
    assert_eq!(r.key(0), Some(&b"key"[..]));
    assert_eq!(r.value(0), Some(&b"value"[..]));
    assert_eq!(r.key(1), None);
    assert_eq!(r.value(1), None);
    assert_eq!(r.key(2), Some(&b""[..]));
    assert!(r.headers(0).is_empty());
    assert_eq!(
        r.headers(2),
        vec![
            ("h1".to_owned(), Some(b"x".to_vec())),
            ("ü".to_owned(), None),
            (String::new(), Some(Vec::new())),
        ]
    );
    assert_eq!(r.headers(5), r.headers(2));

    b.clear();
    assert!(b.is_empty());
    assert_eq!(
        log.append("t", 0, &b).unwrap(),
        0,
        "an empty batch appends nothing"
    );
    assert_eq!(log.end_offset("t", 0).unwrap(), 0);
}

/// Appending in place gives the log what `append` gives it, across segment
/// rolls, and leaves the builder empty and reusable.
#[test]
fn append_and_clear_matches_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    let small = config(
        1,
        &[("segment.bytes", "300"), ("index.interval.bytes", "0")],
    );
    log.create_topic("copied", small.clone()).unwrap();
    log.create_topic("in-place", small).unwrap();
    let mut reused = RecordBatchBuilder::new();
    for range in [0..3, 3..20, 20..21] {
        let batch = values(range.clone());
        let first = log.append("copied", 0, &batch).unwrap();
        reused = values(range);
        assert_eq!(
            log.append_and_clear("in-place", 0, &mut reused).unwrap(),
            first
        );
        assert!(reused.is_empty() && reused.size_in_bytes() == 0);
    }
    assert_eq!(
        log.append_and_clear("in-place", 0, &mut reused).unwrap(),
        21
    );
    reused.push(7, Some(b"k"), Some(b"v"), &[]);
    assert_eq!(
        log.append_and_clear("in-place", 0, &mut reused).unwrap(),
        21
    );
    log.append("copied", 0, &values(0..0)).unwrap();
    let mut last = RecordBatchBuilder::new();
    last.push(7, Some(b"k"), Some(b"v"), &[]);
    log.append("copied", 0, &last).unwrap();
    assert_eq!(
        read_all(&log, "in-place", 0, 0),
        read_all(&log, "copied", 0, 0)
    );
    assert_eq!(read_all(&log, "in-place", 0, 0).len(), 22);
    drop(log);
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(
        read_all(&log, "in-place", 0, 0),
        read_all(&log, "copied", 0, 0)
    );
    assert!(segment_files(&dir.path().join("in-place-0"), "log").len() > 2);
}

/// Values written straight into the batch (`push_with`) give the segment
/// the bytes `push` gives it; records pushed after a mark and rewound leave
/// nothing behind; a damaged byte in such a value is still a CRC mismatch.
#[test]
fn values_written_in_place_frame_as_pushed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("pushed", config(1, &[])).unwrap();
    log.create_topic("written", config(1, &[])).unwrap();
    let long = "x".repeat(5000);
    let records: [Pushed<'_>; 5] = [
        (1, Some(b"k1"), Some(b"{\"a\":1}")),
        (2, None, Some(b"v")),
        (3, Some(b"k3"), None),
        (4, Some(b""), Some(b"")),
        (5, Some(b"k5"), Some(long.as_bytes())),
    ];
    let mut pushed = RecordBatchBuilder::new();
    let mut written = RecordBatchBuilder::new();
    for (i, &(ts, key, value)) in records.iter().enumerate() {
        pushed.push(ts, key, value, &[]);
        let len = written.push_with(ts, key, |buf| {
            value.inspect(|v| buf.extend_from_slice(v)).is_some()
        });
        assert_eq!(len, value.map(<[u8]>::len));
        if i == 2 {
            // Records pushed past a mark and rewound are gone.
            let mark = written.mark();
            written.push_with(99, None, |buf| {
                buf.extend_from_slice(b"dropped");
                true
            });
            written.push(98, Some(b"k"), Some(b"dropped too"), &[]);
            written.rewind(mark);
        }
    }
    assert_eq!(written.len(), records.len());
    assert_eq!(written.size_in_bytes(), pushed.size_in_bytes());
    log.append("pushed", 0, &pushed).unwrap();
    log.append_and_clear("written", 0, &mut written).unwrap();
    log.flush().unwrap();
    let file = |topic: &str| {
        dir.path()
            .join(format!("{topic}-0/00000000000000000000.log"))
    };
    assert_eq!(
        fs::read(file("written")).unwrap(),
        fs::read(file("pushed")).unwrap()
    );
    let expected: Vec<Rec> = records
        .iter()
        .enumerate()
        .map(|(i, &(ts, k, v))| (i as u64, ts, k.map(<[u8]>::to_vec), v.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(read_all(&log, "written", 0, 0), expected);
    drop(log);
    let mut bytes = fs::read(file("written")).unwrap();
    let at = bytes.len() - 100; // inside the long value
    bytes[at] ^= 1;
    fs::write(file("written"), &bytes).unwrap();
    let log = Log::open(dir.path()).unwrap();
    match log.read("written", 0, 0, 10, usize::MAX) {
        Err(Error::CorruptLog { offset, reason, .. }) => {
            assert_eq!((offset, reason.as_str()), (Some(4), "CRC mismatch"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn end_offsets_and_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(1)).unwrap();
    let empty = log.read("t", 0, 0, 10, usize::MAX).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.next_offset, 0);
    log.append("t", 0, &values(0..5)).unwrap();
    let at_end = log.read("t", 0, 5, 10, usize::MAX).unwrap();
    assert!(at_end.is_empty());
    assert_eq!(at_end.next_offset, 5);
    match log.read("t", 0, 6, 10, usize::MAX) {
        Err(Error::OffsetOutOfRange {
            offset: 6,
            log_start: 0,
            log_end: 5,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_start_offset("t", 0).unwrap(), 0);
    assert!(log.read("t", 0, 0, 0, usize::MAX).unwrap().is_empty());
    assert!(matches!(
        log.read("t", 1, 0, 1, 1),
        Err(Error::UnknownPartition {
            partition: 1,
            count: 1,
            ..
        })
    ));
    assert!(matches!(log.read("nope", 0, 0, 1, 1), Err(Error::UnknownTopic(t)) if t == "nope"));
    assert!(matches!(
        log.end_offset("t", 3),
        Err(Error::UnknownPartition { .. })
    ));
    // At least one record even when it exceeds max_bytes.
    let one = log.read("t", 0, 0, 10, 1).unwrap();
    assert_eq!(one.offsets, vec![0]);
    assert_eq!(one.next_offset, 1);
    let two = log.read("t", 0, 1, 2, usize::MAX).unwrap();
    assert_eq!(two.offsets, vec![1, 2]);
}

#[test]
fn segments_roll_and_index_seeks_land_right() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic(
        "t",
        config(
            1,
            &[("segment.bytes", "2000"), ("index.interval.bytes", "150")],
        ),
    )
    .unwrap();
    let mut next = 0;
    while next < 1000 {
        let n = 1 + next % 13;
        assert_eq!(log.append("t", 0, &values(next..next + n)).unwrap(), next);
        next += n;
    }
    let pdir = dir.path().join("t-0");
    let logs = segment_files(&pdir, ".log");
    assert!(logs.len() > 10, "{} segments", logs.len());
    for f in &logs[..logs.len() - 1] {
        assert!(fs::metadata(f).unwrap().len() <= 2000);
    }
    let indexes = segment_files(&pdir, ".index");
    assert!(
        fs::metadata(&indexes[0]).unwrap().len() >= 8,
        "sparse index entries written"
    );

    let all = read_all(&log, "t", 0, 0);
    assert_eq!(all.len() as u64, next);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.0, i as u64);
        assert_eq!(r.1, i as i64 * 10);
        assert_eq!(r.3.as_deref(), Some(format!("value-{i:06}").as_bytes()));
    }
    for offset in 0..next {
        let b = log.read("t", 0, offset, 3, usize::MAX).unwrap();
        let want: Vec<u64> = (offset..(offset + 3).min(next)).collect();
        assert_eq!(b.offsets, want, "read at {offset}");
    }
    // One big read spans every segment.
    let big = log.read("t", 0, 0, usize::MAX, usize::MAX).unwrap();
    assert_eq!(big.len() as u64, next);
    // max_bytes stops early, but at record boundaries.
    let some = log.read("t", 0, 10, 1000, 500).unwrap();
    assert!(!some.is_empty() && some.len() < 20, "{}", some.len());
    assert_eq!(some.next_offset, 10 + some.len() as u64);
}

#[test]
fn a_batch_larger_than_a_segment_is_split_at_record_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", config(1, &[("segment.bytes", "1000")]))
        .unwrap();
    log.append("t", 0, &values(0..200)).unwrap();
    let logs = segment_files(&dir.path().join("t-0"), ".log");
    assert!(logs.len() >= 5);
    assert_eq!(read_all(&log, "t", 0, 0).len(), 200);
    // A single record bigger than segment.bytes still fits in an empty segment.
    let mut b = RecordBatchBuilder::new();
    b.push(0, Some(b"k"), Some(&[7u8; 5000]), &[]);
    assert_eq!(log.append("t", 0, &b).unwrap(), 200);
    let r = log.read("t", 0, 200, 1, 1).unwrap();
    assert_eq!(r.value(0).unwrap().len(), 5000);
}

#[test]
fn roll_and_segment_ms() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", config(1, &[("segment.ms", "1000")]))
        .unwrap();
    let pdir = dir.path().join("t-0");
    log.roll("t", 0).unwrap();
    assert_eq!(
        segment_files(&pdir, ".log").len(),
        1,
        "rolling an empty segment is a no-op"
    );
    let mut b = RecordBatchBuilder::new();
    b.push(10_000, Some(b"a"), Some(b"1"), &[]);
    log.append("t", 0, &b).unwrap();
    log.roll("t", 0).unwrap();
    assert_eq!(segment_files(&pdir, ".log").len(), 2);
    assert!(pdir.join("00000000000000000001.log").exists());
    // Record time: within segment.ms of the segment's first record, no roll.
    b.clear();
    b.push(10_500, Some(b"a"), Some(b"2"), &[]);
    log.append("t", 0, &b).unwrap();
    b.clear();
    b.push(11_000, Some(b"a"), Some(b"3"), &[]);
    log.append("t", 0, &b).unwrap();
    assert_eq!(segment_files(&pdir, ".log").len(), 2);
    b.clear();
    b.push(11_501, Some(b"a"), Some(b"4"), &[]);
    log.append("t", 0, &b).unwrap();
    assert_eq!(segment_files(&pdir, ".log").len(), 3);
    assert!(pdir.join("00000000000000000003.log").exists());
    assert_eq!(read_all(&log, "t", 0, 0).len(), 4);
}

#[test]
fn reopen_preserves_everything() {
    let dir = tempfile::tempdir().unwrap();
    let before;
    {
        let log = Log::open(dir.path()).unwrap();
        log.create_topic(
            "orders",
            config(3, &[("segment.bytes", "700"), ("retention.ms", "5000")]),
        )
        .unwrap();
        log.create_topic("users", TopicConfig::new(1)).unwrap();
        for p in 0..3 {
            log.append("orders", p, &values(0..50 + u64::from(p)))
                .unwrap();
        }
        log.flush().unwrap();
        before = (0..3)
            .map(|p| read_all(&log, "orders", p, 0))
            .collect::<Vec<_>>();
    }
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(log.topics(), vec!["orders".to_owned(), "users".to_owned()]);
    assert_eq!(log.partition_count("orders").unwrap(), 3);
    let c = log.topic_config("orders").unwrap();
    assert_eq!(c.segment_bytes, 700);
    assert_eq!(c.retention_ms, Some(5000));
    assert_eq!(log.end_offsets("orders").unwrap(), vec![50, 51, 52]);
    for p in 0..3 {
        assert_eq!(read_all(&log, "orders", p, 0), before[p as usize]);
    }
    assert_eq!(log.append("orders", 0, &values(50..60)).unwrap(), 50);
    assert_eq!(read_all(&log, "orders", 0, 0).len(), 60);
}

#[test]
fn index_damage_is_repaired_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path()).unwrap();
        log.create_topic(
            "t",
            config(
                1,
                &[("segment.bytes", "3000"), ("index.interval.bytes", "100")],
            ),
        )
        .unwrap();
        log.append("t", 0, &values(0..600)).unwrap();
    }
    let pdir = dir.path().join("t-0");
    let indexes = segment_files(&pdir, ".index");
    // Odd size, out-of-file entry, entries pointing at wrong records, deleted.
    fs::write(&indexes[0], [1u8, 2, 3]).unwrap();
    fs::write(&indexes[1], [0, 0, 0, 9, 0x7f, 0, 0, 0]).unwrap();
    let len = fs::metadata(&indexes[2]).unwrap().len() as usize;
    let mut bytes = fs::read(&indexes[2]).unwrap();
    bytes[len - 5] ^= 1; // last entry's relative offset
    fs::write(&indexes[2], bytes).unwrap();
    fs::remove_file(&indexes[3]).unwrap();
    // A middle entry off by one passes the cheap checks on open; the read
    // that lands on it notices and rebuilds.
    let mut bytes = fs::read(&indexes[4]).unwrap();
    assert!(bytes.len() >= 8 * 12);
    bytes[8 * 10 + 3] ^= 1;
    fs::write(&indexes[4], bytes).unwrap();
    for f in segment_files(&pdir, ".seginfo").iter().take(1) {
        fs::write(f, b"junk").unwrap();
    }
    let log = Log::open(dir.path()).unwrap();
    for offset in 0..600 {
        let b = log.read("t", 0, offset, 2, usize::MAX).unwrap();
        assert_eq!(b.offsets[0], offset);
    }
    assert_eq!(read_all(&log, "t", 0, 0).len(), 600);
}

#[test]
fn topics_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(250)] {
        assert!(
            matches!(
                log.create_topic(bad, TopicConfig::new(1)),
                Err(Error::Config(_))
            ),
            "{bad:?}"
        );
    }
    log.create_topic(&"x".repeat(249), TopicConfig::new(1))
        .unwrap();
    log.create_topic("a.b_c-D9", TopicConfig::new(4)).unwrap();
    assert!(matches!(
        log.create_topic("a.b_c-D9", TopicConfig::new(1)),
        Err(Error::TopicExists(_))
    ));
    assert!(matches!(
        log.create_topic("zero", TopicConfig::new(0)),
        Err(Error::Config(_))
    ));
    let mut weird = TopicConfig::new(1);
    weird.segment_bytes = 0;
    assert!(matches!(
        log.create_topic("w", weird),
        Err(Error::Config(_))
    ));
    assert_eq!(log.partition_count("a.b_c-D9").unwrap(), 4);
    assert!(matches!(
        log.partition_count("zzz"),
        Err(Error::UnknownTopic(_))
    ));
    assert!(matches!(
        log.topic_config("zzz"),
        Err(Error::UnknownTopic(_))
    ));
    assert_eq!(log.topics().len(), 2);
    assert!(matches!(
        log.append("zzz", 0, &values(0..1)),
        Err(Error::UnknownTopic(_))
    ));
}

#[test]
fn topic_config_keys() {
    let c = TopicConfig::new(3);
    assert_eq!(c.partitions, 3);
    assert_eq!(c.segment_bytes, 1 << 30);
    assert_eq!(c.retention_ms, None);
    assert_eq!(c.retention_bytes, None);
    assert!(c.cleanup_policy.delete && !c.cleanup_policy.compact);
    assert_eq!(c.delete_retention_ms, 86_400_000);
    assert_eq!(c.index_interval_bytes, 4096);

    let mut c = TopicConfig::new(1);
    c.set("cleanup.policy", "compact, delete").unwrap();
    assert!(c.cleanup_policy.delete && c.cleanup_policy.compact);
    c.set("cleanup.policy", "delete,compact").unwrap();
    c.set("cleanup.policy", "compact").unwrap();
    assert!(!c.cleanup_policy.delete && c.cleanup_policy.compact);
    c.set("retention.ms", "-1").unwrap();
    c.set("retention.bytes", "1048576").unwrap();
    c.set("segment.ms", "60000").unwrap();
    c.set("delete.retention.ms", "0").unwrap();
    c.set("index.interval.bytes", "0").unwrap();
    c.set("segment.bytes", "2048").unwrap();
    let mut again = TopicConfig::new(1);
    for (k, v) in c.to_properties() {
        again.set(&k, &v).unwrap();
    }
    assert_eq!(again, c);
    assert_eq!(c.retention_bytes, Some(1_048_576));

    for (k, v) in [
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("segment.bytes", "1"),
        ("segment.bytes", "4294967296"),
        ("cleanup.policy", "keep"),
        ("cleanup.policy", ""),
        ("segment.ms", "0"),
        ("index.interval.bytes", "-1"),
        ("delete.retention.ms", "-5"),
        ("no.such.key", "1"),
    ] {
        match c.set(k, v) {
            Err(Error::Config(msg)) => {
                assert!(msg.contains(k) && msg.contains(v), "{msg}");
            }
            other => panic!("{k}={v}: {other:?}"),
        }
    }
}

#[test]
fn same_process_open_shares_one_log() {
    let dir = tempfile::tempdir().unwrap();
    let a = Log::open(dir.path()).unwrap();
    let b = Log::open(
        dir.path()
            .join(".")
            .join("..")
            .join(dir.path().file_name().unwrap()),
    )
    .unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    a.create_topic("t", TopicConfig::new(1)).unwrap();
    assert_eq!(b.topics(), vec!["t".to_owned()]);
    drop((a, b));
    // Reopening after every handle is gone works (the lock was released).
    let c = Log::open(dir.path()).unwrap();
    assert_eq!(c.topics(), vec!["t".to_owned()]);
    let pid = fs::read_to_string(dir.path().join(".lock")).unwrap();
    assert_eq!(pid.trim(), std::process::id().to_string());
}

#[test]
fn concurrent_appends_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", config(4, &[("segment.bytes", "5000")]))
        .unwrap();
    std::thread::scope(|s| {
        for p in 0..4u32 {
            let log = &log;
            s.spawn(move || {
                for i in 0..50u64 {
                    log.append("t", p, &values(i * 10..i * 10 + 10)).unwrap();
                }
            });
            s.spawn(move || {
                let mut offset = 0;
                while offset < 500 {
                    let b = log.read("t", p, offset, 64, usize::MAX).unwrap();
                    for (i, o) in b.offsets.iter().enumerate() {
                        assert_eq!(*o, offset + i as u64);
                        assert_eq!(b.value(i).unwrap(), format!("value-{o:06}").as_bytes());
                    }
                    offset = b.next_offset;
                }
            });
        }
    });
    assert_eq!(log.end_offsets("t").unwrap(), vec![500; 4]);
}

/// Appends random batches with random rolls and reopens, checking against a model.
#[test]
fn randomized_against_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut model: Vec<Rec> = Vec::new();
    let mut log = Log::open(dir.path()).unwrap();
    log.create_topic(
        "r",
        config(
            1,
            &[("segment.bytes", "4096"), ("index.interval.bytes", "256")],
        ),
    )
    .unwrap();
    for round in 0..200 {
        let mut b = RecordBatchBuilder::new();
        for _ in 0..rand(40) {
            let key = (rand(4) > 0).then(|| vec![b'k'; rand(20) as usize]);
            let value = (rand(5) > 0).then(|| vec![rand(256) as u8; rand(300) as usize]);
            let ts = rand(1_000_000) as i64 - 500_000;
            b.push(ts, key.as_deref(), value.as_deref(), &[]);
            model.push((model.len() as u64, ts, key, value));
        }
        log.append("r", 0, &b).unwrap();
        match rand(10) {
            0 => log.roll("r", 0).unwrap(),
            1 => {
                drop(log);
                log = Log::open(dir.path()).unwrap();
            }
            _ => {}
        }
        if round % 20 == 0 {
            let start = rand(model.len() as u64 + 1);
            assert_eq!(read_all(&log, "r", 0, start), model[start as usize..]);
        }
    }
    assert_eq!(read_all(&log, "r", 0, 0), model);
}

#[test]
fn delete_topic_removes_data_and_every_groups_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let offsets = |topic: &str, offset: u64| strom_core::log::CommittedOffset {
        topic: topic.into(),
        partition: 0,
        offset,
        metadata: String::new(),
    };
    {
        let log = Log::open(dir.path()).unwrap();
        log.create_topic("gone", TopicConfig::new(2)).unwrap();
        log.create_topic("kept", TopicConfig::new(1)).unwrap();
        log.append("gone", 0, &values(0..5)).unwrap();
        log.append("kept", 0, &values(0..3)).unwrap();
        log.commit_offsets("g1", &[offsets("gone", 5), offsets("kept", 3)])
            .unwrap();
        log.commit_offsets("g2", &[offsets("gone", 2)]).unwrap();
        log.delete_topic("gone").unwrap();
        assert_eq!(log.topics(), vec!["kept".to_owned()]);
        assert!(matches!(
            log.end_offsets("gone"),
            Err(Error::UnknownTopic(_))
        ));
        assert!(matches!(
            log.delete_topic("gone"),
            Err(Error::UnknownTopic(_))
        ));
        assert!(!dir.path().join("gone-0").exists() && !dir.path().join("gone-1").exists());
        let topics = |g: &str| -> Vec<String> {
            log.committed_offsets(g)
                .unwrap()
                .into_iter()
                .map(|o| o.topic)
                .collect()
        };
        assert_eq!(topics("g1"), vec!["kept".to_owned()]);
        assert!(topics("g2").is_empty());
        // A topic created again under the name starts empty.
        log.create_topic("gone", TopicConfig::new(1)).unwrap();
        assert_eq!(log.end_offsets("gone").unwrap(), vec![0]);
    }
    // The deletion is durable, and a partition directory left by a delete
    // that crashed before removing it does not come back with the name.
    fs::create_dir_all(dir.path().join("stale-0")).unwrap();
    fs::write(dir.path().join("stale-0").join("junk"), b"x").unwrap();
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(log.topics(), vec!["gone".to_owned(), "kept".to_owned()]);
    assert_eq!(
        log.committed_offsets("g1").unwrap(),
        vec![offsets("kept", 3)]
    );
    assert_eq!(read_all(&log, "kept", 0, 0).len(), 3);
    log.create_topic("stale", TopicConfig::new(1)).unwrap();
    assert!(!dir.path().join("stale-0").join("junk").exists());
    assert_eq!(log.end_offsets("stale").unwrap(), vec![0]);
}

#[test]
fn offset_for_timestamp_finds_the_first_record_at_or_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", config(2, &[("segment.bytes", "300")]))
        .unwrap();
    // Timestamps out of order across several segments: 0, 70, 20, 90, 40, ...
    let mut b = RecordBatchBuilder::new();
    for i in 0..200i64 {
        let ts = (i * 37) % 211 * 10;
        b.push(ts, Some(b"k"), Some(format!("v{i}").as_bytes()), &[]);
    }
    log.append("t", 0, &b).unwrap();
    let records = read_all(&log, "t", 0, 0);
    assert!(segment_files(&dir.path().join("t-0"), ".log").len() > 3);
    for target in [-5, 0, 1, 10, 355, 1000, 2000, 2100, 2101, 5000] {
        let expected = records.iter().find(|r| r.1 >= target).map(|r| r.0);
        assert_eq!(
            log.offset_for_timestamp("t", 0, target).unwrap(),
            expected,
            "timestamp {target}"
        );
    }
    // An empty partition has no such record; an unknown one is an error.
    assert_eq!(log.offset_for_timestamp("t", 1, 0).unwrap(), None);
    assert!(log.offset_for_timestamp("t", 2, 0).is_err());
}
