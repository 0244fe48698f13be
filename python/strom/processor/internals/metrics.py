"""Kafka Streams' built-in metrics for one stream thread (Kafka's
StreamsMetricsImpl with ThreadMetrics, TaskMetrics, the record cache's and
the suppression buffer's metrics), and the consumer's ``records-lag``.

Nothing here runs per record: the thread records its loop once per poll,
process round and commit; the tasks' counters (plain ints the nodes bump once
per batch) are turned into rates by :meth:`ThreadMetrics.sync` about once a
second; everything else is read when a metric is read. Record lateness (DEBUG)
is the one exception, measured by the task as Kafka does, per record.
"""

from __future__ import annotations

import functools
import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from strom import _core
from strom.metrics import RECORDING_LEVELS, Metric, MetricName

if TYPE_CHECKING:
    from strom.config import StreamsConfig
    from strom.processor.internals.task import StreamTask

INFO, DEBUG, TRACE = range(3)

THREAD_GROUP = "stream-thread-metrics"
TASK_GROUP = "stream-task-metrics"
CACHE_GROUP = "stream-record-cache-metrics"
STATE_GROUP = "stream-state-metrics"
CLIENT_GROUP = "stream-metrics"
CONSUMER_GROUP = "consumer-fetch-manager-metrics"
NODE_GROUP = "stream-processor-node-metrics"

# How often the tasks' counters are sampled into their rates.
SYNC_INTERVAL_S = 1.0


def recording_level(config: StreamsConfig) -> int:
    return RECORDING_LEVELS.index(config["metrics.recording.level"])


class Sensor:
    """Values recorded once per batch or loop iteration. Like Kafka's sampled
    stats, averages, maxima and rates cover the last ``samples`` windows of
    ``window_ms``; ``count`` and ``total`` are cumulative."""

    __slots__ = ("_buckets", "_samples", "_window", "count", "total")

    def __init__(self, window_ms: int, samples: int) -> None:
        self._window = window_ms / 1000
        self._samples = samples
        # [window start (monotonic s), count, sum, max]
        self._buckets: deque[list[float]] = deque()
        self.count = 0
        self.total = 0.0

    def record(self, value: float, count: int = 1, peak: float | None = None) -> None:
        """``count`` observations summing to ``value`` (their largest: ``peak``)."""
        now = time.monotonic()
        buckets = self._buckets
        if not buckets or now - buckets[-1][0] >= self._window:
            buckets.append([now, 0, 0.0, -math.inf])
            if len(buckets) > self._samples:
                buckets.popleft()
        bucket = buckets[-1]
        bucket[1] += count
        bucket[2] += value
        bucket[3] = max(bucket[3], value if peak is None else peak)
        self.count += count
        self.total += value

    def _live(self, now: float) -> list[list[float]]:
        horizon = self._window * self._samples
        return [b for b in list(self._buckets) if now - b[0] < horizon]

    def avg(self) -> float:
        live = self._live(time.monotonic())
        count = sum(b[1] for b in live)
        return sum(b[2] for b in live) / count if count else math.nan

    def max(self) -> float:
        live = self._live(time.monotonic())
        return max(b[3] for b in live) if live else math.nan

    def rate(self, of_sum: bool = False) -> float:
        """Observations (or, ``of_sum``, their sum) per second over the
        window; like Kafka's Rate, a young window counts as
        ``samples - 1`` whole windows."""
        now = time.monotonic()
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = max(now - live[0][0], self._window * (self._samples - 1), 1e-3)
        return sum(b[2 if of_sum else 1] for b in live) / elapsed


class _Counted:
    """A rate over a cumulative counter read from elsewhere (a task's plain
    int), fed by :meth:`ThreadMetrics.sync`."""

    __slots__ = ("last", "read", "sensor")

    def __init__(self, read: Callable[[], int], window_ms: int, samples: int) -> None:
        self.read = read
        self.sensor = Sensor(window_ms, samples)
        self.last = read()

    def sync(self) -> None:
        now = self.read()
        if now != self.last:
            self.sensor.record(now - self.last, now - self.last)
            self.last = now


@runtime_checkable
class SuppressionBuffer(Protocol):
    """What a suppression node shows of its buffer (KTableSuppress)."""

    store_name: str
    total_size: int
    times: Any  # sized: one entry per buffered key


class TaskSensors:
    """One active or standby task's sensors."""

    def __init__(self, task: StreamTask, level: int, window_ms: int, samples: int) -> None:
        def counted(read: Callable[[], int]) -> _Counted:
            return _Counted(read, window_ms, samples)

        self.task = task
        metrics = task.metrics
        self.dropped = counted(lambda: metrics.dropped_records + metrics.skipped_records)
        self.restored = counted(lambda: task.state.restored_records)
        self.processed = counted(lambda: metrics.records_processed) if level >= DEBUG else None
        self.process_latency = Sensor(window_ms, samples) if level >= DEBUG else None
        if level >= DEBUG:
            task.lateness = Sensor(window_ms, samples)
        self.buffers: dict[str, tuple[Sensor, Sensor]] = {}
        # Per node: records in (Kafka's processor-node process-rate, DEBUG).
        self.nodes: dict[str, _Counted] = {}
        if level >= DEBUG:
            for name, node in task.nodes.items():
                self.nodes[name] = counted(_records_in(node))
            for node in task.nodes.values():
                if isinstance(node, SuppressionBuffer):
                    self.buffers[node.name] = (
                        Sensor(window_ms, samples),
                        Sensor(window_ms, samples),
                    )

    def sync(self) -> None:
        self.dropped.sync()
        self.restored.sync()
        if self.processed is not None:
            self.processed.sync()
        for node_counter in self.nodes.values():
            node_counter.sync()
        for node_name, (size, count) in self.buffers.items():
            node: Any = self.task.nodes[node_name]
            size.record(node.total_size)
            count.record(len(node.times))


class ThreadMetrics:
    """The sensors of one stream thread and of its tasks."""

    def __init__(self, config: StreamsConfig) -> None:
        self.level = recording_level(config)
        self.window_ms = config["metrics.sample.window.ms"]
        self.samples = config["metrics.num.samples"]
        sensor = self._sensor
        self.poll = sensor()
        self.poll_records = sensor()
        self.process = sensor()  # records per process round
        # Each round's time over its records: the average is per record.
        self.process_latency = sensor()
        self.commit = sensor()
        self.punctuate = sensor()
        self.task_created = sensor()
        self.task_closed = sensor()
        self.start_time_ms = time.time_ns() // 1_000_000
        self.tasks: dict[str, TaskSensors] = {}
        self._last_sync = 0.0

    def _sensor(self) -> Sensor:
        return Sensor(self.window_ms, self.samples)

    @property
    def debug(self) -> bool:
        return self.level >= DEBUG

    # --- recording ----------------------------------------------------------------
    def task_sensors(self, task: StreamTask) -> TaskSensors:
        sensors = self.tasks.get(task.task_id)
        if sensors is None or sensors.task is not task:  # new, or reopened
            sensors = self.tasks[task.task_id] = TaskSensors(
                task, self.level, self.window_ms, self.samples
            )
            self.task_created.record(1)
        return sensors

    def drop_task(self, task_id: str) -> None:
        if self.tasks.pop(task_id, None) is not None:
            self.task_closed.record(1)

    def sync(self, tasks: Iterable[StreamTask], force: bool = False) -> None:
        """Samples the tasks' counters into their rates (about once a second)."""
        now = time.monotonic()
        if not force and now - self._last_sync < SYNC_INTERVAL_S:
            return
        self._last_sync = now
        for task in tasks:
            self.task_sensors(task).sync()

    # --- reading ------------------------------------------------------------------
    def thread_metrics(self, thread_id: str) -> list[Metric]:
        tags = {"thread-id": thread_id}
        out: list[Metric] = []
        for op, sensor in (
            ("poll", self.poll),
            ("commit", self.commit),
            ("punctuate", self.punctuate),
        ):
            out += _invocations(THREAD_GROUP, tags, op, sensor, f"calls to {op}")
            out += _latency(THREAD_GROUP, tags, op, sensor)
        out += [
            _metric(
                THREAD_GROUP,
                tags,
                "process-rate",
                "The average number of calls to process per second",
                lambda: self.process.rate(of_sum=True),
            ),
            _metric(
                THREAD_GROUP,
                tags,
                "process-total",
                "The total number of calls to process",
                lambda: self.process.total,
            ),
        ]
        out += _latency(THREAD_GROUP, tags, "process", self.process_latency)
        for op, sensor in (
            ("poll", self.poll),
            ("process", self.process_latency),
            ("commit", self.commit),
            ("punctuate", self.punctuate),
        ):
            out.append(_ratio(tags, op, sensor))
        for op, sensor in (("poll", self.poll_records), ("process", self.process)):
            out += _avg_max(
                THREAD_GROUP, tags, f"{op}-records", sensor, f"records {op}ed within an iteration"
            )
        for op, sensor in (("task-created", self.task_created), ("task-closed", self.task_closed)):
            out += _invocations(THREAD_GROUP, tags, op, sensor, op.replace("-", " ") + " tasks")
        out.append(
            _metric(
                THREAD_GROUP,
                tags,
                "thread-start-time",
                "The time that the thread was started",
                lambda: self.start_time_ms,
            )
        )
        return out

    def task_metrics(
        self,
        thread_id: str,
        task: StreamTask,
        cache: _core.NativeThreadCache | None,
        standby: bool = False,
    ) -> list[Metric]:
        sensors = self.tasks.get(task.task_id)
        if sensors is None or sensors.task is not task:
            return []
        tags = {"thread-id": thread_id, "task-id": task.task_id}
        metrics = task.metrics
        state = task.state
        out: list[Metric] = []
        if standby:
            return [
                _metric(
                    TASK_GROUP,
                    tags,
                    "update-total",
                    "The total number of records updated on a standby task",
                    lambda: state.restored_records,
                ),
                _metric(
                    TASK_GROUP,
                    tags,
                    "update-rate",
                    "The average number of records updated on a standby task per second",
                    lambda: sensors.restored.sensor.rate(of_sum=True),
                ),
            ]
        out += [
            _metric(
                TASK_GROUP,
                tags,
                "dropped-records-total",
                "The total number of dropped records",
                lambda: metrics.dropped_records + metrics.skipped_records,
            ),
            _metric(
                TASK_GROUP,
                tags,
                "dropped-records-rate",
                "The average number of dropped records per second",
                lambda: sensors.dropped.sensor.rate(of_sum=True),
            ),
            _metric(
                TASK_GROUP,
                tags,
                "restore-total",
                "The total number of records restored",
                lambda: state.restored_records,
            ),
            _metric(
                TASK_GROUP,
                tags,
                "restore-rate",
                "The average number of records restored per second",
                lambda: sensors.restored.sensor.rate(of_sum=True),
            ),
            _metric(
                TASK_GROUP,
                tags,
                "restore-remaining-records-total",
                "The number of records remaining to be restored",
                lambda: state.restore_remaining,
            ),
        ]
        if sensors.processed is not None:
            processed = sensors.processed.sensor
            out += [
                _metric(
                    TASK_GROUP,
                    tags,
                    "process-total",
                    "The total number of calls to process",
                    lambda: metrics.records_processed,
                ),
                _metric(
                    TASK_GROUP,
                    tags,
                    "process-rate",
                    "The average number of calls to process per second",
                    lambda: processed.rate(of_sum=True),
                ),
            ]
        if sensors.process_latency is not None:
            out += _latency(TASK_GROUP, tags, "process", sensors.process_latency)
        if task.lateness is not None:
            out += _avg_max(
                TASK_GROUP,
                tags,
                "record-lateness",
                task.lateness,
                "lateness of records in milliseconds, measured by comparing the record "
                "timestamp with the current stream time",
            )
        if self.debug:
            out += _node_metrics(tags, task, sensors)
            out += _cache_metrics(thread_id, task, cache)
            out += _store_metrics(tags, task)
            for node_name, (size, count) in sensors.buffers.items():
                node: Any = task.nodes[node_name]
                buffer_tags = {**tags, "in-memory-suppression-state-id": node.store_name}
                out += _avg_max(
                    STATE_GROUP,
                    buffer_tags,
                    "suppression-buffer-size",
                    size,
                    "size of buffered records in bytes",
                )
                out += _avg_max(
                    STATE_GROUP,
                    buffer_tags,
                    "suppression-buffer-count",
                    count,
                    "count of buffered records",
                )
        return out


def _records_in(node: Any) -> Callable[[], int]:
    return lambda: int(node.records_in)


def _node_metrics(
    task_tags: dict[str, str], task: StreamTask, sensors: TaskSensors
) -> list[Metric]:
    """Each node's ``process-total`` and ``process-rate`` (records that
    reached it)."""
    out = []
    for name, counter in sensors.nodes.items():
        node = task.nodes[name]
        tags = {**task_tags, "processor-node-id": name}
        out += [
            _metric(
                NODE_GROUP,
                tags,
                "process-total",
                "The total number of calls to process",
                _records_in(node),
            ),
            _metric(
                NODE_GROUP,
                tags,
                "process-rate",
                "The average number of calls to process per second",
                functools.partial(counter.sensor.rate, of_sum=True),
            ),
        ]
    return out


def _cache_metrics(
    thread_id: str, task: StreamTask, cache: _core.NativeThreadCache | None
) -> list[Metric]:
    """hit-ratio-avg of each of the task's record caches: hits over reads
    since the cache opened, counted in the native cache."""
    out: list[Metric] = []
    if cache is None:
        return out
    for name, store in task.stores.items():
        # A caching store: its named cache in the thread's cache.
        cache_id = getattr(store, "_id", None)
        if cache_id is None or getattr(store, "_cache", None) is not cache:
            continue
        tags = {"thread-id": thread_id, "task-id": task.task_id, "record-cache-id": name}
        ratio = _hit_ratio(store._cache, cache_id)
        out.append(
            _metric(CACHE_GROUP, tags, "hit-ratio-avg", "The average cache hit ratio", ratio)
        )
    return out


def _store_metrics(task_tags: dict[str, str], task: StreamTask) -> list[Metric]:
    """Each metered store's operations: ``<op>-rate`` and ``<op>-latency-avg``/``-max``."""
    out = []
    for name, store in list(task.metered_stores.items()):
        tags = {**task_tags, f"{store.scope}-state-id": name}
        for op, sensor in list(store.sensors.items()):
            out.append(
                _metric(
                    STATE_GROUP,
                    tags,
                    f"{op}-rate",
                    f"The average number of {op} per second",
                    sensor.rate,
                )
            )
            out += _latency(STATE_GROUP, tags, op, sensor)
    return out


def _hit_ratio(cache: _core.NativeThreadCache, cache_id: int) -> Callable[[], float]:
    def ratio() -> float:
        hits, misses = cache.hit_stats(cache_id)
        return hits / (hits + misses) if hits + misses else math.nan

    return ratio


def lag_metrics(
    client_id: str, inputs: Iterable[tuple[str, int]], lag: Callable[[str, int], int | None]
) -> list[Metric]:
    """The consumer's ``records-lag`` per input partition: the partition's
    end offset (as last fetched) minus the thread's position."""
    out = []
    for topic, partition in inputs:
        tags = {"client-id": client_id, "topic": topic, "partition": str(partition)}

        def read(topic: str = topic, partition: int = partition) -> float:
            value = lag(topic, partition)
            return math.nan if value is None else value

        out.append(
            _metric(CONSUMER_GROUP, tags, "records-lag", "The latest lag of the partition", read)
        )
    return out


def _metric(
    group: str, tags: dict[str, str], name: str, description: str, read: Callable[[], float | str]
) -> Metric:
    return Metric(MetricName(name, group, tags, description), read)


def _invocations(
    group: str, tags: dict[str, str], op: str, sensor: Sensor, what: str
) -> list[Metric]:
    return [
        _metric(group, tags, f"{op}-rate", f"The average number of {what} per second", sensor.rate),
        _metric(group, tags, f"{op}-total", f"The total number of {what}", lambda: sensor.count),
    ]


def _ratio(tags: dict[str, str], op: str, sensor: Sensor) -> Metric:
    """The share of the window's time the thread spent in ``op`` (its
    sensor's values are milliseconds spent)."""
    return _metric(
        THREAD_GROUP,
        tags,
        f"{op}-ratio",
        f"The fraction of time the thread spent on {op}",
        lambda: sensor.rate(of_sum=True) / 1000,
    )


def _latency(group: str, tags: dict[str, str], op: str, sensor: Sensor) -> list[Metric]:
    return _avg_max(group, tags, f"{op}-latency", sensor, f"{op} latency in milliseconds")


def _avg_max(
    group: str, tags: dict[str, str], name: str, sensor: Sensor, what: str
) -> list[Metric]:
    return [
        _metric(group, tags, f"{name}-avg", f"The average {what}", sensor.avg),
        _metric(group, tags, f"{name}-max", f"The maximum {what}", sensor.max),
    ]
