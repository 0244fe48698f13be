"""EmitStrategy: when a windowed aggregation forwards its results (Kafka's
``EmitStrategy``, KIP-825)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["EmitStrategy"]


@dataclass(frozen=True)
class EmitStrategy:
    """``on_window_update()`` (the default): every update of a window is a
    result, as a KTable update. ``on_window_close()``: only each window's
    final result, once, after stream time passes the window's end plus its
    grace period (and, for sessions, the inactivity gap)."""

    type: Literal["on_window_update", "on_window_close"]

    @staticmethod
    def on_window_update() -> EmitStrategy:
        return EmitStrategy("on_window_update")

    @staticmethod
    def on_window_close() -> EmitStrategy:
        return EmitStrategy("on_window_close")

    @property
    def final_only(self) -> bool:
        return self.type == "on_window_close"
