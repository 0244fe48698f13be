//! The persistent key-value store: commit markers and reopen, torn tails,
//! corruption, compaction and crashes during it, the directory lock, and a
//! seeded random comparison against a model across commits and reopens.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use strom_core::Error;
use strom_core::store::{KeyValueBytes, PersistentKeyValueStore, PersistentStoreOptions};
use tempfile::TempDir;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn opts() -> PersistentStoreOptions {
    PersistentStoreOptions::default()
}

/// Small segments and no automatic compaction.
fn small() -> PersistentStoreOptions {
    PersistentStoreOptions {
        segment_bytes: 1000,
        write_buffer_bytes: 300,
        compact_min_bytes: u64::MAX,
        ..opts()
    }
}

fn open(dir: &Path, o: PersistentStoreOptions) -> (PersistentKeyValueStore, Option<Vec<u8>>) {
    PersistentKeyValueStore::open(dir, o).unwrap()
}

fn open_err(dir: &Path, o: PersistentStoreOptions) -> Error {
    PersistentKeyValueStore::open(dir, o).unwrap_err()
}

fn contents(s: &PersistentKeyValueStore) -> Model {
    s.range(None, None, false).unwrap().into_iter().collect()
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:05}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    format!("value-{i}-{round}-{}", "x".repeat((i % 7) as usize)).into_bytes()
}

/// Puts keys `range` with values of `round` into the store and the model.
fn fill(s: &mut PersistentKeyValueStore, m: &mut Model, range: std::ops::Range<u32>, round: u32) {
    for i in range {
        s.put(&key(i), Some(&value(i, round))).unwrap();
        m.insert(key(i), value(i, round));
    }
}

fn flip_byte(path: &Path, position: u64) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, position).unwrap();
    b[0] ^= 0x40;
    f.write_all_at(&b, position).unwrap();
}

fn truncate_by(path: &Path, bytes: u64) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len - bytes).unwrap();
}

#[test]
fn reopen_after_commit_equals_the_model() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    {
        let (mut s, meta) = open(dir.path(), small());
        assert_eq!(meta, None);
        fill(&mut s, &mut m, 0..200, 0);
        fill(&mut s, &mut m, 50..120, 1);
        for i in (0..200).step_by(3) {
            s.put(&key(i), None).unwrap();
            m.remove(&key(i));
        }
        s.commit(b"offset=42").unwrap();
        assert_eq!(s.committed_metadata(), Some(&b"offset=42"[..]));
        assert!(!s.has_uncommitted_writes());
        assert!(segments(dir.path()).len() > 5, "small segments roll");
    }
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"offset=42"[..]));
    assert_eq!(contents(&s), m);
    assert_eq!(s.approximate_num_entries(), m.len());
    assert_eq!(s.get(&key(52)).unwrap(), Some(value(52, 1)));
    assert_eq!(s.get(&key(3)).unwrap(), None);
    // Reopening with other options reads the same files.
    drop(s);
    let (s, _) = open(dir.path(), opts());
    assert_eq!(contents(&s), m);
}

#[test]
fn writes_after_the_last_commit_are_gone_after_reopen() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    {
        let (mut s, _) = open(dir.path(), small());
        fill(&mut s, &mut m, 0..50, 0);
        s.commit(b"first").unwrap();
        fill(&mut s, &mut m.clone(), 25..150, 1); // overwrites and new keys
        s.put(&key(1), None).unwrap();
        s.flush().unwrap(); // durable bytes, but no commit marker
        assert!(s.has_uncommitted_writes());
        assert_eq!(s.committed_metadata(), Some(&b"first"[..]));
    }
    let (mut s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"first"[..]));
    assert_eq!(contents(&s), m);
    // The store goes on from there: new writes, commit, reopen.
    fill(&mut s, &mut m, 40..60, 2);
    s.commit(b"second").unwrap();
    drop(s);
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"second"[..]));
    assert_eq!(contents(&s), m);
}

#[test]
fn a_store_without_commit_opens_empty() {
    let dir = TempDir::new().unwrap();
    {
        let (mut s, _) = open(dir.path(), small());
        fill(&mut s, &mut Model::new(), 0..100, 0);
        s.flush().unwrap();
    }
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta, None);
    assert_eq!(s.approximate_num_entries(), 0);
    assert!(contents(&s).is_empty());
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(s.size_on_disk(), 0);
}

#[test]
fn empty_metadata_is_a_commit() {
    let dir = TempDir::new().unwrap();
    {
        let (mut s, _) = open(dir.path(), opts());
        s.put(b"k", Some(b"v")).unwrap();
        s.commit(b"").unwrap();
    }
    let (s, meta) = open(dir.path(), opts());
    assert_eq!(meta, Some(Vec::new()));
    assert_eq!(s.get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// A store whose last commit is followed by uncommitted, flushed writes in
/// the last segment. Returns the model as of the commit.
fn committed_then_dirty(dir: &Path) -> Model {
    let mut m = Model::new();
    let (mut s, _) = open(dir, small());
    fill(&mut s, &mut m, 0..40, 0);
    s.commit(b"c1").unwrap();
    fill(&mut s, &mut m.clone(), 0..3, 1);
    s.flush().unwrap();
    m
}

#[test]
fn torn_tail_cut_mid_frame_opens_as_of_the_last_commit() {
    let dir = TempDir::new().unwrap();
    let m = committed_then_dirty(dir.path());
    let last = segments(dir.path()).pop().unwrap();
    truncate_by(&last, 7);
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"c1"[..]));
    assert_eq!(contents(&s), m);
}

#[test]
fn a_cut_commit_marker_falls_back_to_the_commit_before() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    {
        let (mut s, _) = open(dir.path(), small());
        fill(&mut s, &mut m, 0..10, 0);
        s.commit(b"c1").unwrap();
        fill(&mut s, &mut m.clone(), 0..2, 1);
        s.commit(b"c2").unwrap();
    }
    // The c2 marker is the last frame: cutting one byte tears it.
    truncate_by(&segments(dir.path()).pop().unwrap(), 1);
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"c1"[..]));
    assert_eq!(contents(&s), m);
}

#[test]
fn garbage_after_the_last_commit_is_cut_away() {
    for garbage in [
        vec![0u8; 5000],
        (0..3000u32).map(|i| (i * 7919) as u8).collect(),
    ] {
        let dir = TempDir::new().unwrap();
        let m = committed_then_dirty(dir.path());
        let last = segments(dir.path()).pop().unwrap();
        let before = fs::metadata(&last).unwrap().len();
        OpenOptions::new()
            .append(true)
            .open(&last)
            .unwrap()
            .write_all(&garbage)
            .unwrap();
        let (mut s, meta) = open(dir.path(), small());
        assert_eq!(meta.as_deref(), Some(&b"c1"[..]));
        assert_eq!(contents(&s), m);
        assert!(fs::metadata(&last).unwrap().len() < before, "truncated");
        // Appends continue cleanly after the cut.
        s.put(b"after", Some(b"cut")).unwrap();
        s.commit(b"c2").unwrap();
        drop(s);
        let (s, meta) = open(dir.path(), small());
        assert_eq!(meta.as_deref(), Some(&b"c2"[..]));
        assert_eq!(s.get(b"after").unwrap(), Some(b"cut".to_vec()));
        assert_eq!(s.approximate_num_entries(), m.len() + 1);
    }
}

#[test]
fn uncommitted_segments_after_the_last_commit_are_removed() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    {
        let (mut s, _) = open(dir.path(), small());
        fill(&mut s, &mut m, 0..10, 0);
        s.commit(b"c1").unwrap();
        fill(&mut s, &mut m.clone(), 10..200, 0);
        s.flush().unwrap();
    }
    let n = segments(dir.path()).len();
    // A hole in the middle of the uncommitted part: still a tail.
    let mid = &segments(dir.path())[n / 2];
    flip_byte(mid, 10);
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"c1"[..]));
    assert_eq!(contents(&s), m);
    assert!(segments(dir.path()).len() < n);
}

#[test]
fn a_flipped_byte_in_committed_data_is_corrupt_log() {
    let dir = TempDir::new().unwrap();
    {
        let (mut s, _) = open(dir.path(), small());
        fill(&mut s, &mut Model::new(), 0..100, 0);
        s.commit(b"c1").unwrap();
        fill(&mut s, &mut Model::new(), 0..10, 1);
        s.commit(b"c2").unwrap();
    }
    let segs = segments(dir.path());
    // Segment 2's first frame: a value byte (frame header 36 bytes, key 9).
    let target = &segs[2];
    flip_byte(target, 28 + 9 + 4 + 2);
    match open_err(dir.path(), small()) {
        Error::CorruptLog {
            path,
            position,
            offset,
            reason,
        } => {
            assert_eq!(&path, target);
            assert_eq!(position, 0);
            let name = target.file_stem().unwrap().to_str().unwrap();
            assert_eq!(
                offset,
                Some(name.parse().unwrap()),
                "the frame's sequence number"
            );
            assert!(reason.contains("CRC"), "{reason}");
        }
        e => panic!("expected CorruptLog, got {e}"),
    }
    // Nothing was dropped: the bytes are still there for a human to look at.
    assert_eq!(segments(dir.path()), segs);
}

#[test]
fn corruption_in_the_segment_of_the_last_commit_is_corrupt_log() {
    let dir = TempDir::new().unwrap();
    {
        let (mut s, _) = open(dir.path(), opts());
        fill(&mut s, &mut Model::new(), 0..20, 0);
        s.commit(b"c1").unwrap();
    }
    let seg = segments(dir.path()).pop().unwrap();
    // The length field of the third frame: frame boundaries after it are lost.
    let first = 4 + u64::from(u32::from_be_bytes(
        fs::read(&seg).unwrap()[..4].try_into().unwrap(),
    ));
    flip_byte(&seg, first + 1);
    let err = open_err(dir.path(), opts());
    let msg = err.to_string();
    assert!(
        matches!(err, Error::CorruptLog { position, .. } if position == first),
        "{msg}"
    );
    assert!(
        msg.contains(seg.file_name().unwrap().to_str().unwrap()),
        "{msg}"
    );
}

#[test]
fn a_missing_segment_is_corrupt_log() {
    let dir = TempDir::new().unwrap();
    {
        let (mut s, _) = open(dir.path(), small());
        fill(&mut s, &mut Model::new(), 0..100, 0);
        s.commit(b"c1").unwrap();
    }
    let segs = segments(dir.path());
    fs::remove_file(&segs[1]).unwrap();
    let err = open_err(dir.path(), small());
    assert!(
        matches!(&err, Error::CorruptLog { path, .. } if *path == segs[2]),
        "{err}"
    );
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn a_missing_first_segment_is_corrupt_log_with_or_without_compaction() {
    for compacted in [false, true] {
        let dir = TempDir::new().unwrap();
        {
            let (mut s, _) = open(dir.path(), small());
            fill(&mut s, &mut Model::new(), 0..100, 0);
            s.commit(b"c1").unwrap();
            if compacted {
                s.compact().unwrap();
            }
        }
        let segs = segments(dir.path());
        assert!(segs.len() > 2);
        fs::remove_file(&segs[0]).unwrap();
        let err = open_err(dir.path(), small());
        assert!(
            matches!(&err, Error::CorruptLog { path, position: 0, .. } if *path == segs[1]),
            "compacted: {compacted}: {err}"
        );
    }
}

#[test]
fn corruption_found_by_a_read_is_corrupt_log() {
    let dir = TempDir::new().unwrap();
    let (mut s, _) = open(dir.path(), small());
    fill(&mut s, &mut Model::new(), 0..100, 0);
    s.commit(b"c1").unwrap();
    let first = &segments(dir.path())[0];
    flip_byte(first, 40);
    let err = s.get(&key(0)).unwrap_err();
    assert!(
        matches!(&err, Error::CorruptLog { path, position: 0, offset: Some(0), .. } if path == first),
        "{err}"
    );
    assert!(s.range(None, None, false).is_err());
    assert_eq!(s.get(&key(99)).unwrap(), Some(value(99, 0)));
}

fn churn(s: &mut PersistentKeyValueStore, m: &mut Model, rounds: u32) {
    for round in 0..rounds {
        fill(s, m, 0..100, round);
        for i in (round % 5..100).step_by(5) {
            s.put(&key(i), None).unwrap();
            m.remove(&key(i));
        }
    }
}

#[test]
fn compaction_keeps_exactly_the_live_set_and_survives_reopen() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    let auto = PersistentStoreOptions {
        compact_min_bytes: 20_000,
        compact_dead_ratio: 0.5,
        ..small()
    };
    let (mut s, _) = open(dir.path(), auto.clone());
    churn(&mut s, &mut m, 10);
    let before = s.size_on_disk();
    let segments_before = segments(dir.path()).len();
    s.commit(b"c1").unwrap(); // dead > 50% and > 20 kB: compacts
    assert!(
        s.size_on_disk() < before / 3,
        "{} -> {}",
        before,
        s.size_on_disk()
    );
    assert!(segments(dir.path()).len() < segments_before);
    assert_eq!(contents(&s), m);
    assert!(dir.path().join("manifest").exists());
    // Writes after compaction go on in the new segments.
    fill(&mut s, &mut m, 1000..1010, 0);
    s.commit(b"c2").unwrap();
    drop(s);
    let (mut s, meta) = open(dir.path(), auto);
    assert_eq!(meta.as_deref(), Some(&b"c2"[..]));
    assert_eq!(contents(&s), m);
    // Explicit compaction needs a clean store.
    s.put(b"x", Some(b"y")).unwrap();
    let err = s.compact().unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err}");
    s.put(b"x", None).unwrap();
    s.commit(b"c3").unwrap();
    s.compact().unwrap();
    assert_eq!(contents(&s), m);
    drop(s);
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"c3"[..]));
    assert_eq!(contents(&s), m);
}

#[test]
fn compacting_an_empty_or_fresh_store() {
    let dir = TempDir::new().unwrap();
    let (mut s, _) = open(dir.path(), small());
    s.compact().unwrap(); // never committed: nothing to do
    s.commit(b"empty").unwrap();
    s.compact().unwrap();
    drop(s);
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"empty"[..]));
    assert_eq!(s.approximate_num_entries(), 0);
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != ".lock" {
            fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
}

/// Builds a store (committed "before"), then compacts a copy of it.
/// Returns (model, the directory before compaction, the one after it).
fn before_and_after_compaction() -> (Model, TempDir, TempDir) {
    let before = TempDir::new().unwrap();
    let mut m = Model::new();
    {
        let (mut s, _) = open(before.path(), small());
        churn(&mut s, &mut m, 6);
        s.commit(b"before").unwrap();
    }
    let after = TempDir::new().unwrap();
    copy_dir(before.path(), after.path());
    {
        let (mut s, _) = open(after.path(), small());
        s.compact().unwrap();
    }
    (m, before, after)
}

/// The segments that compaction wrote (present after, absent before).
fn new_segments(before: &Path, after: &Path) -> Vec<PathBuf> {
    let old: Vec<_> = segments(before)
        .iter()
        .map(|p| p.file_name().unwrap().to_owned())
        .collect();
    segments(after)
        .into_iter()
        .filter(|p| !old.contains(&p.file_name().unwrap().to_owned()))
        .collect()
}

fn assert_reopens_as(dir: &Path, m: &Model) {
    let (s, meta) = open(dir, small());
    assert_eq!(meta.as_deref(), Some(&b"before"[..]));
    assert_eq!(&contents(&s), m);
    drop(s);
    let (s, _) = open(dir, small());
    assert_eq!(&contents(&s), m, "and again");
}

#[test]
fn crash_while_compaction_output_is_incomplete_keeps_the_old_state() {
    let (m, before, after) = before_and_after_compaction();
    let new = new_segments(before.path(), after.path());
    assert!(new.len() >= 2, "compaction output spans segments");
    for cut in [1, new.len() - 1, new.len()] {
        // Crash after writing `cut` new segments, the last of them half-written.
        let dir = TempDir::new().unwrap();
        copy_dir(before.path(), dir.path());
        for p in &new[..cut] {
            fs::copy(p, dir.path().join(p.file_name().unwrap())).unwrap();
        }
        let last = dir.path().join(new[cut - 1].file_name().unwrap());
        let len = fs::metadata(&last).unwrap().len();
        truncate_by(&last, len / 2);
        // Plus a half-written manifest temp file.
        fs::write(dir.path().join(".manifest.tmp"), b"STROMKV1\0\0").unwrap();
        assert_reopens_as(dir.path(), &m);
        assert!(!dir.path().join("manifest").exists());
        assert!(!dir.path().join(".manifest.tmp").exists());
        assert_eq!(
            segments(dir.path()),
            segments(before.path())
                .iter()
                .map(|p| dir.path().join(p.file_name().unwrap()))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn crash_after_compaction_commit_before_the_manifest_switch_finishes_it() {
    let (m, before, after) = before_and_after_compaction();
    let dir = TempDir::new().unwrap();
    copy_dir(before.path(), dir.path());
    for p in new_segments(before.path(), after.path()) {
        fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    assert_reopens_as(dir.path(), &m);
    // Open finished the switch: the old segments are gone.
    assert_eq!(
        segments(dir.path()).len(),
        segments(after.path()).len(),
        "{:?}",
        segments(dir.path())
    );
    assert!(dir.path().join("manifest").exists());
}

#[test]
fn crash_after_the_manifest_switch_removes_the_old_segments() {
    let (m, before, after) = before_and_after_compaction();
    let dir = TempDir::new().unwrap();
    copy_dir(before.path(), dir.path());
    copy_dir(after.path(), dir.path()); // new segments + manifest, old ones still there
    assert!(segments(dir.path()).len() > segments(after.path()).len());
    assert_reopens_as(dir.path(), &m);
    assert_eq!(segments(dir.path()).len(), segments(after.path()).len());
}

#[test]
fn a_damaged_manifest_is_corrupt_log() {
    let (_, _, after) = before_and_after_compaction();
    let manifest = after.path().join("manifest");
    flip_byte(&manifest, 9);
    let err = open_err(after.path(), small());
    assert!(
        matches!(&err, Error::CorruptLog { path, .. } if *path == manifest),
        "{err}"
    );
}

#[test]
fn a_lock_held_a_moment_by_a_spawning_child_is_waited_for() {
    let dir = TempDir::new().unwrap();
    drop(open(dir.path(), opts()));
    // What a child between its fork and its exec holds: a copy of the lock
    // file's open description, locked, with our pid in the file. Without the
    // wait this open fails as if another store held the directory.
    let copy = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.path().join(".lock"))
        .unwrap();
    copy.lock().unwrap();
    let exec = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(copy);
    });
    let (s, meta) = open(dir.path(), opts());
    exec.join().unwrap();
    assert_eq!(meta, None);
    // A real second instance is still refused (at once: it is this process's).
    let err = open_err(dir.path(), opts());
    assert!(err.to_string().contains("(this process, pid"), "{err}");
    drop(s);
}

#[test]
fn a_second_open_of_a_locked_directory_fails_clearly() {
    let dir = TempDir::new().unwrap();
    let (mut s, _) = open(dir.path(), opts());
    s.put(b"k", Some(b"v")).unwrap();
    s.commit(b"c").unwrap();
    let err = open_err(dir.path(), opts());
    let msg = err.to_string();
    assert!(matches!(err, Error::Store(_)), "{msg}");
    assert!(
        msg.contains("is locked by another instance (this process, pid"),
        "{msg}"
    );
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
    let err = PersistentKeyValueStore::destroy(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err}");
    drop(s);
    let (s, meta) = open(dir.path(), opts());
    assert_eq!(meta.as_deref(), Some(&b"c"[..]));
    assert_eq!(s.get(b"k").unwrap(), Some(b"v".to_vec()));
}

#[test]
fn destroy_removes_the_directory() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("store");
    {
        let (mut s, _) = open(&path, opts());
        s.put(b"k", Some(b"v")).unwrap();
        s.commit(b"c").unwrap();
        assert!(s.size_on_disk() > 0);
    }
    PersistentKeyValueStore::destroy(&path).unwrap();
    assert!(!path.exists());
    PersistentKeyValueStore::destroy(&path).unwrap(); // already gone: fine
    let (s, meta) = open(&path, opts());
    assert_eq!((meta, s.approximate_num_entries()), (None, 0));
}

#[test]
fn point_operations_and_timestamps() {
    let dir = TempDir::new().unwrap();
    let (mut s, _) = open(dir.path(), small());
    assert_eq!(s.put_if_absent(b"a", b"1").unwrap(), None);
    assert_eq!(s.put_if_absent(b"a", b"2").unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.delete(b"a").unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.delete(b"a").unwrap(), None);
    s.write_batch([
        (&b"k1"[..], Some(&b"v1"[..]), 100),
        (b"k2", Some(b"v2"), 200),
        (b"k3", Some(b"v3"), 300),
        (b"k2", None, 400),
    ])
    .unwrap();
    assert_eq!(
        s.get_with_timestamp(b"k3").unwrap(),
        Some((b"v3".to_vec(), 300))
    );
    assert_eq!(s.get_with_timestamp(b"k2").unwrap(), None);
    s.put(b"k4", Some(b"v4")).unwrap();
    assert_eq!(
        s.get_with_timestamp(b"k4").unwrap(),
        Some((b"v4".to_vec(), -1))
    );
    assert_eq!(s.approximate_num_entries(), 3);
    s.commit(b"m").unwrap();
    drop(s);
    let (s, _) = open(dir.path(), small());
    assert_eq!(
        s.get_with_timestamp(b"k1").unwrap(),
        Some((b"v1".to_vec(), 100))
    );
    // A value larger than a segment gets a segment of its own.
    drop(s);
    let (mut s, _) = open(dir.path(), small());
    let big = vec![7u8; 5000];
    s.put(b"big", Some(&big)).unwrap();
    s.put(b"after-big", Some(b"x")).unwrap();
    s.commit(b"m2").unwrap();
    drop(s);
    let (s, _) = open(dir.path(), small());
    assert_eq!(s.get(b"big").unwrap(), Some(big));
    assert_eq!(s.get(b"after-big").unwrap(), Some(b"x".to_vec()));
}

const SNAPSHOT: &str = "index.snapshot";

/// Puts, overwrites and deletes over several small segments, committed.
fn mixed_store(dir: &Path, m: &mut Model) -> PersistentKeyValueStore {
    let (mut s, _) = open(dir, small());
    fill(&mut s, m, 0..80, 0);
    s.commit(b"c1").unwrap();
    fill(&mut s, m, 20..40, 1);
    for i in (0..80).step_by(3) {
        s.put(&key(i), None).unwrap();
        m.remove(&key(i));
    }
    s.commit(b"c2").unwrap();
    assert!(segments(dir).len() > 3);
    s
}

fn reopens_as(dir: &Path, m: &Model, meta: &[u8]) {
    let (s, got) = open(dir, small());
    assert_eq!(got.as_deref(), Some(meta));
    assert_eq!(&contents(&s), m);
}

#[test]
fn a_clean_close_leaves_an_index_snapshot_that_the_next_open_takes() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    drop(mixed_store(dir.path(), &mut m));
    let snapshot = dir.path().join(SNAPSHOT);
    assert!(snapshot.exists());
    let (mut s, meta) = open(dir.path(), small());
    assert!(!snapshot.exists(), "a snapshot is used once");
    assert_eq!(meta.as_deref(), Some(&b"c2"[..]));
    assert_eq!(contents(&s), m);
    assert_eq!(s.approximate_num_entries(), m.len());
    // Opened from the snapshot, the store keeps working: writes, a
    // compaction (new segment files), a scan-only reopen agree.
    fill(&mut s, &mut m, 70..90, 2);
    s.commit(b"c3").unwrap();
    s.compact().unwrap();
    assert_eq!(contents(&s), m);
    drop(s);
    reopens_as(dir.path(), &m, b"c3");
    fs::remove_file(&snapshot).unwrap();
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"c3"[..]));
    assert_eq!(contents(&s), m);
}

#[test]
fn no_snapshot_is_left_with_uncommitted_writes() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    let mut s = mixed_store(dir.path(), &mut m);
    s.put(&key(1), Some(b"uncommitted")).unwrap();
    drop(s);
    assert!(!dir.path().join(SNAPSHOT).exists());
    reopens_as(dir.path(), &m, b"c2");
}

#[test]
fn a_stale_snapshot_is_ignored() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    drop(mixed_store(dir.path(), &mut m));
    let snapshot = dir.path().join(SNAPSHOT);
    let old = fs::read(&snapshot).unwrap();
    // A later commit (the same segments, one longer), then the old snapshot
    // back, as if its removal had been lost in a crash.
    let (mut s, _) = open(dir.path(), small());
    s.put(&key(2), Some(b"later")).unwrap();
    m.insert(key(2), b"later".to_vec());
    s.commit(b"c3").unwrap();
    drop(s);
    fs::write(&snapshot, &old).unwrap();
    let (s, meta) = open(dir.path(), small());
    assert_eq!(meta.as_deref(), Some(&b"c3"[..]));
    assert_eq!(contents(&s), m);
    drop(s);
    // After a compaction the segment files themselves differ.
    let (mut s, _) = open(dir.path(), small());
    s.compact().unwrap();
    drop(s);
    fs::write(&snapshot, &old).unwrap();
    reopens_as(dir.path(), &m, b"c3");
}

#[test]
fn a_damaged_snapshot_is_ignored() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    drop(mixed_store(dir.path(), &mut m));
    let snapshot = dir.path().join(SNAPSHOT);
    let whole = fs::read(&snapshot).unwrap();
    let damaged: [Vec<u8>; 4] = [
        whole[..whole.len() / 2].to_vec(),
        Vec::new(),
        b"STROMIX1 and nothing else".to_vec(),
        {
            let mut b = whole.clone();
            b[whole.len() / 3] ^= 1;
            b
        },
    ];
    for bytes in damaged {
        fs::write(&snapshot, &bytes).unwrap();
        let (s, meta) = open(dir.path(), small());
        assert_eq!(meta.as_deref(), Some(&b"c2"[..]));
        assert_eq!(contents(&s), m);
        // Its clean close writes a new snapshot, replaced next round.
    }
}

#[test]
fn corruption_behind_a_snapshot_is_still_corrupt_log_at_open() {
    let dir = TempDir::new().unwrap();
    let mut m = Model::new();
    drop(mixed_store(dir.path(), &mut m));
    assert!(dir.path().join(SNAPSHOT).exists());
    let first = &segments(dir.path())[0];
    // A payload byte of the first frame: same length, different content.
    flip_byte(first, 40);
    let err = open_err(dir.path(), small());
    assert!(
        matches!(&err, Error::CorruptLog { path, position: 0, .. } if path == first),
        "{err}"
    );
}

#[test]
fn a_crash_leaves_no_snapshot_and_open_scans() {
    let dir = TempDir::new().unwrap();
    let crashed = TempDir::new().unwrap();
    let mut m = Model::new();
    drop(mixed_store(dir.path(), &mut m));
    // While open (the snapshot taken), with uncommitted writes: a copy of
    // the directory is what a crash leaves.
    let (mut s, _) = open(dir.path(), small());
    s.put(&key(3), Some(b"uncommitted")).unwrap();
    s.flush().unwrap();
    copy_dir(dir.path(), crashed.path());
    drop(s);
    assert!(!crashed.path().join(SNAPSHOT).exists());
    reopens_as(crashed.path(), &m, b"c2");
}

#[test]
fn get_many_reads_every_kind_of_location_in_order() {
    let dir = TempDir::new().unwrap();
    let (mut s, _) = open(dir.path(), small());
    // Values in closed segments (memory-mapped), in the active segment's
    // file and in the write buffer; some keys deleted, some never written.
    for i in 0..120 {
        s.put(&key(i), Some(&value(i, 0))).unwrap();
    }
    for i in (0..120).step_by(5) {
        s.put(&key(i), None).unwrap();
    }
    for i in (0..120).step_by(7) {
        s.put(&key(i), Some(&value(i, 1))).unwrap();
    }
    assert!(segments(dir.path()).len() > 3);
    // More lookups than one group, keys asked in a scrambled order.
    let asked: Vec<Vec<u8>> = (0..130).map(|i| key((i * 37) % 130)).collect();
    let mut got = Vec::new();
    s.get_many_with(asked.len(), |i| &asked[i], |i, v| got.push((i, v.to_vec())))
        .unwrap();
    let want: Vec<(usize, Vec<u8>)> = asked
        .iter()
        .enumerate()
        .filter_map(|(i, k)| s.get(k).unwrap().map(|v| (i, v)))
        .collect();
    assert_eq!(got, want);
    assert!(want.len() > 50 && want.len() < 130);
    // Through the trait too (the default loops over `get_with`).
    let mut via_trait = Vec::new();
    let kv: &dyn KeyValueBytes = &s;
    kv.get_many_with(asked.len(), &|i| &asked[i], &mut |i, v| {
        via_trait.push((i, v.to_vec()));
    })
    .unwrap();
    assert_eq!(via_trait, want);
}

#[test]
fn bad_options_are_config_errors() {
    let dir = TempDir::new().unwrap();
    for o in [
        PersistentStoreOptions {
            segment_bytes: 10,
            ..opts()
        },
        PersistentStoreOptions {
            segment_bytes: 1 << 31,
            ..opts()
        },
        PersistentStoreOptions {
            compact_dead_ratio: 0.0,
            ..opts()
        },
        PersistentStoreOptions {
            compact_dead_ratio: f64::NAN,
            ..opts()
        },
    ] {
        assert!(matches!(open_err(dir.path(), o), Error::Config(_)));
    }
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
}

/// Random put/delete/commit/reopen/compact/crash sequences against a model:
/// the store must equal the live model while open, and the model as of the
/// last commit after every reopen.
#[test]
fn random_sequences_with_commits_and_reopens_match_a_model() {
    for seed in 0..12u64 {
        let mut rng = Rng(seed);
        let dir = TempDir::new().unwrap();
        let o = PersistentStoreOptions {
            segment_bytes: 200 + rng.below(2000),
            write_buffer_bytes: rng.below(600) as usize,
            compact_min_bytes: rng.below(8000),
            compact_dead_ratio: [0.3, 0.5, 0.9][rng.below(3) as usize],
        };
        let (mut s, _) = open(dir.path(), o.clone());
        let mut live = Model::new();
        let mut committed = Model::new();
        let mut committed_meta: Option<Vec<u8>> = None;
        for step in 0..1500u32 {
            let k = format!("k{}", rng.below(60)).into_bytes();
            match rng.below(100) {
                0..=54 => {
                    let v = vec![b'a' + (step % 26) as u8; rng.below(50) as usize];
                    s.put_with_timestamp(&k, Some(&v), i64::from(step)).unwrap();
                    live.insert(k, v);
                }
                55..=74 => {
                    assert_eq!(
                        s.delete(&k).unwrap(),
                        live.remove(&k),
                        "seed {seed} step {step}"
                    );
                }
                75..=84 => assert_eq!(s.get(&k).unwrap(), live.get(&k).cloned()),
                85..=91 => {
                    let meta = format!("step={step}").into_bytes();
                    s.commit(&meta).unwrap();
                    committed.clone_from(&live);
                    committed_meta = Some(meta);
                }
                92..=94 => {
                    // Close (or crash: same thing to the files) and reopen.
                    if rng.below(2) == 0 {
                        s.flush().unwrap();
                    }
                    drop(s);
                    let (reopened, meta) = open(dir.path(), o.clone());
                    s = reopened;
                    assert_eq!(meta, committed_meta, "seed {seed} step {step}");
                    live.clone_from(&committed);
                }
                95..=96 => {
                    if !s.has_uncommitted_writes() {
                        s.compact().unwrap();
                    }
                }
                _ => {
                    // A torn tail: garbage after the last write.
                    s.flush().unwrap();
                    drop(s);
                    let last = segments(dir.path()).pop().unwrap();
                    let mut f = OpenOptions::new().append(true).open(last).unwrap();
                    f.write_all(&[0xab; 37]).unwrap();
                    let (reopened, meta) = open(dir.path(), o.clone());
                    s = reopened;
                    assert_eq!(meta, committed_meta, "seed {seed} step {step}");
                    live.clone_from(&committed);
                }
            }
            assert_eq!(
                s.approximate_num_entries(),
                live.len(),
                "seed {seed} step {step}"
            );
        }
        assert_eq!(contents(&s), live, "seed {seed}");
    }
}

/// Release-mode throughput check (numbers only, no assertions on time):
/// `cargo test --release -p strom-core --test store_persistent -- --ignored --nocapture`
#[test]
#[ignore = "throughput check; run in release mode"]
fn throughput_one_million_keys() {
    use std::time::Instant;
    const N: u64 = 1_000_000;
    let dir = TempDir::new().unwrap();
    let key_of = |i: u64| {
        // 16 bytes, spread so inserts are not in key order.
        (i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .to_be_bytes()
            .repeat(2)
    };
    let value = [0x5au8; 100];
    let rss = || {
        fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| pages * 4096)
    };
    let rss0 = rss();

    let (mut s, _) = open(dir.path(), opts());
    let t = Instant::now();
    let keys: Vec<[u8; 16]> = (0..N).map(|i| key_of(i).try_into().unwrap()).collect();
    for chunk in keys.chunks(10_000) {
        s.write_batch(chunk.iter().map(|k| (&k[..], Some(&value[..]), 0)))
            .unwrap();
    }
    let put = t.elapsed();
    let t = Instant::now();
    s.commit(b"bulk").unwrap();
    let commit = t.elapsed();
    let rss_loaded = rss();

    let mut rng = Rng(7);
    let t = Instant::now();
    let mut found = 0;
    for _ in 0..N {
        let k = &keys[rng.below(N) as usize];
        found += usize::from(s.get(k).unwrap().is_some());
    }
    let get = t.elapsed();
    assert_eq!(found as u64, N);

    let t = Instant::now();
    let scanned = s.range(None, None, false).unwrap().len();
    let scan = t.elapsed();
    assert_eq!(scanned as u64, N);

    // Overwrite everything once, commit (compacts: half the log is dead).
    for chunk in keys.chunks(10_000) {
        s.write_batch(chunk.iter().map(|k| (&k[..], Some(&value[..]), 1)))
            .unwrap();
    }
    let t = Instant::now();
    s.commit(b"again").unwrap();
    let compact = t.elapsed();
    let size = s.size_on_disk();
    drop(s);

    let t = Instant::now();
    let (mut s, meta) = open(dir.path(), opts());
    let reopen = t.elapsed();
    assert_eq!(meta.as_deref(), Some(&b"again"[..]));
    assert_eq!(s.approximate_num_entries() as u64, N);

    // Small commits, as under exactly-once (every 100 ms): 10 puts each.
    let t = Instant::now();
    for round in 0..200u64 {
        for k in &keys[..10] {
            s.put_with_timestamp(k, Some(&value), round as i64).unwrap();
        }
        s.commit(&round.to_be_bytes()).unwrap();
    }
    let small_commit = t.elapsed() / 200;

    let per_s = |d: std::time::Duration| N as f64 / d.as_secs_f64();
    println!("1M keys (16 B) x 100 B values, {} MB on disk", size >> 20);
    println!("  batched put:  {put:?} ({:.2} M/s)", per_s(put) / 1e6);
    println!("  commit:       {commit:?}");
    println!("  random get:   {get:?} ({:.2} M/s)", per_s(get) / 1e6);
    println!("  full scan:    {scan:?} ({:.2} M/s)", per_s(scan) / 1e6);
    println!("  overwrite + commit with compaction: {compact:?}");
    println!("  reopen (recovery scan): {reopen:?}");
    println!("  small commit (10 puts + commit, 2 fsyncs): {small_commit:?}");
    println!(
        "  RSS growth with the index loaded: {} MB (keys vec: 16 MB)",
        rss_loaded.saturating_sub(rss0) >> 20
    );
}

/// Keeps the trait import used: the store is a `KeyValueBytes`.
#[test]
fn the_store_is_a_key_value_bytes() {
    let dir = TempDir::new().unwrap();
    let (s, _) = open(dir.path(), opts());
    let mut boxed: Box<dyn KeyValueBytes> = Box::new(s);
    boxed.put(b"k", Some(b"v")).unwrap();
    assert_eq!(boxed.get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// The child half of `another_process_holding_the_store_is_refused`: keeps
/// the store open until its stdin closes.
#[test]
fn store_lock_holder_child() {
    let Ok(path) = std::env::var("STROM_STORE_LOCK_CHILD") else {
        return;
    };
    let (_store, _) = open(Path::new(&path), opts());
    println!("STORE-OPEN");
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut rest).unwrap();
}

#[test]
fn another_process_holding_the_store_is_refused() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = TempDir::new().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "store_lock_holder_child", "--nocapture"])
        .env("STROM_STORE_LOCK_CHILD", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kept open until the child exits: it prints more.
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().contains("STORE-OPEN")),
        "the child did not open the store"
    );
    let err = open_err(dir.path(), opts());
    let msg = err.to_string();
    assert!(matches!(err, Error::Store(_)), "{msg}");
    assert!(msg.contains(&format!("(pid {})", child.id())), "{msg}");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    drop(lines);
    open(dir.path(), opts());
}
