//! Maps `strom_core::Error` onto the `strom.errors` hierarchy (python/strom/errors.py).
//!
//! The classes live in Python so that users can subclass and catch them like
//! any other exception; the native module imports them when it raises.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::PyType;

use strom_core::Error;

/// The `strom.errors` class that a core error variant is raised as.
fn class_name(e: &Error) -> &'static str {
    match e {
        Error::CorruptLog { .. } => "CorruptLogError",
        Error::LogInUse { .. } => "LogInUseError",
        Error::UnknownTopic(_) | Error::UnknownPartition { .. } => "UnknownTopicError",
        Error::OffsetOutOfRange { .. } => "OffsetOutOfRangeError",
        // Kafka's TopicExistsException is a bad-argument error from the caller's side.
        Error::Config(_) | Error::TopicExists(_) => "ConfigError",
        Error::Serialization(_) => "SerializationError",
        Error::Store(_) => "StoreError",
        Error::Io { .. } => "StromError",
    }
}

/// Converts a core error into the Python exception users catch.
///
/// I/O errors become `OSError(errno, strerror, filename)` when the OS gave an
/// errno (so `FileNotFoundError`, `PermissionError`, … are raised as Python
/// would), and everything else becomes a `strom.errors` class with the core's
/// message.
pub fn to_py_err(py: Python<'_>, e: Error) -> PyErr {
    match e {
        Error::Io { path, source } if source.raw_os_error().is_some() => {
            let code = source.raw_os_error().unwrap_or_default();
            let strerror = std::io::Error::from_raw_os_error(code).to_string();
            // io::Error's Display appends " (os error N)"; OSError shows it as [Errno N].
            let strerror = strerror
                .strip_suffix(&format!(" (os error {code})"))
                .unwrap_or(&strerror)
                .to_owned();
            PyOSError::new_err((code, strerror, path.display().to_string()))
        }
        e => new_error(py, class_name(&e), e.to_string()),
    }
}

fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(py
        .import("strom.errors")?
        .getattr(name)?
        .cast_into::<PyType>()?)
}

/// `result.py_err(py)?`: the `?`-friendly form of [`to_py_err`].
pub trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for strom_core::Result<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py_err(py, e))
    }
}

/// A `strom.errors` class by name with a message of the bindings' own, for
/// errors the core has no variant for.
pub fn new_error(py: Python<'_>, class: &str, message: String) -> PyErr {
    match error_class(py, class) {
        Ok(class) => PyErr::from_type(class, (message,)),
        Err(import_error) => import_error,
    }
}
