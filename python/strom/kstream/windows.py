"""Window specifications (Kafka's ``TimeWindows``, ``SlidingWindows`` and
``SessionWindows``): which windows a record falls into, and how long they
accept late records."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from strom.errors import TopologyError
from strom.state.stores import to_millis

__all__ = ["SessionWindows", "SlidingWindows", "TimeWindows"]


@dataclass(frozen=True)
class TimeWindows:
    """Fixed-size windows ``[start, start + size)`` aligned to the epoch:
    tumbling, or hopping with ``advance_by``. A window accepts records until
    stream time passes its end plus the grace period."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    @staticmethod
    def of_size_with_no_grace(size: int | timedelta) -> TimeWindows:
        return TimeWindows.of_size_and_grace(size, 0)

    @staticmethod
    def of_size_and_grace(size: int | timedelta, grace: int | timedelta) -> TimeWindows:
        size_ms = to_millis(size, "window size")
        if size_ms <= 0:
            raise TopologyError("window size must be larger than zero")
        return TimeWindows(size_ms, size_ms, to_millis(grace, "grace"))

    def advance_by(self, advance: int | timedelta) -> TimeWindows:
        """Hopping windows: a new window starts every ``advance``."""
        advance_ms = to_millis(advance, "advance")
        if not 0 < advance_ms <= self.size_ms:
            raise TopologyError(
                f"advance ({advance_ms} ms) must lie within (0, window size ({self.size_ms} ms)]"
            )
        return TimeWindows(self.size_ms, advance_ms, self.grace_ms)

    def windows_for(self, timestamp: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` of every window containing ``timestamp``,
        earliest first (Kafka's ``windowsFor``)."""
        start = max(0, timestamp - self.size_ms + self.advance_ms) // self.advance_ms
        start *= self.advance_ms
        out = []
        while start <= timestamp:
            out.append((start, start + self.size_ms))
            start += self.advance_ms
        return out

    def retention_ms(self) -> int:
        """Kafka's default retention: the window size plus the grace period."""
        return self.size_ms + self.grace_ms


@dataclass(frozen=True)
class SlidingWindows:
    """Windows of a fixed time difference ``[start, start + d]``, both bounds
    inclusive, that exist only where records make them distinct: each record
    has a window ending at it and one starting 1 ms after it (Kafka's
    ``SlidingWindows``). A window accepts records until stream time passes
    its end plus the grace period."""

    time_difference_ms: int
    grace_ms: int

    @staticmethod
    def of_time_difference_with_no_grace(time_difference: int | timedelta) -> SlidingWindows:
        return SlidingWindows.of_time_difference_and_grace(time_difference, 0)

    @staticmethod
    def of_time_difference_and_grace(
        time_difference: int | timedelta, grace: int | timedelta
    ) -> SlidingWindows:
        difference = to_millis(time_difference, "time difference")
        if difference <= 0:
            # Kafka accepts 0 here but then fails on the first record: a
            # window cannot end where it starts.
            raise TopologyError("a sliding window's time difference must be larger than zero")
        return SlidingWindows(difference, to_millis(grace, "grace"))

    def retention_ms(self) -> int:
        """Kafka's default retention: twice the time difference plus grace."""
        return 2 * self.time_difference_ms + self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions of activity per key: records less than the inactivity gap
    apart share a session ``[first, last]`` (both inclusive), and a record
    between two sessions merges them (Kafka's ``SessionWindows``). A session
    accepts records until stream time passes its end plus the gap and the
    grace period."""

    inactivity_gap_ms: int
    grace_ms: int

    @staticmethod
    def of_inactivity_gap_with_no_grace(gap: int | timedelta) -> SessionWindows:
        return SessionWindows.of_inactivity_gap_and_grace(gap, 0)

    @staticmethod
    def of_inactivity_gap_and_grace(gap: int | timedelta, grace: int | timedelta) -> SessionWindows:
        gap_ms = to_millis(gap, "inactivity gap")
        if gap_ms <= 0:
            raise TopologyError("a session's inactivity gap must be larger than zero")
        return SessionWindows(gap_ms, to_millis(grace, "grace"))

    def retention_ms(self) -> int:
        """Kafka's default retention: the inactivity gap plus grace."""
        return self.inactivity_gap_ms + self.grace_ms
