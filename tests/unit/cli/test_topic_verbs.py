"""``strom topics``, ``strom produce`` and ``strom tail`` on the embedded log,
through Click's runner (stdin included); the same verbs on Kafka are in
tests/integration/test_cli_kafka.py."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from strom import serdes
from strom.cli.main import cli
from strom.embedded import EmbeddedLog


def strom(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(
        cli, list(args), input=input, catch_exceptions=False, prog_name="strom"
    )


@pytest.fixture
def servers(tmp_path: Path) -> str:
    return f"embedded:{tmp_path / 'log'}"


def test_create_list_describe_delete(servers: str, tmp_path: Path) -> None:
    done = strom(
        "topics",
        "create",
        "orders",
        "-b",
        servers,
        "-p",
        "3",
        "--topic-config",
        "cleanup.policy=compact",
    )
    assert done.exit_code == 0, done.stderr
    assert done.stdout == f"topic orders created (3 partition(s)) at {servers}\n"
    assert strom("topics", "create", "users", "-b", servers).exit_code == 0
    log = EmbeddedLog(tmp_path / "log")
    assert log.partitions("orders") == 3
    assert log.topic_config("orders")["cleanup.policy"] == "compact"

    assert strom("topics", "list", "-b", servers).stdout == "orders\nusers\n"
    listed = strom("topics", "list", "-b", servers, "--format", "json").stdout
    assert json.loads(listed) == ["orders", "users"]

    with log.producer() as producer:
        producer.produce("orders", b"k", b"v", partition=1)
    described = json.loads(
        strom("topics", "describe", "orders", "-b", servers, "--format", "json").stdout
    )
    (orders,) = described
    assert [(p["partition"], p["start"], p["end"]) for p in orders["partitions"]] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 0, 0),
    ]
    assert orders["config"]["cleanup.policy"] == "compact"
    text = strom("topics", "describe", "orders", "-b", servers).stdout
    assert "Topic: orders\tPartitionCount: 3\tRecords: 1" in text
    assert "\tPartition: 1\tStart: 0\tEnd: 1" in text

    done = strom("topics", "delete", "orders", "-b", servers)
    assert done.exit_code == 0 and done.stdout == f"deleted topic orders at {servers}\n"
    assert log.topics() == ["users"]


def test_topic_errors_are_one_line(servers: str, tmp_path: Path) -> None:
    assert strom("topics", "create", "t", "-b", servers).exit_code == 0
    again = strom("topics", "create", "t", "-b", servers)
    assert again.exit_code == 1
    assert again.stderr.startswith("strom topics create: ") and "exists" in again.stderr
    assert len(again.stderr.splitlines()) == 1
    assert strom("topics", "create", "t", "-b", servers, "--if-not-exists").exit_code == 0

    replicated = strom("topics", "create", "u", "-b", servers, "-r", "2")
    assert replicated.exit_code == 2 and "--replication-factor must be 1" in replicated.stderr

    unknown = strom("topics", "delete", "nope", "-b", servers)
    assert unknown.exit_code == 1 and "nope" in unknown.stderr
    assert strom("topics", "delete", "nope", "-b", servers, "--if-exists").exit_code == 0

    missing = strom("topics", "list", "-b", f"embedded:{tmp_path / 'nothing'}")
    assert missing.exit_code == 1
    assert (
        missing.stderr == f"strom topics list: there is no embedded log at {tmp_path / 'nothing'}\n"
    )

    settings = strom("topics", "list", "-b", servers, "--set", "security.protocol=SSL")
    assert settings.exit_code == 2 and "the embedded log takes none" in settings.stderr


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ("embeded:data/log", "'embeded:data/log' is not host:port (the embedded log is"),
        ("nosuchhost.invalid:9092", "'nosuchhost.invalid' does not resolve"),
    ],
)
def test_a_mistyped_transport_or_host_is_named(servers: str, message: str) -> None:
    done = strom("topics", "list", "-b", servers)
    assert done.exit_code in (1, 2)
    assert message in done.stderr and len(done.stderr.splitlines()) == 1


def test_produce_lines_with_keys_then_tail(servers: str, tmp_path: Path) -> None:
    strom("topics", "create", "scores", "-b", servers, "-p", "2")
    lines = "alice=3\nbob=5\n\ncarol=7\nalice=4\n"
    done = strom(
        "produce",
        "scores",
        "-b",
        servers,
        "--key-separator",
        "=",
        "--value-serde",
        "long",
        input=lines,
    )
    assert done.exit_code == 0, done.stderr
    assert done.stdout == f"wrote 4 record(s) to scores at {servers}\n"
    log = EmbeddedLog(tmp_path / "log")
    records = list(log.records("scores", key_serde=serdes.String(), value_serde=serdes.Long()))
    assert sorted((r.key, r.value) for r in records) == [
        ("alice", 3),
        ("alice", 4),
        ("bob", 5),
        ("carol", 7),
    ]
    # Keys are partitioned as Kafka's Java producer would (murmur2 of the serialized key).
    by_key = {r.key: r.partition for r in records}
    with log.producer(key_serde=serdes.String(), value_serde=serdes.Long()) as producer:
        producer.produce("scores", "alice", 0)
    alice = [r for r in log.records("scores", key_serde=serdes.String()) if r.key == "alice"]
    assert {r.partition for r in alice} == {by_key["alice"]}

    tailed = strom(
        "tail",
        "scores",
        "-b",
        servers,
        "--from-beginning",
        "--key-separator",
        " ",
        "--value-serde",
        "long",
    )
    assert tailed.exit_code == 0, tailed.stderr
    assert sorted(tailed.stdout.splitlines()) == sorted(
        ["alice 3", "alice 4", "bob 5", "carol 7", "alice 0"]
    )
    last = strom("tail", "scores", "-b", servers, "-n", "1", "--value-serde", "long")
    expected_last = {
        str(max(records_of_partition, key=lambda r: r.offset).value)
        for records_of_partition in _by_partition(log, "scores").values()
    }
    assert set(last.stdout.split()) == expected_last
    assert (
        strom(
            "tail", "scores", "-b", servers, "--max-records", "2", "--from-beginning"
        ).stdout.count("\n")
        == 2
    )


def _by_partition(log: EmbeddedLog, topic: str) -> dict[int, list[object]]:
    out: dict[int, list[object]] = {}
    for r in log.records(topic, key_serde=serdes.String(), value_serde=serdes.Long()):
        out.setdefault(r.partition, []).append(r)
    return out


def test_tail_json_piped_into_produce_copies_a_topic(servers: str, tmp_path: Path) -> None:
    for topic in ("a", "b"):
        strom("topics", "create", topic, "-b", servers, "-p", "3")
    log = EmbeddedLog(tmp_path / "log")
    sent = [("k1", {"n": 1}, 1_000), (None, {"n": 2}, 2_000), ("k3", None, 3_000)]
    with log.producer(key_serde=serdes.String(), value_serde=serdes.Json()) as producer:
        for key, value, at in sent:
            producer.produce("a", key, value, timestamp=at, headers=[("trace", b"x1")])
    log.close()
    tailed = strom(
        "tail", "a", "-b", servers, "--from-beginning", "--format", "json", "--value-serde", "json"
    )
    assert tailed.exit_code == 0, tailed.stderr
    rows = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert sorted((r["key"] or "", json.dumps(r["value"]), r["timestamp"]) for r in rows) == sorted(
        (k or "", json.dumps(v), t) for k, v, t in sent
    )
    assert all(r["headers"] == [["trace", "x1"]] for r in rows)

    copied = strom(
        "produce",
        "b",
        "-b",
        servers,
        "--format",
        "json",
        "--value-serde",
        "json",
        input=tailed.stdout,
    )
    assert copied.exit_code == 0, copied.stderr
    log = EmbeddedLog(tmp_path / "log")
    original = list(log.records("a"))
    copy = list(log.records("b"))
    same = [(r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in original]
    assert [(r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in copy] == same


@pytest.mark.parametrize(
    ("serde", "text", "expected"),
    [
        ("short", "-7\n300\n", [-7, 300]),
        ("float", "0.5\n-2\n", [0.5, -2.0]),
        ("boolean", "true\nFALSE\n", [True, False]),
        (
            "uuid",
            "6fa459ea-ee8a-3ca4-894e-db77e160355e\n",
            [uuid.UUID("6fa459ea-ee8a-3ca4-894e-db77e160355e")],
        ),
    ],
)
def test_produce_and_tail_the_other_kafka_serdes(
    servers: str, tmp_path: Path, serde: str, text: str, expected: list[object]
) -> None:
    """Kafka's Short, Float, Boolean and UUID serdes: produced as their Java
    serializers write them, tailed back to the text produce reads."""
    strom("topics", "create", "t", "-b", servers)
    done = strom("produce", "t", "-b", servers, "--value-serde", serde, input=text)
    assert done.exit_code == 0, done.stderr
    kind = {"short": serdes.Short, "float": serdes.Float, "boolean": serdes.Boolean}
    value_serde = kind.get(serde, serdes.UUID)()
    log = EmbeddedLog(tmp_path / "log")
    assert [r.value for r in log.records("t", value_serde=value_serde)] == expected
    tailed = strom("tail", "t", "-b", servers, "--from-beginning", "--value-serde", serde)
    again = strom("produce", "t", "-b", servers, "--value-serde", serde, input=tailed.stdout)
    assert again.exit_code == 0, again.stderr
    assert [r.value for r in log.records("t", value_serde=value_serde)] == expected * 2


@pytest.mark.parametrize(
    ("args", "text", "message"),
    [
        (["--value-serde", "long"], "1\nx\n", "<stdin>, line 2: the value 'x' is not an integer"),
        (["--value-serde", "short"], "40000\n", "line 1: the value '40000' is not a short"),
        (["--value-serde", "boolean"], "yes\n", "the value 'yes' is not true or false"),
        (["--value-serde", "uuid"], "nope\n", "the value 'nope' is not a UUID"),
        (["--key-separator", ":"], "a:1\nb2\n", "<stdin>, line 2: no key separator ':'"),
        (["--format", "json"], '{"value": "a"}\n{"key": "b"}\n', "line 2: a line is a JSON object"),
        (
            ["--format", "json"],
            '{"value": 5}\n',
            "the value 5 is not a string (--value-serde string)",
        ),
        (["--format", "json"], '{"value": "x", "when": 1}\n', "unknown field(s) when"),
        (
            ["--value-serde", "bytes"],
            "not base64!\n",
            "line 1: the value 'not base64!' is not base64",
        ),
    ],
)
def test_produce_names_the_bad_line(
    servers: str, tmp_path: Path, args: list[str], text: str, message: str
) -> None:
    strom("topics", "create", "t", "-b", servers)
    done = strom("produce", "t", "-b", servers, *args, input=text)
    assert done.exit_code == 2
    assert message in done.stderr and len(done.stderr.splitlines()) == 1


def test_produce_from_a_file_and_unknown_topics(servers: str, tmp_path: Path) -> None:
    strom("topics", "create", "t", "-b", servers)
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    done = strom("produce", "t", "-b", servers, "--file", str(source), "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["records"] == 2
    assert strom("tail", "t", "-b", servers).stdout == "one\ntwo\n"

    unknown = strom("produce", "nope", "-b", servers, input="x\n")
    assert unknown.exit_code == 1 and "nope" in unknown.stderr
    assert strom("tail", "nope", "-b", servers).exit_code == 1


def test_tail_follow_needs_kafka(servers: str) -> None:
    strom("topics", "create", "t", "-b", servers)
    done = strom("tail", "t", "-b", servers, "--follow")
    assert done.exit_code == 2 and "--follow needs Kafka" in done.stderr


def test_tail_reports_a_record_its_serde_cannot_read(servers: str, tmp_path: Path) -> None:
    strom("topics", "create", "t", "-b", servers)
    strom("produce", "t", "-b", servers, input="not a number\n")
    done = strom("tail", "t", "-b", servers, "--value-serde", "long")
    assert done.exit_code == 1
    assert done.stderr == (
        "strom tail: t, partition 0, offset 0: the value is not a long "
        "(size of data received by LongDeserializer is not 8 (got 12 bytes))\n"
    )
