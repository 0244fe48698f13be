"""Offset reset policies on a real broker: by duration (offsets looked up by
timestamp) and none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.integration.kafka_support import app_config, create_topics, produce, read_all, unique
from tests.kafka_harness import KafkaCluster

from strom import AutoOffsetReset, KafkaStreams, StreamsBuilder, serdes
from strom.errors import ConfigError

pytestmark = pytest.mark.kafka
S = serdes.String()
HOUR_MS = 3_600_000


def test_by_duration_and_none_on_the_broker(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    recent, quiet, sink = unique("recent"), unique("quiet"), unique("out")
    create_topics(boot, {recent: 2, quiet: 1, sink: 1})
    now = int(time.time() * 1000)
    # "a" and "d" land on partitions 0 and 1 (murmur2).
    produce(
        boot,
        recent,
        [
            (b"a", b"a-3h", now - 3 * HOUR_MS),
            (b"a", b"a-10m", now - 10 * 60_000),
            (b"a", b"a-2h", now - 2 * HOUR_MS),
            (b"d", b"d-5h", now - 5 * HOUR_MS),
            (b"d", b"d-30m", now - 30 * 60_000),
        ],
    )
    produce(boot, quiet, [(b"q", b"q-2h", now - 2 * HOUR_MS)])
    builder = StreamsBuilder()
    builder.stream(recent, key_serde=S, value_serde=S).to(sink)
    builder.stream(quiet, key_serde=S, value_serde=S).to(sink)
    topology = builder.build()

    # "none" with no committed offset: the app does not start, and says why.
    refusing = app_config(boot, unique("none"), str(tmp_path / "none"), auto__offset__reset="none")
    with KafkaStreams(topology, refusing) as app, pytest.raises(ConfigError, match=recent):
        app.run_until_end(timeout=120)

    config = app_config(
        boot, unique("dur"), str(tmp_path / "dur"), auto__offset__reset="by_duration:PT1H"
    )
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=120)
        # Nothing of "quiet" is that recent: it starts at its end.
        produce(boot, quiet, [(b"q", b"q-new", int(time.time() * 1000))])
        app.run_until_end(timeout=120)
    values = sorted(m.value().decode() for m in read_all(boot, sink))
    # Per partition, from the first record (in offset order) of the last hour on.
    assert values == ["a-10m", "a-2h", "d-30m", "q-new"]
    assert AutoOffsetReset.of(config["auto.offset.reset"]).duration_ms == HOUR_MS
