//! Native record loops for the DSL's Python nodes: a node hands a whole
//! batch over in one call, and the loop runs per record without Python
//! bytecode around each step (the user's function is still called once per
//! record, as the user wrote it).

use pyo3::exceptions::{PyBaseException, PyException, PyValueError};
use pyo3::ffi;
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
    if let Some(list) = collect_words(produced, out)? {
        let end = out.len();
        out.set_slice(end, end, &list)?;
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
    let mut args = Args::new(py, 1)?;
    for i in start..n {
        let before = out_values.len();
        let outcome = args
            .call(mapper, &[&values.get_item(i)?])
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

/// Buffers `rows` (key, value and timestamp of records whose key and value
/// `utf8` takes) for `topic` in `producer`, partitioned by the key's bytes as
/// `produce_columns` does, then appends the buffers that are due.
fn buffer_strings(
    producer: &NativeProducer,
    py: Python<'_>,
    topic: &str,
    rows: &[(Bound<'_, PyAny>, Bound<'_, PyAny>, i64)],
) -> PyResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    producer.partition_count(py, topic)?;
    let mut due = false;
    {
        let mut buffers = producer.lock_buffers(py);
        let topic_buffers = buffers
            .get_mut(topic)
            .expect("registered by partition_count");
        let mut records = Vec::with_capacity(rows.len());
        // Room for the whole batch in each buffer, not regrown record by record.
        let mut room = vec![(0, 0); topic_buffers.partitions.len()];
        for (key, value, timestamp) in rows {
            // Checked by the caller; a str's UTF-8 form does not change.
            let (key, value) = (utf8(key).unwrap_or(None), utf8(value).unwrap_or(None));
            let partition = topic_buffers.partition_for(key);
            let (count, bytes) = &mut room[partition as usize];
            *count += 1;
            *bytes += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
            records.push((partition, key, value, *timestamp));
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
    Ok(())
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
    let n = keys.len();
    if values.len() != n || timestamps.len() != n {
        return Err(PyValueError::new_err(
            "produce_strings: keys, values and timestamps must have the same length",
        ));
    }
    let mut rows = Vec::with_capacity(n);
    for ((key, value), timestamp) in keys.iter().zip(values.iter()).zip(timestamps) {
        if utf8(&key).is_err() || utf8(&value).is_err() {
            return Ok(false);
        }
        rows.push((key, value, timestamp));
    }
    buffer_strings(producer.get(), producer.py(), topic, &rows)?;
    Ok(true)
}

/// The argument tuple of a function called once per record, reused from
/// call to call: under the stable ABI a call takes a tuple, and making and
/// freeing one per call cost more than the rest of the loop around it.
struct Args<'py> {
    tuple: Bound<'py, PyTuple>,
}

impl<'py> Args<'py> {
    fn new(py: Python<'py>, arity: usize) -> PyResult<Self> {
        let tuple = PyTuple::new(py, (0..arity).map(|_| py.None()))?;
        Ok(Self { tuple })
    }

    /// `function(*items)`, `items` being as many as the tuple holds.
    fn call(
        &mut self,
        function: &Bound<'py, PyAny>,
        items: &[&Bound<'py, PyAny>],
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = function.py();
        debug_assert_eq!(items.len(), self.tuple.len());
        // SAFETY: the tuple is filled in place only while this is its only
        // reference (a callee may keep the tuple it was called with: then
        // it gets a new one), which is what PyTuple_SetItem requires; each
        // SetItem takes a new reference to its item and drops the old one.
        unsafe {
            if ffi::Py_REFCNT(self.tuple.as_ptr()) == 1 {
                for (i, item) in items.iter().enumerate() {
                    let i = ffi::Py_ssize_t::try_from(i).expect("a handful of arguments");
                    if ffi::PyTuple_SetItem(self.tuple.as_ptr(), i, (*item).clone().into_ptr()) != 0
                    {
                        return Err(PyErr::fetch(py));
                    }
                }
            } else {
                self.tuple = PyTuple::new(py, items)?;
            }
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyObject_Call(function.as_ptr(), self.tuple.as_ptr(), std::ptr::null_mut()),
            )
        }
    }
}

/// Where `flat_map_select_strings` stopped: what stopped it (`"map"`: the
/// mapper raised for record `line`, `words` being what it yielded first;
/// `"select"`: the selector raised for word `word` of `words`, the values of
/// record `line`; `"serialize"`: it returned a key, or the word is a value,
/// that the String serde cannot write), `line`, `word`, `words` and the
/// exception or the key.
type Stop<'py> = (
    &'static str,
    usize,
    usize,
    Bound<'py, PyList>,
    Bound<'py, PyAny>,
);

/// The records a mapper call yielded: its own list when it returned one,
/// else None once they are appended to `words`.
fn collect_words<'py>(
    produced: &Bound<'py, PyAny>,
    words: &Bound<'py, PyList>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    if let Ok(list) = produced.cast::<PyList>() {
        return Ok(Some(list.clone()));
    }
    for item in produced.try_iter()? {
        words.append(item?)?;
    }
    Ok(None)
}

/// `flat_map_values(mapper)` then `group_by(selector)`'s key selection, its
/// null-key filter and its String/String repartition sink on the embedded
/// log, in one pass: for each record `i` from `start` on, `mapper(values[i])`
/// once, then for each value it yields, in order, `selector(keys[i], value)`
/// once; a record whose key is not None goes into `producer`'s buffers for
/// `topic` with record `i`'s timestamp, with no Python list per step.
/// `pending`, when resuming, is record `start`'s values, gone through up to
/// `pending_from`.
///
/// Returns how many values reached the selector, how many it selected a key
/// for, how many were buffered, and where it stopped (None when every record
/// went through): a failure of a user function, or a key or value the
/// String serde cannot write, for the caller to hand to the handlers before
/// resuming after it. Everything before the stop is buffered.
#[pyfunction]
#[pyo3(signature = (mapper, selector, producer, topic, keys, values, timestamps, start, pending=None, pending_from=0))]
#[allow(clippy::too_many_arguments)] // the two functions, the sink and the batch's columns
fn flat_map_select_strings<'py>(
    mapper: &Bound<'py, PyAny>,
    selector: &Bound<'py, PyAny>,
    producer: &Bound<'py, NativeProducer>,
    topic: &str,
    keys: &Bound<'py, PyList>,
    values: &Bound<'py, PyList>,
    timestamps: &Bound<'py, PyList>,
    start: usize,
    pending: Option<Bound<'py, PyList>>,
    pending_from: usize,
) -> PyResult<(usize, usize, usize, Option<Stop<'py>>)> {
    let py = mapper.py();
    let n = values.len();
    if keys.len() != n || timestamps.len() != n {
        return Err(PyValueError::new_err(
            "flat_map_select_strings: keys, values and timestamps must have the same length",
        ));
    }
    let (mut calls, mut selected) = (0, 0);
    let mut rows: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>, i64)> = Vec::new();
    let mut stop: Option<Stop<'py>> = None;
    let mut line = start;
    let mut next = pending.map(|words| (words, pending_from));
    let (mut map_args, mut select_args) = (Args::new(py, 1)?, Args::new(py, 2)?);
    'lines: while line < n {
        let (words, from) = if let Some(resumed) = next.take() {
            resumed
        } else {
            let words = PyList::empty(py);
            let collected = map_args
                .call(mapper, &[&values.get_item(line)?])
                .and_then(|produced| collect_words(&produced, &words));
            match collected {
                Ok(Some(list)) => (list, 0),
                Ok(None) => (words, 0),
                // A record's failure; KeyboardInterrupt and the like stop the loop.
                Err(e) if e.is_instance_of::<PyException>(py) => {
                    let exception = e.into_value(py).into_bound(py).into_any();
                    stop = Some(("map", line, 0, words, exception));
                    break;
                }
                Err(e) => return Err(e),
            }
        };
        if from < words.len() {
            let key = keys.get_item(line)?;
            let timestamp: i64 = timestamps.get_item(line)?.extract()?;
            for word in from..words.len() {
                let value = words.get_item(word)?;
                calls += 1;
                let selected_key = match select_args.call(selector, &[&key, &value]) {
                    Ok(selected_key) => selected_key,
                    Err(e) if e.is_instance_of::<PyException>(py) => {
                        let exception = e.into_value(py).into_bound(py).into_any();
                        stop = Some(("select", line, word, words, exception));
                        break 'lines;
                    }
                    Err(e) => return Err(e),
                };
                selected += 1;
                if selected_key.is_none() {
                    continue; // the repartition's null-key filter drops it
                }
                if utf8(&selected_key).is_err() || utf8(&value).is_err() {
                    stop = Some(("serialize", line, word, words, selected_key));
                    break 'lines;
                }
                rows.push((selected_key, value, timestamp));
            }
        }
        line += 1;
    }
    buffer_strings(producer.get(), py, topic, &rows)?;
    Ok((calls, selected, rows.len(), stop))
}

/// The high bit of each byte of `data[span]`, somewhere in the result (0
/// when they are all ASCII). A short span is read as one 16-byte word, the
/// bytes past it masked off.
fn high_bits(data: &[u8], span: &Span) -> u128 {
    const HIGH: u128 = u128::from_ne_bytes([0x80; 16]);
    if span.len < 16
        && let Some(word) = data.get(span.start..span.start + 16)
    {
        let word = u128::from_le_bytes(word.try_into().expect("16 bytes"));
        return word & ((1 << (8 * span.len)) - 1) & HIGH;
    }
    let bytes = &data[span.start..span.start + span.len];
    u128::from(bytes.iter().fold(0, |high, byte| high | byte) & 0x80)
}

/// Whether every key (when `keys`) and every value (when `values`) of a
/// batch read is UTF-8 (null is), read where the batch holds them: no
/// `bytes` object per record to check.
#[pyfunction]
fn read_utf8(records: &RecordBatch, keys: bool, values: bool) -> bool {
    let batch = &records.batch;
    let data = batch.data.as_slice();
    let utf8 = |spans: &[Option<Span>]| {
        // Most keys and values are ASCII: their high bits ORed together tell
        // (no branch on each one's length); only a batch with other bytes is
        // decoded.
        let high = spans
            .iter()
            .flatten()
            .fold(0, |high, span| high | high_bits(data, span));
        high == 0
            || spans
                .iter()
                .flatten()
                .all(|span| std::str::from_utf8(&data[span.start..span.start + span.len]).is_ok())
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
    m.add_function(wrap_pyfunction!(flat_map_select_strings, m)?)?;
    Ok(())
}
