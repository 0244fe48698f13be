//! Consumer group offsets: one checksummed file per group under `.groups/`.
//!
//! ```text
//! magic "STROMGRP" | version u32 = 1 | group id (u32 len + UTF-8)
//! count u32 | count × (topic (u32 len + UTF-8), partition u32, offset u64, metadata (u32 len + UTF-8))
//! crc32c u32 of everything before it
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::log::CommittedOffset;
use crate::log::format::{u32_at, u64_at};

pub(crate) const GROUPS_DIR: &str = ".groups";
pub(crate) const OFFSETS_SUFFIX: &str = ".offsets";
const MAGIC: &[u8; 8] = b"STROMGRP";
const VERSION: u32 = 1;
/// Longer encoded names are shortened and made unique with a hash, so that
/// any group id fits a file name.
const MAX_NAME: usize = 200;

/// A group's committed offsets by (topic, partition).
pub(crate) type GroupOffsets = BTreeMap<(String, u32), (u64, String)>;

/// The file name for a group id: `[A-Za-z0-9._-]` kept, other bytes as `%XX`.
pub(crate) fn file_name(group: &str) -> String {
    let mut name = String::with_capacity(group.len() + OFFSETS_SUFFIX.len());
    for b in group.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-' {
            name.push(b as char);
        } else {
            let _ = write!(name, "%{b:02X}");
        }
    }
    if name.len() > MAX_NAME {
        let hash = crate::fsutil::fnv1a(group.as_bytes());
        name.truncate(MAX_NAME - 17);
        // Do not cut a %XX escape in half.
        if let Some(p) = name.rfind('%').filter(|&p| p + 3 > name.len()) {
            name.truncate(p);
        }
        let _ = write!(name, "~{hash:016x}");
    }
    name.push_str(OFFSETS_SUFFIX);
    name
}

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(&(s.len() as u32).to_be_bytes());
    buf.extend_from_slice(s.as_bytes());
}

pub(crate) fn encode(group: &str, offsets: &GroupOffsets) -> Vec<u8> {
    let mut buf = Vec::with_capacity(64 + offsets.len() * 48);
    buf.extend_from_slice(MAGIC);
    buf.extend_from_slice(&VERSION.to_be_bytes());
    put_str(&mut buf, group);
    buf.extend_from_slice(&(offsets.len() as u32).to_be_bytes());
    for ((topic, partition), (offset, metadata)) in offsets {
        put_str(&mut buf, topic);
        buf.extend_from_slice(&partition.to_be_bytes());
        buf.extend_from_slice(&offset.to_be_bytes());
        put_str(&mut buf, metadata);
    }
    let crc = crc32c::crc32c(&buf);
    buf.extend_from_slice(&crc.to_be_bytes());
    buf
}

struct Reader<'a> {
    path: &'a Path,
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn corrupt(&self, reason: &str) -> Error {
        Error::CorruptLog {
            path: self.path.to_path_buf(),
            position: self.at as u64,
            offset: None,
            reason: reason.to_owned(),
        }
    }
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.buf.len() - self.at < n {
            return Err(self.corrupt("truncated group offsets file"));
        }
        let s = &self.buf[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32_at(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64_at(self.take(8)?, 0))
    }
    fn string(&mut self) -> Result<String> {
        let len = self.u32()? as usize;
        let at = self.at;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Error::CorruptLog {
            path: self.path.to_path_buf(),
            position: at as u64,
            offset: None,
            reason: "string is not UTF-8".into(),
        })
    }
}

/// Parses a group offsets file; any damage is `CorruptLog` naming the file.
pub(crate) fn decode(path: &Path, bytes: &[u8], group: &str) -> Result<GroupOffsets> {
    let corrupt = |position: usize, reason: &str| Error::CorruptLog {
        path: path.to_path_buf(),
        position: position as u64,
        offset: None,
        reason: reason.to_owned(),
    };
    if bytes.len() < MAGIC.len() + 4 + 4 + 4 + 4 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt(
            0,
            "not a group offsets file (bad magic or too short)",
        ));
    }
    let body = bytes.len() - 4;
    if crc32c::crc32c(&bytes[..body]) != u32_at(bytes, body) {
        return Err(corrupt(body, "checksum mismatch"));
    }
    let mut r = Reader {
        path,
        buf: &bytes[..body],
        at: MAGIC.len(),
    };
    let version = r.u32()?;
    if version != VERSION {
        return Err(corrupt(MAGIC.len(), &format!("unknown version {version}")));
    }
    let stored = r.string()?;
    if stored != group {
        return Err(corrupt(
            MAGIC.len() + 4,
            &format!("file belongs to group '{stored}', not '{group}'"),
        ));
    }
    let count = r.u32()?;
    let mut offsets = GroupOffsets::new();
    for _ in 0..count {
        let topic = r.string()?;
        let partition = r.u32()?;
        let offset = r.u64()?;
        let metadata = r.string()?;
        offsets.insert((topic, partition), (offset, metadata));
    }
    if r.at != body {
        return Err(corrupt(r.at, "trailing bytes after the last entry"));
    }
    Ok(offsets)
}

/// The group id a group offsets file belongs to (its name may be shortened).
pub(crate) fn stored_group_id(path: &Path, bytes: &[u8]) -> Result<String> {
    let mut r = Reader {
        path,
        buf: bytes,
        at: MAGIC.len(),
    };
    if bytes.get(..MAGIC.len()) != Some(MAGIC.as_slice()) {
        return Err(r.corrupt("not a group offsets file (bad magic)"));
    }
    r.u32()?; // version, checked when the file is decoded
    r.string()
}

pub(crate) fn to_committed(offsets: &GroupOffsets) -> Vec<CommittedOffset> {
    offsets
        .iter()
        .map(|((topic, partition), (offset, metadata))| CommittedOffset {
            topic: topic.clone(),
            partition: *partition,
            offset: *offset,
            metadata: metadata.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_safe_and_distinct() {
        assert_eq!(file_name("app-1.x_y"), "app-1.x_y.offsets");
        assert_eq!(file_name("a/b c"), "a%2Fb%20c.offsets");
        assert_eq!(file_name("."), "..offsets");
        let long_a = file_name(&"é".repeat(300));
        let long_b = file_name(&format!("{}x", "é".repeat(300)));
        assert!(long_a.len() <= MAX_NAME + OFFSETS_SUFFIX.len());
        assert_ne!(long_a, long_b);
    }

    #[test]
    fn round_trip_any_string() {
        let mut offsets = GroupOffsets::new();
        offsets.insert(("t".into(), 0), (5, String::new()));
        offsets.insert(("t".into(), 1), (7, "stream-time=9\n\0ü".into()));
        let path = Path::new("g.offsets");
        let bytes = encode("g", &offsets);
        assert_eq!(decode(path, &bytes, "g").unwrap(), offsets);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(matches!(
                decode(path, &bad, "g"),
                Err(Error::CorruptLog { .. })
            ));
        }
        assert!(decode(path, &bytes[..bytes.len() - 1], "g").is_err());
    }
}
