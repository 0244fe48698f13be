"""Runs one system on one workload against a broker, and measures it.

Per run: the driver process is started on the pre-loaded input topics; the
clock starts when it says "ready" (right before it starts processing, so
imports and JVM start-up are not counted, but group join and task set-up are)
and stops at the first poll (every 50 ms) that finds every input partition and
every internal topic of the app (repartition, foreign-key join topics)
committed up to its end offset — or, for systems that stop at the end of
their input (Bytewax), when the driver says "done". With a commit interval
of 100 ms that is at most ~150 ms late.

CPU-seconds are the user + system time of the driver's process tree between
those two instants, read from /proc (the kernel's exact per-process counters,
no sampling, no extra dependency; Linux only, like the broker harness). Peak
RSS is the sum of each process's VmHWM (the kernel's high-water mark of
resident memory) at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.peers.protocol import NOT_EXPRESSIBLE
from benches.sidebyside.systems import System
from benches.sidebyside.workloads import Dataset, Record, Workload
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.cimpl import KafkaException

POLL_S = 0.05
TICKS = os.sysconf("SC_CLK_TCK")


class RunError(RuntimeError):
    """A run failed (the driver died, or it did not finish in time)."""


@dataclass
class Measurement:
    system: str
    workload: str
    round: int
    status: str  # ok | mismatch | n/a | error
    app_id: str = ""
    records: int = 0  # input records the workload reads
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    output_records: int = 0
    # From the first commit seen to the end: without start-up (group join, JIT warm-up);
    # 0 when the system commits no offsets.
    steady_records_per_s: float = 0.0
    digest: list[int] = field(default_factory=list)
    expected: list[int] = field(default_factory=list)
    reason: str = ""

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def records_per_cpu_s(self) -> float:
        return self.records / self.cpu_seconds if self.cpu_seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["records_per_s"] = round(self.records_per_s)
        out["records_per_cpu_s"] = round(self.records_per_cpu_s)
        return out


# --------------------------------------------------------------------------
# Processes


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with contextlib.suppress(OSError):
                    todo += [
                        int(c)
                        for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()
                    ]
    return pids


def tree_cpu_seconds(pid: int) -> float:
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def tree_peak_rss_bytes(pid: int) -> int:
    total = 0
    for p in _tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
    return total


class Driver:
    """A system's driver process, its protocol lines on a queue."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        self._stderr = open(log, "wb")  # noqa: SIM115 - closed in stop()
        repo = Path(__file__).resolve().parents[2]
        # strom from this checkout when it is built here (a worktree's own
        # build), not whatever the interpreter's editable install points at.
        built = any((repo / "python" / "strom").glob("_core*.so"))
        paths = [repo / "python", repo] if built else [repo]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths))}
        self.proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, env=env
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with contextlib.suppress(ValueError):
                message = json.loads(raw)
                if isinstance(message, dict) and "event" in message:
                    self.lines.put(message)

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
        return ""

    def event(self, timeout: float) -> dict[str, Any] | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def stop(self, *, graceful: bool = True, timeout: float = 60.0) -> None:
        """SIGTERM and a clean shutdown; or, when the run is over and its output
        committed, SIGKILL (a clean shutdown would only cost the suite time)."""
        if self.proc.poll() is None:
            if graceful:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
            else:
                self.proc.kill()
            self.proc.wait()
        self._stderr.close()


# --------------------------------------------------------------------------
# The broker side


class Broker:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.watermarks = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "sbs-watermarks",
                "enable.auto.commit": False,
            }
        )

    def close(self) -> None:
        self.watermarks.close()

    def topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=30).topics)

    def create_topics(self, topics: dict[str, int]) -> None:
        # No retention by time: the data sets' event times may be hours old.
        new = [NewTopic(t, n, 1, config={"retention.ms": "-1"}) for t, n in topics.items()]
        for topic, future in self.admin.create_topics(new).items():
            error = future.exception()
            if error is not None and "TOPIC_ALREADY_EXISTS" not in str(error):
                raise RunError(f"cannot create topic {topic}: {error}")
        deadline = time.monotonic() + 30
        while not set(topics) <= self.topics():
            if time.monotonic() > deadline:
                raise RunError(f"topics {sorted(topics)} did not appear")
            time.sleep(0.05)

    def end_offsets(self, topic: str) -> dict[int, int]:
        partitions = self.admin.list_topics(topic, timeout=30).topics[topic].partitions
        return {
            p: self.watermarks.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        from confluent_kafka import ConsumerGroupTopicPartitions  # noqa: PLC0415

        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        try:
            result = futures[group].result()
        except KafkaException:
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}

    def load(self, dataset: Dataset, partitions: int) -> dict[str, int]:
        """Writes the data set once (topics are named after it); returns records per role."""
        topics = dataset.topics()
        if set(topics.values()) <= self.topics():
            counts = {r: sum(self.end_offsets(t).values()) for r, t in topics.items()}
            if all(counts.values()):
                return counts
        self.create_topics(dict.fromkeys(topics.values(), partitions))
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                # Java's default partitioner, so every system sees Kafka's key placement.
                "partitioner": "murmur2_random",
                # Idempotence keeps each partition in produce (event-time) order.
                "enable.idempotence": True,
                "linger.ms": 20,
                "batch.size": 1_000_000,
                "queue.buffering.max.messages": 2_000_000,
                "queue.buffering.max.kbytes": 1_048_576,
            }
        )
        counts = dict.fromkeys(topics, 0)
        for role, keys, values, stamps in dataset.rows():
            topic = topics[role]
            for k, v, t in zip(keys, values, stamps, strict=True):
                while True:
                    try:
                        producer.produce(topic, v, k, timestamp=t)
                        break
                    except BufferError:
                        producer.poll(0.05)
            producer.poll(0)
            counts[role] += len(values)
        if producer.flush(300) != 0:
            raise RunError(f"could not write data set {dataset.name}")
        return counts

    def read(self, topic: str) -> Iterator[Record]:
        """Every record of ``topic`` (read_committed), partition by partition in offset order."""
        ends = self.end_offsets(topic)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"sbs-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.max.bytes": 64 * 1024 * 1024,
                "max.partition.fetch.bytes": 16 * 1024 * 1024,
            }
        )
        try:
            for partition, end in sorted(ends.items()):
                if end == 0:
                    continue
                consumer.assign([TopicPartition(topic, partition, 0)])
                position = 0
                idle = time.monotonic()
                while position < end:
                    # A short timeout: at the end of a partition consume() waits it out.
                    batch = consumer.consume(10_000, 0.05)
                    if not batch and time.monotonic() - idle > 10:
                        break  # the rest are transaction markers or aborted records
                    for m in batch:
                        if m.error() is None:
                            position = m.offset() + 1
                            idle = time.monotonic()
                            yield m.key(), m.value()
                consumer.unassign()
        finally:
            consumer.close()

    def delete_topics(self, topics: list[str]) -> None:
        if topics:
            for future in self.admin.delete_topics(topics).values():
                with contextlib.suppress(KafkaException):
                    future.result()


def _progress(broker: Broker, group: str, inputs: dict[str, dict[int, int]]) -> tuple[bool, int]:
    """Whether the group has committed everything, and how many input records it has."""
    committed = broker.committed(group)
    done, count = True, 0
    for topic, ends in inputs.items():
        for p, end in ends.items():
            offset = committed.get((topic, p), -1)
            count += max(offset, 0)
            done &= offset >= end
    if not done:
        return False, count
    # Internal topics the app reads too (repartition, foreign-key join): those named after
    # the app id and any other topic the group has committed offsets for.
    internal = {t for t in broker.topics() if group in t and "changelog" not in t}
    internal |= {t for t, _p in committed} - set(inputs)
    for topic in internal:
        ends = broker.end_offsets(topic)
        if any(committed.get((topic, p), -1) < end for p, end in ends.items() if end > 0):
            return False, count
    return True, count


def app_args(
    broker: Broker,
    workload: Workload,
    app_id: str,
    inputs: dict[str, str],
    output: str,
    guarantee: str,
    commit_interval_ms: int,
    threads: int,
) -> list[str]:
    """A driver's command-line arguments (benches/peers/protocol.py), in a
    fresh state directory."""
    return [
        "--bootstrap",
        broker.bootstrap,
        "--workload",
        workload.name,
        "--app-id",
        app_id,
        "--inputs",
        json.dumps(inputs),
        "--output",
        output,
        "--guarantee",
        guarantee,
        "--commit-interval-ms",
        str(commit_interval_ms),
        "--threads",
        str(threads),
        "--state-dir",
        tempfile.mkdtemp(prefix="sbs-state-"),
    ]


def measure(
    broker: Broker,
    system: System,
    workload: Workload,
    dataset: Dataset,
    loaded: dict[str, int],
    *,
    round_: int,
    partitions: int,
    guarantee: str,
    commit_interval_ms: int,
    threads: int,
    timeout: float,
    logs: Path,
) -> tuple[Measurement, str]:
    """Runs and measures one round; returns the measurement and the output topic."""
    uid = uuid.uuid4().hex[:8]
    app_id = f"{system.name}-{workload.name}-{uid}".replace("_", "-")
    output = f"out-{workload.name}-{uid}".replace("_", "-")
    broker.create_topics({output: partitions})
    inputs = {role: dataset.topic(role) for role in workload.roles}
    result = Measurement(system.name, workload.name, round_, "ok", app_id)
    result.records = sum(loaded[role] for role in workload.roles)
    ends = {topic: broker.end_offsets(topic) for topic in inputs.values()}
    args = app_args(
        broker, workload, app_id, inputs, output, guarantee, commit_interval_ms, threads
    )
    driver = Driver(system.command(args), logs / f"{app_id}.log")
    graceful = True
    try:
        message = driver.event(timeout=180)
        if message is None or message["event"] not in ("ready", "n/a"):
            raise RunError(f"{system.name} did not start:\n{driver.tail()}")
        if message["event"] == "n/a":
            driver.proc.wait(30)
            result.status, result.reason = "n/a", message["reason"]
            return result, output
        started = time.time()
        cpu0 = tree_cpu_seconds(driver.proc.pid)
        deadline = time.monotonic() + timeout
        first_commit: tuple[float, int] | None = None
        while True:
            message = driver.event(timeout=0 if system.commits else POLL_S)
            if message is not None and message["event"] == "done":
                finished = time.time()
                break
            if driver.proc.poll() is not None:
                code = driver.proc.returncode
                if code == NOT_EXPRESSIBLE:
                    raise RunError(f"{system.name} exited: not expressible")
                raise RunError(f"{system.name} exited with {code}:\n{driver.tail()}")
            if time.monotonic() > deadline:
                raise RunError(f"{system.name} did not finish in {timeout:.0f} s:\n{driver.tail()}")
            if system.commits:
                now = time.time()
                done, committed = _progress(broker, app_id, ends)
                if first_commit is None and committed > 0:
                    first_commit = (now, committed)
                if done:
                    finished = now
                    break
                time.sleep(POLL_S)
        result.cpu_seconds = tree_cpu_seconds(driver.proc.pid) - cpu0
        result.peak_rss_mb = tree_peak_rss_bytes(driver.proc.pid) / 2**20
        result.seconds = finished - started
        # Everything up to the end offsets is processed and its output flushed (a commit
        # follows the flush of the producer; Bytewax flushes before it ends).
        graceful = not system.flushes_before_commit
        if first_commit is not None and finished > first_commit[0]:
            result.steady_records_per_s = (result.records - first_commit[1]) / (
                finished - first_commit[0]
            )
    finally:
        driver.stop(graceful=graceful)
    return result, output
