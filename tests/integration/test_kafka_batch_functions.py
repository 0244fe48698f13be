"""Batch functions on a real broker: the batches the native Kafka consumer
read reach ``filter_batches``/``map_batches`` through the Arrow C data
interface, and the app writes what its lambda version writes (a value that
is not JSON skipped by the deserialization handler in both)."""

from __future__ import annotations

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
from tests.unit.test_batch_functions import batch_app, bid_rows, kept_by_apps, lambda_app

from strom import KafkaStreams, StreamsBuilder

pytestmark = pytest.mark.kafka


def test_batch_functions_write_what_lambdas_do(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, batch_out, lambda_out = unique("bids"), unique("batches"), unique("lambdas")
    create_topics(boot, {source: 2, batch_out: 2, lambda_out: 2})
    rows = bid_rows()
    produce(boot, source, [(k.encode(), v, BASE_TS + i) for i, (k, v) in enumerate(rows)])
    outputs = {}
    for app, sink in ((batch_app, batch_out), (lambda_app, lambda_out)):
        b = StreamsBuilder()
        app(b, source, sink)
        config = app_config(
            boot,
            unique(sink),
            str(tmp_path / sink),
            **{"deserialization.exception.handler": "log_and_continue"},
        )
        with KafkaStreams(b.build(), config) as streams:
            streams.run_until_end(timeout=120)
            assert streams.metrics()["skipped-records"] == 1
        outputs[sink] = per_key_in_order(read_all(boot, sink))
    assert sum(map(len, outputs[batch_out].values())) == len(kept_by_apps(rows))
    assert outputs[batch_out] == outputs[lambda_out]
