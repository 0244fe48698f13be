"""The librdkafka settings strom gives its consumers, and the user's overrides."""

from __future__ import annotations

from strom.config import StreamsConfig
from strom.kafka.clients import consumer_config

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
