//! `NativeKeyValueStore`: the bytes-in/bytes-out key-value store (in memory,
//! or persistent and log-structured) and the batch kernels that update it.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use strom_core::store::{
    InMemoryKeyValueStore, KeyValueBytes, PersistentKeyValueStore, PersistentStoreOptions, kernels,
};

use crate::errors::{IntoPyResult, new_error, to_py_err};

enum Backend {
    Memory(InMemoryKeyValueStore),
    Persistent(Box<PersistentKeyValueStore>),
}

impl Backend {
    fn kv(&mut self) -> &mut dyn KeyValueBytes {
        match self {
            Backend::Memory(store) => store,
            Backend::Persistent(store) => store.as_mut(),
        }
    }
}

#[pyclass(module = "strom._core", frozen)]
pub struct NativeKeyValueStore {
    /// None once closed.
    inner: Mutex<Option<Backend>>,
}

struct Open<'a>(MutexGuard<'a, Option<Backend>>);

impl Open<'_> {
    fn kv(&mut self) -> &mut dyn KeyValueBytes {
        self.0.as_mut().expect("checked when opened").kv()
    }
}

impl NativeKeyValueStore {
    fn open_store(&self, py: Python<'_>) -> PyResult<Open<'_>> {
        // A panic while holding the lock leaves a store we can still read.
        let guard = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            return Err(new_error(py, "StoreError", "the store is closed".into()));
        }
        Ok(Open(guard))
    }
}

fn entries(py: Python<'_>, items: Vec<(Vec<u8>, Vec<u8>)>) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for (k, v) in items {
        out.append(PyTuple::new(
            py,
            [PyBytes::new(py, &k), PyBytes::new(py, &v)],
        )?)?;
    }
    Ok(out)
}

fn opt_bytes(py: Python<'_>, value: Option<Vec<u8>>) -> Option<Bound<'_, PyBytes>> {
    value.map(|v| PyBytes::new(py, &v))
}

#[pymethods]
impl NativeKeyValueStore {
    /// An in-memory store.
    #[new]
    fn new() -> Self {
        Self {
            inner: Mutex::new(Some(Backend::Memory(InMemoryKeyValueStore::new()))),
        }
    }

    /// Opens (or creates) the persistent store in `path` as of its last
    /// commit; returns it with that commit's metadata (None: no commit yet).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<(Self, Option<Bound<'_, PyBytes>>)> {
        let (store, committed) = py
            .detach(move || PersistentKeyValueStore::open(path, PersistentStoreOptions::default()))
            .py_err(py)?;
        let store = Self {
            inner: Mutex::new(Some(Backend::Persistent(Box::new(store)))),
        };
        Ok((store, opt_bytes(py, committed)))
    }

    /// Removes a persistent store's directory (it must not be open).
    #[staticmethod]
    fn destroy(py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(move || PersistentKeyValueStore::destroy(path))
            .py_err(py)
    }

    #[getter]
    fn persistent(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(matches!(
            self.open_store(py)?.0.as_ref(),
            Some(Backend::Persistent(_))
        ))
    }

    fn get<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let value = self.open_store(py)?.kv().get(key).py_err(py)?;
        Ok(opt_bytes(py, value))
    }

    #[pyo3(signature = (key, value))]
    fn put(&self, py: Python<'_>, key: &[u8], value: Option<&[u8]>) -> PyResult<()> {
        self.open_store(py)?.kv().put(key, value).py_err(py)
    }

    fn put_if_absent<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut store = self.open_store(py)?;
        let existing = store.kv().get(key).py_err(py)?;
        if existing.is_none() {
            store.kv().put(key, Some(value)).py_err(py)?;
        }
        Ok(opt_bytes(py, existing))
    }

    fn delete<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut store = self.open_store(py)?;
        let existing = store.kv().get(key).py_err(py)?;
        store.kv().put(key, None).py_err(py)?;
        Ok(opt_bytes(py, existing))
    }

    /// Puts (or, for a None value, deletes) each pair in order: a batch
    /// write, and the restore path from a changelog.
    fn put_all(&self, keys: &Bound<'_, PyList>, values: &Bound<'_, PyList>) -> PyResult<()> {
        let py = keys.py();
        let mut store = self.open_store(py)?;
        let kv = store.kv();
        for (k, v) in keys.iter().zip(values.iter()) {
            let key = k.cast::<PyBytes>()?.as_bytes();
            if v.is_none() {
                kv.put(key, None).py_err(py)?;
            } else {
                kv.put(key, Some(v.cast::<PyBytes>()?.as_bytes()))
                    .py_err(py)?;
            }
        }
        Ok(())
    }

    /// A snapshot of `from <= key <= to` (None = open bound), so callers may
    /// modify the store while they iterate the result.
    #[pyo3(signature = (key_from=None, key_to=None, reverse=false))]
    fn range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        reverse: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let items = self
            .open_store(py)?
            .kv()
            .range(key_from, key_to, reverse)
            .py_err(py)?;
        entries(py, items)
    }

    fn prefix_scan<'py>(&self, py: Python<'py>, prefix: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let items = self.open_store(py)?.kv().prefix_scan(prefix).py_err(py)?;
        entries(py, items)
    }

    fn approximate_num_entries(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.open_store(py)?.kv().approximate_num_entries())
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.approximate_num_entries(py)
    }

    /// Deletes every entry.
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        let mut store = self.open_store(py)?;
        let kv = store.kv();
        for (key, _) in kv.range(None, None, false).py_err(py)? {
            kv.put(&key, None).py_err(py)?;
        }
        Ok(())
    }

    /// Makes the writes so far durable together with `metadata` (the
    /// changelog offset and stream time they reflect). A no-op in memory.
    fn commit(&self, py: Python<'_>, metadata: &[u8]) -> PyResult<()> {
        let mut store = self.open_store(py)?;
        match store.0.as_mut() {
            // fsync and maybe compaction: worth letting other threads run.
            Some(Backend::Persistent(s)) => py.detach(|| s.commit(metadata)).py_err(py),
            _ => Ok(()),
        }
    }

    /// Releases the store (and, when persistent, its directory lock).
    fn close(&self) {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    /// The count kernel: returns the new counts (ints) and their Long-serde
    /// bytes (for the changelog), one per key, in record order.
    fn count<'py>(
        &self,
        keys: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = keys.py();
        let key_slices = keys
            .iter()
            .map(|k| k.cast_into::<PyBytes>().map_err(PyErr::from))
            .collect::<PyResult<Vec<_>>>()?;
        let mut encoded = Vec::with_capacity(key_slices.len());
        let counts = kernels::count(
            self.open_store(py)?.kv(),
            key_slices.iter().map(PyBytesMethods::as_bytes),
            &mut encoded,
        )
        .map_err(|e| to_py_err(py, e))?;
        let encoded_list = PyList::empty(py);
        for bytes in &encoded {
            encoded_list.append(PyBytes::new(py, bytes))?;
        }
        Ok((PyList::new(py, counts)?, encoded_list))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeKeyValueStore>()?;
    Ok(())
}
