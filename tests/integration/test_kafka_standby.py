"""Standby tasks (``num.standby.replicas``) on a real broker: each of two
instances keeps a warm copy of the other's task state from its changelog;
when one instance stops, the other takes its task over and restores only
what its standby had not read, not the whole changelog. Without standbys
the same takeover restores the changelog in full."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    latest_by_key,
    produce,
    read_all,
    unique,
)
from tests.kafka_harness import KafkaCluster

from strom import KafkaStreams, StreamsBuilder, Topology, _core, serdes
from strom.errors import ConfigError, InvalidStateStoreError
from strom.kafka.standby import place_standbys
from strom.kstream import Materialized
from strom.processor import StandbyUpdateListener, SuspendReason
from strom.streams import State

KEYS = 3000


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _count_topology(source: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
        .group_by_key()
        .count(Materialized("counts"))
        .to_stream()
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


def _records(n: int, seed: int) -> list[tuple[bytes, bytes, int]]:
    rng = random.Random(seed)
    return [(f"k{rng.randrange(KEYS)}".encode(), b"x", BASE_TS + i) for i in range(n)]


def _active(app: KafkaStreams) -> set[str]:
    return {task for tasks in app._local_tasks().values() for task in tasks}


def _standbys(app: KafkaStreams) -> Any:
    standbys = app._runtimes[0].standbys  # type: ignore[attr-defined]
    assert standbys is not None
    return standbys


def _changelog_size(boot: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": boot, "group.id": "standby-test-probe"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high - low)
    finally:
        consumer.close()


class _Updates(StandbyUpdateListener):
    """What a StandbyUpdateListener hears."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_update_start(self, *args: Any) -> None:
        self.calls.append(("start", *args))

    def on_batch_loaded(self, *args: Any) -> None:
        self.calls.append(("batch", *args))

    def on_update_suspended(self, *args: Any) -> None:
        self.calls.append(("suspended", *args))

    def of(self, kind: str) -> list[tuple[Any, ...]]:
        return [c[1:] for c in self.calls if c[0] == kind]


def _takeover(kafka: KafkaCluster, tmp_path: Path, replicas: int) -> tuple[int, int]:
    """Two instances share a count's two tasks; the second stops and the
    first takes its task over. Returns (records the takeover restored, the
    moved task's changelog size when the second instance stopped)."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("events"), unique("counts"), unique(f"standby{replicas}")
    create_topics(boot, {source: 2, sink: 2})
    records = _records(20_000, seed=replicas)
    produce(boot, source, records)
    topology = _count_topology(source, sink)
    config = {"num.standby.replicas": replicas}
    first = KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / "a"), **config))
    second = KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / "b"), **config))
    heard = _Updates()
    first.set_standby_update_listener(heard)
    with first:
        # The second instance starts alone and counts everything, then the
        # first joins: the task that stays on the second is one the first
        # never ran (it can only have a standby of it).
        second.start()
        expected = dict(Counter(k.decode() for k, _, _ in records))
        _wait_for(
            lambda: latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected,
            "the counts of the second instance",
        )
        first.start()
        _wait_for(
            lambda: len(_active(first)) == 1 and len(_active(second)) == 1,
            "one task on each instance",
        )
        if replicas:
            # Each instance keeps a standby of the other's task, caught up.
            _wait_for(
                lambda: (
                    set(_standbys(first).tasks) == _active(second)
                    and set(_standbys(second).tasks) == _active(first)
                    and _standbys(first).lag() == 0
                ),
                "each instance's standby of the other's task to catch up",
            )
            assert _standbys(first).records > 0
            (thread,) = first.metadata_for_local_threads()
            assert {t.task_id for t in thread.standby_tasks} == _active(second)
            assert {t.task_id for t in thread.active_tasks} == _active(first)
            assert thread.consumer_client_id.endswith("-StreamThread-1-consumer")
            assert thread.restore_consumer_client_id.endswith("-StreamThread-1-restore-consumer")
            assert {p.rsplit("-", 1)[-1] for p in thread.producer_client_ids} == {"producer"}
            # allLocalStorePartitionLags: the active task's store and the
            # standby's, each at its changelog's end once caught up.
            [active] = [int(t.split("_")[1]) for t in _active(first)]
            [standby] = [int(t.split("_")[1]) for t in _active(second)]
            lags = first.all_local_store_partition_lags()
            assert set(lags) == {"counts"} and set(lags["counts"]) == {active, standby}
            for lag in lags["counts"].values():
                assert lag.offset_lag == 0
                assert lag.current_offset_position == lag.end_offset_position > 0
            # Kafka's enableStaleStores: the standby's store answers queries
            # for its partition, caught up with the other instance's counts.
            held = {
                word: count
                for word, count in expected.items()
                if _core.partition_for_key(word.encode(), 2) == standby
            }
            assert dict(first.store("counts", partition=standby, stale_stores=True).all()) == held
            with pytest.raises(InvalidStateStoreError, match="not on this instance"):
                first.store("counts", partition=standby).get(next(iter(held)))
            # Kafka's standby metric: what the standby applied (of its changelog).
            updates = first.metrics().value("update-total", "stream-task-metrics")
            assert 0 < updates <= _standbys(first).records
        moved = next(iter(_active(second)))
        restored_before = first.metrics()["restored-records"]
        second.close()
        changelog = _changelog_size(boot, f"{app_id}-counts-changelog", int(moved.split("_")[1]))
        _wait_for(lambda: len(_active(first)) == 2, "the first instance to take both tasks")
        _wait_for(lambda: first.state is State.RUNNING, "the first instance to run again")
        more = _records(2_000, seed=10 + replicas)
        produce(boot, source, [(k, v, ts + 20_000) for k, v, ts in more])
        expected = dict(Counter(k.decode() for k, _, _ in records + more))
        _wait_for(
            lambda: latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected,
            "exact counts after the takeover",
        )
        restored = first.metrics()["restored-records"] - restored_before
        if replicas:
            # The moved task's standby is now active: none left to keep.
            assert not _standbys(first).tasks
            # Kafka's StandbyUpdateListener heard the standby start, every
            # batch it applied, and its end when its task moved here: a
            # promotion, or (when the placement let it go first, as the
            # task's owner left) a migration.
            changelog_topic = f"{app_id}-counts-changelog"
            moved_partition = (changelog_topic, int(moved.split("_")[1]))
            starts, suspended = heard.of("start"), heard.of("suspended")
            # Every standby it opened (while the group settled, maybe one of
            # the other task too) was suspended by now: none is left.
            assert sorted(c[0] for c in starts) == sorted(c[0] for c in suspended)
            assert all(c[0][0] == changelog_topic and c[1] == "counts" for c in starts + suspended)
            batches = heard.of("batch")
            assert sum(size for *_, size, _end in batches) == _standbys(first).records
            assert all(last < end for *_, last, _size, end in batches)
            mine = [b for b in batches if b[0] == moved_partition]
            assert mine and all(b[2] == moved for b in mine)
            *_, position, end, reason = [c for c in suspended if c[0] == moved_partition][-1]
            assert reason in (SuspendReason.PROMOTED, SuspendReason.MIGRATED)
            assert position == mine[-1][3] + 1 and position <= end
        else:
            assert heard.calls == []
    return restored, changelog


def test_a_standby_makes_failover_restore_only_the_tail(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    restored, changelog = _takeover(kafka, tmp_path, replicas=1)
    assert changelog > 1_000
    assert restored < changelog // 10, (restored, changelog)


def test_without_standbys_failover_restores_the_whole_changelog(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    restored, changelog = _takeover(kafka, tmp_path, replicas=0)
    assert changelog > 1_000
    # The instance never held the moved task: it restores all of it.
    assert restored >= changelog, (restored, changelog)


def test_standby_placement_is_deterministic_and_never_on_the_active_instance() -> None:
    active = {"0_0": "a", "0_1": "b", "0_2": "c", "1_0": "a"}
    placed = place_standbys(active, ["c", "b", "a"], 1)
    assert placed == {"0_0": ["b"], "0_1": ["c"], "0_2": ["a"], "1_0": ["b"]}
    two = place_standbys(active, ["a", "b", "c"], 2)
    assert two["0_0"] == ["b", "c"] and two["0_2"] == ["a", "b"]
    # More replicas than other instances: as many as there are.
    assert place_standbys({"0_0": "a"}, ["a", "b"], 3) == {"0_0": ["b"]}
    assert place_standbys({"0_0": "a"}, ["a"], 1) == {"0_0": []}
    for task, hosts in place_standbys(active, ["a", "b", "c", "d"], 3).items():
        assert active[task] not in hosts and len(hosts) == len(set(hosts)) == 3


def test_standbys_with_several_stream_threads_are_refused() -> None:
    config = {
        "application.id": "standby-threads",
        "bootstrap.servers": "127.0.0.1:1",
        "num.standby.replicas": 1,
        "num.stream.threads": 2,
    }
    with pytest.raises(ConfigError, match=r"num\.standby\.replicas needs num\.stream\.threads = 1"):
        KafkaStreams(_count_topology("in", "out"), config).start()
