use pyo3::prelude::*;

mod arrow;
mod errors;
mod expr;
mod kafka;
mod log;
mod records;
mod replay;
mod serde;
mod store;
mod window;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust `log` records reach Python's `logging` as "strom._core.<crate>.<module>".
    // Installing fails only if a logger is already set (module imported twice).
    let _ = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::LoggersAndLevels)?
        .set_prefix("strom._core")
        // The rdkafka crate logs only what our clients already report as
        // errors (or, on drop, that a closed consumer cannot close again).
        .filter_target("rdkafka".to_owned(), ::log::LevelFilter::Off)
        .install();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    log::register(m)?;
    arrow::register(m)?;
    kafka::register(m)?;
    expr::register(m)?;
    records::register(m)?;
    replay::register(m)?;
    serde::register(m)?;
    store::register(m)?;
    window::register(m)?;
    Ok(())
}
