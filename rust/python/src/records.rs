//! Native record loops for the DSL's Python nodes: a node hands a whole
//! batch over in one call, and the loop runs per record without Python
//! bytecode around each step (the user's function is still called once per
//! record, as the user wrote it).

use pyo3::exceptions::{PyBaseException, PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use strom_core::log::Span;

use crate::log::{NativeProducer, RecordBatch};

/// The output columns of a flat-map: keys, values, timestamps, offsets.
type Columns<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
);

/// Appends everything `produced` (a `mapper` result) yields to `out`; on an
/// error the items before it stay appended.
fn extend(out: &Bound<'_, PyList>, produced: &Bound<'_, PyAny>) -> PyResult<()> {
    if let Ok(list) = produced.cast::<PyList>() {
        let end = out.len();
        return out.set_slice(end, end, list);
    }
    for item in produced.try_iter()? {
        out.append(item?)?;
    }
    Ok(())
}

/// `flat_map_values`: appends what `mapper(values[i])` yields for each
/// record `i` from `start` on to the values of `out`, with the record's key,
/// timestamp and offset once per value. Returns None when every record went
/// through, else `(i, exception)` for the first record whose call (or the
/// iteration of its result) raised an `Exception`; what it yielded before
/// that stays appended, as Kafka forwards each value as it comes.
#[pyfunction]
fn flat_map_values<'py>(
    mapper: &Bound<'py, PyAny>,
    keys: &Bound<'py, PyList>,
    values: &Bound<'py, PyList>,
    timestamps: &Bound<'py, PyList>,
    offsets: &Bound<'py, PyList>,
    start: usize,
    out: Columns<'py>,
) -> PyResult<Option<(usize, Bound<'py, PyBaseException>)>> {
    let py = mapper.py();
    let n = values.len();
    if keys.len() != n || timestamps.len() != n || offsets.len() != n {
        return Err(PyValueError::new_err(
            "flat_map_values: keys, values, timestamps and offsets must have the same length",
        ));
    }
    let (out_keys, out_values, out_timestamps, out_offsets) = out;
    for i in start..n {
        let before = out_values.len();
        let outcome = mapper
            .call1((values.get_item(i)?,))
            .and_then(|produced| extend(&out_values, &produced));
        let produced = out_values.len() - before;
        if produced > 0 {
            let (key, timestamp, offset) = (
                keys.get_item(i)?,
                timestamps.get_item(i)?,
                offsets.get_item(i)?,
            );
            for _ in 0..produced {
                out_keys.append(&key)?;
                out_timestamps.append(&timestamp)?;
                out_offsets.append(&offset)?;
            }
        }
        match outcome {
            // A record's failure; KeyboardInterrupt and the like stop the loop.
            Err(e) if e.is_instance_of::<PyException>(py) => {
                return Ok(Some((i, e.into_value(py).into_bound(py))));
            }
            Err(e) => return Err(e),
            Ok(()) => {}
        }
    }
    Ok(None)
}

/// The bytes the String serde writes for `item` (`str` as UTF-8, `None` as
/// null); `Err` for anything it cannot serialize.
fn utf8<'a>(item: &'a Bound<'_, PyAny>) -> Result<Option<&'a [u8]>, ()> {
    if item.is_none() {
        return Ok(None);
    }
    let s = item.cast::<PyString>().map_err(|_| ())?;
    // A `str` with lone surrogates has no UTF-8 form (the serde's error).
    s.to_str().map(|s| Some(s.as_bytes())).map_err(|_| ())
}

/// A sink whose key and value serdes are both the String serde, on the
/// embedded log: serializes `keys` and `values` (`str | None`) straight into
/// `producer`'s buffers for `topic`, partitioned by the key's bytes as
/// `produce_columns` does, without a `bytes` object per record. Returns
/// False, having buffered nothing, when a key or value is not the serde's
/// (the caller's ordinary path then finds and reports it).
#[pyfunction]
fn produce_strings(
    producer: &Bound<'_, NativeProducer>,
    topic: &str,
    keys: &Bound<'_, PyList>,
    values: &Bound<'_, PyList>,
    timestamps: Vec<i64>,
) -> PyResult<bool> {
    let py = producer.py();
    let n = keys.len();
    if values.len() != n || timestamps.len() != n {
        return Err(PyValueError::new_err(
            "produce_strings: keys, values and timestamps must have the same length",
        ));
    }
    let producer = producer.get();
    producer.partition_count(py, topic)?;
    let mut rows = Vec::with_capacity(n);
    for (key, value) in keys.iter().zip(values.iter()) {
        if utf8(&key).is_err() || utf8(&value).is_err() {
            return Ok(false);
        }
        rows.push((key, value));
    }
    let mut due = false;
    {
        let mut buffers = producer.lock_buffers(py);
        let topic_buffers = buffers
            .get_mut(topic)
            .expect("registered by partition_count");
        let mut records = Vec::with_capacity(n);
        // Room for the whole batch in each buffer, not regrown record by record.
        let mut room = vec![(0, 0); topic_buffers.partitions.len()];
        for ((key, value), timestamp) in rows.iter().zip(timestamps) {
            // Checked above; a str's UTF-8 form does not change.
            let (key, value) = (utf8(key).unwrap_or(None), utf8(value).unwrap_or(None));
            let partition = topic_buffers.partition_for(key);
            let (count, bytes) = &mut room[partition as usize];
            *count += 1;
            *bytes += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
            records.push((partition, key, value, timestamp));
        }
        for (buffer, (count, bytes)) in topic_buffers.partitions.iter_mut().zip(room) {
            buffer.builder.reserve(count, bytes);
        }
        for (partition, key, value, timestamp) in records {
            due |= topic_buffers.push(partition, timestamp, key, value, &[]);
        }
    }
    if due {
        producer.append_buffers(py, false, false)?;
    }
    Ok(true)
}

/// Whether every key (when `keys`) and every value (when `values`) of a
/// batch read is UTF-8 (null is), read where the batch holds them: no
/// `bytes` object per record to check.
#[pyfunction]
fn read_utf8(records: &RecordBatch, keys: bool, values: bool) -> bool {
    let batch = &records.batch;
    let utf8 = |spans: &[Option<Span>]| {
        spans.iter().flatten().all(|span| {
            let bytes = &batch.data[span.start..span.start + span.len];
            // Most keys are ASCII: a cheaper test than decoding a short string.
            bytes.is_ascii() || std::str::from_utf8(bytes).is_ok()
        })
    };
    (!keys || utf8(&batch.keys)) && (!values || utf8(&batch.values))
}

/// The smallest and largest timestamp of a batch read (None when empty),
/// without a Python int per record to compare.
#[pyfunction]
fn timestamp_range(records: &RecordBatch) -> Option<(i64, i64)> {
    let timestamps = &records.batch.timestamps;
    Some((*timestamps.iter().min()?, *timestamps.iter().max()?))
}

/// Whether any key or value of a batch read is null, read where the batch
/// holds them.
#[pyfunction]
fn read_has_null(records: &RecordBatch) -> bool {
    let batch = &records.batch;
    batch.keys.iter().chain(&batch.values).any(Option::is_none)
}

/// Whether any of `columns` (lists) holds None, told by identity: `None in
/// list` compares each item with `==`, which costs a call per item.
#[pyfunction]
#[pyo3(signature = (*columns))]
fn any_none(columns: &Bound<'_, PyTuple>) -> PyResult<bool> {
    for column in columns.iter() {
        if column.cast::<PyList>()?.iter().any(|item| item.is_none()) {
            return Ok(true);
        }
    }
    Ok(false)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(any_none, m)?)?;
    m.add_function(wrap_pyfunction!(read_utf8, m)?)?;
    m.add_function(wrap_pyfunction!(read_has_null, m)?)?;
    m.add_function(wrap_pyfunction!(timestamp_range, m)?)?;
    m.add_function(wrap_pyfunction!(flat_map_values, m)?)?;
    m.add_function(wrap_pyfunction!(produce_strings, m)?)?;
    Ok(())
}
