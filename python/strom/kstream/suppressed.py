"""Suppressed and BufferConfig: holding back a KTable's updates (Kafka's
``KTable.suppress``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Literal

from strom.errors import TopologyError
from strom.kstream.internals.names import check_name
from strom.kstream.materialized import changelog_config
from strom.state.stores import to_millis

__all__ = ["BufferConfig", "Suppressed"]

UNLIMITED = 2**63 - 1


@dataclass(frozen=True)
class BufferConfig:
    """How much a suppression buffer holds, what happens when it is full
    (emit the oldest records early, or shut the application down), and
    whether a changelog backs it (with which topic configs)."""

    record_limit: int = UNLIMITED
    byte_limit: int = UNLIMITED
    when_full: Literal["emit_early", "shut_down"] = "shut_down"
    logging: bool = True
    log_config: dict[str, str] = field(default_factory=dict, hash=False)

    @staticmethod
    def unbounded() -> BufferConfig:
        return BufferConfig()

    @staticmethod
    def max_records(n: int) -> BufferConfig:
        if n < 0:
            raise TopologyError(f"max_records must be >= 0, got {n}")
        return BufferConfig(record_limit=n, when_full="emit_early")

    @staticmethod
    def max_bytes(n: int) -> BufferConfig:
        if n < 0:
            raise TopologyError(f"max_bytes must be >= 0, got {n}")
        return BufferConfig(byte_limit=n, when_full="emit_early")

    def with_max_records(self, n: int) -> BufferConfig:
        return replace(self, record_limit=n)

    def with_max_bytes(self, n: int) -> BufferConfig:
        return replace(self, byte_limit=n)

    def with_no_bound(self) -> BufferConfig:
        """No record or byte limit (Kafka's ``withNoBound``): a strict
        buffer, bounded only by the suppression's time limit."""
        return replace(self, record_limit=UNLIMITED, byte_limit=UNLIMITED, when_full="shut_down")

    def with_logging_disabled(self) -> BufferConfig:
        """No changelog: the buffer lives in memory only, and what it holds
        is lost when its task moves or the app restarts (as Kafka's)."""
        return replace(self, logging=False, log_config={})

    def with_logging_enabled(self, config: Mapping[str, str] | None = None) -> BufferConfig:
        """A changelog (the default), with ``config`` as its topic configs."""
        return replace(self, logging=True, log_config=changelog_config(config or {}, "buffer"))

    def emit_early_when_full(self) -> BufferConfig:
        return replace(self, when_full="emit_early")

    def shut_down_when_full(self) -> BufferConfig:
        return replace(self, when_full="shut_down")


@dataclass(frozen=True)
class Suppressed:
    """Which updates to hold back and for how long."""

    kind: Literal["window_closes", "time_limit"]
    time_limit_ms: int
    buffer: BufferConfig
    name: str | None = None

    @staticmethod
    def until_window_closes(buffer: BufferConfig) -> Suppressed:
        """Only the final result of each window, once stream time passes its
        end plus grace. The buffer must not emit early (that would break the
        promise of final results)."""
        if buffer.when_full == "emit_early":
            raise TopologyError(
                "until_window_closes needs a buffer that shuts down when full "
                "(BufferConfig.unbounded() or ….shut_down_when_full())"
            )
        return Suppressed("window_closes", 0, buffer)

    @staticmethod
    def until_time_limit(time_to_wait: int | timedelta, buffer: BufferConfig) -> Suppressed:
        """The latest update per key, once ``time_to_wait`` of stream time has
        passed since its first update was buffered."""
        return Suppressed("time_limit", to_millis(time_to_wait, "time_to_wait"), buffer)

    def with_name(self, name: str) -> Suppressed:
        return replace(self, name=check_name(name))
