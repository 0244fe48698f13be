"""KafkaStreams on a real broker (at_least_once): results equal what a plain
Python computation of the same input gives."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from tests.integration.kafka_support import (
    BASE_TS,
    WINDOW_MS,
    app_config,
    create_topics,
    latest_by_key,
    produce,
    read_all,
    unique,
    windowed_count_topology,
    word_count_topology,
)
from tests.kafka_harness import KafkaCluster

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.cli import main
from strom.errors import SerializationError, TopologyError
from strom.kafka import reset_application
from strom.processor import StateRestoreListener
from strom.streams import State

WORDS = [f"w{i}" for i in range(40)]


def lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(n)]


def test_word_count_equals_counter(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("wc")
    create_topics(boot, {source: 3, sink: 3})
    text = lines(2000, seed=1)
    produce(boot, source, ((None, line.encode(), BASE_TS + i) for i, line in enumerate(text)))

    topology = word_count_topology(source, sink)
    with KafkaStreams(topology, app_config(boot, app_id, str(tmp_path))) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["records-processed"] > 0
        store = dict((kv.key, kv.value) for kv in app.store("counts").all())

    expected = Counter(word for line in text for word in line.split())
    output = latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long())
    assert output == dict(expected)
    assert store == dict(expected)

    # Internal topics as Kafka Streams makes them.
    admin = AdminClient({"bootstrap.servers": boot})
    topics = admin.list_topics(timeout=10).topics
    changelog = f"{app_id}-counts-changelog"
    repartition = [t for t in topics if t.startswith(app_id) and t.endswith("-repartition")]
    assert len(repartition) == 1 and len(topics[repartition[0]].partitions) == 3
    assert len(topics[changelog].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"


def keyed_records(n: int, seed: int, start_ts: int = BASE_TS) -> list[tuple[bytes, bytes, int]]:
    """Keyed records with increasing timestamps (no record is late)."""
    rng = random.Random(seed)
    return [(f"k{rng.randrange(12)}".encode(), b"x", start_ts + i * 37) for i in range(n)]


def expected_windows(records: list[tuple[bytes, bytes, int]]) -> dict[str, int]:
    return dict(Counter(f"{k.decode()}@{ts // WINDOW_MS * WINDOW_MS}" for k, _, ts in records))


def test_windowed_count(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("events"), unique("windows"), unique("win")
    create_topics(boot, {source: 2, sink: 2})
    records = keyed_records(3000, seed=2)
    produce(boot, source, records)
    topology = windowed_count_topology(source, sink)
    with KafkaStreams(topology, app_config(boot, app_id, str(tmp_path))) as app:
        app.run_until_end(timeout=120)
    output = latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long())
    assert output == expected_windows(records)
    admin = AdminClient({"bootstrap.servers": boot})
    changelog = f"{app_id}-window-counts-changelog"
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelog)
    configs = admin.describe_configs([resource])[resource].result()
    assert set(configs["cleanup.policy"].value.split(",")) == {"compact", "delete"}


def test_a_java_apps_properties_run_on_the_broker(kafka: KafkaCluster, tmp_path: Path) -> None:
    """Kafka Streams keys librdkafka does not know (it refused them when they
    reached the clients), earlier key names and Java client names, as a Java
    app's properties carry them: the app runs, and the keys strom honours
    take effect."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("events"), unique("windows"), unique("java")
    create_topics(boot, {source: 2, sink: 2})
    records = keyed_records(500, seed=3)
    produce(boot, source, records)
    java = {
        "cache.max.bytes.buffering": 0,
        "default.deserialization.exception.handler": "log_and_fail",
        "topology.optimization": "all",
        "task.timeout.ms": 300_000,
        "state.cleanup.delay.ms": 600_000,
        "acceptable.recovery.lag": 10_000,
        "rocksdb.config.setter": "com.example.Setter",
        "receive.buffer.bytes": 65_536,
        "send.buffer.bytes": 131_072,
        "global.consumer.fetch.wait.max.ms": 250,
        "windowstore.changelog.additional.retention.ms": 3_600_000,
    }
    config = app_config(boot, app_id, str(tmp_path)) | java
    with KafkaStreams(windowed_count_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
    output = latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long())
    assert output == expected_windows(records)
    admin = AdminClient({"bootstrap.servers": boot})
    resource = ConfigResource(ConfigResource.Type.TOPIC, f"{app_id}-window-counts-changelog")
    retention = int(admin.describe_configs([resource])[resource].result()["retention.ms"].value)
    # The store's retention (its windows' size; no grace) plus the hour asked for.
    assert retention == WINDOW_MS + 3_600_000


def test_restart_with_state_intact_and_deleted(kafka: KafkaCluster, tmp_path: Path) -> None:
    """Three runs over growing input: the second reopens its local state, the
    third starts from an empty state dir and restores from the changelog."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("restart")
    create_topics(boot, {source: 2, sink: 2})
    text = lines(1500, seed=3)
    thirds = [text[:500], text[500:1000], text[1000:]]
    topology = word_count_topology(source, sink)
    restored = []
    heard: list[list[tuple[Any, ...]]] = []
    for run, chunk in enumerate(thirds):
        produce(boot, source, ((None, line.encode(), BASE_TS) for line in chunk))
        state_dir = tmp_path / ("first" if run < 2 else "second")
        with KafkaStreams(topology, app_config(boot, app_id, str(state_dir))) as app:
            listener = _RestoreRecorder()
            app.set_global_state_restore_listener(listener)
            app.run_until_end(timeout=120)
            restored.append(app.metrics()["restored-records"])
            heard.append(listener.calls)
        seen = [w for line in text[: 500 * (run + 1)] for w in line.split()]
        output = latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long())
        assert output == dict(Counter(seen)), f"run {run}"
    assert restored[1] == 0  # local state was up to date
    assert restored[2] > 0  # rebuilt from the changelog
    # The restore listener heard nothing when nothing was restored, and for
    # the rebuild each changelog partition's start, batches and end.
    assert heard[0] == heard[1] == []
    starts = [c for c in heard[2] if c[0] == "start"]
    ends = {c[1]: c[3] for c in heard[2] if c[0] == "end"}
    batches = [c for c in heard[2] if c[0] == "batch"]
    assert {c[1] for c in starts} == set(ends) == {c[1] for c in batches}
    assert all(c[2] == "counts" and c[3] == 0 and c[4] > 0 for c in starts)
    assert sum(ends.values()) == sum(c[4] for c in batches) == restored[2]


class _RestoreRecorder(StateRestoreListener):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_restore_start(self, tp: tuple[str, int], store: str, start: int, end: int) -> None:
        self.calls.append(("start", tp, store, start, end))

    def on_batch_restored(self, tp: tuple[str, int], store: str, last: int, count: int) -> None:
        self.calls.append(("batch", tp, store, last, count))

    def on_restore_end(self, tp: tuple[str, int], store: str, total: int) -> None:
        self.calls.append(("end", tp, store, total))


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _tasks(app: KafkaStreams) -> set[str]:
    return {task for tasks in app._local_tasks().values() for task in tasks}


def test_two_instances_share_the_partitions(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("pair")
    create_topics(boot, {source: 4, sink: 4})
    topology = word_count_topology(source, sink)
    first = KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / "a")))
    second = KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / "b")))
    with first, second:
        first.start()
        _wait_for(lambda: len(_tasks(first)) == 8, "the first instance to own every task")
        second.start()
        # Two sub-topologies x 4 partitions, spread over both instances.
        _wait_for(
            lambda: _tasks(second) and len(_tasks(first)) + len(_tasks(second)) == 8,
            "the tasks to spread",
        )
        assert _tasks(first).isdisjoint(_tasks(second))
        assert _tasks(first) | _tasks(second) == {f"{s}_{p}" for s in (0, 1) for p in range(4)}
        _wait_for(
            lambda: first.state is State.RUNNING and second.state is State.RUNNING,
            "both instances to finish rebalancing",
        )

        text = lines(2000, seed=4)
        produce(boot, source, ((None, line.encode(), BASE_TS + i) for i, line in enumerate(text)))
        expected = dict(Counter(w for line in text for w in line.split()))
        _wait_for(
            lambda: latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected,
            "the counts of both instances to add up",
        )
        processed = [app.metrics()["records-processed"] for app in (first, second)]
        assert all(n > 0 for n in processed)


def _long_records(topic_values: list[bytes]) -> list[tuple[bytes, bytes, int]]:
    return [(b"k", value, BASE_TS + i) for i, value in enumerate(topic_values)]


def _poison_topology(source: str, sink: str) -> Any:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.Long())
        .map_values(lambda v: v * 10)
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


def test_poison_record_log_and_continue_with_dead_letters(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, dead, app_id = unique("in"), unique("out"), unique("dlq"), unique("poison")
    create_topics(boot, {source: 1, sink: 1, dead: 1})
    longs = serdes.Long()
    values = [longs.serialize(source, n) for n in range(50)]
    values.insert(20, b"bad")  # 3 bytes: not a Long
    produce(boot, source, _long_records(values))
    config = app_config(
        boot,
        app_id,
        str(tmp_path),
        **{
            "deserialization.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": dead,
        },
    )
    with KafkaStreams(_poison_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["skipped-records"] == 1
    output = [longs.deserialize(sink, m.value()) for m in read_all(boot, sink)]
    assert output == [n * 10 for n in range(50)]  # nothing before or after it lost
    assert [m.value() for m in read_all(boot, dead)] == [b"bad"]


def test_poison_record_log_and_fail_names_the_record(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("fail")
    create_topics(boot, {source: 1, sink: 1})
    longs = serdes.Long()
    values = [longs.serialize(source, n) for n in range(10)]
    values.insert(7, b"bad")
    produce(boot, source, _long_records(values))
    app = KafkaStreams(_poison_topology(source, sink), app_config(boot, app_id, str(tmp_path)))
    with app, pytest.raises(SerializationError, match=rf"{source}-0@7\b"):
        app.run_until_end(timeout=120)
    assert app.state is State.ERROR


def test_reset_reprocesses_from_scratch(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("reset")
    create_topics(boot, {source: 2, sink: 2})
    text = lines(600, seed=5)
    produce(boot, source, ((None, line.encode(), BASE_TS + i) for i, line in enumerate(text)))
    topology = word_count_topology(source, sink)
    config = app_config(boot, app_id, str(tmp_path))
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=120)
        first = app.metrics()["records-processed"]

    assert (
        main(
            [
                "reset",
                "--application-id",
                app_id,
                "--bootstrap-servers",
                boot,
                "--state-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    admin = AdminClient({"bootstrap.servers": boot})
    _wait_for(
        lambda: not [t for t in admin.list_topics(timeout=10).topics if t.startswith(app_id)],
        "the internal topics to be deleted",
    )
    assert not (tmp_path / app_id).exists()

    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=120)
        # Everything again, from an empty state: counts are not doubled.
        assert app.metrics()["records-processed"] == first
        assert app.metrics()["restored-records"] == 0
    expected = dict(Counter(w for line in text for w in line.split()))
    assert latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected


def test_reset_deletes_the_foreign_key_join_topics(kafka: KafkaCluster, tmp_path: Path) -> None:
    """A foreign-key join's subscription topics are internal topics (Kafka's
    StreamsResetter rule): the reset deletes them with the changelogs."""
    boot = kafka.bootstrap_servers
    orders, products, sink, app_id = (
        unique("orders"),
        unique("products"),
        unique("out"),
        unique("fk"),
    )
    create_topics(boot, {orders: 2, products: 3, sink: 2})
    produce(boot, products, ((f"p{i}".encode(), f"name-{i}".encode(), BASE_TS) for i in range(5)))
    produce(
        boot, orders, ((f"o{i}".encode(), f"p{i % 5}".encode(), BASE_TS + i) for i in range(50))
    )
    builder = StreamsBuilder()
    strings = {"key_serde": serdes.String(), "value_serde": serdes.String()}
    product_table = builder.table(products, **strings)
    (
        builder.table(orders, **strings)
        .join(product_table, lambda product, name: name, foreign_key=lambda product: product)
        .to_stream()
        .to(sink, **strings)
    )
    with KafkaStreams(builder.build(), app_config(boot, app_id, str(tmp_path))) as app:
        app.run_until_end(timeout=120)
    admin = AdminClient({"bootstrap.servers": boot})
    internal = {t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{app_id}-")}
    foreign_key_topics = {t for t in internal if t.endswith("-topic")}
    assert len(foreign_key_topics) == 2, internal

    result = reset_application(app_id, boot, state_dir=str(tmp_path))
    assert set(result.topics_deleted) == internal
    _wait_for(
        lambda: not [t for t in admin.list_topics(timeout=10).topics if t.startswith(app_id)],
        "the internal topics to be deleted",
    )


# --- the word count with its tasks on stream threads ---------------------------


def word_count_topics(kafka: KafkaCluster, name: str, partitions: int) -> tuple[str, str, str]:
    """Fresh source and sink topics of ``partitions`` each, and an app id."""
    source, sink, app_id = unique("text"), unique("counts"), unique(name)
    create_topics(kafka.bootstrap_servers, {source: partitions, sink: partitions})
    return source, sink, app_id


def produce_lines(boot: str, source: str, text: list[str], first_ts: int = BASE_TS) -> None:
    produce(boot, source, ((None, line.encode(), first_ts + i) for i, line in enumerate(text)))


def counts_of(boot: str, sink: str, text: list[str]) -> Callable[[], bool]:
    """Whether the sink's latest counts are those of ``text``'s words."""
    expected = dict(Counter(word for line in text for word in line.split()))
    return lambda: latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected


def every_task(partitions: int) -> list[str]:
    """The word count's tasks: both sub-topologies, every partition."""
    return sorted(f"{s}_{p}" for s in (0, 1) for p in range(partitions))


def test_stream_threads_share_the_tasks(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = word_count_topics(kafka, "threads", 4)
    text = lines(1500, seed=6)
    produce_lines(boot, source, text)
    config = app_config(boot, app_id, str(tmp_path), **{"num.stream.threads": 2})
    with KafkaStreams(word_count_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
        threads = app._local_tasks()
        # Every task of both sub-topologies, each on exactly one of the two threads.
        assert len(threads) == 2 and all(threads.values())
        owned = [task for tasks in threads.values() for task in tasks]
        assert sorted(owned) == every_task(4)
        store = {kv.key: kv.value for kv in app.store("counts").all()}
    expected = dict(Counter(w for line in text for w in line.split()))
    assert store == expected
    assert latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected


def test_started_stream_threads_split_the_tasks(kafka: KafkaCluster, tmp_path: Path) -> None:
    """Started in the background, the two threads of an instance end up with
    the tasks split between them, whichever joined the group first."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = word_count_topics(kafka, "split", 4)
    config = app_config(boot, app_id, str(tmp_path), **{"num.stream.threads": 2})
    all_tasks = every_task(4)
    with KafkaStreams(word_count_topology(source, sink), config) as app:
        app.start()

        def split() -> bool:
            threads = app._local_tasks()
            owned = sorted(t for tasks in threads.values() for t in tasks)
            return app.state is State.RUNNING and all(threads.values()) and owned == all_tasks

        _wait_for(split, "both stream threads to own tasks, every task once")


def test_missing_source_topic_is_named(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink = unique("absent"), unique("out")
    create_topics(boot, {sink: 1})
    app = KafkaStreams(
        word_count_topology(source, sink), app_config(boot, unique("m"), str(tmp_path))
    )
    with app, pytest.raises(TopologyError, match=source):
        app.run_until_end(timeout=60)


def test_join_inputs_with_different_partition_counts_are_named(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    left, right, sink = unique("left"), unique("right"), unique("out")
    create_topics(boot, {left: 2, right: 3, sink: 2})
    builder = StreamsBuilder()
    table = builder.table(right, key_serde=serdes.String(), value_serde=serdes.String())
    (
        builder.stream(left, key_serde=serdes.String(), value_serde=serdes.String())
        .join(table, lambda v, tv: f"{v}+{tv}")
        .to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    )
    app = KafkaStreams(builder.build(), app_config(boot, unique("j"), str(tmp_path)))
    with app, pytest.raises(TopologyError, match=rf"{left} \(2\).*{right} \(3\)"):
        app.run_until_end(timeout=60)


def test_internal_topic_with_the_wrong_partition_count_is_refused(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("wrong")
    create_topics(boot, {source: 2, sink: 2, f"{app_id}-counts-changelog": 5})
    app = KafkaStreams(word_count_topology(source, sink), app_config(boot, app_id, str(tmp_path)))
    with app, pytest.raises(TopologyError, match=rf"{app_id}-counts-changelog has 5 partition"):
        app.run_until_end(timeout=60)


def test_global_table_join(kafka: KafkaCluster, tmp_path: Path) -> None:
    """The global table is bootstrapped before processing and needs no
    co-partitioning (3 partitions against the stream's 2)."""
    boot = kafka.bootstrap_servers
    orders, products, sink = unique("orders"), unique("products"), unique("out")
    create_topics(boot, {orders: 2, products: 3, sink: 2})
    names = {f"p{i}": f"product-{i}" for i in range(20)}
    produce(boot, products, ((k.encode(), v.encode(), BASE_TS) for k, v in names.items()))
    order_list = [(f"o{i}", f"p{i % 25}") for i in range(200)]  # p20..p24 are unknown
    produce(
        boot, orders, ((o.encode(), p.encode(), BASE_TS + i) for i, (o, p) in enumerate(order_list))
    )
    builder = StreamsBuilder()
    table = builder.global_table(products, key_serde=serdes.String(), value_serde=serdes.String())
    (
        builder.stream(orders, key_serde=serdes.String(), value_serde=serdes.String())
        .join(table, lambda _k, product: product, lambda o, name: f"{o}={name}")
        .to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    )
    with KafkaStreams(builder.build(), app_config(boot, unique("global"), str(tmp_path))) as app:
        app.run_until_end(timeout=120)
    output = latest_by_key(read_all(boot, sink), serdes.String(), serdes.String())
    expected = {o: f"{p}={names[p]}" for o, p in order_list if p in names}
    assert output == expected


def test_consumed_repartition_records_are_purged(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("purge")
    create_topics(boot, {source: 2, sink: 2})
    text = lines(300, seed=7)
    produce(boot, source, ((None, line.encode(), BASE_TS + i) for i, line in enumerate(text)))
    config = app_config(boot, app_id, str(tmp_path), **{"repartition.purge.interval.ms": 0})
    with KafkaStreams(word_count_topology(source, sink), config) as app:
        app.run_until_end(timeout=120)
    consumer = Consumer({"bootstrap.servers": boot, "group.id": unique("probe")})
    try:
        topics = consumer.list_topics(timeout=10).topics
        repartition = [t for t in topics if t.startswith(app_id) and t.endswith("-repartition")]
        assert len(repartition) == 1

        def purged() -> bool:
            marks = [
                consumer.get_watermark_offsets(TopicPartition(repartition[0], p), timeout=10)
                for p in range(2)
            ]
            return sum(high for _, high in marks) > 0 and all(lo == hi for lo, hi in marks)

        _wait_for(purged, "the repartition topic to be purged up to the committed offsets")
    finally:
        consumer.close()


def test_replace_thread_redoes_the_uncommitted_work(kafka: KafkaCluster, tmp_path: Path) -> None:
    """A user function fails once; the handler replaces the stream thread,
    which restarts from the last commit: every record comes out once more
    at most, none is missing."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("in"), unique("out"), unique("replace")
    create_topics(boot, {source: 1, sink: 1})
    longs = serdes.Long()
    produce(boot, source, _long_records([longs.serialize(source, n) for n in range(100)]))
    failures: list[BaseException] = []

    def once(value: int) -> int:
        if value == 60 and not failures:
            raise RuntimeError("boom")
        return value * 10

    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.Long())
        .map_values(once)
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )

    def handler(exc: BaseException) -> str:
        failures.append(exc)
        return "replace_thread"

    app = KafkaStreams(builder.build(), app_config(boot, app_id, str(tmp_path)))
    app.set_uncaught_exception_handler(handler)
    with app:
        app.start()
        _wait_for(
            lambda: (
                len(read_all(boot, sink)) >= 100
                and {longs.deserialize(sink, m.value()) for m in read_all(boot, sink)}
                == {n * 10 for n in range(100)}
            ),
            "every record to come out after the thread was replaced",
        )
        assert app.state in (State.RUNNING, State.REBALANCING)
    assert len(failures) == 1 and "boom" in str(failures[0])


def test_pause_keeps_the_group_and_resume_catches_up(kafka: KafkaCluster, tmp_path: Path) -> None:
    """Kafka's pause(): a paused instance keeps polling (its partitions
    paused in the consumer), stays RUNNING and in the group, and processes
    nothing until resume()."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = word_count_topics(kafka, "pause", 2)
    text = lines(200, seed=5)
    produce_lines(boot, source, text)
    config = app_config(boot, app_id, str(tmp_path), **{"commit.interval.ms": 200})
    with KafkaStreams(word_count_topology(source, sink), config) as app:
        app.pause()
        app.start()
        runtime = app._runtimes[0]
        _wait_for(lambda: app.state is State.RUNNING and bool(_tasks(app)), "the assignment")
        seen = runtime.paused_polls
        _wait_for(lambda: runtime.paused_polls > seen + 20, "polls while paused")
        assert app.state is State.RUNNING and app.is_paused()
        assert app.metrics()["records-processed"] == 0
        assert read_all(boot, sink, committed_only=False) == []
        app.resume()
        _wait_for(counts_of(boot, sink, text), "every count after resume()")


def test_add_and_remove_a_stream_thread(kafka: KafkaCluster, tmp_path: Path) -> None:
    """Kafka's addStreamThread/removeStreamThread: a thread added while
    running takes a share of the tasks; removed, it hands them back; the
    counts stay exact throughout."""
    boot = kafka.bootstrap_servers
    source, sink, app_id = word_count_topics(kafka, "threads", 4)
    first = lines(300, seed=7)
    produce_lines(boot, source, first)
    config = app_config(boot, app_id, str(tmp_path), **{"commit.interval.ms": 200})
    all_tasks = every_task(4)

    def owned() -> list[list[str]]:
        return list(app._local_tasks().values())

    with KafkaStreams(word_count_topology(source, sink), config) as app:
        assert app.add_stream_thread() is None  # not started
        app.start()
        _wait_for(lambda: app.state is State.RUNNING and owned() == [all_tasks], "one thread")
        added = app.add_stream_thread()
        assert added is not None and added.endswith("-StreamThread-2")

        def split() -> bool:
            threads = owned()
            tasks = sorted(t for ts in threads for t in ts)
            return (
                app.state is State.RUNNING
                and len(threads) == 2
                and all(threads)
                and tasks == all_tasks
            )

        _wait_for(split, "the added thread to take a share of the tasks")
        second = lines(300, seed=8)
        produce_lines(boot, source, second, BASE_TS + 1_000)
        _wait_for(counts_of(boot, sink, first + second), "exact counts with two threads")
        assert app.remove_stream_thread(timeout=60) == added
        _wait_for(lambda: app.state is State.RUNNING and owned() == [all_tasks], "one thread again")
        third = lines(100, seed=9)
        produce_lines(boot, source, third, BASE_TS + 2_000)
        _wait_for(counts_of(boot, sink, first + second + third), "exact counts after the removal")
