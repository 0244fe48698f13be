"""strom on Apache Kafka: librdkafka clients, internal topics, rebalancing
and transactions under the same engine (``StreamTask``) as the embedded log.

``KafkaStreams`` picks this runtime when ``bootstrap.servers`` is a
``host:port`` list; nothing here needs to be used directly. ``reset`` is the
application reset tool behind ``strom reset``. On a secured cluster a
refusal is a ``KafkaSecurityError``: ``KafkaAuthenticationError`` (SASL or
TLS) or ``KafkaAuthorizationError`` (an ACL; see docs/security.md).
"""

from __future__ import annotations

from strom.kafka.reset import reset_application
from strom.kafka.security import (
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    KafkaSecurityError,
)

__all__ = [
    "KafkaAuthenticationError",
    "KafkaAuthorizationError",
    "KafkaSecurityError",
    "reset_application",
]
