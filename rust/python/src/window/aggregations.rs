//! The Python classes: `NativeTimeWindowedAggregation`,
//! `NativeSlidingWindowedAggregation` and `NativeSessionWindowedAggregation`.

use std::sync::{Arc, PoisonError};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use strom_core::store::cache::NamedCacheId;
use strom_core::window::session::RecordCache;
use strom_core::window::{
    EmitStrategy, SessionWindowedAggregation, SessionWindows, SlidingWindowedAggregation,
    SlidingWindows, TimeWindowedAggregation, TimeWindows,
};

use super::kernels::{
    Agg, Make, SessionFamily, Shared, SlidingFamily, Spare, TimeFamily, build, emit_strategy,
};
use super::results::NativeWindowedResults;
use crate::errors::IntoPyResult;
use crate::store::cache::NativeThreadCache;
use crate::store::window::NativeWindowStore;

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
    /// would, in order, each logged with its timestamp when the store is)
    /// without making Python objects. Returns how many writes were drained.
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
    /// The record cache in front of the session store and its named cache.
    cache: Option<(Arc<Py<NativeThreadCache>>, NamedCacheId)>,
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
        if let Some((cache, id)) = &self.cache {
            k = k.with_record_cache(holds_session(Arc::clone(cache), *id));
        }
        Ok(k)
    }
}

/// Whether the named cache `id` holds a session's value, under the caching
/// session store's cache key (key ‖ 8-byte end ‖ 8-byte start). Called while
/// the kernel runs detached: the cache's lock is taken plainly.
fn holds_session(cache: Arc<Py<NativeThreadCache>>, id: NamedCacheId) -> RecordCache {
    Box::new(move |key, start, end| {
        let mut cache_key = Vec::with_capacity(key.len() + 16);
        cache_key.extend_from_slice(key);
        cache_key.extend_from_slice(&end.to_be_bytes());
        cache_key.extend_from_slice(&start.to_be_bytes());
        let inner = cache
            .get()
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        inner
            .cache
            .peek(id, &cache_key)
            .is_some_and(|hit| hit.value.is_some())
    })
}

py_kernel!(
    NativeSessionWindowedAggregation,
    #[new]
    #[pyo3(signature = (
        aggregation, value_type, inactivity_gap_ms, grace_ms, *, emit_final=false,
        retention_ms=None, emit_interval_ms=None, record_cache=None, record_cache_id=0
    ))]
    #[allow(clippy::too_many_arguments, reason = "Python keyword arguments")]
    /// With `record_cache` (the thread cache in front of the session store,
    /// `record_cache_id` its named cache), lookups also find the expired
    /// sessions the cache still holds, as Kafka's caching session store does.
    fn new(
        py: Python<'_>,
        aggregation: &str,
        value_type: Option<&str>,
        inactivity_gap_ms: i64,
        grace_ms: i64,
        emit_final: bool,
        retention_ms: Option<i64>,
        emit_interval_ms: Option<i64>,
        record_cache: Option<Py<NativeThreadCache>>,
        record_cache_id: i64,
    ) -> PyResult<Self> {
        let windows =
            SessionWindows::of_inactivity_gap_and_grace(inactivity_gap_ms, grace_ms).py_err(py)?;
        let cache = match record_cache {
            Some(cache) => {
                let id = cache
                    .get()
                    .with(py, |inner| inner.id(py, record_cache_id))?;
                Some((Arc::new(cache), id))
            }
            None => None,
        };
        let make = MakeSession {
            windows,
            emit: emit_strategy(emit_final),
            retention: retention_ms,
            emit_interval: emit_interval_ms,
            cache,
        };
        let (kernel, kind) = build(py, aggregation, value_type, &make)?;
        Ok(Self(Shared {
            kernel,
            kind,
            spare: Spare::default(),
        }))
    }
);
