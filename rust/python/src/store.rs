//! `NativeKeyValueStore`: the bytes-in/bytes-out key-value store and the
//! batch kernels that update it.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use strom_core::store::{InMemoryKeyValueStore, kernels};

use crate::errors::to_py_err;

#[pyclass(module = "strom._core", frozen)]
pub struct NativeKeyValueStore {
    inner: Mutex<InMemoryKeyValueStore>,
}

impl NativeKeyValueStore {
    fn store(&self) -> MutexGuard<'_, InMemoryKeyValueStore> {
        // A panic while holding the lock leaves a store we can still read.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn entries<'py, 'a>(
    py: Python<'py>,
    iter: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (k, v) in iter {
        out.append(PyTuple::new(
            py,
            [PyBytes::new(py, k), PyBytes::new(py, v)],
        )?)?;
    }
    Ok(out)
}

#[pymethods]
impl NativeKeyValueStore {
    #[new]
    fn new() -> Self {
        Self {
            inner: Mutex::new(InMemoryKeyValueStore::new()),
        }
    }

    fn get<'py>(&self, py: Python<'py>, key: &[u8]) -> Option<Bound<'py, PyBytes>> {
        self.store().get(key).map(|v| PyBytes::new(py, v))
    }

    #[pyo3(signature = (key, value))]
    fn put(&self, key: &[u8], value: Option<&[u8]>) {
        self.store().put(key, value);
    }

    fn put_if_absent<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
    ) -> Option<Bound<'py, PyBytes>> {
        self.store()
            .put_if_absent(key, value)
            .map(|v| PyBytes::new(py, &v))
    }

    fn delete<'py>(&self, py: Python<'py>, key: &[u8]) -> Option<Bound<'py, PyBytes>> {
        self.store().delete(key).map(|v| PyBytes::new(py, &v))
    }

    /// Puts (or, for a None value, deletes) each pair in order: a batch
    /// write, and the restore path from a changelog.
    fn put_all(&self, keys: &Bound<'_, PyList>, values: &Bound<'_, PyList>) -> PyResult<()> {
        let mut store = self.store();
        for (k, v) in keys.iter().zip(values.iter()) {
            let key = k.cast::<PyBytes>()?.as_bytes();
            if v.is_none() {
                store.put(key, None);
            } else {
                store.put(key, Some(v.cast::<PyBytes>()?.as_bytes()));
            }
        }
        Ok(())
    }

    /// A snapshot of `from <= key <= to` (None = open bound), so callers may
    /// modify the store while they iterate the result.
    #[pyo3(signature = (key_from=None, key_to=None))]
    fn range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> PyResult<Bound<'py, PyList>> {
        entries(py, self.store().range(key_from, key_to))
    }

    fn approximate_num_entries(&self) -> usize {
        self.store().len()
    }

    fn __len__(&self) -> usize {
        self.store().len()
    }

    fn clear(&self) {
        self.store().clear();
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
            &mut self.store(),
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
