"""``Window`` and ``Windowed``: the keys of windowed results (Kafka's
``Window`` and ``Windowed``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Generic, TypeVar

__all__ = ["Window", "Windowed"]

K = TypeVar("K")


@dataclass(frozen=True, order=True)
class Window:
    """A time interval ``[start, end]`` in epoch milliseconds.

    Windows order by start, then end. As in Kafka, ``start`` must not be
    negative and ``end`` must not be before ``start``; whether ``end`` is
    inclusive depends on the window type (exclusive for time windows,
    inclusive for session windows).
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

    def start_time(self) -> datetime:
        """The start as a UTC datetime (Kafka's ``startTime()``)."""
        return _utc(self.start)

    def end_time(self) -> datetime:
        """The end as a UTC datetime (Kafka's ``endTime()``; OverflowError
        past the year 9999, where Python's datetimes end)."""
        return _utc(self.end)


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
