"""KafkaStreams on a real broker (at_least_once): results equal what a plain
Python computation of the same input gives."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from tests.integration.kafka_support import (
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

from strom import KafkaStreams, serdes

WORDS = [f"w{i}" for i in range(40)]


def lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 6))) for _ in range(n)]


def test_word_count_equals_counter(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("wc")
    create_topics(boot, {source: 3, sink: 3})
    text = lines(2000, seed=1)
    produce(boot, source, ((None, line.encode(), 1000 + i) for i, line in enumerate(text)))

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


def keyed_records(n: int, seed: int, start_ts: int = 1000) -> list[tuple[bytes, bytes, int]]:
    """Keyed records with increasing timestamps (no record is late; none at 0,
    which confluent-kafka would replace with the current time)."""
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
    for run, chunk in enumerate(thirds):
        produce(boot, source, ((None, line.encode(), 1) for line in chunk))
        state_dir = tmp_path / ("first" if run < 2 else "second")
        with KafkaStreams(topology, app_config(boot, app_id, str(state_dir))) as app:
            app.run_until_end(timeout=120)
            restored.append(app.metrics()["restored-records"])
        seen = [w for line in text[: 500 * (run + 1)] for w in line.split()]
        output = latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long())
        assert output == dict(Counter(seen)), f"run {run}"
    assert restored[1] == 0  # local state was up to date
    assert restored[2] > 0  # rebuilt from the changelog
