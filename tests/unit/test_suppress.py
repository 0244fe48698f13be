"""KTable.suppress, after the cases of Kafka's SuppressScenarioTest and
KTableSuppressProcessorTest: final results once a window closes, the latest
update after a time limit, full buffers, and a buffer that survives restarts."""

from __future__ import annotations

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TaskError, TopologyError
from strom.kstream import BufferConfig, Materialized, Suppressed, TimeWindows, Window, Windowed
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
W10 = serdes.TimeWindowed(S, 10)


def final_counts(grace: int = 0, buffer: BufferConfig | None = None) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, grace))
        .count(Materialized("counts"))
        .suppress(Suppressed.until_window_closes(buffer or BufferConfig.unbounded()))
        .to_stream()
        .to("out", value_serde=L)
    )
    return builder


def test_until_window_closes_emits_each_window_once() -> None:
    with TopologyTestDriver(final_counts().build()) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", W10, L)
        for key, ts in (("k", 1), ("k", 2), ("j", 3)):
            src.pipe_input(key, "v", ts)
        assert out.is_empty()  # nothing is final yet
        src.pipe_input("k", "v", 11)  # stream time 11 closes [0, 10)
        # Both are due at the window end: they leave in serialized-key order
        # (Kafka's BufferKey), j before k.
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [
            (Windowed("j", Window(0, 10)), 1, 3),
            (Windowed("k", Window(0, 10)), 2, 2),
        ]
        src.pipe_input("k", "v", 12)
        src.pipe_input("k", "v", 4)  # late: dropped upstream, nothing to emit
        assert out.is_empty()
        src.pipe_input("x", "v", 25)
        assert out.read_key_values_to_list() == [(Windowed("k", Window(10, 20)), 2)]


def test_grace_delays_the_final_result_and_late_records_count() -> None:
    with TopologyTestDriver(final_counts(grace=5).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", W10, L)
        for ts in (1, 12, 4):  # 4 is late but within grace: counted
            src.pipe_input("k", "v", ts)
        assert out.is_empty()
        src.pipe_input("k", "v", 15)  # end 10 + grace 5 <= 15
        assert out.read_key_values_to_list() == [(Windowed("k", Window(0, 10)), 2)]


def latest_counts(suppressed: Suppressed) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .count()
        .suppress(suppressed)
        .to_stream()
        .to("out", value_serde=L)
    )
    return builder


def test_until_time_limit_emits_the_latest_value_after_the_limit() -> None:
    suppressed = Suppressed.until_time_limit(10, BufferConfig.unbounded())
    with TopologyTestDriver(latest_counts(suppressed).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, L)
        for key, ts in (("k", 0), ("k", 5), ("j", 8)):
            src.pipe_input(key, "v", ts)
        assert out.is_empty()
        # k was first buffered at 0: at stream time 12 its latest value goes.
        src.pipe_input("k", "v", 12)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()] == [("k", 3, 12)]
        src.pipe_input("j", "v", 20)
        assert out.read_key_values_to_list() == [("j", 2)]


def test_a_full_buffer_emits_early_or_stops_the_app() -> None:
    early = Suppressed.until_time_limit(1_000, BufferConfig.max_records(1))
    with TopologyTestDriver(latest_counts(early).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        src.pipe_input("a", "v", 1)
        src.pipe_input("b", "v", 2)  # two records in a buffer of one: "a" goes early
        assert driver.create_output_topic("out", S, L).read_key_values_to_list() == [("a", 1)]
    strict = Suppressed.until_time_limit(1_000, BufferConfig.max_records(1).shut_down_when_full())
    with TopologyTestDriver(latest_counts(strict).build()) as driver:
        src = driver.create_input_topic("in", S, S)
        src.pipe_input("a", "v", 1)
        with pytest.raises(TaskError, match="suppression buffer exceeded its capacity"):
            src.pipe_input("b", "v", 2)


def test_a_buffer_with_no_bound_holds_what_a_bounded_one_would_emit_early() -> None:
    """Kafka's withNoBound: the limits go, and the buffer no longer emits
    early (so window-close suppression accepts it)."""
    unbound = BufferConfig.max_records(1).with_no_bound()
    Suppressed.until_window_closes(unbound)
    topology = latest_counts(Suppressed.until_time_limit(1_000, unbound)).build()
    with TopologyTestDriver(topology) as d:
        src = d.create_input_topic("in", S, S)
        src.pipe_input("a", "v", 1)
        src.pipe_input("b", "v", 2)
        assert d.create_output_topic("out", S, L).read_key_values_to_list() == []
        src.pipe_input("c", "v", 1_002)
        assert d.create_output_topic("out", S, L).read_key_values_to_list() == [("a", 1), ("b", 1)]


def test_window_close_suppression_refuses_an_emit_early_buffer_and_unwindowed_tables() -> None:
    with pytest.raises(TopologyError, match="shuts down when full"):
        Suppressed.until_window_closes(BufferConfig.max_records(10))
    builder = StreamsBuilder()
    table = builder.stream("in", key_serde=S, value_serde=S).group_by_key().count()
    with pytest.raises(TopologyError, match="windowed table"):
        table.suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))


def test_the_buffer_survives_a_restart(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("in")
    log.create_topic("out")
    config = {"application.id": "sup", "bootstrap.servers": f"embedded:{log_path}"}

    def produce(ts: int) -> None:
        with log.producer() as producer:
            producer.produce("in", b"k", b"v", timestamp=ts)

    produce(1)
    produce(2)
    with KafkaStreams(final_counts().build(), config) as app:
        app.run_until_end(timeout=30)
    assert sum(log.end_offsets("out").values()) == 0
    produce(11)
    with KafkaStreams(final_counts().build(), config) as app:
        app.run_until_end(timeout=30)
    records = log.read("out", 0, 0, 10)
    assert [(W10.deserialize("out", r.key), L.deserialize("out", r.value)) for r in records] == [
        (Windowed("k", Window(0, 10)), 2)
    ]


def _buffer_changelogs(log: EmbeddedLog) -> list[str]:
    return [t for t in log.topics() if "SUPPRESS" in t and t.endswith("-changelog")]


def test_a_buffer_without_changelog_starts_empty_after_a_restart(
    log: EmbeddedLog, log_path: str
) -> None:
    # Kafka's withLoggingDisabled: no changelog topic, and what the buffer
    # held when the app stopped is lost (the window's final result never
    # comes), where the logged buffer above emits it after the restart.
    log.create_topic("in")
    log.create_topic("out")
    config = {"application.id": "sup-unlogged", "bootstrap.servers": f"embedded:{log_path}"}
    unlogged = BufferConfig.unbounded().with_logging_disabled()
    with log.producer() as producer:
        for ts in (1, 2, 11):
            producer.produce("in", b"k", b"v", timestamp=ts)
    with KafkaStreams(final_counts(buffer=unlogged).build(), config) as app:
        app.run_until_end(timeout=30)
    # Without a restart the buffer works as the logged one.
    records = log.read("out", 0, 0, 10)
    assert [(W10.deserialize("out", r.key), L.deserialize("out", r.value)) for r in records] == [
        (Windowed("k", Window(0, 10)), 2)
    ]
    assert _buffer_changelogs(log) == []
    with log.producer() as producer:
        producer.produce("in", b"k", b"v", timestamp=12)
    with KafkaStreams(final_counts(buffer=unlogged).build(), config) as app:
        app.run_until_end(timeout=30)
    with log.producer() as producer:
        producer.produce("in", b"k", b"v", timestamp=25)
    with KafkaStreams(final_counts(buffer=unlogged).build(), config) as app:
        app.run_until_end(timeout=30)
    # [10, 20) was buffered when the second run stopped: lost.
    assert log.end_offsets("out")[0] == 1


def test_buffer_and_store_changelogs_take_topic_configs(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("in")
    log.create_topic("out")
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(10, 0))
        .count(Materialized("counts", logging={"segment.ms": 600_000}))
        .suppress(
            Suppressed.until_window_closes(
                BufferConfig.unbounded().with_logging_enabled({"segment.bytes": "1048576"})
            )
        )
        .to_stream()
        .to("out", value_serde=L)
    )
    config = {"application.id": "sup-configs", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end(timeout=30)
    (buffer_changelog,) = _buffer_changelogs(log)
    assert log.topic_config(buffer_changelog)["segment.bytes"] == "1048576"
    store_config = log.topic_config("sup-configs-counts-changelog")
    assert store_config["segment.ms"] == "600000"
    # Kafka's own settings for a windowed store's changelog stay.
    assert set(store_config["cleanup.policy"].split(",")) == {"compact", "delete"}


def test_logging_takes_true_false_or_topic_configs() -> None:
    assert BufferConfig.max_records(3).with_logging_disabled().logging is False
    assert Materialized("s", logging={"retention.ms": 5}).log_config == {"retention.ms": "5"}
    with pytest.raises(TopologyError, match="logging= takes True, False or a mapping"):
        Materialized("s", logging=["retention.ms"])  # type: ignore[arg-type]
