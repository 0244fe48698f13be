"""The Streams DSL: KStream, KTable and their grouped forms, and option objects."""

from strom.kstream.kstream import (
    BranchedKStream,
    GlobalKTable,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    TimeWindowedKStream,
)
from strom.kstream.materialized import Materialized
from strom.kstream.suppressed import BufferConfig, Suppressed
from strom.kstream.windowed import Window, Windowed
from strom.kstream.windows import TimeWindows

__all__ = [
    "BranchedKStream",
    "BufferConfig",
    "GlobalKTable",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
    "Window",
    "Windowed",
]
