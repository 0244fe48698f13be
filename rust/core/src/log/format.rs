//! Record frames, the unit of a segment file (layout in `README.md`).
//!
//! ```text
//!  0  length     u32   bytes after this field
//!  4  crc        u32   CRC-32C of bytes 16.. followed by bytes 8..16
//!  8  offset     u64
//! 16  timestamp  i64
//! 24  key len    i32   -1 = null, then the key bytes
//!  …  value len  i32   -1 = null, then the value bytes
//!  …  headers    i32   count, then per header: key len i32 + UTF-8 key,
//!                      value len i32 (-1 = null) + value bytes
//! ```
//!
//! The CRC takes the body first and the offset last, so a frame encoded
//! before its offset is known carries the body's CRC and is finished at
//! append time by extending that CRC over 8 bytes ([`encode_frame`],
//! [`finish_frame`]); a batch's frames are rather left without a CRC
//! ([`put_frame`]) and given theirs together once offsets are set
//! ([`seal_frames`]).

use crate::log::Header;
use crate::log::crc;

pub(crate) const LENGTH_SIZE: usize = 4;
pub(crate) const CRC_AT: usize = 4;
pub(crate) const OFFSET_AT: usize = 8;
pub(crate) const BODY_AT: usize = 16;
/// A frame with null key, null value and no headers.
pub(crate) const MIN_FRAME: usize = BODY_AT + 8 + 4 + 4 + 4;
/// Frames are addressed with i32 lengths inside, like Kafka's records.
pub(crate) const MAX_FRAME: usize = i32::MAX as usize;

#[inline]
pub(crate) fn u32_at(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
pub(crate) fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

#[inline]
pub(crate) fn u64_at(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
pub(crate) fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

/// The total size of a frame whose length field is `length`, if that length is possible.
#[inline]
pub(crate) fn frame_size(length: u32) -> Option<usize> {
    let total = length as usize + LENGTH_SIZE;
    (MIN_FRAME..=MAX_FRAME).contains(&total).then_some(total)
}

/// The CRC stored in a finished frame.
#[inline]
pub(crate) fn frame_crc(frame: &[u8]) -> u32 {
    crc::append(
        crc::append(0, &frame[BODY_AT..]),
        &frame[OFFSET_AT..BODY_AT],
    )
}

/// The CRCs of three finished frames, computed interleaved.
#[inline]
pub(crate) fn frame_crc3(frames: [&[u8]; 3]) -> [u32; 3] {
    let bodies = crc::append3([0; 3], frames.map(|f| &f[BODY_AT..]));
    [0, 1, 2].map(|i| crc::append(bodies[i], &frames[i][OFFSET_AT..BODY_AT]))
}

#[inline]
pub(crate) fn crc_ok(frame: &[u8]) -> bool {
    u32_at(frame, CRC_AT) == frame_crc(frame)
}

/// Sets the offset of an encoded frame whose crc field holds the body CRC,
/// and completes its CRC.
#[inline]
pub(crate) fn finish_frame(frame: &mut [u8], offset: u64) {
    let bytes = offset.to_be_bytes();
    frame[OFFSET_AT..BODY_AT].copy_from_slice(&bytes);
    let body_crc = u32_at(frame, CRC_AT);
    let crc = crc::append(body_crc, &bytes);
    frame[CRC_AT..OFFSET_AT].copy_from_slice(&crc.to_be_bytes());
}

/// Appends one frame (offset 0, crc = body CRC) to `buf`.
pub(crate) fn encode_frame(
    buf: &mut Vec<u8>,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) {
    let start = buf.len();
    put_frame(buf, timestamp, key, value, headers);
    let body_crc = crc::append(0, &buf[start + BODY_AT..]);
    buf[start + CRC_AT..start + OFFSET_AT].copy_from_slice(&body_crc.to_be_bytes());
}

/// Appends one frame with offset 0 and crc 0, for [`seal_frames`] to finish.
pub(crate) fn put_frame(
    buf: &mut Vec<u8>,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[Header<'_>],
) {
    let bytes_len = |b: Option<&[u8]>| b.map_or(0, <[u8]>::len);
    let headers_len: usize = headers
        .iter()
        .map(|h| 8 + h.key.len() + bytes_len(h.value))
        .sum();
    let total = MIN_FRAME + bytes_len(key) + bytes_len(value) + headers_len;
    assert!(
        total <= MAX_FRAME,
        "record of {total} bytes exceeds the 2 GiB frame limit"
    );
    buf.reserve(total);
    let start = buf.len();
    put_head(buf, total, timestamp, key);
    put_bytes(buf, value);
    buf.extend_from_slice(&(headers.len() as i32).to_be_bytes());
    for h in headers {
        put_bytes(buf, Some(h.key.as_bytes()));
        put_bytes(buf, h.value);
    }
    debug_assert_eq!(buf.len() - start, total);
}

/// A frame's length, offset and crc (0, set on append), timestamp and key.
#[inline]
fn put_head(buf: &mut Vec<u8>, total: usize, timestamp: i64, key: Option<&[u8]>) {
    buf.extend_from_slice(&((total - LENGTH_SIZE) as u32).to_be_bytes());
    buf.extend_from_slice(&[0u8; 12]);
    buf.extend_from_slice(&timestamp.to_be_bytes());
    put_bytes(buf, key);
}

/// [`put_frame`] of a record without headers whose value `value` writes
/// straight into `buf` (returning false for a null value, having written
/// nothing): the value is not built apart and copied in. Returns the
/// value's length (None: null).
///
/// # Panics
/// If the record exceeds the 2 GiB frame limit (`buf` is then left as it was).
pub(crate) fn put_frame_with(
    buf: &mut Vec<u8>,
    timestamp: i64,
    key: Option<&[u8]>,
    value: impl FnOnce(&mut Vec<u8>) -> bool,
) -> Option<usize> {
    let start = buf.len();
    // The length is patched once the value is written.
    put_head(buf, MIN_FRAME, timestamp, key);
    let length_at = buf.len();
    buf.extend_from_slice(&[0u8; 4]);
    let value_at = buf.len();
    let len = if value(buf) {
        Some(buf.len() - value_at)
    } else {
        buf.truncate(value_at);
        None
    };
    buf.extend_from_slice(&0i32.to_be_bytes()); // no headers
    let total = buf.len() - start;
    if total > MAX_FRAME {
        buf.truncate(start);
        panic!("record of {total} bytes exceeds the 2 GiB frame limit");
    }
    let field = len.map_or(-1, |l| l as i32);
    buf[length_at..value_at].copy_from_slice(&field.to_be_bytes());
    buf[start..start + LENGTH_SIZE].copy_from_slice(&((total - LENGTH_SIZE) as u32).to_be_bytes());
    len
}

/// Writes the CRC of every frame in `frames` (whole frames, their offsets
/// set), three frames at a time: one CRC's steps wait for each other, three
/// interleaved keep the instruction busy.
pub(crate) fn seal_frames(frames: &mut [u8]) {
    let mut group = [(0, 0); 3];
    let mut len = 0;
    let mut at = 0;
    while at < frames.len() {
        let total = LENGTH_SIZE + u32_at(frames, at) as usize;
        group[len] = (at, total);
        len += 1;
        at += total;
        if len == 3 {
            len = 0;
            let crcs = frame_crc3(group.map(|(s, t)| &frames[s..s + t]));
            for ((s, _), crc) in group.into_iter().zip(crcs) {
                frames[s + CRC_AT..s + OFFSET_AT].copy_from_slice(&crc.to_be_bytes());
            }
        }
    }
    for &(s, t) in &group[..len] {
        let crc = frame_crc(&frames[s..s + t]);
        frames[s + CRC_AT..s + OFFSET_AT].copy_from_slice(&crc.to_be_bytes());
    }
}

#[inline]
fn put_bytes(buf: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            buf.extend_from_slice(&(b.len() as i32).to_be_bytes());
            crate::bytes::extend_small(buf, b);
        }
        None => buf.extend_from_slice(&(-1i32).to_be_bytes()),
    }
}

/// A byte range: start and length.
pub(crate) type Range = (usize, usize);

/// The fields of one frame; byte ranges are relative to the frame start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FrameView {
    pub offset: u64,
    pub timestamp: i64,
    pub key: Option<Range>,
    pub value: Option<Range>,
    pub header_count: usize,
    /// Where the first header starts.
    pub headers_at: usize,
}

impl FrameView {
    pub fn key<'a>(&self, frame: &'a [u8]) -> Option<&'a [u8]> {
        self.key.map(|(s, l)| &frame[s..s + l])
    }
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

/// Reads a nullable byte field at `at`; returns it and the position after it.
#[inline]
fn field(frame: &[u8], at: usize) -> Result<(Option<Range>, usize), &'static str> {
    if at + 4 > frame.len() {
        return Err("field length past the end of the frame");
    }
    let len = i32_at(frame, at);
    if len == -1 {
        return Ok((None, at + 4));
    }
    let len = usize::try_from(len).map_err(|_| "negative field length")?;
    let start = at + 4;
    if start + len > frame.len() {
        return Err("field past the end of the frame");
    }
    Ok((Some((start, len)), start + len))
}

/// Checks the structure of a whole frame (not its CRC) and locates its fields.
pub(crate) fn decode(frame: &[u8]) -> Result<FrameView, &'static str> {
    let offset = u64_at(frame, OFFSET_AT);
    let timestamp = i64_at(frame, BODY_AT);
    let (key, at) = field(frame, BODY_AT + 8)?;
    let (value, at) = field(frame, at)?;
    if at + 4 > frame.len() {
        return Err("header count past the end of the frame");
    }
    let count = i32_at(frame, at);
    let header_count = usize::try_from(count).map_err(|_| "negative header count")?;
    let headers_at = at + 4;
    let mut at = headers_at;
    for _ in 0..header_count {
        let (k, next) = field(frame, at)?;
        if k.is_none() {
            return Err("null header key");
        }
        let (_, next) = field(frame, next)?;
        at = next;
    }
    if at != frame.len() {
        return Err("frame length does not match its fields");
    }
    Ok(FrameView {
        offset,
        timestamp,
        key,
        value,
        header_count,
        headers_at,
    })
}

pub(crate) type OwnedHeaders = Vec<(String, Option<Vec<u8>>)>;

/// Copies the headers out of a frame that [`decode`] accepted.
pub(crate) fn decode_headers(frame: &[u8], view: &FrameView) -> Result<OwnedHeaders, &'static str> {
    let mut out = Vec::with_capacity(view.header_count);
    let mut at = view.headers_at;
    for _ in 0..view.header_count {
        let (k, next) = field(frame, at)?;
        let (s, l) = k.ok_or("null header key")?;
        let key = std::str::from_utf8(&frame[s..s + l]).map_err(|_| "header key is not UTF-8")?;
        let (v, next) = field(frame, next)?;
        out.push((key.to_owned(), v.map(|(s, l)| frame[s..s + l].to_vec())));
        at = next;
    }
    Ok(out)
}
