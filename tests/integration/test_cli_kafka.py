"""``strom reset`` on the broker with client settings from ``--config-file``
(a Java properties file, as Kafka's reset tool takes it) and ``--set KEY=VALUE``
(issue #25's security options; the secured broker's suite uses them with
SASL/TLS settings)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
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
from strom.cli.main import cli as cli_group
from strom.embedded import EmbeddedLog

ROOT = Path(__file__).resolve().parents[2]
STROM = str(Path(sys.executable).with_name("strom"))


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


# --- the topic verbs, run, tail --follow and bench on the broker ------------------------


def cli(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        cli_group, list(args), input=input, catch_exceptions=False, prog_name="strom"
    )


def test_topics_on_kafka(kafka: KafkaCluster) -> None:
    boot, topic = kafka.bootstrap_servers, unique("cli-topic")
    done = cli(
        "topics", "create", topic, "-b", boot, "-p", "3", "--topic-config", "cleanup.policy=compact"
    )
    assert done.exit_code == 0, done.stderr
    assert done.stdout == f"topic {topic} created (3 partition(s)) at {boot}\n"
    again = cli("topics", "create", topic, "-b", boot)
    assert again.exit_code == 1 and "already exists" in again.stderr
    assert len(again.stderr.splitlines()) == 1
    assert topic in cli("topics", "list", "-b", boot).stdout.split()
    produce(boot, topic, [(b"k", b"v", 1_000)])
    (info,) = json.loads(cli("topics", "describe", topic, "-b", boot, "--format", "json").stdout)
    assert len(info["partitions"]) == 3 and info["config"] == {"cleanup.policy": "compact"}
    assert sum(p["end"] - p["start"] for p in info["partitions"]) == 1
    assert all(p["leader"] is not None and p["replicas"] for p in info["partitions"])
    text = cli("topics", "describe", topic, "-b", boot).stdout
    assert f"Topic: {topic}\tPartitionCount: 3\tRecords: 1" in text and "Leader: " in text
    assert cli("topics", "delete", topic, "-b", boot).exit_code == 0
    wait_until(
        lambda: topic not in cli("topics", "list", "-b", boot).stdout.split(),
        timeout=60,
        what="the topic to be deleted",
    )
    # Naming a topic that does not exist creates nothing (the broker would
    # auto-create a topic named in a metadata request).
    for verb in ("tail", "produce"):
        unknown = cli(verb, topic, "-b", boot, input="x\n")
        assert unknown.exit_code == 1
        assert unknown.stderr == f"strom {verb}: there is no topic {topic!r} at {boot}\n"
    assert cli("topics", "describe", topic, "-b", boot).exit_code == 1
    assert topic not in cli("topics", "list", "-b", boot).stdout.split()


def test_produce_then_tail_on_kafka(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot, topic = kafka.bootstrap_servers, unique("cli-scores")
    create_topics(boot, {topic: 3})
    lines = "".join(f"user{i % 7}:{i}\n" for i in range(50))
    done = cli(
        "produce", topic, "-b", boot, "--key-separator", ":", "--value-serde", "long", input=lines
    )
    assert done.exit_code == 0, done.stderr
    messages = read_all(boot, topic)
    assert sorted(
        (m.key().decode(), serdes.Long().deserialize(topic, m.value())) for m in messages
    ) == sorted((f"user{i % 7}", i) for i in range(50))
    # Each key in the partition Kafka's Java clients (and the embedded log) give it.
    log = EmbeddedLog(tmp_path / "log")
    log.create_topic(topic, partitions=3)
    with log.producer() as producer:
        for m in messages:
            producer.produce(topic, m.key(), m.value())
    embedded = {r.key: r.partition for r in log.records(topic)}
    assert {m.key(): m.partition() for m in messages} == embedded

    tailed = cli(
        "tail", topic, "-b", boot, "--from-beginning", "--format", "json", "--value-serde", "long"
    )
    assert tailed.exit_code == 0, tailed.stderr
    rows = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert sorted((r["key"], r["value"]) for r in rows) == sorted(
        (f"user{i % 7}", i) for i in range(50)
    )
    last = cli("tail", topic, "-b", boot, "-n", "2", "--value-serde", "long")
    by_partition: dict[int, list[int]] = {}
    for m in messages:
        by_partition.setdefault(m.partition(), []).append(
            serdes.Long().deserialize(topic, m.value())
        )
    expected = sorted(v for values in by_partition.values() for v in values[-2:])
    assert sorted(int(v) for v in last.stdout.split()) == expected


def test_tail_follow_on_kafka_prints_new_records_until_sigterm(kafka: KafkaCluster) -> None:
    boot, topic = kafka.bootstrap_servers, unique("cli-follow")
    create_topics(boot, {topic: 2})
    produce(boot, topic, [(b"old", b"before", 1_000)])
    with subprocess.Popen(
        [STROM, "tail", topic, "-b", boot, "--follow", "-n", "0", "--key-separator", "="],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stderr is not None and process.stdout is not None
        assert process.stderr.readline() == f"strom tail: following {topic} …\n"
        produce(boot, topic, [(f"k{i}".encode(), f"v{i}".encode(), 2_000 + i) for i in range(5)])
        got = [process.stdout.readline().strip() for _ in range(5)]
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0
    assert sorted(got) == [f"k{i}=v{i}" for i in range(5)]


RUN_APP = """
from tests.integration.kafka_support import word_count_topology
import os

def topology():
    return word_count_topology(os.environ["CLI_SOURCE"], os.environ["CLI_SINK"])
"""


def test_strom_run_on_kafka_until_sigterm(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    source, sink, app_id = unique("run-in"), unique("run-out"), unique("run-app")
    create_topics(boot, {source: 2, sink: 2})
    text = [f"w{i % 5} w{i % 3}" for i in range(100)]
    produce(boot, source, ((None, line.encode(), 1_000 + i) for i, line in enumerate(text)))
    (tmp_path / "cli_run_app.py").write_text(RUN_APP)
    settings = tmp_path / "app.toml"
    settings.write_text(
        f'application.id = "{app_id}"\nbootstrap.servers = "{boot}"\n'
        f'state.dir = "{tmp_path / "state"}"\ncommit.interval.ms = 200\n'
    )
    env = {
        **os.environ,
        "CLI_SOURCE": source,
        "CLI_SINK": sink,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    expected = dict(Counter(w for line in text for w in line.split()))
    with subprocess.Popen(
        [
            STROM,
            "run",
            "cli_run_app:topology",
            "--app-dir",
            str(tmp_path),
            "--config-file",
            str(settings),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        wait_until(
            lambda: latest_by_key(read_all(boot, sink), serdes.String(), serdes.Long()) == expected,
            timeout=120,
            what="the app's counts",
        )
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "state PENDING_SHUTDOWN -> NOT_RUNNING" in stderr


def test_strom_bench_runs_the_suite(kafka: KafkaCluster) -> None:
    """The smallest real run: strom alone, Nexmark q0, one round, on this broker."""
    done = subprocess.run(
        [
            STROM,
            "bench",
            "--systems",
            "strom",
            "--queries",
            "q0",
            "--records",
            "2000",
            "--rounds",
            "1",
            "--latency",
            "",
            "--report",
            "-",
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    ((cell),) = summary["cells"]
    assert (cell["system"], cell["workload"], cell["status"]) == ("strom", "q0", "ok")
    assert cell["records_per_s"] > 0 and summary["mismatches"] == 0
