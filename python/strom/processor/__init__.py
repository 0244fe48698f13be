"""The Processor API: write nodes of a topology by hand."""

from strom.processor.api import (
    Cancellable,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)

__all__ = [
    "Cancellable",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordMetadata",
]
