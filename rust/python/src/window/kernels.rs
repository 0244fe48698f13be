//! The kernels behind the Python classes: each window kind over each
//! built-in aggregation, and the state the three classes share.

use std::sync::{Arc, Mutex, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use strom_core::window::aggregate::split_value_and_timestamp;
use strom_core::window::{
    Aggregate, Batch, BatchStats, BinaryBuffer, Count, EmitStrategy, Max, Mean, Min,
    SessionWindowedAggregation, SlidingWindowedAggregation, StoreChanges, Sum,
    TimeWindowedAggregation, ValueColumn, WindowedResults,
};

use super::columns::{KeysIn, ValueKind, ValueType, ValuesIn, timestamps_in};
use super::results::{NativeWindowedResults, Output, ResultsAny, column};
use crate::errors::IntoPyResult;
use crate::store::window::NativeWindowStore;

/// The aggregations the bindings run (every built-in one).
pub(super) trait Agg: Aggregate<Value: ValueType, Output: Output, State: Sync> {}
impl<T: Aggregate<Value: ValueType, Output: Output, State: Sync>> Agg for T {}

/// What the bindings need of a kernel, the same for the three kinds.
pub(super) trait Kernel: Send + Sync {
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
pub(super) struct Typed<K: Kernel> {
    kernel: K,
    agg: K::A,
}

impl<K: Kernel> Typed<K> {
    pub(super) fn process(
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

    pub(super) fn restore(
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
pub(super) struct ChangesOut {
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
    pub(super) fn packed_binary<'py>(
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
pub(super) trait Family {
    type K<A: Agg>: Kernel<A = A>;
}

pub(super) struct TimeFamily;
impl Family for TimeFamily {
    type K<A: Agg> = TimeWindowedAggregation<A>;
}
pub(super) struct SlidingFamily;
impl Family for SlidingFamily {
    type K<A: Agg> = SlidingWindowedAggregation<A>;
}
pub(super) struct SessionFamily;
impl Family for SessionFamily {
    type K<A: Agg> = SessionWindowedAggregation<A>;
}

pub(super) enum AnyKernel<F: Family> {
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
pub(super) trait Make<F: Family> {
    fn make<A: Agg>(&self, agg: A) -> strom_core::Result<F::K<A>>;
}

pub(super) fn build<F: Family>(
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

pub(super) fn emit_strategy(emit_final: bool) -> EmitStrategy {
    if emit_final {
        EmitStrategy::OnWindowClose
    } else {
        EmitStrategy::OnWindowUpdate
    }
}

/// The shared state of the three Python classes.
pub(super) struct Shared<F: Family> {
    pub(super) kernel: AnyKernel<F>,
    pub(super) kind: ValueKind,
    /// The buffers of dropped results, reused by the next batch: a large
    /// batch's results are hundreds of MB, which fresh pages would make
    /// the kernel fault in again on every call.
    pub(super) spare: Spare,
}

pub(super) type Spare = Arc<Mutex<Option<ResultsAny>>>;

impl<F: Family> Shared<F>
where
    AnyKernel<F>: Send,
{
    pub(super) fn process<'py>(
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
    pub(super) fn drain_into(
        &mut self,
        py: Python<'_>,
        store: &NativeWindowStore,
    ) -> PyResult<usize> {
        let kernel = &mut self.kernel;
        let changes = py.detach(|| dispatch!(kernel, k => k.drain()));
        store.put_columns(
            py,
            &changes.keys,
            &changes.values,
            &changes.present,
            &changes.starts,
            &changes.timestamps,
        )?;
        Ok(changes.starts.len())
    }

    pub(super) fn drain_changes<'py>(
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

    pub(super) fn restore(
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

    pub(super) fn restore_times(
        &mut self,
        observed: i64,
        last_emit_close: i64,
        store_observed: i64,
    ) {
        dispatch!(&mut self.kernel, k => k.kernel.restore_times(observed, last_emit_close, store_observed));
    }

    pub(super) fn times(&self) -> (i64, i64, i64) {
        dispatch!(&self.kernel, k => k.kernel.times())
    }

    pub(super) fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        stats_dict(py, &dispatch!(&self.kernel, k => k.kernel.totals()))
    }

    pub(super) fn value_type(&self) -> Option<&'static str> {
        match self.kind {
            ValueKind::None => None,
            ValueKind::Int => Some("int"),
            ValueKind::Float => Some("float"),
        }
    }
}

pub(super) fn stats_dict<'py>(py: Python<'py>, s: &BatchStats) -> PyResult<Bound<'py, PyDict>> {
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
