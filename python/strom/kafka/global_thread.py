"""Global stores over Kafka (Kafka's GlobalStreamThread): one copy per
KafkaStreams instance, bootstrapped from the start to the end of the global
topics before any stream task starts, then kept up to date.

With one stream thread the thread itself applies what arrived at the top of
each loop. With several, a background thread of its own does it while the
stream threads read the stores (the native stores lock internally, so a read
never sees a half-applied batch), as Kafka's stream threads read what its
global thread writes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from confluent_kafka import TopicPartition

from strom.errors import StromError
from strom.kafka.clients import (
    ATTEMPT_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    KafkaClientError,
    consumer_config,
    retrying,
)
from strom.kafka.consumer import Consumer
from strom.processor.internals.task import RecordCollector, StreamTask

if TYPE_CHECKING:
    from pathlib import Path

    from strom.config import StreamsConfig
    from strom.processor.internals.topology_builder import InternalTopologyBuilder

log = logging.getLogger("strom.kafka")

GLOBAL_BATCH = 10_000


class GlobalStreamThread:
    """The global task, its consumer, and (once started) its thread."""

    def __init__(
        self,
        builder: InternalTopologyBuilder,
        config: StreamsConfig,
        partition_count: Callable[[str], int],
        state_dir: Path,
        client_id: str,
    ) -> None:
        sub = builder.global_subtopology()
        assert sub is not None, "no global stores in this topology"
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.consumer = Consumer(
            consumer_config(config, client_id, group=False, prefix="global.consumer.")
        )
        try:
            self.task: StreamTask | None = StreamTask(
                sub,
                0,
                builder,
                config,
                RecordCollector(None, partition_count),
                lambda topic: topic,
                state_dir,
                task_id="global",
            )
            for store in self.task.stores.values():
                store.native.clear()  # rebuilt from its topic on every start
            self._bootstrap(sub.source_topics, partition_count)
        except BaseException:
            self.close()
            raise

    def _bootstrap(self, topics: list[str], partition_count: Callable[[str], int]) -> None:
        """Reads every global partition from its start to its end as of now."""
        assign, pending = [], set()
        for topic in topics:
            for partition in range(partition_count(topic)):
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
        deadline = time.monotonic() + 10 * REQUEST_TIMEOUT_S
        while pending:
            pending -= self._apply(0.1)
            if time.monotonic() > deadline:
                raise KafkaClientError(
                    f"bootstrapping global stores from {sorted(pending)} timed out"
                )

    def _apply(self, timeout: float) -> set[tuple[str, int]]:
        """Applies what the consumer has; returns the partitions found at their end."""
        batches = self.consumer.poll_batches(GLOBAL_BATCH, timeout)
        with self._lock:
            if self.task is not None:
                for batch in batches:
                    self.task.process(batch)
        return set(self.consumer.eofs)

    def poll(self) -> None:
        """Applies what arrived since the last call (one stream thread)."""
        self._apply(0)

    # --- in a thread of its own (several stream threads) --------------------------
    def start(self, name: str) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._apply(0.1)
        except BaseException as exc:
            log.exception("the global stream thread failed")
            self.failure = exc

    def check(self) -> None:
        """Raises in a stream thread if the global thread failed: its stores
        are stale, and Kafka stops the whole client then."""
        if self.failure is not None:
            raise StromError(f"the global stream thread failed: {self.failure}") from self.failure

    def close(self) -> None:
        """Stops the thread, closes the consumer and the stores (idempotent)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            task, self.task = self.task, None
            if task is not None:
                task.close()
        try:
            self.consumer.close()
        except RuntimeError:
            log.debug("the global consumer was closed already", exc_info=True)
