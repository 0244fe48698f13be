"""The application reset tool on the embedded log (Kafka's
``kafka-streams-application-reset``, no broker needed): the app's committed
input offsets go back to the start of each partition, its internal topics
are deleted and its local state is removed, so that its next run reprocesses
the input from scratch."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from strom.embedded.consumer import OffsetAndMetadata
from strom.embedded.log import EmbeddedLog
from strom.errors import StromError
from strom.processor.internals.internal_topics import ResetResult, is_internal_topic

__all__ = ["ResetResult", "reset_application"]

log = logging.getLogger("strom.embedded")


def reset_application(
    application_id: str,
    path: str | os.PathLike[str],
    *,
    input_topics: Iterable[str] = (),
    state_dir: str | os.PathLike[str] | None = None,
) -> ResetResult:
    """Resets ``application_id`` on the embedded log at ``path``.

    Every input topic the app's group has committed offsets for (plus
    ``input_topics``) goes back to its log start offset; the app's internal
    topics (repartition, changelog, foreign-key join topics) are deleted, and
    with them the group's offsets for them; ``state_dir/<application_id>`` is
    removed (default ``state_dir``: ``PATH/.state``, the app's default).

    Everything is checked before anything changes: the log must exist, no
    instance of the app may be running (another process holding the log, or a
    store of the app locked in this one) and ``input_topics`` must exist.
    """
    root = Path(path)
    if not (root / ".topics").is_dir():
        raise StromError(f"there is no embedded log at {root}")
    inputs = list(input_topics)
    state = Path(state_dir) if state_dir is not None else root / ".state"
    app_state = state / application_id
    with EmbeddedLog(root) as embedded:  # LogInUseError while another process runs it
        _refuse_if_running(application_id, app_state)
        existing = set(embedded.topics())
        missing = sorted(set(inputs) - existing)
        if missing:
            raise StromError(f"input topic(s) {', '.join(missing)} do not exist in {root}")
        # Kafka's tool never takes a named input topic for an internal one.
        internal = sorted(
            t for t in existing if is_internal_topic(application_id, t) and t not in inputs
        )
        committed = {topic for topic, _ in embedded.committed_offsets(application_id)}
        to_reset = sorted((committed - set(internal)) & existing | set(inputs))

        result = ResetResult()
        earliest: dict[tuple[str, int], int | OffsetAndMetadata] = {}
        for topic in to_reset:
            for partition, start in embedded.log_start_offsets(topic).items():
                # No metadata: the partition time committed with the offset goes too.
                earliest[(topic, partition)] = OffsetAndMetadata(start)
                result.offsets_reset.setdefault(topic, []).append(partition)
        if earliest:
            embedded.commit_offsets(application_id, earliest)
        for topic in internal:
            embedded.delete_topic(topic)
            result.topics_deleted.append(topic)
    if app_state.exists():
        shutil.rmtree(app_state)
        result.state_removed = app_state
    log.info("reset %s: %s", application_id, result)
    return result


def _refuse_if_running(application_id: str, app_state: Path) -> None:
    """An instance of the app in this process holds its stores' lock files
    (flock, which also conflicts within a process)."""
    for lock_file in sorted(app_state.rglob(".lock")) if app_state.is_dir() else ():
        with open(lock_file, "rb") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StromError(
                    f"application {application_id!r} is still running (its store "
                    f"{lock_file.parent} is locked); stop every instance before resetting it"
                ) from None
            with contextlib.suppress(OSError):
                fcntl.flock(file, fcntl.LOCK_UN)
