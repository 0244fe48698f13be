"""The Processor API: write nodes of a topology by hand."""

from strom.processor.api import (
    Cancellable,
    ContextualProcessor,
    FixedKeyProcessor,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordContext,
    RecordMetadata,
    StandbyUpdateListener,
    StateRestoreListener,
    SuspendReason,
    ValueTransformerWithKey,
    wallclock_timestamp_extractor,
)

__all__ = [
    "Cancellable",
    "ContextualProcessor",
    "FixedKeyProcessor",
    "FixedKeyRecord",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Record",
    "RecordContext",
    "RecordMetadata",
    "StandbyUpdateListener",
    "StateRestoreListener",
    "SuspendReason",
    "ValueTransformerWithKey",
    "wallclock_timestamp_extractor",
]
