"""The harness's secured broker (``kafka_secured``, ``scripts/kafka start
--security``) is secured: clients must authenticate, the certificate checks
out against the harness's CA only, nothing is allowed that no ACL grants, and
what kafka-acls grants takes effect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from tests.integration.kafka_support import create_topics, unique
from tests.integration.security_support import grant
from tests.kafka_harness import (
    REPO_ROOT,
    SASL_PLAINTEXT,
    SASL_SSL,
    KafkaCluster,
    generate_ca,
    metadata_brokers,
)

TIMEOUT = 30.0


def _admin(config: dict[str, Any]) -> AdminClient:
    return AdminClient(config)


def _topics(config: dict[str, Any]) -> set[str]:
    return set(_admin(config).list_topics(timeout=10).topics)


def _refused(config: dict[str, Any]) -> str:
    """The errors a client with ``config`` reports (its connections must fail)."""
    errors: list[str] = []
    producer = Producer(config | {"error_cb": lambda e: errors.append(e.str())})
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, f"no connection error within {TIMEOUT:.0f} s"
    return " | ".join(errors)


@pytest.mark.parametrize("protocol", [SASL_SSL, SASL_PLAINTEXT])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_every_user_connects_over_both_listeners(
    kafka_secured: KafkaCluster, protocol: str, mechanism: str
) -> None:
    for user in ("admin", "app", "reader"):
        config = kafka_secured.client_config(user, protocol=protocol, mechanism=mechanism)
        metadata = _admin(config).list_topics(timeout=10)
        assert list(metadata.brokers) == [0]


def test_wrong_credentials_and_an_unknown_ca_are_refused(
    kafka_secured: KafkaCluster, tmp_path: Path
) -> None:
    assert "SASL authentication error" in _refused(
        kafka_secured.client_config("app", password="wrong")
    )
    other = generate_ca(tmp_path, "other-ca")
    refused = _refused(kafka_secured.client_config("app") | {"ssl.ca.location": str(other.pem)})
    assert "certificate verify failed" in refused
    # No SASL at all: the broker expects a SASL handshake and drops the connection.
    assert _refused({"bootstrap.servers": kafka_secured.bootstrap_for(SASL_PLAINTEXT)})


def test_acls_are_enforced_and_granted(kafka_secured: KafkaCluster) -> None:
    topic = unique("acl")
    admin = kafka_secured.client_config()
    create_topics(admin, {topic: 1})
    producer = Producer(admin)
    producer.produce(topic, b"v")
    assert producer.flush(TIMEOUT) == 0

    app = kafka_secured.client_config("app")
    assert topic not in _topics(app)  # not even visible without an ACL

    # kafka-acls, exactly as given; grant() then waits until the broker enforces it.
    read = ["--add", "--allow-principal", "User:app", "--operation", "Read", "--topic", topic]
    grant(kafka_secured, [], user="app", application_id="unused", extra=[read])
    assert topic in _topics(app)
    # Read by assignment. librdkafka still looks up the consumer's group
    # coordinator, which needs an ACL on the group: that alone is denied.
    consumer = Consumer(app | {"group.id": unique("reader"), "enable.auto.commit": False})
    values, errors = [], set()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while not values and time.monotonic() < deadline:
            for message in consumer.consume(10, 0.5):
                error = message.error()
                if error is None:
                    values.append(message.value())
                else:
                    errors.add(error.code())
    finally:
        consumer.close()
    assert values == [b"v"]
    assert errors <= {KafkaError.GROUP_AUTHORIZATION_FAILED}, errors
    # Still nothing on groups: describing one is denied.
    group = unique("group")
    app_admin = _admin(app)
    with pytest.raises(KafkaException) as denied:
        app_admin.describe_consumer_groups([group], request_timeout=TIMEOUT)[group].result()
    assert denied.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_a_user_added_later_can_connect(kafka_secured: KafkaCluster) -> None:
    name = unique("late")
    kafka_secured.add_user(name)
    assert list(_admin(kafka_secured.client_config(name)).list_topics(timeout=10).brokers) == [0]


def test_command_line_secured_start_acls_and_stop(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    script = str(REPO_ROOT / "scripts" / "kafka")
    env = os.environ | {"PYTHON": sys.executable}

    def kafka(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, *args, "--dir", str(run_dir)] if args[0] != "acls" else [script, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=180,
            check=False,
        )

    started = kafka("start", "--security", "sasl_ssl")
    try:
        assert started.returncode == 0, started.stderr
        state = json.loads((run_dir / "cluster.json").read_text())
        assert started.stdout.strip() == state["bootstrap_servers"]
        assert (run_dir / "cluster.json").stat().st_mode & 0o077 == 0  # it holds passwords
        clients = run_dir / "clients"
        assert {p.name for p in clients.iterdir()} >= {"app.properties", "admin-java.properties"}
        status = kafka("status")
        assert status.returncode == 0, status.stdout + status.stderr
        node = state["nodes"][0]
        brokers = metadata_brokers(node["ports"]["INTERNAL"]).brokers
        assert brokers == {0}

        acl = ["--add", "--allow-principal", "User:app", "--operation", "Read", "--topic", "t"]
        added = kafka("acls", "--dir", str(run_dir), "--", *acl)
        assert added.returncode == 0, added.stdout + added.stderr
        assert "operation=READ" in added.stdout
        listed = kafka("acls", "--dir", str(run_dir), "--", "--list", "--topic", "t")
        assert "User:app" in listed.stdout, listed.stdout + listed.stderr

        config = dict(
            line.split("=", 1) for line in (clients / "app.properties").read_text().splitlines()
        )
        assert config["security.protocol"] == SASL_SSL
        assert list(_admin(config).list_topics(timeout=10).brokers) == [0]
    finally:
        stopped = kafka("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert kafka("status").returncode == 1
