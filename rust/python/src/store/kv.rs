//! `NativeKeyValueStore`: the bytes-in/bytes-out key-value store (in memory,
//! or persistent and log-structured) and the batch kernels that update it.
//!
//! Single-key calls run attached to the interpreter (they are short). Batch
//! calls (`put_all`, `get_all`, `count`, scans, `commit`, `restore_from_log`)
//! copy their arguments out of the Python objects into one contiguous buffer,
//! then take the store's lock and do the native work detached, so other
//! Python threads run meanwhile.
//!
//! Locking: the core logs through `pyo3_log`, which attaches. A thread that
//! holds the store's lock while detached may therefore wait for the
//! interpreter, so no thread may wait for the store's lock while attached:
//! attached callers use `lock_py_attached` (try once, else detach to wait),
//! detached callers lock inside the detached closure.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use strom_core::Error;
use strom_core::log::{Log, ReadBatch};
use strom_core::store::cache::{CachingKeyValueStore, FlushedEntry};
use strom_core::store::{
    ChangeLogging, InMemoryKeyValueStore, KeyValueBytes, PersistentKeyValueStore,
    PersistentStoreOptions, kernels, key_order,
};

use crate::errors::{IntoPyResult, new_error};
use crate::log::{NativeLog, RecordBatch};
use crate::store::cache::NativeThreadCache;
use crate::store::changelog::{self, ChangelogColumns, Logged};
use crate::store::check_changelog_keys;

/// `restore_from_log` reads the changelog in batches of at most this many
/// records (small enough that a batch stays in cache while it is sorted and
/// applied: larger batches measured slower)…
const RESTORE_BATCH_RECORDS: usize = 16 << 10;
/// …and about this many bytes.
const RESTORE_BATCH_BYTES: usize = 4 << 20;

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

    fn kv_ref(&self) -> &dyn KeyValueBytes {
        match self {
            Backend::Memory(store) => store,
            Backend::Persistent(store) => store.as_ref(),
        }
    }
}

type Open = Logged<Backend>;

impl Open {
    fn kv_ref(&self) -> &dyn KeyValueBytes {
        self.store.kv_ref()
    }

    /// The store as writes see it: each one logged when the store is.
    fn logged(&mut self) -> ChangeLogging<'_> {
        ChangeLogging::new(self.store.kv(), self.changelog.as_mut())
    }

    /// The store as a restore sees it: nothing is logged again.
    fn unlogged(&mut self) -> &mut dyn KeyValueBytes {
        self.store.kv()
    }
}

#[pyclass(module = "strom._core", frozen)]
pub struct NativeKeyValueStore {
    /// None once closed.
    inner: Mutex<Option<Open>>,
}

fn closed() -> Error {
    Error::Store("the store is closed".into())
}

/// The open store behind a held lock, or the "closed" error.
fn backend<'a>(guard: &'a mut MutexGuard<'_, Option<Open>>) -> strom_core::Result<&'a mut Open> {
    guard.as_mut().ok_or_else(closed)
}

impl NativeKeyValueStore {
    fn from_backend(backend: Backend) -> Self {
        Self {
            inner: Mutex::new(Some(Logged::new(backend))),
        }
    }

    /// Locks the store while attached (see the module docs) and runs `f`.
    fn attached<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Open) -> strom_core::Result<T>,
    ) -> PyResult<T> {
        // A panic while holding the lock leaves a store we can still read.
        let mut guard = self
            .inner
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        backend(&mut guard).and_then(f).py_err(py)
    }

    /// Runs `f` on this store seen through the named cache `cache_id` of
    /// `cache` (and its changelog, when logged), attached: the calls are per
    /// record. Returns `f`'s result and what it flushed. The store's lock is
    /// taken first, the cache's second, as the batch kernels take them.
    fn cached<T>(
        &self,
        cache: &Bound<'_, NativeThreadCache>,
        cache_id: i64,
        f: impl FnOnce(&mut CachingKeyValueStore<'_>, &mut Vec<FlushedEntry>) -> strom_core::Result<T>,
    ) -> PyResult<(T, Vec<FlushedEntry>)> {
        let py = cache.py();
        let cache = cache.get();
        let mut guard = self
            .inner
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        let b = backend(&mut guard).py_err(py)?;
        let mut inner = cache
            .inner
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        let id = inner.id(py, cache_id)?;
        let mut logged = b.logged();
        let mut caching = CachingKeyValueStore::new(&mut logged, &mut inner.cache, id);
        let mut flushed = Vec::new();
        let out = f(&mut caching, &mut flushed).py_err(py)?;
        Ok((out, flushed))
    }

    /// `cached` for calls that may write many entries (a flush) or read many
    /// (a scan): detached, the locks taken in the same order.
    fn cached_batch<T: Send>(
        &self,
        cache: &Bound<'_, NativeThreadCache>,
        cache_id: i64,
        f: impl FnOnce(&mut CachingKeyValueStore<'_>, &mut Vec<FlushedEntry>) -> strom_core::Result<T>
        + Send,
    ) -> PyResult<(T, Vec<FlushedEntry>)> {
        let py = cache.py();
        let cache = cache.get();
        let id = cache.with(py, |inner| inner.id(py, cache_id))?;
        self.detached(py, |b| {
            let mut guard = cache.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let mut logged = b.logged();
            let mut caching = CachingKeyValueStore::new(&mut logged, &mut guard.cache, id);
            let mut flushed = Vec::new();
            let out = f(&mut caching, &mut flushed)?;
            Ok((out, flushed))
        })
    }

    /// Writes `(keys[i], values[i])` (None deletes) as if in order, in key
    /// order (see `key_order`); logs them in their own order with
    /// `log_timestamp` when given and the store is logged. Returns how many.
    fn write_pairs(
        &self,
        keys: &Bound<'_, PyList>,
        values: &Bound<'_, PyList>,
        log_timestamp: Option<i64>,
        what: &str,
    ) -> PyResult<usize> {
        let py = keys.py();
        let (keys, values) = pairs_of(keys, values, what)?;
        self.detached(py, |b| {
            let key = |i: usize| keys.get(i).unwrap_or_default();
            apply_in_key_order(b.unlogged(), keys.len(), key, |i| values.get(i))?;
            if let (Some(log), Some(timestamp)) = (b.changelog.as_mut(), log_timestamp) {
                for i in 0..keys.len() {
                    log.push(key(i), values.get(i), timestamp);
                }
            }
            Ok(keys.len())
        })
    }

    /// Detaches, locks the store and runs `f`.
    fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Open) -> strom_core::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            backend(&mut guard).and_then(f)
        })
        .py_err(py)
    }

    /// Counts `records` (key, timestamp) through the named cache `cache_id`
    /// of `cache`; returns what evictions flushed.
    fn count_cached<'py>(
        &self,
        records: &[(&[u8], i64)],
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<FlushedColumns<'py>> {
        let py = cache.py();
        let cache = cache.get();
        let id = cache.with(py, |inner| inner.id(py, cache_id))?;
        let flushed = self.detached(py, |b| {
            let mut flushed = Vec::new();
            let mut guard = cache.inner.lock().unwrap_or_else(PoisonError::into_inner);
            kernels::count_timestamped_cached(
                &mut b.logged(),
                (&mut guard.cache, id),
                records,
                &mut flushed,
            )?;
            Ok(flushed)
        })?;
        flushed_columns(py, &flushed)
    }
}

/// Byte strings copied out of Python objects into one buffer.
#[derive(Default)]
struct Packed {
    data: Vec<u8>,
    /// `(start, len)` in `data`; None for a Python None.
    spans: Vec<Option<(usize, usize)>>,
}

impl Packed {
    fn with_capacity(items: usize, bytes: usize) -> Self {
        Packed {
            data: Vec::with_capacity(bytes),
            spans: Vec::with_capacity(items),
        }
    }

    fn push(&mut self, bytes: Option<&[u8]>) {
        self.spans.push(bytes.map(|b| {
            let start = self.data.len();
            self.data.extend_from_slice(b);
            (start, b.len())
        }));
    }

    fn get(&self, i: usize) -> Option<&[u8]> {
        self.spans[i].map(|(start, len)| &self.data[start..start + len])
    }

    /// Copies a list of `bytes` (and, when `allow_none`, `None`s); `what`
    /// names the argument in a `TypeError`.
    fn from_list(list: &Bound<'_, PyList>, allow_none: bool, what: &str) -> PyResult<Self> {
        let n = list.len();
        let mut packed = Packed::with_capacity(n, 0);
        for (i, item) in list.iter().enumerate() {
            if allow_none && item.is_none() {
                packed.spans.push(None);
                continue;
            }
            let Ok(bytes) = item.cast::<PyBytes>() else {
                return Err(PyTypeError::new_err(format!(
                    "{what}[{i}] must be bytes{}, not {}",
                    if allow_none { " or None" } else { "" },
                    item.get_type()
                        .name()
                        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
                )));
            };
            let bytes = bytes.as_bytes();
            if packed.data.capacity() == 0 {
                // Most batches hold items of similar sizes.
                packed.data.reserve((n - i) * bytes.len().max(1));
            }
            packed.push(Some(bytes));
        }
        Ok(packed)
    }

    fn len(&self) -> usize {
        self.spans.len()
    }

    fn iter(&self) -> impl Iterator<Item = Option<&[u8]>> {
        (0..self.len()).map(|i| self.get(i))
    }
}

fn entries<'py>(py: Python<'py>, items: &[(Vec<u8>, Vec<u8>)]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        items
            .iter()
            .map(|(k, v)| PyTuple::new(py, [PyBytes::new(py, k), PyBytes::new(py, v)]))
            .collect::<PyResult<Vec<_>>>()?,
    )
}

fn opt_bytes(py: Python<'_>, value: Option<Vec<u8>>) -> Option<Bound<'_, PyBytes>> {
    value.map(|v| PyBytes::new(py, &v))
}

/// Batch loops prefetch the bytes of the item this many steps ahead.
const PREFETCH_AHEAD: usize = 8;

/// Writes `(key(i), value(i))` for `i < n` (a None value deletes) in the
/// order of [`key_order`], prefetching the bytes of the writes a few steps
/// ahead (they are scattered over the batch once it is sorted).
fn apply_in_key_order<'a>(
    kv: &mut dyn KeyValueBytes,
    n: usize,
    key: impl Fn(usize) -> &'a [u8],
    value: impl Fn(usize) -> Option<&'a [u8]>,
) -> strom_core::Result<()> {
    let order = key_order(kv.prefers_key_order(), n, &key);
    for (j, &i) in order.iter().enumerate() {
        if let Some(&next) = order.get(j + PREFETCH_AHEAD) {
            prefetch(key(next as usize));
            kv.prefetch(key(next as usize));
            if let Some(v) = value(next as usize) {
                prefetch(v);
                prefetch(v.get(64..).unwrap_or_default());
            }
        }
        kv.put(key(i as usize), value(i as usize))?;
    }
    Ok(())
}

/// Hints the CPU to fetch the first cache line of `bytes`.
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline, and a prefetch is a hint
    // that never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            bytes.as_ptr().cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// Replays `[from_offset, to_offset)` of a changelog partition into the
/// store (None value = delete); returns the records applied and the offset
/// to continue from.
fn restore(
    store: &mut Backend,
    log: &Log,
    topic: &str,
    partition: u32,
    from_offset: u64,
    to_offset: Option<u64>,
) -> strom_core::Result<(u64, u64)> {
    let end = match to_offset {
        Some(end) => end,
        None => log.end_offset(topic, partition)?,
    };
    let mut offset = from_offset;
    let mut applied = 0u64;
    while offset < end {
        let batch = log.read(
            topic,
            partition,
            offset,
            RESTORE_BATCH_RECORDS,
            RESTORE_BATCH_BYTES,
        )?;
        if batch.is_empty() {
            break;
        }
        // Records at or past `end` are not applied; no record lies between
        // the last one applied and `end`.
        let n = batch.offsets.partition_point(|&o| o < end);
        let rest = if offset == from_offset {
            end.saturating_sub(batch.next_offset)
        } else {
            0
        };
        apply_changelog(store, &batch, n, rest, &format!("{topic}-{partition}"))?;
        applied += n as u64;
        if n < batch.len() {
            return Ok((applied, end));
        }
        offset = batch.next_offset;
    }
    Ok((applied, offset))
}

/// Applies the first `n` records of a changelog batch (None value =
/// delete) without logging them again. `rest`: records still to come after
/// these, for a persistent store to size its index once at this batch's
/// rate of new keys (0: no reserving).
fn apply_changelog(
    store: &mut Backend,
    batch: &ReadBatch,
    n: usize,
    rest: u64,
    changelog: &str,
) -> strom_core::Result<()> {
    check_changelog_keys(batch, n, changelog)?;
    match store {
        // Copies the changelog's frames as they are when they are log
        // frames (no CRC computed), else puts keeping record timestamps.
        Backend::Persistent(store) => {
            let keys_before = store.approximate_num_entries();
            store.restore_batch(batch, n)?;
            if rest > 0 {
                let new_keys = store.approximate_num_entries() - keys_before;
                store.reserve_for_restore(new_keys, n, rest);
            }
        }
        Backend::Memory(store) => apply_in_key_order(
            store,
            n,
            |i| batch.key(i).unwrap_or_default(),
            |i| batch.value(i),
        )?,
    }
    Ok(())
}

#[pymethods]
impl NativeKeyValueStore {
    /// An in-memory store.
    #[new]
    fn new() -> Self {
        Self::from_backend(Backend::Memory(InMemoryKeyValueStore::new()))
    }

    /// Opens (or creates) the persistent store in `path` as of its last
    /// commit; returns it with that commit's metadata (None: no commit yet).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<(Self, Option<Bound<'_, PyBytes>>)> {
        let (store, committed) = py
            .detach(move || PersistentKeyValueStore::open(path, PersistentStoreOptions::default()))
            .py_err(py)?;
        let store = Self::from_backend(Backend::Persistent(Box::new(store)));
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
        self.attached(py, |b| Ok(matches!(b.store, Backend::Persistent(_))))
    }

    fn get<'py>(&self, py: Python<'py>, key: &[u8]) -> PyResult<Option<Bound<'py, PyBytes>>> {
        // Straight from the store's bytes into the Python object.
        let mut value = None;
        self.attached(py, |b| {
            b.kv_ref()
                .get_with(key, &mut |v| value = Some(PyBytes::new(py, v)))
        })?;
        Ok(value)
    }

    /// The values of `keys` (None where a key is absent), in order.
    fn get_all<'py>(&self, keys: &Bound<'py, PyList>) -> PyResult<Bound<'py, PyList>> {
        let py = keys.py();
        let keys = Packed::from_list(keys, false, "keys")?;
        // The values are copied into one buffer (no allocation per value),
        // looked up in the store's preferred order, answered in the caller's.
        let values = self.detached(py, |b| {
            let kv = b.kv_ref();
            let key = |i: usize| keys.get(i).unwrap_or_default();
            let mut values = Packed {
                data: Vec::new(),
                spans: vec![None; keys.len()],
            };
            let order = key_order(kv.prefers_key_order(), keys.len(), &key);
            let data = &mut values.data;
            let spans = &mut values.spans;
            kv.get_many_with(order.len(), &|j| key(order[j] as usize), &mut |j, v| {
                if data.capacity() == 0 {
                    // Most batches hold values of similar sizes.
                    data.reserve(keys.len() * v.len().max(1));
                }
                let start = data.len();
                data.extend_from_slice(v);
                spans[order[j] as usize] = Some((start, v.len()));
            })?;
            Ok(values)
        })?;
        PyList::new(py, values.iter().map(|v| v.map(|v| PyBytes::new(py, v))))
    }

    /// `get_all` as seen through a record cache: a key's cached value (None
    /// for a cached delete) if the named cache `cache_id` holds it, else the
    /// store's. The cache is only peeked (a hit or a miss is counted, no
    /// use), so a batch can read its old values first and put afterwards.
    fn get_all_cached<'py>(
        &self,
        keys: &Bound<'py, PyList>,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = keys.py();
        let keys = Packed::from_list(keys, false, "keys")?;
        let cache = cache.get();
        let id = cache.with(py, |inner| inner.id(py, cache_id))?;
        let values = self.detached(py, |b| {
            let mut guard = cache.inner.lock().unwrap_or_else(PoisonError::into_inner);
            let mut caching = CachingKeyValueStore::new(b.unlogged(), &mut guard.cache, id);
            keys.iter()
                .map(|key| caching.peek_counted(key.unwrap_or_default()))
                .collect::<strom_core::Result<Vec<_>>>()
        })?;
        PyList::new(
            py,
            values
                .iter()
                .map(|v| v.as_deref().map(|v| PyBytes::new(py, v))),
        )
    }

    /// The value of `key` through the named cache `cache_id` of `cache`: the
    /// cached one (None for a cached delete), counted as a use, else the
    /// store's (see `strom_core::store::CachingKeyValueStore`).
    fn get_cached<'py>(
        &self,
        key: &[u8],
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let py = cache.py();
        let (value, _) = self.cached(cache, cache_id, |c, _| c.get(key))?;
        Ok(opt_bytes(py, value))
    }

    /// Puts `value` (None deletes) into the named cache as a dirty entry
    /// with the record's `timestamp`; returns what the put evicted, written
    /// through to the store (and its changelog), as flushed columns.
    #[pyo3(signature = (key, value, timestamp, cache, cache_id))]
    fn put_cached<'py>(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<FlushedColumns<'py>> {
        let py = cache.py();
        let flushed = self.cached(cache, cache_id, |c, out| c.put(key, value, timestamp, out))?;
        flushed_columns(py, &flushed.1)
    }

    /// `put_cached` unless the key has a value (through the cache); returns
    /// the existing value and the flushed columns.
    fn put_if_absent_cached<'py>(
        &self,
        key: &[u8],
        value: &[u8],
        timestamp: i64,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<(Option<Bound<'py, PyBytes>>, FlushedColumns<'py>)> {
        let py = cache.py();
        let (existing, flushed) = self.cached(cache, cache_id, |c, out| {
            c.put_if_absent(key, value, timestamp, out)
        })?;
        Ok((opt_bytes(py, existing), flushed_columns(py, &flushed)?))
    }

    /// Caches a delete of `key`; returns the value it had (through the cache)
    /// and the flushed columns.
    fn delete_cached<'py>(
        &self,
        key: &[u8],
        timestamp: i64,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<(Option<Bound<'py, PyBytes>>, FlushedColumns<'py>)> {
        let py = cache.py();
        let (existing, flushed) =
            self.cached(cache, cache_id, |c, out| c.delete(key, timestamp, out))?;
        Ok((opt_bytes(py, existing), flushed_columns(py, &flushed)?))
    }

    /// `range` as seen through the named cache: cached entries over stored
    /// ones, cached deletes hiding stored entries; a snapshot.
    #[pyo3(signature = (key_from, key_to, cache, cache_id, reverse=false))]
    fn range_cached<'py>(
        &self,
        key_from: Option<&[u8]>,
        key_to: Option<&[u8]>,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
        reverse: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let py = cache.py();
        let (items, _) =
            self.cached_batch(cache, cache_id, |c, _| c.range(key_from, key_to, reverse))?;
        entries(py, &items)
    }

    /// Writes every dirty entry of the named cache through to the store (and
    /// its changelog), in last-update order (a commit's first step); returns
    /// them as flushed columns. Deletes of keys the store does not have are
    /// neither written nor returned (Kafka's `putAndMaybeForward`).
    fn flush_cached<'py>(
        &self,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<FlushedColumns<'py>> {
        let py = cache.py();
        #[allow(
            clippy::redundant_closure_for_method_calls,
            reason = "the method is not general over the store's lifetime"
        )]
        let ((), flushed) = self.cached_batch(cache, cache_id, |c, out| c.flush(out))?;
        flushed_columns(py, &flushed)
    }

    /// Writes `(keys[i], values[i])` (None deletes) one after the other, with
    /// the record timestamps, through the named cache `cache_id` of `cache`
    /// when given (see `strom_core::store::kernels::upsert`). Returns the old
    /// value of each record (the previous record's for a key repeated in the
    /// batch; an empty list unless `want_old`) and the entries evictions
    /// flushed, as `(key, new, old, timestamp)` in emission order, already
    /// written to the store: the caller logs and forwards them.
    #[pyo3(signature = (keys, values, timestamps, cache=None, cache_id=0, want_old=true))]
    #[allow(clippy::needless_pass_by_value)] // pyo3 hands the list over as a Vec
    fn upsert<'py>(
        &self,
        keys: &Bound<'py, PyList>,
        values: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        cache: Option<&Bound<'py, NativeThreadCache>>,
        cache_id: i64,
        want_old: bool,
    ) -> PyResult<(Bound<'py, PyList>, FlushedColumns<'py>)> {
        let py = keys.py();
        if keys.len() != values.len() || keys.len() != timestamps.len() {
            return Err(PyValueError::new_err(format!(
                "upsert got {} keys, {} values and {} timestamps",
                keys.len(),
                values.len(),
                timestamps.len()
            )));
        }
        let keys = Packed::from_list(keys, false, "keys")?;
        let values = Packed::from_list(values, true, "values")?;
        let cache = match cache {
            Some(c) => {
                let c = c.get();
                Some((c, c.with(py, |inner| inner.id(py, cache_id))?))
            }
            None => None,
        };
        let n = keys.len();
        let (olds, flushed) = self.detached(py, |b| {
            let key = |i: usize| keys.get(i).unwrap_or_default();
            let (mut olds, mut flushed) = (Vec::with_capacity(n), Vec::new());
            if let Some((c, id)) = cache {
                // Record order: the cache's evictions depend on it.
                let mut guard = c.inner.lock().unwrap_or_else(PoisonError::into_inner);
                let records = (0..n).map(|i| (key(i), values.get(i), timestamps[i]));
                kernels::upsert(
                    &mut b.logged(),
                    Some((&mut guard.cache, id)),
                    records,
                    want_old,
                    &mut olds,
                    &mut flushed,
                )?;
                return Ok((olds, flushed));
            }
            // Straight to the store: in key order (see `key_order`), which
            // keeps each key's writes in record order; olds answered in the callers'.
            let order = key_order(b.unlogged().prefers_key_order(), n, &key);
            let records = order.iter().map(|&i| {
                (
                    key(i as usize),
                    values.get(i as usize),
                    timestamps[i as usize],
                )
            });
            let mut sorted = Vec::with_capacity(if want_old { n } else { 0 });
            kernels::upsert(
                b.unlogged(),
                None,
                records,
                want_old,
                &mut sorted,
                &mut flushed,
            )?;
            // The changelog in record order, as the writes came.
            if let Some(log) = b.changelog.as_mut() {
                for (i, &timestamp) in timestamps.iter().enumerate() {
                    log.push(key(i), values.get(i), timestamp);
                }
            }
            if want_old {
                olds.resize(n, None);
                for (&i, old) in order.iter().zip(sorted) {
                    olds[i as usize] = old;
                }
            }
            Ok((olds, flushed))
        })?;
        let olds = PyList::new(py, olds.iter().map(|v| opt_slice(py, v.as_deref())))?;
        Ok((olds, flushed_columns(py, &flushed)?))
    }

    /// `KGroupedTable.count()`'s kernel over a timestamped store: record `i`
    /// is a change of `keys[i]` at `timestamps[i]` with a new value or not
    /// (`has_new`) and an old one or not (`has_old`); through the named
    /// cache when given. Returns the old counts, new counts (None: absent),
    /// result timestamps and the flushed columns of what evictions wrote.
    /// A logged store logs each write with its record's timestamp.
    #[pyo3(signature = (keys, timestamps, has_new, has_old, cache=None, cache_id=0))]
    #[allow(clippy::type_complexity, clippy::needless_pass_by_value)]
    fn table_count<'py>(
        &self,
        keys: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        has_new: Vec<bool>,
        has_old: Vec<bool>,
        cache: Option<&Bound<'py, NativeThreadCache>>,
        cache_id: i64,
    ) -> PyResult<(
        Bound<'py, PyList>,
        Bound<'py, PyList>,
        Bound<'py, PyList>,
        FlushedColumns<'py>,
    )> {
        let py = keys.py();
        let n = keys.len();
        if timestamps.len() != n || has_new.len() != n || has_old.len() != n {
            return Err(PyValueError::new_err(
                "table_count needs as many timestamps and flags as keys",
            ));
        }
        let keys = Packed::from_list(keys, false, "keys")?;
        let cache = match cache {
            Some(c) => {
                let c = c.get();
                Some((c, c.with(py, |inner| inner.id(py, cache_id))?))
            }
            None => None,
        };
        let (changes, flushed) = self.detached(py, |b| {
            let records: Vec<_> = (0..n)
                .map(|i| {
                    let key = keys.get(i).unwrap_or_default();
                    (key, timestamps[i], has_new[i], has_old[i])
                })
                .collect();
            let mut flushed = Vec::new();
            let changes = match cache {
                Some((c, id)) => {
                    let mut guard = c.inner.lock().unwrap_or_else(PoisonError::into_inner);
                    kernels::table_count(
                        &mut b.logged(),
                        Some((&mut guard.cache, id)),
                        &records,
                        &mut flushed,
                    )?
                }
                None => kernels::table_count(&mut b.logged(), None, &records, &mut flushed)?,
            };
            Ok((changes, flushed))
        })?;
        Ok((
            PyList::new(py, changes.iter().map(|c| c.old))?,
            PyList::new(py, changes.iter().map(|c| c.new))?,
            PyList::new(py, changes.iter().map(|c| c.timestamp))?,
            flushed_columns(py, &flushed)?,
        ))
    }

    /// `count_timestamped` through the named cache `cache_id` of `cache`,
    /// record by record as puts one by one would go; returns the
    /// `(key, new, old, timestamp)` entries evictions flushed, already
    /// written to the store.
    #[allow(clippy::needless_pass_by_value)]
    fn count_timestamped_cached<'py>(
        &self,
        keys: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<FlushedColumns<'py>> {
        if timestamps.len() != keys.len() {
            return Err(PyValueError::new_err(
                "keys and timestamps must have the same length",
            ));
        }
        let keys = Packed::from_list(keys, false, "keys")?;
        let records: Vec<_> = (0..keys.len())
            .map(|i| (keys.get(i).unwrap_or_default(), timestamps[i]))
            .collect();
        self.count_cached(&records, cache, cache_id)
    }

    /// `count_timestamped_cached` of the keys and timestamps of a batch read
    /// from the log, read where the batch holds them (no `bytes` object per
    /// key); a null key is a `ValueError` (the caller leaves those out).
    fn count_read_cached<'py>(
        &self,
        records: &RecordBatch,
        cache: &Bound<'py, NativeThreadCache>,
        cache_id: i64,
    ) -> PyResult<FlushedColumns<'py>> {
        let batch = &records.batch;
        let records = batch
            .keys
            .iter()
            .zip(&batch.timestamps)
            .enumerate()
            .map(|(i, (key, &timestamp))| match key {
                Some(span) => Ok((&batch.data[span.start..span.start + span.len], timestamp)),
                None => Err(PyValueError::new_err(format!("keys[{i}] is None"))),
            })
            .collect::<PyResult<Vec<_>>>()?;
        self.count_cached(&records, cache, cache_id)
    }

    /// Stores `value` (None deletes); a logged store logs it with `timestamp`.
    #[pyo3(signature = (key, value, timestamp=0))]
    fn put(
        &self,
        py: Python<'_>,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: i64,
    ) -> PyResult<()> {
        self.attached(py, |b| {
            let mut kv = b.logged();
            kv.set_record_timestamp(timestamp);
            kv.put(key, value)
        })
    }

    #[pyo3(signature = (key, value, timestamp=0))]
    fn put_if_absent<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
        timestamp: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let existing = self.attached(py, |b| {
            let mut kv = b.logged();
            kv.set_record_timestamp(timestamp);
            let existing = kv.get(key)?;
            if existing.is_none() {
                kv.put(key, Some(value))?;
            }
            Ok(existing)
        })?;
        Ok(opt_bytes(py, existing))
    }

    /// Deletes `key`; returns its value. A logged store logs the tombstone
    /// even when the key was absent, as Kafka's logging layer does.
    #[pyo3(signature = (key, timestamp=0))]
    fn delete<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        timestamp: i64,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let existing = self.attached(py, |b| {
            let mut kv = b.logged();
            kv.set_record_timestamp(timestamp);
            let existing = kv.get(key)?;
            if existing.is_some() {
                kv.put(key, None)?;
            } else {
                kv.log_delete(key);
            }
            Ok(existing)
        })?;
        Ok(opt_bytes(py, existing))
    }

    /// Puts (or, for a None value, deletes) each pair in order: a batch
    /// write, logged (in that order, with `timestamp`) when the store is.
    /// The lists must have the same length.
    #[pyo3(signature = (keys, values, timestamp=0))]
    fn put_all(
        &self,
        keys: &Bound<'_, PyList>,
        values: &Bound<'_, PyList>,
        timestamp: i64,
    ) -> PyResult<()> {
        self.write_pairs(keys, values, Some(timestamp), "put_all")
            .map(|_| ())
    }

    /// Applies changelog records (a None value deletes) without logging
    /// them again; returns how many were applied.
    fn restore(&self, keys: &Bound<'_, PyList>, values: &Bound<'_, PyList>) -> PyResult<usize> {
        self.write_pairs(keys, values, None, "restore")
    }

    /// Applies a batch of changelog records as read (from the embedded log
    /// or a Kafka consumer; a None value deletes) without logging them again,
    /// natively; returns how many were applied. `remaining`: the changelog's
    /// records still to come after these (give it with a partition's first
    /// batch: a persistent store then sizes its index once, at this batch's
    /// rate of new keys).
    #[pyo3(signature = (records, remaining=0))]
    fn restore_records(&self, records: &Bound<'_, RecordBatch>, remaining: u64) -> PyResult<usize> {
        let py = records.py();
        let records = records.get();
        let changelog = format!("{}-{}", records.topic.bind(py), records.partition);
        let n = records.batch.len();
        self.detached(py, |b| {
            apply_changelog(&mut b.store, &records.batch, n, remaining, &changelog)
        })?;
        Ok(n)
    }

    /// From now on every write is also kept for the store's changelog (Kafka's
    /// logging layer), until `take_changelog` takes it. Restores are not logged.
    fn enable_changelog(&self, py: Python<'_>) -> PyResult<()> {
        changelog::enable(py, &self.inner)
    }

    /// Whether writes are logged.
    #[getter]
    fn logged(&self, py: Python<'_>) -> bool {
        changelog::is_logged(py, &self.inner)
    }

    /// The changelog records written since the last call, in write order, as
    /// columns: `(keys, values, timestamps)` (a None value: a tombstone).
    fn take_changelog<'py>(&self, py: Python<'py>) -> PyResult<ChangelogColumns<'py>> {
        changelog::take(py, &self.inner)
    }

    /// Replays the records of `topic`-`partition` in the embedded log from
    /// `from_offset` up to `to_offset` (default: the end offset now) into the
    /// store, natively: a None value deletes the key. Returns the number of
    /// records applied and the offset to continue from.
    #[pyo3(signature = (log, topic, partition, from_offset, to_offset=None))]
    fn restore_from_log(
        &self,
        log: &Bound<'_, NativeLog>,
        topic: &Bound<'_, PyString>,
        partition: u32,
        from_offset: u64,
        to_offset: Option<u64>,
    ) -> PyResult<(u64, u64)> {
        let py = log.py();
        let log = &log.get().log;
        let topic = topic.to_str()?;
        self.detached(py, |b| {
            restore(&mut b.store, log, topic, partition, from_offset, to_offset)
        })
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
        let items = self.detached(py, |b| b.kv_ref().range(key_from, key_to, reverse))?;
        entries(py, &items)
    }

    fn prefix_scan<'py>(&self, py: Python<'py>, prefix: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let items = self.detached(py, |b| b.kv_ref().prefix_scan(prefix))?;
        entries(py, &items)
    }

    fn approximate_num_entries(&self, py: Python<'_>) -> PyResult<usize> {
        self.attached(py, |b| Ok(b.kv_ref().approximate_num_entries()))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.approximate_num_entries(py)
    }

    /// Deletes every entry (unlogged: a global store is rebuilt from its topic).
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, |b| {
            let kv = b.unlogged();
            for (key, _) in kv.range(None, None, false)? {
                kv.put(&key, None)?;
            }
            Ok(())
        })
    }

    /// Makes the writes so far durable together with `metadata` (the
    /// changelog offset and stream time they reflect). A no-op in memory.
    fn commit(&self, py: Python<'_>, metadata: &[u8]) -> PyResult<()> {
        // fsync and maybe compaction: worth letting other threads run.
        self.detached(py, |b| match &mut b.store {
            Backend::Persistent(s) => s.commit(metadata),
            Backend::Memory(_) => Ok(()),
        })
    }

    /// Releases the store (and, when persistent, its directory lock).
    fn close(&self, py: Python<'_>) {
        let backend = self
            .inner
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Dropping a persistent store closes its files: no interpreter needed.
        py.detach(move || drop(backend));
    }

    /// The count kernel: returns the new counts (ints) and their Long-serde
    /// bytes (for the changelog), one per key, in record order.
    fn count<'py>(
        &self,
        keys: &Bound<'py, PyList>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = keys.py();
        let keys = Packed::from_list(keys, false, "keys")?;
        let (counts, encoded) = self.detached(py, |b| {
            let mut encoded = Vec::with_capacity(keys.len());
            let counts = kernels::count(
                &mut b.logged(),
                keys.iter().map(|k| k.expect("keys are never None")),
                &mut encoded,
            )?;
            Ok((counts, encoded))
        })?;
        let encoded = PyList::new(py, encoded.iter().map(|b| PyBytes::new(py, b)))?;
        Ok((PyList::new(py, counts)?, encoded))
    }

    /// The count kernel over a timestamped store (8-byte timestamp + count):
    /// returns the new counts and their result timestamps (the max of the
    /// record's and the previous result's), with which a logged store logs
    /// each write.
    fn count_timestamped<'py>(
        &self,
        keys: &Bound<'py, PyList>,
        timestamps: Vec<i64>,
    ) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
        let py = keys.py();
        let keys = Packed::from_list(keys, false, "keys")?;
        if timestamps.len() != keys.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "keys and timestamps must have the same length",
            ));
        }
        let (counts, stamps) = self.detached(py, |b| {
            let mut encoded = Vec::with_capacity(keys.len());
            let records = keys
                .iter()
                .map(|k| k.expect("keys are never None"))
                .zip(timestamps);
            kernels::count_timestamped(&mut b.logged(), records, &mut encoded)
        })?;
        Ok((PyList::new(py, counts)?, PyList::new(py, stamps)?))
    }
}

/// The `(keys, values)` of a batch of writes, copied out of Python; `what`
/// names the call in the error for lists of different lengths.
fn pairs_of(
    keys: &Bound<'_, PyList>,
    values: &Bound<'_, PyList>,
    what: &str,
) -> PyResult<(Packed, Packed)> {
    if keys.len() != values.len() {
        return Err(PyValueError::new_err(format!(
            "{what} got {} keys and {} values",
            keys.len(),
            values.len()
        )));
    }
    Ok((
        Packed::from_list(keys, false, "keys")?,
        Packed::from_list(values, true, "values")?,
    ))
}

fn opt_slice<'py>(py: Python<'py>, value: Option<&[u8]>) -> Option<Bound<'py, PyBytes>> {
    value.map(|v| PyBytes::new(py, v))
}

/// The entries a cache flushed, in emission order, as columns: keys, new
/// values, old values (None: absent), timestamps.
type FlushedColumns<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
    Bound<'py, PyList>,
);

fn flushed_columns<'py>(
    py: Python<'py>,
    entries: &[FlushedEntry],
) -> PyResult<FlushedColumns<'py>> {
    Ok((
        PyList::new(py, entries.iter().map(|e| PyBytes::new(py, &e.key)))?,
        PyList::new(
            py,
            entries
                .iter()
                .map(|e| opt_slice(py, e.new_value.as_deref())),
        )?,
        PyList::new(
            py,
            entries
                .iter()
                .map(|e| opt_slice(py, e.old_value.as_deref())),
        )?,
        PyList::new(py, entries.iter().map(|e| e.timestamp))?,
    ))
}

/// Kafka's timestamped-store values (`ValueAndTimestamp`): the 8-byte
/// big-endian timestamp, then the value's bytes; a None value stays None.
#[pyfunction]
fn stamp_values<'py>(
    values: &Bound<'py, PyList>,
    timestamps: Vec<i64>,
) -> PyResult<Bound<'py, PyList>> {
    let py = values.py();
    if values.len() != timestamps.len() {
        return Err(PyValueError::new_err(format!(
            "stamp_values got {} values and {} timestamps",
            values.len(),
            timestamps.len()
        )));
    }
    let values = Packed::from_list(values, true, "values")?;
    let mut buf = Vec::new();
    PyList::new(
        py,
        values.iter().zip(timestamps).map(|(value, ts)| {
            value.map(|v| {
                buf.clear();
                buf.extend_from_slice(&ts.to_be_bytes());
                buf.extend_from_slice(v);
                PyBytes::new(py, &buf)
            })
        }),
    )
}

/// The inverse of `stamp_values`: `(values, timestamps)`, both None where
/// the input is None. A value shorter than 8 bytes raises `SerializationError`.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn split_stamped<'py>(
    values: &Bound<'py, PyList>,
) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyList>)> {
    let py = values.py();
    let values = Packed::from_list(values, true, "values")?;
    let mut inner = Vec::with_capacity(values.len());
    let mut stamps = Vec::with_capacity(values.len());
    for value in values.iter() {
        match value {
            None => {
                inner.push(None);
                stamps.push(None);
            }
            Some(v) if v.len() < 8 => {
                return Err(new_error(
                    py,
                    "SerializationError",
                    format!("a timestamped value needs 8 bytes of timestamp: {v:?}"),
                ));
            }
            Some(v) => {
                let (ts, rest) = v.split_at(8);
                stamps.push(Some(i64::from_be_bytes(ts.try_into().unwrap_or_default())));
                inner.push(Some(PyBytes::new(py, rest)));
            }
        }
    }
    Ok((PyList::new(py, inner)?, PyList::new(py, stamps)?))
}

/// A table's changes on its repartition topic (strom's `ChangeSerde`): a
/// flag byte (bit 0: new present, bit 1: old present), the new value's length
/// as 4 big-endian bytes, the new value's bytes, the old value's bytes.
#[pyfunction]
fn pack_changes<'py>(
    news: &Bound<'py, PyList>,
    olds: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyList>> {
    let py = news.py();
    if news.len() != olds.len() {
        return Err(PyValueError::new_err(format!(
            "pack_changes got {} new and {} old values",
            news.len(),
            olds.len()
        )));
    }
    let news = Packed::from_list(news, true, "news")?;
    let olds = Packed::from_list(olds, true, "olds")?;
    let mut buf = Vec::new();
    let mut out = Vec::with_capacity(news.len());
    for (new, old) in news.iter().zip(olds.iter()) {
        let flags = u8::from(new.is_some()) | (u8::from(old.is_some()) << 1);
        let new = new.unwrap_or_default();
        let Ok(length) = u32::try_from(new.len()) else {
            return Err(PyValueError::new_err(
                "a table change's new value is over 4 GiB",
            ));
        };
        buf.clear();
        buf.push(flags);
        buf.extend_from_slice(&length.to_be_bytes());
        buf.extend_from_slice(new);
        buf.extend_from_slice(old.unwrap_or_default());
        out.push(PyBytes::new(py, &buf));
    }
    PyList::new(py, out)
}

/// The inverse of `pack_changes`: `(news, olds)`, None where a flag says
/// absent. Returns None if an item is None or shorter than 5 bytes (the
/// caller then decodes one by one to name it).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn unpack_changes<'py>(
    changes: &Bound<'py, PyList>,
) -> PyResult<Option<(Bound<'py, PyList>, Bound<'py, PyList>)>> {
    let py = changes.py();
    let changes = Packed::from_list(changes, true, "changes")?;
    let mut news = Vec::with_capacity(changes.len());
    let mut olds = Vec::with_capacity(changes.len());
    for change in changes.iter() {
        let Some(data) = change.filter(|d| d.len() >= 5) else {
            return Ok(None);
        };
        let length = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        // As slicing would: a length past the end takes what there is.
        let split = 5usize.saturating_add(length).min(data.len());
        news.push((data[0] & 1 != 0).then(|| PyBytes::new(py, &data[5..split])));
        olds.push((data[0] & 2 != 0).then(|| PyBytes::new(py, &data[split..])));
    }
    Ok(Some((PyList::new(py, news)?, PyList::new(py, olds)?)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeKeyValueStore>()?;
    m.add_function(wrap_pyfunction!(stamp_values, m)?)?;
    m.add_function(wrap_pyfunction!(split_stamped, m)?)?;
    m.add_function(wrap_pyfunction!(pack_changes, m)?)?;
    m.add_function(wrap_pyfunction!(unpack_changes, m)?)?;
    Ok(())
}
