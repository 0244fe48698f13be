"""The application reset tool (Kafka's ``kafka-streams-application-reset``):
the app's committed input offsets go back to the start of each partition, its
internal topics (repartition and changelog) are deleted, and its local state
is removed, so that the next run reprocesses the input from scratch."""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

from strom.errors import StromError

log = logging.getLogger("strom.kafka")

TIMEOUT_S = 60.0


@dataclass
class ResetResult:
    """What a reset did."""

    offsets_reset: dict[str, list[int]] = field(default_factory=dict)
    topics_deleted: list[str] = field(default_factory=list)
    state_removed: Path | None = None


def _is_internal(application_id: str, topic: str) -> bool:
    return topic.startswith(f"{application_id}-") and topic.endswith(
        ("-changelog", "-repartition", "-shutdown-control")
    )


def reset_application(
    application_id: str,
    bootstrap_servers: str,
    *,
    input_topics: list[str] | None = None,
    state_dir: str | Path | None = None,
    client_config: dict[str, str] | None = None,
) -> ResetResult:
    """Resets ``application_id`` on the cluster at ``bootstrap_servers``.

    Every input topic the group has committed offsets for (plus
    ``input_topics``) is reset to its earliest offset; internal topics are
    deleted; ``state_dir/<application_id>`` is removed (default: the
    ``state.dir`` default). Refuses while instances of the app are running.
    """
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap_servers} | dict(client_config or {})
    admin = AdminClient(conf)
    result = ResetResult()
    try:
        groups = admin.describe_consumer_groups([application_id], request_timeout=TIMEOUT_S)
        description = groups[application_id].result()
        if description.members:
            raise StromError(
                f"application {application_id!r} still has {len(description.members)} running "
                "member(s); stop every instance before resetting it"
            )
        committed = (
            admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(application_id)], request_timeout=TIMEOUT_S
            )[application_id]
            .result()
            .topic_partitions
            or []
        )
        metadata = admin.list_topics(timeout=TIMEOUT_S)
        topics = {
            tp.topic
            for tp in committed
            if not _is_internal(application_id, tp.topic) and tp.topic in metadata.topics
        } | {t for t in input_topics or [] if t in metadata.topics}
        missing = sorted(set(input_topics or []) - set(metadata.topics))
        if missing:
            raise StromError(f"input topic(s) {', '.join(missing)} do not exist")
        if topics:
            earliest = []
            for topic in sorted(topics):
                for partition in sorted(metadata.topics[topic].partitions):
                    earliest.append(TopicPartition(topic, partition, -2))  # OFFSET_BEGINNING
                    result.offsets_reset.setdefault(topic, []).append(partition)
            resolved = _earliest(admin, earliest)
            futures = admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(application_id, resolved)],
                request_timeout=TIMEOUT_S,
            )
            for future in futures.values():
                future.result()
        internal = sorted(t for t in metadata.topics if _is_internal(application_id, t))
        if internal:
            for topic, future in admin.delete_topics(internal, request_timeout=TIMEOUT_S).items():
                future.result()
                result.topics_deleted.append(topic)
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


def _earliest(admin: AdminClient, partitions: list[TopicPartition]) -> list[TopicPartition]:
    """The log start offset of each partition."""
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets({tp: earliest for tp in partitions}, request_timeout=TIMEOUT_S)
    return [TopicPartition(tp.topic, tp.partition, f.result().offset) for tp, f in futures.items()]
