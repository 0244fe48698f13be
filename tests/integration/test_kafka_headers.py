"""Record headers on a real broker: an app's output records carry the
headers of the input records they came from, through a repartition topic
and an aggregation behind the record cache, as Kafka Streams' do."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    ordered_producer,
    read_all,
    unique,
)
from tests.kafka_harness import KafkaCluster

from strom import KafkaStreams, StreamsBuilder, serdes

pytestmark = pytest.mark.kafka

S, L = serdes.String(), serdes.Long()


def test_headers_travel_through_a_repartition_and_a_cached_count(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, upper, counts = unique("in"), unique("upper"), unique("counts")
    create_topics(boot, {source: 2, upper: 1, counts: 1})
    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=S, value_serde=S)
    stream.map_values(str.upper).to(upper, key_serde=S, value_serde=S)
    (
        stream.select_key(lambda _k, v: v)
        .group_by_key(key_serde=S, value_serde=S)
        .count()
        .to_stream()
        .to(counts, key_serde=S, value_serde=L)
    )
    producer = ordered_producer(boot)
    # One record per word: each count's last update is that record.
    words = [f"w{i}" for i in range(40)]
    for i, word in enumerate(words):
        headers = [("origin", word.encode()), ("none", None)] if i % 2 == 0 else None
        producer.produce(
            source, word.encode(), key=b"k%d" % i, timestamp=BASE_TS + i, headers=headers
        )
    assert producer.flush(30) == 0
    config = app_config(boot, unique("headers"), str(tmp_path / "state"))
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end(timeout=120)

    def expected(word: str) -> list[tuple[str, bytes | None]]:
        return [("origin", word.encode()), ("none", None)] if int(word[1:]) % 2 == 0 else []

    uppers = {m.value().decode(): m.headers() or [] for m in read_all(boot, upper)}
    assert uppers == {w.upper(): expected(w) for w in words}
    counted = {m.key().decode(): m.headers() or [] for m in read_all(boot, counts)}
    assert counted == {w: expected(w) for w in words}
