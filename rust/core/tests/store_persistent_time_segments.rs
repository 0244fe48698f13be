//! Persistent segments: window and session stores over
//! `PersistentSegmentFactory` reopen as of their last commit, retention
//! deletes segment directories (after the commit that forgets them), commits
//! carry the caller's metadata and observed stream time, and interrupted
//! commits are detected.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use strom_core::Error;
use strom_core::store::time_segments::PutOutcome;
use strom_core::store::{
    PersistentSegmentFactory, PersistentStoreOptions, SegmentedCommit, SessionStore, WindowStore,
};
use tempfile::TempDir;

const INTERVAL: i64 = 100;
const RETENTION: i64 = 300;
const WINDOW_SIZE: i64 = 10;

type Window = WindowStore<PersistentSegmentFactory>;

fn open_window(
    dir: &Path,
    dups: bool,
) -> (Window, PersistentSegmentFactory, Option<SegmentedCommit>) {
    let (factory, committed) =
        PersistentSegmentFactory::open(dir, INTERVAL, PersistentStoreOptions::default()).unwrap();
    let mut store =
        WindowStore::with_segment_interval(factory.clone(), RETENTION, WINDOW_SIZE, dups, INTERVAL)
            .unwrap();
    if let Some(c) = &committed {
        store.restore_observed_stream_time(c.observed_stream_time);
    }
    (store, factory, committed)
}

fn commit(store: &Window, factory: &PersistentSegmentFactory, metadata: &[u8]) {
    factory
        .commit(metadata, store.observed_stream_time())
        .unwrap();
}

fn put(s: &mut Window, key: &str, value: &str, start: i64) -> PutOutcome {
    s.put(key.as_bytes(), Some(value.as_bytes()), start)
        .unwrap()
}

/// Every visible window as (key, start, value).
fn contents(s: &Window) -> Vec<(String, i64, String)> {
    s.all()
        .unwrap()
        .into_iter()
        .map(|e| {
            (
                String::from_utf8(e.key).unwrap(),
                e.start,
                String::from_utf8(e.value).unwrap(),
            )
        })
        .collect()
}

/// Names of the segment directories in `dir`.
fn segment_dirs(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .collect()
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            fs::copy(&path, &target).unwrap();
        }
    }
}

fn store_dir(tmp: &TempDir) -> PathBuf {
    tmp.path().join("counts")
}

#[test]
fn a_fresh_store_has_no_commit_and_names_segments_by_start() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, committed) = open_window(&dir, false);
    assert_eq!(committed, None);
    put(&mut s, "a", "1", 5);
    put(&mut s, "a", "2", 250);
    assert_eq!(s.segment_ids(), [0, 2]);
    assert_eq!(segment_dirs(&dir), names(&["counts.0", "counts.200"]));
    assert_eq!(f.segment_dir(2), dir.join("counts.200"));
}

#[test]
fn reopen_returns_the_committed_state_metadata_and_stream_time() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "1", 5);
    put(&mut s, "aa", "2", 5);
    put(&mut s, "b", "3", 150);
    commit(&s, &f, b"offset=3");
    let expected = contents(&s);
    drop((s, f));

    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(
        committed,
        Some(SegmentedCommit {
            metadata: b"offset=3".to_vec(),
            observed_stream_time: 150,
        })
    );
    assert_eq!(s.observed_stream_time(), 150);
    assert_eq!(contents(&s), expected);
    assert_eq!(
        s.fetch(b"a", 0, 1000).unwrap(),
        vec![(5, b"1".to_vec())],
        "exact key, not its prefix-sharing neighbour"
    );
}

#[test]
fn writes_after_the_last_commit_are_gone_after_reopen() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "1", 5);
    commit(&s, &f, b"one");
    let at_commit = contents(&s);
    // An overwrite, a delete, a write into a new segment.
    put(&mut s, "a", "changed", 5);
    s.put(b"a", None, 5).unwrap();
    put(&mut s, "z", "new", 120);
    drop((s, f));

    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed.unwrap().metadata, b"one");
    assert_eq!(contents(&s), at_commit);
    // The uncommitted segment was deleted, not just emptied.
    assert_eq!(segment_dirs(&dir), names(&["counts.0"]));
}

#[test]
fn retention_deletes_segment_directories_after_the_next_commit() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "0", 0);
    put(&mut s, "a", "1", 120);
    commit(&s, &f, b"c1");
    let at_commit = contents(&s);
    // Stream time 450: segments below (450 - 300) / 100 = 1 are dropped.
    put(&mut s, "a", "4", 450);
    assert_eq!(s.segment_ids(), [1, 4]);
    // The last commit still holds segment 0, so its directory stays...
    assert_eq!(
        segment_dirs(&dir),
        names(&["counts.0", "counts.100", "counts.400"])
    );
    drop((s, f));

    // ...and a reopen without a commit gets it back.
    let (mut s, f, _) = open_window(&dir, false);
    assert_eq!(contents(&s), at_commit);
    put(&mut s, "a", "4", 450);
    commit(&s, &f, b"c2");
    assert_eq!(segment_dirs(&dir), names(&["counts.100", "counts.400"]));
    drop((s, f));

    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed.unwrap().observed_stream_time, 450);
    assert_eq!(s.segment_ids(), [1, 4]);
    assert_eq!(
        contents(&s),
        [("a".into(), 450, "4".into())],
        "120 is expired (<= 450 - 300) though its segment is live"
    );
}

// A crash after the commit record but before the dropped segment's
// directory was deleted leaves it behind; the commit does not list it, so
// the next open deletes it.
#[test]
fn a_dropped_segment_left_behind_by_a_crash_is_deleted_on_open() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let saved = tmp.path().join("saved");
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "0", 0);
    commit(&s, &f, b"c1");
    copy_dir(&dir.join("counts.0"), &saved);
    put(&mut s, "a", "5", 500);
    commit(&s, &f, b"c2");
    drop((s, f));
    copy_dir(&saved, &dir.join("counts.0"));

    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed.unwrap().metadata, b"c2");
    assert_eq!(s.segment_ids(), [5]);
    assert_eq!(segment_dirs(&dir), names(&["counts.500"]));
    assert_eq!(contents(&s), [("a".into(), 500, "5".into())]);
}

#[test]
fn commit_metadata_survives_without_any_segment() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (s, f, _) = open_window(&dir, false);
    commit(&s, &f, b"empty");
    drop((s, f));
    let (s, f, committed) = open_window(&dir, false);
    assert_eq!(
        committed,
        Some(SegmentedCommit {
            metadata: b"empty".to_vec(),
            observed_stream_time: -1
        })
    );
    commit(&s, &f, b"again");
    drop((s, f));
    assert_eq!(open_window(&dir, false).2.unwrap().metadata, b"again");
}

#[test]
fn clean_segments_are_not_rewritten_by_a_commit() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "0", 0);
    put(&mut s, "a", "1", 100);
    commit(&s, &f, b"c1");
    let size = |seg: &str| -> u64 {
        fs::read_dir(dir.join(seg))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let before = size("counts.0");
    put(&mut s, "b", "1", 150);
    commit(&s, &f, b"c2");
    commit(&s, &f, b"c3");
    assert_eq!(size("counts.0"), before);
    drop((s, f));
    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed.unwrap().metadata, b"c3");
    assert_eq!(contents(&s).len(), 3);
}

// A crash after some changed segments took the new commit's marker but not
// all: those cannot go back, so the store is emptied and reports no commit
// (the caller restores it from the changelog).
#[test]
fn an_interrupted_commit_empties_the_store() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let saved = tmp.path().join("saved");
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "0", 0);
    put(&mut s, "a", "1", 100);
    commit(&s, &f, b"c1");
    drop((s, f));
    copy_dir(&dir, &saved);

    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "b", "0", 10);
    put(&mut s, "b", "1", 110);
    commit(&s, &f, b"c2");
    drop((s, f));
    // Segment 1 and the commit file as of c1, segment 0 as of c2.
    fs::remove_dir_all(dir.join("counts.100")).unwrap();
    copy_dir(&saved.join("counts.100"), &dir.join("counts.100"));
    fs::copy(saved.join("commit"), dir.join("commit")).unwrap();

    let (s, f, committed) = open_window(&dir, false);
    assert_eq!(committed, None);
    assert!(contents(&s).is_empty());
    assert!(segment_dirs(&dir).is_empty());
    // The store works normally afterwards.
    drop((s, f));
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "c", "0", 20);
    commit(&s, &f, b"c3");
    drop((s, f));
    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed.unwrap().metadata, b"c3");
    assert_eq!(contents(&s), [("c".into(), 20, "0".into())]);
}

// A crash after every changed segment took the new marker but before the
// commit file was replaced: the commit is complete and is rolled forward.
#[test]
fn a_commit_that_reached_every_changed_segment_is_rolled_forward() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "0", 0);
    put(&mut s, "a", "1", 100);
    commit(&s, &f, b"c1");
    let old_commit = fs::read(dir.join("commit")).unwrap();
    put(&mut s, "b", "1", 110);
    commit(&s, &f, b"c2");
    let expected = contents(&s);
    drop((s, f));
    fs::write(dir.join("commit"), old_commit).unwrap();

    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed.unwrap().metadata, b"c2");
    assert_eq!(contents(&s), expected);
}

#[test]
fn a_second_open_of_the_same_directory_fails() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    // No segment exists yet: the store directory itself is locked.
    let (_s, _f, _) = open_window(&dir, false);
    let err = PersistentSegmentFactory::open(&dir, INTERVAL, PersistentStoreOptions::default())
        .unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err}");
    let err = PersistentSegmentFactory::destroy_store(&dir).unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err}");
}

#[test]
fn another_segment_interval_is_refused() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "1", 150);
    commit(&s, &f, b"c1");
    drop((s, f));
    let err =
        PersistentSegmentFactory::open(&dir, 60, PersistentStoreOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let err =
        PersistentSegmentFactory::open(&dir, 0, PersistentStoreOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[test]
fn destroy_store_removes_everything() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, false);
    put(&mut s, "a", "1", 150);
    commit(&s, &f, b"c1");
    drop((s, f));
    PersistentSegmentFactory::destroy_store(&dir).unwrap();
    assert!(!dir.exists());
    PersistentSegmentFactory::destroy_store(&dir).unwrap();
    let (s, _f, committed) = open_window(&dir, false);
    assert_eq!(committed, None);
    assert!(contents(&s).is_empty());
}

#[test]
fn retained_duplicates_reopen_in_insertion_order() {
    let tmp = TempDir::new().unwrap();
    let dir = store_dir(&tmp);
    let (mut s, f, _) = open_window(&dir, true);
    for v in ["x", "y", "z"] {
        put(&mut s, "k", v, 50);
    }
    commit(&s, &f, b"c1");
    drop((s, f));
    let (s, _f, _) = open_window(&dir, true);
    let values: Vec<Vec<u8>> = s
        .fetch(b"k", 0, 100)
        .unwrap()
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(values, [b"x", b"y", b"z"]);
}

#[test]
fn session_stores_reopen_as_of_their_commit() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("sessions");
    let open = || {
        let (factory, committed) =
            PersistentSegmentFactory::open(&dir, INTERVAL, PersistentStoreOptions::default())
                .unwrap();
        let mut store =
            SessionStore::with_segment_interval(factory.clone(), RETENTION, INTERVAL).unwrap();
        if let Some(c) = &committed {
            store.restore_observed_stream_time(c.observed_stream_time);
        }
        (store, factory, committed)
    };
    let (mut s, f, _) = open();
    s.put(b"a", 0, 10, Some(b"1")).unwrap();
    s.put(b"a", 20, 150, Some(b"2")).unwrap();
    s.put(b"aa", 5, 5, Some(b"3")).unwrap();
    f.commit(b"s1", s.observed_stream_time()).unwrap();
    s.remove(b"a", 0, 10).unwrap();
    s.put(b"b", 400, 420, Some(b"4")).unwrap();
    drop((s, f));

    let (s, _f, committed) = open();
    assert_eq!(committed.unwrap().observed_stream_time, 150);
    let found: Vec<(i64, i64, Vec<u8>)> = s
        .find_sessions(b"a", 0, 1000)
        .unwrap()
        .into_iter()
        .map(|e| (e.start, e.end, e.value))
        .collect();
    assert_eq!(found, [(0, 10, b"1".to_vec()), (20, 150, b"2".to_vec())]);
    assert_eq!(s.fetch(b"b").unwrap(), []);
    assert_eq!(segment_dirs(&dir), names(&["sessions.0", "sessions.100"]));
}

#[test]
fn stores_are_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Window>();
    assert_send::<SessionStore<PersistentSegmentFactory>>();
    assert_send::<PersistentSegmentFactory>();
}
