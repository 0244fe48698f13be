"""The Streams DSL: KStream, KTable and their grouped forms, and option objects."""

from strom.kstream.kstream import (
    BranchedKStream,
    GlobalKTable,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
)
from strom.kstream.materialized import Materialized
from strom.kstream.windowed import Window, Windowed

__all__ = [
    "BranchedKStream",
    "GlobalKTable",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Window",
    "Windowed",
]
