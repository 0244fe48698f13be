//! One segment: a `.log` file of frames, its sparse `.index`, and for closed
//! segments a `.seginfo` summary (largest timestamp, last offset).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fsutil::{io, remove_if_exists};
use crate::log::format::{self, FrameView, LENGTH_SIZE};

pub(crate) const LOG_SUFFIX: &str = ".log";
pub(crate) const INDEX_SUFFIX: &str = ".index";
pub(crate) const SEGINFO_SUFFIX: &str = ".seginfo";
/// Any file being written by the cleaner; leftovers are removed on open.
pub(crate) const CLEANED_SUFFIX: &str = ".cleaned";
/// A compacted copy of a segment, renamed over the `.log` when complete.
pub(crate) const CLEANED_LOG_SUFFIX: &str = ".log.cleaned";

/// Bytes per index entry: relative offset u32 + position u32.
pub(crate) const INDEX_ENTRY: usize = 8;
const SEGINFO_MAGIC: &[u8; 4] = b"SGI1";
const SEGINFO_LEN: usize = 4 + 8 + 8 + 8 + 4;
/// Large positional reads while scanning.
const SCAN_CHUNK: usize = 1 << 20;

pub(crate) fn file_name(base: u64, suffix: &str) -> String {
    format!("{base:020}{suffix}")
}

/// The base offset of a segment file name like `00000000000000000042.log`.
pub(crate) fn parse_base(name: &str, suffix: &str) -> Option<u64> {
    let stem = name.strip_suffix(suffix)?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    pub relative_offset: u32,
    pub position: u32,
}

/// What a scan of a segment's frames found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// Bytes of valid frames from the start of the file.
    pub valid_size: u64,
    pub index: Vec<IndexEntry>,
    pub bytes_since_index: u64,
    pub first_timestamp: Option<i64>,
    pub max_timestamp: Option<i64>,
    pub last_offset: Option<u64>,
    pub records: u64,
    /// The first frame that failed a check: position, its offset if readable, why.
    pub bad: Option<(u64, Option<u64>, String)>,
}

/// Reads frames sequentially with large positional reads.
pub(crate) struct FrameReader<'a> {
    file: &'a File,
    path: &'a Path,
    size: u64,
    buf: Vec<u8>,
    buf_pos: u64,
}

/// What [`FrameReader::next`] found at a position.
pub(crate) enum Next<'b> {
    End,
    Frame(&'b [u8]),
    /// The bytes at the position are not a plausible frame (torn, zeroed, or a
    /// corrupt length).
    Bad(String),
}

impl<'a> FrameReader<'a> {
    pub fn new(file: &'a File, path: &'a Path, size: u64) -> Self {
        FrameReader {
            file,
            path,
            size,
            buf: Vec::new(),
            buf_pos: 0,
        }
    }

    /// Makes `buf` hold the bytes `[pos, pos + n)`.
    fn fill(&mut self, pos: u64, n: usize) -> Result<()> {
        let have_end = self.buf_pos + self.buf.len() as u64;
        if pos >= self.buf_pos && pos + n as u64 <= have_end {
            return Ok(());
        }
        if pos >= self.buf_pos && pos <= have_end {
            self.buf.drain(..(pos - self.buf_pos) as usize);
        } else {
            self.buf.clear();
        }
        self.buf_pos = pos;
        let want = n.max(SCAN_CHUNK).min((self.size - pos) as usize);
        let old = self.buf.len();
        if want > old {
            self.buf.resize(want, 0);
            io(
                self.path,
                self.file
                    .read_exact_at(&mut self.buf[old..], pos + old as u64),
            )?;
        }
        Ok(())
    }

    /// The frame at `pos` (whose length fits in the file), without checking its contents.
    pub fn next(&mut self, pos: u64) -> Result<Next<'_>> {
        if pos >= self.size {
            return Ok(Next::End);
        }
        if self.size - pos < LENGTH_SIZE as u64 {
            return Ok(Next::Bad("truncated frame length".into()));
        }
        self.fill(pos, LENGTH_SIZE)?;
        let at = (pos - self.buf_pos) as usize;
        let length = format::u32_at(&self.buf, at);
        let Some(total) = format::frame_size(length) else {
            return Ok(Next::Bad(format!("impossible frame length {length}")));
        };
        if pos + total as u64 > self.size {
            return Ok(Next::Bad(format!(
                "frame of {total} bytes runs past the end of the file ({} bytes)",
                self.size
            )));
        }
        self.fill(pos, total)?;
        let at = (pos - self.buf_pos) as usize;
        Ok(Next::Frame(&self.buf[at..at + total]))
    }
}

/// Scans every frame, checking lengths, structure, CRCs and offsets
/// (`>= base`, increasing, within 2^32 of `base`), and rebuilds the index.
/// Stops at the first bad frame. `visit` sees each good frame.
pub(crate) fn scan(
    file: &File,
    path: &Path,
    base: u64,
    size: u64,
    index_interval: u64,
    mut visit: impl FnMut(u64, &[u8], &FrameView) -> Result<()>,
) -> Result<Scan> {
    let mut out = Scan::default();
    let mut reader = FrameReader::new(file, path, size);
    let mut pos = 0u64;
    loop {
        let frame = match reader.next(pos)? {
            Next::End => break,
            Next::Bad(reason) => {
                out.bad = Some((pos, None, reason));
                break;
            }
            Next::Frame(f) => f,
        };
        let view = match format::decode(frame) {
            Ok(v) => v,
            Err(reason) => {
                out.bad = Some((pos, None, reason.into()));
                break;
            }
        };
        if !format::crc_ok(frame) {
            out.bad = Some((pos, Some(view.offset), "CRC mismatch".into()));
            break;
        }
        let in_order = view.offset >= base
            && u32::try_from(view.offset - base).is_ok()
            && out.last_offset.is_none_or(|last| view.offset > last);
        if !in_order {
            out.bad = Some((
                pos,
                Some(view.offset),
                format!(
                    "offset {} out of order (segment base {base}, previous {:?})",
                    view.offset, out.last_offset
                ),
            ));
            break;
        }
        visit(pos, frame, &view)?;
        if out.bytes_since_index >= index_interval {
            out.index.push(IndexEntry {
                relative_offset: (view.offset - base) as u32,
                position: pos as u32,
            });
            out.bytes_since_index = 0;
        }
        let len = frame.len() as u64;
        out.bytes_since_index += len;
        out.first_timestamp.get_or_insert(view.timestamp);
        out.max_timestamp = Some(
            out.max_timestamp
                .map_or(view.timestamp, |m| m.max(view.timestamp)),
        );
        out.last_offset = Some(view.offset);
        out.records += 1;
        pos += len;
    }
    out.valid_size = pos;
    Ok(out)
}

/// Whether a valid frame with an offset above `after` starts anywhere in
/// `[from, size)`: tells corruption in the middle of a file from a torn tail.
pub(crate) fn valid_frame_after(
    file: &File,
    path: &Path,
    from: u64,
    size: u64,
    after: Option<u64>,
) -> Result<Option<u64>> {
    const HEAD: usize = format::BODY_AT;
    let mut window = Vec::new();
    let mut start = from;
    while start + format::MIN_FRAME as u64 <= size {
        let n = (size - start).min(SCAN_CHUNK as u64) as usize;
        window.resize(n, 0);
        io(path, file.read_exact_at(&mut window, start))?;
        if n < HEAD {
            break;
        }
        for i in 0..=n - HEAD {
            let pos = start + i as u64;
            let Some(total) = format::frame_size(format::u32_at(&window, i)) else {
                continue;
            };
            let offset = format::u64_at(&window, i + format::OFFSET_AT);
            if pos + total as u64 > size || after.is_some_and(|a| offset <= a) {
                continue;
            }
            let mut frame = vec![0u8; total];
            io(path, file.read_exact_at(&mut frame, pos))?;
            if format::crc_ok(&frame) && format::decode(&frame).is_ok() {
                return Ok(Some(pos));
            }
        }
        start += (n - HEAD + 1) as u64;
    }
    Ok(None)
}

/// A segment's summary, written when it is closed so that retention needs no scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegInfo {
    pub size: u64,
    pub max_timestamp: Option<i64>,
    pub last_offset: Option<u64>,
}

fn encode_seginfo(info: &SegInfo) -> Vec<u8> {
    let mut b = Vec::with_capacity(SEGINFO_LEN);
    b.extend_from_slice(SEGINFO_MAGIC);
    b.extend_from_slice(&info.size.to_be_bytes());
    b.extend_from_slice(&info.max_timestamp.unwrap_or(i64::MIN).to_be_bytes());
    b.extend_from_slice(&info.last_offset.unwrap_or(u64::MAX).to_be_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_be_bytes());
    b
}

fn decode_seginfo(b: &[u8]) -> Option<SegInfo> {
    if b.len() != SEGINFO_LEN
        || &b[..4] != SEGINFO_MAGIC
        || crc32c::crc32c(&b[..SEGINFO_LEN - 4]) != format::u32_at(b, SEGINFO_LEN - 4)
    {
        return None;
    }
    let max_timestamp = format::i64_at(b, 12);
    let last_offset = format::u64_at(b, 20);
    Some(SegInfo {
        size: format::u64_at(b, 4),
        max_timestamp: (max_timestamp != i64::MIN).then_some(max_timestamp),
        last_offset: (last_offset != u64::MAX).then_some(last_offset),
    })
}

fn encode_index(entries: &[IndexEntry]) -> Vec<u8> {
    let mut b = Vec::with_capacity(entries.len() * INDEX_ENTRY);
    for e in entries {
        b.extend_from_slice(&e.relative_offset.to_be_bytes());
        b.extend_from_slice(&e.position.to_be_bytes());
    }
    b
}

/// Parses an index file, rejecting it unless its size is a multiple of the
/// entry size and its entries increase and point inside the log.
fn decode_index(b: &[u8], log_size: u64) -> Option<Vec<IndexEntry>> {
    if !b.len().is_multiple_of(INDEX_ENTRY) {
        return None;
    }
    let entries: Vec<IndexEntry> = b
        .chunks_exact(INDEX_ENTRY)
        .map(|c| IndexEntry {
            relative_offset: format::u32_at(c, 0),
            position: format::u32_at(c, 4),
        })
        .collect();
    let increasing = entries
        .windows(2)
        .all(|w| w[0].relative_offset < w[1].relative_offset && w[0].position < w[1].position);
    let inside = entries
        .last()
        .is_none_or(|e| u64::from(e.position) + (format::MIN_FRAME as u64) <= log_size);
    (increasing && inside).then_some(entries)
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub base: u64,
    pub path: Arc<Path>,
    pub file: Arc<File>,
    pub size: u64,
    pub index: Vec<IndexEntry>,
    /// Entries of `index` already written to the `.index` file.
    pub index_persisted: usize,
    pub index_file: Option<Arc<File>>,
    pub bytes_since_index: u64,
    /// The first record's timestamp: `segment.ms` rolls count from it, as in Kafka.
    pub first_timestamp: Option<i64>,
    pub max_timestamp: Option<i64>,
    pub last_offset: Option<u64>,
}

fn open_rw(path: &Path, create: bool) -> Result<File> {
    io(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(path),
    )
}

impl Segment {
    pub fn sibling(&self, suffix: &str) -> PathBuf {
        self.path.with_file_name(file_name(self.base, suffix))
    }

    pub fn empty(base: u64, path: PathBuf, file: File) -> Self {
        Segment {
            base,
            path: path.into(),
            file: Arc::new(file),
            size: 0,
            index: Vec::new(),
            index_persisted: 0,
            index_file: None,
            bytes_since_index: 0,
            first_timestamp: None,
            max_timestamp: None,
            last_offset: None,
        }
    }

    /// A new, empty segment file.
    pub fn create(dir: &Path, base: u64) -> Result<Self> {
        let path = dir.join(file_name(base, LOG_SUFFIX));
        let file = open_rw(&path, true)?;
        let len = io(&path, file.metadata())?.len();
        if len != 0 {
            return Err(Error::CorruptLog {
                path,
                position: 0,
                offset: Some(base),
                reason: "a new segment's file already holds data".into(),
            });
        }
        remove_if_exists(&dir.join(file_name(base, INDEX_SUFFIX)))?;
        remove_if_exists(&dir.join(file_name(base, SEGINFO_SUFFIX)))?;
        Ok(Self::empty(base, path, file))
    }

    fn from_scan(base: u64, path: PathBuf, file: File, scan: &Scan) -> Self {
        let mut seg = Self::empty(base, path, file);
        seg.size = scan.valid_size;
        seg.index.clone_from(&scan.index);
        seg.bytes_since_index = scan.bytes_since_index;
        seg.first_timestamp = scan.first_timestamp;
        seg.max_timestamp = scan.max_timestamp;
        seg.last_offset = scan.last_offset;
        seg
    }

    /// Opens a closed segment, trusting its index and summary if they pass
    /// cheap checks, or rebuilding both from a full (CRC-checked) scan.
    pub fn open_closed(dir: &Path, base: u64, index_interval: u64) -> Result<Self> {
        let path = dir.join(file_name(base, LOG_SUFFIX));
        let file = open_rw(&path, false)?;
        let size = io(&path, file.metadata())?.len();
        if let Some((index, info)) = summarized(dir, base, &path, &file, size)? {
            let mut seg = Self::empty(base, path, file);
            seg.size = size;
            seg.index_persisted = index.len();
            seg.index = index;
            seg.max_timestamp = info.max_timestamp;
            seg.last_offset = info.last_offset;
            return Ok(seg);
        }
        ::log::info!("rebuilding index and summary of {}", path.display());
        let scan = scan(&file, &path, base, size, index_interval, |_, _, _| Ok(()))?;
        if let Some((position, offset, reason)) = scan.bad {
            return Err(Error::CorruptLog {
                path,
                position,
                offset,
                reason: format!("{reason} in a closed segment"),
            });
        }
        let mut seg = Self::from_scan(base, path, file, &scan);
        seg.write_index_file()?;
        seg.write_seginfo()?;
        Ok(seg)
    }

    /// Opens the active segment. Closed cleanly (`mark_clean`), it has a
    /// summary of exactly its size and an index, which are trusted after
    /// the checks `open_closed` makes (as Kafka trusts a log shut down
    /// cleanly); the summary is removed again, since it holds only until
    /// the next append. Otherwise it is scanned all, a torn tail truncated
    /// and its index rebuilt. Corruption followed by valid frames is an error.
    pub fn recover_active(dir: &Path, base: u64, index_interval: u64) -> Result<Self> {
        let path = dir.join(file_name(base, LOG_SUFFIX));
        let file = open_rw(&path, false)?;
        let size = io(&path, file.metadata())?.len();
        if let Some((index, info)) = summarized(dir, base, &path, &file, size)? {
            let first_timestamp = if size == 0 {
                None
            } else {
                let mut head = [0u8; format::BODY_AT + 8];
                io(&path, file.read_exact_at(&mut head, 0))?;
                Some(format::i64_at(&head, format::BODY_AT))
            };
            let mut seg = Self::empty(base, path, file);
            seg.size = size;
            // As a scan counts them: the bytes from the last indexed frame on.
            seg.bytes_since_index = size - index.last().map_or(0, |e| u64::from(e.position));
            seg.index_persisted = index.len();
            seg.index = index;
            seg.first_timestamp = first_timestamp;
            seg.max_timestamp = info.max_timestamp;
            seg.last_offset = info.last_offset;
            remove_if_exists(&seg.sibling(SEGINFO_SUFFIX))?;
            return Ok(seg);
        }
        let scan = scan(&file, &path, base, size, index_interval, |_, _, _| Ok(()))?;
        if let Some((position, offset, reason)) = &scan.bad {
            if let Some(at) =
                valid_frame_after(&file, &path, *position + 1, size, scan.last_offset)?
            {
                return Err(Error::CorruptLog {
                    path,
                    position: *position,
                    offset: offset.or(scan.last_offset.map(|o| o + 1)),
                    reason: format!(
                        "{reason}, followed by a valid frame at byte {at}; refusing to drop it"
                    ),
                });
            }
            ::log::warn!(
                "{}: truncating torn tail at byte position {position} ({reason}); {} bytes \
                 after the last valid record (offset {:?}) dropped",
                path.display(),
                size - position,
                scan.last_offset,
            );
            io(&path, file.set_len(*position))?;
            io(&path, file.sync_data())?;
        }
        let mut seg = Self::from_scan(base, path, file, &scan);
        // The active segment's index is rebuilt on every open; a stale summary
        // must not outlive its closing.
        remove_if_exists(&seg.sibling(SEGINFO_SUFFIX))?;
        seg.write_index_file()?;
        Ok(seg)
    }

    fn index_path(&self) -> PathBuf {
        self.sibling(INDEX_SUFFIX)
    }

    /// Rewrites the whole `.index` file from memory.
    pub fn write_index_file(&mut self) -> Result<()> {
        let path = self.index_path();
        let file = io(
            &path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path),
        )?;
        io(&path, file.write_all_at(&encode_index(&self.index), 0))?;
        self.index_persisted = self.index.len();
        self.index_file = Some(Arc::new(file));
        Ok(())
    }

    /// Writes index entries added since the last call; returns the file to fsync.
    pub fn persist_index(&mut self) -> Result<Arc<File>> {
        let path = self.index_path();
        if self.index_file.is_none() {
            let file = open_rw(&path, true)?;
            io(
                &path,
                file.set_len((self.index_persisted * INDEX_ENTRY) as u64),
            )?;
            self.index_file = Some(Arc::new(file));
        }
        let file = Arc::clone(self.index_file.as_ref().expect("opened above"));
        if self.index_persisted < self.index.len() {
            let bytes = encode_index(&self.index[self.index_persisted..]);
            io(
                &path,
                file.write_all_at(&bytes, (self.index_persisted * INDEX_ENTRY) as u64),
            )?;
            self.index_persisted = self.index.len();
        }
        Ok(file)
    }

    pub fn write_seginfo(&self) -> Result<()> {
        self.write_summary(true)
    }

    /// On a clean close, once the segment and its index are durable: its
    /// summary, which lets the next open skip the scan. Not fsynced: lost
    /// in a crash, the next open scans; kept, it describes durable data.
    pub fn mark_clean(&self) -> Result<()> {
        self.write_summary(false)
    }

    fn write_summary(&self, sync: bool) -> Result<()> {
        let path = self.sibling(SEGINFO_SUFFIX);
        let bytes = encode_seginfo(&SegInfo {
            size: self.size,
            max_timestamp: self.max_timestamp,
            last_offset: self.last_offset,
        });
        let file = io(
            &path,
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path),
        )?;
        io(
            &path,
            file.write_all_at(&bytes, 0)
                .and_then(|()| if sync { file.sync_data() } else { Ok(()) }),
        )
    }

    /// Makes the segment durable and writes its summary: called when it stops
    /// being the active segment, so that closed segments are always complete on disk.
    pub fn close(&mut self) -> Result<()> {
        io(&self.path, self.file.sync_data())?;
        let path = self.index_path();
        let index = self.persist_index()?;
        io(&path, index.sync_data())?;
        self.write_seginfo()?;
        // Closed segments keep no index file handle open.
        self.index_file = None;
        Ok(())
    }

    /// The file position to start reading `offset` from, and the offset of
    /// the frame expected there (None: the segment start).
    pub fn lookup(&self, offset: u64) -> (u64, Option<u64>) {
        let rel = offset.saturating_sub(self.base).min(u64::from(u32::MAX)) as u32;
        let i = self.index.partition_point(|e| e.relative_offset <= rel);
        if i == 0 {
            (0, None)
        } else {
            let e = self.index[i - 1];
            (
                u64::from(e.position),
                Some(self.base + u64::from(e.relative_offset)),
            )
        }
    }

    pub fn delete_files(&self) -> Result<()> {
        remove_if_exists(&self.index_path())?;
        remove_if_exists(&self.sibling(SEGINFO_SUFFIX))?;
        remove_if_exists(&self.path)
    }
}

/// A segment's index and summary, if both are there and pass cheap checks:
/// the summary is of the file's size, the index well-formed and its last
/// entry pointing at the frame it names.
fn summarized(
    dir: &Path,
    base: u64,
    path: &Path,
    file: &File,
    size: u64,
) -> Result<Option<(Vec<IndexEntry>, SegInfo)>> {
    let info = std::fs::read(dir.join(file_name(base, SEGINFO_SUFFIX)))
        .ok()
        .and_then(|b| decode_seginfo(&b))
        .filter(|i| i.size == size);
    let Some(info) = info else {
        return Ok(None);
    };
    let index = std::fs::read(dir.join(file_name(base, INDEX_SUFFIX)))
        .ok()
        .and_then(|b| decode_index(&b, size));
    match index {
        Some(index) if index_entry_ok(file, path, base, size, index.last())? => {
            Ok(Some((index, info)))
        }
        _ => Ok(None),
    }
}

/// Whether an index entry points at a frame holding the offset it claims.
fn index_entry_ok(
    file: &File,
    path: &Path,
    base: u64,
    size: u64,
    entry: Option<&IndexEntry>,
) -> Result<bool> {
    let Some(e) = entry else {
        return Ok(true);
    };
    let pos = u64::from(e.position);
    if pos + format::BODY_AT as u64 > size {
        return Ok(false);
    }
    let mut head = [0u8; format::BODY_AT];
    io(path, file.read_exact_at(&mut head, pos))?;
    let length_ok = format::frame_size(format::u32_at(&head, 0))
        .is_some_and(|total| pos + total as u64 <= size);
    Ok(
        length_ok
            && format::u64_at(&head, format::OFFSET_AT) == base + u64::from(e.relative_offset),
    )
}
