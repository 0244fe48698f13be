"""The fused native path on a real broker: a sub-topology of expression
steps runs each batch the native Kafka consumer read in one native call,
and writes what the lambda version of the app writes; a batch with a value
that is not JSON takes the ordinary path, which skips exactly that record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    per_key_in_order,
    produce,
    read_all,
    unique,
)
from tests.kafka_harness import KafkaCluster

from strom import KafkaStreams, StreamsBuilder, col, serdes, struct

pytestmark = pytest.mark.kafka

S, J = serdes.String(), serdes.Json()


def _apps(source: str, sink: str, native: bool) -> StreamsBuilder:
    b = StreamsBuilder()
    stream = b.stream(source, key_serde=S, value_serde=J)
    if native:
        stream = stream.filter(col("auction") % 3 == 0).map_values(
            struct(auction=col("auction"), price=col("price") * 89 // 100)
        )
    else:
        stream = stream.filter(lambda _k, v: v["auction"] % 3 == 0).map_values(
            lambda v: {"auction": v["auction"], "price": v["price"] * 89 // 100}
        )
    stream.to(sink, key_serde=S, value_serde=J)
    return b


def test_fused_expressions_write_what_lambdas_do(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, native_out, lambda_out = unique("bids"), unique("native"), unique("lambdas")
    create_topics(boot, {source: 2, native_out: 2, lambda_out: 2})
    records: list[tuple[bytes | None, bytes | None, int]] = [
        (f"k{i % 13}".encode(), json.dumps({"auction": i % 7, "price": i}).encode(), BASE_TS + i)
        for i in range(300)
    ]
    produce(boot, source, records)
    produce(boot, source, [(b"k1", b'{"auction": ', BASE_TS + 300)])
    produce(boot, source, records[:30])
    outputs = {}
    for native, sink in ((True, native_out), (False, lambda_out)):
        config = app_config(
            boot,
            unique("fused" if native else "plain"),
            str(tmp_path / sink),
            **{"deserialization.exception.handler": "log_and_continue"},
        )
        with KafkaStreams(_apps(source, sink, native).build(), config) as app:
            app.run_until_end(timeout=120)
            assert app.metrics()["skipped-records"] == 1
        outputs[native] = per_key_in_order(read_all(boot, sink))
    kept = [r for r in records + records[:30] if json.loads(r[1] or b"")["auction"] % 3 == 0]
    assert sum(map(len, outputs[True].values())) == len(kept)
    assert outputs[True] == outputs[False]
