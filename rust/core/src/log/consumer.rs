//! A consumer group member reading every partition of its topics.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::log::{CommittedOffset, Log, OffsetReset, ReadBatch};

/// Bytes one poll reads from a partition at most (about; at least one record).
const PARTITION_MAX_BYTES: usize = 64 << 20;

/// Records one partition returned by [`Consumer::poll`].
#[derive(Debug, Clone)]
pub struct PolledBatch {
    pub topic: String,
    pub partition: u32,
    pub batch: ReadBatch,
}

#[derive(Debug)]
struct Assigned {
    topic: String,
    partition: u32,
    position: u64,
}

/// A consumer of a group, assigned every partition of its topics.
#[derive(Debug)]
pub struct Consumer {
    log: Arc<Log>,
    group_id: String,
    reset: OffsetReset,
    assignment: Vec<Assigned>,
    /// Where the next poll starts, so that no partition starves.
    next: usize,
}

impl Consumer {
    /// Assigns every partition of `topics` and positions each at the group's
    /// committed offset, or per `reset` where there is none or it is out of range.
    pub fn new(
        log: Arc<Log>,
        group_id: &str,
        topics: &[String],
        reset: OffsetReset,
    ) -> Result<Self> {
        let committed = if group_id.is_empty() {
            Vec::new()
        } else {
            log.committed_offsets(group_id)?
        };
        let mut assignment = Vec::new();
        for (i, topic) in topics.iter().enumerate() {
            if topics[..i].contains(topic) {
                continue;
            }
            for partition in 0..log.partition_count(topic)? {
                let found = committed
                    .iter()
                    .find(|c| &c.topic == topic && c.partition == partition)
                    .map(|c| c.offset);
                let start = log.log_start_offset(topic, partition)?;
                let end = log.end_offset(topic, partition)?;
                let position = match found {
                    Some(o) if (start..=end).contains(&o) => o,
                    Some(o) => reset_position(&log, reset, topic, partition, o)?,
                    None if reset == OffsetReset::None => {
                        return Err(Error::Config(format!(
                            "group '{group_id}' has no committed offset for {topic}-{partition} \
                             and the offset reset policy is none"
                        )));
                    }
                    None => reset_position(&log, reset, topic, partition, start)?,
                };
                assignment.push(Assigned {
                    topic: topic.clone(),
                    partition,
                    position,
                });
            }
        }
        Ok(Consumer {
            log,
            group_id: group_id.to_owned(),
            reset,
            assignment,
            next: 0,
        })
    }

    pub fn group_id(&self) -> &str {
        &self.group_id
    }

    pub fn assignment(&self) -> Vec<(String, u32)> {
        self.assignment
            .iter()
            .map(|a| (a.topic.clone(), a.partition))
            .collect()
    }

    /// Up to `max_records` in total, one batch per partition that had data,
    /// partitions visited round-robin across calls; waits up to `timeout`
    /// when there is nothing to read.
    pub fn poll(&mut self, max_records: usize, timeout: Duration) -> Result<Vec<PolledBatch>> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            // Read the counter before the data, so an append in between wakes the wait.
            let seen = self.log.append_sequence();
            let batches = self.fetch(max_records)?;
            if !batches.is_empty() || max_records == 0 {
                return Ok(batches);
            }
            let wait = match deadline {
                None => Duration::from_secs(3600),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w,
                    _ => return Ok(batches),
                },
            };
            self.log.wait_for_appends(seen, wait);
        }
    }

    fn fetch(&mut self, max_records: usize) -> Result<Vec<PolledBatch>> {
        let n = self.assignment.len();
        let mut out = Vec::new();
        if n == 0 {
            return Ok(out);
        }
        let start = self.next % n;
        self.next = start + 1;
        let mut left = max_records;
        for i in 0..n {
            if left == 0 {
                // The partition after the last one served goes first next time.
                self.next = start + i;
                break;
            }
            let a = &mut self.assignment[(start + i) % n];
            let batch =
                match self
                    .log
                    .read(&a.topic, a.partition, a.position, left, PARTITION_MAX_BYTES)
                {
                    Err(Error::OffsetOutOfRange { offset, .. }) => {
                        // Retention deleted the position (or it was sought past the end).
                        a.position =
                            reset_position(&self.log, self.reset, &a.topic, a.partition, offset)?;
                        self.log.read(
                            &a.topic,
                            a.partition,
                            a.position,
                            left,
                            PARTITION_MAX_BYTES,
                        )?
                    }
                    r => r?,
                };
            a.position = batch.next_offset;
            if !batch.is_empty() {
                left -= batch.len();
                out.push(PolledBatch {
                    topic: a.topic.clone(),
                    partition: a.partition,
                    batch,
                });
            }
        }
        self.next %= n;
        Ok(out)
    }

    fn assigned(&self, topic: &str, partition: u32) -> Result<usize> {
        if let Some(i) = self
            .assignment
            .iter()
            .position(|a| a.topic == topic && a.partition == partition)
        {
            return Ok(i);
        }
        if self.assignment.iter().any(|a| a.topic == topic) {
            return Err(Error::UnknownPartition {
                topic: topic.to_owned(),
                partition,
                count: self.log.partition_count(topic)?,
            });
        }
        Err(Error::Config(format!(
            "topic '{topic}' is not assigned to this consumer of group '{}'",
            self.group_id
        )))
    }

    pub fn position(&self, topic: &str, partition: u32) -> Result<u64> {
        Ok(self.assignment[self.assigned(topic, partition)?].position)
    }

    /// Moves the position; an offset out of range is reset on the next poll.
    pub fn seek(&mut self, topic: &str, partition: u32, offset: u64) -> Result<()> {
        let i = self.assigned(topic, partition)?;
        self.assignment[i].position = offset;
        Ok(())
    }

    /// Commits the current position of every assigned partition (with empty metadata).
    pub fn commit(&mut self) -> Result<()> {
        let offsets: Vec<CommittedOffset> = self
            .assignment
            .iter()
            .map(|a| CommittedOffset {
                topic: a.topic.clone(),
                partition: a.partition,
                offset: a.position,
                metadata: String::new(),
            })
            .collect();
        self.log.commit_offsets(&self.group_id, &offsets)
    }

    /// Commits explicit offsets (with metadata, e.g. stream time).
    pub fn commit_offsets(&mut self, offsets: &[CommittedOffset]) -> Result<()> {
        self.log.commit_offsets(&self.group_id, offsets)
    }

    pub fn committed(&self) -> Result<Vec<CommittedOffset>> {
        if self.group_id.is_empty() {
            return Ok(Vec::new());
        }
        self.log.committed_offsets(&self.group_id)
    }
}

/// Where `reset` puts a partition whose position `offset` is missing or out of range.
fn reset_position(
    log: &Log,
    reset: OffsetReset,
    topic: &str,
    partition: u32,
    offset: u64,
) -> Result<u64> {
    match reset {
        OffsetReset::Earliest => log.log_start_offset(topic, partition),
        OffsetReset::Latest => log.end_offset(topic, partition),
        OffsetReset::None => Err(Error::OffsetOutOfRange {
            topic: topic.to_owned(),
            partition,
            offset,
            log_start: log.log_start_offset(topic, partition)?,
            log_end: log.end_offset(topic, partition)?,
        }),
    }
}
