"""Join windows (Kafka's ``JoinWindows``): how close in time two records of a
KStream-KStream join must be, and how long late records are accepted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from strom.errors import ConfigError

__all__ = ["JoinWindows"]


def _millis(value: int | timedelta, what: str) -> int:
    """int milliseconds or a timedelta; the sign is checked by the caller,
    since ``before``/``after`` may be negative as in Kafka."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{what} must be int milliseconds or a timedelta, got {value!r}")


@dataclass(frozen=True)
class JoinWindows:
    """A record at time ``t`` of the left stream joins the right stream's
    records of the same key with timestamps in ``[t - before_ms, t + after_ms]``.

    The window of a record closes once stream time passes its timestamp plus
    ``after_ms`` (``before_ms`` for right-side records) plus the grace
    period; only then are left/outer join results with None emitted.
    """

    before_ms: int
    after_ms: int
    grace_ms: int

    def __post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise ConfigError(
                f"the join window interval (before + after = {self.before_ms} + "
                f"{self.after_ms} ms) must not be negative"
            )
        if self.grace_ms < 0:
            raise ConfigError(f"the grace period must not be negative, got {self.grace_ms} ms")

    @staticmethod
    def of_time_difference_and_grace(
        time_difference: int | timedelta, grace: int | timedelta
    ) -> JoinWindows:
        """Records join when their timestamps differ by at most
        ``time_difference``; late records are accepted for ``grace`` after
        their window closes."""
        difference = _millis(time_difference, "time_difference")
        return JoinWindows(difference, difference, _millis(grace, "grace"))

    @staticmethod
    def of_time_difference_with_no_grace(time_difference: int | timedelta) -> JoinWindows:
        return JoinWindows.of_time_difference_and_grace(time_difference, 0)

    def before(self, time_difference: int | timedelta) -> JoinWindows:
        """How far back in time a left record looks for right records (may be
        negative as long as ``before + after >= 0``)."""
        return JoinWindows(_millis(time_difference, "before"), self.after_ms, self.grace_ms)

    def after(self, time_difference: int | timedelta) -> JoinWindows:
        """How far ahead in time a left record looks for right records."""
        return JoinWindows(self.before_ms, _millis(time_difference, "after"), self.grace_ms)

    @property
    def size_ms(self) -> int:
        """Kafka's window size: ``before + after``."""
        return self.before_ms + self.after_ms

    def retention_ms(self) -> int:
        """How long each side's window store keeps records: size plus grace."""
        return self.size_ms + self.grace_ms
