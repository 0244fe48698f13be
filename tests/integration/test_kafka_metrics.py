"""KafkaStreams.metrics() and the Prometheus exporter on a real broker: the
consumer lag per partition reaches 0, the counts follow the input, restore
metrics after a restart without local state."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    produce,
    read_all,
    unique,
    word_count_topology,
)
from tests.kafka_harness import KafkaCluster
from tests.support import wait_until

from strom import KafkaStreams, State

THREAD = "stream-thread-metrics"
LAG = "consumer-fetch-manager-metrics"


def test_lag_reaches_zero_and_process_total_counts_every_record(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("metered")
    create_topics(boot, {source: 3, sink: 3})
    count = produce(boot, source, ((None, f"w{i % 9}".encode(), BASE_TS + i) for i in range(300)))
    config = app_config(boot, app_id, str(tmp_path), metrics__port=0)
    app = KafkaStreams(word_count_topology(source, sink), config)
    app.start()
    try:

        def lags() -> dict[str, float]:
            found = app.metrics().find("records-lag", LAG, topic=source)
            return {m.metric_name.tags["partition"]: float(m.metric_value()) for m in found}

        wait_until(lambda: app.state is State.RUNNING, 90, "RUNNING")
        wait_until(lambda: lags() == {"0": 0.0, "1": 0.0, "2": 0.0}, 90, "lag 0 on 3 partitions")
        wait_until(lambda: app.metrics().value("process-total", THREAD) >= count, 60, "processed")
        # The first commit comes at the commit interval after processing.
        wait_until(lambda: app.metrics().value("commit-total", THREAD) > 0, 60, "a commit")
        metrics = app.metrics()
        tasks = {m.metric_name.tags["task-id"] for m in metrics.find("dropped-records-total")}
        assert tasks >= {"0_0", "0_1", "0_2"}
        assert metrics.value("poll-total", THREAD) > 0

        server = app.metrics_server
        assert server is not None
        with urllib.request.urlopen(server.url + "/health/ready", timeout=10) as response:
            assert response.status == 200
        with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        lag_samples = [
            s
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == "kafka_consumer_consumer_fetch_manager_metrics_records_lag"
            and s.labels["topic"] == source
        ]
        assert sorted(s.labels["partition"] for s in lag_samples) == ["0", "1", "2"]
        assert all(s.value == 0 for s in lag_samples)
        # The counts come from the repartitioned sub-topology, after the source's.
        wait_until(lambda: bool(read_all(boot, sink)), 60, "counts in the output topic")
    finally:
        app.close()


def test_restore_metrics_after_losing_local_state(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("restored")
    create_topics(boot, {source: 1, sink: 1})
    produce(boot, source, ((None, f"w{i}".encode(), BASE_TS + i) for i in range(50)))
    topology = word_count_topology(source, sink)
    with KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / "first"))) as app:
        app.run_until_end(timeout=120)
    with KafkaStreams(topology, app_config(boot, app_id, str(tmp_path / "second"))) as app:
        app.run_until_end(timeout=120)
        metrics = app.metrics()
        # Every word's count was logged once: 50 changelog records to restore.
        assert metrics.value("restore-total", "stream-task-metrics") == 50
        assert metrics.value("restore-remaining-records-total", "stream-task-metrics") == 0
