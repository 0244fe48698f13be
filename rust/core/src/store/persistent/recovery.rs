//! Opening a store: scan the segments, rebuild the index as of the last
//! commit marker, and cut away everything after it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Location;
use super::files::{MANIFEST_FILE, io, remove_if_exists, sync_dir};
use super::index::KeyIndex;
use super::segment_log::{KEY_LEN_AT, Segment};
use crate::error::{Error, Result};
use crate::log::format::{self, FrameView, LENGTH_SIZE, MIN_FRAME};
use crate::store::key::IndexKey;

/// The header key that marks a commit marker frame.
pub(super) const COMMIT_HEADER: &str = "strom.commit";
/// Large positional reads while scanning.
const SCAN_CHUNK: usize = 1 << 20;

/// What a frame is.
pub(super) enum Kind<'f> {
    Data {
        key: &'f [u8],
        /// None for a tombstone.
        value_len: Option<usize>,
    },
    Commit {
        metadata: &'f [u8],
        /// Set on the marker that ends a compaction: the first segment of its output.
        compaction_base: Option<u64>,
    },
}

/// Checks a CRC-valid frame's structure and says what it is.
pub(super) fn classify(frame: &[u8]) -> std::result::Result<(FrameView, Kind<'_>), String> {
    let view = format::decode(frame)?;
    if let Some(key) = view.key(frame) {
        if view.header_count != 0 {
            return Err("a data frame with headers".into());
        }
        let value_len = view.value.map(|(_, len)| len);
        return Ok((view, Kind::Data { key, value_len }));
    }
    let headers = format::decode_headers(frame, &view)?;
    let (Some((start, len)), [(name, compaction)]) = (view.value, headers.as_slice()) else {
        return Err("a frame without key that is not a commit marker".into());
    };
    if name != COMMIT_HEADER {
        return Err(format!("unknown control frame '{name}'"));
    }
    let compaction_base = match compaction {
        None => None,
        Some(b) if b.len() == 8 => Some(u64::from_be_bytes(b[..].try_into().expect("8 bytes"))),
        Some(_) => return Err("bad compaction base in a commit marker".into()),
    };
    let metadata = &frame[start..start + len];
    Ok((
        view,
        Kind::Commit {
            metadata,
            compaction_base,
        },
    ))
}

/// Reads a segment's frames in order with large positional reads.
struct Scanner<'a> {
    file: &'a File,
    path: &'a Path,
    size: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_pos: u64,
    /// Index in `buf` of the next frame.
    at: usize,
}

enum Step<'b> {
    End,
    Frame(&'b [u8]),
    Bad(String),
}

impl<'a> Scanner<'a> {
    fn new(file: &'a File, path: &'a Path, size: u64) -> Self {
        Scanner {
            file,
            path,
            size,
            buf: Vec::new(),
            buf_pos: 0,
            at: 0,
        }
    }

    fn position(&self) -> u64 {
        self.buf_pos + self.at as u64
    }

    /// Makes `buf[at..]` hold at least `n` bytes (the caller checked that the file has them).
    fn fill(&mut self, n: usize) -> Result<()> {
        if self.buf.len() - self.at >= n {
            return Ok(());
        }
        self.buf.drain(..self.at);
        self.buf_pos += self.at as u64;
        self.at = 0;
        let have = self.buf.len();
        let end = self.buf_pos + have as u64;
        let want = n.max(SCAN_CHUNK).min((self.size - self.buf_pos) as usize);
        self.buf.resize(want, 0);
        io(
            self.path,
            self.file.read_exact_at(&mut self.buf[have..], end),
        )
    }

    /// The next frame whose length fits the file and whose CRC is right.
    fn next(&mut self) -> Result<Step<'_>> {
        let pos = self.position();
        if pos >= self.size {
            return Ok(Step::End);
        }
        if self.size - pos < LENGTH_SIZE as u64 {
            return Ok(Step::Bad("cut-off frame length".into()));
        }
        self.fill(LENGTH_SIZE)?;
        let length = format::u32_at(&self.buf, self.at);
        let Some(total) = format::frame_size(length) else {
            return Ok(Step::Bad(format!("impossible frame length {length}")));
        };
        if pos + total as u64 > self.size {
            return Ok(Step::Bad(format!(
                "frame of {total} bytes runs past the end of the file ({} bytes)",
                self.size
            )));
        }
        self.fill(total)?;
        let frame = &self.buf[self.at..self.at + total];
        if !format::crc_ok(frame) {
            return Ok(Step::Bad("CRC mismatch".into()));
        }
        self.at += total;
        Ok(Step::Frame(frame))
    }
}

/// The store as of its last commit marker.
pub(super) struct Recovered {
    /// The segments up to the one holding the last commit marker (truncated
    /// right after it); empty when there is no commit marker.
    pub segments: Vec<Segment>,
    pub index: KeyIndex,
    pub next_seq: u64,
    /// The metadata of the last commit marker.
    pub committed: Option<Vec<u8>>,
    /// The output start of the latest committed compaction.
    pub compaction_base: Option<u64>,
}

struct CommitPoint {
    segment: usize,
    end: u64,
    seq: u64,
}

/// The first frame that failed a check.
struct BadPoint {
    segment: usize,
    position: u64,
    /// The sequence number the frame should have carried.
    expected: u64,
    reason: String,
}

/// Scans `files` (segments from the manifest's `base` on, in order), builds
/// the index as of the last commit marker and removes what follows it.
pub(super) fn recover(dir: &Path, base: u64, files: Vec<(u64, PathBuf)>) -> Result<Recovered> {
    let mut segments = files
        .into_iter()
        .map(|(b, path)| Segment::open(b, path))
        .collect::<Result<Vec<_>>>()?;

    let mut index = KeyIndex::new();
    // Updates since the last commit marker, applied when the next one is read.
    let mut pending: Vec<(IndexKey, Option<Location>)> = Vec::new();
    let mut commit: Option<CommitPoint> = None;
    let mut committed: Option<Vec<u8>> = None;
    let mut compaction_base = None;
    // The store starts at segment `base` (0 until a compaction): a missing
    // first segment is a jump like any other.
    let mut expected = base;
    let mut bad: Option<BadPoint> = None;

    'segments: for (i, seg) in segments.iter().enumerate() {
        let want = expected;
        if seg.base != want {
            bad = Some(BadPoint {
                segment: i,
                position: 0,
                expected: want,
                reason: format!(
                    "the segment starts at sequence number {} but {want} was expected \
                     (a segment file is missing)",
                    seg.base
                ),
            });
            break;
        }
        let mut scanner = Scanner::new(&seg.file, &seg.path, seg.len);
        loop {
            let position = scanner.position();
            let seq = expected;
            let fail = |reason: String| BadPoint {
                segment: i,
                position,
                expected: seq,
                reason,
            };
            let frame = match scanner.next()? {
                Step::End => break,
                Step::Bad(reason) => {
                    bad = Some(fail(reason));
                    break 'segments;
                }
                Step::Frame(frame) => frame,
            };
            let (view, kind) = match classify(frame) {
                Ok(c) => c,
                Err(reason) => {
                    bad = Some(fail(reason));
                    break 'segments;
                }
            };
            if view.offset != seq {
                bad = Some(fail(format!(
                    "sequence number {} where {seq} was expected",
                    view.offset
                )));
                break 'segments;
            }
            let Ok(pos) = u32::try_from(position) else {
                bad = Some(fail("frame position beyond 4 GiB".into()));
                break 'segments;
            };
            match kind {
                Kind::Data { key, value_len } => {
                    let loc = value_len.map(|len| Location {
                        seg: i as u32,
                        pos,
                        value_len: len as u32,
                    });
                    pending.push((key.into(), loc));
                }
                Kind::Commit {
                    metadata,
                    compaction_base: c,
                } => {
                    index.reserve(pending.len());
                    for (key, loc) in pending.drain(..) {
                        match loc {
                            Some(loc) => index.insert(&key, loc),
                            None => index.remove(&key),
                        };
                    }
                    commit = Some(CommitPoint {
                        segment: i,
                        end: position + frame.len() as u64,
                        seq,
                    });
                    committed = Some(metadata.to_vec());
                    if c.is_some() {
                        compaction_base = c;
                    }
                }
            }
            expected = seq + 1;
        }
    }

    if let Some(b) = &bad {
        let seg = &segments[b.segment];
        if commit_marker_after(&segments, b.segment, b.position + 1, b.expected)? {
            return Err(Error::CorruptLog {
                path: seg.path.clone(),
                position: b.position,
                offset: Some(b.expected),
                reason: format!(
                    "{}; a later commit marker exists, so this is committed data",
                    b.reason
                ),
            });
        }
    }
    if commit.is_none() && base > 0 {
        return Err(Error::CorruptLog {
            path: dir.join(MANIFEST_FILE),
            position: 0,
            offset: Some(base),
            reason: format!(
                "the manifest says segment {base} starts the store, \
                 but no commit marker was found from it on"
            ),
        });
    }

    let bad_path = bad.as_ref().map(|b| segments[b.segment].path.clone());
    // Cut away everything after the last commit marker.
    let keep = commit.as_ref().map_or(0, |c| c.segment + 1);
    let mut dropped = 0u64;
    let mut removed_files = false;
    for seg in segments.drain(keep..) {
        dropped += seg.len;
        remove_if_exists(&seg.path)?;
        removed_files = true;
    }
    if let Some(c) = &commit {
        let seg = &mut segments[c.segment];
        if seg.len > c.end {
            dropped += seg.len - c.end;
            io(
                &seg.path,
                seg.file.set_len(c.end).and_then(|()| seg.file.sync_all()),
            )?;
            seg.len = c.end;
        }
    }
    if removed_files {
        // A removal that is not durable would bring stale frames back after a crash.
        sync_dir(dir)?;
    }
    match (&bad, bad_path) {
        (Some(b), Some(path)) => ::log::warn!(
            "state store {}: {} at byte position {} of {}; no commit marker follows, \
             so it is an uncommitted tail: discarded {dropped} bytes after the last commit",
            dir.display(),
            b.reason,
            b.position,
            path.display(),
        ),
        _ if dropped > 0 => ::log::info!(
            "state store {}: discarded {dropped} bytes written after the last commit",
            dir.display()
        ),
        _ => {}
    }

    Ok(Recovered {
        segments,
        index,
        next_seq: commit.as_ref().map_or(0, |c| c.seq + 1),
        committed,
        compaction_base,
    })
}

/// Is there a valid commit marker with a sequence number of at least
/// `min_seq` anywhere from (`segment`, `from`) on? Searched at every byte
/// position, since the frame boundaries past a bad frame are unknown.
fn commit_marker_after(
    segments: &[Segment],
    segment: usize,
    from: u64,
    min_seq: u64,
) -> Result<bool> {
    for (j, seg) in segments.iter().enumerate().skip(segment) {
        let start = if j == segment { from } else { 0 };
        if start >= seg.len {
            continue;
        }
        let mut data = vec![0u8; (seg.len - start) as usize];
        io(&seg.path, seg.file.read_exact_at(&mut data, start))?;
        for p in 0..data.len().saturating_sub(MIN_FRAME - 1) {
            if is_commit_marker_at(&data[p..], min_seq) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

fn is_commit_marker_at(data: &[u8], min_seq: u64) -> bool {
    // Cheap filter first: a commit marker has a null key.
    if data.len() < MIN_FRAME || format::i32_at(data, KEY_LEN_AT) != -1 {
        return false;
    }
    let Some(total) = format::frame_size(format::u32_at(data, 0)) else {
        return false;
    };
    if total > data.len() || !format::crc_ok(&data[..total]) {
        return false;
    }
    matches!(classify(&data[..total]), Ok((view, Kind::Commit { .. })) if view.offset >= min_seq)
}
