//! The files of a store directory: segment names, the manifest, the lock,
//! and small durable-file helpers (layout in `store/README.md`).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// Takes the exclusive lock of a store directory (flock: it also conflicts
/// with another open of the same file in this process) and writes our pid.
/// `what` names the store in the error ("state directory", …).
pub(crate) fn take_lock(dir: &Path, what: &str) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    let mut file = io(
        &path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path),
    )?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            let holder = holder.trim();
            let who = if holder == std::process::id().to_string() {
                " in this process".to_owned()
            } else if holder.is_empty() {
                String::new()
            } else {
                format!(" (pid {holder})")
            };
            return Err(Error::Store(format!(
                "{what} {} is locked by another instance{who}; \
                 two instances must never share a task's store",
                dir.display()
            )));
        }
        Err(fs::TryLockError::Error(e)) => return Err(Error::io(&path, e)),
    }
    let pid = format!("{}\n", std::process::id());
    io(
        &path,
        file.set_len(0)
            .and_then(|()| file.write_all(pid.as_bytes()))
            .and_then(|()| file.flush()),
    )?;
    Ok(file)
}
