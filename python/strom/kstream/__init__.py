"""The Streams DSL: KStream, KTable and their grouped forms, and option objects."""

from strom.kstream.cogrouped_kstream import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)
from strom.kstream.emit_strategy import EmitStrategy
from strom.kstream.global_ktable import GlobalKTable
from strom.kstream.join_windows import JoinWindows
from strom.kstream.kgrouped_stream import KGroupedStream
from strom.kstream.kgrouped_table import KGroupedTable
from strom.kstream.kstream import BranchedKStream, KStream
from strom.kstream.ktable import KTable
from strom.kstream.materialized import Materialized
from strom.kstream.suppressed import BufferConfig, Suppressed
from strom.kstream.windowed_kstream import (
    SessionWindowedKStream,
    SlidingWindowedKStream,
    TimeWindowedKStream,
)
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.windowed import Window, Windowed

__all__ = [
    "BranchedKStream",
    "BufferConfig",
    "CogroupedKStream",
    "EmitStrategy",
    "GlobalKTable",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "SessionWindowedCogroupedKStream",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindowedKStream",
    "SlidingWindows",
    "Suppressed",
    "TimeWindowedCogroupedKStream",
    "TimeWindowedKStream",
    "TimeWindows",
    "Window",
    "Windowed",
]
