"""strom on Apache Kafka: confluent-kafka clients, internal topics, rebalancing
and transactions under the same engine (``StreamTask``) as the embedded log.

``KafkaStreams`` picks this runtime when ``bootstrap.servers`` is a
``host:port`` list; nothing here needs to be used directly. ``reset`` is the
application reset tool behind ``strom reset``.
"""

from __future__ import annotations

from strom.kafka.reset import reset_application

__all__ = ["reset_application"]
