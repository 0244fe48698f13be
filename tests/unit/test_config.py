"""StreamsConfig validation and pass-through."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import strom.config
from strom import StreamsConfig, serdes
from strom.errors import ConfigError


def test_defaults_and_known_keys() -> None:
    config = StreamsConfig({"application.id": "app", "bootstrap.servers": "embedded:/tmp/x"})
    assert config["processing.guarantee"] == "at_least_once"
    assert config["commit.interval.ms"] == 30_000
    assert config.embedded_path == "/tmp/x"
    assert StreamsConfig({"bootstrap.servers": "h:9092"}).embedded_path is None


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"commit.interval.ms": "soon"}, "commit.interval.ms must be an integer"),
        ({"num.stream.threads": 0}, "num.stream.threads must be >= 1"),
        ({"processing.guarantee": "exactly_once"}, "must be one of"),
        ({"default.key.serde": "String"}, "default.key.serde must be a strom serde"),
        ({"aplication.id": "x"}, "did you mean 'application.id'"),
        ({"deserialization.exception.handler": "ignore"}, "log_and_continue"),
    ],
)
def test_bad_values_are_rejected_with_the_key_named(props: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StreamsConfig(props)


def test_missing_required_key() -> None:
    with pytest.raises(ConfigError, match=r"missing required config 'application\.id'"):
        _ = StreamsConfig({}).application_id
    with pytest.raises(ConfigError, match="needs a path"):
        _ = StreamsConfig({"bootstrap.servers": "embedded:"}).embedded_path


def test_client_settings_pass_through() -> None:
    config = StreamsConfig(
        {
            "security.protocol": "SASL_SSL",
            "consumer.fetch.min.bytes": 1,
            "producer.linger.ms": 5,
            "default.value.serde": serdes.Long,
        }
    )
    assert config["default.value.serde"] == serdes.Long()
    assert config.client_config("consumer.") == {
        "security.protocol": "SASL_SSL",
        "fetch.min.bytes": 1,
    }
    assert config.client_config("producer.") == {"security.protocol": "SASL_SSL", "linger.ms": 5}


def test_topic_settings_go_to_internal_topics_not_clients() -> None:
    config = StreamsConfig({"topic.min.insync.replicas": 2, "security.protocol": "SSL"})
    assert config.topic_config() == {"min.insync.replicas": "2"}
    assert config.client_config("consumer.") == {"security.protocol": "SSL"}


def test_a_java_apps_properties_file_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """StreamsConfig.from_properties reads what a Java app's StreamsConfig
    reads: text values, Kafka's built-in serdes and handlers by class name,
    and keys strom has no use for (accepted, with a warning, kept from the
    clients)."""
    path = tmp_path / "streams.properties"
    path.write_text(
        "# a Java Kafka Streams app's settings\n"
        "application.id=orders\n"
        "bootstrap.servers=broker-1:9092,\\\n"
        "    broker-2:9092\n"
        "processing.guarantee=exactly_once_v2\n"
        "num.stream.threads=2\n"
        "default.key.serde=org.apache.kafka.common.serialization.Serdes$StringSerde\n"
        "default.value.serde=org.apache.kafka.common.serialization.Serdes$LongSerde\n"
        "deserialization.exception.handler="
        "org.apache.kafka.streams.errors.LogAndContinueExceptionHandler\n"
        "iq.http=true\n"
        "topology.optimization=all\n"
        "rocksdb.config.setter=com.example.BoundedMemory\n"
        "default.list.value.serde.inner=org.apache.kafka.common.serialization.Serdes$LongSerde\n"
        "security.protocol=SASL_SSL\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(strom.config, "_warned", set())  # each key warns once a process
    with caplog.at_level(logging.WARNING, logger="strom.config"):
        config = StreamsConfig.from_properties(path)
    assert config.application_id == "orders"
    assert config["bootstrap.servers"] == "broker-1:9092,broker-2:9092"
    assert config["processing.guarantee"] == "exactly_once_v2"
    assert config["num.stream.threads"] == 2
    assert config["commit.interval.ms"] == 100  # exactly-once's default, as Kafka's
    assert (config["default.key.serde"], config["default.value.serde"]) == (
        serdes.String(),
        serdes.Long(),
    )
    assert config["deserialization.exception.handler"] == "log_and_continue"
    assert config["iq.http"] is True
    assert "'rocksdb.config.setter' has no effect in strom" in caplog.text
    assert config.client_config("consumer.") == {"security.protocol": "SASL_SSL"}
    with pytest.raises(ConfigError, match="Java class name"):
        StreamsConfig({"default.key.serde": "com.example.MySerde"})
