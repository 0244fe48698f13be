//! One batch's results (`NativeWindowedResults`), its columns built on demand.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use strom_core::window::{KafkaValue, ResultKeys, WindowedResults};

use super::kernels::{ChangesOut, Spare, stats_dict};

/// Result values of either numeric type.
pub(super) trait Output: KafkaValue + Default + Sync + for<'py> IntoPyObject<'py> {
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

pub(super) enum ResultsAny {
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

pub(super) fn column<'py, T>(
    py: Python<'py>,
    items: &[T],
    packed: bool,
) -> PyResult<Bound<'py, PyAny>>
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
pub(super) trait NeBytes {
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
    pub(super) inner: Option<ResultsAny>,
    pub(super) spare: Spare,
}

impl NativeWindowedResults {
    fn results(&self) -> &ResultsAny {
        self.inner.as_ref().expect("results live until dropped")
    }

    /// Calls `f` with each update's store write in order, as a caller that
    /// writes every update through a record cache puts it: (input row,
    /// window start, the store's value-and-timestamp bytes). False, without
    /// a call, unless the kernel sends store values and keys by input row.
    pub(crate) fn for_each_store_write(
        &self,
        mut f: impl FnMut(usize, i64, &[u8]) -> PyResult<()>,
    ) -> PyResult<bool> {
        on_results!(self.results(), r => {
            if r.is_empty() {
                return Ok(true);
            }
            if r.encoded_states.is_empty() || !matches!(r.keys, ResultKeys::InputRows) {
                return Ok(false);
            }
            let width = r.encoded_states.len() / r.len();
            let mut value = Vec::with_capacity(8 + width);
            for (i, state) in r.encoded_states.chunks_exact(width).enumerate() {
                value.clear();
                value.extend_from_slice(&r.timestamps[i].to_be_bytes());
                value.extend_from_slice(state);
                f(r.rows[i] as usize, r.starts[i], &value)?;
            }
            Ok(true)
        })
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
