//! `NativeWindowStore`: the bytes-in/bytes-out window store (Kafka's
//! `WindowStore<Bytes, byte[]>`), in memory or persistent (one log-structured
//! store per time segment, see `strom_core::store::persistent_time_segments`), and
//! Kafka's windowed store-key encoding, which is also the changelog key.
//!
//! Scans return columns (lists of keys, starts, ends, values) so that the
//! typed layer deserializes each with one batch call.
//!
//! Locking follows `kv.rs`: the core logs through `pyo3_log`, which
//! attaches, so no thread may wait for a store's lock while attached.
//! Single-window calls lock with `lock_py_attached` (try once, else detach to
//! wait) and run attached; batches and scans copy their arguments out of the
//! Python objects, then lock and work detached.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyList};

use strom_core::Error;
use strom_core::store::time_segments::{PutOutcome, default_segment_interval};
use strom_core::store::window::{self, WindowEntry};
use strom_core::store::{
    InMemoryWindowStore, PersistentSegmentFactory, PersistentStoreOptions, WindowStore,
};
use strom_core::window::BinaryBuffer;

use crate::errors::IntoPyResult;
use crate::log::RecordBatch;
use crate::store::changelog::{self, ChangelogColumns, Logged};
use crate::store::changelog_pairs;

pub(crate) fn closed() -> Error {
    Error::Store("the store is closed".into())
}

/// Locks `m` while attached (see the module docs) and runs `f` on the open
/// backend.
pub(crate) fn attached<B, T>(
    py: Python<'_>,
    m: &Mutex<Option<B>>,
    f: impl FnOnce(&mut B) -> strom_core::Result<T>,
) -> PyResult<T> {
    // A panic while holding the lock leaves a store we can still read.
    let mut guard = m
        .lock_py_attached(py)
        .unwrap_or_else(PoisonError::into_inner);
    guard.as_mut().ok_or_else(closed).and_then(f).py_err(py)
}

/// Detaches, locks `m` and runs `f` on the open backend.
pub(crate) fn detached<B: Send, T: Send>(
    py: Python<'_>,
    m: &Mutex<Option<B>>,
    f: impl FnOnce(&mut B) -> strom_core::Result<T> + Send,
) -> PyResult<T> {
    py.detach(|| {
        let mut guard: MutexGuard<'_, Option<B>> = m.lock().unwrap_or_else(PoisonError::into_inner);
        guard.as_mut().ok_or_else(closed).and_then(f)
    })
    .py_err(py)
}

/// Releases a store (and, when persistent, its directory locks).
pub(crate) fn close<B: Send>(py: Python<'_>, m: &Mutex<Option<B>>) {
    let backend = m
        .lock_py_attached(py)
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    // Dropping closes segment files: let other threads run meanwhile.
    py.detach(move || drop(backend));
}

/// Byte strings (or Nones) copied out of a Python sequence into one buffer,
/// so that the native work can run detached.
#[derive(Default)]
pub(crate) struct Packed {
    data: Vec<u8>,
    /// `(start, len)` in `data`; None for a Python None.
    spans: Vec<Option<(usize, usize)>>,
}

impl Packed {
    /// Copies `items` (bytes, or None where `allow_none`).
    pub(crate) fn copy(items: &Bound<'_, PyAny>, what: &str, allow_none: bool) -> PyResult<Self> {
        let mut out = Packed::default();
        for item in items.try_iter()? {
            let item = item?;
            if item.is_none() {
                if !allow_none {
                    return Err(PyTypeError::new_err(format!(
                        "{what} must be bytes, not None"
                    )));
                }
                out.spans.push(None);
                continue;
            }
            let Ok(bytes) = item.cast::<PyBytes>() else {
                return Err(PyTypeError::new_err(format!(
                    "{what} must be bytes, not {}",
                    item.get_type().name()?
                )));
            };
            let b = bytes.as_bytes();
            out.spans.push(Some((out.data.len(), b.len())));
            out.data.extend_from_slice(b);
        }
        Ok(out)
    }

    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        self.spans[i].map(|(start, len)| &self.data[start..start + len])
    }
}

/// Raises `ValueError` unless every column has `n` items.
pub(crate) fn check_lengths(n: usize, others: &[(&str, usize)]) -> PyResult<()> {
    for &(name, len) in others {
        if len != n {
            return Err(PyValueError::new_err(format!(
                "{name} has {len} item(s), the keys {n}"
            )));
        }
    }
    Ok(())
}

pub(crate) fn bytes_list(
    py: Python<'_>,
    items: impl IntoIterator<Item = Vec<u8>>,
) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for item in items {
        out.append(PyBytes::new(py, &item))?;
    }
    Ok(out)
}

pub(crate) fn opt_bytes_list(
    py: Python<'_>,
    items: impl IntoIterator<Item = Option<Vec<u8>>>,
) -> PyResult<Bound<'_, PyList>> {
    let out = PyList::empty(py);
    for item in items {
        match item {
            Some(b) => out.append(PyBytes::new(py, &b))?,
            None => out.append(py.None())?,
        }
    }
    Ok(out)
}

fn opt_bytes(py: Python<'_>, value: Option<Vec<u8>>) -> Option<Bound<'_, PyBytes>> {
    value.map(|v| PyBytes::new(py, &v))
}

/// `(keys, starts, ends, values)` of window entries.
type WindowColumns<'py> = (Bound<'py, PyList>, Vec<i64>, Vec<i64>, Bound<'py, PyList>);

fn window_columns(py: Python<'_>, entries: Vec<WindowEntry>) -> PyResult<WindowColumns<'_>> {
    let mut starts = Vec::with_capacity(entries.len());
    let mut ends = Vec::with_capacity(entries.len());
    let keys = PyList::empty(py);
    let values = PyList::empty(py);
    for e in entries {
        keys.append(PyBytes::new(py, &e.key))?;
        values.append(PyBytes::new(py, &e.value))?;
        starts.push(e.start);
        ends.push(e.end);
    }
    Ok((keys, starts, ends, values))
}

/// `(starts, values)` of one key's windows.
fn start_columns(
    py: Python<'_>,
    entries: Vec<(i64, Vec<u8>)>,
) -> PyResult<(Vec<i64>, Bound<'_, PyList>)> {
    let (starts, values): (Vec<i64>, Vec<Vec<u8>>) = entries.into_iter().unzip();
    Ok((starts, bytes_list(py, values)?))
}

pub(crate) type PersistentWindowStore = WindowStore<PersistentSegmentFactory>;

enum Backend {
    Memory(InMemoryWindowStore),
    Persistent {
        store: PersistentWindowStore,
        /// The factory's handle, to commit every segment.
        segments: PersistentSegmentFactory,
    },
}

/// Runs the same code on either flavour of an open store.
macro_rules! on_store {
    ($open:expr, $s:ident => $body:expr) => {
        match &mut $open.store {
            Backend::Memory($s) => $body,
            Backend::Persistent { store: $s, .. } => $body,
        }
    };
}

/// The changelog key of a put that was written (None when it was not).
fn changelog_key<F: strom_core::store::SegmentFactory>(
    store: &WindowStore<F>,
    key: &[u8],
    window_start: i64,
    outcome: PutOutcome,
) -> Option<Vec<u8>> {
    (outcome == PutOutcome::Written).then(|| window::store_key(key, window_start, store.seqnum()))
}

#[pyclass(module = "strom._core", frozen)]
pub struct NativeWindowStore {
    /// None once closed.
    inner: Mutex<Option<Logged<Backend>>>,
}

impl NativeWindowStore {
    fn from_backend(backend: Backend) -> Self {
        Self {
            inner: Mutex::new(Some(Logged::new(backend))),
        }
    }

    /// Writes entries a record cache flushed (cache key: the key then the
    /// window start as 8 big-endian bytes), in order, each logged with its
    /// timestamp when the store is: what the caching store's write-out does
    /// with no listener, without a Python object per entry.
    pub(crate) fn put_cache_entries(
        &self,
        py: Python<'_>,
        entries: &[strom_core::store::cache::DirtyEntry],
    ) -> PyResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        detached(py, &self.inner, |b| {
            for entry in entries {
                let split = entry.key.len().checked_sub(8).ok_or_else(|| {
                    Error::Store(format!(
                        "a cached window's key holds {} bytes, fewer than its 8-byte start",
                        entry.key.len()
                    ))
                })?;
                let (key, start) = entry.key.split_at(split);
                let start = i64::from_be_bytes(start.try_into().expect("8 bytes"));
                let value = entry.value.as_deref();
                let logged = on_store!(b, s => {
                    let outcome = s.put(key, value, start)?;
                    changelog_key(s, key, start, outcome)
                });
                b.log(logged.as_deref(), value, entry.timestamp);
            }
            Ok(())
        })
    }

    /// Puts columns of windows in order, as `put_all` does, each logged
    /// (when the store is) with its timestamp, without handing the changelog
    /// keys back; a value is None where `present` is false.
    pub(crate) fn put_columns(
        &self,
        py: Python<'_>,
        keys: &BinaryBuffer,
        values: &BinaryBuffer,
        present: &[bool],
        window_starts: &[i64],
        timestamps: &[i64],
    ) -> PyResult<()> {
        let value = |i: usize| present[i].then(|| values.get(i));
        detached(py, &self.inner, |b| {
            if on_store!(b, s => s.retain_duplicates()) {
                // Each put takes the next seqnum, which its changelog key holds.
                for (i, &start) in window_starts.iter().enumerate() {
                    let logged = on_store!(b, s => {
                        let outcome = s.put(keys.get(i), value(i), start)?;
                        changelog_key(s, keys.get(i), start, outcome)
                    });
                    b.log(logged.as_deref(), value(i), timestamps[i]);
                }
                return Ok(());
            }
            let entries =
                (window_starts.iter().enumerate()).map(|(i, &s)| (keys.get(i), value(i), s));
            let mut outcomes = Vec::with_capacity(window_starts.len());
            on_store!(b, s => s.put_batch(entries, &mut outcomes))?;
            if b.changelog.is_some() {
                for (i, outcome) in outcomes.into_iter().enumerate() {
                    if outcome == PutOutcome::Written {
                        // Without duplicates every seqnum is 0.
                        let key = window::store_key(keys.get(i), window_starts[i], 0);
                        b.log(Some(&key), value(i), timestamps[i]);
                    }
                }
            }
            Ok(())
        })
    }
}

#[pymethods]
impl NativeWindowStore {
    /// An in-memory window store; the segment interval defaults to Kafka's
    /// `max(retention / 2, 60 s)`.
    #[new]
    #[pyo3(signature = (retention_ms, window_size_ms, segment_interval_ms=None, retain_duplicates=false))]
    fn new(
        py: Python<'_>,
        retention_ms: i64,
        window_size_ms: i64,
        segment_interval_ms: Option<i64>,
        retain_duplicates: bool,
    ) -> PyResult<Self> {
        let store = WindowStore::with_segment_interval(
            strom_core::store::InMemorySegmentFactory,
            retention_ms,
            window_size_ms,
            retain_duplicates,
            segment_interval_ms.unwrap_or_else(|| default_segment_interval(retention_ms)),
        )
        .py_err(py)?;
        Ok(Self::from_backend(Backend::Memory(store)))
    }

    /// Opens (or creates) the persistent window store in directory `path` as
    /// of its last complete commit, with that commit's observed stream time
    /// restored; returns it with the commit's metadata (None: no commit yet).
    #[staticmethod]
    #[pyo3(signature = (path, retention_ms, window_size_ms, segment_interval_ms=None, retain_duplicates=false))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        retention_ms: i64,
        window_size_ms: i64,
        segment_interval_ms: Option<i64>,
        retain_duplicates: bool,
    ) -> PyResult<(Self, Option<Bound<'_, PyBytes>>)> {
        let interval =
            segment_interval_ms.unwrap_or_else(|| default_segment_interval(retention_ms));
        let (backend, metadata) = py
            .detach(move || {
                let (segments, committed) = PersistentSegmentFactory::open(
                    path,
                    interval,
                    PersistentStoreOptions::default(),
                )?;
                let mut store = WindowStore::with_segment_interval(
                    segments.clone(),
                    retention_ms,
                    window_size_ms,
                    retain_duplicates,
                    interval,
                )?;
                let metadata = committed.map(|c| {
                    store.restore_observed_stream_time(c.observed_stream_time);
                    c.metadata
                });
                Ok::<_, Error>((Backend::Persistent { store, segments }, metadata))
            })
            .py_err(py)?;
        Ok((Self::from_backend(backend), opt_bytes(py, metadata)))
    }

    /// Removes a persistent window store's directory (it must not be open).
    #[staticmethod]
    fn destroy(py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(move || PersistentSegmentFactory::destroy_store(path))
            .py_err(py)
    }

    #[getter]
    fn persistent(&self, py: Python<'_>) -> PyResult<bool> {
        attached(py, &self.inner, |b| {
            Ok(matches!(b.store, Backend::Persistent { .. }))
        })
    }

    #[getter]
    fn retention_ms(&self, py: Python<'_>) -> PyResult<i64> {
        attached(py, &self.inner, |b| Ok(on_store!(b, s => s.retention())))
    }

    #[getter]
    fn window_size_ms(&self, py: Python<'_>) -> PyResult<i64> {
        attached(py, &self.inner, |b| Ok(on_store!(b, s => s.window_size())))
    }

    #[getter]
    fn segment_interval_ms(&self, py: Python<'_>) -> PyResult<i64> {
        attached(py, &self.inner, |b| {
            Ok(on_store!(b, s => s.segment_interval()))
        })
    }

    #[getter]
    fn retain_duplicates(&self, py: Python<'_>) -> PyResult<bool> {
        attached(py, &self.inner, |b| {
            Ok(on_store!(b, s => s.retain_duplicates()))
        })
    }

    /// The largest window start put so far (-1 before the first).
    #[getter]
    fn observed_stream_time(&self, py: Python<'_>) -> PyResult<i64> {
        attached(py, &self.inner, |b| {
            Ok(on_store!(b, s => s.observed_stream_time()))
        })
    }

    /// Advances observed stream time to `timestamp` if it is later (never
    /// backwards) and drops the segments that fall out of retention. `open`
    /// already restores the committed value.
    fn restore_observed_stream_time(&self, py: Python<'_>, timestamp: i64) -> PyResult<()> {
        attached(py, &self.inner, |b| {
            on_store!(b, s => s.restore_observed_stream_time(timestamp));
            Ok(())
        })
    }

    /// Kafka's `put(key, value, windowStartTimestamp)`; a None value deletes
    /// the window (a no-op when duplicates are retained). Returns the
    /// changelog key of the write (Kafka's windowed key, seqnum included), or
    /// None when nothing was written (expired, or a None into a store that
    /// retains duplicates). A logged store logs the write with `timestamp`.
    #[pyo3(signature = (key, value, window_start, timestamp=0))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: Option<&[u8]>,
        window_start: i64,
        timestamp: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let written = attached(py, &self.inner, |b| {
            let logged = on_store!(b, s => {
                let outcome = s.put(key, value, window_start)?;
                changelog_key(s, key, window_start, outcome)
            });
            b.log(logged.as_deref(), value, timestamp);
            Ok(logged)
        })?;
        Ok(opt_bytes(py, written))
    }

    /// Puts each `(key, value or None, window start)` in order, logged with
    /// its timestamp (default 0) when the store is; returns each put's
    /// changelog key, or None where nothing was written.
    #[pyo3(signature = (keys, values, window_starts, timestamps=None))]
    fn put_all<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        values: &Bound<'py, PyAny>,
        window_starts: Vec<i64>,
        timestamps: Option<Vec<i64>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = Packed::copy(keys, "keys", false)?;
        let values = Packed::copy(values, "values", true)?;
        let timestamps = timestamps.unwrap_or_else(|| vec![0; keys.len()]);
        check_lengths(
            keys.len(),
            &[
                ("values", values.len()),
                ("window_starts", window_starts.len()),
                ("timestamps", timestamps.len()),
            ],
        )?;
        let written = detached(py, &self.inner, move |b| {
            let mut out = Vec::with_capacity(keys.len());
            for (i, &start) in window_starts.iter().enumerate() {
                let key = keys.get(i).expect("keys are never None");
                let logged = on_store!(b, s => {
                    let outcome = s.put(key, values.get(i), start)?;
                    changelog_key(s, key, start, outcome)
                });
                b.log(logged.as_deref(), values.get(i), timestamps[i]);
                out.push(logged);
            }
            Ok(out)
        })?;
        opt_bytes_list(py, written)
    }

    /// `restore` over a batch of changelog records as read (from the
    /// embedded log or a Kafka consumer), natively; returns how many were
    /// dropped as expired.
    fn restore_records(&self, records: &Bound<'_, RecordBatch>) -> PyResult<u64> {
        let py = records.py();
        let pairs = changelog_pairs(py, records.get()).py_err(py)?;
        detached(py, &self.inner, |b| on_store!(b, s => s.restore(pairs)))
    }

    /// Applies changelog records (windowed store key, value or None) as
    /// Kafka's restore does; returns how many were dropped as expired.
    fn restore(
        &self,
        py: Python<'_>,
        store_keys: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let keys = Packed::copy(store_keys, "store_keys", false)?;
        let values = Packed::copy(values, "values", true)?;
        check_lengths(keys.len(), &[("values", values.len())])?;
        detached(py, &self.inner, |b| {
            let records =
                (0..keys.len()).map(|i| (keys.get(i).expect("never None"), values.get(i)));
            on_store!(b, s => s.restore(records))
        })
    }

    /// Kafka's `fetch(key, windowStartTimestamp)`: one window's value; None
    /// when absent, expired, or the store retains duplicates.
    fn fetch_one<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        window_start: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let value = attached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.fetch_one(key, window_start)),
        )?;
        Ok(opt_bytes(py, value))
    }

    /// Kafka's `fetch(key, timeFrom, timeTo)`: `(starts, values)` of the
    /// windows of exactly `key` with `time_from <= start <= time_to`, in
    /// start order (duplicates in insertion order).
    fn fetch<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> PyResult<(Vec<i64>, Bound<'py, PyList>)> {
        let key = key.to_vec();
        let entries = detached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.fetch(&key, time_from, time_to)),
        )?;
        start_columns(py, entries)
    }

    /// As `fetch`, latest window first.
    fn backward_fetch<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        time_from: i64,
        time_to: i64,
    ) -> PyResult<(Vec<i64>, Bound<'py, PyList>)> {
        let key = key.to_vec();
        let entries = detached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.backward_fetch(&key, time_from, time_to)),
        )?;
        start_columns(py, entries)
    }

    /// Kafka's `fetch(keyFrom, keyTo, timeFrom, timeTo)` (either key bound
    /// open when None): `(keys, starts, ends, values)`.
    #[pyo3(signature = (key_from, key_to, time_from, time_to))]
    fn fetch_range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
    ) -> PyResult<WindowColumns<'py>> {
        let (key_from, key_to) = (key_from.map(<[u8]>::to_vec), key_to.map(<[u8]>::to_vec));
        let entries = detached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.fetch_range(key_from.as_deref(), key_to.as_deref(), time_from, time_to)),
        )?;
        window_columns(py, entries)
    }

    #[pyo3(signature = (key_from, key_to, time_from, time_to))]
    fn backward_fetch_range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        time_from: i64,
        time_to: i64,
    ) -> PyResult<WindowColumns<'py>> {
        let (key_from, key_to) = (key_from.map(<[u8]>::to_vec), key_to.map(<[u8]>::to_vec));
        let entries = detached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.backward_fetch_range(key_from.as_deref(), key_to.as_deref(), time_from, time_to)),
        )?;
        window_columns(py, entries)
    }

    /// Kafka's `fetchAll(timeFrom, timeTo)`: `(keys, starts, ends, values)`.
    fn fetch_all<'py>(
        &self,
        py: Python<'py>,
        time_from: i64,
        time_to: i64,
    ) -> PyResult<WindowColumns<'py>> {
        let entries = detached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.fetch_all(time_from, time_to)),
        )?;
        window_columns(py, entries)
    }

    fn backward_fetch_all<'py>(
        &self,
        py: Python<'py>,
        time_from: i64,
        time_to: i64,
    ) -> PyResult<WindowColumns<'py>> {
        let entries = detached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.backward_fetch_all(time_from, time_to)),
        )?;
        window_columns(py, entries)
    }

    /// Kafka's `all()`: every window within retention.
    fn all<'py>(&self, py: Python<'py>) -> PyResult<WindowColumns<'py>> {
        let entries = detached(py, &self.inner, |b| on_store!(b, s => s.all()))?;
        window_columns(py, entries)
    }

    fn backward_all<'py>(&self, py: Python<'py>) -> PyResult<WindowColumns<'py>> {
        let entries = detached(py, &self.inner, |b| on_store!(b, s => s.backward_all()))?;
        window_columns(py, entries)
    }

    fn approximate_num_entries(&self, py: Python<'_>) -> PyResult<usize> {
        attached(py, &self.inner, |b| {
            Ok(on_store!(b, s => s.approximate_num_entries()))
        })
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.approximate_num_entries(py)
    }

    /// Ids of the live segments (window start / segment interval), ascending.
    fn segment_ids(&self, py: Python<'_>) -> PyResult<Vec<i64>> {
        attached(py, &self.inner, |b| Ok(on_store!(b, s => s.segment_ids())))
    }

    /// Makes the writes so far durable (not a commit: a reopen still returns
    /// to the last commit).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        detached(py, &self.inner, |b| on_store!(b, s => s.flush()))
    }

    /// Makes every segment's writes durable together with `metadata` and the
    /// observed stream time, in one commit that `open` returns to. A no-op
    /// in memory.
    fn commit(&self, py: Python<'_>, metadata: &[u8]) -> PyResult<()> {
        let metadata = metadata.to_vec();
        detached(py, &self.inner, |b| match &mut b.store {
            Backend::Memory(_) => Ok(()),
            Backend::Persistent { store, segments } => {
                segments.commit(&metadata, store.observed_stream_time())
            }
        })
    }

    /// Releases the store (and, when persistent, its directory locks);
    /// uncommitted writes of a persistent store are discarded at the next
    /// open.
    fn close(&self, py: Python<'_>) {
        close(py, &self.inner);
    }

    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        self.inner
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }

    /// From now on every write is also kept for the store's changelog, until
    /// `take_changelog` takes it. Restores are not logged.
    fn enable_changelog(&self, py: Python<'_>) -> PyResult<()> {
        changelog::enable(py, &self.inner)
    }

    /// Whether writes are logged.
    #[getter]
    fn logged(&self, py: Python<'_>) -> bool {
        changelog::is_logged(py, &self.inner)
    }

    /// The changelog records written since the last call, in write order, as
    /// columns: `(store keys, values, timestamps)` (None: a tombstone).
    fn take_changelog<'py>(&self, py: Python<'py>) -> PyResult<ChangelogColumns<'py>> {
        changelog::take(py, &self.inner)
    }
}

/// Kafka's `WindowKeySchema.toStoreKeyBinary`: key ‖ 8-byte window start ‖
/// 4-byte seqnum, big-endian (the changelog key of a window store).
#[pyfunction]
fn window_store_key<'py>(
    py: Python<'py>,
    key: &[u8],
    window_start: i64,
    seqnum: i32,
) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &window::store_key(key, window_start, seqnum))
}

/// Splits a window store key into `(key, window start, seqnum)`.
#[pyfunction]
fn split_window_store_key<'py>(
    py: Python<'py>,
    store_key: &[u8],
) -> PyResult<(Bound<'py, PyBytes>, i64, i32)> {
    let (key, start, seqnum) = window::split_store_key(store_key).py_err(py)?;
    Ok((PyBytes::new(py, key), start, seqnum))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeWindowStore>()?;
    m.add_function(wrap_pyfunction!(window_store_key, m)?)?;
    m.add_function(wrap_pyfunction!(split_window_store_key, m)?)?;
    Ok(())
}
