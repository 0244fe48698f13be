"""KafkaStreams: a running strom application."""

from __future__ import annotations

import enum
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from strom.config import StreamsConfig
from strom.errors import ConfigError, StoreError, StromError
from strom.internals.runtime import EmbeddedRuntime, Runtime
from strom.keyvalue import KeyValue
from strom.state.views import plain
from strom.topology import Topology

__all__ = ["KafkaStreams", "State"]

log = logging.getLogger("strom.streams")


class State(enum.Enum):
    """Kafka Streams' client states."""

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"


def _seconds(timeout: float | timedelta | None) -> float | None:
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return timeout


class KafkaStreams:
    """Runs a topology: ``start()`` in a background thread, ``run()`` in the
    foreground, or ``run_until_end()`` as a bounded batch run.

    ``bootstrap.servers`` chooses the transport: ``embedded:PATH`` runs on the
    embedded log in that directory; ``host:port,…`` runs on Apache Kafka,
    as a member of the consumer group ``application.id``.
    """

    def __init__(self, topology: Topology, config: Mapping[str, Any] | StreamsConfig) -> None:
        self.config = config if isinstance(config, StreamsConfig) else StreamsConfig(config)
        self.config.application_id  # noqa: B018 - fail fast when missing
        self._path = self.config.embedded_path
        if self._path is None and self.config["num.stream.threads"] != 1:
            raise ConfigError(
                "num.stream.threads > 1 is not supported on Kafka yet; run more instances"
            )
        self._topology = topology
        self._state = State.CREATED
        self._listener: Callable[[State, State], None] | None = None
        self._runtime: Runtime | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self.exception: BaseException | None = None

    # --- state ----------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    def set_state_listener(self, listener: Callable[[State, State], None]) -> None:
        """``listener(new_state, old_state)`` is called on every transition."""
        self._listener = listener

    def _set_state(self, new: State) -> None:
        old, self._state = self._state, new
        if old is not new and self._listener is not None:
            self._listener(new, old)

    def _new_runtime(self) -> Runtime:
        if self._path is not None:
            return EmbeddedRuntime(self._topology._internal, self.config, self._path)
        try:
            from strom.kafka.runtime import KafkaRuntime, process_id  # noqa: PLC0415 - optional
        except ImportError as exc:  # confluent-kafka is an optional dependency
            raise ConfigError(
                "running on Kafka needs the confluent-kafka package (pip install confluent-kafka)"
            ) from exc
        return KafkaRuntime(
            self._topology._internal,
            self.config,
            process_id=process_id(),
            on_rebalance=self._on_rebalance,
        )

    def _on_rebalance(self, started: bool) -> None:
        if self._state in (State.RUNNING, State.REBALANCING):
            self._set_state(State.REBALANCING if started else State.RUNNING)

    def _open(self) -> Runtime:
        with self._lock:
            if self._state is not State.CREATED:
                raise StromError(f"cannot start a KafkaStreams in state {self._state.value}")
            self._set_state(State.REBALANCING)
            try:
                self._runtime = self._new_runtime()
            except BaseException as exc:
                self.exception = exc
                self._set_state(State.ERROR)
                raise
            # On Kafka, RUNNING comes with the first assignment.
            if self._path is not None:
                self._set_state(State.RUNNING)
            return self._runtime

    # --- running --------------------------------------------------------------
    def start(self) -> None:
        """Starts processing in a background thread and returns."""
        runtime = self._open()
        self._thread = threading.Thread(
            target=self._loop, args=(runtime,), name="strom-StreamThread-1", daemon=True
        )
        self._thread.start()

    def _loop(self, runtime: Runtime) -> None:
        try:
            while not self._stop.is_set():
                runtime.poll_once(0.1)
                runtime.maybe_commit()
        except BaseException as exc:
            self.exception = exc
            log.exception("stream thread died; the application goes to ERROR")
            self._set_state(State.PENDING_ERROR)
            self._set_state(State.ERROR)

    def run(self) -> None:
        """Runs in the foreground until SIGINT or SIGTERM, then closes."""
        self.start()
        stop = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: stop.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            # Until a signal arrives or the stream thread stops by itself.
            while self._state in (State.RUNNING, State.REBALANCING) and not stop.wait(0.2):
                continue
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.close()
        if self.exception is not None:
            raise self.exception

    def run_until_end(self, timeout: float | timedelta | None = None) -> None:
        """Processes everything up to the input end offsets as of this call,
        commits, and returns: a bounded batch run. The app stays open (its
        stores queryable, and another call processes what arrived since)
        until ``close()``."""
        seconds = _seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        if self._thread is not None:
            raise StromError("run_until_end cannot be used on an app started with start()")
        opened = self._state in (State.RUNNING, State.REBALANCING)
        runtime = self._runtime if opened else self._open()
        assert runtime is not None
        try:
            runtime.run_until_end(deadline)
        except BaseException as exc:
            self.exception = exc
            self._set_state(State.PENDING_ERROR)
            self._set_state(State.ERROR)
            runtime.abort()
            raise

    def close(self, timeout: float | timedelta | None = None) -> bool:
        """Stops processing, commits, and releases resources. Returns whether
        the stream thread stopped within ``timeout``."""
        with self._lock:
            if self._state in (State.NOT_RUNNING, State.PENDING_SHUTDOWN):
                return True
            failed = self._state is State.ERROR
            if not failed:
                self._set_state(State.PENDING_SHUTDOWN)
        self._stop.set()
        stopped = True
        if self._thread is not None:
            self._thread.join(_seconds(timeout))
            stopped = not self._thread.is_alive()
        if stopped and self._runtime is not None:
            if failed:
                self._runtime.abort()
            else:
                self._runtime.close()
        if not failed:
            self._set_state(State.NOT_RUNNING)
        return stopped

    def __enter__(self) -> KafkaStreams:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- queries --------------------------------------------------------------
    def store(self, name: str) -> ReadOnlyKeyValueView:
        """Interactive query of a key-value store across this instance's tasks."""
        runtime = self._runtime
        if runtime is None:
            raise StoreError("the application has not started; there are no stores yet")
        tasks = [*runtime.tasks.values(), *([runtime.global_task] if runtime.global_task else [])]
        stores = [plain(t.stores[name]) for t in tasks if name in t.stores]
        if not stores:
            raise StoreError(f"no state store named {name!r} in this topology")
        return ReadOnlyKeyValueView(name, stores)

    def metrics(self) -> dict[str, Any]:
        return {} if self._runtime is None else self._runtime.metrics()


class ReadOnlyKeyValueView:
    """A read-only view of one store over all local tasks."""

    def __init__(self, name: str, stores: list[Any]) -> None:
        self.name = name
        self._stores = stores

    def get(self, key: Any) -> Any:
        for store in self._stores:
            value = store.get(key)
            if value is not None:
                return value
        return None

    def all(self) -> Iterator[KeyValue]:
        for store in self._stores:
            yield from store.all()

    def approximate_num_entries(self) -> int:
        return sum(s.approximate_num_entries() for s in self._stores)
