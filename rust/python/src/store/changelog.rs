//! The changelog of a native store (`strom_core::store::changelog`): an open
//! store keeps the records of its writes, once logging is enabled, until the
//! task takes them as columns for its record collector. Restores never log.

use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyList};

use strom_core::store::ChangelogBuffer;

use crate::store::window::attached;

/// An open store and, when it is logged, the changelog records of its
/// writes not taken yet.
pub(crate) struct Logged<B> {
    pub(crate) store: B,
    pub(crate) changelog: Option<ChangelogBuffer>,
}

impl<B> Logged<B> {
    pub(crate) fn new(store: B) -> Self {
        Logged {
            store,
            changelog: None,
        }
    }

    /// Logs a write that was made under changelog key `key` (None: nothing
    /// was written, nothing to log).
    pub(crate) fn log(&mut self, key: Option<&[u8]>, value: Option<&[u8]>, timestamp: i64) {
        if let (Some(log), Some(key)) = (self.changelog.as_mut(), key) {
            log.push(key, value, timestamp);
        }
    }
}

/// A changelog's records as Python columns: keys, values (None: a
/// tombstone), timestamps.
pub(crate) type ChangelogColumns<'py> =
    (Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PyList>);

/// From now on the store's writes are also kept for its changelog.
pub(crate) fn enable<B>(py: Python<'_>, m: &Mutex<Option<Logged<B>>>) -> PyResult<()> {
    attached(py, m, |b| {
        b.changelog.get_or_insert_with(ChangelogBuffer::new);
        Ok(())
    })
}

/// Whether the store's writes are logged (False once closed).
pub(crate) fn is_logged<B>(py: Python<'_>, m: &Mutex<Option<Logged<B>>>) -> bool {
    m.lock_py_attached(py)
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .is_some_and(|b| b.changelog.is_some())
}

/// Takes the changelog records written since the last call, in write order.
pub(crate) fn take<'py, B>(
    py: Python<'py>,
    m: &Mutex<Option<Logged<B>>>,
) -> PyResult<ChangelogColumns<'py>> {
    let log = attached(py, m, |b| {
        Ok(b.changelog.as_mut().map(ChangelogBuffer::take))
    })?
    .unwrap_or_default();
    let n = log.len();
    Ok((
        PyList::new(py, (0..n).map(|i| PyBytes::new(py, log.key(i))))?,
        PyList::new(
            py,
            (0..n).map(|i| log.value(i).map(|v| PyBytes::new(py, v))),
        )?,
        PyList::new(py, log.timestamps())?,
    ))
}
