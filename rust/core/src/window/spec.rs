//! Window specifications: Kafka's `TimeWindows`, `SlidingWindows`,
//! `SessionWindows` and `EmitStrategy`, validated as Kafka validates them,
//! with Kafka's default store retention for each.
//!
//! All durations are milliseconds. The grace period is how long after a
//! window's end it still accepts out-of-order records: a window closes once
//! the processor's observed stream time reaches `end + grace` (exact
//! comparisons per kind are on each kernel).

use crate::error::{Error, Result};

/// Kafka's `ConsumerRecord.NO_TIMESTAMP`: the observed stream time of a
/// processor that has seen no record, and "never emitted" for the emit-final
/// bookkeeping.
pub const NO_TIMESTAMP: i64 = -1;

/// Kafka's default emit interval for `EmitStrategy.onWindowClose()`
/// (`__emit.interval.ms.kstreams.windowed.aggregation__`): final results are
/// looked for at most once per this many milliseconds of wall-clock time.
pub const DEFAULT_EMIT_INTERVAL_MS: i64 = 1000;

/// When a windowed aggregation forwards its results (Kafka's `EmitStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmitStrategy {
    /// Every update of a window is a result (Kafka's `onWindowUpdate()`, the
    /// default; what Kafka forwards with caching disabled).
    #[default]
    OnWindowUpdate,
    /// One final result per window, once it closes (Kafka's
    /// `onWindowClose()`).
    OnWindowClose,
}

/// Fixed-size windows aligned to the epoch: tumbling when `advance == size`,
/// hopping when `advance < size`. Window `n` covers `[n * advance,
/// n * advance + size)`; starts are never negative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeWindows {
    size: i64,
    advance: i64,
    grace: i64,
}

impl TimeWindows {
    /// Kafka's `TimeWindows.ofSizeWithNoGrace(size)`: tumbling, no grace.
    pub fn of_size_with_no_grace(size_ms: i64) -> Result<Self> {
        Self::of_size_and_grace(size_ms, 0)
    }

    /// Kafka's `TimeWindows.ofSizeAndGrace(size, afterWindowEnd)`.
    pub fn of_size_and_grace(size_ms: i64, grace_ms: i64) -> Result<Self> {
        Self::new(size_ms, size_ms, grace_ms)
    }

    /// Kafka's `advanceBy(advance)`: hopping windows, `0 < advance <= size`.
    pub fn advance_by(self, advance_ms: i64) -> Result<Self> {
        Self::new(self.size, advance_ms, self.grace)
    }

    fn new(size: i64, advance: i64, grace: i64) -> Result<Self> {
        if size <= 0 {
            return Err(Error::Config(format!(
                "Window size (sizeMs) must be larger than zero (got {size} ms)."
            )));
        }
        if advance <= 0 || advance > size {
            return Err(Error::Config(format!(
                "Window advancement interval should be more than zero and less than window \
                 duration which is {size} ms, but given advancement interval is: {advance} ms"
            )));
        }
        if grace < 0 {
            return Err(Error::Config(format!(
                "Grace period must not be negative (got {grace} ms)."
            )));
        }
        Ok(Self {
            size,
            advance,
            grace,
        })
    }

    pub fn size(&self) -> i64 {
        self.size
    }

    pub fn advance(&self) -> i64 {
        self.advance
    }

    pub fn grace(&self) -> i64 {
        self.grace
    }

    pub fn is_tumbling(&self) -> bool {
        self.advance == self.size
    }

    /// Kafka's default store retention for a time-windowed aggregation
    /// (`WindowStoreMaterializer`): size + grace.
    pub fn default_retention(&self) -> i64 {
        self.size.saturating_add(self.grace)
    }

    /// Kafka rejects a store retention below size + grace.
    pub fn check_retention(&self, retention_ms: i64) -> Result<()> {
        if self.default_retention() > retention_ms {
            return Err(Error::Config(format!(
                "The retention period of the window store must be no smaller than its window \
                 size plus the grace period. Got size=[{}], grace=[{}], retention=[{retention_ms}]",
                self.size, self.grace
            )));
        }
        Ok(())
    }
}

/// Sliding aggregation windows (Kafka's `SlidingWindows`): windows of
/// `time_difference` ms with inclusive bounds `[start, start +
/// time_difference]`, created as records enter and leave them, so that every
/// distinct set of records that fit together in such a window gets one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindows {
    time_difference: i64,
    grace: i64,
}

impl SlidingWindows {
    /// Kafka's `SlidingWindows.ofTimeDifferenceWithNoGrace(timeDifference)`.
    pub fn of_time_difference_with_no_grace(time_difference_ms: i64) -> Result<Self> {
        Self::of_time_difference_and_grace(time_difference_ms, 0)
    }

    /// Kafka's `SlidingWindows.ofTimeDifferenceAndGrace(timeDifference,
    /// afterWindowEnd)`; a time difference of 0 is allowed, as in Kafka.
    pub fn of_time_difference_and_grace(time_difference_ms: i64, grace_ms: i64) -> Result<Self> {
        if time_difference_ms < 0 {
            return Err(Error::Config(format!(
                "Window time difference must not be negative (got {time_difference_ms} ms)."
            )));
        }
        if grace_ms < 0 {
            return Err(Error::Config(format!(
                "Window grace period must not be negative (got {grace_ms} ms)."
            )));
        }
        Ok(Self {
            time_difference: time_difference_ms,
            grace: grace_ms,
        })
    }

    pub fn time_difference(&self) -> i64 {
        self.time_difference
    }

    pub fn grace(&self) -> i64 {
        self.grace
    }

    /// Kafka's default store retention for sliding windows
    /// (`SlidingWindowStoreMaterializer`): 2 * time difference + grace, so
    /// that every window needed to create a new one can still be read.
    pub fn default_retention(&self) -> i64 {
        self.time_difference
            .saturating_mul(2)
            .saturating_add(self.grace)
    }

    pub fn check_retention(&self, retention_ms: i64) -> Result<()> {
        if self.default_retention() > retention_ms {
            return Err(Error::Config(format!(
                "The retention period of the window store must be no smaller than 2 * time \
                 difference plus the grace period. Got time difference=[{}], grace=[{}], \
                 retention=[{retention_ms}]",
                self.time_difference, self.grace
            )));
        }
        Ok(())
    }
}

/// Session windows (Kafka's `SessionWindows`): a key's records closer than
/// `gap` ms to each other form one session `[first, last]` (inclusive); a
/// record that bridges sessions merges them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionWindows {
    gap: i64,
    grace: i64,
}

impl SessionWindows {
    /// Kafka's `SessionWindows.ofInactivityGapWithNoGrace(inactivityGap)`.
    pub fn of_inactivity_gap_with_no_grace(gap_ms: i64) -> Result<Self> {
        Self::of_inactivity_gap_and_grace(gap_ms, 0)
    }

    /// Kafka's `SessionWindows.ofInactivityGapAndGrace(inactivityGap,
    /// afterWindowEnd)`.
    pub fn of_inactivity_gap_and_grace(gap_ms: i64, grace_ms: i64) -> Result<Self> {
        if gap_ms <= 0 {
            return Err(Error::Config(format!(
                "Gap time cannot be zero or negative (got {gap_ms} ms)."
            )));
        }
        if grace_ms < 0 {
            return Err(Error::Config(format!(
                "Grace period must not be negative (got {grace_ms} ms)."
            )));
        }
        Ok(Self {
            gap: gap_ms,
            grace: grace_ms,
        })
    }

    pub fn inactivity_gap(&self) -> i64 {
        self.gap
    }

    pub fn grace(&self) -> i64 {
        self.grace
    }

    /// Kafka's default store retention for sessions
    /// (`SessionStoreMaterializer`): gap + grace.
    pub fn default_retention(&self) -> i64 {
        self.gap.saturating_add(self.grace)
    }

    pub fn check_retention(&self, retention_ms: i64) -> Result<()> {
        if self.default_retention() > retention_ms {
            return Err(Error::Config(format!(
                "The retention period of the session store must be no smaller than the session \
                 inactivity gap plus the grace period. Got gap=[{}], grace=[{}], \
                 retention=[{retention_ms}]",
                self.gap, self.grace
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_windows_validate_as_kafka() {
        assert!(TimeWindows::of_size_with_no_grace(0).is_err());
        assert!(TimeWindows::of_size_with_no_grace(-1).is_err());
        assert!(TimeWindows::of_size_and_grace(10, -1).is_err());
        let w = TimeWindows::of_size_and_grace(10, 3).unwrap();
        assert!(w.is_tumbling());
        assert!(w.advance_by(0).is_err());
        assert!(w.advance_by(11).is_err());
        let h = w.advance_by(5).unwrap();
        assert_eq!((h.size(), h.advance(), h.grace()), (10, 5, 3));
        assert_eq!(h.default_retention(), 13);
        assert!(h.check_retention(12).is_err());
        assert!(h.check_retention(13).is_ok());
    }

    #[test]
    fn sliding_and_session_windows_validate_as_kafka() {
        assert!(SlidingWindows::of_time_difference_with_no_grace(-1).is_err());
        assert!(SlidingWindows::of_time_difference_and_grace(1, -1).is_err());
        let s = SlidingWindows::of_time_difference_and_grace(0, 0).unwrap();
        assert_eq!(s.default_retention(), 0);
        let s = SlidingWindows::of_time_difference_and_grace(10, 5).unwrap();
        assert_eq!(s.default_retention(), 25);
        assert!(s.check_retention(24).is_err());

        assert!(SessionWindows::of_inactivity_gap_with_no_grace(0).is_err());
        assert!(SessionWindows::of_inactivity_gap_and_grace(5, -1).is_err());
        let g = SessionWindows::of_inactivity_gap_and_grace(5, 2).unwrap();
        assert_eq!(g.default_retention(), 7);
        assert!(g.check_retention(6).is_err());
    }
}
