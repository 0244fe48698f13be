//! Embedded log: crash recovery (torn tails), corruption detection, leftovers.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use strom_core::Error;
use strom_core::log::{Log, RecordBatchBuilder, TopicConfig};

/// Bytes per record frame: 36 of framing, a 3-byte key, a 12-byte value.
const REC: usize = 51;

fn values(range: std::ops::Range<u64>) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    for i in range {
        let value = format!("value-{i:06}");
        b.push(i as i64, Some(b"key"), Some(value.as_bytes()), &[]);
    }
    b
}

fn offsets(log: &Log, topic: &str) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset(topic, 0)?;
    loop {
        let b = log.read(topic, 0, offset, 100, usize::MAX)?;
        if b.is_empty() {
            return Ok(out);
        }
        for i in 0..b.len() {
            assert_eq!(
                b.value(i).unwrap(),
                format!("value-{:06}", b.offsets[i]).as_bytes()
            );
        }
        out.extend_from_slice(&b.offsets);
        offset = b.next_offset;
    }
}

/// A log with topic "t" (segments of at most 1000 bytes) holding offsets 0..n.
fn setup(dir: &Path, n: u64) {
    let log = Log::open(dir).unwrap();
    let mut c = TopicConfig::new(1);
    c.set("segment.bytes", "1000").unwrap();
    c.set("index.interval.bytes", "64").unwrap();
    log.create_topic("t", c).unwrap();
    for i in (0..n).step_by(5) {
        log.append("t", 0, &values(i..(i + 5).min(n))).unwrap();
    }
    log.flush().unwrap();
    drop(log);
    // As after a crash: no clean-close summary of the active segment, so
    // the next open scans it.
    let active = segments(dir).pop().unwrap();
    fs::remove_file(active.with_extension("seginfo")).unwrap();
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir.join("t-0"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

/// The base offset a segment file is named by.
fn base_offset(segment: &Path) -> u64 {
    segment
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[test]
fn a_record_cut_in_half_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 47);
    let active = segments(dir.path()).pop().unwrap();
    let len = fs::metadata(&active).unwrap().len();
    // Cut the last record after 19 of its bytes.
    OpenOptions::new()
        .write(true)
        .open(&active)
        .unwrap()
        .set_len(len - 32)
        .unwrap();
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(offsets(&log, "t").unwrap(), (0..46).collect::<Vec<_>>());
    assert_eq!(log.end_offset("t", 0).unwrap(), 46);
    assert_eq!(fs::metadata(&active).unwrap().len(), len - REC as u64);
    assert_eq!(log.append("t", 0, &values(46..50)).unwrap(), 46);
    assert_eq!(offsets(&log, "t").unwrap(), (0..50).collect::<Vec<_>>());
}

#[test]
fn a_cut_length_field_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 30);
    let active = segments(dir.path()).pop().unwrap();
    append_bytes(&active, &[0, 0]);
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(offsets(&log, "t").unwrap(), (0..30).collect::<Vec<_>>());
}

#[test]
fn garbage_and_zeros_after_the_last_record_are_truncated() {
    for tail in [
        vec![0u8; 4096],
        b"\x00\x00\x01\x00garbage that is not a frame".to_vec(),
        {
            let mut seed = 7u32;
            (0..10_000)
                .map(|_| {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (seed >> 16) as u8
                })
                .collect()
        },
    ] {
        let dir = tempfile::tempdir().unwrap();
        setup(dir.path(), 23);
        let active = segments(dir.path()).pop().unwrap();
        let len = fs::metadata(&active).unwrap().len();
        append_bytes(&active, &tail);
        let log = Log::open(dir.path()).unwrap();
        assert_eq!(offsets(&log, "t").unwrap(), (0..23).collect::<Vec<_>>());
        assert_eq!(fs::metadata(&active).unwrap().len(), len);
    }
}

#[test]
fn a_bad_record_followed_by_good_ones_in_the_active_segment_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 55);
    let active = segments(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&active).unwrap();
    assert!(bytes.len() >= 3 * REC);
    bytes[REC + 30] ^= 0xff; // inside the second record's value
    fs::write(&active, &bytes).unwrap();
    match Log::open(dir.path()) {
        Err(Error::CorruptLog {
            path,
            position,
            offset,
            ..
        }) => {
            assert_eq!(path, active);
            assert_eq!(position, REC as u64);
            assert!(offset.is_some());
        }
        other => panic!("{other:?}"),
    }
    // Nothing was dropped.
    assert_eq!(fs::read(&active).unwrap(), bytes);
}

#[test]
fn a_flipped_byte_in_a_closed_segment_fails_the_read_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 100);
    let closed = segments(dir.path())[1].clone();
    let mut bytes = fs::read(&closed).unwrap();
    bytes[3 * REC + 40] ^= 0x01; // the fourth record of the segment
    fs::write(&closed, &bytes).unwrap();
    let log = Log::open(dir.path()).unwrap();
    let base = base_offset(&closed);
    // Records before it read fine.
    assert_eq!(log.read("t", 0, base, 3, usize::MAX).unwrap().len(), 3);
    match log.read("t", 0, base, 10, usize::MAX) {
        Err(Error::CorruptLog {
            path,
            position,
            offset,
            ..
        }) => {
            assert_eq!(path, closed);
            assert_eq!(position, 3 * REC as u64);
            assert_eq!(offset, Some(base + 3));
        }
        other => panic!("{other:?}"),
    }
    let msg = log.read("t", 0, base + 3, 1, 1).unwrap_err().to_string();
    assert!(msg.contains(&closed.display().to_string()), "{msg}");
}

/// A read checks its frames' CRCs a few at a time: a damaged frame is found
/// wherever it falls among them, and the frames before it still read.
#[test]
fn a_damaged_frame_is_found_at_any_place_in_a_read() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 100);
    let closed = segments(dir.path())[1].clone();
    let base = base_offset(&closed);
    let good = fs::read(&closed).unwrap();
    let in_segment = (good.len() / REC) as u64;
    // A byte of the value, then one of the key's length (a frame that no
    // longer parses is reported as damaged, not as malformed).
    for (k, at) in (0..7).map(|k| (k, k * REC + 40)).chain([(4, 4 * REC + 26)]) {
        let mut bytes = good.clone();
        bytes[at] ^= 0x10;
        fs::write(&closed, &bytes).unwrap();
        let log = Log::open(dir.path()).unwrap();
        let before = log.read("t", 0, base, k, usize::MAX).unwrap();
        assert_eq!(before.offsets, (base..base + k as u64).collect::<Vec<_>>());
        // The damaged frame last in the read, or followed by others.
        let last = log.read("t", 0, base, k + 1, usize::MAX).unwrap_err();
        assert!(matches!(last, Error::CorruptLog { position, .. } if position == (k * REC) as u64));
        match log.read("t", 0, base, in_segment as usize, usize::MAX) {
            Err(Error::CorruptLog {
                path,
                position,
                offset,
                reason,
            }) => {
                assert_eq!(path, closed);
                assert_eq!(position, (k * REC) as u64, "byte {at}");
                assert_eq!(offset, Some(base + k as u64));
                assert_eq!(reason, "CRC mismatch");
            }
            other => panic!("byte {at}: {other:?}"),
        }
    }
}

/// The frame format is unchanged: each frame's CRC is the `crc32c` crate's
/// CRC-32C of the bytes after the offset, then the offset.
#[test]
fn frames_carry_the_crc32c_of_their_body_then_offset() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 100);
    let mut frames = 0;
    for seg in segments(dir.path()) {
        let bytes = fs::read(&seg).unwrap();
        let mut at = 0;
        while at < bytes.len() {
            let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let frame = &bytes[at..at + 4 + len];
            let stored = u32::from_be_bytes(frame[4..8].try_into().unwrap());
            let body = crc32c::crc32c(&frame[16..]);
            assert_eq!(stored, crc32c::crc32c_append(body, &frame[8..16]));
            frames += 1;
            at += 4 + len;
        }
    }
    assert_eq!(frames, 100);
}

#[test]
fn a_closed_segment_rescanned_on_open_reports_corruption() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 100);
    let closed = segments(dir.path())[0].clone();
    let mut bytes = fs::read(&closed).unwrap();
    bytes[100] ^= 0x40;
    fs::write(&closed, &bytes).unwrap();
    // Without its index and summary the segment is scanned on open.
    fs::remove_file(closed.with_extension("index")).unwrap();
    match Log::open(dir.path()) {
        Err(Error::CorruptLog { path, .. }) => assert_eq!(path, closed),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_truncated_closed_segment_is_corruption_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 100);
    let closed = segments(dir.path())[0].clone();
    let len = fs::metadata(&closed).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&closed)
        .unwrap()
        .set_len(len - 10)
        .unwrap();
    match Log::open(dir.path()) {
        Err(Error::CorruptLog { path, .. }) => assert_eq!(path, closed),
        other => panic!("{other:?}"),
    }
}

#[test]
fn leftovers_of_interrupted_writes_are_removed_and_originals_kept() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 60);
    let segs = segments(dir.path());
    let pdir = dir.path().join("t-0");
    let cleaned = pdir.join("00000000000000000000.log.cleaned");
    fs::write(&cleaned, b"half-written compaction output").unwrap();
    let stray_index = pdir.join("00000000000000099999.index");
    fs::write(&stray_index, [0u8; 16]).unwrap();
    let tmp = dir.path().join(".topics").join(".0123456789abcdef.tmp");
    fs::write(&tmp, b"partitions=9").unwrap();
    let group_tmp = dir.path().join(".groups").join(".0123456789abcdef.tmp");
    fs::write(&group_tmp, b"junk").unwrap();
    // Summaries are derived data too.
    fs::remove_file(segs[0].with_extension("seginfo")).unwrap();
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(offsets(&log, "t").unwrap(), (0..60).collect::<Vec<_>>());
    assert!(!cleaned.exists() && !stray_index.exists() && !tmp.exists() && !group_tmp.exists());
    assert!(segs[0].with_extension("seginfo").exists());
    assert_eq!(log.topics(), vec!["t".to_owned()]);
}

#[test]
fn flushed_data_survives_reopen_and_more_appends() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 10);
    {
        let log = Log::open(dir.path()).unwrap();
        log.append("t", 0, &values(10..20)).unwrap();
        log.flush().unwrap();
        log.flush().unwrap();
    }
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(offsets(&log, "t").unwrap(), (0..20).collect::<Vec<_>>());
}

#[test]
fn a_corrupt_topic_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1);
    let conf = dir.path().join(".topics").join("t.conf");
    assert!(conf.exists());
    fs::write(&conf, "partitions=1\nsegment.bytes=lots\n").unwrap();
    match Log::open(dir.path()) {
        Err(Error::CorruptLog { path, reason, .. }) => {
            assert_eq!(path, conf);
            assert!(reason.contains("segment.bytes"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cleanly_closed_active_segment_is_trusted_and_still_checked_on_read() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 47);
    {
        let log = Log::open(dir.path()).unwrap();
        log.append("t", 0, &values(47..50)).unwrap();
    }
    let active = segments(dir.path()).pop().unwrap();
    let summary = active.with_extension("seginfo");
    assert!(summary.exists(), "a clean close leaves a summary");
    {
        let log = Log::open(dir.path()).unwrap();
        assert!(!summary.exists(), "it holds only until the next append");
        assert_eq!(offsets(&log, "t").unwrap(), (0..50).collect::<Vec<_>>());
        assert_eq!(log.append("t", 0, &values(50..53)).unwrap(), 50);
    }
    let log = Log::open(dir.path()).unwrap();
    assert_eq!(offsets(&log, "t").unwrap(), (0..53).collect::<Vec<_>>());
    drop(log);
    // Trusted on open, a record changed in place is still caught by its CRC.
    let mut bytes = fs::read(&active).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&active, &bytes).unwrap();
    let log = Log::open(dir.path()).unwrap();
    assert!(matches!(offsets(&log, "t"), Err(Error::CorruptLog { .. })));
}
