"""``strom run`` on the embedded log, as a real process: a bounded run, a
graceful stop on SIGTERM (its work committed), exit code 1 when the app ends
in ERROR, settings from .properties and .toml files and ``--set``, and fast
one-line errors for bad settings. On Kafka: tests/integration/test_cli_kafka.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from tests.support import wait_until
from tests.unit.cli.test_cli import COMMAND_TIMEOUT_S, STROM, strom

from strom import serdes
from strom.cli.common import BadInput, read_config_file
from strom.embedded import EmbeddedLog

APP = """
import os
import re
from strom import StreamsBuilder, serdes

S = serdes.String()

def mark(_key, line):
    # Tells the test which lines the app has processed (it cannot read the
    # log while this process holds it).
    with open(os.environ["STROM_TEST_MARKS"], "a") as marks:
        marks.write(line + "\\n")

def boom(line):
    if line == "boom":
        raise ValueError("the app's own bug on " + line)
    return line

def topology():
    builder = StreamsBuilder()
    (
        builder.stream("lines", key_serde=S, value_serde=S)
        .peek(mark)
        .map_values(boom)
        .flat_map_values(str.split)
        .group_by(lambda _k, word: word, key_serde=S, value_serde=S)
        .count(materialized="counts")
        .to_stream()
        .to("counts", key_serde=S, value_serde=serdes.Long())
    )
    return builder.build()
"""

LINES = ["a b c", "b c", "c"]


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "app"
    directory.mkdir()
    (directory / "runapp.py").write_text(textwrap.dedent(APP))
    return directory


def make_log(path: Path, lines: list[str]) -> str:
    log = EmbeddedLog(path)
    log.create_topic("lines", partitions=2)
    log.create_topic("counts", partitions=2)
    with log.producer(value_serde=serdes.String()) as producer:
        producer.produce_batch("lines", [(None, line) for line in lines])
    log.close()
    return f"embedded:{path}"


def counts(path: Path) -> dict[str, int]:
    log = EmbeddedLog(path)
    latest = {
        r.key: r.value
        for r in log.records("counts", key_serde=serdes.String(), value_serde=serdes.Long())
    }
    log.close()
    return latest


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "STROM_TEST_MARKS": str(tmp_path / "marks")}


def run_until_end(
    app_dir: Path, settings: Path, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    return strom(
        "run",
        "runapp:topology",
        "--app-dir",
        str(app_dir),
        "--config-file",
        str(settings),
        "--until-end",
        env=env(tmp_path),
    )


def test_a_bounded_run_with_settings_from_a_toml_file(app_dir: Path, tmp_path: Path) -> None:
    servers = make_log(tmp_path / "log", LINES)
    settings = tmp_path / "app.toml"
    settings.write_text(
        f'application.id = "wc"\nbootstrap.servers = "{servers}"\n'
        "[commit]\ninterval.ms = 50\n"  # commit.interval.ms, as a table
    )
    done = run_until_end(app_dir, settings, tmp_path)
    assert done.returncode == 0, done.stderr
    assert counts(tmp_path / "log") == Counter(w for line in LINES for w in line.split())
    assert "state RUNNING -> PENDING_SHUTDOWN" in done.stderr


def test_sigterm_stops_the_app_gracefully(app_dir: Path, tmp_path: Path) -> None:
    """The app runs until SIGTERM, then commits what it processed and exits 0:
    a second run finds nothing left to process."""
    servers = make_log(tmp_path / "log", LINES)
    properties = tmp_path / "app.properties"
    properties.write_text(f"application.id=wc\nbootstrap.servers={servers}\n")
    with subprocess.Popen(
        [
            STROM,
            "run",
            "runapp:topology",
            "--app-dir",
            str(app_dir),
            "--command-config",  # Kafka's tools' name for --config-file
            str(properties),
            "--set",
            "commit.interval.ms=600000",
        ],
        env=env(tmp_path),
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        marks = tmp_path / "marks"
        wait_until(
            lambda: marks.exists() and len(marks.read_text().splitlines()) == len(LINES),
            timeout=COMMAND_TIMEOUT_S,
            what="the app to process every line",
        )
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=COMMAND_TIMEOUT_S)
    assert process.returncode == 0, stderr
    assert "state PENDING_SHUTDOWN -> NOT_RUNNING" in stderr
    # Committed on close (the commit interval alone would not have come yet).
    log = EmbeddedLog(tmp_path / "log")
    committed = {tp: c.offset for tp, c in log.committed_offsets("wc").items() if tp[0] == "lines"}
    assert committed == {("lines", p): end for p, end in log.end_offsets("lines").items()}
    log.close()
    # A second run goes on from there: it counts what the first left in the
    # repartition topic and reads no line twice.
    done = run_until_end(app_dir, properties, tmp_path)
    assert done.returncode == 0, done.stderr
    assert len(marks.read_text().splitlines()) == len(LINES)
    assert counts(tmp_path / "log") == Counter(w for line in LINES for w in line.split())


def test_an_app_that_ends_in_error_exits_1_with_its_traceback(
    app_dir: Path, tmp_path: Path
) -> None:
    servers = make_log(tmp_path / "log", ["fine", "boom"])
    done = strom(
        "run",
        "runapp:topology",
        "--app-dir",
        str(app_dir),
        "--set",
        "application.id=wc",
        "--set",
        f"bootstrap.servers={servers}",
        env=env(tmp_path),
    )
    assert done.returncode == 1
    assert "ValueError: the app's own bug on boom" in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("strom run: application wc stopped in ERROR: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "strom run: no application.id: put it in --config-file, or --set application.id=…"),
        (["--set", "application.id=x"], "strom run: no bootstrap.servers"),
        (
            ["--set", "application.id=x", "--set", "bootstrap.servers=embeded:log"],
            "'embeded:log' is not host:port (the embedded log is 'embedded:PATH')",
        ),
        (
            ["--set", "application.id=x", "--set", "bootstrap.servers=nosuchhost.invalid:9092"],
            "cannot reach the Kafka cluster at nosuchhost.invalid:9092: 'nosuchhost.invalid' "
            "does not resolve",
        ),
        (
            [
                "--set",
                "application.id=x",
                "--set",
                "bootstrap.servers=embedded:log",
                "--set",
                "num.stream.threads=many",
            ],
            "num.stream.threads must be an integer",
        ),
    ],
)
def test_bad_settings_are_one_line(
    app_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    done = strom("run", "runapp:topology", "--app-dir", str(app_dir), *args, cwd=tmp_path)
    assert done.returncode in (1, 2)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr


def test_config_files(tmp_path: Path) -> None:
    toml = tmp_path / "app.toml"
    toml.write_text(
        '"application.id" = "a"\nbootstrap.servers = ["h1:9092", "h2:9092"]\n'
        "[producer]\nlinger.ms = 5\nenable.idempotence = true\n"
    )
    assert read_config_file(toml) == {
        "application.id": "a",
        "bootstrap.servers": "h1:9092,h2:9092",
        "producer.linger.ms": 5,
        "producer.enable.idempotence": True,
    }
    properties = tmp_path / "app.properties"
    properties.write_text("application.id: a\nbootstrap.servers = h:1\n")
    assert read_config_file(properties) == {"application.id": "a", "bootstrap.servers": "h:1"}
    for name, text, message in [
        ("app.yaml", "a: 1", "a config file is .properties or .toml, not '.yaml'"),
        ("bad.toml", "a = ", "cannot read"),
        ("when.toml", "a = 1979-05-27", "a is a date; a setting is a value"),
    ]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(BadInput, match=message):
            read_config_file(path)


def test_ui_serves_the_web_view_while_the_app_runs(app_dir: Path, tmp_path: Path) -> None:
    servers = make_log(tmp_path / "log", LINES)
    settings = tmp_path / "app.properties"
    settings.write_text(f"application.id=wc\nbootstrap.servers={servers}\n")
    done = strom(
        "run",
        "runapp:topology",
        "--app-dir",
        str(app_dir),
        "--config-file",
        str(settings),
        "--until-end",
        "--ui",
        env=env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"serving the web view on http://127\.0\.0\.1:\d+", done.stderr), done.stderr
