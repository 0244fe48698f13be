//! The index snapshot (`index.snapshot`): the index as of the last commit,
//! written when a store with nothing uncommitted is dropped, so that the
//! next `open` loads the keys instead of scanning every segment.
//!
//! It is a hint, never the truth: `open` takes it (reads and removes it)
//! and uses it only when it is whole (size, magic and CRC) and names
//! exactly the segment files on disk, each with the length and CRC-32C of
//! its bytes when the snapshot was written. Anything else (a torn or stale
//! snapshot, a changed or corrupted segment) is a full scan, as without a
//! snapshot, with the scan's errors. A removal lost in a crash is
//! harmless: the store's next durable write changes a segment.
//!
//! ```text
//! "STROMIX1" | hash seed u64 | next_seq u64 | segments u32
//! | (base u64, len u64, CRC-32C u32 of the file) per segment
//! | metadata: present u8, len u32, bytes | entries u64
//! | (key_len u32, key, seg u32, pos u32, value_len u32) per entry, in the
//!   index's bucket order
//! | CRC-32C u32 of everything before
//! ```
//!
//! The index is rebuilt with the saved hash seed, so the entries go back
//! into ascending buckets: a sequential pass rather than a million random
//! writes (what made a scan with the hash index slower than with a
//! B-tree).

use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Location;
use super::files::{io, remove_if_exists};
use super::index::KeyIndex;
use super::recovery::Recovered;
use super::segment_log::Segment;
use crate::error::{Error, Result};
use crate::window::keys::FastState;

pub(super) const SNAPSHOT_FILE: &str = "index.snapshot";
/// Ends in `.tmp`: `open` removes a leftover one.
const SNAPSHOT_TMP: &str = ".index.snapshot.tmp";
const MAGIC: &[u8; 8] = b"STROMIX1";

/// A store's committed state, as the snapshot holds it.
pub(super) struct Snapshot {
    pub next_seq: u64,
    /// Every segment, in order.
    pub segments: Vec<SegmentStamp>,
    pub committed: Option<Vec<u8>>,
    pub index: KeyIndex,
}

/// A segment file as it was: its length and the CRC-32C of its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SegmentStamp {
    pub base: u64,
    pub len: u64,
    crc: u32,
}

const STAMP_SIZE: usize = 20;

impl SegmentStamp {
    /// Reads the whole file: sequential, a small part of what a scan costs.
    pub fn of(segment: &Segment) -> Result<Self> {
        let path = &segment.path;
        let len = io(path, segment.file.metadata())?.len();
        let mut chunk = vec![0u8; (1 << 20).min(len as usize)];
        let (mut crc, mut at) = (0, 0);
        while at < len {
            let n = chunk.len().min((len - at) as usize);
            io(path, segment.file.read_exact_at(&mut chunk[..n], at))?;
            crc = crc32c::crc32c_append(crc, &chunk[..n]);
            at += n as u64;
        }
        Ok(SegmentStamp {
            base: segment.base,
            len,
            crc,
        })
    }
}

/// Writes the snapshot of a store whose files end at its last commit. Not
/// fsynced: a snapshot lost or torn in a crash fails its check and costs a
/// scan.
pub(super) fn write(
    dir: &Path,
    next_seq: u64,
    segments: &[SegmentStamp],
    committed: Option<&[u8]>,
    index: &KeyIndex,
) -> Result<()> {
    let keys: usize = index.iter().map(|(k, _)| k.len()).sum();
    let mut b = Vec::with_capacity(64 + segments.len() * STAMP_SIZE + index.len() * 16 + keys);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&index.hasher().seed().to_be_bytes());
    b.extend_from_slice(&next_seq.to_be_bytes());
    b.extend_from_slice(&(segments.len() as u32).to_be_bytes());
    for s in segments {
        b.extend_from_slice(&s.base.to_be_bytes());
        b.extend_from_slice(&s.len.to_be_bytes());
        b.extend_from_slice(&s.crc.to_be_bytes());
    }
    b.push(u8::from(committed.is_some()));
    let metadata = committed.unwrap_or_default();
    b.extend_from_slice(&(metadata.len() as u32).to_be_bytes());
    b.extend_from_slice(metadata);
    b.extend_from_slice(&(index.len() as u64).to_be_bytes());
    for (key, loc) in index.iter() {
        b.extend_from_slice(&(key.len() as u32).to_be_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(&loc.seg.to_be_bytes());
        b.extend_from_slice(&loc.pos.to_be_bytes());
        b.extend_from_slice(&loc.value_len.to_be_bytes());
    }
    b.extend_from_slice(&crc32c::crc32c(&b).to_be_bytes());
    let tmp = dir.join(SNAPSHOT_TMP);
    io(&tmp, fs::write(&tmp, &b))?;
    let path = dir.join(SNAPSHOT_FILE);
    io(&path, fs::rename(&tmp, &path))
}

/// Reads and removes the snapshot in `dir`: None when there is none or it
/// is not whole (logged).
pub(super) fn take(dir: &Path) -> Result<Option<Snapshot>> {
    let path = dir.join(SNAPSHOT_FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    // Used once: the store changes from here on.
    remove_if_exists(&path)?;
    let snapshot = decode(&bytes);
    if snapshot.is_none() {
        ::log::warn!(
            "ignoring the damaged index snapshot {}; scanning the segments",
            path.display()
        );
    }
    Ok(snapshot)
}

fn decode(bytes: &[u8]) -> Option<Snapshot> {
    let (body, crc) = bytes.split_last_chunk::<4>()?;
    if u32::from_be_bytes(*crc) != crc32c::crc32c(body) {
        return None;
    }
    let mut r = Reader(body);
    if r.take(8)? != MAGIC {
        return None;
    }
    let seed = r.u64()?;
    let next_seq = r.u64()?;
    let n = r.u32()? as usize;
    let mut segments = Vec::with_capacity(n.min(body.len() / STAMP_SIZE));
    for _ in 0..n {
        segments.push(SegmentStamp {
            base: r.u64()?,
            len: r.u64()?,
            crc: r.u32()?,
        });
    }
    let present = r.take(1)?[0] == 1;
    let len = r.u32()? as usize;
    let metadata = r.take(len)?;
    let committed = present.then(|| metadata.to_vec());
    let entries = usize::try_from(r.u64()?).ok()?;
    let mut index = KeyIndex::with_hasher(FastState::with_seed(seed));
    index.reserve(entries.min(body.len() / 16));
    for _ in 0..entries {
        let len = r.u32()? as usize;
        let key = r.take(len)?;
        let loc = Location {
            seg: r.u32()?,
            pos: r.u32()?,
            value_len: r.u32()?,
        };
        if loc.seg as usize >= segments.len() {
            return None;
        }
        index.insert(key, loc);
    }
    (r.0.is_empty() && index.len() == entries).then_some(Snapshot {
        next_seq,
        segments,
        committed,
        index,
    })
}

impl Snapshot {
    /// The store as the snapshot holds it, if `files` (the segment files
    /// from the manifest's base on) are exactly the ones it describes.
    pub fn recovered(self, files: &[(u64, PathBuf)]) -> Result<Option<Recovered>> {
        if self.committed.is_none() || files.len() != self.segments.len() {
            return Ok(None);
        }
        let mut segments = Vec::with_capacity(files.len());
        for ((base, path), want) in files.iter().zip(&self.segments) {
            if *base != want.base {
                return Ok(None);
            }
            let segment = Segment::open(*base, path.clone())?;
            if SegmentStamp::of(&segment)? != *want {
                return Ok(None);
            }
            segments.push(segment);
        }
        Ok(Some(Recovered {
            segments,
            index: self.index,
            next_seq: self.next_seq,
            committed: self.committed,
            compaction_base: None,
        }))
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(seg: u32, pos: u32) -> Location {
        Location {
            seg,
            pos,
            value_len: 5,
        }
    }

    #[test]
    fn round_trip_and_staleness() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        fs::write(&path, b"frames of the segment").unwrap();
        let files = vec![(0, path.clone())];
        let mut index = KeyIndex::new();
        index.insert(b"a", loc(0, 0));
        index.insert(b"a key longer than twenty-two bytes", loc(0, 7));
        index.insert(b"", loc(0, 9));
        let stamp = |p: &PathBuf| SegmentStamp::of(&Segment::open(0, p.clone()).unwrap()).unwrap();
        let write_now = |index: &KeyIndex| {
            write(dir.path(), 7, &[stamp(&path)], Some(b"meta"), index).unwrap();
        };

        write_now(&index);
        let r = take(dir.path())
            .unwrap()
            .unwrap()
            .recovered(&files)
            .unwrap()
            .unwrap();
        assert!(!dir.path().join(SNAPSHOT_FILE).exists());
        assert_eq!(
            (r.next_seq, r.committed.as_deref()),
            (7, Some(&b"meta"[..]))
        );
        assert_eq!(r.index.len(), 3);
        assert_eq!(r.index.hasher().seed(), index.hasher().seed());
        assert_eq!(
            r.index.get(b"a key longer than twenty-two bytes"),
            Some(loc(0, 7))
        );
        assert_eq!(r.index.get(b""), Some(loc(0, 9)));
        assert!(take(dir.path()).unwrap().is_none());

        // The segment grew, or changed in place: not the snapshot's.
        for change in [&b"frames of the segment+"[..], b"frames of the segmenT"] {
            write_now(&index);
            fs::write(&path, change).unwrap();
            let s = take(dir.path()).unwrap().unwrap();
            assert!(s.recovered(&files).unwrap().is_none());
        }
        // Another set of segment files.
        write_now(&index);
        let s = take(dir.path()).unwrap().unwrap();
        assert!(s.recovered(&[]).unwrap().is_none());
        // A location past the segments: not whole.
        index.insert(b"b", loc(1, 0));
        write_now(&index);
        assert!(take(dir.path()).unwrap().is_none());
    }
}
