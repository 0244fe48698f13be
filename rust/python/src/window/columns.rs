//! The input columns of a kernel call: keys, timestamps and values, read in
//! place from Python objects where they are packed.

use std::borrow::Cow;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};

use strom_core::window::{BinaryColumn, NoValues, Validity, ValueColumn, Values};

use super::type_name;

/// `bytes` read in place, or a copy of a `bytearray` (which may change
/// while the loop runs detached).
fn raw_bytes<'a>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let slice: &[u8] = b.as_bytes();
        // SAFETY: the bytes object is an argument of the Python call (or an
        // item of an argument tuple, which holds it) for all of 'a, and
        // bytes objects never change or move their data.
        let slice: &'a [u8] = unsafe { std::slice::from_raw_parts(slice.as_ptr(), slice.len()) };
        return Ok(Cow::Borrowed(slice));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Cow::Owned(b.to_vec()));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes or bytearray, not {}",
        type_name(obj)
    )))
}

/// A fixed-width element packed in native-endian bytes.
pub(super) trait Packable: Copy + Send + Sync + 'static {
    const WIDTH: usize;
    fn from_ne(bytes: &[u8]) -> Self;
}

macro_rules! packable {
    ($t:ty, $w:expr) => {
        impl Packable for $t {
            const WIDTH: usize = $w;
            fn from_ne(bytes: &[u8]) -> Self {
                <$t>::from_ne_bytes(bytes.try_into().expect("chunks of the width"))
            }
        }
    };
}
packable!(i64, 8);
packable!(f64, 8);
packable!(i32, 4);

/// Packed native-endian elements: in place when aligned, else copied.
pub(super) fn packed<'a, T: Packable>(
    obj: &Bound<'_, PyAny>,
    what: &str,
) -> PyResult<Cow<'a, [T]>> {
    let raw = raw_bytes(obj, what)?;
    if raw.len() % T::WIDTH != 0 {
        return Err(PyValueError::new_err(format!(
            "{what} holds {} bytes, not a multiple of {}",
            raw.len(),
            T::WIDTH
        )));
    }
    if let Cow::Borrowed(b) = raw {
        // SAFETY: i32, i64 and f64 are valid for every bit pattern.
        let (head, mid, tail) = unsafe { b.align_to::<T>() };
        if head.is_empty() && tail.is_empty() {
            return Ok(Cow::Borrowed(mid));
        }
    }
    Ok(Cow::Owned(
        raw.chunks_exact(T::WIDTH).map(T::from_ne).collect(),
    ))
}

/// A binary column's buffers (Arrow `Binary` layout).
pub(super) struct KeysIn<'py> {
    data: Cow<'py, [u8]>,
    offsets: Cow<'py, [i32]>,
    validity: Option<Cow<'py, [u8]>>,
}

impl<'py> KeysIn<'py> {
    pub(super) fn new(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
        if let Ok(list) = obj.cast::<PyList>() {
            let n = list.len();
            let mut data = Vec::new();
            let mut offsets = Vec::with_capacity(n + 1);
            offsets.push(0i32);
            let mut validity: Option<Vec<u8>> = None;
            for (i, item) in list.iter().enumerate() {
                if item.is_none() {
                    let bits = validity.get_or_insert_with(|| vec![0xffu8; n.div_ceil(8)]);
                    bits[i >> 3] &= !(1 << (i & 7));
                } else {
                    let bytes = item.cast::<PyBytes>().map_err(|_| {
                        PyTypeError::new_err(format!(
                            "keys[{i}] must be bytes or None, not {}",
                            type_name(&item)
                        ))
                    })?;
                    data.extend_from_slice(bytes.as_bytes());
                }
                let end = i32::try_from(data.len()).map_err(|_| {
                    PyValueError::new_err("a batch's keys hold less than 2 GiB in all")
                })?;
                offsets.push(end);
            }
            return Ok(Self {
                data: Cow::Owned(data),
                offsets: Cow::Owned(offsets),
                validity: validity.map(Cow::Owned),
            });
        }
        if let Ok(tuple) = obj.cast::<PyTuple>()
            && (2..=3).contains(&tuple.len())
        {
            let validity = match tuple.get_item(2) {
                Ok(v) if !v.is_none() => Some(raw_bytes(&v, "the keys' validity")?),
                _ => None,
            };
            return Ok(Self {
                data: raw_bytes(&tuple.get_item(0)?, "the keys' data")?,
                offsets: packed::<i32>(&tuple.get_item(1)?, "the keys' offsets")?,
                validity,
            });
        }
        Err(PyTypeError::new_err(format!(
            "keys must be a list of bytes or None, or a tuple (data, offsets[, validity]) of \
             bytes, not {}",
            type_name(obj)
        )))
    }

    pub(super) fn column(&self) -> strom_core::Result<BinaryColumn<'_>> {
        let rows = self.offsets.len().saturating_sub(1);
        let validity = match &self.validity {
            Some(bits) => Some(Validity::new(bits, 0, rows)?),
            None => None,
        };
        BinaryColumn::new(&self.data, &self.offsets, validity)
    }
}

pub(super) fn timestamps_in<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Cow<'py, [i64]>> {
    if let Ok(list) = obj.cast::<PyList>() {
        let mut out = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            out.push(item.extract::<i64>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "timestamps[{i}] must be an int, not {}",
                    type_name(&item)
                ))
            })?);
        }
        return Ok(Cow::Owned(out));
    }
    packed::<i64>(obj, "timestamps")
}

/// The numeric type a kernel aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ValueKind {
    None,
    Int,
    Float,
}

/// A value column: only nullness (count), or numbers with nulls.
pub(super) struct ValuesIn<'py> {
    len: usize,
    ints: Cow<'py, [i64]>,
    floats: Cow<'py, [f64]>,
    validity: Option<Vec<u8>>,
}

impl<'py> ValuesIn<'py> {
    pub(super) fn new(
        obj: Option<&Bound<'py, PyAny>>,
        field: Option<&str>,
        kind: ValueKind,
        len: usize,
    ) -> PyResult<Self> {
        let mut out = Self {
            len,
            ints: Cow::Borrowed(&[]),
            floats: Cow::Borrowed(&[]),
            validity: None,
        };
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            if kind != ValueKind::None {
                return Err(PyValueError::new_err(
                    "values are required for an aggregation of the value",
                ));
            }
            return Ok(out);
        };
        let Ok(list) = obj.cast::<PyList>() else {
            match kind {
                ValueKind::None => {
                    return Err(PyTypeError::new_err(
                        "a count takes values as a list or None",
                    ));
                }
                ValueKind::Int => out.ints = packed::<i64>(obj, "values")?,
                ValueKind::Float => out.floats = packed::<f64>(obj, "values")?,
            }
            out.len = out.ints.len().max(out.floats.len());
            return Ok(out);
        };
        out.len = list.len();
        let mut ints = Vec::new();
        let mut floats = Vec::new();
        match kind {
            ValueKind::Int => ints.reserve(list.len()),
            ValueKind::Float => floats.reserve(list.len()),
            ValueKind::None => {}
        }
        for (i, item) in list.iter().enumerate() {
            let value = match field {
                Some(name) if !item.is_none() => {
                    let dict = item.cast::<PyDict>().map_err(|_| {
                        PyTypeError::new_err(format!(
                            "values[{i}] must be a dict (a JSON object) to read field {name:?}, \
                             not {}",
                            type_name(&item)
                        ))
                    })?;
                    dict.get_item(name)?
                }
                _ => Some(item),
            };
            let value = value.filter(|v| !v.is_none());
            if value.is_none() {
                let bits = out
                    .validity
                    .get_or_insert_with(|| vec![0xffu8; list.len().div_ceil(8)]);
                bits[i >> 3] &= !(1 << (i & 7));
            }
            match (kind, value) {
                (ValueKind::None, _) => {}
                (ValueKind::Int, None) => ints.push(0),
                (ValueKind::Float, None) => floats.push(0.0),
                (ValueKind::Int, Some(v)) => {
                    check_number(&v, i, field, false)?;
                    ints.push(v.extract::<i64>().map_err(|e| out_of_range(i, field, &e))?);
                }
                (ValueKind::Float, Some(v)) => {
                    check_number(&v, i, field, true)?;
                    floats.push(v.extract::<f64>().map_err(|e| out_of_range(i, field, &e))?);
                }
            }
        }
        out.ints = Cow::Owned(ints);
        out.floats = Cow::Owned(floats);
        Ok(out)
    }

    fn validity(&self) -> strom_core::Result<Option<Validity<'_>>> {
        self.validity
            .as_deref()
            .map(|bits| Validity::new(bits, 0, self.len))
            .transpose()
    }
}

fn value_at(row: usize, field: Option<&str>) -> String {
    field.map_or_else(
        || format!("values[{row}]"),
        |f| format!("values[{row}][{f:?}]"),
    )
}

/// An `int` for an integer aggregation (which never rounds a float), an
/// `int` or `float` for a float one.
fn check_number(
    v: &Bound<'_, PyAny>,
    row: usize,
    field: Option<&str>,
    float: bool,
) -> PyResult<()> {
    let ok = v.is_instance_of::<pyo3::types::PyInt>()
        || (float && v.is_instance_of::<pyo3::types::PyFloat>());
    if ok {
        return Ok(());
    }
    Err(PyTypeError::new_err(format!(
        "{} must be {}, not {} ({})",
        value_at(row, field),
        if float { "an int or a float" } else { "an int" },
        type_name(v),
        v.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string())
    )))
}

fn out_of_range(row: usize, field: Option<&str>, e: &PyErr) -> PyErr {
    PyValueError::new_err(format!("{}: {e}", value_at(row, field)))
}

/// The value column a kernel's aggregation reads, from the batch's values.
pub(super) trait ValueType: Copy + Send + Sync + 'static {
    type Column<'a>: ValueColumn<Value = Self> + Send + Sync;
    fn column<'a>(values: &'a ValuesIn<'_>) -> strom_core::Result<Self::Column<'a>>;
}

impl ValueType for () {
    type Column<'a> = NoValues<'a>;
    fn column<'a>(values: &'a ValuesIn<'_>) -> strom_core::Result<NoValues<'a>> {
        Ok(match values.validity()? {
            Some(v) => NoValues::with_validity(values.len, v),
            None => NoValues::new(values.len),
        })
    }
}

impl ValueType for i64 {
    type Column<'a> = Values<'a, i64>;
    fn column<'a>(values: &'a ValuesIn<'_>) -> strom_core::Result<Values<'a, i64>> {
        Ok(match values.validity()? {
            Some(v) => Values::with_validity(&values.ints, v),
            None => Values::new(&values.ints),
        })
    }
}

impl ValueType for f64 {
    type Column<'a> = Values<'a, f64>;
    fn column<'a>(values: &'a ValuesIn<'_>) -> strom_core::Result<Values<'a, f64>> {
        Ok(match values.validity()? {
            Some(v) => Values::with_validity(&values.floats, v),
            None => Values::new(&values.floats),
        })
    }
}
