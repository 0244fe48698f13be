"""Offset reset policies (Kafka's AutoOffsetReset): parsing, and where an
app on the embedded log starts a partition that has no committed offset."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from strom import AutoOffsetReset, KafkaStreams, StreamsBuilder, StreamsConfig, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, TopologyError

S = serdes.String()
HOUR_MS = 3_600_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("earliest", AutoOffsetReset.earliest()),
        ("latest", AutoOffsetReset.latest()),
        ("none", AutoOffsetReset.none()),
        ("by_duration:PT1H", AutoOffsetReset.by_duration(HOUR_MS)),
        ("by_duration:P1DT30M", AutoOffsetReset.by_duration(timedelta(days=1, minutes=30))),
        ("by_duration:pt0.25s", AutoOffsetReset.by_duration(250)),
        ("by_duration:PT0S", AutoOffsetReset.by_duration(0)),
        (timedelta(minutes=5), AutoOffsetReset.by_duration(300_000)),
    ],
)
def test_policies_parse_from_kafkas_values(
    value: str | timedelta, expected: AutoOffsetReset
) -> None:
    policy = AutoOffsetReset.of(value)
    assert policy == expected
    # The config string of a policy reads back as the same policy.
    assert AutoOffsetReset.of(str(policy)) == policy


@pytest.mark.parametrize(
    "value", ["newest", "by_duration:", "by_duration:P", "by_duration:PT", "by_duration:1H", 5]
)
def test_bad_policies_are_refused_where_they_are_given(value: object) -> None:
    with pytest.raises(ValueError, match=r"offset reset policy|ISO-8601 duration"):
        AutoOffsetReset.of(value)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"auto\.offset\.reset"):
        StreamsConfig({"application.id": "a", "auto.offset.reset": value})
    with pytest.raises(TopologyError, match="source 'src'"):
        Topology().add_source("src", "in", offset_reset=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        AutoOffsetReset.by_duration(-1)


def test_config_keeps_kafkas_by_duration_string() -> None:
    config = StreamsConfig({"application.id": "a", "auto.offset.reset": "by_duration:PT2H"})
    assert config["auto.offset.reset"] == "by_duration:PT7200S"


def _app(log_path: str, builder: StreamsBuilder, **config: str) -> KafkaStreams:
    return KafkaStreams(
        builder.build(),
        {"application.id": "reset", "bootstrap.servers": f"embedded:{log_path}"} | config,
    )


def _values(log: EmbeddedLog, topic: str) -> list[str]:
    out = []
    for partition in range(log.partitions(topic)):
        out += [(r.value or b"").decode() for r in log.read(topic, partition, 0, 1000)]
    return sorted(out)


def test_by_duration_starts_at_the_first_record_of_the_duration(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("in", partitions=2)
    log.create_topic("quiet")
    log.create_topic("out")
    now = int(time.time() * 1000)
    with log.producer() as producer:
        # Out of timestamp order within partition 0: the reset takes the first
        # record, in offset order, at or after now - 1 h, and all after it.
        for partition, ago_ms, value in [
            (0, 3 * HOUR_MS, "p0-3h"),
            (0, 10 * 60_000, "p0-10m"),
            (0, 2 * HOUR_MS, "p0-2h"),
            (1, 5 * HOUR_MS, "p1-5h"),
            (1, 30 * 60_000, "p1-30m"),
        ]:
            producer.produce(
                "in", b"k", value.encode(), timestamp=now - ago_ms, partition=partition
            )
        producer.produce("quiet", b"k", b"quiet-2h", timestamp=now - 2 * HOUR_MS)
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    builder.stream("quiet", key_serde=S, value_serde=S).to("out")
    with _app(log_path, builder, **{"auto.offset.reset": "by_duration:PT1H"}) as app:
        app.run_until_end(timeout=30)
        # No record of "quiet" is that recent: it starts at its end.
        with log.producer() as producer:
            producer.produce("quiet", b"k", b"quiet-new")
        app.run_until_end(timeout=30)
    assert _values(log, "out") == ["p0-10m", "p0-2h", "p1-30m", "quiet-new"]
    # Committed offsets win over the policy on the next start.
    with log.producer() as producer:
        producer.produce("in", b"k", b"p0-later", partition=0)
    with _app(log_path, builder, **{"auto.offset.reset": "latest"}) as app:
        app.run_until_end(timeout=30)
    assert _values(log, "out") == ["p0-10m", "p0-2h", "p0-later", "p1-30m", "quiet-new"]


def test_a_source_policy_overrides_the_apps(log: EmbeddedLog, log_path: str) -> None:
    for topic in ("recent", "all", "out"):
        log.create_topic(topic)
    now = int(time.time() * 1000)
    with log.producer() as producer:
        for topic in ("recent", "all"):
            producer.produce(topic, b"k", f"{topic}-old".encode(), timestamp=now - 2 * HOUR_MS)
            producer.produce(topic, b"k", f"{topic}-new".encode(), timestamp=now - 60_000)
    builder = StreamsBuilder()
    builder.stream(
        "recent", key_serde=S, value_serde=S, offset_reset=AutoOffsetReset.by_duration(HOUR_MS)
    ).to("out")
    builder.stream("all", key_serde=S, value_serde=S, offset_reset="earliest").to("out")
    # With the app's policy "none", sources that set their own still start.
    with _app(log_path, builder, **{"auto.offset.reset": "none"}) as app:
        app.run_until_end(timeout=30)
    assert _values(log, "out") == ["all-new", "all-old", "recent-new"]


def test_none_without_a_committed_offset_names_the_topics(log: EmbeddedLog, log_path: str) -> None:
    for topic in ("a", "b", "out"):
        log.create_topic(topic)
    builder = StreamsBuilder()
    builder.stream("a", key_serde=S, value_serde=S, offset_reset="none").to("out")
    builder.stream("b", key_serde=S, value_serde=S).to("out")
    with pytest.raises(ConfigError, match=r"input topic\(s\) a and no offset reset policy"):
        _app(log_path, builder).start()
    with pytest.raises(ConfigError, match=r"input topic\(s\) a, b and"):
        _app(log_path, builder, **{"auto.offset.reset": "none"}).start()
