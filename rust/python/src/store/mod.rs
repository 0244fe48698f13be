//! The native stores (`strom_core::store`): key-value, window and session
//! stores, the changelog they keep, and the record cache in front of them.

pub mod cache;
pub mod changelog;
pub mod kv;
pub mod session;
pub mod window;

use pyo3::prelude::*;
use strom_core::Error;
use strom_core::log::ReadBatch;

use crate::log::RecordBatch;

/// Fails naming the first of `batch`'s first `n` records without a key
/// (a store's changelog records always have one).
pub(crate) fn check_changelog_keys(
    batch: &ReadBatch,
    n: usize,
    changelog: &str,
) -> strom_core::Result<()> {
    match (0..n).find(|&i| batch.keys[i].is_none()) {
        Some(i) => Err(Error::Store(format!(
            "changelog {changelog} holds a record without a key at offset {}",
            batch.offsets[i]
        ))),
        None => Ok(()),
    }
}

/// A changelog batch's `(store key, value or None)` pairs, once every
/// record is checked to have a key.
pub(crate) fn changelog_pairs<'a>(
    py: Python<'_>,
    records: &'a RecordBatch,
) -> strom_core::Result<impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + Send> {
    let batch = &records.batch;
    let changelog = format!("{}-{}", records.topic.bind(py), records.partition);
    check_changelog_keys(batch, batch.len(), &changelog)?;
    Ok((0..batch.len()).map(|i| (batch.key(i).expect("checked above"), batch.value(i))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    kv::register(m)?;
    window::register(m)?;
    session::register(m)?;
    cache::register(m)
}
