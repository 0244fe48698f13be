"""The Streams DSL: KStream, KTable and their grouped forms, and option objects."""

from strom.kstream.kstream import KGroupedStream, KStream, KTable
from strom.kstream.materialized import Materialized

__all__ = ["KGroupedStream", "KStream", "KTable", "Materialized"]
