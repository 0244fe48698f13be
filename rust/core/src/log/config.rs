//! Topic configuration with Kafka's keys, and the topic metadata file.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::log::{CleanupPolicy, TopicConfig};

pub(crate) const SEGMENT_BYTES: &str = "segment.bytes";
pub(crate) const SEGMENT_MS: &str = "segment.ms";
pub(crate) const RETENTION_MS: &str = "retention.ms";
pub(crate) const RETENTION_BYTES: &str = "retention.bytes";
pub(crate) const CLEANUP_POLICY: &str = "cleanup.policy";
pub(crate) const DELETE_RETENTION_MS: &str = "delete.retention.ms";
pub(crate) const MIN_COMPACTION_LAG_MS: &str = "min.compaction.lag.ms";
pub(crate) const INDEX_INTERVAL_BYTES: &str = "index.interval.bytes";
/// The topic metadata file's own key, next to the Kafka ones.
const PARTITIONS: &str = "partitions";

/// Kafka's lower bound before 4.0 (a v0 record's overhead); the embedded log
/// keeps it so tests can roll segments every few records.
const MIN_SEGMENT_BYTES: u64 = 14;
/// Positions inside a segment are 32-bit in the index, as in Kafka.
const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

impl Default for CleanupPolicy {
    fn default() -> Self {
        CleanupPolicy {
            delete: true,
            compact: false,
        }
    }
}

impl CleanupPolicy {
    fn parse(value: &str) -> Option<Self> {
        let mut policy = CleanupPolicy {
            delete: false,
            compact: false,
        };
        for item in value.split(',') {
            match item.trim() {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return None,
            }
        }
        (policy.delete || policy.compact).then_some(policy)
    }

    fn as_str(self) -> &'static str {
        match (self.compact, self.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            // A policy with neither flag cannot be parsed; treat it as delete.
            (false, _) => "delete",
        }
    }
}

fn bad(key: &str, value: &str, why: &str) -> Error {
    Error::Config(format!(
        "invalid value '{value}' for topic config '{key}': {why}"
    ))
}

fn parse_long(key: &str, value: &str) -> Result<i64> {
    value
        .trim()
        .parse::<i64>()
        .map_err(|_| bad(key, value, "not a number"))
}

fn at_least(key: &str, value: &str, min: i64) -> Result<i64> {
    let v = parse_long(key, value)?;
    if v < min {
        return Err(bad(key, value, &format!("must be at least {min}")));
    }
    Ok(v)
}

pub(crate) fn new_config(partitions: u32) -> TopicConfig {
    TopicConfig {
        partitions,
        segment_bytes: 1 << 30,
        segment_ms: Some(7 * 24 * 60 * 60 * 1000),
        retention_ms: None,
        retention_bytes: None,
        cleanup_policy: CleanupPolicy::default(),
        delete_retention_ms: 24 * 60 * 60 * 1000,
        min_compaction_lag_ms: 0,
        index_interval_bytes: 4096,
    }
}

pub(crate) fn set(config: &mut TopicConfig, key: &str, value: &str) -> Result<()> {
    match key {
        SEGMENT_BYTES => {
            let v = at_least(key, value, MIN_SEGMENT_BYTES as i64)?;
            if v as u64 > MAX_SEGMENT_BYTES {
                return Err(bad(key, value, "must be at most 2147483647"));
            }
            config.segment_bytes = v as u64;
        }
        // -1 (never roll on time) is an embedded-log extension; Kafka requires >= 1.
        SEGMENT_MS => match parse_long(key, value)? {
            -1 => config.segment_ms = None,
            v if v >= 1 => config.segment_ms = Some(v),
            _ => return Err(bad(key, value, "must be at least 1, or -1 for never")),
        },
        RETENTION_MS => match at_least(key, value, -1)? {
            -1 => config.retention_ms = None,
            v => config.retention_ms = Some(v),
        },
        RETENTION_BYTES => match at_least(key, value, -1)? {
            -1 => config.retention_bytes = None,
            v => config.retention_bytes = Some(v as u64),
        },
        CLEANUP_POLICY => {
            config.cleanup_policy = CleanupPolicy::parse(value).ok_or_else(|| {
                bad(
                    key,
                    value,
                    "expected delete, compact, or both separated by a comma",
                )
            })?;
        }
        DELETE_RETENTION_MS => config.delete_retention_ms = at_least(key, value, 0)?,
        MIN_COMPACTION_LAG_MS => config.min_compaction_lag_ms = at_least(key, value, 0)?,
        INDEX_INTERVAL_BYTES => {
            let v = at_least(key, value, 0)?;
            config.index_interval_bytes = u32::try_from(v)
                .ok()
                .filter(|&v| i32::try_from(v).is_ok())
                .ok_or_else(|| bad(key, value, "must be at most 2147483647"))?;
        }
        _ => {
            return Err(Error::Config(format!(
                "unknown topic config '{key}' (value '{value}'); the embedded log supports \
                 {SEGMENT_BYTES}, {SEGMENT_MS}, {RETENTION_MS}, {RETENTION_BYTES}, \
                 {CLEANUP_POLICY}, {DELETE_RETENTION_MS}, {MIN_COMPACTION_LAG_MS}, \
                 {INDEX_INTERVAL_BYTES}"
            )));
        }
    }
    Ok(())
}

pub(crate) fn to_properties(config: &TopicConfig) -> Vec<(String, String)> {
    let opt = |v: Option<i64>| v.unwrap_or(-1).to_string();
    vec![
        (SEGMENT_BYTES.into(), config.segment_bytes.to_string()),
        (SEGMENT_MS.into(), opt(config.segment_ms)),
        (RETENTION_MS.into(), opt(config.retention_ms)),
        (
            RETENTION_BYTES.into(),
            opt(config.retention_bytes.map(|b| b as i64)),
        ),
        (
            CLEANUP_POLICY.into(),
            config.cleanup_policy.as_str().to_owned(),
        ),
        (
            DELETE_RETENTION_MS.into(),
            config.delete_retention_ms.to_string(),
        ),
        (
            MIN_COMPACTION_LAG_MS.into(),
            config.min_compaction_lag_ms.to_string(),
        ),
        (
            INDEX_INTERVAL_BYTES.into(),
            config.index_interval_bytes.to_string(),
        ),
    ]
}

/// Checks a config built field by field (the fields are public) the way
/// `set` checks each value.
pub(crate) fn validate(config: &TopicConfig) -> Result<()> {
    if config.partitions == 0 {
        return Err(Error::Config(
            "a topic needs at least one partition (partitions=0)".into(),
        ));
    }
    let mut check = new_config(config.partitions);
    for (key, value) in to_properties(config) {
        set(&mut check, &key, &value)?;
    }
    if !config.cleanup_policy.delete && !config.cleanup_policy.compact {
        return Err(bad(
            CLEANUP_POLICY,
            "",
            "expected delete, compact, or both separated by a comma",
        ));
    }
    Ok(())
}

/// Kafka's topic name rule: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(crate) fn validate_topic_name(name: &str) -> Result<()> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name == "." || name == ".." {
        "'.' and '..' are not allowed"
    } else if name.len() > 249 {
        "it is longer than 249 characters"
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        "only ASCII letters, digits, '.', '_' and '-' are allowed"
    } else {
        return Ok(());
    };
    Err(Error::Config(format!("invalid topic name '{name}': {why}")))
}

/// The metadata file's text: the partition count, then the config.
pub(crate) fn render_topic_file(config: &TopicConfig) -> String {
    let mut out = String::from("# strom embedded log topic metadata\n");
    let _ = writeln!(out, "{PARTITIONS}={}", config.partitions);
    for (k, v) in to_properties(config) {
        let _ = writeln!(out, "{k}={v}");
    }
    out
}

pub(crate) fn parse_topic_file(path: &Path, text: &str) -> Result<TopicConfig> {
    let corrupt = |position: usize, reason: String| Error::CorruptLog {
        path: path.to_path_buf(),
        position: position as u64,
        offset: None,
        reason,
    };
    let mut config = new_config(1);
    let mut partitions = None;
    let mut position = 0;
    for line in text.split_inclusive('\n') {
        let at = position;
        position += line.len();
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| corrupt(at, format!("expected key=value, found '{line}'")))?;
        let (key, value) = (key.trim(), value.trim());
        if key == PARTITIONS {
            let n = value
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| corrupt(at, format!("bad partition count '{value}'")))?;
            partitions = Some(n);
        } else {
            set(&mut config, key, value).map_err(|e| corrupt(at, e.to_string()))?;
        }
    }
    config.partitions = partitions.ok_or_else(|| corrupt(0, "no partition count".into()))?;
    Ok(config)
}
