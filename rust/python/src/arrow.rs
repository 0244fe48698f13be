//! Batches handed to pyarrow through the Arrow C data interface (the
//! `PyCapsule` protocol: `pa.array(obj)` calls `obj.__arrow_c_array__()`),
//! and Arrow arrays taken back the same way, for `map_batches` /
//! `filter_batches` (`python/strom/kstream/internals/batch_functions.py`).
//!
//! A batch read (the embedded log's or Kafka's `RecordBatch`) keeps its
//! offsets and timestamps as arrays of 64-bit ints and its keys and values
//! as spans of one buffer of framed records. The `timestamp` and `offset`
//! columns point into that memory (the arrays' buffers keep the batch
//! object alive until pyarrow calls their release callback). Keys and
//! values sit between frame headers, so `utf8`/`binary` columns gather
//! their bytes in one native pass (a `binary_view` column could point into
//! the frames, but pyarrow 26 has no take/filter/compare kernels for views).

use std::ffi::CStr;
use std::panic::RefUnwindSafe;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema, from_ffi, to_ffi};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array, NullArray,
    StringArray, make_array,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::ArrowError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyList, PyString};

use crate::log::{RecordBatch, bytes_or_none};
use strom_core::expr::{FieldTree, Value};
use strom_core::log::Span;

const SCHEMA: &CStr = c"arrow_schema";
const ARRAY: &CStr = c"arrow_array";

fn arrow_err(e: &ArrowError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// One Arrow array, for `pa.array(obj)` (zero-copy through `__arrow_c_array__`).
#[pyclass(module = "strom._core", frozen)]
pub struct ArrowArray {
    array: ArrayRef,
}

impl ArrowArray {
    fn new(array: ArrayRef) -> Self {
        ArrowArray { array }
    }
}

#[pymethods]
impl ArrowArray {
    /// The Arrow `PyCapsule` protocol: `(schema, array)` capsules; the
    /// requested schema is not honoured (the protocol lets an exporter
    /// ignore it), the array has the one type it was built with.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema;
        let (array, schema) = to_ffi(&self.array.to_data()).map_err(|e| arrow_err(&e))?;
        // A capsule that pyarrow did not import drops its struct, whose Drop
        // calls `release`; an imported one has `release` cleared by pyarrow.
        Ok((
            PyCapsule::new_with_value(py, schema, SCHEMA)?,
            PyCapsule::new_with_value(py, array, ARRAY)?,
        ))
    }

    fn __len__(&self) -> usize {
        self.array.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "ArrowArray({}, {} row(s))",
            self.array.data_type(),
            self.array.len()
        )
    }
}

/// Keeps a batch read alive while Arrow buffers point into it.
struct Owner(#[allow(dead_code, reason = "held, never read")] Py<RecordBatch>);

// A frozen pyclass is never mutated, and unwinding cannot observe it half-changed.
impl RefUnwindSafe for Owner {}

/// `items` (which live in the batch `owner` holds) as a buffer, not copied.
fn shared<T>(owner: &Arc<Owner>, items: &[T]) -> Buffer {
    let len = std::mem::size_of_val(items);
    let ptr = NonNull::from(items).cast::<u8>();
    // SAFETY: `items` is memory of the frozen `RecordBatch` that `owner`
    // keeps alive; nothing mutates or frees it while the buffer exists.
    unsafe { Buffer::from_custom_allocation(ptr, len, owner.clone()) }
}

fn nulls_of(spans: &[Option<Span>]) -> Option<NullBuffer> {
    spans
        .iter()
        .any(Option::is_none)
        .then(|| spans.iter().map(Option::is_some).collect::<NullBuffer>())
}

/// The spans' bytes gathered into one `utf8` (checked) or `binary` array.
fn gather(data: &[u8], spans: &[Option<Span>], utf8: bool) -> Result<ArrayRef, ArrowError> {
    let total: usize = spans.iter().flatten().map(|s| s.len).sum();
    let too_big = || ArrowError::InvalidArgumentError(format!("{total} bytes exceed 2 GiB"));
    i32::try_from(total).map_err(|_| too_big())?;
    let mut bytes = Vec::with_capacity(total);
    let mut offsets = Vec::with_capacity(spans.len() + 1);
    offsets.push(0i32);
    for span in spans {
        if let Some(s) = span {
            bytes.extend_from_slice(&data[s.start..s.start + s.len]);
        }
        offsets.push(bytes.len() as i32); // a null row repeats the offset
    }
    bytes_array(utf8, offsets, bytes, nulls_of(spans))
}

/// A `utf8` (checked) or `binary` array of `bytes` cut at `offsets`.
fn bytes_array(
    utf8: bool,
    offsets: Vec<i32>,
    bytes: Vec<u8>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef, ArrowError> {
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    let values = Buffer::from_vec(bytes);
    Ok(if utf8 {
        Arc::new(StringArray::try_new(offsets, values, nulls)?)
    } else {
        Arc::new(BinaryArray::try_new(offsets, values, nulls)?)
    })
}

fn bytes_column(
    data: &[u8],
    spans: &[Option<Span>],
    kind: Option<&str>,
    what: &str,
) -> PyResult<Option<ArrowArray>> {
    let array = match kind {
        None => return Ok(None),
        Some("utf8") => gather(data, spans, true),
        Some("binary") => gather(data, spans, false),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "{what}: unknown column kind {other:?} (utf8 or binary)"
            )));
        }
    };
    array
        .map(|a| Some(ArrowArray::new(a)))
        .map_err(|e| PyValueError::new_err(format!("{what} column: {e}")))
}

/// The columns `key`, `value`, `timestamp`, `partition`, `offset` of a batch
/// read, as `ArrowArray`s: `key`/`value` as `"utf8"` or `"binary"` (None:
/// not built here), `timestamp` and `offset` int64 sharing the batch's
/// memory, `partition` int32.
#[pyfunction]
#[pyo3(signature = (records, *, key, value))]
fn arrow_columns(
    records: &Bound<'_, RecordBatch>,
    key: Option<&str>,
    value: Option<&str>,
) -> PyResult<Vec<Option<ArrowArray>>> {
    let owner = Arc::new(Owner(records.clone().unbind()));
    let rb = records.get();
    let batch = &rb.batch;
    let rows = batch.len();
    let keys = bytes_column(&batch.data, &batch.keys, key, "key")?;
    let values = bytes_column(&batch.data, &batch.values, value, "value")?;
    let timestamps = Int64Array::new(ScalarBuffer::from(shared(&owner, &batch.timestamps)), None);
    // Kafka offsets are below 2^63: the u64s read as the same int64s.
    let offsets = Int64Array::new(ScalarBuffer::from(shared(&owner, &batch.offsets)), None);
    let partition = Int32Array::from(vec![rb.partition as i32; rows]);
    Ok(vec![
        keys,
        values,
        Some(ArrowArray::new(Arc::new(timestamps))),
        Some(ArrowArray::new(Arc::new(partition))),
        Some(ArrowArray::new(Arc::new(offsets))),
    ])
}

/// A list of `str` (or of `bytes`), None for null, as one `utf8` (`binary`)
/// array; None when it holds anything else, or only None (pyarrow infers).
fn list_column(list: &Bound<'_, PyList>) -> PyResult<Option<ArrayRef>> {
    let mut utf8 = None;
    let mut bytes = Vec::new();
    let mut offsets = Vec::with_capacity(list.len() + 1);
    offsets.push(0i32);
    let mut valid = Vec::with_capacity(list.len());
    for item in list.iter() {
        if item.is_none() {
            valid.push(false);
            offsets.push(offsets[offsets.len() - 1]); // no bytes: the same end
            continue;
        }
        let (text, part) = if let Ok(s) = item.cast::<PyString>() {
            let Ok(text) = s.to_str() else {
                return Ok(None); // a lone surrogate: pyarrow names it
            };
            (true, text.as_bytes())
        } else if let Ok(b) = item.cast::<PyBytes>() {
            (false, b.as_bytes())
        } else {
            return Ok(None);
        };
        if *utf8.get_or_insert(text) != text {
            return Ok(None);
        }
        bytes.extend_from_slice(part);
        valid.push(true);
        let end = i32::try_from(bytes.len())
            .map_err(|_| PyValueError::new_err("a column of more than 2 GiB"))?;
        offsets.push(end);
    }
    let Some(utf8) = utf8 else {
        return Ok(None);
    };
    let nulls = valid.contains(&false).then(|| NullBuffer::from(valid));
    bytes_array(utf8, offsets, bytes, nulls)
        .map(Some)
        .map_err(|e| arrow_err(&e))
}

/// The same columns as `arrow_columns` from a batch's Python lists (after a
/// Python step changed its rows), in one call: keys and values that are
/// all `str` or all `bytes` (or None) as `utf8`/`binary` (else None: left
/// to pyarrow).
#[pyfunction]
fn arrow_list_columns(
    keys: &Bound<'_, PyList>,
    values: &Bound<'_, PyList>,
    timestamps: Vec<i64>,
    offsets: Vec<i64>,
    partition: i32,
) -> PyResult<Vec<Option<ArrowArray>>> {
    let rows = timestamps.len();
    let fixed: [ArrayRef; 3] = [
        Arc::new(Int64Array::from(timestamps)),
        Arc::new(Int32Array::from(vec![partition; rows])),
        Arc::new(Int64Array::from(offsets)),
    ];
    let mut columns = vec![
        list_column(keys)?.map(ArrowArray::new),
        list_column(values)?.map(ArrowArray::new),
    ];
    columns.extend(fixed.into_iter().map(|a| Some(ArrowArray::new(a))));
    Ok(columns)
}

/// One array of the cells `cell` reads (None: a null cell).
fn of<'v, T, A: FromIterator<Option<T>> + Array + 'static>(
    column: &'v [Value<'_>],
    cell: impl Fn(&'v Value<'_>) -> Option<T>,
) -> ArrayRef {
    Arc::new(column.iter().map(cell).collect::<A>())
}

/// A decoded field as one typed array, as pyarrow would infer it from the
/// Python values (ints and floats together: float64); None for what needs
/// Python (objects, lists, big ints, mixed types).
fn typed(column: &[Value<'_>]) -> Option<ArrayRef> {
    let (mut bools, mut ints, mut floats, mut strs) = (false, false, false, false);
    for v in column {
        match v {
            Value::Null => {}
            Value::Bool(_) => bools = true,
            Value::Int(_) => ints = true,
            Value::Float(_) => floats = true,
            Value::Str(_) => strs = true,
            Value::BigInt(_) | Value::Json(..) => return None,
        }
    }
    Some(match (bools, ints, floats, strs) {
        (false, false, false, false) => Arc::new(NullArray::new(column.len())),
        (true, false, false, false) => of::<_, BooleanArray>(column, |v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        }),
        (false, true, false, false) => of::<_, Int64Array>(column, |v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        }),
        (false, _, true, false) => of::<_, Float64Array>(column, |v| match v {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }),
        (false, false, false, true) => of::<_, StringArray>(column, |v| match v {
            Value::Str(s) => Some(s.as_ref()),
            _ => None,
        }),
        _ => return None,
    })
}

type Columns = Vec<Option<ArrowArray>>;

/// Fields of JSON values, decoded in one pass into one typed array per path
/// (None where the values need Python, see `typed`), and the rows whose
/// value is not JSON as `(row, message)`. `values`: a batch read, or a list
/// of `bytes` (None: a null value, whose fields are null).
#[pyfunction]
#[allow(
    clippy::needless_pass_by_value,
    reason = "PyO3 extracts owned sequences"
)]
fn arrow_json_fields(
    py: Python<'_>,
    values: &Bound<'_, PyAny>,
    paths: Vec<Vec<String>>,
) -> PyResult<(Columns, Vec<(usize, String)>)> {
    let mut tree = FieldTree::default();
    let slots: Vec<usize> = paths.iter().map(|p| tree.slot(p)).collect();
    let decode = |slices: &[Option<&[u8]>]| {
        let mut errors = Vec::new();
        let columns = tree.decode(slices, |row, message| errors.push((row, message)));
        let typed: Vec<Option<ArrayRef>> = slots.iter().map(|&s| typed(&columns[s])).collect();
        (typed, errors)
    };
    let (columns, errors) = if let Ok(records) = values.cast::<RecordBatch>() {
        let batch = &records.get().batch;
        let slices: Vec<Option<&[u8]>> = (0..batch.len()).map(|i| batch.value(i)).collect();
        py.detach(|| decode(&slices))
    } else {
        let list = values.cast::<PyList>().map_err(|_| {
            PyTypeError::new_err("values: a RecordBatch read or a list of bytes/None")
        })?;
        // References held so the bytes can be read detached (bytes never change).
        let held: Vec<Option<Bound<'_, PyBytes>>> = list
            .iter()
            .map(|item| bytes_or_none(item, "a raw JSON value"))
            .collect::<PyResult<_>>()?;
        let slices: Vec<Option<&[u8]>> = held
            .iter()
            .map(|b| b.as_ref().map(PyBytesMethods::as_bytes))
            .collect();
        py.detach(|| decode(&slices))
    };
    Ok((
        columns
            .into_iter()
            .map(|c| c.map(ArrowArray::new))
            .collect(),
        errors,
    ))
}

/// An array handed over by `obj.__arrow_c_array__()` (a pyarrow Array, …).
pub(crate) fn import(obj: &Bound<'_, PyAny>) -> PyResult<ArrayRef> {
    let pair = obj.call_method0("__arrow_c_array__")?;
    let (schema, array): (Bound<'_, PyCapsule>, Bound<'_, PyCapsule>) = pair.extract()?;
    let schema = schema
        .pointer_checked(Some(SCHEMA))?
        .cast::<FFI_ArrowSchema>();
    let array = array.pointer_checked(Some(ARRAY))?.cast::<FFI_ArrowArray>();
    // SAFETY: the capsules hold the structs the protocol names; the array is
    // moved out (its release is ours now, the capsule's copy is marked
    // released), the schema only read while its capsule is alive.
    let data = unsafe { from_ffi(FFI_ArrowArray::from_raw(array.as_ptr()), schema.as_ref()) }
        .map_err(|e| arrow_err(&e))?;
    Ok(make_array(data))
}

/// The rows a boolean mask keeps (true; null and false drop) and its length.
#[pyfunction]
fn arrow_mask_rows(mask: &Bound<'_, PyAny>) -> PyResult<(usize, Vec<usize>)> {
    let array = import(mask)?;
    let Some(flags) = array.as_boolean_opt() else {
        return Err(PyTypeError::new_err(format!(
            "an array of {}, not a boolean mask",
            array.data_type()
        )));
    };
    let kept = match flags.nulls() {
        None => flags.values().set_indices().collect(),
        Some(nulls) => (flags.values() & nulls.inner()).set_indices().collect(),
    };
    Ok((flags.len(), kept))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ArrowArray>()?;
    m.add_function(wrap_pyfunction!(arrow_columns, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_list_columns, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_json_fields, m)?)?;
    m.add_function(wrap_pyfunction!(arrow_mask_rows, m)?)?;
    Ok(())
}
