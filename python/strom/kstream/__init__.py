"""The Streams DSL: KStream, KTable and their grouped forms, and option objects."""

from strom.kstream.emit_strategy import EmitStrategy
from strom.kstream.join_windows import JoinWindows
from strom.kstream.kstream import (
    BranchedKStream,
    GlobalKTable,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    SessionWindowedKStream,
    SlidingWindowedKStream,
    TimeWindowedKStream,
)
from strom.kstream.materialized import Materialized
from strom.kstream.suppressed import BufferConfig, Suppressed
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.windowed import Window, Windowed

__all__ = [
    "BranchedKStream",
    "BufferConfig",
    "EmitStrategy",
    "GlobalKTable",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindowedKStream",
    "SlidingWindows",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
    "Window",
    "Windowed",
]
