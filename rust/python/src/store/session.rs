//! `NativeSessionStore`: the bytes-in/bytes-out session store (Kafka's
//! `SessionStore<Bytes, byte[]>`), in memory or persistent (one
//! log-structured store per time segment), and Kafka's session store-key
//! encoding (key ‖ end ‖ start), which is also the changelog key.
//!
//! Scans return columns `(keys, starts, ends, values)`; locking and GIL
//! release follow `window.rs`.

use std::path::PathBuf;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use strom_core::Error;
use strom_core::store::session::{self, SessionEntry};
use strom_core::store::time_segments::{PutOutcome, default_segment_interval};
use strom_core::store::{
    InMemorySegmentFactory, InMemorySessionStore, PersistentSegmentFactory, PersistentStoreOptions,
    SessionStore,
};

use crate::errors::IntoPyResult;
use crate::log::RecordBatch;
use crate::store::changelog::{self, ChangelogColumns, Logged};
use crate::store::changelog_pairs;
use crate::store::window::{Packed, attached, check_lengths, close, detached, opt_bytes_list};

enum Backend {
    Memory(InMemorySessionStore),
    Persistent {
        store: SessionStore<PersistentSegmentFactory>,
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

/// `(keys, starts, ends, values)` of sessions.
type SessionColumns<'py> = (Bound<'py, PyList>, Vec<i64>, Vec<i64>, Bound<'py, PyList>);

fn session_columns(py: Python<'_>, entries: Vec<SessionEntry>) -> PyResult<SessionColumns<'_>> {
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

fn opt_bytes(py: Python<'_>, value: Option<Vec<u8>>) -> Option<Bound<'_, PyBytes>> {
    value.map(|v| PyBytes::new(py, &v))
}

fn owned(key: Option<&[u8]>) -> Option<Vec<u8>> {
    key.map(<[u8]>::to_vec)
}

#[pyclass(module = "strom._core", frozen)]
pub struct NativeSessionStore {
    /// None once closed.
    inner: Mutex<Option<Logged<Backend>>>,
}

impl NativeSessionStore {
    fn from_backend(backend: Backend) -> Self {
        Self {
            inner: Mutex::new(Some(Logged::new(backend))),
        }
    }

    fn scan<'py>(
        &self,
        py: Python<'py>,
        f: impl FnOnce(&mut Logged<Backend>) -> strom_core::Result<Vec<SessionEntry>> + Send,
    ) -> PyResult<SessionColumns<'py>> {
        let entries = detached(py, &self.inner, f)?;
        session_columns(py, entries)
    }
}

#[pymethods]
impl NativeSessionStore {
    /// An in-memory session store; the segment interval defaults to Kafka's
    /// `max(retention / 2, 60 s)`.
    #[new]
    #[pyo3(signature = (retention_ms, segment_interval_ms=None))]
    fn new(py: Python<'_>, retention_ms: i64, segment_interval_ms: Option<i64>) -> PyResult<Self> {
        let store = SessionStore::with_segment_interval(
            InMemorySegmentFactory,
            retention_ms,
            segment_interval_ms.unwrap_or_else(|| default_segment_interval(retention_ms)),
        )
        .py_err(py)?;
        Ok(Self::from_backend(Backend::Memory(store)))
    }

    /// Opens (or creates) the persistent session store in directory `path`
    /// as of its last complete commit, with that commit's observed stream
    /// time restored; returns it with the commit's metadata (None: no commit).
    #[staticmethod]
    #[pyo3(signature = (path, retention_ms, segment_interval_ms=None))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        retention_ms: i64,
        segment_interval_ms: Option<i64>,
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
                let mut store =
                    SessionStore::with_segment_interval(segments.clone(), retention_ms, interval)?;
                let metadata = committed.map(|c| {
                    store.restore_observed_stream_time(c.observed_stream_time);
                    c.metadata
                });
                Ok::<_, Error>((Backend::Persistent { store, segments }, metadata))
            })
            .py_err(py)?;
        Ok((Self::from_backend(backend), opt_bytes(py, metadata)))
    }

    /// Removes a persistent session store's directory (it must not be open).
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
    fn segment_interval_ms(&self, py: Python<'_>) -> PyResult<i64> {
        attached(py, &self.inner, |b| {
            Ok(on_store!(b, s => s.segment_interval()))
        })
    }

    /// The largest session end put so far (-1 before the first).
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

    /// Kafka's `put(Windowed(key, SessionWindow(start, end)), aggregate)`; a
    /// None value removes the session. Returns the changelog key (key ‖ end ‖
    /// start), or None when the session is expired and nothing was written.
    /// A logged store logs the write with `timestamp`.
    #[pyo3(signature = (key, start, end, value, timestamp=0))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        start: i64,
        end: i64,
        value: Option<&[u8]>,
        timestamp: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let written = attached(py, &self.inner, |b| {
            let outcome = on_store!(b, s => s.put(key, start, end, value))?;
            let logged =
                (outcome == PutOutcome::Written).then(|| session::store_key(key, start, end));
            b.log(logged.as_deref(), value, timestamp);
            Ok(logged)
        })?;
        Ok(opt_bytes(py, written))
    }

    /// Puts each `(key, start, end, value or None)` in order, logged with its
    /// timestamp (default 0) when the store is; returns each put's changelog
    /// key, or None where the session was expired.
    #[pyo3(signature = (keys, starts, ends, values, timestamps=None))]
    fn put_all<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        starts: Vec<i64>,
        ends: Vec<i64>,
        values: &Bound<'py, PyAny>,
        timestamps: Option<Vec<i64>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let keys = Packed::copy(keys, "keys", false)?;
        let values = Packed::copy(values, "values", true)?;
        let timestamps = timestamps.unwrap_or_else(|| vec![0; keys.len()]);
        check_lengths(
            keys.len(),
            &[
                ("starts", starts.len()),
                ("ends", ends.len()),
                ("values", values.len()),
                ("timestamps", timestamps.len()),
            ],
        )?;
        let written = detached(py, &self.inner, move |b| {
            let mut out = Vec::with_capacity(keys.len());
            for i in 0..keys.len() {
                let key = keys.get(i).expect("keys are never None");
                let outcome = on_store!(b, s => s.put(key, starts[i], ends[i], values.get(i)))?;
                let logged = (outcome == PutOutcome::Written)
                    .then(|| session::store_key(key, starts[i], ends[i]));
                b.log(logged.as_deref(), values.get(i), timestamps[i]);
                out.push(logged);
            }
            Ok(out)
        })?;
        opt_bytes_list(py, written)
    }

    /// Kafka's `remove(sessionKey)`; returns the changelog key, under which a
    /// logged store logs a tombstone (with `timestamp`) either way, as
    /// Kafka's logging layer does.
    #[pyo3(signature = (key, start, end, timestamp=0))]
    fn remove<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        start: i64,
        end: i64,
        timestamp: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let store_key = session::store_key(key, start, end);
        attached(py, &self.inner, |b| {
            on_store!(b, s => s.remove(key, start, end))?;
            b.log(Some(&store_key), None, timestamp);
            Ok(())
        })?;
        Ok(PyBytes::new(py, &store_key))
    }

    /// `restore` over a batch of changelog records as read (from the
    /// embedded log or a Kafka consumer), natively; returns how many were
    /// dropped as expired.
    fn restore_records(&self, records: &Bound<'_, RecordBatch>) -> PyResult<u64> {
        let py = records.py();
        let pairs = changelog_pairs(py, records.get()).py_err(py)?;
        detached(py, &self.inner, |b| on_store!(b, s => s.restore(pairs)))
    }

    /// Applies changelog records (session store key, value or None) as
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

    /// Kafka's `fetchSession(key, start, end)`: that session's value, None
    /// when absent or expired.
    fn fetch_session<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        start: i64,
        end: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let value = attached(
            py,
            &self.inner,
            |b| on_store!(b, s => s.fetch_session(key, start, end)),
        )?;
        Ok(opt_bytes(py, value))
    }

    /// Kafka's `findSessions(key, earliestSessionEndTime,
    /// latestSessionStartTime)`: sessions of exactly `key` with `end >=
    /// earliest_session_end` and `start <= latest_session_start`, in (end,
    /// start) order, as `(keys, starts, ends, values)`.
    fn find_sessions<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> PyResult<SessionColumns<'py>> {
        let key = key.to_vec();
        self.scan(py, |b| {
            on_store!(b, s => s.find_sessions(&key, earliest_session_end, latest_session_start))
        })
    }

    fn backward_find_sessions<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> PyResult<SessionColumns<'py>> {
        let key = key.to_vec();
        self.scan(py, |b| {
            on_store!(b, s => s.backward_find_sessions(&key, earliest_session_end, latest_session_start))
        })
    }

    /// Kafka's `findSessions(keyFrom, keyTo, earliestSessionEndTime,
    /// latestSessionStartTime)`, either key bound open when None.
    #[pyo3(signature = (key_from, key_to, earliest_session_end, latest_session_start))]
    fn find_sessions_range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> PyResult<SessionColumns<'py>> {
        let (from, to) = (owned(key_from), owned(key_to));
        self.scan(py, |b| {
            on_store!(b, s => s.find_sessions_range(from.as_deref(), to.as_deref(), earliest_session_end, latest_session_start))
        })
    }

    #[pyo3(signature = (key_from, key_to, earliest_session_end, latest_session_start))]
    fn backward_find_sessions_range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        earliest_session_end: i64,
        latest_session_start: i64,
    ) -> PyResult<SessionColumns<'py>> {
        let (from, to) = (owned(key_from), owned(key_to));
        self.scan(py, |b| {
            on_store!(b, s => s.backward_find_sessions_range(from.as_deref(), to.as_deref(), earliest_session_end, latest_session_start))
        })
    }

    /// Kafka's `fetch(key)`: every session of `key` within retention.
    fn fetch<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<SessionColumns<'py>> {
        let key = key.to_vec();
        self.scan(py, |b| on_store!(b, s => s.fetch(&key)))
    }

    fn backward_fetch<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<SessionColumns<'py>> {
        let key = key.to_vec();
        self.scan(py, |b| on_store!(b, s => s.backward_fetch(&key)))
    }

    /// Kafka's `fetch(keyFrom, keyTo)`, either bound open when None.
    #[pyo3(signature = (key_from, key_to))]
    fn fetch_range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> PyResult<SessionColumns<'py>> {
        let (from, to) = (owned(key_from), owned(key_to));
        self.scan(
            py,
            |b| on_store!(b, s => s.fetch_range(from.as_deref(), to.as_deref())),
        )
    }

    #[pyo3(signature = (key_from, key_to))]
    fn backward_fetch_range<'py>(
        &self,
        py: Python<'py>,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
    ) -> PyResult<SessionColumns<'py>> {
        let (from, to) = (owned(key_from), owned(key_to));
        self.scan(
            py,
            |b| on_store!(b, s => s.backward_fetch_range(from.as_deref(), to.as_deref())),
        )
    }

    fn approximate_num_entries(&self, py: Python<'_>) -> PyResult<usize> {
        attached(py, &self.inner, |b| {
            Ok(on_store!(b, s => s.approximate_num_entries()))
        })
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.approximate_num_entries(py)
    }

    /// Ids of the live segments (session end / segment interval), ascending.
    fn segment_ids(&self, py: Python<'_>) -> PyResult<Vec<i64>> {
        attached(py, &self.inner, |b| Ok(on_store!(b, s => s.segment_ids())))
    }

    /// Makes the writes so far durable (not a commit).
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
        use pyo3::sync::MutexExt;
        self.inner
            .lock_py_attached(py)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// Kafka's `SessionKeySchema.toBinary`: key ‖ 8-byte end ‖ 8-byte start,
/// big-endian (the changelog key of a session store).
#[pyfunction]
fn session_store_key<'py>(
    py: Python<'py>,
    key: &[u8],
    start: i64,
    end: i64,
) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &session::store_key(key, start, end))
}

/// Splits a session store key into `(key, start, end)`.
#[pyfunction]
fn split_session_store_key<'py>(
    py: Python<'py>,
    store_key: &[u8],
) -> PyResult<(Bound<'py, PyBytes>, i64, i64)> {
    let (key, start, end) = session::split_store_key(store_key).py_err(py)?;
    Ok((PyBytes::new(py, key), start, end))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeSessionStore>()?;
    m.add_function(wrap_pyfunction!(session_store_key, m)?)?;
    m.add_function(wrap_pyfunction!(split_session_store_key, m)?)?;
    Ok(())
}
