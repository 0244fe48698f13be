"""Fault tests: two instances of a windowed count, each in its own process,
share the input (one partition each); one is killed with SIGKILL mid-stream
and the other takes its task over (after the group's session timeout) and
finishes the work.

Under exactly_once_v2 the committed output (read_committed) must hold every
update exactly once: each key's counts rise strictly and end at the expected
totals. Under at_least_once nothing may be missing (the final counts may be
higher, but every window must be there). Kill points are chosen by how much
its partition the killed instance has committed, drawn at random from a seeded
generator (``STROM_FAULT_SEED``, shown in each test id so a failure
reruns): five kill points per guarantee by default, ``STROM_SOAK_RUNS``
more per guarantee in the ``soak`` run (``pytest -m soak``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.kafka_support import (
    BASE_TS,
    WINDOW_MS,
    create_topics,
    produce,
    read_all,
    unique,
)
from tests.kafka_harness import REPO_ROOT, KafkaCluster
from tests.support import wait_until

from strom import serdes

RECORDS = 2000
PARTITIONS = 2
SEED = int(os.environ.get("STROM_FAULT_SEED", "20261122"))
SOAK_RUNS = int(os.environ.get("STROM_SOAK_RUNS", "20"))


def kill_points(guarantee: str, runs: int, seed: int = SEED) -> list[tuple[float, int]]:
    """``runs`` (fraction of the input committed when killed, data seed)
    pairs for ``guarantee``, drawn from ``seed``."""
    rng = random.Random(f"{seed}-{guarantee}")
    return [(round(rng.uniform(0.05, 0.9), 3), rng.randrange(1 << 30)) for _ in range(runs)]


def _ids(points: list[tuple[float, int]]) -> list[str]:
    return [f"killed-at-{fraction:.0%}-data-{seed}" for fraction, seed in points]


def _records(seed: int) -> list[tuple[bytes, bytes, int]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(10)}".encode(), b"x", BASE_TS + i * 29) for i in range(RECORDS)]


def _committed(boot: str, app_id: str, source: str) -> dict[int, int]:
    """The group's committed offset per partition of ``source`` (0 if none).
    A plain consumer of the group's id asks (it never joins the group); the
    AdminClient's group-offsets call can crash confluent-kafka while the
    coordinator is still loading."""
    consumer = Consumer({"bootstrap.servers": boot, "group.id": app_id})
    try:
        tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
        return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, timeout=10)}
    except KafkaException:
        return dict.fromkeys(range(PARTITIONS), 0)  # e.g. the coordinator is loading
    finally:
        consumer.close()


def _partitions_by_pid(boot: str, app_id: str) -> dict[int, set[int]]:
    """Which input partitions each instance (by process id) owns, once the
    group is stable; empty while it is not. Members are told apart by their
    client.id, which holds the instance's process id."""
    admin = AdminClient({"bootstrap.servers": boot})
    try:
        group = admin.describe_consumer_groups([app_id], request_timeout=10)[app_id].result()
    except KafkaException:
        return {}
    if group.state != ConsumerGroupState.STABLE:
        return {}
    owned: dict[int, set[int]] = {}
    for member in group.members:
        pid = int(member.client_id.split(f"{app_id}-", 1)[1].split("-", 1)[0])
        owned[pid] = {tp.partition for tp in member.assignment.topic_partitions}
    return owned


def _check_in_time_order(boot: str, source: str) -> dict[int, int]:
    """The expected counts assume no record is late: each partition of the
    input must be in timestamp order (a retried, reordered produce batch
    once made these tests fail with windows missing). Returns the number of
    records per partition."""
    last: dict[int, int] = {}
    sizes: Counter[int] = Counter()
    for message in read_all(boot, source, committed_only=False):
        partition, timestamp = message.partition(), message.timestamp()[1]
        assert timestamp >= last.get(partition, timestamp), (
            f"input {source}-{partition} is out of timestamp order at offset {message.offset()}"
        )
        last[partition] = timestamp
        sizes[partition] += 1
    return dict(sizes)


def _start_instance(
    boot: str, app_id: str, source: str, sink: str, state: Path, guarantee: str
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "python"), str(REPO_ROOT)])
    return subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("kafka_app.py")),
            boot,
            app_id,
            source,
            sink,
            str(state),
            guarantee,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _while_alive(condition: Callable[[], bool], *instances: Any) -> Callable[[], bool]:
    """``condition``, failing the test if an instance has exited meanwhile."""

    def check() -> bool:
        for instance in instances:
            assert instance.poll() is None, "an instance exited by itself"
        return condition()

    return check


def _kill_and_finish(
    kafka: KafkaCluster, tmp_path: Path, guarantee: str, fraction: float, seed: int
) -> tuple[dict[str, list[int]], dict[str, int]]:
    """Two instances share the input, one partition each; the victim is
    killed once ``fraction`` of its partition is committed, and the other
    takes its task over and finishes it."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("events"), unique("windows"), unique(f"kill{seed}")
    create_topics(boot, {source: PARTITIONS, sink: PARTITIONS})
    victim, survivor = instances = [
        _start_instance(boot, app_id, source, sink, tmp_path / name, guarantee)
        for name in ("victim", "survivor")
    ]
    try:
        owned: dict[int, set[int]] = {}

        def shared() -> bool:
            owned.clear()
            owned.update(_partitions_by_pid(boot, app_id))
            return all(len(owned.get(p.pid, ())) == 1 for p in instances)

        wait_until(_while_alive(shared, *instances), 90, "the instances to share the input")
        (victims,) = owned[victim.pid]
        records = _records(seed)
        produce(boot, source, records)
        sizes = _check_in_time_order(boot, source)
        wait_until(
            _while_alive(
                lambda: _committed(boot, app_id, source)[victims] >= fraction * sizes[victims],
                *instances,
            ),
            90,
            f"{fraction:.0%} of {source}-{victims} to be committed",
        )
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        assert _committed(boot, app_id, source)[victims] < sizes[victims], (
            "killed too late: the victim had finished its partition"
        )
        wait_until(
            _while_alive(
                lambda: sum(_committed(boot, app_id, source).values()) == RECORDS, survivor
            ),
            120,
            "the survivor to commit the whole input",
        )
    finally:
        for instance in instances:
            if instance.poll() is None:
                instance.terminate()  # a clean close
            try:
                instance.wait(timeout=60)
            except subprocess.TimeoutExpired:
                instance.kill()
                instance.wait()

    updates: dict[str, list[int]] = {}
    for message in read_all(boot, sink, committed_only=True):
        key = serdes.String().deserialize(sink, message.key())
        updates.setdefault(key, []).append(serdes.Long().deserialize(sink, message.value()))
    expected = dict(Counter(f"{k.decode()}@{ts // WINDOW_MS * WINDOW_MS}" for k, _, ts in records))
    return updates, expected


def _check_exactly_once(updates: dict[str, list[int]], expected: dict[str, int]) -> None:
    wrong = {
        key: (updates.get(key), total)
        for key, total in expected.items()
        if not updates.get(key) or updates[key][-1] != total
    }
    # Every update of a wrong window, for the next one who reads a failure.
    assert not wrong, f"(committed updates, expected) of wrong windows: {wrong}"
    assert set(updates) == set(expected)
    for key, counts in updates.items():
        # No update applied twice, none emitted twice.
        assert counts == sorted(set(counts)), f"{key}: {counts}"


def _check_at_least_once(updates: dict[str, list[int]], expected: dict[str, int]) -> None:
    assert set(updates) == set(expected)
    for key, total in expected.items():
        assert max(updates[key]) >= total, key


EOS_POINTS = kill_points("exactly_once_v2", 5)
ALOS_POINTS = kill_points("at_least_once", 5)


@pytest.mark.parametrize(("fraction", "seed"), EOS_POINTS, ids=_ids(EOS_POINTS))
def test_exactly_once_survives_sigkill(
    kafka: KafkaCluster, tmp_path: Path, fraction: float, seed: int
) -> None:
    _check_exactly_once(*_kill_and_finish(kafka, tmp_path, "exactly_once_v2", fraction, seed))


@pytest.mark.parametrize(("fraction", "seed"), ALOS_POINTS, ids=_ids(ALOS_POINTS))
def test_at_least_once_loses_nothing(
    kafka: KafkaCluster, tmp_path: Path, fraction: float, seed: int
) -> None:
    _check_at_least_once(*_kill_and_finish(kafka, tmp_path, "at_least_once", fraction, seed))


@pytest.mark.soak
@pytest.mark.parametrize("guarantee", ["exactly_once_v2", "at_least_once"])
def test_soak_sigkill_at_random_points(kafka: KafkaCluster, tmp_path: Path, guarantee: str) -> None:
    """``STROM_SOAK_RUNS`` more kill points per guarantee, after the five of
    the default run (same seed: the soak extends that sequence)."""
    check = _check_exactly_once if guarantee == "exactly_once_v2" else _check_at_least_once
    points = kill_points(guarantee, 5 + SOAK_RUNS)[5:]
    for run, (fraction, seed) in enumerate(points):
        where = tmp_path / f"run{run}"
        where.mkdir()
        try:
            check(*_kill_and_finish(kafka, where, guarantee, fraction, seed))
        except AssertionError as exc:
            raise AssertionError(
                f"run {run}: killed at {fraction:.0%}, data seed {seed}, "
                f"STROM_FAULT_SEED={SEED}: {exc}"
            ) from exc
