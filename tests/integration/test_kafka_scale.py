"""Scale and failure tests against the real broker: instances added while
input flows, a broker stopped mid-stream, local state corrupted between runs.

Results are compared with a plain Python computation of the same input (the
issue's acceptance tests; Kafka Streams' own counterparts are its
integration tests for rebalancing, broker failure and state restoration)."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    produce,
    read_all,
    unique,
    word_count_topology,
)
from tests.integration.test_kafka_streams import lines
from tests.kafka_harness import KafkaCluster
from tests.support import wait_until

from strom import KafkaStreams, serdes
from strom.streams import State

TASKS = {f"{s}_{p}" for s in (0, 1) for p in range(4)}  # word count, 4 partitions


def _tasks(app: KafkaStreams) -> set[str]:
    return {task for tasks in app._local_tasks().values() for task in tasks}


class _Feeder(threading.Thread):
    """Writes lines of text in small batches until stopped, keeping what it wrote."""

    def __init__(self, boot: str, topic: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.boot, self.topic = boot, topic
        self.text = lines(100_000, seed)
        self.written = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set() and self.written < len(self.text):
                batch = self.text[self.written : self.written + 40]
                produce(
                    self.boot,
                    self.topic,
                    (
                        (None, line.encode(), BASE_TS + self.written + i)
                        for i, line in enumerate(batch)
                    ),
                )
                self.written += len(batch)
                self.stop.wait(0.05)  # pace the input: it must still flow while instances join
        except BaseException as exc:
            self.error = exc

    def finish(self) -> Counter[str]:
        self.stop.set()
        self.join(60)
        assert not self.is_alive() and self.error is None, self.error
        return Counter(w for line in self.text[: self.written] for w in line.split())


def _committed_counts(boot: str, sink: str) -> dict[str, list[int]]:
    updates: dict[str, list[int]] = {}
    longs, strings = serdes.Long(), serdes.String()
    for message in read_all(boot, sink):
        key = strings.deserialize(sink, message.key())
        updates.setdefault(key, []).append(longs.deserialize(sink, message.value()))
    return updates


def test_scale_out_from_one_to_three_instances_while_input_flows(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    """exactly_once_v2: the committed output of the three instances holds
    every word's count exactly, each update once (counts rise strictly)."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("scale")
    create_topics(boot, {source: 4, sink: 4})
    topology = word_count_topology(source, sink)
    config = app_config(boot, app_id, "", **{"processing.guarantee": "exactly_once_v2"})
    apps = [
        KafkaStreams(topology, config | {"state.dir": str(tmp_path / name)})
        for name in ("a", "b", "c")
    ]
    feeder = _Feeder(boot, source, seed=31)
    try:
        apps[0].start()
        wait_until(lambda: _tasks(apps[0]) == TASKS, 90, "the first instance to own every task")
        feeder.start()
        wait_until(lambda: apps[0].metrics()["records-processed"] > 0, 90, "processing to start")
        for n in (2, 3):
            apps[n - 1].start()
            wait_until(
                lambda n=n: (
                    all(_tasks(app) for app in apps[:n])  # type: ignore[misc]
                    and sum(len(_tasks(app)) for app in apps[:n]) == len(TASKS)
                ),
                90,
                f"the tasks to spread over {n} instances",
            )
            assert feeder.is_alive(), "the input ran out before the instances joined"
        owned = [_tasks(app) for app in apps]
        assert set().union(*owned) == TASKS
        assert sum(len(tasks) for tasks in owned) == len(TASKS)  # each task on one instance
        assert all(len(tasks) >= 2 for tasks in owned), owned  # spread, not left on one
        expected = dict(feeder.finish())

        def done() -> bool:
            return {k: v[-1] for k, v in _committed_counts(boot, sink).items()} == expected

        wait_until(done, 120, "the committed counts to equal the input's")
        for word, counts in _committed_counts(boot, sink).items():
            assert counts == sorted(set(counts)), f"{word}: {counts}"  # no update twice
        assert all(app.metrics()["records-processed"] > 0 for app in apps)
    finally:
        feeder.stop.set()
        for app in apps:
            app.close()


def test_broker_stopped_mid_stream_on_three_nodes(
    kafka_cluster3: KafkaCluster, tmp_path: Path
) -> None:
    """Replication factor 3, min.insync.replicas 2: the node leading the
    input's first partition stops while the app runs (exactly_once_v2); the
    app carries on with the other two and the committed counts are exact."""
    boot = kafka_cluster3.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("rf3")
    min_isr = {"min.insync.replicas": "2"}
    create_topics(boot, {source: 3, sink: 3}, replication_factor=3, config=min_isr)
    text = lines(3000, seed=32)
    halves = [text[:1500], text[1500:]]
    produce(boot, source, ((None, line.encode(), BASE_TS + i) for i, line in enumerate(halves[0])))
    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{
            "processing.guarantee": "exactly_once_v2",
            "replication.factor": 3,
            "topic.min.insync.replicas": 2,
        },
    )
    admin = AdminClient({"bootstrap.servers": boot})
    with KafkaStreams(word_count_topology(source, sink), config) as app:
        app.start()
        wait_until(lambda: bool(_committed_counts(boot, sink)), 90, "the first committed output")
        leader = admin.list_topics(source, timeout=10).topics[source].partitions[0].leader
        kafka_cluster3.stop_broker(leader)
        produce(
            boot,
            source,
            ((None, line.encode(), BASE_TS + 1500 + i) for i, line in enumerate(halves[1])),
        )
        expected = dict(Counter(w for line in text for w in line.split()))

        def done() -> bool:
            return {k: v[-1] for k, v in _committed_counts(boot, sink).items()} == expected

        wait_until(done, 120, "the committed counts to equal the input's")
        assert app.state in (State.RUNNING, State.REBALANCING)
    for word, counts in _committed_counts(boot, sink).items():
        assert counts == sorted(set(counts)), f"{word}: {counts}"

    # The internal topics: three replicas each, min.insync.replicas from topic.*.
    topics = admin.list_topics(timeout=10).topics
    control = f"{app_id}-shutdown-control"  # shutdown_application's topic (own config)
    internal = [t for t in topics if t.startswith(app_id) and t != control]
    assert len(internal) == 2  # the repartition topic and the counts changelog
    for topic in internal:
        assert all(len(p.replicas) == 3 for p in topics[topic].partitions.values()), topic
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result()
        assert configs["min.insync.replicas"].value == "2", topic


def _frames(segment: bytes) -> list[tuple[int, int, bool]]:
    """(start, end, is commit marker) of each frame of a store segment
    (layout: rust/core/src/store/README.md; markers have a null key)."""
    out, pos = [], 0
    while pos + 28 <= len(segment):
        end = pos + 4 + int.from_bytes(segment[pos : pos + 4], "big")
        key_length = int.from_bytes(segment[pos + 24 : pos + 28], "big", signed=True)
        out.append((pos, end, key_length == -1))
        pos = end
    return out


def _corrupt(store_dir: Path, how: str) -> None:
    segments = sorted(store_dir.glob("*.log"))
    assert segments, f"no segment in {store_dir}"
    path = segments[-1]
    data = bytearray(path.read_bytes())
    frames = _frames(bytes(data))
    puts = [f for f in frames if not f[2]]
    assert puts and frames[-1][2], f"{path}: {frames}"  # data, then a commit
    if how == "flip":
        # A byte of the first put's key or value: committed data, before a marker.
        data[puts[0][0] + 30] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == "truncate":
        path.write_bytes(bytes(data[: puts[-1][1] - 3]))  # cut inside the last put
    else:  # the commit marker after the last put goes, and everything after it
        path.write_bytes(bytes(data[: puts[-1][1]]))


@pytest.mark.parametrize("how", ["flip", "truncate", "drop_commit_marker"])
def test_restart_with_corrupted_local_state(
    kafka: KafkaCluster, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Between two runs the count store's files are damaged: the second run
    detects it (corruption: wiped; a cut tail: reopened as of an earlier
    commit), restores from the changelog and ends with the exact counts.
    Restarts with the state intact or deleted: test_kafka_streams.py."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique(f"corrupt-{how[:4]}")
    create_topics(boot, {source: 2, sink: 2})
    text = lines(1200, seed=33)
    topology = word_count_topology(source, sink)
    config = app_config(boot, app_id, str(tmp_path))
    restored = []
    for run, chunk in enumerate((text[:600], text[600:])):
        produce(
            boot,
            source,
            ((None, line.encode(), BASE_TS + 600 * run + i) for i, line in enumerate(chunk)),
        )
        if run == 1:
            for task in ("1_0", "1_1"):
                _corrupt(tmp_path / app_id / task / "counts", how)
        with caplog.at_level(logging.WARNING), KafkaStreams(topology, config) as app:
            app.run_until_end(timeout=120)
            restored.append(app.metrics()["restored-records"])
            store = {kv.key: kv.value for kv in app.store("counts").all()}
        expected = dict(Counter(w for line in text[: 600 * (run + 1)] for w in line.split()))
        assert store == expected, f"run {run}"
        output = {k: v[-1] for k, v in _committed_counts(boot, sink).items()}
        assert output == expected, f"run {run}"
    assert restored[0] == 0
    assert restored[1] > 0  # the damaged part came back from the changelog
    if how == "flip":
        assert any("is corrupt" in r.getMessage() for r in caplog.records), caplog.text
