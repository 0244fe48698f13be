"""The production and processing exception handlers and Kafka's KIP-1034
dead-letter headers, shared by the nodes (a user function that fails, a
record a sink cannot serialize) and the Kafka producer (the broker's
rejections)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.errors import ErrorHandlerContext, FailedRecord, ProductionError, StromError, TaskError

if TYPE_CHECKING:
    from strom.processor.api import Record
    from strom.processor.internals.task import StreamTask

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


def continue_after(
    handler: Any,
    context: ErrorHandlerContext,
    record: Any,
    exc: BaseException,
    *,
    setting: str = "production.exception.handler",
    subject: str = "a record",
    error: type[StromError] = ProductionError,
) -> bool:
    """What a handler (``setting``, by default ``production.exception.handler``)
    says about a failed record, ``subject`` in messages: True to skip it and
    go on, False to fail. A callable gets ``(context, record, exception)``
    and returns ``"continue"`` or ``"fail"``; if it raises or returns
    anything else, that fails the app with ``error`` (Kafka: a fatal user
    error)."""
    if handler == "log_and_continue":
        return True
    if handler == "log_and_fail" or not callable(handler):
        return False
    try:
        verdict = handler(context, record, exc)
    except Exception as user_error:
        raise error(
            f"the {setting} failed on {subject}: {type(user_error).__name__}: {user_error}"
        ) from user_error
    if verdict not in _VERDICTS:
        raise error(
            f"the {setting} must return 'continue' or 'fail', got {verdict!r} for {subject}"
        )
    return verdict in ("continue", "log_and_continue")


_VERDICTS = ("continue", "fail", "log_and_continue", "log_and_fail")


def processing_failed(
    task: StreamTask,
    context: ErrorHandlerContext,
    record: Record[Any, Any] | None,
    exc: Exception,
    what: str,
) -> None:
    """``processing.exception.handler`` on ``what``, ``record`` (None for a
    punctuation), whose processing raised ``exc`` at a node (Kafka's
    KIP-1033): returns when it says continue (the record counted in
    ``dropped-records``), else raises a TaskError naming the task, the node
    and ``what``, the exception as its cause. On either verdict the input
    record goes to the dead-letter topic, if there is one (KIP-1034). A
    failure already handled where it happened (a node downstream, reached
    from inside this one) passes through as it is."""
    if isinstance(exc, TaskError | ProductionError):
        raise exc
    config = task.config
    go_on = continue_after(
        config["processing.exception.handler"],
        context,
        record,
        exc,
        setting="processing.exception.handler",
        subject=f"{what} at node {context.processor_node_id!r} in task {task.task_id}",
        error=TaskError,
    )
    dead_letters = config["errors.dead.letter.queue.topic.name"]
    if dead_letters is not None:
        task.collector.send_record(
            dead_letters,
            context.source_raw_key,
            context.source_raw_value,
            context.timestamp,
            dead_letter_headers(exc, context),
            durable=not go_on,
        )
    failure = (
        f"task {task.task_id} node {context.processor_node_id!r} failed on {what}: "
        f"{type(exc).__name__}: {exc}"
    )
    if not go_on:
        raise TaskError(failure) from exc
    task.metrics.dropped_records += 1
    log.warning("%s; skipping it (processing.exception.handler)", failure)


def describe_source(context: ErrorHandlerContext) -> str:
    """``from topic-partition@offset`` when the input record is known."""
    if context.topic is None:
        return ""
    return f" (from {context.topic}-{context.partition}@{context.offset})"
