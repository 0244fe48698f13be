//! The files of a store directory: segment names and the manifest (layout
//! in `store/README.md`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsutil::{TMP_SUFFIX, write_atomic};
pub(super) use crate::fsutil::{io, remove_if_exists, sync_dir};

pub(super) const SEGMENT_SUFFIX: &str = ".log";
pub(super) const MANIFEST_FILE: &str = "manifest";
const MANIFEST_MAGIC: &[u8; 8] = b"STROMKV1";
const MANIFEST_LEN: usize = 8 + 8 + 4;

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

/// Replaces the manifest atomically (temp file, fsync, rename, fsync of the
/// directory).
pub(super) fn write_manifest(dir: &Path, base: u64) -> Result<()> {
    let mut bytes = Vec::with_capacity(MANIFEST_LEN);
    bytes.extend_from_slice(MANIFEST_MAGIC);
    bytes.extend_from_slice(&base.to_be_bytes());
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_be_bytes());
    write_atomic(&dir.join(MANIFEST_FILE), &bytes)
}
