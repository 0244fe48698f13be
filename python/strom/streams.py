"""KafkaStreams: a running strom application."""

from __future__ import annotations

import enum
import functools
import itertools
import logging
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from strom._core import __version__
from strom.config import StreamsConfig
from strom.embedded.runtime import EmbeddedTransport
from strom.errors import (
    ApplicationShutdownRequested,
    ConfigError,
    InvalidStateStoreError,
    StoreError,
    StromError,
)
from strom.metadata import (
    HostInfo,
    KeyQueryMetadata,
    LagInfo,
    StreamsMetadata,
    TaskMetadata,
    ThreadMetadata,
    TopicPartition,
)
from strom.metrics import Metric, MetricName, Metrics
from strom.processor.internals.runtime import Runtime, ShutdownSignal, Transport
from strom.processor.internals.streams_metadata import (
    GroupAssignment,
    InstanceDirectory,
    StreamsMetadataState,
)
from strom.query import (
    FailureReason,
    KeyQuery,
    MultiVersionedKeyQuery,
    Query,
    QueryResult,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    VersionedKeyQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.serdes import Serde
from strom.state.internals.caching import CachingKeyValueStore
from strom.state.internals.metered import MeteredStore
from strom.state.internals.registry import store_kind
from strom.state.views import (
    ReadOnlyKeyValueView,
    ReadOnlySessionView,
    ReadOnlyVersionedView,
    ReadOnlyWindowView,
)
from strom.topology import Topology

if TYPE_CHECKING:
    from strom.metrics.prometheus import MetricsServer
    from strom.processor.api import Partitioner, StandbyUpdateListener, StateRestoreListener
    from strom.processor.internals.topology_builder import StoreDef
    from strom.web.server import WebServer

__all__ = ["KafkaStreams", "State"]

log = logging.getLogger("strom.streams")


class State(enum.Enum):
    """Kafka Streams' client states, with ``KafkaStreams.State``'s predicates."""

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    PENDING_ERROR = "PENDING_ERROR"
    ERROR = "ERROR"

    def has_not_started(self) -> bool:
        return self is State.CREATED

    def is_running_or_rebalancing(self) -> bool:
        return self in (State.RUNNING, State.REBALANCING)

    def is_shutting_down(self) -> bool:
        return self in (State.PENDING_SHUTDOWN, State.PENDING_ERROR)

    def has_completed_shutdown(self) -> bool:
        return self in (State.NOT_RUNNING, State.ERROR)

    def has_started_or_finished_shutting_down(self) -> bool:
        return self.is_shutting_down() or self.has_completed_shutdown()

    def is_valid_transition(self, new_state: State) -> bool:
        """Whether Kafka's state machine goes from this state to ``new_state``."""
        return new_state in _TRANSITIONS[self]


_TRANSITIONS: dict[State, frozenset[State]] = {
    State.CREATED: frozenset({State.REBALANCING, State.PENDING_SHUTDOWN}),
    State.REBALANCING: frozenset({State.RUNNING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}),
    State.RUNNING: frozenset(
        {State.REBALANCING, State.RUNNING, State.PENDING_SHUTDOWN, State.PENDING_ERROR}
    ),
    State.PENDING_SHUTDOWN: frozenset({State.NOT_RUNNING}),
    State.NOT_RUNNING: frozenset(),
    State.PENDING_ERROR: frozenset({State.ERROR}),
    State.ERROR: frozenset(),
}


def transport_for(config: StreamsConfig) -> Transport:
    """``bootstrap.servers`` chooses the transport: ``embedded:PATH`` or Kafka."""
    path = config.embedded_path
    if path is not None:
        return EmbeddedTransport(path)
    try:
        from strom.kafka.runtime import KafkaTransport  # noqa: PLC0415 - needs confluent-kafka
    except ImportError as exc:  # confluent-kafka is an optional dependency
        raise ConfigError(
            "running on Kafka needs the confluent-kafka package (pip install confluent-kafka)"
        ) from exc
    return KafkaTransport()


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
        # Made by the first start (confluent-kafka is imported only then).
        self._transport_made: Transport | None = None
        self._topology = topology
        self._state = State.CREATED
        self._listener: Callable[[State, State], None] | None = None
        # One runtime per stream thread (the embedded log has one thread).
        self._runtimes: list[Runtime] = []
        self._threads: list[threading.Thread] = []
        # The started stream threads (start(), add_stream_thread()).
        self._stream_threads: list[_StreamThread] = []
        self._rebalancing: set[int] = set()
        self._paused = False
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._exception_handler: Callable[[BaseException], str] | None = None
        # The signal across the application's instances, once watched
        # (None on the embedded log: this client is the whole application).
        self._app_shutdown: ShutdownSignal | None = None
        self.exception: BaseException | None = None
        # The Prometheus exporter, from the start while ``metrics.port`` is set.
        self._metrics_server: MetricsServer | None = None
        # Where the instances run what (interactive queries), made on first
        # use; read again once this instance has rebalanced since.
        self._directory: InstanceDirectory | None = None
        self._rebalances = 0
        self._rebalances_seen = 0
        # The HTTP server of interactive queries and the web view (strom[web]).
        self._web_server: WebServer | None = None

    @property
    def _runtime(self) -> Runtime | None:
        """The first stream thread's runtime (the only one on the embedded log)."""
        return self._runtimes[0] if self._runtimes else None

    # --- state ----------------------------------------------------------------
    @property
    def state(self) -> State:
        return self._state

    def pause(self) -> None:
        """Stops processing (Kafka's ``pause``): the stream threads stop
        fetching, processing and punctuating their tasks (standbys too) and
        stay in the group; the state does not change, global stores go on
        updating. Before :meth:`start`, the app starts paused."""
        self._set_paused(True)

    def resume(self) -> None:
        """Processing goes on where :meth:`pause` stopped it."""
        self._set_paused(False)

    def is_paused(self) -> bool:
        return self._paused

    def _set_paused(self, paused: bool) -> None:
        with self._lock:
            self._paused = paused
            for runtime in self._runtimes:
                runtime.paused = paused  # each thread applies it on its next poll

    def set_state_listener(self, listener: Callable[[State, State], None]) -> None:
        """``listener(new_state, old_state)`` is called on every transition."""
        self._listener = listener

    def _set_state(self, new: State) -> None:
        with self._lock:
            old, self._state = self._state, new
        if old is not new and self._listener is not None:
            self._listener(new, old)

    @property
    def _transport(self) -> Transport:
        if self._transport_made is None:
            self._transport_made = transport_for(self.config)
        return self._transport_made

    def _new_runtimes(self, only: int | None = None) -> list[Runtime]:
        """A runtime per stream thread (or only for thread number ``only``)."""
        transport = self._transport
        count = transport.stream_threads(self.config)
        indexes = range(1, count + 1) if only is None else [only]
        runtimes: list[Runtime] = []
        try:
            for index in indexes:
                self._rebalancing.add(index)  # until its first assignment
                runtime = transport.runtime(
                    self._topology._internal,
                    self.config,
                    index,
                    functools.partial(self._on_rebalance, index),
                )
                runtime.paused = self._paused
                runtimes.append(runtime)
        except BaseException:
            for runtime in runtimes:
                runtime.abort()
            if only is None:
                transport.close()
            raise
        return runtimes

    def _on_rebalance(self, thread: int, started: bool) -> None:
        """REBALANCING while any stream thread rebalances, else RUNNING."""
        with self._lock:
            if started:
                self._rebalancing.add(thread)
            else:
                self._rebalancing.discard(thread)
                self._rebalances += 1
            if self._state in (State.RUNNING, State.REBALANCING):
                self._set_state(State.REBALANCING if self._rebalancing else State.RUNNING)

    def _open(self) -> list[Runtime]:
        with self._lock:
            if self._state is not State.CREATED:
                raise StromError(f"cannot start a KafkaStreams in state {self._state.value}")
            self._start_metrics_server()
            try:
                self._start_web_server()
            except BaseException:
                if self._metrics_server is not None:
                    self._metrics_server.close()
                    self._metrics_server = None
                raise
            self._set_state(State.REBALANCING)
            try:
                self._runtimes = self._new_runtimes()
                for runtime in self._runtimes:
                    runtime.join_group()
            except BaseException as exc:
                self.exception = exc
                self._set_state(State.PENDING_ERROR)
                self._set_state(State.ERROR)
                raise
            # RUNNING comes with the first assignment of every stream thread.
            return self._runtimes

    # --- running --------------------------------------------------------------
    def start(self) -> None:
        """Starts processing in background threads (``num.stream.threads`` on
        Kafka) and returns."""
        runtimes = self._open()
        self._watch_application_shutdown()
        for index, runtime in enumerate(runtimes, start=1):
            self._launch(runtime, index)

    def _launch(self, runtime: Runtime, index: int) -> None:
        """Runs stream thread ``index`` (Kafka's StreamThread-<index>) on ``runtime``."""
        st = _StreamThread(index, runtime, threading.Event())
        st.thread = threading.Thread(
            target=self._loop, args=(st,), name=f"strom-StreamThread-{index}", daemon=True
        )
        with self._lock:
            self._stream_threads.append(st)
            self._threads.append(st.thread)
        st.thread.start()

    def add_stream_thread(self) -> str | None:
        """Starts one more stream thread (Kafka's ``addStreamThread``): the
        group rebalances and it takes a share of the tasks. Returns its name,
        or None when the app is not running (started with :meth:`start`).
        Raises StromError where it cannot: on the embedded log (one thread),
        with standbys, or when the one thread it started with keeps the
        global stores."""
        with self._lock:
            if self._state not in (State.RUNNING, State.REBALANCING) or not self._threads:
                return None
            why = self._transport.why_no_more_threads(self.config, self._topology._internal)
            if why:
                raise StromError(f"cannot add a stream thread: {why}")
            used = {st.index for st in self._stream_threads}
            index = next(i for i in itertools.count(1) if i not in used)
            runtime = self._new_runtimes(only=index)[0]
            self._runtimes.append(runtime)
        self._launch(runtime, index)
        return runtime.thread_name

    def remove_stream_thread(self, timeout: float | timedelta | None = None) -> str | None:
        """Stops one stream thread (Kafka's ``removeStreamThread``): it
        commits, closes its tasks and leaves the group, whose other members
        take its tasks over. Returns its name, or None when the app is not
        running or has no stream thread left. Raises StromError when the
        thread does not stop within ``timeout``."""
        with self._lock:
            if self._state not in (State.RUNNING, State.REBALANCING):
                return None
            alive = [st for st in self._stream_threads if st.thread and st.thread.is_alive()]
            if not alive:
                return None
            st = alive[-1]
        st.stop.set()
        assert st.thread is not None
        st.thread.join(_seconds(timeout))
        if st.thread.is_alive():
            raise StromError(f"stream thread {st.index} did not stop within {timeout}")
        st.runtime.close()
        with self._lock:
            self._stream_threads.remove(st)
            self._threads.remove(st.thread)
            self._runtimes = [r for r in self._runtimes if r is not st.runtime]
        self._on_rebalance(st.index, False)  # it no longer holds RUNNING back
        return st.runtime.thread_name

    def clean_up(self) -> None:
        """Deletes this application's local state, ``state.dir/<application.id>``
        (Kafka's ``cleanUp``): only before :meth:`start` or after :meth:`close`;
        the next start restores the stores from their changelogs. The topics
        and committed offsets stay (``strom reset`` resets those)."""
        with self._lock:
            if not (self._state.has_not_started() or self._state.has_completed_shutdown()):
                raise StromError(
                    f"cannot clean up a KafkaStreams in state {self._state.value}: "
                    "only before start() or after close()"
                )
            shutil.rmtree(self.config.state_dir / self.config.application_id, ignore_errors=True)

    def _watch_application_shutdown(self) -> None:
        """Notices ``"shutdown_application"`` requests of any instance (on
        Kafka, see strom.kafka.shutdown)."""
        if self._app_shutdown is not None:
            return
        try:
            self._app_shutdown = self._transport.application_shutdown(self.config)
        except BaseException as exc:
            self._fail(exc)
            for runtime in self._runtimes:
                runtime.abort()
            self._transport.close()
            raise

    def _shutdown_requested(self) -> bool:
        return self._app_shutdown is not None and self._app_shutdown.requested()

    def _shutdown_request(self) -> ApplicationShutdownRequested:
        return ApplicationShutdownRequested(
            f"an instance of application {self.config.application_id!r} "
            "requested shutdown_application"
        )

    def _request_application_shutdown(self, exc: BaseException) -> None:
        if self._app_shutdown is None:
            return  # this client is the whole application
        try:
            self._app_shutdown.request(f"{type(exc).__name__}: {exc}")
        except Exception:
            log.exception("asking the other instances to shut down failed")

    def _fail(self, exc: BaseException) -> None:
        """A stream thread died: the whole client stops (Kafka's SHUTDOWN_CLIENT)."""
        with self._lock:
            if self.exception is None:
                self.exception = exc
            self._stop.set()
            if self._state is not State.ERROR:
                self._set_state(State.PENDING_ERROR)
                self._set_state(State.ERROR)

    def set_global_state_restore_listener(self, listener: StateRestoreListener) -> None:
        """``listener`` is told as local stores are restored from their
        changelogs (Kafka's ``setGlobalStateRestoreListener``): before
        :meth:`start` only."""
        with self._lock:
            self._before_start("set_global_state_restore_listener")
            self._transport.restore_listener = listener

    def set_standby_update_listener(self, listener: StandbyUpdateListener) -> None:
        """``listener`` is told as standby tasks update their stores from the
        changelogs (Kafka's ``setStandbyUpdateListener``): before
        :meth:`start` only. The embedded log keeps no standbys."""
        with self._lock:
            self._before_start("set_standby_update_listener")
            self._transport.standby_listener = listener

    def _before_start(self, what: str) -> None:
        if not self._state.has_not_started():
            raise StromError(f"{what} works before start(), not in state {self._state.value}")

    def set_uncaught_exception_handler(self, handler: Callable[[BaseException], str]) -> None:
        """``handler(exception)`` decides what a stream thread that failed
        does, as Kafka's StreamsUncaughtExceptionHandler: ``"replace_thread"``
        (its tasks are closed without committing and a new thread takes over,
        redoing what was not committed), ``"shutdown_client"`` (the default:
        the app goes to ERROR) or ``"shutdown_application"`` (every instance
        of the application goes to ERROR)."""
        self._exception_handler = handler

    def _loop(self, st: _StreamThread) -> None:
        while not (self._stop.is_set() or st.stop.is_set()):
            runtime = st.runtime
            try:
                while not (self._stop.is_set() or st.stop.is_set()):
                    runtime.poll_once(0.1)
                    runtime.maybe_commit()
                    if self._shutdown_requested():
                        self._fail(self._shutdown_request())
                        return
            except Exception as exc:
                verdict = "shutdown_client"
                if self._exception_handler is not None:
                    try:
                        verdict = self._exception_handler(exc)
                    except Exception:
                        log.exception("the uncaught exception handler failed")
                if self._transport.shared_failure() is not None:
                    # The global thread failed: replacing a stream thread cannot help (Kafka).
                    verdict = "shutdown_client" if verdict == "replace_thread" else verdict
                if verdict == "shutdown_application":
                    self._request_application_shutdown(exc)
                if verdict != "replace_thread" or not self._replace(st):
                    log.exception("stream thread died; the application goes to ERROR")
                    self._fail(exc)
                    return
                log.warning("stream thread %d failed (%s); replaced it", st.index, exc)
            except BaseException as exc:
                self._fail(exc)
                return

    def _replace(self, st: _StreamThread) -> bool:
        """A new runtime for stream thread ``st``; False if that failed too."""
        old = st.runtime
        old.abort()
        try:
            new = self._new_runtimes(only=st.index)[0]
        except Exception:
            log.exception("replacing stream thread %d failed", st.index)
            return False
        with self._lock:
            self._runtimes = [new if r is old else r for r in self._runtimes]
            st.runtime = new
        return True

    def run(self) -> None:
        """Runs in the foreground until SIGINT or SIGTERM, then closes."""
        stop = threading.Event()
        # Installed before the stream threads start: a signal right after is handled too.
        previous = {
            sig: signal.signal(sig, lambda *_: stop.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self.start()
            # Until a signal arrives or the stream threads stop by themselves.
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
        until ``close()``. On Kafka, a ``"shutdown_application"`` request of
        another instance stops it with ``ApplicationShutdownRequested``."""
        seconds = _seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        if self._threads:
            raise StromError("run_until_end cannot be used on an app started with start()")
        if self._paused:
            raise StromError("run_until_end on a paused app would never end: resume() first")
        opened = self._state in (State.RUNNING, State.REBALANCING)
        runtimes = self._runtimes if opened else self._open()
        self._watch_application_shutdown()
        try:
            if len(runtimes) == 1 and self._app_shutdown is None:
                runtimes[0].run_until_end(deadline)  # nothing else to watch meanwhile
            else:
                self._run_threads_until_end(runtimes, deadline)
        except BaseException as exc:
            self.exception = exc
            self._set_state(State.PENDING_ERROR)
            self._set_state(State.ERROR)
            for runtime in runtimes:
                runtime.abort()
            self._transport.close()
            raise

    def _run_threads_until_end(self, runtimes: list[Runtime], deadline: float | None) -> None:
        """Each thread steps until all of them are idle and at their targets
        at once: a thread that ran dry may get more from another's output
        (repartition topics), so none stops before all do. Meanwhile this
        one watches for ``"shutdown_application"`` requests (on Kafka)."""
        done = threading.Event()
        rounds = [0] * len(runtimes)
        idle = [False] * len(runtimes)
        processed = [0] * len(runtimes)
        errors: list[BaseException] = []

        def step(i: int, runtime: Runtime) -> None:
            try:
                end = runtime.end_targets()
                while not done.is_set():
                    idle[i] = runtime.step_until_end(end, deadline)
                    processed[i] = runtime.metrics()["records-processed"]
                    rounds[i] += 1
                runtime.commit()
            except BaseException as exc:
                errors.append(exc)
                done.set()

        threads = [
            threading.Thread(target=step, args=(i, r), name=f"strom-StreamThread-{i + 1}")
            for i, r in enumerate(runtimes)
        ]
        for thread in threads:
            thread.start()
        try:
            while not done.is_set():
                if self._shutdown_requested():
                    errors.append(self._shutdown_request())
                    break
                if all(idle):
                    # Quiet for two more rounds of every thread: finished.
                    seen, before = list(rounds), list(processed)
                    while not done.is_set() and any(
                        r < s + 2 for r, s in zip(rounds, seen, strict=True)
                    ):
                        time.sleep(0.01)
                    if all(idle) and processed == before:
                        break
                time.sleep(0.01)
        finally:
            done.set()
            for thread in threads:
                thread.join()
        if errors:
            raise errors[0]

    def close(self, timeout: float | timedelta | None = None) -> bool:
        """Stops processing, commits, and releases resources. Returns whether
        the stream threads stopped within ``timeout``."""
        with self._lock:
            if self._state in (State.NOT_RUNNING, State.PENDING_SHUTDOWN):
                return True
            # From PENDING_ERROR Kafka refuses PENDING_SHUTDOWN: it ends in ERROR.
            failed = self._state in (State.ERROR, State.PENDING_ERROR)
            if not failed:
                self._set_state(State.PENDING_SHUTDOWN)
        self._stop.set()
        seconds = _seconds(timeout)
        deadline = None if seconds is None else time.monotonic() + seconds
        for thread in self._threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)
        stopped = not any(thread.is_alive() for thread in self._threads)
        if stopped:
            try:
                for runtime in self._runtimes:
                    if failed:
                        runtime.abort()
                    else:
                        runtime.close()
            finally:
                if self._transport_made is not None:
                    self._transport_made.close()
                if self._app_shutdown is not None:
                    self._app_shutdown.close()
                    self._app_shutdown = None
                if self._metrics_server is not None:
                    self._metrics_server.close()
                    self._metrics_server = None
                if self._web_server is not None:
                    self._web_server.close()
                    self._web_server = None
                if self._directory is not None:
                    self._directory.close()
                    self._directory = None
        if not failed:
            self._set_state(State.NOT_RUNNING)
        return stopped

    def __enter__(self) -> KafkaStreams:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- queries --------------------------------------------------------------
    def _local_tasks(self) -> dict[str, list[str]]:
        """The ids of the tasks each stream thread runs now, by thread name
        (Kafka's ``metadataForLocalThreads``, reduced to the active tasks)."""
        return {
            f"StreamThread-{i}": sorted(runtime.tasks)
            for i, runtime in enumerate(list(self._runtimes), start=1)
        }

    def _check_queryable(self, what: str) -> None:
        """Kafka's validateIsRunningOrRebalancing: stores and metadata are
        queryable while RUNNING or REBALANCING only."""
        state = self._state
        if state is State.CREATED:
            raise InvalidStateStoreError(f"{what}: the application has not started yet")
        if state not in (State.RUNNING, State.REBALANCING) or not self._runtimes:
            raise InvalidStateStoreError(
                f"{what}: the application is not running (state {state.value})"
            )

    def _local_stores(self, name: str) -> list[Any]:
        """The instances of store ``name`` in the local active tasks (the
        global store once: the stream threads share it)."""
        return list(self._local_store_partitions(name).values())

    def _local_store_partitions(self, name: str, stale: bool = False) -> dict[int, Any]:
        """The local active tasks' instances of store ``name`` by partition
        (-1: the global store); with ``stale``, the standby tasks' too (an
        instance never holds both of one partition)."""
        found: dict[int, Any] = {}
        for runtime in list(self._runtimes):
            tasks = list(runtime.tasks.values())
            if stale:
                tasks += runtime.standby_tasks()
            for task in tasks:
                if name in task.stores:
                    found[task.partition] = task.stores[name]
        global_task = next((r.global_task for r in self._runtimes if r.global_task), None)
        if global_task is not None and name in global_task.stores:
            found[-1] = global_task.stores[name]
        return found

    def _store_partition_count(self, name: str) -> int:
        """How many partitions (tasks) store ``name`` has."""
        return self._metadata_state().store_partition_count(name)

    def store(
        self,
        name: str,
        *,
        timestamped: bool = False,
        partition: int | None = None,
        stale_stores: bool = False,
    ) -> Any:
        """Interactive query of store ``name`` over this instance's active
        tasks: a :class:`~strom.state.views.ReadOnlyKeyValueView`,
        ``ReadOnlyWindowView`` or ``ReadOnlySessionView`` as the store's kind
        is (typed ``Any``: the kind is the topology's, known at run time).
        A timestamped store's values read plain (Kafka's
        ``QueryableStoreTypes.keyValueStore()``, ``windowStore()``), or, with
        ``timestamped=True``, as ``(value, timestamp)`` pairs (Kafka's
        ``timestampedKeyValueStore()``, ``timestampedWindowStore()``).
        ``partition`` and ``stale_stores`` are Kafka's
        ``StoreQueryParameters.withPartition`` and ``enableStaleStores``: the
        view reads that partition's store only (a read raises
        InvalidStateStoreError while this instance does not hold it), and
        reads the standby tasks' stores too, which may lag their changelogs.
        Raises InvalidStateStoreError unless the app is RUNNING or
        REBALANCING, when no store has that name, or when ``timestamped``
        asks it for timestamps it does not keep."""
        self._check_queryable(f"store {name!r}")
        store_def = self._store_def(name)
        kind = store_kind(store_def)
        if timestamped and not store_def.timestamped:
            raise InvalidStateStoreError(
                f"store {name!r} is a {kind.name} store that keeps no timestamps: "
                "query it with store(name)"
            )
        provider = functools.partial(self._queryable_stores, name, partition, stale_stores)
        return kind.view_class(name, provider, timestamped=timestamped)

    def _store_def(self, name: str) -> StoreDef:
        store_def = self._topology._internal.stores.get(name)
        if store_def is None:
            known = ", ".join(sorted(self._topology._internal.stores)) or "none"
            raise InvalidStateStoreError(
                f"no state store named {name!r} in this topology (stores: {known})"
            )
        return store_def

    def query(self, request: StateQueryRequest[Any]) -> StateQueryResult[Any]:
        """Kafka's IQv2 ``query``: ``request.query`` against each local
        partition of the store (or those ``with_partitions`` names: one not
        on this instance is ``NOT_PRESENT``, one the store does not have
        ``DOES_NOT_EXIST``), each answered or failed on its own. Raises
        InvalidStateStoreError unless the app is RUNNING or REBALANCING, or
        when no store has that name; global stores are not queried (as in
        Kafka)."""
        name = request.store_name
        self._check_queryable(f"store {name!r}")
        store_def = self._store_def(name)
        if name in self._topology._internal.global_stores:
            raise StromError(f"{name!r} is a global store: query() answers for local stores")
        local = self._local_store_partitions(name)
        wanted = sorted(local) if request.partitions is None else sorted(request.partitions)
        count = self._store_partition_count(name) if request.partitions is not None else 0
        view_class = store_kind(store_def).view_class
        results: dict[int, QueryResult[Any]] = {}
        for partition in wanted:
            if partition not in local:
                reason, where = (
                    (FailureReason.NOT_PRESENT, "is not on this instance")
                    if 0 <= partition < count
                    else (FailureReason.DOES_NOT_EXIST, f"does not exist ({count} partitions)")
                )
                results[partition] = QueryResult.for_failure(
                    reason, f"partition {partition} of store {name!r} {where}"
                )
                continue
            store = local[partition]
            query = request.query
            if isinstance(query, KeyQuery | TimestampedKeyQuery) and query.is_skip_cache():
                store = _below_cache(store)
            view = view_class(name, functools.partial(lambda s: [s], store))
            results[partition] = _answer(view, request.query)
        return StateQueryResult(results)

    def _queryable_stores(
        self, name: str, partition: int | None = None, stale: bool = False
    ) -> list[Any]:
        """What a view reads on each call: the local stores (of one
        partition; standbys' too when ``stale``), while the app is queryable
        (Kafka's store providers check the same)."""
        self._check_queryable(f"store {name!r}")
        found = self._local_store_partitions(name, stale)
        if partition is None:
            return list(found.values())
        if partition not in found:
            raise InvalidStateStoreError(
                f"partition {partition} of store {name!r} is not on this instance"
                + ("" if stale else " as an active task (stale_stores=True reads standbys too)")
            )
        return [found[partition]]

    # --- metadata across instances --------------------------------------------
    def _metadata_state(self) -> StreamsMetadataState:
        runtime = self._runtimes[0]
        return StreamsMetadataState(
            self._topology._internal,
            self.config.application_server or HostInfo.unavailable(),
            runtime.topic_name,
            runtime.partition_count,
        )

    def _assignment(self) -> tuple[StreamsMetadataState, GroupAssignment | None]:
        """Where the application's tasks run, read again after a rebalance
        of this instance."""
        with self._lock:
            if self._directory is None:
                self._directory = self._transport.instance_directory(
                    self.config, lambda: list(self._runtimes)
                )
            refresh = self._rebalances != self._rebalances_seen
            self._rebalances_seen = self._rebalances
            directory = self._directory
        return self._metadata_state(), directory.assignment(refresh=refresh)

    def refresh_metadata(self) -> None:
        """Reads the group's assignment again at the next metadata call (a
        query landed where the key no longer lives)."""
        with self._lock:
            self._rebalances += 1

    def query_metadata_for_key(
        self,
        store_name: str,
        key: Any,
        key_serde: Serde[Any] | None = None,
        *,
        partitioner: Partitioner | None = None,
    ) -> KeyQueryMetadata:
        """Where ``key`` of ``store_name`` lives: the host of the active task
        of the key's partition (murmur2 of the key serialized with
        ``key_serde``, as the sinks partition; or ``partitioner``'s one
        partition for the key, Kafka's ``StreamPartitioner`` overload, for
        an input written by a partitioner of its own), the hosts of its
        standbys, and the partition. ``KeyQueryMetadata.NOT_AVAILABLE``
        while the assignment is not known (a rebalance)."""
        self._check_queryable("query_metadata_for_key")
        if (key_serde is None) == (partitioner is None):
            raise StoreError("query_metadata_for_key takes a key_serde or a partitioner")
        state, assignment = self._assignment()
        return state.key_query_metadata(store_name, key, key_serde, assignment, partitioner)

    def streams_metadata_for_store(self, store_name: str) -> list[StreamsMetadata]:
        """The instances (with an ``application.server``) hosting a
        partition of ``store_name``, active or standby."""
        self._check_queryable("streams_metadata_for_store")
        state, assignment = self._assignment()
        return state.metadata_for_store(store_name, assignment)

    def metadata_for_all_streams_clients(self) -> list[StreamsMetadata]:
        """Every instance of the application that has an ``application.server``."""
        self._check_queryable("metadata_for_all_streams_clients")
        state, assignment = self._assignment()
        return state.all_metadata(assignment)

    def metadata_for_local_threads(self) -> list[ThreadMetadata]:
        """This instance's stream threads and their active tasks."""
        self._check_queryable("metadata_for_local_threads")
        threads = []
        for runtime in list(self._runtimes):
            committed = runtime.committed_offsets()
            active = frozenset(
                _task_metadata(task, committed, runtime.end_offset)
                for task in list(runtime.tasks.values())
            )
            standby = frozenset(_task_metadata(task) for task in runtime.standby_tasks())
            state = "PARTITIONS_ASSIGNED" if self._state is State.REBALANCING else "RUNNING"
            consumer, restore, producers = runtime.client_ids()
            threads.append(
                ThreadMetadata(
                    runtime.thread_name, state, active, standby, consumer, restore, producers
                )
            )
        return threads

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """Per local store (of active and standby tasks, with a changelog) and
        partition: how far it is behind its changelog (Kafka's
        ``allLocalStorePartitionLags``). Active tasks' stores are restored
        before they process, so they show no lag; a standby's shows what its
        changelog has that it has not read yet."""
        lags: dict[str, dict[int, LagInfo]] = {}
        for runtime in list(self._runtimes):
            for store, partition, position, end in runtime.store_partition_lags():
                last = max(end, position)
                lags.setdefault(store, {})[partition] = LagInfo(position, last, last - position)
        return lags

    def metrics(self) -> Metrics:
        """Kafka Streams' metrics of this instance, keyed by
        :class:`~strom.metrics.MetricName` and read when asked: client
        (``stream-metrics``), thread, task, record cache, suppression buffer
        and the consumers' ``records-lag``, as ``metrics.recording.level``
        selects. A plain string key reads strom's instance-wide totals
        (``metrics()["records-processed"]``)."""
        totals: dict[str, Any] = {}
        metrics = self._client_metrics()
        for runtime in list(self._runtimes):
            for key, value in runtime.metrics().items():
                totals[key] = totals.get(key, 0) + value
            metrics += runtime.metric_list()
        return Metrics(metrics, totals)

    @property
    def metrics_server(self) -> MetricsServer | None:
        """The Prometheus exporter serving this app (``metrics.port``), with
        its ``host``, ``port`` and ``url``; None when not configured."""
        return self._metrics_server

    def _start_metrics_server(self) -> None:
        port = self.config["metrics.port"]
        if port is None or self._metrics_server is not None:
            return
        try:
            from strom.metrics.prometheus import MetricsServer  # noqa: PLC0415 - optional
        except ImportError as exc:
            raise ConfigError(
                "metrics.port needs the prometheus-client package (pip install 'strom[metrics]')"
            ) from exc
        host = self.config["metrics.host"]
        try:
            self._metrics_server = MetricsServer(self, host, port)
        except OSError as exc:
            raise ConfigError(
                f"metrics.port: cannot serve metrics on {host}:{port}: {exc}"
            ) from exc
        log.info("serving metrics and health checks on %s", self._metrics_server.url)

    @property
    def web_server(self) -> WebServer | None:
        """The HTTP server of interactive queries (``iq.http``) and the live
        web view (``ui.enabled``), with its ``url``; None when neither is on."""
        return self._web_server

    def _start_web_server(self) -> None:
        """One server for both: on ``application.server``'s port when it
        serves interactive queries (the address other instances forward
        to), else on ``ui.port``."""
        iq, ui = self.config["iq.http"], self.config["ui.enabled"]
        if not (iq or ui) or self._web_server is not None:
            return
        server = self.config.application_server
        if iq and server is None:
            raise ConfigError("iq.http needs application.server (host:port) to serve on")
        try:
            from strom.web.server import WebServer  # noqa: PLC0415 - optional dependency
        except ImportError as exc:
            raise ConfigError(
                "iq.http and ui.enabled need the web extra (pip install 'strom[web]')"
            ) from exc
        port = server.port if iq and server is not None else self.config["ui.port"]
        host = self.config["web.host"] or (server.host if server is not None else "127.0.0.1")
        try:
            self._web_server = WebServer(self, host, port, ui=ui, forward=self.config["iq.forward"])
        except OSError as exc:
            raise ConfigError(f"cannot serve HTTP on {host}:{port}: {exc}") from exc
        what = " and ".join(
            w for w, on in (("interactive queries", iq), ("the web view", ui)) if on
        )
        log.info("serving %s on %s", what, self._web_server.url)

    def _client_metrics(self) -> list[Metric]:
        tags = {"client-id": str(self.config.get("client.id") or self.config.application_id)}

        def metric(name: str, description: str, read: Callable[[], float | str]) -> Metric:
            return Metric(MetricName(name, "stream-metrics", tags, description), read)

        return [
            metric("state", "The state of the Kafka Streams client", lambda: self._state.value),
            metric(
                "alive-stream-threads",
                "The current number of alive stream threads that are running or "
                "participating in rebalance",
                lambda: (
                    sum(thread.is_alive() for thread in self._threads)
                    if self._threads
                    else len(self._runtimes)
                ),
            ),
            metric(
                "application-id",
                "The application ID of the Kafka Streams client",
                lambda: self.config.application_id,
            ),
            metric("version", "The version of the Kafka Streams client", lambda: __version__),
        ]


def _task_metadata(
    task: Any,
    committed: dict[tuple[str, int], int] | None = None,
    end_offset: Callable[[str, int], int] | None = None,
) -> TaskMetadata:
    """A task's metadata: its input partitions, with their committed and end
    offsets when given (an active task's)."""
    inputs = [TopicPartition(t, p) for t, p in task.input_partitions()]
    return TaskMetadata(
        task.task_id,
        frozenset(inputs),
        {tp: committed[tp] for tp in inputs if tp in committed} if committed else {},
        {tp: end_offset(*tp) for tp in inputs} if end_offset else {},
    )


@dataclass
class _StreamThread:
    """A started stream thread: its index (Kafka's StreamThread-<index>),
    its runtime (a new one after replace_thread) and its own stop signal."""

    index: int
    runtime: Runtime
    stop: threading.Event
    thread: threading.Thread | None = None


def _below_cache(store: Any) -> Any:
    """The store under the record cache (and the metering around it), for a
    query that skips the cache."""
    if isinstance(store, MeteredStore):
        store = store.inner
    if isinstance(store, CachingKeyValueStore):
        store = store.inner
    return store


def _answer(view: Any, query: Query) -> QueryResult[Any]:
    """``query`` against one partition's store (through its query view)."""
    kv = isinstance(view, ReadOnlyKeyValueView)
    window = isinstance(view, ReadOnlyWindowView)
    session = isinstance(view, ReadOnlySessionView)
    versioned = isinstance(view, ReadOnlyVersionedView)
    try:
        if kv and isinstance(query, KeyQuery):
            return QueryResult.for_result(view.get(query.key))
        if kv and isinstance(query, TimestampedKeyQuery | TimestampedRangeQuery):
            if not view.is_timestamped():
                return QueryResult.for_failure(
                    FailureReason.UNKNOWN_QUERY_TYPE,
                    f"store {view.name!r} keeps no timestamps: ask it a KeyQuery or RangeQuery",
                )
            if isinstance(query, TimestampedKeyQuery):
                return QueryResult.for_result(view.get_with_timestamp(query.key))
            found = view.range_with_timestamps(query.lower, query.upper, reverse=query.descending)
            return QueryResult.for_result(iter(list(found)))
        if versioned and isinstance(query, VersionedKeyQuery):
            return QueryResult.for_result(view.get(query.key, query.as_of_timestamp))
        if versioned and isinstance(query, MultiVersionedKeyQuery):
            records = view.versions(query.key, query.from_timestamp, query.to_timestamp)
            return QueryResult.for_result(iter(records if query.ascending else records[::-1]))
        if kv and isinstance(query, RangeQuery):
            scan = view.reverse_range if query.descending else view.range
            found = scan(query.lower, query.upper)
        elif window and isinstance(query, WindowKeyQuery):
            found = view.fetch(query.key, query.time_from, query.time_to)
        elif (
            window
            and isinstance(query, WindowRangeQuery)
            and query.time_from is not None
            and query.time_to is not None
        ):
            found = view.fetch_all(query.time_from, query.time_to)
        elif session and isinstance(query, WindowRangeQuery) and query.key is not None:
            found = view.fetch(query.key)
        else:
            return QueryResult.for_failure(
                FailureReason.UNKNOWN_QUERY_TYPE,
                f"a {type(view).__name__} of store {view.name!r} does not answer {query!r}",
            )
        # Read now: the iterator is the partition's state at the query.
        return QueryResult.for_result(iter(list(found)))
    except StoreError as exc:
        return QueryResult.for_failure(FailureReason.STORE_EXCEPTION, str(exc))
