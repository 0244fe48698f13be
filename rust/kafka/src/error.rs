use std::ffi::CStr;
use std::fmt;

use rdkafka::bindings as rdsys;
use rdkafka::error::{KafkaError, RDKafkaError};
use rdkafka::types::RDKafkaRespErr;

/// librdkafka's generic failure (`RD_KAFKA_RESP_ERR__FAIL`): errors that
/// carry no code of their own (bad config, a nul byte in a name).
const FAIL: i32 = -196;

/// A client error as librdkafka reports it: its error code (Kafka's protocol
/// codes, or librdkafka's negative local ones), what happened, and the flags
/// librdkafka sets on transactional and fatal errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientError {
    pub code: i32,
    pub message: String,
    pub fatal: bool,
    pub retriable: bool,
    pub txn_requires_abort: bool,
}

pub type Result<T> = std::result::Result<T, ClientError>;

impl ClientError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            fatal: false,
            retriable: false,
            txn_requires_abort: false,
        }
    }

    pub fn from_resp(code: RDKafkaRespErr, what: &str) -> Self {
        Self::new(code as i32, format!("{what}: {}", describe(code as i32)))
    }

    pub(crate) fn fail(message: impl Into<String>) -> Self {
        Self::new(FAIL, message)
    }

    pub(crate) fn from_kafka(error: &KafkaError, what: &str) -> Self {
        if let KafkaError::Transaction(inner) = error {
            return Self::from_rd_error(inner, what);
        }
        let code = error.rdkafka_error_code().map_or(FAIL, |c| c as i32);
        Self {
            fatal: matches!(error, KafkaError::MessageConsumptionFatal(_)),
            ..Self::new(code, format!("{what}: {error}"))
        }
    }

    pub(crate) fn from_rd_error(error: &RDKafkaError, what: &str) -> Self {
        Self {
            code: error.code() as i32,
            message: format!("{what}: {}", error.string()),
            fatal: error.is_fatal(),
            retriable: error.is_retriable(),
            txn_requires_abort: error.txn_requires_abort(),
        }
    }

    /// librdkafka's name of the code (`TOPIC_AUTHORIZATION_FAILED`, `_TRANSPORT`).
    pub fn name(&self) -> String {
        name_of(self.code)
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.name())
    }
}

impl std::error::Error for ClientError {}

fn known(code: i32) -> Option<RDKafkaRespErr> {
    RDKafkaRespErr::try_from(code).ok()
}

pub(crate) fn name_of(code: i32) -> String {
    // SAFETY: rd_kafka_err2name returns a static string for any code.
    known(code).map_or_else(
        || format!("ERROR_{code}"),
        |c| unsafe { c_string(rdsys::rd_kafka_err2name(c)) },
    )
}

pub(crate) fn describe(code: i32) -> String {
    // SAFETY: as above.
    known(code).map_or_else(
        || format!("error {code}"),
        |c| unsafe { c_string(rdsys::rd_kafka_err2str(c)) },
    )
}

/// An owned copy of a C string librdkafka hands out (empty for null).
///
/// # Safety
/// `ptr` is null or a valid nul-terminated string.
pub(crate) unsafe fn c_string(ptr: *const std::os::raw::c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: the caller's promise.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}
