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
from strom.kstream.windowed import Window, Windowed
from strom.kstream.windows import TimeWindows

__all__ = [
    "BranchedKStream",
    "GlobalKTable",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "TimeWindowedKStream",
    "TimeWindows",
    "Window",
    "Windowed",
]
