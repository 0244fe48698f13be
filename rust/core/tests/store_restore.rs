//! Restoring the persistent store from a changelog in the embedded log
//! (`PersistentKeyValueStore::restore_batch`): the changelog's frames are
//! copied as they are, their CRCs carried over.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use strom_core::Error;
use strom_core::log::{Header, Log, RecordBatchBuilder, TopicConfig};
use strom_core::store::{PersistentKeyValueStore, PersistentStoreOptions};
use tempfile::TempDir;

/// Small segments and buffers, so a restore rolls segments and writes often.
fn small() -> PersistentStoreOptions {
    PersistentStoreOptions {
        segment_bytes: 4096,
        write_buffer_bytes: 512,
        ..PersistentStoreOptions::default()
    }
}

/// One changelog record: timestamp, key, value (None: a tombstone), and
/// whether it carries a header (those are written as puts, not copied).
type Rec = (i64, Vec<u8>, Option<Vec<u8>>, bool);

/// Overwrites, deletes (of present and absent keys), empty values and a few
/// records with headers, over 50 keys.
fn records(n: u32) -> Vec<Rec> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let key = format!("key-{}", state % 50).into_bytes();
            let value = match state % 7 {
                0 => None,
                1 => Some(Vec::new()),
                _ => Some(format!("value-{i}-{}", "x".repeat((state % 40) as usize)).into_bytes()),
            };
            (i64::from(i) * 3 - 5, key, value, state.is_multiple_of(11))
        })
        .collect()
}

fn changelog(dir: &Path, recs: &[Rec]) -> Arc<Log> {
    let log = Log::open(dir).unwrap();
    log.create_topic("cl", TopicConfig::new(1)).unwrap();
    let mut b = RecordBatchBuilder::new();
    for (ts, k, v, header) in recs {
        let h = [Header {
            key: "h",
            value: Some(b"1"),
        }];
        let headers: &[Header<'_>] = if *header { &h } else { &[] };
        b.push(*ts, Some(k), v.as_deref(), headers);
    }
    log.append("cl", 0, &b).unwrap();
    log
}

/// Restores the whole changelog in batches of `per_batch` records.
fn restore(s: &mut PersistentKeyValueStore, log: &Log, per_batch: usize) -> Result<(), Error> {
    let mut offset = 0;
    loop {
        let batch = log.read("cl", 0, offset, per_batch, usize::MAX)?;
        if batch.is_empty() {
            return Ok(());
        }
        s.restore_batch(&batch, batch.len())?;
        offset = batch.next_offset;
    }
}

fn segment_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let b = fs::read(&p).unwrap();
            (p.file_name().unwrap().into(), b)
        })
        .collect()
}

/// The restored store holds what applying the records one by one gives,
/// with their timestamps, before and after a reopen; its segment files
/// are byte for byte those of a store that got the same records as puts,
/// so a copied frame (CRC carried over) is exactly a frame `put` writes.
#[test]
fn a_restore_writes_the_frames_puts_write() {
    let recs = records(3000);
    let dir = TempDir::new().unwrap();
    let log = changelog(&dir.path().join("log"), &recs);
    let (restored_dir, put_dir) = (dir.path().join("restored"), dir.path().join("put"));

    let (mut restored, _) = PersistentKeyValueStore::open(&restored_dir, small()).unwrap();
    restore(&mut restored, &log, 97).unwrap();
    let (mut put, _) = PersistentKeyValueStore::open(&put_dir, small()).unwrap();
    let mut model = BTreeMap::new();
    for (ts, k, v, _) in &recs {
        put.put_with_timestamp(k, v.as_deref(), *ts).unwrap();
        match v {
            Some(v) => model.insert(k.clone(), (v.clone(), *ts)),
            None => model.remove(k),
        };
    }
    let check = |s: &PersistentKeyValueStore| {
        assert_eq!(s.approximate_num_entries(), model.len());
        for (k, (v, ts)) in &model {
            assert_eq!(s.get_with_timestamp(k).unwrap(), Some((v.clone(), *ts)));
        }
        assert_eq!(s.get(b"key-absent").unwrap(), None);
    };
    check(&restored);
    restored.flush().unwrap();
    put.flush().unwrap();
    let files = segment_bytes(&restored_dir);
    assert!(files.len() > 3, "the restore rolled segments");
    assert_eq!(files, segment_bytes(&put_dir));

    // Reopen scanning (every frame's CRC checked), then from the snapshot.
    restored.commit(b"restored").unwrap();
    drop(restored);
    fs::remove_file(restored_dir.join("index.snapshot")).unwrap();
    for _ in 0..2 {
        let (s, meta) = PersistentKeyValueStore::open(&restored_dir, small()).unwrap();
        assert_eq!(meta.as_deref(), Some(&b"restored"[..]));
        check(&s);
    }
}

/// A compaction copies frames the same way: the copies verify on reopen.
#[test]
fn restored_frames_survive_compaction_and_reopen() {
    let recs = records(2000);
    let dir = TempDir::new().unwrap();
    let log = changelog(&dir.path().join("log"), &recs);
    let store_dir = dir.path().join("store");
    let (mut s, _) = PersistentKeyValueStore::open(&store_dir, small()).unwrap();
    restore(&mut s, &log, 500).unwrap();
    s.commit(b"c").unwrap();
    let before: Vec<_> = s.range(None, None, false).unwrap();
    s.compact().unwrap();
    assert_eq!(s.range(None, None, false).unwrap(), before);
    drop(s);
    fs::remove_file(store_dir.join("index.snapshot")).unwrap();
    let (s, _) = PersistentKeyValueStore::open(&store_dir, small()).unwrap();
    assert_eq!(s.range(None, None, false).unwrap(), before);
}

fn log_segment(dir: &Path) -> PathBuf {
    let part = dir.join("cl-0");
    fs::read_dir(&part)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .unwrap()
}

/// A changelog record with a flipped byte is refused by the read: the
/// restore fails with `CorruptLog` instead of carrying its CRC into the store.
#[test]
fn a_corrupt_changelog_record_fails_the_restore() {
    let recs = records(200);
    let dir = TempDir::new().unwrap();
    let log_dir = dir.path().join("log");
    let log = changelog(&log_dir, &recs);
    drop(log);
    let seg = log_segment(&log_dir);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&seg)
        .unwrap();
    let mut b = [0u8; 1];
    // Inside the value of a record in the middle of the segment.
    let at = f.metadata().unwrap().len() / 2;
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x10], at).unwrap();
    drop(f);
    let log = Log::open(&log_dir).unwrap();
    let (mut s, _) = PersistentKeyValueStore::open(dir.path().join("store"), small()).unwrap();
    let err = restore(&mut s, &log, 64).unwrap_err();
    assert!(
        matches!(&err, Error::CorruptLog { path, .. } if *path == seg),
        "{err}"
    );
}
