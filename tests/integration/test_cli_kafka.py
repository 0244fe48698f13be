"""``strom reset`` on the broker with client settings from ``--config-file``
(a Java properties file, as Kafka's reset tool takes it) and ``--set KEY=VALUE``
(issue #25's security options; the secured broker's suite uses them with
SASL/TLS settings)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from tests.integration.kafka_support import (
    app_config,
    create_topics,
    latest_by_key,
    produce,
    read_all,
    unique,
    word_count_topology,
)
from tests.kafka_harness import KafkaCluster
from tests.support import wait_until

from strom import KafkaStreams, serdes
from strom.cli import main


@pytest.mark.parametrize("how", ["--config-file", "--set"])
def test_client_settings_reach_the_reset_tools_client(
    how: str, kafka: KafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A setting librdkafka refuses proves the setting got to it, and the
    refusal is one line."""
    if how == "--config-file":
        properties = tmp_path / "client.properties"
        properties.write_text("# a client setting no client knows\nno.such.setting = 1\n")
        option = [how, str(properties)]
    else:
        option = [how, "no.such.setting=1"]
    args = ["reset", "--application-id", unique("app"), "--bootstrap-servers"]
    assert main([*args, kafka.bootstrap_servers, *option]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no.such.setting" in err[0], err


def test_a_reset_with_client_settings_recounts_from_scratch(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("text"), unique("counts"), unique("reset-cli")
    create_topics(boot, {source: 2, sink: 2})
    text = [f"w{i % 7} w{i % 3} w{i % 5}" for i in range(200)]
    produce(boot, source, ((None, line.encode(), 1_000 + i) for i, line in enumerate(text)))
    topology = word_count_topology(source, sink)
    config = app_config(boot, app_id, str(tmp_path / "state"))
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=120)
    properties = tmp_path / "client.properties"
    properties.write_text("client.id=strom-reset-test\nsocket.keepalive.enable: true\n")
    code = main(
        [
            "reset",
            "--application-id",
            app_id,
            "--bootstrap-servers",
            boot,
            "--state-dir",
            str(tmp_path / "state"),
            "--config-file",
            str(properties),
            "--set",
            "client.id=strom-reset-test-2",
        ]
    )
    assert code == 0
    admin = AdminClient({"bootstrap.servers": boot})
    wait_until(
        lambda: not [t for t in admin.list_topics(timeout=10).topics if t.startswith(app_id)],
        timeout=60,
        what="the internal topics to be deleted",
    )
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=120)
        assert app.metrics()["restored-records"] == 0
    expected = dict(Counter(w for line in text for w in line.split()))
    assert latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected
