//! Small durable-file helpers shared by the embedded log and the stores,
//! and the lock that keeps one instance per directory ([`DirLock`]).

mod lock;

pub(crate) use lock::{DirLock, Refused};

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};

/// The suffix of files being written for an atomic replace.
pub(crate) const TMP_SUFFIX: &str = ".tmp";

pub(crate) fn io<T>(path: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| Error::io(path, e))
}

/// fsyncs a directory so that entries created, renamed or removed in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    io(dir, File::open(dir).and_then(|d| d.sync_all()))
}

/// FNV-1a: a stable 64-bit hash that needs no dependency.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A hidden temp name next to `path` that fits any file name length.
pub(crate) fn tmp_path(path: &Path) -> PathBuf {
    let name = path.file_name().expect("a file path");
    path.with_file_name(format!(
        ".{:016x}{TMP_SUFFIX}",
        fnv1a(name.as_encoded_bytes())
    ))
}

/// Replaces `path` with `bytes` atomically: write a temp file, fsync it,
/// rename it over `path`, fsync the directory. A crash leaves either the old
/// or the new content (and possibly a stray temp file, removed on open).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let mut file = io(
        &tmp,
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp),
    )?;
    io(&tmp, file.write_all(bytes).and_then(|()| file.sync_all()))?;
    drop(file);
    io(path, fs::rename(&tmp, path))?;
    sync_dir(path.parent().expect("a file inside a directory"))
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

pub(crate) fn system_time_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// Removes leftover `*.tmp` files of interrupted atomic writes in `dir`.
pub(crate) fn remove_tmp_files(dir: &Path) -> Result<()> {
    for entry in io(dir, fs::read_dir(dir))? {
        let path = io(dir, entry)?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(TMP_SUFFIX))
        {
            ::log::info!("removing leftover temp file {}", path.display());
            remove_if_exists(&path)?;
        }
    }
    Ok(())
}
