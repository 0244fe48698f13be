//! The one error type of strom-core. The bindings map each variant to a class
//! of the `strom.errors` hierarchy, so every variant says what went wrong and where.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Corruption that is not a torn tail: a CRC mismatch or a bad frame in a
    /// closed segment, a broken index or metadata file.
    #[error("corrupt log file {path} at byte position {position} (offset {offset:?}): {reason}")]
    CorruptLog {
        path: PathBuf,
        /// Byte position inside `path` where the bad data starts.
        position: u64,
        /// The record offset concerned, where it is known.
        offset: Option<u64>,
        reason: String,
    },

    /// Another process holds the log's lock file.
    #[error(
        "embedded log {path} is in use by another process{holder}; only one process may open it at a time"
    )]
    LogInUse { path: PathBuf, holder: String },

    #[error("unknown topic '{0}'")]
    UnknownTopic(String),

    #[error("topic '{0}' already exists")]
    TopicExists(String),

    #[error("topic '{topic}' has {count} partition(s); partition {partition} does not exist")]
    UnknownPartition {
        topic: String,
        partition: u32,
        count: u32,
    },

    #[error(
        "offset {offset} is out of range for {topic}-{partition} (log start {log_start}, end {log_end})"
    )]
    OffsetOutOfRange {
        topic: String,
        partition: u32,
        offset: u64,
        log_start: u64,
        log_end: u64,
    },

    /// A bad configuration value or an invalid argument (topic name, partition count, …).
    #[error("{0}")]
    Config(String),

    /// Bytes that a serde could not decode.
    #[error("{0}")]
    Serialization(String),

    #[error("state store error: {0}")]
    Store(String),
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
