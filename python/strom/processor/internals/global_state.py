"""Global stores (Kafka's GlobalStateManager and its update task): one copy
per instance, rebuilt on every start by reading each global partition from
its start to its end as of then, before any stream task is made; then kept
current with what arrives. A transport supplies the reading (a
:class:`GlobalSource`); the embedded runtime polls the stores in its loop,
Kafka's GlobalStreamThread may poll them in a thread of its own."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from strom.errors import StromError

if TYPE_CHECKING:
    from strom.processor.internals.task import InputRecords, StreamTask, TaskFactory
    from strom.processor.internals.topology_builder import Subtopology


class GlobalSource(Protocol):
    """Reads the global topics: the transport's part of the global stores."""

    def start(self, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
        """Positions each partition at its start; returns those that hold
        records (up to their end as of now) to read first."""

    def read(self, timeout: float) -> Iterable[InputRecords]:
        """What arrived since the last read (waiting up to ``timeout`` for it)."""

    def ended(self) -> set[tuple[str, int]]:
        """The partitions the last read reached the end of."""

    def close(self) -> None: ...


class GlobalStores:
    """The global task and the source that keeps its stores current. Reads
    and updates may come from different threads: the native stores lock
    internally, and updates hold this object's lock."""

    def __init__(
        self,
        factory: TaskFactory,
        subtopology: Subtopology,
        source: GlobalSource,
        partition_count: Callable[[str], int],
        bootstrap_timeout_s: float | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._source = source
        self.task: StreamTask | None = None
        try:
            self.task = factory.global_task(subtopology)
            self._bootstrap(
                [
                    (topic, partition)
                    for topic in subtopology.source_topics
                    for partition in range(partition_count(topic))
                ],
                bootstrap_timeout_s,
            )
        except BaseException:
            self.close()
            raise

    def _bootstrap(self, partitions: list[tuple[str, int]], timeout_s: float | None) -> None:
        """Reads every global partition from its start to its end as of now."""
        pending = self._source.start(partitions)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            pending -= self.apply(0.1)
            if deadline is not None and time.monotonic() > deadline:
                raise StromError(f"bootstrapping global stores from {sorted(pending)} timed out")

    def apply(self, timeout: float) -> set[tuple[str, int]]:
        """Applies what the source has; returns the partitions read to their end."""
        batches = self._source.read(timeout)
        with self._lock:
            if self.task is not None:
                for batch in batches:
                    self.task.process(batch)
        return self._source.ended()

    def poll(self) -> None:
        """Applies what arrived since the last call (from the stream thread)."""
        self.apply(0)

    def close(self) -> None:
        """Closes the stores and the source (idempotent)."""
        with self._lock:
            task, self.task = self.task, None
            if task is not None:
                task.close()
        self._source.close()
