//! Columnar batches in and out of the windowing kernels, in Arrow's memory
//! layout so the bindings can pass Arrow arrays through without copies:
//! binary columns as offsets + data, nulls as LSB-first validity bitmaps.

use crate::error::{Error, Result};

/// An Arrow validity bitmap: bit `offset + i` (least significant bit first)
/// is set when row `i` holds a value.
#[derive(Debug, Clone, Copy)]
pub struct Validity<'a> {
    bits: &'a [u8],
    offset: usize,
}

impl<'a> Validity<'a> {
    /// Checks that the bitmap covers `len` rows from bit `offset`.
    pub fn new(bits: &'a [u8], offset: usize, len: usize) -> Result<Self> {
        let needed = offset
            .checked_add(len)
            .ok_or_else(|| Error::Config("validity bitmap range overflows".into()))?;
        if bits.len().saturating_mul(8) < needed {
            return Err(Error::Config(format!(
                "validity bitmap of {} bytes cannot cover {len} rows from bit {offset}",
                bits.len()
            )));
        }
        Ok(Self { bits, offset })
    }

    #[inline]
    pub fn is_valid(&self, row: usize) -> bool {
        let bit = self.offset + row;
        self.bits[bit >> 3] >> (bit & 7) & 1 == 1
    }
}

#[derive(Debug, Clone, Copy)]
enum Offsets<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

/// A binary column (Arrow `Binary` or `LargeBinary`): row `i` is
/// `data[offsets[i]..offsets[i + 1]]`, or null when its validity bit is
/// clear. Keys are opaque bytes (the serialized keys, as Kafka's stores see
/// them).
#[derive(Debug, Clone, Copy)]
pub struct BinaryColumn<'a> {
    data: &'a [u8],
    offsets: Offsets<'a>,
    validity: Option<Validity<'a>>,
    len: usize,
}

impl<'a> BinaryColumn<'a> {
    /// An Arrow `Binary` column (32-bit offsets).
    pub fn new(data: &'a [u8], offsets: &'a [i32], validity: Option<Validity<'a>>) -> Result<Self> {
        check_offsets(offsets.iter().map(|&o| i64::from(o)), data.len())?;
        Ok(Self {
            data,
            offsets: Offsets::I32(offsets),
            validity,
            len: offsets.len() - 1,
        })
    }

    /// An Arrow `LargeBinary` column (64-bit offsets).
    pub fn new_large(
        data: &'a [u8],
        offsets: &'a [i64],
        validity: Option<Validity<'a>>,
    ) -> Result<Self> {
        check_offsets(offsets.iter().copied(), data.len())?;
        Ok(Self {
            data,
            offsets: Offsets::I64(offsets),
            validity,
            len: offsets.len() - 1,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Row `row`'s bytes, or None when it is null.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the calls were not inlined"
    )]
    pub fn get(&self, row: usize) -> Option<&'a [u8]> {
        if let Some(v) = &self.validity
            && !v.is_valid(row)
        {
            return None;
        }
        let (from, to) = match self.offsets {
            Offsets::I32(o) => (o[row] as usize, o[row + 1] as usize),
            Offsets::I64(o) => (o[row] as usize, o[row + 1] as usize),
        };
        Some(&self.data[from..to])
    }
}

impl<'a> BinaryColumn<'a> {
    /// Where row `row`'s bytes are in the data (see
    /// [`BinaryColumn::bytes`]), or None when it is null.
    #[inline(always)]
    #[allow(
        clippy::inline_always,
        reason = "hot per-record path: measured, the call was not inlined"
    )]
    pub(crate) fn span(&self, row: usize) -> Option<(usize, usize)> {
        if let Some(v) = &self.validity
            && !v.is_valid(row)
        {
            return None;
        }
        Some(match self.offsets {
            Offsets::I32(o) => (o[row] as usize, o[row + 1] as usize),
            Offsets::I64(o) => (o[row] as usize, o[row + 1] as usize),
        })
    }

    /// The bytes of a span from [`BinaryColumn::span`].
    #[inline]
    pub(crate) fn bytes(&self, from: usize, to: usize) -> &'a [u8] {
        &self.data[from..to]
    }
}

/// Offsets must start at 0 or more, never decrease and stay within `data`.
fn check_offsets(offsets: impl Iterator<Item = i64>, data_len: usize) -> Result<()> {
    let mut previous: Option<i64> = None;
    for o in offsets {
        let ok = match previous {
            None => o >= 0,
            Some(p) => o >= p,
        };
        if !ok {
            return Err(Error::Config(format!(
                "binary column offsets must start at 0 or more and never decrease (got {o} after {previous:?})"
            )));
        }
        previous = Some(o);
    }
    match previous {
        None => Err(Error::Config(
            "binary column offsets need at least one entry".into(),
        )),
        Some(last) if last as u64 > data_len as u64 => Err(Error::Config(format!(
            "binary column offset {last} is past the end of its {data_len}-byte data"
        ))),
        Some(_) => Ok(()),
    }
}

/// An owned binary column in Arrow layout (32-bit offsets); kernels return
/// keys this way, and tests build input keys with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinaryBuffer {
    pub data: Vec<u8>,
    /// `len + 1` offsets, the first 0.
    pub offsets: Vec<i32>,
}

impl Default for BinaryBuffer {
    fn default() -> Self {
        Self {
            data: Vec::new(),
            offsets: vec![0],
        }
    }
}

impl BinaryBuffer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_rows<I, B>(rows: I) -> Self
    where
        I: IntoIterator<Item = B>,
        B: AsRef<[u8]>,
    {
        let mut out = Self::new();
        for row in rows {
            out.push(row.as_ref());
        }
        out
    }

    #[inline]
    pub fn push(&mut self, bytes: &[u8]) {
        self.data.extend_from_slice(bytes);
        let end = i32::try_from(self.data.len())
            .expect("a binary buffer holds less than 2 GiB (Arrow Binary offsets are 32-bit)");
        self.offsets.push(end);
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, row: usize) -> &[u8] {
        &self.data[self.offsets[row] as usize..self.offsets[row + 1] as usize]
    }

    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.offsets.clear();
        self.offsets.push(0);
    }

    /// The buffer as an input column (no nulls).
    pub fn column(&self) -> BinaryColumn<'_> {
        BinaryColumn {
            data: &self.data,
            offsets: Offsets::I32(&self.offsets),
            validity: None,
            len: self.len(),
        }
    }
}

/// The value column of a batch, as the aggregation reads it.
pub trait ValueColumn {
    type Value: Copy;

    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether row `row` holds a value (false for a null).
    fn is_valid(&self, row: usize) -> bool;

    /// Row `row`'s value; only read when [`ValueColumn::is_valid`].
    fn value(&self, row: usize) -> Self::Value;
}

/// The values of a `count()`: only whether each is null matters (Kafka's
/// sliding-window processor drops records with a null value; the time and
/// session window processors count them).
#[derive(Debug, Clone, Copy)]
pub struct NoValues<'a> {
    len: usize,
    validity: Option<Validity<'a>>,
}

impl<'a> NoValues<'a> {
    /// `len` values, none of them null.
    pub fn new(len: usize) -> Self {
        Self {
            len,
            validity: None,
        }
    }

    /// `len` values, null where `validity` says so.
    pub fn with_validity(len: usize, validity: Validity<'a>) -> Self {
        Self {
            len,
            validity: Some(validity),
        }
    }
}

impl ValueColumn for NoValues<'_> {
    type Value = ();

    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn is_valid(&self, row: usize) -> bool {
        self.validity.is_none_or(|v| v.is_valid(row))
    }

    #[inline]
    fn value(&self, _row: usize) {}
}

/// A fixed-width value column (Arrow `Int64` or `Float64`), with nulls.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a, T> {
    values: &'a [T],
    validity: Option<Validity<'a>>,
}

impl<'a, T: Copy> Values<'a, T> {
    pub fn new(values: &'a [T]) -> Self {
        Self {
            values,
            validity: None,
        }
    }

    pub fn with_validity(values: &'a [T], validity: Validity<'a>) -> Self {
        Self {
            values,
            validity: Some(validity),
        }
    }
}

impl<T: Copy> ValueColumn for Values<'_, T> {
    type Value = T;

    fn len(&self) -> usize {
        self.values.len()
    }

    #[inline]
    fn is_valid(&self, row: usize) -> bool {
        self.validity.is_none_or(|v| v.is_valid(row))
    }

    #[inline]
    fn value(&self, row: usize) -> T {
        self.values[row]
    }
}

/// One batch of records in offset order: keys, timestamps and values.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a, C> {
    pub keys: BinaryColumn<'a>,
    pub timestamps: &'a [i64],
    pub values: C,
}

impl<'a, C: ValueColumn> Batch<'a, C> {
    /// Checks that the three columns have the same length; batches are
    /// indexed by `u32` rows.
    pub fn new(keys: BinaryColumn<'a>, timestamps: &'a [i64], values: C) -> Result<Self> {
        if keys.len() != timestamps.len() || values.len() != timestamps.len() {
            return Err(Error::Config(format!(
                "batch columns differ in length: {} keys, {} timestamps, {} values",
                keys.len(),
                timestamps.len(),
                values.len()
            )));
        }
        if u32::try_from(timestamps.len()).is_err() {
            return Err(Error::Config(format!(
                "a batch holds at most {} records (got {})",
                u32::MAX,
                timestamps.len()
            )));
        }
        Ok(Self {
            keys,
            timestamps,
            values,
        })
    }

    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_column_reads_rows_and_nulls() {
        let data = b"abcde";
        let offsets = [0, 2, 2, 5];
        let bits = [0b0000_0101u8];
        let v = Validity::new(&bits, 0, 3).unwrap();
        let col = BinaryColumn::new(data, &offsets, Some(v)).unwrap();
        assert_eq!(col.len(), 3);
        assert_eq!(col.get(0), Some(&b"ab"[..]));
        assert_eq!(col.get(1), None);
        assert_eq!(col.get(2), Some(&b"cde"[..]));
        let large = [0i64, 5];
        let col = BinaryColumn::new_large(data, &large, None).unwrap();
        assert_eq!(col.get(0), Some(&data[..]));
    }

    #[test]
    fn bad_offsets_and_bitmaps_are_refused() {
        assert!(BinaryColumn::new(b"ab", &[0, 3], None).is_err());
        assert!(BinaryColumn::new(b"ab", &[1, 0], None).is_err());
        assert!(BinaryColumn::new(b"ab", &[-1, 0], None).is_err());
        assert!(BinaryColumn::new(b"ab", &[], None).is_err());
        assert!(Validity::new(&[0], 4, 5).is_err());
        assert!(Validity::new(&[0, 0], 4, 5).is_ok());
    }

    #[test]
    fn validity_offset_counts_bits() {
        let bits = [0b1000_0000u8, 0b0000_0001];
        let v = Validity::new(&bits, 7, 2).unwrap();
        assert!(v.is_valid(0) && v.is_valid(1));
        let col = Values::with_validity(&[1i64, 2], Validity::new(&[0b10], 0, 2).unwrap());
        assert!(!col.is_valid(0) && col.is_valid(1));
        assert_eq!(col.value(1), 2);
    }

    #[test]
    fn batch_checks_lengths() {
        let keys = BinaryBuffer::from_rows([b"a", b"b"]);
        let ts = [1i64, 2];
        assert!(Batch::new(keys.column(), &ts, NoValues::new(2)).is_ok());
        assert!(Batch::new(keys.column(), &ts[..1], NoValues::new(1)).is_err());
        assert!(Batch::new(keys.column(), &ts, Values::new(&[1i64])).is_err());
    }
}
