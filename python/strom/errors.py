"""strom's exception hierarchy: every error the library raises is a StromError.

The native module raises these classes too (it maps its error enum onto them), so
``except strom.errors.CorruptLogError`` catches a corrupt segment found in Rust.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ApplicationShutdownRequested",
    "ConfigError",
    "CorruptLogError",
    "ErrorHandlerContext",
    "ExpressionError",
    "FailedRecord",
    "InvalidStateStoreError",
    "LogInUseError",
    "OffsetOutOfRangeError",
    "ProductionError",
    "SerializationError",
    "StoreError",
    "StromError",
    "TaskError",
    "TopologyError",
    "UnknownTopicError",
]


class StromError(Exception):
    """Base class of every strom error."""


class ConfigError(StromError, ValueError):
    """A configuration key or value (or an argument) is invalid."""


class TopologyError(StromError):
    """The topology is invalid: unknown store, duplicate name, co-partitioning mismatch…"""


class SerializationError(StromError):
    """A serde could not (de)serialize a key or value."""


class ExpressionError(StromError, ValueError):
    """A ``strom.col`` expression failed on a record (an operator given types
    it does not take, a failed cast)."""


class StoreError(StromError):
    """A state store failed or was used wrongly."""


class InvalidStateStoreError(StoreError):
    """A store cannot be queried now (Kafka's InvalidStateStoreException):
    the app is not RUNNING or REBALANCING, no store has that name, or the
    store's task moved to another instance in a rebalance (query again,
    after asking ``query_metadata_for_key`` where it went)."""


class CorruptLogError(StromError):
    """A log or store file is corrupt somewhere other than a torn tail."""


class LogInUseError(StromError):
    """Another process holds the embedded log."""


class UnknownTopicError(StromError, KeyError):
    """A topic (or partition) that does not exist was named."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class OffsetOutOfRangeError(StromError):
    """An offset outside a partition's log start/end was asked for."""


class TaskError(StromError):
    """A task failed while processing; wraps the cause with task, node and
    record (and the ``processing.exception.handler`` chose to fail)."""


class ProductionError(StromError):
    """A record could not be written (serialized or accepted by the broker)
    and the ``production.exception.handler`` chose to fail."""


@dataclass(frozen=True)
class ErrorHandlerContext:
    """Where a record that failed came from (Kafka's ErrorHandlerContext): the
    input record being processed (``topic`` None and -1s when not known, e.g.
    for a broker's late rejection or a punctuation), the node and the task.
    ``source_raw_key`` and ``source_raw_value`` are that input record's bytes
    as they were read, when known (a processing error names them);
    ``headers`` are the failed record's (empty when it has none or they are
    not known)."""

    topic: str | None
    partition: int
    offset: int
    timestamp: int
    processor_node_id: str | None
    task_id: str | None
    source_raw_key: bytes | None = None
    source_raw_value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(frozen=True)
class FailedRecord:
    """The output record the ``production.exception.handler`` is asked about:
    serialized bytes for a broker's rejection, the key and value objects for
    a serialization error; ``partition`` -1 when not chosen yet."""

    topic: str
    partition: int
    key: Any
    value: Any
    timestamp: int


class ApplicationShutdownRequested(StromError):
    """An instance of the application (maybe this one) asked every instance
    to shut down (the uncaught exception handler said ``"shutdown_application"``)."""
