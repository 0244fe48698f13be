"""``"shutdown_application"`` across instances.

Kafka Streams signals every instance of an application through the group's
assignment (an error code its own assignor sets); librdkafka's assignors
cannot carry one. strom uses a control topic instead,
``<application.id>-shutdown-control`` (one partition): an instance that is
told to shut the application down appends a record to it, and every
instance watches its end offset (a cheap metadata call, at most every
``CHECK_INTERVAL_S``). Each instance notes the end when it starts, so only
requests made while it runs stop it; old records never do.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from strom.errors import StromError
from strom.kafka.clients import (
    ATTEMPT_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    admin_config,
    client_log,
    consumer_config,
    producer_config,
    retrying,
)
from strom.kafka.consumer import Consumer

if TYPE_CHECKING:
    from strom.config import StreamsConfig

log = logging.getLogger("strom.kafka")

CHECK_INTERVAL_S = 0.5
FAILED_CHECK_BACKOFF_S = 30.0


def shutdown_topic(application_id: str) -> str:
    return f"{application_id}-shutdown-control"


class ApplicationShutdown:
    """Requests and notices application-wide shutdowns for one instance."""

    def __init__(self, config: StreamsConfig, client_id: str) -> None:
        self.config = config
        self.topic = shutdown_topic(config.application_id)
        self.client_id = client_id
        self.admin = AdminClient(admin_config(config))
        self.consumer = Consumer(
            consumer_config(config, f"{client_id}-shutdown-consumer", group=False)
        )
        self._lock = threading.Lock()
        self._last_check = 0.0
        self._requested = False
        self.baseline = self._end()

    def _exists(self, patient: bool) -> bool:
        def look_up() -> Any:  # confluent_kafka ClusterMetadata
            return self.admin.list_topics(self.topic, timeout=ATTEMPT_TIMEOUT_S)

        metadata = retrying(look_up, f"looking up {self.topic}") if patient else look_up()
        topic = metadata.topics.get(self.topic)
        return topic is not None and topic.error is None and bool(topic.partitions)

    def _end(self, patient: bool = True) -> int:
        """The control topic's end offset (0 while it does not exist).
        ``patient``: retried; else one attempt (the stream thread's checks)."""
        if not self._exists(patient):
            return 0

        def end() -> tuple[int, int]:
            return self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, 0), timeout=ATTEMPT_TIMEOUT_S
            )

        if not patient:
            return end()[1]
        _, high = retrying(
            end,
            f"reading the end of {self.topic}",
            lambda: self.consumer.refresh_metadata(self.topic, ATTEMPT_TIMEOUT_S),
        )
        return high

    def requested(self) -> bool:
        """Whether a shutdown was requested since this instance started
        (checked at most every ``CHECK_INTERVAL_S``; any thread may ask)."""
        if self._requested:
            return True
        now = time.monotonic()
        if now - self._last_check < CHECK_INTERVAL_S or not self._lock.acquire(blocking=False):
            return False
        try:
            self._last_check = now
            self._requested = self._end(patient=False) > self.baseline
        except (StromError, KafkaException):
            # Asked on the stream thread: a cluster in trouble is asked less often.
            self._last_check = now + FAILED_CHECK_BACKOFF_S
            log.warning("checking %s failed (asking again)", self.topic, exc_info=True)
        finally:
            self._lock.release()
        return self._requested

    def request(self, reason: str) -> None:
        """Asks every instance (this one too) to shut down."""
        futures = self.admin.create_topics(
            [NewTopic(self.topic, 1, self.config["replication.factor"])],
            request_timeout=REQUEST_TIMEOUT_S,
        )
        [future] = futures.values()
        try:
            future.result()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            exists = (
                isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS
            )
            if not exists:
                raise
        producer = Producer(
            producer_config(self.config, f"{self.client_id}-shutdown", None)
            | {"logger": client_log}
        )
        producer.produce(self.topic, reason.encode(), self.client_id.encode(), partition=0)
        if producer.flush(REQUEST_TIMEOUT_S) > 0:
            raise StromError(f"could not write the shutdown request to {self.topic}")
        self._requested = True

    def close(self) -> None:
        try:
            self.consumer.close()
        except RuntimeError:
            log.debug("the shutdown consumer was closed already", exc_info=True)
