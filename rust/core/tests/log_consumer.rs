//! Embedded log: group offsets, consumers, waiting for appends, the lock file.

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strom_core::Error;
use strom_core::log::{
    CommittedOffset, Consumer, Log, OffsetReset, RecordBatchBuilder, TopicConfig,
};

fn values(partition: u32, range: std::ops::Range<u64>) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    for i in range {
        let value = format!("p{partition}-{i}");
        b.push(i as i64, Some(b"k"), Some(value.as_bytes()), &[]);
    }
    b
}

fn committed(topic: &str, partition: u32, offset: u64, metadata: &str) -> CommittedOffset {
    CommittedOffset {
        topic: topic.into(),
        partition,
        offset,
        metadata: metadata.into(),
    }
}

fn topics(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn handles_are_shareable_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Log>();
    send_sync::<Arc<Log>>();
    send::<Consumer>();
    send::<RecordBatchBuilder>();
}

/// A commit that changes nothing leaves the group's file alone (no rewrite,
/// no fsync); one that changes an offset or its metadata replaces it.
#[test]
fn an_unchanged_commit_writes_nothing() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("a", TopicConfig::new(2)).unwrap();
    let file = || {
        let groups = std::fs::read_dir(dir.path().join(".groups")).unwrap();
        let entries: Vec<_> = groups.map(|e| e.unwrap().path()).collect();
        assert_eq!(entries.len(), 1, "{entries:?}");
        std::fs::metadata(&entries[0]).unwrap().ino()
    };
    log.commit_offsets(
        "g",
        &[committed("a", 0, 5, "t=1"), committed("a", 1, 2, "")],
    )
    .unwrap();
    let first = file();
    log.commit_offsets("g", &[committed("a", 0, 5, "t=1")])
        .unwrap();
    log.commit_offsets("g", &[]).unwrap();
    assert_eq!(file(), first);
    log.commit_offsets("g", &[committed("a", 0, 5, "t=2")])
        .unwrap();
    let second = file();
    assert_ne!(second, first);
    log.commit_offsets("g", &[committed("a", 1, 3, "")])
        .unwrap();
    assert_ne!(file(), second);
    let offsets: Vec<_> = log
        .committed_offsets("g")
        .unwrap()
        .into_iter()
        .map(|c| (c.partition, c.offset, c.metadata))
        .collect();
    assert_eq!(
        offsets,
        vec![(0, 5, "t=2".to_owned()), (1, 3, String::new())]
    );
}

#[test]
fn committed_offsets_merge_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let weird_metadata = "stream-time=1700000000000\n=\0\u{1F600}";
    {
        let log = Log::open(dir.path()).unwrap();
        log.create_topic("a", TopicConfig::new(2)).unwrap();
        log.create_topic("b", TopicConfig::new(1)).unwrap();
        assert!(log.committed_offsets("nobody").unwrap().is_empty());
        log.commit_offsets("g", &[committed("a", 0, 5, ""), committed("a", 1, 7, "x")])
            .unwrap();
        log.commit_offsets(
            "g",
            &[
                committed("b", 0, 1, weird_metadata),
                committed("a", 0, 6, "y"),
            ],
        )
        .unwrap();
        log.commit_offsets("other/group with spaces", &[committed("a", 1, 1, "")])
            .unwrap();
        assert!(matches!(
            log.commit_offsets("g", &[committed("zz", 0, 1, "")]),
            Err(Error::UnknownTopic(_))
        ));
        assert!(matches!(
            log.commit_offsets("g", &[committed("a", 2, 1, "")]),
            Err(Error::UnknownPartition { .. })
        ));
        assert!(matches!(
            log.commit_offsets("", &[committed("a", 0, 1, "")]),
            Err(Error::Config(_))
        ));
    }
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(
        log.committed_offsets("g").unwrap(),
        vec![
            committed("a", 0, 6, "y"),
            committed("a", 1, 7, "x"),
            committed("b", 0, 1, weird_metadata),
        ]
    );
    assert_eq!(
        log.committed_offsets("other/group with spaces").unwrap(),
        vec![committed("a", 1, 1, "")]
    );
}

#[test]
fn a_corrupt_offsets_file_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = Log::open(dir.path()).unwrap();
        log.create_topic("a", TopicConfig::new(1)).unwrap();
        log.commit_offsets("g", &[committed("a", 0, 5, "meta")])
            .unwrap();
    }
    let file = dir.path().join(".groups").join("g.offsets");
    let mut bytes = fs::read(&file).unwrap();
    let n = bytes.len();
    bytes[n - 10] ^= 0x01;
    fs::write(&file, &bytes).unwrap();
    let log = Log::open(dir.path()).unwrap();
    match log.committed_offsets("g") {
        Err(Error::CorruptLog { path, .. }) => assert_eq!(path, file),
        other => panic!("{other:?}"),
    }
    let err = Consumer::new(
        Arc::clone(&log),
        "g",
        &topics(&["a"]),
        OffsetReset::Earliest,
    )
    .unwrap_err();
    assert!(err.to_string().contains("g.offsets"), "{err}");
}

#[test]
fn initial_positions_follow_commits_and_reset_policy() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(2)).unwrap();
    log.append("t", 0, &values(0, 0..10)).unwrap();
    log.append("t", 1, &values(1, 0..4)).unwrap();

    let c = Consumer::new(
        Arc::clone(&log),
        "g",
        &topics(&["t"]),
        OffsetReset::Earliest,
    )
    .unwrap();
    assert_eq!(c.group_id(), "g");
    assert_eq!(
        c.assignment(),
        vec![("t".to_owned(), 0), ("t".to_owned(), 1)]
    );
    assert_eq!(
        (c.position("t", 0).unwrap(), c.position("t", 1).unwrap()),
        (0, 0)
    );
    let c = Consumer::new(Arc::clone(&log), "g", &topics(&["t"]), OffsetReset::Latest).unwrap();
    assert_eq!(
        (c.position("t", 0).unwrap(), c.position("t", 1).unwrap()),
        (10, 4)
    );
    match Consumer::new(Arc::clone(&log), "g", &topics(&["t"]), OffsetReset::None) {
        Err(Error::Config(msg)) => assert!(msg.contains("no committed offset"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Consumer::new(Arc::clone(&log), "g", &topics(&["t", "missing"]), OffsetReset::Earliest),
        Err(Error::UnknownTopic(t)) if t == "missing"
    ));

    // A committed offset in range wins; one past the end is reset.
    log.commit_offsets("g", &[committed("t", 0, 3, ""), committed("t", 1, 99, "")])
        .unwrap();
    let c = Consumer::new(Arc::clone(&log), "g", &topics(&["t"]), OffsetReset::Latest).unwrap();
    assert_eq!(
        (c.position("t", 0).unwrap(), c.position("t", 1).unwrap()),
        (3, 4)
    );
    assert!(matches!(
        Consumer::new(Arc::clone(&log), "g", &topics(&["t"]), OffsetReset::None),
        Err(Error::OffsetOutOfRange {
            offset: 99,
            partition: 1,
            ..
        })
    ));
    log.commit_offsets("g", &[committed("t", 1, 4, "")])
        .unwrap();
    let c = Consumer::new(Arc::clone(&log), "g", &topics(&["t"]), OffsetReset::None).unwrap();
    assert_eq!(
        (c.position("t", 0).unwrap(), c.position("t", 1).unwrap()),
        (3, 4)
    );
}

#[test]
fn poll_commit_seek() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(1)).unwrap();
    log.create_topic("u", TopicConfig::new(1)).unwrap();
    log.append("t", 0, &values(0, 0..10)).unwrap();
    let mut c = Consumer::new(
        Arc::clone(&log),
        "g",
        &topics(&["t", "u", "t"]),
        OffsetReset::Earliest,
    )
    .unwrap();
    assert_eq!(
        c.assignment().len(),
        2,
        "a topic listed twice is assigned once"
    );
    let polled = c.poll(4, Duration::ZERO).unwrap();
    assert_eq!(polled.len(), 1);
    assert_eq!((polled[0].topic.as_str(), polled[0].partition), ("t", 0));
    assert_eq!(polled[0].batch.offsets, vec![0, 1, 2, 3]);
    assert_eq!(polled[0].batch.value(0), Some(&b"p0-0"[..]));
    assert_eq!(c.position("t", 0).unwrap(), 4);
    c.commit().unwrap();
    assert_eq!(
        c.committed().unwrap(),
        vec![committed("t", 0, 4, ""), committed("u", 0, 0, "")]
    );
    c.commit_offsets(&[committed("t", 0, 2, "st=5")]).unwrap();
    assert_eq!(
        log.committed_offsets("g").unwrap()[0],
        committed("t", 0, 2, "st=5")
    );

    c.seek("t", 0, 8).unwrap();
    assert_eq!(
        c.poll(100, Duration::ZERO).unwrap()[0].batch.offsets,
        vec![8, 9]
    );
    assert!(c.poll(100, Duration::ZERO).unwrap().is_empty());
    assert!(matches!(
        c.seek("t", 1, 0),
        Err(Error::UnknownPartition { .. })
    ));
    assert!(matches!(c.seek("v", 0, 0), Err(Error::Config(_))));
    assert!(matches!(c.position("v", 0), Err(Error::Config(_))));
    // Past the end: reset on the next poll.
    c.seek("t", 0, 50).unwrap();
    assert_eq!(c.poll(100, Duration::ZERO).unwrap()[0].batch.offsets[0], 0);
}

#[test]
fn poll_visits_partitions_round_robin() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(3)).unwrap();
    for p in 0..3 {
        log.append("t", p, &values(p, 0..100)).unwrap();
    }
    let mut c = Consumer::new(
        Arc::clone(&log),
        "g",
        &topics(&["t"]),
        OffsetReset::Earliest,
    )
    .unwrap();
    let mut firsts = Vec::new();
    let mut per_partition = [0usize; 3];
    for _ in 0..6 {
        let polled = c.poll(10, Duration::ZERO).unwrap();
        let total: usize = polled.iter().map(|b| b.batch.len()).sum();
        assert_eq!(total, 10);
        firsts.push(polled[0].partition);
        for b in &polled {
            per_partition[b.partition as usize] += b.batch.len();
            assert_eq!(
                b.batch.value(0).unwrap(),
                format!("p{}-{}", b.partition, b.batch.offsets[0]).as_bytes()
            );
        }
    }
    assert_eq!(firsts, vec![0, 1, 2, 0, 1, 2]);
    assert_eq!(per_partition, [20, 20, 20]);
    // When records are scarce, one poll returns a batch per partition.
    let mut c = Consumer::new(Arc::clone(&log), "h", &topics(&["t"]), OffsetReset::Latest).unwrap();
    for p in 0..3 {
        log.append("t", p, &values(p, 100..102)).unwrap();
    }
    let polled = c.poll(100, Duration::ZERO).unwrap();
    assert_eq!(polled.len(), 3);
    assert!(polled.iter().all(|b| b.batch.offsets == vec![100, 101]));
}

#[test]
fn a_position_deleted_by_retention_is_reset() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    let mut config = TopicConfig::new(1);
    config.set("segment.bytes", "200").unwrap();
    config.set("retention.ms", "10").unwrap();
    log.create_topic("t", config).unwrap();
    log.append("t", 0, &values(0, 0..50)).unwrap();
    let mut earliest = Consumer::new(
        Arc::clone(&log),
        "e",
        &topics(&["t"]),
        OffsetReset::Earliest,
    )
    .unwrap();
    let mut latest =
        Consumer::new(Arc::clone(&log), "l", &topics(&["t"]), OffsetReset::Latest).unwrap();
    latest.seek("t", 0, 0).unwrap();
    log.commit_offsets("n", &[committed("t", 0, 0, "")])
        .unwrap();
    let mut none =
        Consumer::new(Arc::clone(&log), "n", &topics(&["t"]), OffsetReset::None).unwrap();
    assert!(log.enforce_retention(1000).unwrap() > 0);
    let start = log.log_start_offset("t", 0).unwrap();
    assert!(start > 0);
    assert_eq!(
        earliest.poll(1, Duration::ZERO).unwrap()[0].batch.offsets,
        vec![start]
    );
    assert!(latest.poll(1, Duration::ZERO).unwrap().is_empty());
    assert_eq!(latest.position("t", 0).unwrap(), 50);
    assert!(matches!(
        none.poll(1, Duration::ZERO),
        Err(Error::OffsetOutOfRange { offset: 0, .. })
    ));
}

#[test]
fn a_blocking_poll_wakes_on_append() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(2)).unwrap();
    let mut c = Consumer::new(Arc::clone(&log), "g", &topics(&["t"]), OffsetReset::Latest).unwrap();
    let seq = log.append_sequence();
    let started = Instant::now();
    let polled = std::thread::scope(|s| {
        let poller = s.spawn(|| c.poll(10, Duration::from_secs(60)).unwrap());
        // Append only once the poller is blocked: it then waits on the counter.
        let waited = log.wait_for_appends(seq, Duration::from_millis(50));
        assert_eq!(waited, seq, "nothing appended yet");
        log.append("t", 1, &values(1, 0..3)).unwrap();
        poller.join().unwrap()
    });
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(polled.len(), 1);
    assert_eq!(polled[0].partition, 1);
    assert_eq!(polled[0].batch.offsets, vec![0, 1, 2]);
    assert_eq!(log.append_sequence(), seq + 1);

    // The wait itself: returns at once for a stale counter, times out otherwise.
    assert_eq!(log.wait_for_appends(seq, Duration::from_secs(60)), seq + 1);
    let t = Instant::now();
    assert_eq!(
        log.wait_for_appends(seq + 1, Duration::from_millis(30)),
        seq + 1
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    // An empty poll waits out its timeout.
    let t = Instant::now();
    assert!(c.poll(10, Duration::from_millis(30)).unwrap().is_empty());
    assert!(t.elapsed() >= Duration::from_millis(30));
}

#[test]
fn many_waiters_all_wake() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(1)).unwrap();
    let seq = log.append_sequence();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..8 {
            let (log, tx) = (&log, tx.clone());
            s.spawn(move || {
                tx.send(log.wait_for_appends(seq, Duration::from_secs(60)))
                    .unwrap();
            });
        }
        log.append("t", 0, &values(0, 0..1)).unwrap();
    });
    drop(tx);
    assert!(rx.iter().all(|v| v > seq));
}

/// The child half of `another_process_holding_the_lock_is_refused`: holds the
/// log open until its stdin closes.
#[test]
fn lock_holder_child() {
    let Ok(path) = std::env::var("STROM_LOG_LOCK_CHILD") else {
        return;
    };
    let _log = Log::open(&path).unwrap();
    println!("STROM-LOCKED");
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
}

#[test]
fn another_process_holding_the_lock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lock_holder_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("STROM_LOG_LOCK_CHILD", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("STROM-LOCKED")),
        "the child did not open the log"
    );
    match Log::open(dir.path()) {
        Err(Error::LogInUse { path, holder }) => {
            assert_eq!(path, dir.path().canonicalize().unwrap());
            assert!(holder.contains(&child.id().to_string()), "{holder}");
        }
        other => panic!("{other:?}"),
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    // Free again once the other process is gone.
    let log = Log::open(dir.path()).unwrap();
    log.create_topic("t", TopicConfig::new(1)).unwrap();
}
