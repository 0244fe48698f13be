//! The files of a store directory: segment names, the manifest, the lock,
//! and small durable-file helpers (layout in `store/README.md`).

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

pub(super) const SEGMENT_SUFFIX: &str = ".log";
pub(super) const MANIFEST_FILE: &str = "manifest";
pub(super) const LOCK_FILE: &str = ".lock";
const TMP_SUFFIX: &str = ".tmp";
const MANIFEST_MAGIC: &[u8; 8] = b"STROMKV1";
const MANIFEST_LEN: usize = 8 + 8 + 4;

pub(super) fn io<T>(path: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| Error::io(path, e))
}

/// fsyncs a directory so that files created, renamed or removed in it are durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    io(dir, File::open(dir).and_then(|d| d.sync_all()))
}

pub(super) fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

pub(super) fn segment_name(base: u64) -> String {
    format!("{base:020}{SEGMENT_SUFFIX}")
}

/// The base sequence number of a name like `00000000000000000042.log`.
fn parse_segment_name(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(SEGMENT_SUFFIX)?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// Segment files of `dir` by base sequence number, in order; removes leftover
/// temp files on the way.
pub(super) fn list_segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in io(dir, fs::read_dir(dir))? {
        let path = io(dir, entry)?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(base) = parse_segment_name(name) {
            out.push((base, path));
        } else if name.ends_with(TMP_SUFFIX) {
            ::log::info!("removing leftover temp file {}", path.display());
            remove_if_exists(&path)?;
        }
    }
    out.sort_unstable_by_key(|(base, _)| *base);
    Ok(out)
}

/// The first segment that belongs to the store (0 when the store was never
/// compacted). A missing manifest means 0; a damaged one is `CorruptLog`.
pub(super) fn read_manifest(dir: &Path) -> Result<u64> {
    let path = dir.join(MANIFEST_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let corrupt = |reason: &str| Error::CorruptLog {
        path: path.clone(),
        position: 0,
        offset: None,
        reason: reason.to_owned(),
    };
    if bytes.len() != MANIFEST_LEN || &bytes[..8] != MANIFEST_MAGIC {
        return Err(corrupt("not a store manifest (bad size or magic)"));
    }
    let crc = u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if crc != crc32c::crc32c(&bytes[..16]) {
        return Err(corrupt("manifest CRC mismatch"));
    }
    Ok(u64::from_be_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    ))
}

/// Replaces the manifest atomically: temp file, fsync, rename, fsync of the directory.
pub(super) fn write_manifest(dir: &Path, base: u64) -> Result<()> {
    let mut bytes = Vec::with_capacity(MANIFEST_LEN);
    bytes.extend_from_slice(MANIFEST_MAGIC);
    bytes.extend_from_slice(&base.to_be_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_be_bytes());
    let path = dir.join(MANIFEST_FILE);
    let tmp = dir.join(format!(".{MANIFEST_FILE}{TMP_SUFFIX}"));
    let mut file = io(
        &tmp,
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp),
    )?;
    io(&tmp, file.write_all(&bytes).and_then(|()| file.sync_all()))?;
    drop(file);
    io(&path, fs::rename(&tmp, &path))?;
    sync_dir(dir)
}

/// How long `take_lock` waits for a lock that this process holds on no open
/// store: a child being spawned on another thread holds a copy of the lock's
/// descriptor from its fork to its exec (the flock is the open file's, not
/// the descriptor's), so a store closed and reopened meanwhile finds it
/// taken for that moment.
const FORKED_COPY_WAIT: Duration = Duration::from_secs(2);

/// The store directories this process holds open: a second open of one is
/// refused at once, not after `FORKED_COPY_WAIT`.
static HELD: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn held() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The exclusive lock of a store directory, released when dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: File,
    dir: PathBuf,
}

impl Drop for DirLock {
    fn drop(&mut self) {
        held().remove(&self.dir);
    }
}

/// Takes the exclusive lock of a store directory (flock: it also conflicts
/// with another open of the same file in this process) and writes our pid.
/// `what` names the store in the error ("state directory", …).
pub(crate) fn take_lock(dir: &Path, what: &str) -> Result<DirLock> {
    let dir = io(dir, fs::canonicalize(dir))?;
    let path = dir.join(LOCK_FILE);
    let refused = |who: String| {
        Error::Store(format!(
            "{what} {} is locked by another instance{who}; \
             two instances must never share a task's store",
            dir.display()
        ))
    };
    let in_this_process = || refused(" in this process".to_owned());
    if held().contains(&dir) {
        return Err(in_this_process());
    }
    let mut file = io(
        &path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path),
    )?;
    let deadline = Instant::now() + FORKED_COPY_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(fs::TryLockError::WouldBlock) => {
                let holder = fs::read_to_string(&path).unwrap_or_default();
                let holder = holder.trim();
                if holder != std::process::id().to_string() {
                    return Err(refused(if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {holder})")
                    }));
                }
                if held().contains(&dir) || Instant::now() >= deadline {
                    return Err(in_this_process());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
        }
    }
    let pid = format!("{}\n", std::process::id());
    io(
        &path,
        file.set_len(0)
            .and_then(|()| file.write_all(pid.as_bytes()))
            .and_then(|()| file.flush()),
    )?;
    // The flock is exclusive: no other open store holds `dir`.
    held().insert(dir.clone());
    Ok(DirLock { _file: file, dir })
}
