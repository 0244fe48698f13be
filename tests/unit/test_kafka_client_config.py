"""The librdkafka settings strom gives its consumers, and the user's overrides."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka.admin import AdminClient

import strom.config
from strom._core import KafkaProducer
from strom.config import _CLIENT_RENAMED, _KEYS, _NO_EFFECT, _RENAMED, StreamsConfig
from strom.errors import ConfigError
from strom.kafka.clients import admin_config, consumer_config, native_config, producer_config
from strom.kafka.consumer import Consumer

BASE = {"application.id": "app", "bootstrap.servers": "localhost:9092"}


def test_group_members_heartbeat_often_so_rebalances_are_noticed_soon() -> None:
    member = consumer_config(StreamsConfig(BASE), "c", group=True)
    assert member["heartbeat.interval.ms"] == 500
    assert member["group.id"] == "app"
    # Read by assignment: no group, so no heartbeat either.
    assert "heartbeat.interval.ms" not in consumer_config(StreamsConfig(BASE), "r", group=False)


def test_consumer_settings_override_strom_defaults() -> None:
    config = StreamsConfig(
        BASE | {"consumer.heartbeat.interval.ms": 3000, "main.consumer.queued.min.messages": 10}
    )
    member = consumer_config(config, "c", group=True)
    assert member["heartbeat.interval.ms"] == 3000
    assert member["queued.min.messages"] == 10


# A Java Kafka Streams app's properties, as its users carry them over.
JAVA_PROPERTIES = {
    "cache.max.bytes.buffering": 1_048_576,
    "default.deserialization.exception.handler": "log_and_continue",
    "topology.optimization": "all",
    "task.timeout.ms": 300_000,
    "state.cleanup.delay.ms": 600_000,
    "acceptable.recovery.lag": 10_000,
    "rack.aware.assignment.tags": "zone",
    "client.tag.zone": "eu-1a",
    "rocksdb.config.setter": "com.example.Setter",
    "metric.reporters": "",
    "receive.buffer.bytes": 65_536,
    "send.buffer.bytes": 131_072,
    "retry.backoff.ms": 100,
    "reconnect.backoff.ms": 50,
    "metadata.max.age.ms": 300_000,
    "global.consumer.fetch.wait.max.ms": 250,
}


def test_a_java_apps_properties_load_and_reach_librdkafka_in_its_terms(
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kafka Streams keys strom has no use for stay away from the clients
    (librdkafka refuses keys it does not know: 'No such configuration
    property'), earlier names map to their 4.x keys, and Java client names
    to librdkafka's."""
    monkeypatch.setattr(strom.config, "_warned", set())  # each key warns once a process
    with caplog.at_level(logging.WARNING, logger="strom.config"):
        config = StreamsConfig(BASE | JAVA_PROPERTIES)
    assert config["statestore.cache.max.bytes"] == 1_048_576
    assert config["deserialization.exception.handler"] == "log_and_continue"
    assert "'topology.optimization' has no effect in strom" in caplog.text
    assert "'cache.max.bytes.buffering' is Kafka's earlier name" in caplog.text
    consumer = consumer_config(config, "c", group=True)
    restore = consumer_config(config, "r", group=False, prefix="restore.consumer.")
    global_ = consumer_config(config, "g", group=False, prefix="global.consumer.")
    producer = producer_config(config, "p", None)
    admin = admin_config(config)
    for conf in (consumer, restore, producer, admin):
        assert conf["socket.receive.buffer.bytes"] == 65_536
        assert conf["retry.backoff.ms"] == 100
        client_keys = {"retry.backoff.ms", "reconnect.backoff.ms", "metadata.max.age.ms"}
        assert client_keys <= set(conf)
        assert not set(conf) & (set(JAVA_PROPERTIES) - client_keys)
        assert "fetch.wait.max.ms" not in conf  # global.consumer. is the global consumer's
    assert global_["fetch.wait.max.ms"] == 250
    # librdkafka itself takes every one of them, in strom's own clients (it
    # checks names and values when a client is made; no broker is needed).
    for conf in (consumer, restore, global_):
        Consumer(conf).close()
    KafkaProducer(native_config(producer))
    AdminClient(admin)


def test_earlier_and_current_names_of_a_key_must_agree() -> None:
    with pytest.raises(ConfigError, match=r"cache.max.bytes.buffering .* both set"):
        StreamsConfig(BASE | {"cache.max.bytes.buffering": 1, "statestore.cache.max.bytes": 2})
    same = StreamsConfig(BASE | {"cache.max.bytes.buffering": 5, "statestore.cache.max.bytes": 5})
    assert same["statestore.cache.max.bytes"] == 5


# Every key of Kafka Streams 4.3's StreamsConfig (its *_CONFIG constants).
STREAMS_4_3_KEYS = [
    "acceptable.recovery.lag",
    "allow.os.group.write.access",
    "application.id",
    "application.server",
    "bootstrap.servers",
    "buffered.records.per.partition",
    "built.in.metrics.version",
    "cache.max.bytes.buffering",
    "client.id",
    "commit.interval.ms",
    "connections.max.idle.ms",
    "default.client.supplier",
    "default.deserialization.exception.handler",
    "default.dsl.store",
    "default.key.serde",
    "default.production.exception.handler",
    "default.timestamp.extractor",
    "default.value.serde",
    "deserialization.exception.handler",
    "dsl.store.format",
    "dsl.store.suppliers.class",
    "enable.metrics.push",
    "ensure.explicit.internal.resource.naming",
    "errors.dead.letter.queue.topic.name",
    "group.protocol",
    "log.summary.interval.ms",
    "max.task.idle.ms",
    "max.warmup.replicas",
    "metadata.max.age.ms",
    "metric.reporters",
    "metrics.num.samples",
    "metrics.recording.level",
    "metrics.sample.window.ms",
    "num.standby.replicas",
    "num.stream.threads",
    "poll.ms",
    "probing.rebalance.interval.ms",
    "processing.exception.handler",
    "processing.exception.handler.global.enabled",
    "processing.guarantee",
    "processor.wrapper.class",
    "production.exception.handler",
    "rack.aware.assignment.non_overlap_cost",
    "rack.aware.assignment.strategy",
    "rack.aware.assignment.tags",
    "rack.aware.assignment.traffic_cost",
    "receive.buffer.bytes",
    "reconnect.backoff.max.ms",
    "reconnect.backoff.ms",
    "repartition.purge.interval.ms",
    "replication.factor",
    "request.timeout.ms",
    "retry.backoff.ms",
    "rocksdb.config.setter",
    "security.protocol",
    "send.buffer.bytes",
    "state.cleanup.delay.ms",
    "state.cleanup.dir.max.age.ms",
    "state.dir",
    "statestore.cache.max.bytes",
    "task.assignor.class",
    "task.timeout.ms",
    "topology.optimization",
    "upgrade.from",
    "window.size.ms",
    "windowstore.changelog.additional.retention.ms",
]
# The ones Kafka Streams passes to its clients and librdkafka takes as they are.
CLIENT_KEYS = {
    "connections.max.idle.ms": 540_000,
    "metadata.max.age.ms": 300_000,
    "reconnect.backoff.max.ms": 1_000,
    "reconnect.backoff.ms": 50,
    "request.timeout.ms": 40_000,
    "retry.backoff.ms": 100,
    "security.protocol": "PLAINTEXT",
}


def test_every_kafka_streams_4_3_key_is_known() -> None:
    """Each key is strom's, accepted with no effect, Kafka's earlier name of
    one of strom's, a client key librdkafka names otherwise, or a client key
    librdkafka takes (and does: the clients are made with them)."""
    handled = set(_KEYS) | set(_NO_EFFECT) | set(_RENAMED) | set(_CLIENT_RENAMED)
    assert sorted(set(STREAMS_4_3_KEYS) - handled) == sorted(CLIENT_KEYS)
    config = StreamsConfig(BASE | CLIENT_KEYS)
    Consumer(consumer_config(config, "c", group=True)).close()
    KafkaProducer(native_config(producer_config(config, "p", None)))
    AdminClient(admin_config(config))
