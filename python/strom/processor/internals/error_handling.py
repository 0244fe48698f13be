"""The production and processing exception handlers and Kafka's KIP-1034
dead-letter headers, shared by the nodes (a user function that fails, a
record a sink cannot serialize) and the Kafka producer (the broker's
rejections)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.errors import (
    DeadLetterRecord,
    ErrorHandlerContext,
    FailedRecord,
    ProductionError,
    Response,
    StromError,
    TaskError,
    dead_letter_records,
)

if TYPE_CHECKING:
    from strom.processor.api import Record
    from strom.processor.internals.task import StreamTask

log = logging.getLogger("strom.errors")

UNKNOWN_CONTEXT = ErrorHandlerContext(None, -1, -1, -1, None, None)

ProductionHandler = Callable[[ErrorHandlerContext, FailedRecord, BaseException], Any]

_VERDICTS = ("continue", "fail", "log_and_continue", "log_and_fail")


@dataclass(frozen=True)
class Verdict:
    """What an exception handler said about a failed record: whether to go
    on, and the dead-letter records it chose (None: the one
    ``errors.dead.letter.queue.topic.name`` gives, if set)."""

    go_on: bool
    dead_letters: tuple[DeadLetterRecord, ...] | None = None

    def letters(
        self,
        default_topic: str | None,
        key: bytes | None,
        value: bytes | None,
        context: ErrorHandlerContext,
        exc: BaseException,
    ) -> list[DeadLetterRecord]:
        """The dead letters to send: the handler's, else Kafka's built-in
        handlers' one record to ``default_topic`` (none without it)."""
        if self.dead_letters is not None:
            return list(self.dead_letters)
        if default_topic is None:
            return []
        return dead_letter_records(default_topic, key, value, context, exc)


def handler_verdict(
    handler: Any,
    context: ErrorHandlerContext,
    record: Any,
    exc: BaseException,
    *,
    setting: str = "production.exception.handler",
    subject: str = "a record",
    error: type[StromError] = ProductionError,
) -> Verdict:
    """What a handler (``setting``, by default ``production.exception.handler``)
    says about a failed record, ``subject`` in messages. A callable gets
    ``(context, record, exception)`` and returns ``"continue"`` or
    ``"fail"``, or a :class:`~strom.errors.Response` with its dead letters;
    if it raises or returns anything else, that fails the app with
    ``error`` (Kafka: a fatal user error)."""
    if handler == "log_and_continue":
        return Verdict(True)
    if handler == "log_and_fail" or not callable(handler):
        return Verdict(False)
    try:
        answer = handler(context, record, exc)
    except Exception as user_error:
        raise error(
            f"the {setting} failed on {subject}: {type(user_error).__name__}: {user_error}"
        ) from user_error
    if isinstance(answer, Response):
        letters = answer.dead_letter_records
        if not all(isinstance(letter, DeadLetterRecord) for letter in letters):
            raise error(
                f"the {setting} returned a Response whose dead letters are not all "
                f"DeadLetterRecords, for {subject}: {letters!r}"
            )
        return Verdict(answer.result == "resume", letters)
    if answer not in _VERDICTS:
        raise error(
            f"the {setting} must return 'continue', 'fail' or a Response, got {answer!r} "
            f"for {subject}"
        )
    return Verdict(answer in ("continue", "log_and_continue"))


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
    go_on = handle_failure(
        task,
        task.config["processing.exception.handler"],
        context,
        record,
        exc,
        setting="processing.exception.handler",
        subject=f"{what} at node {context.processor_node_id!r} in task {task.task_id}",
        error=TaskError,
    )
    failure = (
        f"task {task.task_id} node {context.processor_node_id!r} failed on {what}: "
        f"{type(exc).__name__}: {exc}"
    )
    if not go_on:
        raise TaskError(failure) from exc
    task.metrics.dropped_records += 1
    log.warning("%s; skipping it (processing.exception.handler)", failure)


def handle_failure(
    task: StreamTask,
    handler: Any,
    context: ErrorHandlerContext,
    record: Any,
    exc: BaseException,
    *,
    setting: str,
    subject: str,
    error: type[StromError],
    cause: BaseException | None = None,
) -> bool:
    """A task's failed record through ``handler`` (see ``handler_verdict``),
    its dead letters sent (durable if the task is to fail: they outlive
    it): the handler's, else the configured topic's record of
    ``context``'s input bytes, its headers naming ``cause`` (default
    ``exc``). True to skip the record and go on."""
    verdict = handler_verdict(
        handler, context, record, exc, setting=setting, subject=subject, error=error
    )
    letters = verdict.letters(
        task.config["errors.dead.letter.queue.topic.name"],
        context.source_raw_key,
        context.source_raw_value,
        context,
        exc if cause is None else cause,
    )
    for letter in letters:
        task.collector.send_record(
            letter.topic,
            letter.key,
            letter.value,
            context.timestamp if letter.timestamp is None else letter.timestamp,
            letter.headers,
            durable=not verdict.go_on,
        )
    return verdict.go_on


def describe_source(context: ErrorHandlerContext) -> str:
    """``from topic-partition@offset`` when the input record is known."""
    if context.topic is None:
        return ""
    return f" (from {context.topic}-{context.partition}@{context.offset})"
