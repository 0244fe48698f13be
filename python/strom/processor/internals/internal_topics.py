"""What both transports' tools share about an application's own topics:
which names are its internal topics (Kafka's ``StreamsResetter`` rule, plus
strom's shutdown control topic), and what a reset of the app reports."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ResetResult", "is_internal_topic"]

_INTERNAL_SUFFIXES = (
    "-changelog",
    "-repartition",
    "-subscription-registration-topic",
    "-subscription-response-topic",
    "-shutdown-control",
)
_FOREIGN_KEY_TOPIC = re.compile(r".+-KTABLE-FK-JOIN-SUBSCRIPTION-(REGISTRATION|RESPONSE)-\d+-topic")


def is_internal_topic(application_id: str, topic: str) -> bool:
    """Whether ``topic`` is named as one of the app's internal topics
    (changelog, repartition, foreign-key join, shutdown control): the topics
    a reset deletes and docs/security.md's prefixed ACLs cover."""
    return topic.startswith(f"{application_id}-") and (
        topic.endswith(_INTERNAL_SUFFIXES) or _FOREIGN_KEY_TOPIC.fullmatch(topic) is not None
    )


@dataclass
class ResetResult:
    """What a reset did."""

    offsets_reset: dict[str, list[int]] = field(default_factory=dict)
    topics_deleted: list[str] = field(default_factory=list)
    state_removed: Path | None = None
