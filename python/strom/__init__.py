"""strom: Kafka Streams for Python, with its hot path in Rust."""

from strom import agg, serdes
from strom._core import __version__
from strom.builder import StreamsBuilder
from strom.config import StreamsConfig
from strom.expr import col, lit, struct
from strom.keyvalue import KeyValue
from strom.offset_reset import AutoOffsetReset
from strom.streams import KafkaStreams, State
from strom.topology import Topology

__all__ = [
    "AutoOffsetReset",
    "KafkaStreams",
    "KeyValue",
    "State",
    "StreamsBuilder",
    "StreamsConfig",
    "Topology",
    "__version__",
    "agg",
    "col",
    "lit",
    "serdes",
    "struct",
]
