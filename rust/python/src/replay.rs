//! The Spark replay's input records as a native `RecordBatch`: a task fed
//! one takes the engine's read path (keys and values checked and handed to
//! native kernels as bytes), as when the streaming app reads the log, with
//! no Python object per record (`python/strom/spark/_task.py`).

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use strom_core::log::{PolledBatch, ReadBatch, Span};

use crate::arrow::import;
use crate::log::{RecordBatch, record_batch};

/// A `ValueError` naming the column and what it must be.
fn column_error(name: &str, want: &str, array: &dyn Array) -> PyErr {
    PyValueError::new_err(format!(
        "replay batch: the {name} column must be {want}, not {}",
        array.data_type()
    ))
}

/// Appends the bytes of a `binary` (or `large_binary`) column to `data`;
/// its spans (None: null).
fn spans_of(name: &str, obj: &Bound<'_, PyAny>, data: &mut Vec<u8>) -> PyResult<Vec<Option<Span>>> {
    let array = import(obj)?;
    let mut spans = Vec::with_capacity(array.len());
    let mut push = |item: Option<&[u8]>| {
        spans.push(item.map(|b| {
            let start = data.len();
            data.extend_from_slice(b);
            Span {
                start,
                len: b.len(),
            }
        }));
    };
    if let Some(bytes) = array.as_binary_opt::<i32>() {
        bytes.iter().for_each(&mut push);
    } else if let Some(bytes) = array.as_binary_opt::<i64>() {
        bytes.iter().for_each(&mut push);
    } else {
        return Err(column_error(name, "binary", &array));
    }
    Ok(spans)
}

fn longs_of(name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let array = import(obj)?;
    let longs = array
        .as_primitive_opt::<Int64Type>()
        .filter(|a| a.null_count() == 0)
        .ok_or_else(|| column_error(name, "int64 without nulls", &array))?;
    Ok(longs.values().to_vec())
}

/// Records of `topic`-`partition` from Arrow columns of equal length.
#[pyfunction]
fn replay_batch(
    py: Python<'_>,
    topic: String,
    partition: u32,
    keys: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    timestamps: &Bound<'_, PyAny>,
    offsets: &Bound<'_, PyAny>,
) -> PyResult<RecordBatch> {
    let mut data = Vec::new();
    let keys = spans_of("key", keys, &mut data)?;
    let values = spans_of("value", values, &mut data)?;
    let timestamps = longs_of("timestamp", timestamps)?;
    let offsets = longs_of("offset", offsets)?
        .into_iter()
        .map(u64::try_from)
        .collect::<Result<Vec<u64>, _>>()
        .map_err(|_| PyValueError::new_err("replay batch: a negative offset"))?;
    let n = offsets.len();
    if keys.len() != n || values.len() != n || timestamps.len() != n {
        return Err(PyValueError::new_err(format!(
            "replay batch: columns of unequal lengths (keys {}, values {}, timestamps {}, \
             offsets {n})",
            keys.len(),
            values.len(),
            timestamps.len()
        )));
    }
    let next_offset = offsets.last().map_or(0, |last| last + 1);
    let batch = ReadBatch {
        offsets,
        timestamps,
        keys,
        values,
        headers: Vec::new(),
        data,
        next_offset,
        log_frames: false,
    };
    Ok(record_batch(
        py,
        PolledBatch {
            topic,
            partition,
            batch,
        },
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(replay_batch, m)?)?;
    Ok(())
}
