"""Where a source starts reading a partition that has no committed offset
(Kafka's ``AutoOffsetReset``, KIP-1106): at the log start, at the end, at
the first record of the last ``duration``, or nowhere (an error)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

__all__ = ["AutoOffsetReset", "OffsetReset"]

EARLIEST = "earliest"
LATEST = "latest"
NONE = "none"
BY_DURATION = "by_duration"

# Java's Duration.parse form without signs or fractions of days, as Kafka's
# ``by_duration:`` config values use (PT1H, P1DT12H, PT0.5S).
_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)(?:[.,](?P<f>\d{1,9}))?S)?)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class AutoOffsetReset:
    """A reset policy. Make one with :meth:`earliest`, :meth:`latest`,
    :meth:`none` or :meth:`by_duration`; ``str()`` gives Kafka's config
    value (``"by_duration:PT1H"``)."""

    strategy: str
    duration_ms: int | None = None

    @staticmethod
    def earliest() -> AutoOffsetReset:
        return AutoOffsetReset(EARLIEST)

    @staticmethod
    def latest() -> AutoOffsetReset:
        return AutoOffsetReset(LATEST)

    @staticmethod
    def none() -> AutoOffsetReset:
        """No reset: a partition with no committed offset is an error."""
        return AutoOffsetReset(NONE)

    @staticmethod
    def by_duration(duration: int | timedelta) -> AutoOffsetReset:
        """From the first record whose timestamp is at least ``now -
        duration`` (int milliseconds or a timedelta), or from the end when
        no record is that recent."""
        if isinstance(duration, timedelta):
            millis = duration // timedelta(milliseconds=1)
        elif isinstance(duration, int) and not isinstance(duration, bool):
            millis = duration
        else:
            raise ValueError(f"a duration is int milliseconds or a timedelta, got {duration!r}")
        if millis < 0:
            raise ValueError(f"the duration must not be negative, got {millis} ms")
        return AutoOffsetReset(BY_DURATION, millis)

    @staticmethod
    def of(value: str | timedelta | AutoOffsetReset) -> AutoOffsetReset:
        """A policy from itself, a timedelta (by duration), or Kafka's config
        values ``"earliest"``, ``"latest"``, ``"none"`` and
        ``"by_duration:<ISO-8601 duration>"``; ValueError otherwise."""
        if isinstance(value, AutoOffsetReset):
            return value
        if isinstance(value, timedelta):
            return AutoOffsetReset.by_duration(value)
        if isinstance(value, str):
            if value in (EARLIEST, LATEST, NONE):
                return AutoOffsetReset(value)
            prefix = BY_DURATION + ":"
            if value.startswith(prefix):
                return AutoOffsetReset.by_duration(_parse_iso_duration(value[len(prefix) :]))
        raise ValueError(
            "an offset reset policy is 'earliest', 'latest', 'none', "
            f"'by_duration:<ISO-8601 duration>' or an AutoOffsetReset, not {value!r}"
        )

    def start_timestamp(self, now_ms: int) -> int:
        """For a by-duration policy: the earliest timestamp to read from
        (never below 0, as Kafka's)."""
        assert self.duration_ms is not None, "only a by-duration policy has a start time"
        return max(now_ms - self.duration_ms, 0)

    def __str__(self) -> str:
        if self.duration_ms is None:
            return self.strategy
        seconds, millis = divmod(self.duration_ms, 1000)
        return f"{BY_DURATION}:PT{seconds}{f'.{millis:03d}' if millis else ''}S"


# What ``offset_reset=`` takes: a policy, Kafka's config string, or a timedelta.
OffsetReset = str | timedelta | AutoOffsetReset


def _parse_iso_duration(text: str) -> timedelta:
    match = _ISO_DURATION.fullmatch(text)
    if match is None or text.upper() in ("P", "PT") or text.upper().endswith("T"):
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT1H or P1DT30M")
    days, hours, minutes, seconds = (int(match[g] or 0) for g in "dhms")
    fraction = match["f"] or ""
    micros = int((fraction + "000000")[:6]) if fraction else 0
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds, microseconds=micros)
