"""The application reset tool (Kafka's ``kafka-streams-application-reset``):
the app's committed input offsets go back to the start of each partition, its
internal topics (repartition and changelog) are deleted, and its local state
is removed, so that the next run reprocesses the input from scratch.

It changes nothing before it knows it may do all of it: the group and the
topics are described with what the principal may do with them, and every
missing permission is reported at once. (The steps themselves cannot be one
transaction: a broker failing halfway still leaves a partial reset, which
running the reset again completes.)"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin._acl import AclOperation
from confluent_kafka.admin._listoffsets import OffsetSpec

from strom.errors import StromError
from strom.kafka.clients import Admin
from strom.kafka.security import ACL_DOC, KafkaAuthorizationError, grant_command
from strom.kafka.topics import Topics
from strom.processor.internals.internal_topics import ResetResult, is_internal_topic

log = logging.getLogger("strom.kafka")

TIMEOUT_S = 60.0


def reset_application(
    application_id: str,
    bootstrap_servers: str,
    *,
    input_topics: list[str] | None = None,
    state_dir: str | Path | None = None,
    client_config: dict[str, Any] | None = None,
) -> ResetResult:
    """Resets ``application_id`` on the cluster at ``bootstrap_servers``.

    Every input topic the group has committed offsets for (plus
    ``input_topics``) is reset to its earliest offset; internal topics are
    deleted; ``state_dir/<application_id>`` is removed (default: the
    ``state.dir`` default). ``client_config``: librdkafka settings (security:
    see docs/security.md), as ``strom reset --command-config FILE`` or
    ``--config KEY=VALUE`` give them.

    Refuses while instances of the app are running, and changes nothing
    unless the principal may do every step: describe and read the group,
    read the input topics, delete the internal topics (the ACLs of
    docs/security.md); a refusal names every permission missing.
    """
    conf: dict[str, Any] = dict(client_config or {}) | {"bootstrap.servers": bootstrap_servers}
    admin = Admin(conf, application_id)
    topics = Topics(admin, bootstrap_servers)
    result = ResetResult()
    try:
        group = _describe_group(admin, application_id)
        committed = _committed(admin, application_id)
        listed = admin.list_topics(timeout=TIMEOUT_S).topics
        internal = sorted(t for t in listed if is_internal_topic(application_id, t))
        wanted = sorted(
            {tp.topic for tp in committed if not is_internal_topic(application_id, tp.topic)}
            | set(input_topics or [])
        )
        counts = topics.describe(wanted)
        missing = sorted(set(input_topics or []) - set(counts))
        if missing:
            raise StromError(f"input topic(s) {', '.join(missing)} do not exist")
        inputs = [t for t in wanted if t in counts]
        topics.describe(internal)
        _check_permissions(admin, topics, group, inputs, internal)

        if inputs:
            earliest = []
            for topic in inputs:
                for partition in range(counts[topic]):
                    earliest.append(TopicPartition(topic, partition))
                    result.offsets_reset.setdefault(topic, []).append(partition)
            resolved = _earliest(admin, earliest)
            futures = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(application_id, resolved)],
                request_timeout=TIMEOUT_S,
            )
            for future in futures.values():
                admin.result(future)
        if internal:
            for topic, future in admin.delete_topics(internal, request_timeout=TIMEOUT_S).items():
                admin.result(future)
                result.topics_deleted.append(topic)
            _await_offsets_dropped(admin, application_id, set(internal))
    except KafkaException as exc:
        raise StromError(f"resetting {application_id!r} failed: {exc.args[0]}") from exc
    base = (
        Path(state_dir) if state_dir is not None else Path(tempfile.gettempdir()) / "strom-streams"
    )
    path = base / application_id
    if path.exists():
        shutil.rmtree(path)
        result.state_removed = path
    log.info("reset %s: %s", application_id, result)
    return result


def _committed(admin: Admin, application_id: str) -> list[TopicPartition]:
    request = [ConsumerGroupTopicPartitions(application_id)]
    futures = admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S)
    return admin.result(futures[application_id]).topic_partitions or []


def _await_offsets_dropped(admin: Admin, application_id: str, deleted: set[str]) -> None:
    """Waits until the group has no offsets of the ``deleted`` topics: the
    broker drops them a moment after the topics, and an app started before
    that would read its recreated internal topics from those stale offsets."""
    deadline = time.monotonic() + TIMEOUT_S
    while stale := sorted({tp.topic for tp in _committed(admin, application_id)} & deleted):
        if time.monotonic() > deadline:
            raise StromError(
                f"resetting {application_id!r}: the group still has offsets of the deleted "
                f"topics {', '.join(stale)} after {TIMEOUT_S:.0f} s"
            )
        time.sleep(0.1)


def _describe_group(admin: Admin, application_id: str) -> Any:
    """The group's description (with what the principal may do with it);
    refuses while it has members."""
    futures = admin.describe_consumer_groups(
        [application_id], request_timeout=TIMEOUT_S, include_authorized_operations=True
    )
    try:
        group = admin.result(futures[application_id])
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.GROUP_AUTHORIZATION_FAILED:
            raise
        raise _denied(
            admin, application_id, [("Read", "group", application_id, None)], exc.args[0].str()
        ) from None
    if group.members:
        raise StromError(
            f"application {application_id!r} still has {len(group.members)} running "
            "member(s); stop every instance before resetting it"
        )
    return group


def _check_permissions(
    admin: Admin, topics: Topics, group: Any, inputs: list[str], internal: list[str]
) -> None:
    """Raises, naming every one of them, if a step of the reset would be
    denied: committing offsets (Read on the group and the input topics) and
    deleting the internal topics (Delete)."""
    app = str(admin.application_id)
    missing: list[tuple[str, str, str, str | None]] = []
    operations = group.authorized_operations
    if operations is not None and not {AclOperation.READ, AclOperation.ALL} & set(operations):
        missing.append(("Read", "group", app, None))
    missing += [("Read", "topic", t, None) for t in inputs if not topics.may(t, AclOperation.READ)]
    missing += [
        ("Delete", "topic", t, f"{app}-")
        for t in internal
        if not topics.may(t, AclOperation.DELETE)
    ]
    if missing:
        raise _denied(admin, app, missing, "checked before changing anything")


def _denied(
    admin: Admin,
    application_id: str,
    missing: list[tuple[str, str, str, str | None]],
    detail: str,
) -> KafkaAuthorizationError:
    """One error for every permission the reset lacks, with the ACLs that
    grant them (a prefixed one for the internal topics)."""
    denied = "; ".join(f"{op} on {kind} {name!r}" for op, kind, name, _ in missing)
    commands = []
    for op, kind, name, prefix in missing:
        command = grant_command(
            admin.principal, (op,), kind, prefix or name, prefixed=prefix is not None
        )
        if command not in commands:
            commands.append(command)
    operation, kind, name, _ = missing[0]
    return KafkaAuthorizationError(
        f"not resetting {application_id!r} ({detail}): {admin.principal} is not authorized to "
        f"{denied}. Nothing was changed. An administrator grants it with: "
        + " ; ".join(commands)
        + f" ({ACL_DOC})",
        operation,
        kind,
        name,
    )


def _earliest(admin: Admin, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The log start offset of each partition."""
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({tp: earliest for tp in partitions}, request_timeout=TIMEOUT_S)
    return [
        TopicPartition(tp.topic, tp.partition, admin.result(f).offset) for tp, f in futures.items()
    ]
