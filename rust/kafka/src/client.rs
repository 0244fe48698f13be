use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;

use crate::error::{ClientError, Result};

/// librdkafka settings as `key=value` pairs, validated when a client is made.
#[derive(Debug, Clone, Default)]
pub struct ClientConfig {
    pairs: Vec<(String, String)>,
}

impl ClientConfig {
    pub fn new(pairs: impl IntoIterator<Item = (String, String)>) -> Self {
        Self {
            pairs: pairs.into_iter().collect(),
        }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn native(&self) -> rdkafka::ClientConfig {
        let mut config = rdkafka::ClientConfig::new();
        for (key, value) in &self.pairs {
            config.set(key, value);
        }
        // Log lines go to the context (`Events`), from librdkafka's threads;
        // the client's level is set from this (rdkafka would take it from
        // the Rust `log` facade): librdkafka's `log_level`, default info.
        let level = match self.get("log_level").and_then(|v| v.parse::<i32>().ok()) {
            Some(0) => RDKafkaLogLevel::Emerg,
            Some(1) => RDKafkaLogLevel::Alert,
            Some(2) => RDKafkaLogLevel::Critical,
            Some(3) => RDKafkaLogLevel::Error,
            Some(4) => RDKafkaLogLevel::Warning,
            Some(5) => RDKafkaLogLevel::Notice,
            Some(7) => RDKafkaLogLevel::Debug,
            _ => RDKafkaLogLevel::Info,
        };
        config.set_log_level(level);
        config
    }

    pub(crate) fn creation_error(error: &KafkaError) -> ClientError {
        match error {
            KafkaError::ClientConfig(_, description, key, value) => ClientError::fail(format!(
                "invalid Kafka client setting {key}={value}: {description}"
            )),
            other => ClientError::from_kafka(other, "creating the Kafka client"),
        }
    }
}

/// One line librdkafka logged: syslog level (0 emergency … 7 debug), its
/// facility (`FAIL`, `SASL`, `SSL`, …) and the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: i32,
    pub facility: String,
    pub message: String,
}

/// Most log lines kept between two drains; the rest are only counted.
const MAX_LOG_LINES: usize = 1024;
/// Most client errors kept between two drains.
const MAX_ERRORS: usize = 256;

/// What a client's background threads report: log lines and client-level
/// errors (a broker that cannot be reached, failed authentication). The
/// owner drains them; nothing is printed.
#[derive(Debug, Default)]
pub struct Events {
    logs: Mutex<VecDeque<LogLine>>,
    dropped_logs: AtomicU64,
    errors: Mutex<VecDeque<ClientError>>,
}

impl Events {
    pub(crate) fn log(&self, line: LogLine) {
        let mut logs = lock(&self.logs);
        if logs.len() >= MAX_LOG_LINES {
            self.dropped_logs.fetch_add(1, Ordering::Relaxed);
            return;
        }
        logs.push_back(line);
    }

    pub(crate) fn error(&self, error: ClientError) {
        let mut errors = lock(&self.errors);
        if errors.len() >= MAX_ERRORS {
            errors.pop_front();
        }
        errors.push_back(error);
    }

    /// The log lines since the last call, and how many were dropped.
    pub fn take_logs(&self) -> (Vec<LogLine>, u64) {
        let lines = lock(&self.logs).drain(..).collect();
        (lines, self.dropped_logs.swap(0, Ordering::Relaxed))
    }

    /// The client errors since the last call.
    pub fn take_errors(&self) -> Vec<ClientError> {
        lock(&self.errors).drain(..).collect()
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding these locks leaves plain data behind: keep going.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The client context of every strom client: it keeps what librdkafka's
/// threads report in [`Events`].
#[derive(Debug, Default)]
pub struct Context {
    pub(crate) events: Events,
}

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        self.events.log(LogLine {
            level: level as i32,
            facility: facility.to_owned(),
            message: message.to_owned(),
        });
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.events.error(ClientError::from_kafka(&error, reason));
    }
}

pub(crate) fn check(result: rdkafka::error::KafkaResult<()>, what: &str) -> Result<()> {
    result.map_err(|e| ClientError::from_kafka(&e, what))
}
