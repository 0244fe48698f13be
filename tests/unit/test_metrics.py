"""KafkaStreams.metrics() on the embedded log: Kafka Streams' metric names,
groups and tags, with values that follow what the app did."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.support import wait_until

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError
from strom.kstream import BufferConfig, Suppressed, TimeWindows
from strom.metrics import Metric, MetricName, Metrics
from strom.processor import Processor, ProcessorContext, Record
from strom.state.stores import Stores

S, L = serdes.String(), serdes.Long()
THREAD = "stream-thread-metrics"
TASK = "stream-task-metrics"
NODE = "stream-processor-node-metrics"


def config(log_path: str, app_id: str = "metered", **extra: Any) -> dict[str, Any]:
    return {"application.id": app_id, "bootstrap.servers": f"embedded:{log_path}", **extra}


def produce(
    log: EmbeddedLog, topic: str, records: list[tuple[bytes | None, bytes, int, int]]
) -> None:
    """``(key, value, timestamp, partition)`` records, in this order."""
    with log.producer() as producer:
        for key, value, timestamp, partition in records:
            producer.produce(topic, key, value, timestamp=timestamp, partition=partition)


def only(metrics: Metrics, name: str, group: str, **tags: str) -> float:
    found = metrics.find(name, group, **tags)
    assert len(found) == 1, [m.metric_name for m in found]
    value = found[0].metric_value()
    assert isinstance(value, float)
    return value


def pass_through(source: str = "in", sink: str = "out") -> Topology:
    builder = StreamsBuilder()
    builder.stream(source, key_serde=S, value_serde=S).map_values(str.upper).to(
        sink, key_serde=S, value_serde=S
    )
    return builder.build()


@pytest.fixture
def topics(log: EmbeddedLog) -> EmbeddedLog:
    log.create_topic("in", partitions=2)
    log.create_topic("out", partitions=2)
    return log


def test_thread_and_task_metrics_count_what_was_processed(
    topics: EmbeddedLog, log_path: str
) -> None:
    records = [(f"k{i}".encode(), b"v", 1000 + i, i % 2) for i in range(30)]
    produce(topics, "in", records)
    with KafkaStreams(
        pass_through(), config(log_path, **{"metrics.recording.level": "DEBUG"})
    ) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        assert all(isinstance(k, MetricName) and isinstance(m, Metric) for k, m in metrics.items())
        thread_id = next(iter(metrics.find("process-total", THREAD))).metric_name.tags["thread-id"]
        assert thread_id == "metered-StreamThread-1"
        assert only(metrics, "process-total", THREAD) == 30
        assert only(metrics, "process-rate", THREAD) > 0
        assert only(metrics, "poll-total", THREAD) >= 1
        assert only(metrics, "commit-total", THREAD) >= 1
        assert (
            only(metrics, "commit-latency-max", THREAD)
            >= only(metrics, "commit-latency-avg", THREAD)
            >= 0
        )
        assert only(metrics, "task-created-total", THREAD) == 2
        for op in ("poll", "process", "commit", "punctuate"):
            assert 0 <= only(metrics, f"{op}-ratio", THREAD) <= 1
        assert only(metrics, "process-ratio", THREAD) > 0
        # Per task (DEBUG): each partition's records, 15 each.
        assert only(metrics, "process-total", TASK, task_id="0_0") == 15
        assert only(metrics, "process-total", TASK, task_id="0_1") == 15
        assert only(metrics, "process-latency-avg", TASK, task_id="0_0") > 0
        assert only(metrics, "dropped-records-total", TASK, task_id="0_0") == 0
        # The old totals, by plain name.
        assert metrics["records-processed"] == 30
        state = metrics.find("state", "stream-metrics")[0].metric_value()
        assert state == "RUNNING"


def test_processor_node_metrics_count_the_records_reaching_each_node(
    topics: EmbeddedLog, log_path: str
) -> None:
    produce(topics, "in", [(f"k{i}".encode(), b"v", 1000 + i, 0) for i in range(30)])
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).filter(lambda k, _v: k.endswith("1")).to(
        "out", key_serde=S, value_serde=S
    )
    topology = builder.build()
    source, keep, sink = topology._internal.nodes
    settings = {"metrics.recording.level": "DEBUG"}
    with KafkaStreams(topology, config(log_path, **settings)) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        totals = {
            m.metric_name.tags["processor-node-id"]: m.metric_value()
            for m in metrics.find("process-total", NODE, task_id="0_0")
        }
        # k1, k11 and k21 pass the filter.
        assert totals == {source: 30, keep: 30, sink: 3}
        assert only(metrics, "process-rate", NODE, task_id="0_0", processor_node_id=source) > 0
        # Partition 1 had no input: its nodes saw nothing.
        assert {m.metric_value() for m in metrics.find("process-total", NODE, task_id="0_1")} == {0}


def test_info_level_leaves_the_debug_metrics_out(topics: EmbeddedLog, log_path: str) -> None:
    produce(topics, "in", [(b"a", b"v", 5, 0)])
    with KafkaStreams(pass_through(), config(log_path)) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        assert metrics.find("process-total", THREAD)
        assert metrics.find("dropped-records-total", TASK, task_id="0_0")
        assert not metrics.find("process-total", TASK)
        assert not metrics.find("record-lateness-max", TASK)
        assert not metrics.find("process-total", NODE)


def test_bad_recording_level_is_a_config_error(log_path: str) -> None:
    with pytest.raises(
        ConfigError, match=r"metrics\.recording\.level must be one of INFO, DEBUG, TRACE"
    ):
        KafkaStreams(pass_through(), config(log_path, **{"metrics.recording.level": "debug"}))


def test_dropped_records_counts_a_record_skipped_by_log_and_continue(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("numbers", partitions=2)
    log.create_topic("doubled", partitions=2)
    good = (7).to_bytes(8, "big")
    produce(log, "numbers", [(b"a", good, 1, 0), (b"b", b"bad", 2, 1), (b"c", good, 3, 1)])
    builder = StreamsBuilder()
    builder.stream("numbers", key_serde=S, value_serde=L).map_values(lambda v: v * 2).to(
        "doubled", key_serde=S, value_serde=L
    )
    settings = {"deserialization.exception.handler": "log_and_continue"}
    with KafkaStreams(builder.build(), config(log_path, **settings)) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        assert only(metrics, "dropped-records-total", TASK, task_id="0_1") == 1
        assert only(metrics, "dropped-records-total", TASK, task_id="0_0") == 0
        assert only(metrics, "dropped-records-rate", TASK, task_id="0_1") > 0
        assert only(metrics, "process-total", THREAD) == 2


def test_record_lateness_of_out_of_order_input(topics: EmbeddedLog, log_path: str) -> None:
    stamps = [10, 30, 20, 5, 40, 38]
    produce(topics, "in", [(b"k", b"v", ts, 0) for ts in stamps])
    with KafkaStreams(
        pass_through(), config(log_path, **{"metrics.recording.level": "DEBUG"})
    ) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        # 20 arrives at stream time 30 (10 late), 5 at 30 (25), 38 at 40 (2).
        assert only(metrics, "record-lateness-max", TASK, task_id="0_0") == 25
        assert only(metrics, "record-lateness-avg", TASK, task_id="0_0") == pytest.approx(37 / 6)
        assert math.isnan(only(metrics, "record-lateness-max", TASK, task_id="0_1"))


def counting_topology() -> Topology:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by_key().count("counts").to_stream().to(
        "out", key_serde=S, value_serde=L
    )
    return builder.build()


def test_restore_metrics_after_a_restart_without_local_state(
    topics: EmbeddedLog, log_path: str
) -> None:
    produce(topics, "in", [(f"k{i}".encode(), b"v", i, 0) for i in range(12)])
    with KafkaStreams(counting_topology(), config(log_path)) as app:
        app.run_until_end(timeout=30)
        assert only(app.metrics(), "restore-total", TASK, task_id="0_0") == 0
    changelog_end = topics.end_offsets("metered-counts-changelog")[0]
    assert changelog_end == 12
    shutil.rmtree(Path(log_path) / ".state" / "metered")
    with KafkaStreams(counting_topology(), config(log_path)) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        assert only(metrics, "restore-total", TASK, task_id="0_0") == changelog_end
        assert only(metrics, "restore-remaining-records-total", TASK, task_id="0_0") == 0
        assert only(metrics, "restore-rate", TASK, task_id="0_0") > 0
        assert only(metrics, "restore-total", TASK, task_id="0_1") == 0


def test_records_lag_reaches_zero(topics: EmbeddedLog, log_path: str) -> None:
    produce(topics, "in", [(b"k", b"v", i, i % 2) for i in range(40)])
    app = KafkaStreams(pass_through(), config(log_path, **{"commit.interval.ms": 50}))
    app.start()
    try:

        def lags() -> dict[str, float]:
            found = app.metrics().find("records-lag", "consumer-fetch-manager-metrics", topic="in")
            return {m.metric_name.tags["partition"]: float(m.metric_value()) for m in found}

        wait_until(
            lambda: lags() == {"0": 0.0, "1": 0.0}, 30, "the lag of both partitions to reach 0"
        )
        wait_until(lambda: app.metrics().value("process-total", THREAD) == 40, 30, "40 records")
        produce(topics, "in", [(b"k", b"v", 100 + i, 0) for i in range(5)])
        wait_until(
            lambda: lags()["0"] == 0.0 and app.metrics().value("process-total", THREAD) == 45, 30
        )
    finally:
        app.close()


class CachedLookups(Processor[str, str]):
    """Reads each key from a cached store before counting it."""

    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store("seen")

    def process(self, record: Record[str, str]) -> None:
        self.store.put(record.key, (self.store.get(record.key) or 0) + 1)


def test_record_cache_hit_ratio(topics: EmbeddedLog, log_path: str) -> None:
    # a (miss), a (hit), b (miss), a (hit): 2 of 4 reads hit.
    produce(topics, "in", [(k, b"v", i, 0) for i, k in enumerate([b"a", b"a", b"b", b"a"])])
    topology = (
        Topology()
        .add_source("src", "in", key_serde=S, value_serde=S)
        .add_processor("lookups", CachedLookups, "src")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("seen"), S, serdes.Integer()
            ).with_caching_enabled(),
            "lookups",
        )
    )
    with KafkaStreams(topology, config(log_path, **{"metrics.recording.level": "DEBUG"})) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        ratio = only(
            metrics,
            "hit-ratio-avg",
            "stream-record-cache-metrics",
            task_id="0_0",
            record_cache_id="seen",
        )
        assert ratio == 0.5
        # The metered layer: 4 gets and 4 puts through the store's object,
        # and the commit's flush.
        store = {"task_id": "0_0", "persistent_state_id": "seen"}
        state = "stream-state-metrics"
        for op in ("get", "put", "flush"):
            assert only(metrics, f"{op}-rate", state, **store) > 0
            assert only(metrics, f"{op}-latency-max", state, **store) >= 0
        get_rate = only(metrics, "get-rate", state, **store)
        assert get_rate == pytest.approx(only(metrics, "put-rate", state, **store))
        assert not metrics.find("range-rate", state)


def test_record_cache_hit_ratio_of_a_batched_aggregation(
    topics: EmbeddedLog, log_path: str
) -> None:
    # Ten keys, ten batches of ten records: the first batch misses every
    # key, the nine after it find each one cached.
    produce(topics, "in", [(f"k{i % 10}".encode(), b"v", i, 0) for i in range(100)])
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .reduce(lambda total, value: total + value, "joined")
        .to_stream()
        .to("out", key_serde=S, value_serde=S)
    )
    settings = {"metrics.recording.level": "DEBUG", "poll.max.records": 10}
    with KafkaStreams(builder.build(), config(log_path, **settings)) as app:
        app.run_until_end(timeout=30)
        cache = {"task_id": "0_0", "record_cache_id": "joined"}
        assert only(app.metrics(), "hit-ratio-avg", "stream-record-cache-metrics", **cache) == 0.9


def test_suppression_buffer_size_and_count(topics: EmbeddedLog, log_path: str) -> None:
    # Three keys in one open window: all three stay buffered.
    produce(topics, "in", [(k, b"v", 10, 0) for k in (b"a", b"b", b"c", b"a")])
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(1000))
        .count("windowed")
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .map(lambda k, v: (k.key, v))
        .to("out", key_serde=S, value_serde=L)
    )
    with KafkaStreams(
        builder.build(), config(log_path, **{"metrics.recording.level": "DEBUG"})
    ) as app:
        app.run_until_end(timeout=30)
        metrics = app.metrics()
        assert (
            only(metrics, "suppression-buffer-count-max", "stream-state-metrics", task_id="0_0")
            == 3
        )
        assert (
            only(metrics, "suppression-buffer-size-max", "stream-state-metrics", task_id="0_0") > 0
        )
