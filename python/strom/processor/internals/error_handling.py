"""The production exception handler and Kafka's KIP-1034 dead-letter headers,
shared by the sink nodes (serialization errors) and the Kafka producer (the
broker's rejections)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from strom.errors import ErrorHandlerContext, FailedRecord, ProductionError

log = logging.getLogger("strom.errors")

# Kafka's ExceptionHandlerUtils header names (KIP-1034).
HEADER_EXCEPTION = "__streams.errors.exception"
HEADER_STACKTRACE = "__streams.errors.stacktrace"
HEADER_MESSAGE = "__streams.errors.message"
HEADER_TOPIC = "__streams.errors.topic"
HEADER_PARTITION = "__streams.errors.partition"
HEADER_OFFSET = "__streams.errors.offset"

UNKNOWN_CONTEXT = ErrorHandlerContext(None, -1, -1, -1, None, None)

ProductionHandler = Callable[[ErrorHandlerContext, FailedRecord, BaseException], str]


def dead_letter_headers(
    exc: BaseException, context: ErrorHandlerContext
) -> list[tuple[str, bytes | None]]:
    """The headers Kafka puts on a dead-letter record: the exception (class
    and message), its message, its stack trace, and the input record's
    topic, partition and offset."""
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    if exc.__traceback__ is not None:
        stack = "".join(traceback.format_exception(exc))
    else:  # never raised (a broker's rejection): where it was found, as Java's
        stack = "Traceback (most recent call last):\n"
        stack += "".join(traceback.format_stack()[:-1]) + f"{kind}: {exc}\n"
    return [
        (HEADER_EXCEPTION, f"{kind}: {exc}".encode()),
        (HEADER_MESSAGE, str(exc).encode()),
        (HEADER_STACKTRACE, stack.encode()),
        (HEADER_TOPIC, None if context.topic is None else context.topic.encode()),
        (HEADER_PARTITION, str(context.partition).encode()),
        (HEADER_OFFSET, str(context.offset).encode()),
    ]


def continue_after(
    handler: Any, context: ErrorHandlerContext, record: FailedRecord, exc: BaseException
) -> bool:
    """What ``production.exception.handler`` says about a failed record:
    True to skip it and go on, False to fail. A callable gets
    ``(context, record, exception)`` and returns ``"continue"`` or ``"fail"``;
    if it raises, that fails the app (Kafka: a fatal user error)."""
    if handler == "log_and_continue":
        return True
    if handler == "log_and_fail" or not callable(handler):
        return False
    try:
        verdict = handler(context, record, exc)
    except Exception as user_error:
        raise ProductionError(
            f"the production.exception.handler failed on a record for {record.topic}: "
            f"{type(user_error).__name__}: {user_error}"
        ) from user_error
    return verdict in ("continue", "log_and_continue")


def describe_source(context: ErrorHandlerContext) -> str:
    """``from topic-partition@offset`` when the input record is known."""
    if context.topic is None:
        return ""
    return f" (from {context.topic}-{context.partition}@{context.offset})"
