"""The Kafka harness against real brokers, through confluent-kafka.

These prove the brokers the fixtures start are usable for strom's Kafka
transport: keyed records land on the partitions strom's murmur2 partitioner
computes, transactions commit and abort, consume-transform-produce commits
offsets atomically, and a three-node cluster keeps serving acks=all writes
with one broker down.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from tests.kafka_harness import (
    REPO_ROOT,
    KafkaCluster,
    _pid_runs,
    java_executable,
    metadata_brokers,
    pid_alive,
    tail,
)
from tests.support import wait_until

from strom._core import partition_for_key

TIMEOUT = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_for(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def partitions_of(admin: AdminClient, topic: str) -> dict[int, Any]:
    """Partition id -> PartitionMetadata (leader, replicas, isrs) as the cluster sees it."""
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return {}
    return dict(md.partitions)


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, replication, config=dict(config or {}))
    admin.create_topics([new], operation_timeout=30)[topic].result(timeout=TIMEOUT)

    def all_replicated() -> bool:
        parts = partitions_of(admin, topic)
        return len(parts) == partitions and all(
            p.leader >= 0 and len(p.isrs) == replication for p in parts.values()
        )

    wait_for(all_replicated, f"{topic} to have a leader and {replication} in-sync replicas")
    return admin


def produce(
    producer: Producer,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes]],
    **kwargs: Any,
) -> list[Message]:
    """Produces and flushes; returns the delivery reports, failing on any error."""
    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=on_delivery, **kwargs)
        producer.poll(0)
    remaining = producer.flush(TIMEOUT)
    assert remaining == 0, f"{remaining} records still undelivered after {TIMEOUT}s"
    assert not errors, f"delivery failed: {errors[:5]}"
    return delivered


def consume(
    bootstrap: str,
    topic: str,
    done: Callable[[list[Message]], bool],
    *,
    group: str | None = None,
    config: Mapping[str, Any] | None = None,
    timeout: float = TIMEOUT,
) -> list[Message]:
    """Subscribes with a fresh group and polls until ``done(messages)``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or unique("group"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **(config or {}),
        }
    )
    messages: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while not done(messages):
            if time.monotonic() > deadline:
                pytest.fail(f"consumed {len(messages)} records from {topic} before timing out")
            for msg in consumer.consume(num_messages=500, timeout=0.5):
                err = msg.error()
                if err is None:
                    messages.append(msg)
                elif not err.retriable():
                    pytest.fail(f"consumer error: {err}")
    finally:
        consumer.close()
    return messages


def test_fixture_exposes_bootstrap_and_logs(kafka: KafkaCluster) -> None:
    host, port = kafka.bootstrap_servers.split(":")
    assert host == "127.0.0.1"
    brokers = metadata_brokers(int(port)).brokers
    assert brokers == {0}
    assert len(kafka.log_paths) == 1
    assert "Kafka Server started" in kafka.log_paths[0].read_text()


def test_keyed_records_land_on_strom_murmur2_partitions(kafka: KafkaCluster) -> None:
    topic = unique("keyed")
    create_topic(kafka.bootstrap_servers, topic, partitions=3)
    rng = random.Random(7)
    # Keys of every length mod 4 (murmur2's tail cases), non-ASCII and binary.
    keys = [f"user-{i}".encode() for i in range(150)]
    keys += [rng.randbytes(rng.randint(1, 40)) for _ in range(100)]
    keys += ["clé-ü-日本".encode(), bytes(range(256)), b"\x00", b"\xff\xff\xff\xff"]
    records = [(key, f"value-{i}".encode()) for i, key in enumerate(keys)]

    # librdkafka defaults to consistent_random (CRC32); murmur2_random is the
    # Java client's partitioner for non-null keys.
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    delivered = produce(producer, topic, records)
    assert len(delivered) == len(records)
    for msg in delivered:
        assert msg.partition() == partition_for_key(msg.key(), 3), msg.key()

    consumed = consume(kafka.bootstrap_servers, topic, lambda ms: len(ms) >= len(records))
    assert sorted((m.key(), m.value()) for m in consumed) == sorted(records)
    produced_order = {key: i for i, (key, _) in enumerate(records)}
    for p in range(3):
        in_partition = [m for m in consumed if m.partition() == p]
        assert in_partition, f"partition {p} got no records"
        assert all(partition_for_key(m.key(), 3) == p for m in in_partition)
        # Offsets are dense and follow produce order within a partition.
        assert [m.offset() for m in in_partition] == list(range(len(in_partition)))
        order = [produced_order[m.key()] for m in in_partition]
        assert order == sorted(order)


def test_transactions_commit_and_abort(kafka: KafkaCluster) -> None:
    topic = unique("txn")
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": unique("txn-id")}
    )
    producer.init_transactions(TIMEOUT)

    def batch(tag: str) -> list[tuple[bytes | None, bytes]]:
        return [(None, f"{tag}{i}".encode()) for i in range(10)]

    producer.begin_transaction()
    produce(producer, topic, batch("a"))
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    # produce() flushes, so the aborted records really reach the log.
    produce(producer, topic, batch("b"))
    producer.abort_transaction(TIMEOUT)
    producer.begin_transaction()
    produce(producer, topic, batch("c"))
    producer.commit_transaction(TIMEOUT)

    def saw_last(ms: list[Message]) -> bool:
        return any(m.value() == b"c9" for m in ms)

    committed = consume(
        kafka.bootstrap_servers, topic, saw_last, config={"isolation.level": "read_committed"}
    )
    assert [m.value() for m in committed] == [v for _, v in batch("a") + batch("c")]

    # The aborted records are in the log, only hidden from read_committed.
    everything = consume(
        kafka.bootstrap_servers, topic, saw_last, config={"isolation.level": "read_uncommitted"}
    )
    assert [m.value() for m in everything] == [v for _, v in batch("a") + batch("b") + batch("c")]

    # 30 records and one commit/abort marker per transaction.
    probe = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": unique("probe")})
    try:
        low, high = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        probe.close()
    assert (low, high) == (0, 33)


def test_consume_transform_produce_commits_offsets_in_the_transaction(
    kafka: KafkaCluster,
) -> None:
    source, sink, group = unique("in"), unique("out"), unique("app")
    create_topic(kafka.bootstrap_servers, source, partitions=2)
    create_topic(kafka.bootstrap_servers, sink, partitions=2)
    plain = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "partitioner": "murmur2_random"}
    )
    inputs = [(f"k{i}".encode(), f"{i}".encode()) for i in range(40)]
    produce(plain, source, inputs)

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    producer = Producer(
        {"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": unique("eos")}
    )
    producer.init_transactions(TIMEOUT)
    try:
        consumer.subscribe([source])
        seen = 0
        deadline = time.monotonic() + TIMEOUT
        while seen < len(inputs):
            assert time.monotonic() < deadline, f"transformed only {seen} records"
            msgs = [m for m in consumer.consume(100, timeout=0.5) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, key=m.key(), value=b"x" + m.value())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                TIMEOUT,
            )
            producer.commit_transaction(TIMEOUT)
            seen += len(msgs)

        per_partition = {
            p: sum(1 for k, _ in inputs if partition_for_key(k, 2) == p) for p in (0, 1)
        }
        partitions = [TopicPartition(source, 0), TopicPartition(source, 1)]

        # The offsets went into the group through the transaction, not a consumer
        # commit; they become stable once the coordinator has written the markers.
        def committed() -> dict[int, int]:
            try:
                return {tp.partition: tp.offset for tp in consumer.committed(partitions, 5)}
            except KafkaException:
                return {}

        wait_until(lambda: committed() == per_partition, TIMEOUT, "transactional offsets")
    finally:
        consumer.close()
    outputs = consume(
        kafka.bootstrap_servers,
        sink,
        lambda ms: len(ms) >= len(inputs),
        config={"isolation.level": "read_committed"},
    )
    assert sorted((m.key(), m.value()) for m in outputs) == sorted((k, b"x" + v) for k, v in inputs)


def test_replicated_topic_survives_a_broker_failure(kafka_cluster3: KafkaCluster) -> None:
    cluster = kafka_cluster3
    topic = unique("replicated")
    admin = create_topic(
        cluster.bootstrap_servers,
        topic,
        partitions=3,
        replication=3,
        config={"min.insync.replicas": "2"},
    )
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "acks": "all",
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    before = [(f"k{i}".encode(), f"before-{i}".encode()) for i in range(100)]
    produce(producer, topic, before)

    # Stop the leader of partition 0, so at least one leadership must move.
    victim = partitions_of(admin, topic)[0].leader
    cluster.stop_broker(victim)
    try:
        assert victim not in cluster.running()

        def failed_over() -> bool:
            parts = partitions_of(admin, topic)
            return len(parts) == 3 and all(
                p.leader not in (-1, victim) and victim not in p.isrs and len(p.isrs) == 2
                for p in parts.values()
            )

        wait_for(failed_over, f"leaders to move off broker {victim}")
        during = [(f"k{i}".encode(), f"during-{i}".encode()) for i in range(100)]
        produce(producer, topic, during)  # acks=all with 2 of 3 in sync: accepted
        consumed = consume(
            cluster.bootstrap_servers, topic, lambda ms: len(ms) >= len(before) + len(during)
        )
        assert sorted(m.value() for m in consumed) == sorted(v for _, v in before + during)
    finally:
        cluster.start_broker(victim)

    def fully_replicated() -> bool:
        parts = partitions_of(admin, topic)
        return len(parts) == 3 and all(sorted(p.isrs) == [0, 1, 2] for p in parts.values())

    wait_for(fully_replicated, f"broker {victim} to rejoin every ISR")
    after = [(f"k{i}".encode(), f"after-{i}".encode()) for i in range(20)]
    produce(producer, topic, after)


def test_script_starts_reports_and_stops_a_broker(tmp_path: Path) -> None:
    script = REPO_ROOT / "scripts" / "kafka"
    env = {**os.environ, "PYTHON": sys.executable}
    run_dir = tmp_path / "run"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(script), *args, "--dir", str(run_dir)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    started = run("start")
    assert started.returncode == 0, started.stderr
    try:
        bootstrap = started.stdout.strip()
        assert bootstrap.startswith("127.0.0.1:")
        assert "pid" in started.stderr and "server.log" in started.stderr
        log = run_dir / "node-0" / "server.log"
        try:
            meta = metadata_brokers(int(bootstrap.rsplit(":", 1)[1]))
        except OSError as e:
            raise AssertionError(f"{bootstrap} refused after start: {e}\n{tail(log)}") from e
        assert meta.brokers == {0}
        assert meta.cluster_id == KafkaCluster.attach(run_dir).cluster_id
        status = run("status")
        assert status.returncode == 0, status.stdout + status.stderr
        pid = int((run_dir / "node-0" / "kafka.pid").read_text())
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not pid_alive(pid)
    assert not (run_dir / "node-0" / "kafka.pid").exists()
    assert run("status").returncode == 1


def test_a_jvm_just_launched_counts_as_running_and_a_zombie_does_not() -> None:
    """A detached node is found by its pid and command line. The java
    launcher shows an empty command line for a moment after it starts; read
    as "not running", that once let `scripts/kafka start` find no node to
    wait for and report a broker ready before it listened. A zombie (exited,
    not reaped) shows an empty command line too, and is not running."""
    java = java_executable()
    for i in range(10):
        marker = f"-Dstrom.harness.check={i}"
        proc = subprocess.Popen([java, marker, "-version"], stderr=subprocess.DEVNULL)
        try:
            assert _pid_runs(proc.pid, marker), f"launch {i} not seen running"
        finally:
            proc.wait()
    zombie = subprocess.Popen([java, "-version"], stderr=subprocess.DEVNULL)
    wait_until(
        lambda: Path(f"/proc/{zombie.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z",
        timeout=30,
        what="the JVM to exit",
    )
    assert not _pid_runs(zombie.pid, "java")
    zombie.wait()
