//! Batch codecs of the built-in serdes: a list in, a list out, one call per batch.
//!
//! A value that cannot be converted fails the whole call; the Python layer
//! then finds the culprit record to name it in its error.

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyList, PyString};

use strom_core::serde::codec::{
    decode_bool, decode_double, decode_float, decode_int, decode_long, decode_short,
};

use crate::errors::to_py_err;

/// Maps `convert` over the list, passing `None` through (Kafka serdes map
/// null to null).
fn map_non_null<'py>(
    values: &Bound<'py, PyList>,
    convert: impl Fn(&Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    let out = PyList::empty(py);
    for item in values.iter() {
        if item.is_none() {
            out.append(py.None())?;
        } else {
            out.append(convert(&item)?)?;
        }
    }
    Ok(out)
}

fn decode_fixed<'py, T: IntoPyObject<'py>>(
    values: &Bound<'py, PyList>,
    decode: impl Fn(&[u8]) -> strom_core::Result<T>,
) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        let bytes = item.cast::<PyBytes>()?.as_bytes();
        let value = decode(bytes).map_err(|e| to_py_err(py, e))?;
        value.into_bound_py_any(py)
    })
}

/// `StringSerializer` (UTF-8) over a list of `str | None`.
#[pyfunction]
fn encode_strings<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        let s = item.cast::<PyString>().map_err(|_| {
            PyTypeError::new_err(format!(
                "String serde expects str or None, got {}",
                item.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        Ok(PyBytes::new(py, s.to_str()?.as_bytes()).into_any())
    })
}

/// `StringDeserializer` over a list of `bytes | None`; invalid UTF-8 is an
/// error rather than Java's silent replacement characters.
#[pyfunction]
fn decode_strings<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        let bytes = item.cast::<PyBytes>()?.as_bytes();
        let s = std::str::from_utf8(bytes).map_err(|e| {
            to_py_err(
                py,
                strom_core::Error::Serialization(format!("invalid UTF-8 string: {e}")),
            )
        })?;
        Ok(PyString::new(py, s).into_any())
    })
}

/// `LongSerializer` (8 bytes, big-endian) over a list of `int | None`.
#[pyfunction]
fn encode_longs<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        Ok(PyBytes::new(py, &item.extract::<i64>()?.to_be_bytes()).into_any())
    })
}

#[pyfunction]
fn decode_longs<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    decode_fixed(values, decode_long)
}

/// `IntegerSerializer` (4 bytes, big-endian) over a list of `int | None`.
#[pyfunction]
fn encode_ints<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        Ok(PyBytes::new(py, &item.extract::<i32>()?.to_be_bytes()).into_any())
    })
}

#[pyfunction]
fn decode_ints<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    decode_fixed(values, decode_int)
}

/// `DoubleSerializer` (IEEE 754, big-endian) over a list of `float | None`.
#[pyfunction]
fn encode_doubles<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        Ok(PyBytes::new(py, &item.extract::<f64>()?.to_be_bytes()).into_any())
    })
}

#[pyfunction]
fn decode_doubles<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    decode_fixed(values, decode_double)
}

/// `ShortSerializer` (2 bytes, big-endian) over a list of `int | None`.
#[pyfunction]
fn encode_shorts<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        Ok(PyBytes::new(py, &item.extract::<i16>()?.to_be_bytes()).into_any())
    })
}

#[pyfunction]
fn decode_shorts<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    decode_fixed(values, decode_short)
}

/// `FloatSerializer` (IEEE 754 single precision, big-endian) over a list of
/// `float | None`; a finite value beyond the range of a float is an error
/// (it would become infinity).
#[pyfunction]
fn encode_floats<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        let value = item.extract::<f64>()?;
        #[allow(
            clippy::cast_possible_truncation,
            reason = "Java's Float: rounded to single precision"
        )]
        let single = value as f32;
        if single.is_infinite() && value.is_finite() {
            return Err(pyo3::exceptions::PyOverflowError::new_err(format!(
                "{value} is beyond the range of a Float"
            )));
        }
        Ok(PyBytes::new(py, &single.to_be_bytes()).into_any())
    })
}

#[pyfunction]
fn decode_floats<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    decode_fixed(values, |bytes| decode_float(bytes).map(f64::from))
}

/// `BooleanSerializer` (one byte, 1 or 0) over a list of `bool | None`.
#[pyfunction]
fn encode_bools<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    map_non_null(values, |item| {
        let value = item.cast::<PyBool>().map_err(|_| {
            PyTypeError::new_err(format!(
                "Boolean serde expects bool or None, got {}",
                item.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ))
        })?;
        Ok(PyBytes::new(py, &[u8::from(value.is_true())]).into_any())
    })
}

#[pyfunction]
fn decode_bools<'py>(values: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
    decode_fixed(values, decode_bool)
}

/// Whether every item of a list of `bytes | None` is UTF-8 (what the
/// `String` serde would read), without making the strings.
#[pyfunction]
fn all_utf8(values: &Bound<'_, PyList>) -> PyResult<bool> {
    for item in values.iter() {
        if !item.is_none() && std::str::from_utf8(item.cast::<PyBytes>()?.as_bytes()).is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(all_utf8, m)?)?;
    m.add_function(wrap_pyfunction!(encode_strings, m)?)?;
    m.add_function(wrap_pyfunction!(decode_strings, m)?)?;
    m.add_function(wrap_pyfunction!(encode_longs, m)?)?;
    m.add_function(wrap_pyfunction!(decode_longs, m)?)?;
    m.add_function(wrap_pyfunction!(encode_ints, m)?)?;
    m.add_function(wrap_pyfunction!(decode_ints, m)?)?;
    m.add_function(wrap_pyfunction!(encode_doubles, m)?)?;
    m.add_function(wrap_pyfunction!(decode_doubles, m)?)?;
    m.add_function(wrap_pyfunction!(encode_shorts, m)?)?;
    m.add_function(wrap_pyfunction!(decode_shorts, m)?)?;
    m.add_function(wrap_pyfunction!(encode_floats, m)?)?;
    m.add_function(wrap_pyfunction!(decode_floats, m)?)?;
    m.add_function(wrap_pyfunction!(encode_bools, m)?)?;
    m.add_function(wrap_pyfunction!(decode_bools, m)?)?;
    Ok(())
}
