//! Window assignment for time windows (Kafka's `TimeWindows.windowsFor`).

use super::spec::TimeWindows;

/// The starts of the windows that contain `timestamp`, ascending: every
/// multiple of `advance` in `(timestamp - size, timestamp]` that is not
/// negative. A negative timestamp is in no window.
#[derive(Debug, Clone)]
pub struct WindowStarts {
    next: i64,
    last: i64,
    advance: i64,
}

impl Iterator for WindowStarts {
    type Item = i64;

    #[inline]
    fn next(&mut self) -> Option<i64> {
        if self.next > self.last {
            return None;
        }
        let start = self.next;
        match start.checked_add(self.advance) {
            Some(next) => self.next = next,
            // Past i64::MAX there is no further window start.
            None => self.last = i64::MIN,
        }
        Some(start)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = if self.next > self.last {
            0
        } else {
            ((self.last - self.next) / self.advance + 1) as usize
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for WindowStarts {}

impl TimeWindows {
    /// Kafka's `windowsFor(timestamp)`: the starts of the windows holding
    /// `timestamp`, ascending; each window is `[start, start + size)`.
    #[inline]
    pub fn window_starts(&self, timestamp: i64) -> WindowStarts {
        if timestamp < 0 {
            return WindowStarts {
                next: 0,
                last: -1,
                advance: self.advance(),
            };
        }
        let first = (timestamp - self.size() + self.advance()).max(0);
        let first = first / self.advance() * self.advance();
        WindowStarts {
            next: first,
            last: timestamp,
            advance: self.advance(),
        }
    }

    /// The end of the window starting at `start` (exclusive); an end past
    /// `i64::MAX` is capped there, like Kafka's `timeWindowForSize`.
    #[inline]
    pub fn window_end(&self, start: i64) -> i64 {
        start.saturating_add(self.size())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(w: &TimeWindows, ts: i64) -> Vec<i64> {
        w.window_starts(ts).collect()
    }

    #[test]
    fn kafka_time_windows_test_cases() {
        // TimeWindowsTest.shouldComputeWindowsForHoppingWindows
        let w = TimeWindows::of_size_with_no_grace(12)
            .unwrap()
            .advance_by(5)
            .unwrap();
        assert_eq!(starts(&w, 21), vec![10, 15, 20]);
        // ...ForBarelyOverlappingHoppingWindows
        let w = TimeWindows::of_size_with_no_grace(6)
            .unwrap()
            .advance_by(5)
            .unwrap();
        assert_eq!(starts(&w, 7), vec![5]);
        // ...ForTumblingWindows
        let w = TimeWindows::of_size_with_no_grace(12).unwrap();
        assert_eq!(starts(&w, 21), vec![12]);
    }

    #[test]
    fn hopping_record_at_7s_is_in_two_windows() {
        let w = TimeWindows::of_size_with_no_grace(10_000)
            .unwrap()
            .advance_by(5_000)
            .unwrap();
        assert_eq!(starts(&w, 7_000), vec![0, 5_000]);
        assert_eq!(w.window_end(5_000), 15_000);
    }

    #[test]
    fn starts_are_never_negative_and_exact_size() {
        let w = TimeWindows::of_size_with_no_grace(10)
            .unwrap()
            .advance_by(3)
            .unwrap();
        assert_eq!(starts(&w, 0), vec![0]);
        assert_eq!(starts(&w, 4), vec![0, 3]);
        assert_eq!(starts(&w, 10), vec![3, 6, 9]);
        assert_eq!(w.window_starts(10).len(), 3);
        assert!(starts(&w, -1).is_empty());
        assert_eq!(w.window_starts(-5).len(), 0);
        let big = starts(&w, i64::MAX);
        assert!(big.iter().all(|&s| s > i64::MAX - 10));
        assert_eq!(w.window_end(i64::MAX - 1), i64::MAX);
    }
}
