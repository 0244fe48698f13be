use pyo3::prelude::*;

mod cache;
mod errors;
mod log;
mod serde;
mod session;
mod store;
mod window;
mod window_kernels;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust `log` records reach Python's `logging` as "strom._core.<crate>.<module>".
    // Installing fails only if a logger is already set (module imported twice).
    let _ = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::LoggersAndLevels)?
        .set_prefix("strom._core")
        .install();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    log::register(m)?;
    serde::register(m)?;
    store::register(m)?;
    window::register(m)?;
    window_kernels::register(m)?;
    session::register(m)?;
    cache::register(m)?;
    Ok(())
}
