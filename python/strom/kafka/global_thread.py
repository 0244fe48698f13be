"""Global stores over Kafka (Kafka's GlobalStreamThread): one copy per
KafkaStreams instance (``strom.processor.internals.global_state``), read
from the global topics by a consumer of their own that joins no group.

With one stream thread the thread itself applies what arrived at the top of
each loop. With several, a background thread of its own does it while the
stream threads read the stores (the native stores lock internally, so a read
never sees a half-applied batch), as Kafka's stream threads read what its
global thread writes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from strom._core import RecordBatch
from strom.errors import StromError
from strom.kafka.clients import (
    ATTEMPT_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    consumer_config,
    retrying,
)
from strom.kafka.consumer import Consumer
from strom.processor.internals.global_state import GlobalStores
from strom.processor.internals.task import RecordCollector, TaskFactory

if TYPE_CHECKING:
    from pathlib import Path

    from strom.config import StreamsConfig
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, Subtopology

log = logging.getLogger("strom.kafka")

GLOBAL_BATCH = 10_000


class KafkaGlobalSource:
    """The global topics read by assignment, from each partition's low watermark."""

    def __init__(self, config: StreamsConfig, client_id: str) -> None:
        self.consumer = Consumer(
            consumer_config(config, client_id, group=False, prefix="global.consumer.")
        )

    def start(self, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        assign, pending = [], set()
        for topic, partition in partitions:
            tp = TopicPartition(topic, partition)
            low, high = retrying(
                lambda tp=tp: self.consumer.get_watermark_offsets(  # type: ignore[misc]
                    tp, timeout=ATTEMPT_TIMEOUT_S
                ),
                f"reading the offsets of {topic}-{partition}",
                lambda topic=topic: self.consumer.refresh_metadata(  # type: ignore[misc]
                    topic, ATTEMPT_TIMEOUT_S
                ),
            )
            assign.append(TopicPartition(topic, partition, low))
            if high > low:
                pending.add((topic, partition))
        self.consumer.assign(assign)
        return pending

    def read(self, timeout: float) -> list[RecordBatch]:
        return self.consumer.poll_batches(GLOBAL_BATCH, timeout)

    def ended(self) -> set[tuple[str, int]]:
        return set(self.consumer.eofs)

    def close(self) -> None:
        try:
            self.consumer.close()
        except RuntimeError:
            log.debug("the global consumer was closed already", exc_info=True)


class GlobalStreamThread(GlobalStores):
    """The instance's global stores and (once started) their thread."""

    def __init__(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        partition_count: Callable[[str], int],
        state_dir: Path,
        client_id: str,
        subtopology: Subtopology,
    ) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        # Global stores are not logged and global topics keep their names.
        factory = TaskFactory(
            builder, config, RecordCollector(None, partition_count), lambda t: t, state_dir
        )
        super().__init__(
            factory,
            subtopology,
            KafkaGlobalSource(config, client_id),
            partition_count,
            bootstrap_timeout_s=10 * REQUEST_TIMEOUT_S,
        )

    def poll(self) -> None:
        """From a stream thread: applies what arrived since the last call, or
        (with a thread of its own) raises if that thread failed, since its
        stores are then stale and Kafka stops the whole client."""
        if self._thread is None:
            self.apply(0)
        elif self.failure is not None:
            raise StromError(f"the global stream thread failed: {self.failure}") from self.failure

    # --- in a thread of its own (several stream threads) --------------------------
    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.apply(0.1)
        except BaseException as exc:
            log.exception("the global stream thread failed")
            self.failure = exc

    def close(self) -> None:
        """Stops the thread, closes the consumer and the stores (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        super().close()
