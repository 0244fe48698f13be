"""The Streams DSL: KStream, KTable and their grouped forms, and option objects."""

from strom.kstream.kstream import (
    BranchedKStream,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
)
from strom.kstream.materialized import Materialized

__all__ = [
    "BranchedKStream",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
]
