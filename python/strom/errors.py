"""strom's exception hierarchy: every error the library raises is a StromError.

The native module raises these classes too (it maps its error enum onto them), so
``except strom.errors.CorruptLogError`` catches a corrupt segment found in Rust.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ApplicationShutdownRequested",
    "ConfigError",
    "CorruptLogError",
    "DeadLetterRecord",
    "ErrorHandlerContext",
    "ExpressionError",
    "FailedRecord",
    "InvalidStateStoreError",
    "LogInUseError",
    "OffsetOutOfRangeError",
    "ProductionError",
    "Response",
    "SerializationError",
    "StoreError",
    "StromError",
    "TaskError",
    "TopologyError",
    "UnknownTopicError",
    "dead_letter_records",
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


# Kafka's ExceptionHandlerUtils header names (KIP-1034).
HEADER_EXCEPTION = "__streams.errors.exception"
HEADER_STACKTRACE = "__streams.errors.stacktrace"
HEADER_MESSAGE = "__streams.errors.message"
HEADER_TOPIC = "__streams.errors.topic"
HEADER_PARTITION = "__streams.errors.partition"
HEADER_OFFSET = "__streams.errors.offset"


@dataclass(frozen=True)
class DeadLetterRecord:
    """A record an exception handler sends to a dead-letter topic (Kafka's
    ``ProducerRecord<byte[], byte[]>`` in a handler's ``Response``): bytes,
    its headers, and its timestamp (None: the failed input record's)."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int | None = None


@dataclass(frozen=True)
class Response:
    """What an exception handler function may return instead of
    ``"continue"`` or ``"fail"`` (Kafka's handlers' ``Response``, KIP-1034):
    resume or fail, and the dead-letter records to send either way. A
    handler that returns a Response sends exactly its records: the
    ``errors.dead.letter.queue.topic.name`` record is not added (build it
    with :func:`dead_letter_records`)."""

    result: Literal["resume", "fail"]
    dead_letter_records: tuple[DeadLetterRecord, ...] = ()

    @staticmethod
    def resume(dead_letter_records: Sequence[DeadLetterRecord] = ()) -> Response:
        return Response("resume", tuple(dead_letter_records))

    @staticmethod
    def fail(dead_letter_records: Sequence[DeadLetterRecord] = ()) -> Response:
        return Response("fail", tuple(dead_letter_records))


def dead_letter_headers(
    exc: BaseException, context: ErrorHandlerContext
) -> list[tuple[str, bytes | None]]:
    """The headers Kafka puts on a dead-letter record: the failed record's
    own, then the exception (class and message), its message, its stack
    trace, and the input record's topic, partition and offset."""
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    if exc.__traceback__ is not None:
        stack = "".join(traceback.format_exception(exc))
    else:  # never raised (a broker's rejection): where it was found, as Java's
        stack = "Traceback (most recent call last):\n"
        stack += "".join(traceback.format_stack()[:-1]) + f"{kind}: {exc}\n"
    return [
        *context.headers,
        (HEADER_EXCEPTION, f"{kind}: {exc}".encode()),
        (HEADER_MESSAGE, str(exc).encode()),
        (HEADER_STACKTRACE, stack.encode()),
        (HEADER_TOPIC, None if context.topic is None else context.topic.encode()),
        (HEADER_PARTITION, str(context.partition).encode()),
        (HEADER_OFFSET, str(context.offset).encode()),
    ]


def dead_letter_records(
    topic: str,
    key: bytes | None,
    value: bytes | None,
    context: ErrorHandlerContext,
    exception: BaseException,
) -> list[DeadLetterRecord]:
    """The dead-letter record Kafka's built-in handlers send (Kafka's
    ``ExceptionHandlerUtils.buildDeadLetterQueueRecord``): ``key`` and
    ``value`` (usually the input record's, ``context.source_raw_key`` and
    ``source_raw_value``) with :func:`dead_letter_headers`."""
    return [DeadLetterRecord(topic, key, value, dead_letter_headers(exception, context))]
