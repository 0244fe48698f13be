//! The native windowed-aggregation kernels (`strom_core::window`) for
//! Python: `NativeTimeWindowedAggregation`, `NativeSlidingWindowedAggregation`
//! and `NativeSessionWindowedAggregation`, each one processor's state over
//! count, sum, min, max or mean of `int` (Java `long`) or `float` (Java
//! `double`) values.
//!
//! A call carries a whole batch as columns and returns columns:
//! - keys: a list of `bytes | None` (the serialized keys), or Arrow's
//!   `Binary` layout as a tuple `(data, offsets[, validity])` of `bytes`
//!   (offsets packed as native-endian int32, validity an LSB-first bitmap);
//! - timestamps: a list of `int`, or `bytes` of packed native-endian int64;
//! - values: None (a count), a list of `int | float | None` (or of dicts
//!   with `field` given: the value is `value.get(field)`), or `bytes` of
//!   packed native-endian int64 / float64 without nulls.
//!
//! Packed `bytes` are read in place (no copy) when aligned. The loop runs
//! detached from the interpreter. Results stay native until a column is
//! asked for, as a list or, with `packed=True`, as native-endian `bytes`
//! (`memoryview(b).cast("q")` reads them without a copy).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};

use strom_core::window::aggregate::split_value_and_timestamp;
use strom_core::window::{
    Aggregate, Batch, BatchStats, BinaryBuffer, BinaryColumn, Count, EmitStrategy, KafkaValue, Max,
    Mean, Min, NoValues, ResultKeys, SessionWindowedAggregation, SessionWindows,
    SlidingWindowedAggregation, SlidingWindows, StoreChanges, Sum, TimeWindowedAggregation,
    TimeWindows, Validity, ValueColumn, Values, WindowedResults,
};

use crate::errors::IntoPyResult;
use crate::window::NativeWindowStore;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

// --- input columns ---------------------------------------------------------

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
trait Packable: Copy + Send + Sync + 'static {
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
fn packed<'a, T: Packable>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [T]>> {
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
struct KeysIn<'py> {
    data: Cow<'py, [u8]>,
    offsets: Cow<'py, [i32]>,
    validity: Option<Cow<'py, [u8]>>,
}

impl<'py> KeysIn<'py> {
    fn new(obj: &Bound<'py, PyAny>) -> PyResult<Self> {
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

    fn column(&self) -> strom_core::Result<BinaryColumn<'_>> {
        let rows = self.offsets.len().saturating_sub(1);
        let validity = match &self.validity {
            Some(bits) => Some(Validity::new(bits, 0, rows)?),
            None => None,
        };
        BinaryColumn::new(&self.data, &self.offsets, validity)
    }
}

fn timestamps_in<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Cow<'py, [i64]>> {
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
enum ValueKind {
    None,
    Int,
    Float,
}

/// A value column: only nullness (count), or numbers with nulls.
struct ValuesIn<'py> {
    len: usize,
    ints: Cow<'py, [i64]>,
    floats: Cow<'py, [f64]>,
    validity: Option<Vec<u8>>,
}

impl<'py> ValuesIn<'py> {
    fn new(
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
trait ValueType: Copy + Send + Sync + 'static {
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

// --- kernels ---------------------------------------------------------------

/// What the bindings need of a kernel, the same for the three kinds.
/// The aggregations the bindings run (every built-in one).
trait Agg: Aggregate<Value: ValueType, Output: Output, State: Sync> {}
impl<T: Aggregate<Value: ValueType, Output: Output, State: Sync>> Agg for T {}

trait Kernel: Send + Sync {
    type A: Agg;
    /// Whether the store holds Kafka's `ValueAndTimestamp` (window stores)
    /// rather than the plain state (session stores).
    const TIMESTAMPED: bool;
    fn process_into<C: ValueColumn<Value = <Self::A as Aggregate>::Value>>(
        &mut self,
        batch: &Batch<'_, C>,
        wall_clock_ms: i64,
        out: &mut WindowedResults<<Self::A as Aggregate>::Output>,
    );
    fn drain_changes(&mut self) -> StoreChanges<<Self::A as Aggregate>::State>;
    fn restore_times(&mut self, observed: i64, last_emit_close: i64, store_observed: i64);
    fn restore_one(
        &mut self,
        key: &[u8],
        start: i64,
        end: i64,
        state: <Self::A as Aggregate>::State,
        ts: i64,
    );
    /// (observed stream time, last emit close time, store observed time)
    fn times(&self) -> (i64, i64, i64);
    fn totals(&self) -> BatchStats;
}

macro_rules! kernel_impl {
    ($kernel:ident, $timestamped:expr, |$k:ident, $key:ident, $start:ident, $end:ident, $state:ident, $ts:ident| $restore:expr) => {
        impl<A> Kernel for $kernel<A>
        where
            A: Agg,
        {
            type A = A;
            const TIMESTAMPED: bool = $timestamped;
            fn process_into<C: ValueColumn<Value = A::Value>>(
                &mut self,
                batch: &Batch<'_, C>,
                wall_clock_ms: i64,
                out: &mut WindowedResults<A::Output>,
            ) {
                $kernel::process_into(self, batch, wall_clock_ms, out);
            }
            fn drain_changes(&mut self) -> StoreChanges<A::State> {
                $kernel::drain_changes(self)
            }
            fn restore_times(&mut self, observed: i64, last_emit_close: i64, store_observed: i64) {
                $kernel::restore_times(self, observed, last_emit_close, store_observed);
            }
            #[allow(unused_variables, reason = "each kernel keys its windows differently")]
            fn restore_one(
                &mut self,
                $key: &[u8],
                $start: i64,
                $end: i64,
                $state: A::State,
                $ts: i64,
            ) {
                let $k = self;
                $restore;
            }
            fn times(&self) -> (i64, i64, i64) {
                (
                    self.observed_stream_time(),
                    self.last_emit_close_time(),
                    self.store_observed_time(),
                )
            }
            fn totals(&self) -> BatchStats {
                $kernel::totals(self)
            }
        }
    };
}

kernel_impl!(
    TimeWindowedAggregation,
    true,
    |k, key, start, end, state, ts| k.restore_window(key, start, state, ts)
);
kernel_impl!(
    SlidingWindowedAggregation,
    true,
    |k, key, start, end, state, ts| k.restore_window(key, start, state, ts)
);
kernel_impl!(
    SessionWindowedAggregation,
    false,
    |k, key, start, end, state, ts| k.restore_session(key, start, end, state)
);

/// One kernel of a kind, with its aggregation (to encode states).
struct Typed<K: Kernel> {
    kernel: K,
    agg: K::A,
}

impl<K: Kernel> Typed<K> {
    fn process(
        &mut self,
        keys: &KeysIn<'_>,
        timestamps: &[i64],
        values: &ValuesIn<'_>,
        wall_clock_ms: i64,
        spare: Option<ResultsAny>,
    ) -> strom_core::Result<ResultsAny> {
        let column = <<K::A as Aggregate>::Value as ValueType>::column(values)?;
        let batch = Batch::new(keys.column()?, timestamps, column)?;
        let mut out = spare.and_then(Output::unwrap).unwrap_or_default();
        self.kernel.process_into(&batch, wall_clock_ms, &mut out);
        Ok(Output::wrap(out))
    }

    fn drain(&mut self) -> ChangesOut {
        let changes = self.kernel.drain_changes();
        let mut values = BinaryBuffer::new();
        let mut present = Vec::with_capacity(changes.len());
        let mut v = Vec::with_capacity(8 + <K::A as Aggregate>::STATE_SIZE);
        for (state, &ts) in changes.states.iter().zip(&changes.timestamps) {
            v.clear();
            if let Some(s) = state {
                if K::TIMESTAMPED {
                    v.extend_from_slice(&ts.to_be_bytes());
                }
                self.agg.encode_state(*s, &mut v);
            }
            values.push(&v);
            present.push(state.is_some());
        }
        ChangesOut {
            keys: changes.keys,
            starts: changes.starts,
            ends: changes.ends,
            values,
            present,
            timestamps: changes.timestamps,
        }
    }

    fn restore(
        &mut self,
        keys: &[Vec<u8>],
        starts: &[i64],
        ends: &[i64],
        values: &[Vec<u8>],
    ) -> strom_core::Result<()> {
        for i in 0..keys.len() {
            let (ts, state) = if K::TIMESTAMPED {
                split_value_and_timestamp(&values[i])?
            } else {
                (ends[i], &values[i][..])
            };
            let state = self.agg.decode_state(state)?;
            self.kernel
                .restore_one(&keys[i], starts[i], ends[i], state, ts);
        }
        Ok(())
    }
}

/// Store changes, ready for `NativeWindowStore.put_all` /
/// `NativeSessionStore` puts.
struct ChangesOut {
    keys: BinaryBuffer,
    starts: Vec<i64>,
    ends: Vec<i64>,
    /// Empty where `present` is false (a removal).
    values: BinaryBuffer,
    present: Vec<bool>,
    timestamps: Vec<i64>,
}

impl ChangesOut {
    /// Arrow `Binary` buffers: `(data, offsets[, validity])` as bytes.
    fn packed_binary<'py>(
        py: Python<'py>,
        buffer: &BinaryBuffer,
        present: Option<&[bool]>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let mut offsets = Vec::with_capacity(buffer.offsets.len() * 4);
        for &o in &buffer.offsets {
            offsets.extend_from_slice(&o.to_ne_bytes());
        }
        let mut items = vec![
            PyBytes::new(py, &buffer.data).into_any(),
            PyBytes::new(py, &offsets).into_any(),
        ];
        if let Some(present) = present {
            let validity = if present.iter().all(|&p| p) {
                py.None().into_bound(py)
            } else {
                let mut bits = vec![0u8; present.len().div_ceil(8)];
                for (i, _) in present.iter().enumerate().filter(|(_, p)| **p) {
                    bits[i >> 3] |= 1 << (i & 7);
                }
                PyBytes::new(py, &bits).into_any()
            };
            items.push(validity);
        }
        PyTuple::new(py, items)
    }
}

/// A kernel family (time, sliding or session windows) over each built-in
/// aggregation.
trait Family {
    type K<A: Agg>: Kernel<A = A>;
}

struct TimeFamily;
impl Family for TimeFamily {
    type K<A: Agg> = TimeWindowedAggregation<A>;
}
struct SlidingFamily;
impl Family for SlidingFamily {
    type K<A: Agg> = SlidingWindowedAggregation<A>;
}
struct SessionFamily;
impl Family for SessionFamily {
    type K<A: Agg> = SessionWindowedAggregation<A>;
}

enum AnyKernel<F: Family> {
    Count(Typed<F::K<Count>>),
    SumI(Typed<F::K<Sum<i64>>>),
    SumF(Typed<F::K<Sum<f64>>>),
    MinI(Typed<F::K<Min<i64>>>),
    MinF(Typed<F::K<Min<f64>>>),
    MaxI(Typed<F::K<Max<i64>>>),
    MaxF(Typed<F::K<Max<f64>>>),
    MeanI(Typed<F::K<Mean<i64>>>),
    MeanF(Typed<F::K<Mean<f64>>>),
}

macro_rules! dispatch {
    ($any:expr, $k:ident => $body:expr) => {
        match $any {
            AnyKernel::Count($k) => $body,
            AnyKernel::SumI($k) => $body,
            AnyKernel::SumF($k) => $body,
            AnyKernel::MinI($k) => $body,
            AnyKernel::MinF($k) => $body,
            AnyKernel::MaxI($k) => $body,
            AnyKernel::MaxF($k) => $body,
            AnyKernel::MeanI($k) => $body,
            AnyKernel::MeanF($k) => $body,
        }
    };
}

/// Builds a family's kernel for an aggregation, given how to make the
/// kernel from the aggregation.
trait Make<F: Family> {
    fn make<A: Agg>(&self, agg: A) -> strom_core::Result<F::K<A>>;
}

fn build<F: Family>(
    py: Python<'_>,
    aggregation: &str,
    value_type: Option<&str>,
    make: &impl Make<F>,
) -> PyResult<(AnyKernel<F>, ValueKind)> {
    fn typed<F: Family, A: Agg>(agg: A, make: &impl Make<F>) -> strom_core::Result<Typed<F::K<A>>> {
        Ok(Typed {
            kernel: make.make(agg.clone())?,
            agg,
        })
    }
    let e = |r: strom_core::Error| crate::errors::to_py_err(py, r);
    let float = match (aggregation, value_type) {
        ("count", None) => {
            return Ok((
                AnyKernel::Count(typed(Count, make).map_err(e)?),
                ValueKind::None,
            ));
        }
        ("count", Some(_)) => {
            return Err(PyValueError::new_err("a count takes no value_type"));
        }
        (_, Some("int")) => false,
        (_, Some("float")) => true,
        (_, other) => {
            return Err(PyValueError::new_err(format!(
                "value_type must be 'int' or 'float' for {aggregation:?}, not {other:?}"
            )));
        }
    };
    let kernel = match (aggregation, float) {
        ("sum", false) => AnyKernel::SumI(typed(Sum::new(), make).map_err(e)?),
        ("sum", true) => AnyKernel::SumF(typed(Sum::new(), make).map_err(e)?),
        ("min", false) => AnyKernel::MinI(typed(Min::new(), make).map_err(e)?),
        ("min", true) => AnyKernel::MinF(typed(Min::new(), make).map_err(e)?),
        ("max", false) => AnyKernel::MaxI(typed(Max::new(), make).map_err(e)?),
        ("max", true) => AnyKernel::MaxF(typed(Max::new(), make).map_err(e)?),
        ("mean", false) => AnyKernel::MeanI(typed(Mean::new(), make).map_err(e)?),
        ("mean", true) => AnyKernel::MeanF(typed(Mean::new(), make).map_err(e)?),
        _ => {
            return Err(PyValueError::new_err(format!(
                "aggregation must be one of 'count', 'sum', 'min', 'max', 'mean', not \
                 {aggregation:?}"
            )));
        }
    };
    Ok((
        kernel,
        if float {
            ValueKind::Float
        } else {
            ValueKind::Int
        },
    ))
}

fn emit_strategy(emit_final: bool) -> EmitStrategy {
    if emit_final {
        EmitStrategy::OnWindowClose
    } else {
        EmitStrategy::OnWindowUpdate
    }
}

/// The shared state of the three Python classes.
struct Shared<F: Family> {
    kernel: AnyKernel<F>,
    kind: ValueKind,
    /// The buffers of dropped results, reused by the next batch: a large
    /// batch's results are hundreds of MB, which fresh pages would make
    /// the kernel fault in again on every call.
    spare: Spare,
}

type Spare = Arc<Mutex<Option<ResultsAny>>>;

impl<F: Family> Shared<F>
where
    AnyKernel<F>: Send,
{
    fn process<'py>(
        &mut self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        timestamps: &Bound<'py, PyAny>,
        values: Option<&Bound<'py, PyAny>>,
        field: Option<&str>,
        wall_clock_ms: i64,
    ) -> PyResult<NativeWindowedResults> {
        let keys = KeysIn::new(keys)?;
        let timestamps = timestamps_in(timestamps)?;
        let rows = timestamps.len();
        let values = ValuesIn::new(values, field, self.kind, rows)?;
        let kernel = &mut self.kernel;
        let spare = self
            .spare
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let results = py
            .detach(|| {
                dispatch!(kernel, k => k.process(&keys, &timestamps, &values, wall_clock_ms, spare))
            })
            .py_err(py)?;
        Ok(NativeWindowedResults {
            inner: Some(results),
            spare: Arc::clone(&self.spare),
        })
    }

    /// Drains the store writes straight into a window store: no Python
    /// object per write. Returns how many were drained.
    fn drain_into(&mut self, py: Python<'_>, store: &NativeWindowStore) -> PyResult<usize> {
        let kernel = &mut self.kernel;
        let changes = py.detach(|| dispatch!(kernel, k => k.drain()));
        store.put_columns(
            py,
            &changes.keys,
            &changes.values,
            &changes.present,
            &changes.starts,
        )?;
        Ok(changes.starts.len())
    }

    fn drain_changes<'py>(
        &mut self,
        py: Python<'py>,
        packed: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let kernel = &mut self.kernel;
        let changes = py.detach(|| dispatch!(kernel, k => k.drain()));
        let (keys, values) = if packed {
            (
                ChangesOut::packed_binary(py, &changes.keys, None)?.into_any(),
                ChangesOut::packed_binary(py, &changes.values, Some(&changes.present))?.into_any(),
            )
        } else {
            let keys = PyList::new(py, changes.keys.iter().map(|k| PyBytes::new(py, k)))?;
            let values = PyList::new(
                py,
                changes
                    .values
                    .iter()
                    .zip(&changes.present)
                    .map(|(v, &p)| p.then(|| PyBytes::new(py, v))),
            )?;
            (keys.into_any(), values.into_any())
        };
        PyTuple::new(
            py,
            [
                keys,
                column(py, &changes.starts, packed)?,
                column(py, &changes.ends, packed)?,
                values,
                column(py, &changes.timestamps, packed)?,
            ],
        )
    }

    fn restore(
        &mut self,
        py: Python<'_>,
        keys: &[Vec<u8>],
        starts: &[i64],
        ends: &[i64],
        values: &[Vec<u8>],
    ) -> PyResult<()> {
        let n = keys.len();
        if starts.len() != n || ends.len() != n || values.len() != n {
            return Err(PyValueError::new_err(format!(
                "restore columns differ in length: {n} keys, {} starts, {} ends, {} values",
                starts.len(),
                ends.len(),
                values.len()
            )));
        }
        let kernel = &mut self.kernel;
        py.detach(|| dispatch!(kernel, k => k.restore(keys, starts, ends, values)))
            .py_err(py)
    }

    fn restore_times(&mut self, observed: i64, last_emit_close: i64, store_observed: i64) {
        dispatch!(&mut self.kernel, k => k.kernel.restore_times(observed, last_emit_close, store_observed));
    }

    fn times(&self) -> (i64, i64, i64) {
        dispatch!(&self.kernel, k => k.kernel.times())
    }

    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &dispatch!(&self.kernel, k => k.kernel.totals()))
    }

    fn value_type(&self) -> Option<&'static str> {
        match self.kind {
            ValueKind::None => None,
            ValueKind::Int => Some("int"),
            ValueKind::Float => Some("float"),
        }
    }
}

fn stats_dict<'py>(py: Python<'py>, s: &BatchStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("dropped_records", s.dropped_records())?;
    d.set_item("dropped_expired", s.dropped_expired)?;
    d.set_item("dropped_null_key", s.dropped_null_key)?;
    d.set_item("dropped_null_value", s.dropped_null_value)?;
    d.set_item("dropped_invalid_timestamp", s.dropped_invalid_timestamp)?;
    d.set_item("emitted_final", s.emitted_final)?;
    d.set_item("expired_before_emit", s.expired_before_emit)?;
    Ok(d)
}

// --- results -----------------------------------------------------------------

/// Result values of either numeric type.
trait Output: KafkaValue + Default + Sync + for<'py> IntoPyObject<'py> {
    fn wrap(results: WindowedResults<Self>) -> ResultsAny;
    fn unwrap(results: ResultsAny) -> Option<WindowedResults<Self>>;
}

impl Output for i64 {
    fn wrap(results: WindowedResults<i64>) -> ResultsAny {
        ResultsAny::Int(results)
    }
    fn unwrap(results: ResultsAny) -> Option<WindowedResults<i64>> {
        match results {
            ResultsAny::Int(r) => Some(r),
            ResultsAny::Float(_) => None,
        }
    }
}

impl Output for f64 {
    fn wrap(results: WindowedResults<f64>) -> ResultsAny {
        ResultsAny::Float(results)
    }
    fn unwrap(results: ResultsAny) -> Option<WindowedResults<f64>> {
        match results {
            ResultsAny::Float(r) => Some(r),
            ResultsAny::Int(_) => None,
        }
    }
}

enum ResultsAny {
    Int(WindowedResults<i64>),
    Float(WindowedResults<f64>),
}

macro_rules! on_results {
    ($r:expr, $x:ident => $body:expr) => {
        match $r {
            ResultsAny::Int($x) => $body,
            ResultsAny::Float($x) => $body,
        }
    };
}

fn column<'py, T>(py: Python<'py>, items: &[T], packed: bool) -> PyResult<Bound<'py, PyAny>>
where
    T: Copy + IntoPyObject<'py> + NeBytes,
{
    if packed {
        let mut bytes = Vec::with_capacity(std::mem::size_of_val(items));
        for &x in items {
            x.extend_ne(&mut bytes);
        }
        Ok(PyBytes::new(py, &bytes).into_any())
    } else {
        Ok(PyList::new(py, items.iter().copied())?.into_any())
    }
}

/// Native-endian bytes of a column element.
trait NeBytes {
    fn extend_ne(self, out: &mut Vec<u8>);
}

macro_rules! ne_bytes {
    ($($t:ty),*) => {$(
        impl NeBytes for $t {
            fn extend_ne(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
ne_bytes!(i64, f64, u32);

/// One batch's results, in the order Kafka forwards them: `KTable` updates
/// of windowed keys. Columns are built on demand.
#[pyclass(module = "strom._core", frozen)]
pub struct NativeWindowedResults {
    /// Always Some until dropped.
    inner: Option<ResultsAny>,
    spare: Spare,
}

impl NativeWindowedResults {
    fn results(&self) -> &ResultsAny {
        self.inner.as_ref().expect("results live until dropped")
    }
}

impl Drop for NativeWindowedResults {
    /// Hands the buffers back to the kernel for its next batch.
    fn drop(&mut self) {
        if let Some(results) = self.inner.take()
            && let Ok(mut spare) = self.spare.lock()
            && spare.is_none()
        {
            *spare = Some(results);
        }
    }
}

#[pymethods]
impl NativeWindowedResults {
    fn __len__(&self) -> usize {
        on_results!(self.results(), r => r.len())
    }

    /// Whether the values are floats (mean, and float sum/min/max).
    #[getter]
    fn is_float(&self) -> bool {
        matches!(self.results(), ResultsAny::Float(_))
    }

    /// Per result, the input row whose processing forwarded it (for a
    /// final result, the row that triggered the emit).
    #[pyo3(signature = (packed=false))]
    fn rows<'py>(&self, py: Python<'py>, packed: bool) -> PyResult<Bound<'py, PyAny>> {
        on_results!(self.results(), r => column(py, &r.rows, packed))
    }

    /// The result keys, or None when each result's key is its input row's
    /// (every update; see `rows`); packed: Arrow `Binary` `(data, offsets)`.
    #[pyo3(signature = (packed=false))]
    fn keys<'py>(&self, py: Python<'py>, packed: bool) -> PyResult<Option<Bound<'py, PyAny>>> {
        on_results!(self.results(), r => match &r.keys {
            ResultKeys::InputRows => Ok(None),
            ResultKeys::Owned(keys) if packed => {
                Ok(Some(ChangesOut::packed_binary(py, keys, None)?.into_any()))
            }
            ResultKeys::Owned(keys) => Ok(Some(
                PyList::new(py, keys.iter().map(|k| PyBytes::new(py, k)))?.into_any(),
            )),
        })
    }

    #[pyo3(signature = (packed=false))]
    fn starts<'py>(&self, py: Python<'py>, packed: bool) -> PyResult<Bound<'py, PyAny>> {
        on_results!(self.results(), r => column(py, &r.starts, packed))
    }

    /// Window ends: exclusive for time windows, inclusive for sliding and
    /// session windows.
    #[pyo3(signature = (packed=false))]
    fn ends<'py>(&self, py: Python<'py>, packed: bool) -> PyResult<Bound<'py, PyAny>> {
        on_results!(self.results(), r => column(py, &r.ends, packed))
    }

    #[pyo3(signature = (packed=false))]
    fn timestamps<'py>(&self, py: Python<'py>, packed: bool) -> PyResult<Bound<'py, PyAny>> {
        on_results!(self.results(), r => column(py, &r.timestamps, packed))
    }

    /// The values (`int` or `float`); a tombstone's is None (packed: 0).
    #[pyo3(signature = (packed=false))]
    fn values<'py>(&self, py: Python<'py>, packed: bool) -> PyResult<Bound<'py, PyAny>> {
        on_results!(self.results(), r => {
            if packed || r.tombstones.is_empty() {
                column(py, &r.values, packed)
            } else {
                Ok(PyList::new(py, (0..r.len()).map(|i| r.value(i)))?.into_any())
            }
        })
    }

    /// Per result, whether it is a tombstone (a session absorbed by a
    /// merge); None when none is.
    fn tombstones<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        on_results!(self.results(), r => if r.tombstones.is_empty() {
            Ok(None)
        } else {
            Ok(Some(PyList::new(py, &r.tombstones)?))
        })
    }

    /// Per result, the window's previous result (None for a new window);
    /// None unless the kernel sends old values.
    fn old_values<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        on_results!(self.results(), r => if r.old_values.is_empty() && !r.is_empty() {
            Ok(None)
        } else {
            Ok(Some(PyList::new(py, &r.old_values)?))
        })
    }

    /// Per update, the window's new value as a window store holds it
    /// (Kafka's value-and-timestamp bytes); None unless the kernel sends
    /// store values.
    fn store_values<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        on_results!(self.results(), r => {
            if r.encoded_states.is_empty() || r.is_empty() {
                return Ok(None);
            }
            let width = r.encoded_states.len() / r.len();
            let mut value = Vec::with_capacity(8 + width);
            let items = r
                .encoded_states
                .chunks_exact(width)
                .zip(&r.timestamps)
                .map(|(state, ts)| {
                    value.clear();
                    value.extend_from_slice(&ts.to_be_bytes());
                    value.extend_from_slice(state);
                    PyBytes::new(py, &value)
                })
                .collect::<Vec<_>>();
            Ok(Some(PyList::new(py, items)?))
        })
    }

    /// This batch's counters: `dropped_records` (what Kafka's
    /// `dropped-records` metric counts) and its parts, `emitted_final`,
    /// `expired_before_emit`.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        on_results!(self.results(), r => stats_dict(py, &r.stats))
    }
}

// --- the Python classes ------------------------------------------------------

/// The methods the three classes share, after each one's constructor.
macro_rules! py_kernel {
    ($name:ident, $new:item $(, $extra:item)*) => {
        #[pymethods]
        impl $name {
            $new
            $($extra)*
            /// Processes one batch in record order (see the module docs for
            /// the column forms); `field` reads each value's field of a dict
            /// (a JSON object); `wall_clock_ms` paces final results.
            #[pyo3(signature = (keys, timestamps, values=None, *, field=None, wall_clock_ms=0))]
            fn process<'py>(
                &mut self,
                py: Python<'py>,
                keys: &Bound<'py, PyAny>,
                timestamps: &Bound<'py, PyAny>,
                values: Option<&Bound<'py, PyAny>>,
                field: Option<&str>,
                wall_clock_ms: i64,
            ) -> PyResult<NativeWindowedResults> {
                self.0
                    .process(py, keys, timestamps, values, field, wall_clock_ms)
            }

            /// The store writes since the last call, in order: `(keys,
            /// starts, ends, values, timestamps)`, values as the store holds
            /// them (window stores: Kafka's value-and-timestamp bytes;
            /// session stores: the aggregate's bytes) or None to delete.
            /// With `packed=True`, keys are Arrow `Binary` buffers `(data,
            /// offsets)`, values `(data, offsets, validity or None)`, the
            /// other columns native-endian int64 bytes.
            #[pyo3(signature = (packed=false))]
            fn drain_changes<'py>(
                &mut self,
                py: Python<'py>,
                packed: bool,
            ) -> PyResult<Bound<'py, PyTuple>> {
                self.0.drain_changes(py, packed)
            }

            /// After a restart: the times committed with the offsets, before
            /// any record or `restore`. Times never go back.
            fn restore_times(
                &mut self,
                observed_stream_time: i64,
                last_emit_close_time: i64,
                store_observed_time: i64,
            ) {
                self.0.restore_times(
                    observed_stream_time,
                    last_emit_close_time,
                    store_observed_time,
                );
            }

            /// After a restart: the store's entries (values as
            /// `drain_changes` gives them); those that can no longer change
            /// are ignored.
            fn restore(
                &mut self,
                py: Python<'_>,
                keys: Vec<Vec<u8>>,
                starts: Vec<i64>,
                ends: Vec<i64>,
                values: Vec<Vec<u8>>,
            ) -> PyResult<()> {
                self.0.restore(py, &keys, &starts, &ends, &values)
            }

            /// The largest record timestamp seen (-1 before any).
            #[getter]
            fn observed_stream_time(&self) -> i64 {
                self.0.times().0
            }

            /// The close time of the last final emit (-1 before any).
            #[getter]
            fn last_emit_close_time(&self) -> i64 {
                self.0.times().1
            }

            /// The store's observed stream time as the kernel emulates it.
            #[getter]
            fn store_observed_time(&self) -> i64 {
                self.0.times().2
            }

            /// None for a count, else "int" or "float".
            #[getter]
            fn value_type(&self) -> Option<&'static str> {
                self.0.value_type()
            }

            /// Counters since creation (see `NativeWindowedResults.stats`).
            #[getter]
            fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
                self.0.totals(py)
            }
        }
    };
}

/// Tumbling and hopping windows (Kafka's `KStreamWindowAggregate`).
#[pyclass(module = "strom._core")]
pub struct NativeTimeWindowedAggregation(Shared<TimeFamily>);

struct MakeTime {
    windows: TimeWindows,
    emit: EmitStrategy,
    retention: Option<i64>,
    emit_interval: Option<i64>,
    send_old_values: bool,
    send_store_values: bool,
}

impl Make<TimeFamily> for MakeTime {
    fn make<A: Agg>(&self, agg: A) -> strom_core::Result<TimeWindowedAggregation<A>> {
        let mut k = TimeWindowedAggregation::new(agg, self.windows, self.emit)
            .with_old_values(self.send_old_values)
            .with_states(self.send_store_values);
        if let Some(r) = self.retention {
            k = k.with_retention(r)?;
        }
        if let Some(i) = self.emit_interval {
            k = k.with_emit_interval(i)?;
        }
        Ok(k)
    }
}

py_kernel!(
    NativeTimeWindowedAggregation,
    /// `aggregation` is "count", "sum", "min", "max" or "mean";
    /// `value_type` "int" or "float" (None for a count).
    #[new]
    #[pyo3(signature = (
        aggregation, value_type, size_ms, advance_ms, grace_ms, *, emit_final=false,
        retention_ms=None, emit_interval_ms=None, send_old_values=false,
        send_store_values=false
    ))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn new(
        py: Python<'_>,
        aggregation: &str,
        value_type: Option<&str>,
        size_ms: i64,
        advance_ms: i64,
        grace_ms: i64,
        emit_final: bool,
        retention_ms: Option<i64>,
        emit_interval_ms: Option<i64>,
        send_old_values: bool,
        send_store_values: bool,
    ) -> PyResult<Self> {
        let windows = TimeWindows::of_size_and_grace(size_ms, grace_ms)
            .and_then(|w| w.advance_by(advance_ms))
            .py_err(py)?;
        let make = MakeTime {
            windows,
            emit: emit_strategy(emit_final),
            retention: retention_ms,
            emit_interval: emit_interval_ms,
            send_old_values,
            send_store_values,
        };
        let (kernel, kind) = build(py, aggregation, value_type, &make)?;
        Ok(Self(Shared {
            kernel,
            kind,
            spare: Spare::default(),
        }))
    },
    /// Like `drain_changes`, but writes them to `store` (as its `put_all`
    /// would, in order) without making Python objects: for a store that
    /// logs nothing. Returns how many writes were drained.
    fn drain_into(&mut self, py: Python<'_>, store: &NativeWindowStore) -> PyResult<usize> {
        self.0.drain_into(py, store)
    }
);

/// Sliding windows (Kafka's `KStreamSlidingWindowAggregate`).
#[pyclass(module = "strom._core")]
pub struct NativeSlidingWindowedAggregation(Shared<SlidingFamily>);

struct MakeSliding {
    windows: SlidingWindows,
    emit: EmitStrategy,
    retention: Option<i64>,
    emit_interval: Option<i64>,
    send_old_values: bool,
}

impl Make<SlidingFamily> for MakeSliding {
    fn make<A: Agg>(&self, agg: A) -> strom_core::Result<SlidingWindowedAggregation<A>> {
        let mut k = SlidingWindowedAggregation::new(agg, self.windows, self.emit)?
            .with_old_values(self.send_old_values);
        if let Some(r) = self.retention {
            k = k.with_retention(r)?;
        }
        if let Some(i) = self.emit_interval {
            k = k.with_emit_interval(i)?;
        }
        Ok(k)
    }
}

py_kernel!(
    NativeSlidingWindowedAggregation,
    #[new]
    #[pyo3(signature = (
        aggregation, value_type, time_difference_ms, grace_ms, *, emit_final=false,
        retention_ms=None, emit_interval_ms=None, send_old_values=false
    ))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn new(
        py: Python<'_>,
        aggregation: &str,
        value_type: Option<&str>,
        time_difference_ms: i64,
        grace_ms: i64,
        emit_final: bool,
        retention_ms: Option<i64>,
        emit_interval_ms: Option<i64>,
        send_old_values: bool,
    ) -> PyResult<Self> {
        let windows = SlidingWindows::of_time_difference_and_grace(time_difference_ms, grace_ms)
            .py_err(py)?;
        let make = MakeSliding {
            windows,
            emit: emit_strategy(emit_final),
            retention: retention_ms,
            emit_interval: emit_interval_ms,
            send_old_values,
        };
        let (kernel, kind) = build(py, aggregation, value_type, &make)?;
        Ok(Self(Shared {
            kernel,
            kind,
            spare: Spare::default(),
        }))
    }
);

/// Session windows (Kafka's `KStreamSessionWindowAggregate`).
#[pyclass(module = "strom._core")]
pub struct NativeSessionWindowedAggregation(Shared<SessionFamily>);

struct MakeSession {
    windows: SessionWindows,
    emit: EmitStrategy,
    retention: Option<i64>,
    emit_interval: Option<i64>,
}

impl Make<SessionFamily> for MakeSession {
    fn make<A: Agg>(&self, agg: A) -> strom_core::Result<SessionWindowedAggregation<A>> {
        let mut k = SessionWindowedAggregation::new(agg, self.windows, self.emit);
        if let Some(r) = self.retention {
            k = k.with_retention(r)?;
        }
        if let Some(i) = self.emit_interval {
            k = k.with_emit_interval(i)?;
        }
        Ok(k)
    }
}

py_kernel!(
    NativeSessionWindowedAggregation,
    #[new]
    #[pyo3(signature = (
        aggregation, value_type, inactivity_gap_ms, grace_ms, *, emit_final=false,
        retention_ms=None, emit_interval_ms=None
    ))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    fn new(
        py: Python<'_>,
        aggregation: &str,
        value_type: Option<&str>,
        inactivity_gap_ms: i64,
        grace_ms: i64,
        emit_final: bool,
        retention_ms: Option<i64>,
        emit_interval_ms: Option<i64>,
    ) -> PyResult<Self> {
        let windows =
            SessionWindows::of_inactivity_gap_and_grace(inactivity_gap_ms, grace_ms).py_err(py)?;
        let make = MakeSession {
            windows,
            emit: emit_strategy(emit_final),
            retention: retention_ms,
            emit_interval: emit_interval_ms,
        };
        let (kernel, kind) = build(py, aggregation, value_type, &make)?;
        Ok(Self(Shared {
            kernel,
            kind,
            spare: Spare::default(),
        }))
    }
);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeTimeWindowedAggregation>()?;
    m.add_class::<NativeSlidingWindowedAggregation>()?;
    m.add_class::<NativeSessionWindowedAggregation>()?;
    m.add_class::<NativeWindowedResults>()?;
    Ok(())
}
