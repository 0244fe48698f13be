//! The native stores (`strom_core::store`): key-value, window and session
//! stores, the changelog they keep, and the record cache in front of them.

pub mod cache;
pub mod changelog;
pub mod kv;
pub mod session;
pub mod window;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    kv::register(m)?;
    window::register(m)?;
    session::register(m)?;
    cache::register(m)
}
