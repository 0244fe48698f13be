"""``Window`` and ``Windowed``: the keys of windowed results (Kafka's
``Window`` and ``Windowed``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import total_ordering
from typing import Generic, TypeVar

__all__ = ["SessionWindow", "TimeWindow", "Window", "Windowed"]

K = TypeVar("K")


@total_ordering
@dataclass(frozen=True, eq=False)
class Window:
    """A time interval ``[start, end]`` in epoch milliseconds.

    As in Kafka, ``start`` must not be negative and ``end`` must not be
    before ``start``. Whether ``end`` is inclusive depends on the window
    type: windowed results carry a ``TimeWindow`` (time and sliding windows,
    end exclusive) or a ``SessionWindow`` (both ends inclusive). Windows
    equal and order by start, then end, whatever their type, so
    ``Window(start, end)`` compares equal to a result's window.
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ValueError(f"window start time cannot be negative (got {self.start})")
        if self.end < self.start:
            raise ValueError(f"window end time {self.end} cannot be before start {self.start}")

    def __repr__(self) -> str:
        return f"Window(start={self.start}, end={self.end})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return (self.start, self.end) == (other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.start, self.end))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return (self.start, self.end) < (other.start, other.end)

    def start_time(self) -> datetime:
        """The start as a UTC datetime (Kafka's ``startTime()``)."""
        return _utc(self.start)

    def end_time(self) -> datetime:
        """The end as a UTC datetime (Kafka's ``endTime()``; OverflowError
        past the year 9999, where Python's datetimes end)."""
        return _utc(self.end)

    def overlap(self, other: Window) -> bool:
        """Whether ``other``, a window of the same type, overlaps this one
        (Kafka's ``overlap(Window)``): defined by ``TimeWindow`` and
        ``SessionWindow``; a plain ``Window`` has no rule and raises TypeError."""
        raise TypeError(
            f"{self!r} is a plain Window: overlap() is defined for a TimeWindow or a SessionWindow"
        )

    def _same_type(self, other: Window) -> None:
        if type(other) is not type(self):
            raise TypeError(
                f"cannot compare windows of different types: {type(self).__name__} "
                f"and {type(other).__name__}"
            )


class TimeWindow(Window):
    """A time or sliding window's interval, ``start`` inclusive and ``end``
    exclusive (Kafka's ``TimeWindow``)."""

    def overlap(self, other: Window) -> bool:
        """Whether the two intervals ``[start, end)`` share a millisecond.
        ``other`` must be a TimeWindow too (TypeError otherwise, as Kafka's
        IllegalArgumentException)."""
        self._same_type(other)
        return self.start < other.end and other.start < self.end


class SessionWindow(Window):
    """A session's interval, both ends inclusive (Kafka's ``SessionWindow``)."""

    def overlap(self, other: Window) -> bool:
        """Whether the two intervals ``[start, end]`` share a millisecond.
        ``other`` must be a SessionWindow too (TypeError otherwise, as Kafka's
        IllegalArgumentException)."""
        self._same_type(other)
        return self.start <= other.end and other.start <= self.end


def _utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)


@dataclass(frozen=True)
class Windowed(Generic[K]):
    """A key with the window it belongs to: the key type of windowed
    aggregations and of window and session store scans."""

    key: K
    window: Window

    def __repr__(self) -> str:
        return f"Windowed(key={self.key!r}, window={self.window!r})"
