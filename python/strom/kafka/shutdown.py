"""``"shutdown_application"`` across instances.

Kafka Streams signals every instance of an application through the group's
assignment (an error code its own assignor sets); librdkafka's assignors
cannot carry one. strom uses a control topic instead,
``<application.id>-shutdown-control`` (one partition): an instance that is
told to shut the application down appends a record to it, and every
instance watches its end offset (a cheap metadata call every
``CHECK_INTERVAL_S``, on a watcher thread of its own: the stream threads
only read a flag, and do not wait for the first look at start). Each
instance notes the end when it starts, so only requests made while it runs
stop it; old records never do.
"""

from __future__ import annotations

import logging
import threading
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
        self._requested = False
        self._baseline: int | None = None
        self._failure: BaseException | None = None
        self._noted = threading.Event()  # the baseline is known (or failed)
        self._stop = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, name=f"{client_id}-shutdown-watcher", daemon=True
        )
        self._watcher.start()

    @property
    def baseline(self) -> int:
        """The control topic's end when this instance started."""
        self._noted.wait()
        if self._failure is not None:
            raise self._failure
        assert self._baseline is not None
        return self._baseline

    def _watch(self) -> None:
        try:
            self._baseline = baseline = self._end()
        except BaseException as exc:  # raised by requested()
            self._failure = exc
            return
        finally:
            self._noted.set()
        wait = CHECK_INTERVAL_S
        while not self._stop.wait(wait):
            wait = self._look(baseline)
            if self._requested:
                return

    def _look(self, baseline: int) -> float:
        """One look at the control topic's end; returns how long to wait
        before the next (a cluster in trouble is asked less often)."""
        try:
            self._requested = self._end(patient=False) > baseline
        except (StromError, KafkaException):
            log.warning("checking %s failed (asking again)", self.topic, exc_info=True)
            return FAILED_CHECK_BACKOFF_S
        return CHECK_INTERVAL_S

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
        """Whether a shutdown was requested since this instance started (as
        the watcher saw it last; any thread may ask). Raises what kept the
        watcher from reading the control topic's end at start."""
        if self._failure is not None:
            raise self._failure
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
        self._stop.set()
        self._watcher.join()
        try:
            self.consumer.close()
        except RuntimeError:
            log.debug("the shutdown consumer was closed already", exc_info=True)
