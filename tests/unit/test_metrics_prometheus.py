"""The Prometheus exporter and the health checks, scraped over HTTP from a
running app on the embedded log."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.support import wait_until

from strom import KafkaStreams, State, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError
from strom.metrics import MetricName
from strom.metrics.prometheus import prometheus_name

S = serdes.String()


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def app(log: EmbeddedLog, log_path: str, fail_on: str | None = None, **extra: Any) -> KafkaStreams:
    log.create_topic("in")
    log.create_topic("out")

    def upper(value: str) -> str:
        if value == fail_on:
            raise ValueError("a poison value")
        return value.upper()

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(upper).to(
        "out", key_serde=S, value_serde=S
    )
    config = {
        "application.id": "scraped",
        "bootstrap.servers": f"embedded:{log_path}",
        "metrics.port": 0,
        "commit.interval.ms": 50,
        **extra,
    }
    return KafkaStreams(builder.build(), config)


def test_prometheus_names_follow_the_jmx_exporter() -> None:
    name = MetricName("process-rate", "stream-thread-metrics", {"thread-id": "t"})
    assert prometheus_name(name) == "kafka_streams_stream_thread_metrics_process_rate"
    lag = MetricName("records-lag", "consumer-fetch-manager-metrics", {})
    assert prometheus_name(lag) == "kafka_consumer_consumer_fetch_manager_metrics_records_lag"


def test_metrics_and_health_over_http(log: EmbeddedLog, log_path: str) -> None:
    streams = app(log, log_path)
    assert streams.metrics_server is None  # not before start
    with log.producer() as producer:
        for i in range(25):
            producer.produce("in", b"k", b"v", timestamp=i)
    streams.start()
    try:
        server = streams.metrics_server
        assert server is not None and server.host == "127.0.0.1" and server.port > 0
        wait_until(lambda: streams.state is State.RUNNING, 30, "RUNNING")
        assert get(server.url + "/health/live")[0] == 200
        assert get(server.url + "/health/ready") == (200, "RUNNING\n")
        thread = (("thread_id", "scraped-StreamThread-1"),)
        total = ("kafka_streams_stream_thread_metrics_process_total", thread)
        wait_until(
            lambda: samples(get(server.url + "/metrics")[1]).get(total) == 25, 30, "25 processed"
        )
        scraped = samples(get(server.url + "/metrics")[1])
        assert scraped[("strom_state", (("state", "RUNNING"),))] == 1
        assert scraped[("strom_state", (("state", "ERROR"),))] == 0
        lag = (
            "kafka_consumer_consumer_fetch_manager_metrics_records_lag",
            (("client_id", "scraped-StreamThread-1-consumer"), ("partition", "0"), ("topic", "in")),
        )
        assert scraped[lag] == 0
        assert get(server.url + "/nothing")[0] == 404
    finally:
        streams.close()
    # Closed: the port is free again.
    with pytest.raises(OSError):
        socket.create_connection((server.host, server.port), timeout=2)


def test_health_checks_after_the_app_failed(log: EmbeddedLog, log_path: str) -> None:
    streams = app(log, log_path, fail_on="poison")
    with log.producer() as producer:
        producer.produce("in", b"k", b"poison", timestamp=1)
    streams.start()
    try:
        server = streams.metrics_server
        assert server is not None
        wait_until(lambda: streams.state is State.ERROR, 30, "ERROR")
        assert get(server.url + "/health/live") == (503, "ERROR\n")
        assert get(server.url + "/health/ready") == (503, "ERROR\n")
        scraped = samples(get(server.url + "/metrics")[1])
        assert scraped[("strom_state", (("state", "ERROR"),))] == 1
    finally:
        streams.close()


def test_a_taken_port_is_a_config_error(log: EmbeddedLog, log_path: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        streams = app(log, log_path, **{"metrics.port": port})
        with pytest.raises(
            ConfigError, match=f"metrics.port: cannot serve metrics on 127.0.0.1:{port}"
        ):
            streams.start()
        assert streams.state is State.CREATED
        streams.close()
