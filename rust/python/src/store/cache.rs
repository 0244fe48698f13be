//! `NativeThreadCache`: the record cache of one stream thread (Kafka's
//! `ThreadCache` / `NamedCache`, see `strom_core::store::cache`) for the
//! Python engine.
//!
//! Named caches are known to Python by small integer ids handed out here
//! (the core's `NamedCacheId` is opaque); an id is never reused, so an id of
//! a closed cache stays stale even if its namespace is opened again.
//!
//! Every call is per record and short, so all of them run attached. As in
//! `kv.rs`, the lock is taken with `lock_py_attached` (try once, else
//! detach to wait), so a thread never waits for it while attached.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyList, PyTuple};

use strom_core::store::ThreadCache;
use strom_core::store::cache::{DirtyEntry, NamedCacheId};

use crate::errors::{IntoPyResult, new_error};
use crate::store::window::NativeWindowStore;
use crate::window::NativeWindowedResults;

pub(crate) struct Inner {
    pub(crate) cache: ThreadCache,
    /// Python id → core id; None once closed.
    ids: Vec<Option<NamedCacheId>>,
    /// Core id → Python id, for the open caches.
    by_core: HashMap<NamedCacheId, usize>,
}

impl Inner {
    /// The core id behind a Python id, or `StoreError` if unknown or closed.
    pub(crate) fn id(&self, py: Python<'_>, cache_id: i64) -> PyResult<NamedCacheId> {
        usize::try_from(cache_id)
            .ok()
            .and_then(|i| self.ids.get(i).copied().flatten())
            .ok_or_else(|| {
                new_error(
                    py,
                    "StoreError",
                    format!("unknown or closed named cache id {cache_id}"),
                )
            })
    }
}

#[pyclass(module = "strom._core", frozen)]
pub struct NativeThreadCache {
    pub(crate) inner: Mutex<Inner>,
}

impl NativeThreadCache {
    /// Locks the cache while attached (see the module docs) and runs `f`.
    pub(crate) fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Inner) -> PyResult<T>,
    ) -> PyResult<T> {
        // A panic while holding the lock leaves a cache we can still use:
        // every core call leaves it consistent or fails before changing it.
        let mut guard = self
            .inner
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut guard)
    }

    /// Puts dirty entries in order, entry `i`'s key being `keys[i]` followed
    /// by each column of `suffixes` as 8 big-endian bytes; returns what the
    /// evictions flushed, in emission order. `call` names the Python method
    /// in errors.
    #[allow(clippy::too_many_arguments, reason = "the columns of a Python call")]
    fn put_dirty(
        &self,
        call: &str,
        py: Python<'_>,
        cache_id: i64,
        keys: &Bound<'_, PyList>,
        values: &Bound<'_, PyList>,
        timestamps: &[i64],
        suffixes: &[&[i64]],
    ) -> PyResult<Vec<DirtyEntry>> {
        let n = keys.len();
        if values.len() != n || timestamps.len() != n || suffixes.iter().any(|s| s.len() != n) {
            return Err(PyValueError::new_err(format!(
                "{call} columns differ in length: {n} keys, {} values, {} timestamps, \
                 suffixes of {:?}",
                values.len(),
                timestamps.len(),
                suffixes.iter().map(|s| s.len()).collect::<Vec<_>>()
            )));
        }
        let mut flushed = Vec::new();
        self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            let mut key = Vec::new();
            for (i, (k, v)) in keys.iter().zip(values.iter()).enumerate() {
                key.clear();
                key.extend_from_slice(k.cast::<PyBytes>()?.as_bytes());
                for column in suffixes {
                    key.extend_from_slice(&column[i].to_be_bytes());
                }
                let value = if v.is_none() {
                    None
                } else {
                    Some(v.cast::<PyBytes>()?.as_bytes())
                };
                inner
                    .cache
                    .put_into(id, &key, value, timestamps[i], true, &mut flushed)
                    .py_err(py)?;
            }
            Ok(())
        })?;
        Ok(flushed)
    }
}

/// `[(key, value, timestamp), ...]` in emission order.
fn dirty_list<'py>(py: Python<'py>, entries: &[DirtyEntry]) -> PyResult<Bound<'py, PyList>> {
    if entries.is_empty() {
        return Ok(PyList::empty(py));
    }
    PyList::new(
        py,
        entries
            .iter()
            .map(|e| {
                (
                    PyBytes::new(py, &e.key),
                    e.value.as_deref().map(|v| PyBytes::new(py, v)),
                    e.timestamp,
                )
                    .into_pyobject(py)
            })
            .collect::<PyResult<Vec<Bound<'py, PyTuple>>>>()?,
    )
}

#[pymethods]
impl NativeThreadCache {
    /// A cache of at most `max_bytes` over all its named caches; 0 evicts
    /// every put at once.
    #[new]
    fn new(max_bytes: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                cache: ThreadCache::new(max_bytes),
                ids: Vec::new(),
                by_core: HashMap::new(),
            }),
        }
    }

    /// The id of the named cache for `namespace`, created empty if not open.
    fn named(&self, py: Python<'_>, namespace: &str) -> PyResult<usize> {
        self.with(py, |inner| {
            let core = inner.cache.named(namespace);
            Ok(*inner.by_core.entry(core).or_insert_with(|| {
                inner.ids.push(Some(core));
                inner.ids.len() - 1
            }))
        })
    }

    /// `(value, timestamp)` of a cached key (value None: a cached delete),
    /// None when not cached; a hit becomes the most recently used entry.
    fn get<'py>(
        &self,
        py: Python<'py>,
        cache_id: i64,
        key: &[u8],
    ) -> PyResult<Option<(Option<Bound<'py, PyBytes>>, i64)>> {
        self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            Ok(inner
                .cache
                .get(id, key)
                .map(|entry| (entry.value.map(|v| PyBytes::new(py, v)), entry.timestamp)))
        })
    }

    /// Caches `value` (None: a delete) for `key`; returns the dirty entries
    /// the evictions this put caused flushed, in emission order.
    fn put<'py>(
        &self,
        py: Python<'py>,
        cache_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        dirty: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let flushed = self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            inner.cache.put(id, key, value, timestamp, dirty).py_err(py)
        })?;
        dirty_list(py, &flushed)
    }

    /// `put` for many dirty entries in order, in one call: entry `i`'s key
    /// is `keys[i]` followed by each column of `suffixes` as 8 big-endian
    /// bytes (a window's start; a session's end and start). Returns what the
    /// evictions flushed, in emission order, as `put` does one by one.
    #[pyo3(signature = (cache_id, keys, values, timestamps, suffixes=Vec::new()))]
    #[allow(
        clippy::needless_pass_by_value,
        reason = "extracted from Python lists by PyO3"
    )]
    fn put_all<'py>(
        &self,
        py: Python<'py>,
        cache_id: i64,
        keys: &Bound<'py, PyList>,
        values: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        suffixes: Vec<Vec<i64>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let suffixes: Vec<&[i64]> = suffixes.iter().map(Vec::as_slice).collect();
        let flushed = self.put_dirty(
            "put_all",
            py,
            cache_id,
            keys,
            values,
            &timestamps,
            &suffixes,
        )?;
        dirty_list(py, &flushed)
    }

    /// `put_all` of window updates (`suffixes`: their starts) whose
    /// evictions are written straight into `store` (a window store behind
    /// the cache with nothing to hand them to), in order, as the caching
    /// store writes them out; returns how many were written.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "extracted from Python lists by PyO3"
    )]
    #[allow(clippy::too_many_arguments, reason = "the columns of a Python call")]
    fn put_all_into<'py>(
        &self,
        py: Python<'py>,
        cache_id: i64,
        keys: &Bound<'py, PyList>,
        values: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        window_starts: Vec<i64>,
        store: &NativeWindowStore,
    ) -> PyResult<usize> {
        let flushed = self.put_dirty(
            "put_all_into",
            py,
            cache_id,
            keys,
            values,
            &timestamps,
            &[&window_starts],
        )?;
        store.put_cache_entries(py, &flushed)?;
        Ok(flushed.len())
    }

    /// Every update of a time-windowed kernel's `results` put into the
    /// named cache in order, as `put_all_into` puts them: the key of its
    /// input row in `keys`, its window start, the store value the kernel
    /// made, the input row's timestamp in `timestamps`; evictions go into
    /// `store`. Returns `(entries written to the store, the largest window
    /// start put or None)`.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "extracted from Python lists by PyO3"
    )]
    fn put_results_into<'py>(
        &self,
        py: Python<'py>,
        cache_id: i64,
        results: &NativeWindowedResults,
        keys: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        store: &NativeWindowStore,
    ) -> PyResult<(usize, Option<i64>)> {
        let mut flushed = Vec::new();
        let mut highest = None;
        self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            let mut key = Vec::new();
            let complete = results.for_each_store_write(|row, start, value| {
                let (Ok(k), Some(&ts)) = (keys.get_item(row), timestamps.get(row)) else {
                    return Err(PyValueError::new_err(format!(
                        "put_results_into: no key or timestamp for input row {row} ({} keys, {} \
                         timestamps)",
                        keys.len(),
                        timestamps.len()
                    )));
                };
                key.clear();
                key.extend_from_slice(k.cast::<PyBytes>()?.as_bytes());
                key.extend_from_slice(&start.to_be_bytes());
                highest = highest.max(Some(start));
                inner
                    .cache
                    .put_into(id, &key, Some(value), ts, true, &mut flushed)
                    .py_err(py)
            })?;
            if complete {
                Ok(())
            } else {
                Err(PyValueError::new_err(
                    "put_results_into takes the results of a kernel that sends store values",
                ))
            }
        })?;
        store.put_cache_entries(py, &flushed)?;
        Ok((flushed.len(), highest))
    }

    /// `flush` written straight into the window store `store` (see
    /// `put_all_into`); returns how many entries were written.
    fn flush_into(
        &self,
        py: Python<'_>,
        cache_id: i64,
        store: &NativeWindowStore,
    ) -> PyResult<usize> {
        let flushed = self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            Ok(inner.cache.flush(id))
        })?;
        store.put_cache_entries(py, &flushed)?;
        Ok(flushed.len())
    }

    /// Every dirty entry of the named cache in dirty order, marked clean;
    /// flushed deletes leave the cache.
    fn flush<'py>(&self, py: Python<'py>, cache_id: i64) -> PyResult<Bound<'py, PyList>> {
        let flushed = self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            Ok(inner.cache.flush(id))
        })?;
        dirty_list(py, &flushed)
    }

    /// The cached entries whose keys start with `prefix`, in key order, as
    /// `(key, value)` (value None: a cached delete); each counts as a use,
    /// as Kafka's cache iterators do.
    fn prefix_scan<'py>(
        &self,
        py: Python<'py>,
        cache_id: i64,
        prefix: &[u8],
    ) -> PyResult<Bound<'py, PyList>> {
        let entries = self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            Ok(inner.cache.prefix_scan(id, prefix))
        })?;
        PyList::new(
            py,
            entries.iter().map(|(k, v)| {
                (
                    PyBytes::new(py, k),
                    v.as_deref().map(|v| PyBytes::new(py, v)),
                )
            }),
        )
    }

    /// Drops the named cache and its entries (dirty ones without flushing).
    fn close(&self, py: Python<'_>, cache_id: i64) -> PyResult<()> {
        self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            inner.cache.close(id);
            inner.by_core.remove(&id);
            // Checked by `id` above: the index is in range.
            inner.ids[cache_id as usize] = None;
            Ok(())
        })
    }

    /// `(hits, misses)` of a named cache's point reads since it opened
    /// (Kafka's `hit-ratio` is hits over reads).
    fn hit_stats(&self, py: Python<'_>, cache_id: i64) -> PyResult<(u64, u64)> {
        self.with(py, |inner| {
            let id = inner.id(py, cache_id)?;
            Ok(inner
                .cache
                .named_stats(id)
                .map_or((0, 0), |s| (s.hits, s.misses)))
        })
    }

    /// Bytes counted over all named caches.
    fn size_bytes(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |inner| Ok(inner.cache.size_bytes()))
    }

    /// Entries over all named caches.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with(py, |inner| Ok(inner.cache.num_entries()))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeThreadCache>()?;
    Ok(())
}
