//! The store's log: append-only segment files of CRC-framed records, the
//! write buffer in front of the active segment, and reads of single frames.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Location;
use super::files::{io, segment_name, sync_dir};
use super::mmap::Map;
use crate::error::{Error, Result};
use crate::log::Header;
use crate::log::format::{self, BODY_AT, CRC_AT, MAX_FRAME, MIN_FRAME, OFFSET_AT};
use crate::log::writeback::Writeback;

/// Where the key length field of a frame is; the key follows it.
pub(super) const KEY_LEN_AT: usize = BODY_AT + 8;

/// The size of a data frame (no headers) with this key and value length.
#[inline]
pub(super) fn data_frame_size(key_len: usize, value_len: usize) -> usize {
    MIN_FRAME + key_len + value_len
}

pub(super) struct Segment {
    /// The sequence number of the segment's first frame, which names the file.
    pub base: u64,
    pub path: PathBuf,
    pub file: Arc<File>,
    /// Bytes in the file (the write buffer comes after them).
    pub len: u64,
    /// Closed segments are read through a memory map.
    map: Option<Map>,
}

impl Segment {
    pub fn open(base: u64, path: PathBuf) -> Result<Self> {
        let file = io(&path, OpenOptions::new().read(true).write(true).open(&path))?;
        let len = io(&path, file.metadata())?.len();
        Ok(Segment {
            base,
            path,
            file: Arc::new(file),
            len,
            map: None,
        })
    }

    fn create(dir: &Path, base: u64) -> Result<Self> {
        let path = dir.join(segment_name(base));
        // Names only grow and everything after the last commit is removed on
        // open, so a file of this name can only be a leftover: replace it.
        let file = io(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path),
        )?;
        Ok(Segment {
            base,
            path,
            file: Arc::new(file),
            len: 0,
            map: None,
        })
    }
}

/// Appends frames and reads them back.
pub(super) struct SegmentLog {
    dir: PathBuf,
    segment_bytes: u64,
    write_buffer_bytes: usize,
    /// Oldest first; never empty, the last one is the active segment.
    pub segments: Vec<Segment>,
    /// The active segment's tail that is not in its file yet; reads consult it.
    buf: Vec<u8>,
    /// The sequence number (frame offset field) of the next frame.
    pub next_seq: u64,
    /// Bytes of all frames in `segments`, buffered ones included.
    pub total_bytes: u64,
    /// The first segment written since the last fsync.
    unsynced_from: Option<usize>,
    /// The active segment's early writeback (`crate::log::writeback`): a
    /// commit's fsync then finds little left to write.
    writeback: Writeback,
    /// Segment files were created since the directory was last fsynced.
    dir_unsynced: bool,
}

impl SegmentLog {
    /// A log over recovered segments (possibly none: then segment `next_seq`
    /// is created).
    pub fn new(
        dir: &Path,
        segment_bytes: u64,
        write_buffer_bytes: usize,
        mut segments: Vec<Segment>,
        next_seq: u64,
    ) -> Result<Self> {
        let mut dir_unsynced = false;
        if segments.is_empty() {
            segments.push(Segment::create(dir, next_seq)?);
            dir_unsynced = true;
        }
        let closed = segments.len() - 1;
        for s in &mut segments[..closed] {
            s.map = Map::new(&s.file, s.len);
        }
        let total_bytes = segments.iter().map(|s| s.len).sum();
        let writeback = Writeback::starting_at(segments[closed].len);
        Ok(SegmentLog {
            dir: dir.to_path_buf(),
            segment_bytes,
            write_buffer_bytes,
            segments,
            // Grows on demand: window stores keep many small stores open.
            buf: Vec::new(),
            next_seq,
            total_bytes,
            unsynced_from: None,
            writeback,
            dir_unsynced,
        })
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a log always has an active segment")
    }

    fn active_index(&self) -> usize {
        self.segments.len() - 1
    }

    /// The active segment's size, buffered bytes included.
    fn active_len(&self) -> u64 {
        self.active().len + self.buf.len() as u64
    }

    /// Where the next frame of `size` bytes goes, rolling first if it would
    /// take a non-empty active segment past `segment_bytes`.
    fn make_room(&mut self, size: usize) -> Result<(u32, u32)> {
        let len = self.active_len();
        if len > 0 && len + size as u64 > self.segment_bytes {
            self.roll()?;
        }
        let pos = self.active_len();
        // segment_bytes < 2^31, so a frame never starts past u32 positions.
        let pos = u32::try_from(pos).expect("segment positions fit u32");
        Ok((self.active_index() as u32, pos))
    }

    /// Appends one frame; returns its segment, position and size.
    pub fn append(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: i64,
        headers: &[Header<'_>],
    ) -> Result<(u32, u32, usize)> {
        let len = |b: Option<&[u8]>| b.map_or(0, <[u8]>::len);
        let headers_len: usize = headers.iter().map(|h| 8 + h.key.len() + len(h.value)).sum();
        let size = MIN_FRAME
            .saturating_add(len(key))
            .saturating_add(len(value))
            .saturating_add(headers_len);
        if size > MAX_FRAME {
            return Err(Error::Store(format!(
                "record of {size} bytes exceeds the 2 GiB frame limit"
            )));
        }
        let (seg, pos) = self.make_room(size)?;
        let start = self.buf.len();
        format::encode_frame(&mut self.buf, timestamp, key, value, headers);
        format::finish_frame(&mut self.buf[start..], self.next_seq);
        self.appended(size)?;
        Ok((seg, pos, size))
    }

    /// Appends a copy of a finished frame (a store frame, or a changelog
    /// record's frame from the embedded log: the same format) under the next
    /// sequence number. Its CRC is carried over, not recomputed (see
    /// [`crc_with_offset`]): a frame whose CRC was right stays right, and
    /// one whose CRC was wrong stays wrong, so a read still detects it.
    pub fn append_copy(&mut self, frame: &[u8]) -> Result<(u32, u32)> {
        let (seg, pos) = self.make_room(frame.len())?;
        let start = self.buf.len();
        self.buf.extend_from_slice(frame);
        let copy = &mut self.buf[start..];
        let crc = crc_with_offset(copy, self.next_seq);
        copy[OFFSET_AT..BODY_AT].copy_from_slice(&self.next_seq.to_be_bytes());
        copy[CRC_AT..OFFSET_AT].copy_from_slice(&crc.to_be_bytes());
        self.appended(frame.len())?;
        Ok((seg, pos))
    }

    fn appended(&mut self, size: usize) -> Result<()> {
        self.next_seq += 1;
        self.total_bytes += size as u64;
        self.unsynced_from.get_or_insert(self.active_index());
        if self.buf.len() >= self.write_buffer_bytes {
            self.write_buffer()?;
        }
        Ok(())
    }

    /// Closes the active segment and starts a new one named by the next
    /// sequence number. Nothing is fsynced here: `sync` does that at commit.
    pub fn roll(&mut self) -> Result<()> {
        self.write_buffer()?;
        let closing = self.segments.last_mut().expect("an active segment");
        closing.map = Map::new(&closing.file, closing.len);
        self.writeback.closing(&closing.file, closing.len);
        let segment = Segment::create(&self.dir, self.next_seq)?;
        self.segments.push(segment);
        self.dir_unsynced = true;
        self.writeback = Writeback::starting_at(0);
        Ok(())
    }

    /// Writes the buffered tail into the active segment's file.
    pub fn write_buffer(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let active = self.segments.last_mut().expect("an active segment");
        io(
            &active.path,
            active.file.write_all_at(&self.buf, active.len),
        )?;
        active.len += self.buf.len() as u64;
        self.buf.clear();
        self.writeback.after_append(&active.file, active.len);
        Ok(())
    }

    /// Writes the buffer and fsyncs every segment written since the last
    /// sync, then the directory if segment files were created.
    pub fn sync(&mut self) -> Result<()> {
        self.write_buffer()?;
        // Idle stores (old window segments) should not keep a large buffer.
        self.buf.shrink_to(64 << 10);
        if let Some(from) = self.unsynced_from.take() {
            for s in &self.segments[from..] {
                io(&s.path, s.file.sync_data())?;
            }
            self.writeback.flushed_to(self.active().len);
        }
        if self.dir_unsynced {
            sync_dir(&self.dir)?;
            self.dir_unsynced = false;
        }
        Ok(())
    }

    /// Calls `f` with the data frame at `loc` (whose key is `key`) once it
    /// is checked: CRC, key and value length.
    fn with_frame<T>(&self, key: &[u8], loc: Location, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
        let size = data_frame_size(key.len(), loc.value_len as usize);
        let seg = &self.segments[loc.seg as usize];
        let pos = u64::from(loc.pos);
        let start = pos as usize;
        let check = |frame: &[u8]| check_frame(frame, key, loc.value_len as usize, &seg.path, pos);
        if let Some(map) = &seg.map {
            let Some(frame) = map.bytes().get(start..start + size) else {
                return Err(Error::CorruptLog {
                    path: seg.path.clone(),
                    position: pos,
                    offset: None,
                    reason: "the index points past the end of the segment".into(),
                });
            };
            check(frame)?;
            return Ok(f(frame));
        }
        if loc.seg as usize == self.active_index() && pos >= seg.len {
            // Still in the write buffer: no syscall.
            let frame = &self.buf[(pos - seg.len) as usize..][..size];
            check(frame)?;
            return Ok(f(frame));
        }
        let mut frame = vec![0u8; size];
        io(&seg.path, seg.file.read_exact_at(&mut frame, pos))?;
        check(&frame)?;
        Ok(f(&frame))
    }

    /// Hints the CPU to fetch the data frame at `loc` (key of `key_len`
    /// bytes) when it is in a memory-mapped segment.
    #[inline]
    pub fn prefetch_frame(&self, key_len: usize, loc: Location) {
        let Some(map) = &self.segments[loc.seg as usize].map else {
            return;
        };
        let size = data_frame_size(key_len, loc.value_len as usize);
        let Some(frame) = map.bytes().get(loc.pos as usize..loc.pos as usize + size) else {
            return;
        };
        // Every cache line of the frame (the CRC check reads it all).
        let skew = frame.as_ptr() as usize & 63;
        let line0 = frame.as_ptr().wrapping_sub(skew);
        for at in (0..skew + size).step_by(64) {
            crate::window::prefetch_read(line0.wrapping_add(at).cast());
        }
    }

    /// Copies the checked data frame at `loc` into `out`.
    pub fn read_frame_into(&self, key: &[u8], loc: Location, out: &mut Vec<u8>) -> Result<()> {
        self.with_frame(key, loc, |frame| {
            out.clear();
            out.extend_from_slice(frame);
        })
    }

    /// The value and timestamp of the data frame at `loc`.
    pub fn read_value(&self, key: &[u8], loc: Location) -> Result<(Vec<u8>, i64)> {
        let value_at = KEY_LEN_AT + 4 + key.len() + 4;
        self.with_frame(key, loc, |frame| {
            let value = frame[value_at..value_at + loc.value_len as usize].to_vec();
            (value, format::i64_at(frame, BODY_AT))
        })
    }

    /// Calls `f` with the value of the data frame at `loc`, in place.
    pub fn with_value<T>(
        &self,
        key: &[u8],
        loc: Location,
        f: impl FnOnce(&[u8]) -> T,
    ) -> Result<T> {
        let value_at = KEY_LEN_AT + 4 + key.len() + 4;
        self.with_frame(key, loc, |frame| {
            f(&frame[value_at..value_at + loc.value_len as usize])
        })
    }

    /// Drops the first `n` segments from the log (their files are the
    /// caller's to remove) and returns them.
    pub fn forget_first(&mut self, n: usize) -> Vec<Segment> {
        assert!(n < self.segments.len(), "the active segment stays");
        let old: Vec<Segment> = self.segments.drain(..n).collect();
        self.total_bytes -= old.iter().map(|s| s.len).sum::<u64>();
        self.unsynced_from = self.unsynced_from.map(|i| i.saturating_sub(n));
        old
    }

    /// Size of the segment files once the buffer is written.
    pub fn size_on_disk(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum::<u64>() + self.buf.len() as u64
    }
}

/// The CRC `frame` has once its offset field holds `offset`, from the CRC
/// field it has now: 16 bytes of CRC work instead of the whole frame.
///
/// The frame CRC takes the offset last (`log/format.rs`), and CRC-32C is
/// linear over GF(2): two messages that differ only in their last 8 bytes
/// have CRCs that differ by the CRC, run from a zero state without the
/// final inversion, of the XOR of those bytes. Whatever the body holds
/// drops out.
#[inline]
pub(super) fn crc_with_offset(frame: &[u8], offset: u64) -> u32 {
    let old = format::u64_at(frame, OFFSET_AT);
    // `crc32c_append` inverts the state on the way in and out: starting
    // from !0 runs from a zero state, and inverting the result undoes the
    // final inversion.
    let delta = !crc32c::crc32c_append(u32::MAX, &(old ^ offset).to_be_bytes());
    format::u32_at(frame, CRC_AT) ^ delta
}

fn check_frame(
    frame: &[u8],
    key: &[u8],
    value_len: usize,
    path: &Path,
    position: u64,
) -> Result<()> {
    let reason = if !format::crc_ok(frame) {
        "CRC mismatch"
    } else if format::i32_at(frame, KEY_LEN_AT) != key.len() as i32
        || &frame[KEY_LEN_AT + 4..KEY_LEN_AT + 4 + key.len()] != key
    {
        "the frame holds another key than the index says"
    } else if format::i32_at(frame, KEY_LEN_AT + 4 + key.len()) != value_len as i32 {
        "the frame holds another value length than the index says"
    } else {
        return Ok(());
    };
    Err(Error::CorruptLog {
        path: path.to_path_buf(),
        position,
        offset: Some(format::u64_at(frame, OFFSET_AT)),
        reason: reason.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The carried CRC equals the one computed over the frame with its new
    /// offset, whatever the body; a frame that was corrupt stays corrupt.
    #[test]
    fn a_crc_carried_to_a_new_offset_is_the_computed_one() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for round in 0..200 {
            let key = next().to_be_bytes();
            let value = vec![next() as u8; (next() % 300) as usize];
            let mut frame = Vec::new();
            let value = (round % 5 != 0).then_some(&value[..]);
            format::encode_frame(
                &mut frame,
                next() as i64,
                Some(&key[..(round % 9)]),
                value,
                &[],
            );
            format::finish_frame(&mut frame, next());
            let offset = if round % 7 == 0 {
                format::u64_at(&frame, OFFSET_AT)
            } else {
                next()
            };
            let carried = crc_with_offset(&frame, offset);
            frame[OFFSET_AT..BODY_AT].copy_from_slice(&offset.to_be_bytes());
            assert_eq!(carried, format::frame_crc(&frame), "round {round}");

            let at = BODY_AT + (next() as usize % (frame.len() - BODY_AT));
            frame[at] ^= 1 << (next() % 8);
            frame[CRC_AT..OFFSET_AT].copy_from_slice(&carried.to_be_bytes());
            let moved = crc_with_offset(&frame, offset.wrapping_add(1));
            frame[OFFSET_AT..BODY_AT].copy_from_slice(&offset.wrapping_add(1).to_be_bytes());
            frame[CRC_AT..OFFSET_AT].copy_from_slice(&moved.to_be_bytes());
            assert!(
                !format::crc_ok(&frame),
                "round {round}: corruption carried over"
            );
        }
    }
}
