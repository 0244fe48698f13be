"""The ``strom`` command (issue #23 points 3 and 4): ``strom reset`` on the
embedded log, fast failures for an unreachable Kafka, ``MODULE:NAME`` imported
as ``python -m`` does, and one-line errors for bad specs."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom import KafkaStreams, serdes
from strom.cli import main
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog

STROM = str(Path(sys.executable).with_name("strom"))  # the console script pip installed
# A bound on commands that must finish quickly, so that a hang fails the test.
COMMAND_TIMEOUT_S = 60


def strom(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [STROM, *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def closed_port() -> int:
    """A local port nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    return lines[0]


# --- strom reset ------------------------------------------------------------------


def word_count(path: Path) -> dict[str, int]:
    app = KafkaStreams(
        word_count_topology(), {"application.id": "wc", "bootstrap.servers": f"embedded:{path}"}
    )
    with app:
        app.run_until_end(timeout=60)
        counts = {kv.key: kv.value for kv in app.store("counts").all()}
    # A closed app's runtime keeps the log open until its reference cycles
    # are collected (EmbeddedRuntime.abort releases the consumer only), and
    # the reset below runs in another process, which the open log refuses.
    del app
    gc.collect()
    return counts


def test_strom_reset_on_the_embedded_log_then_the_app_recounts(tmp_path: Path) -> None:
    """Before: ``embedded:DIR`` was taken for a broker address and the command
    printed librdkafka's resolve errors until killed."""
    path = tmp_path / "log"
    log = EmbeddedLog(path)
    log.create_topic("text-input", partitions=3)
    log.create_topic("word-counts", partitions=3)
    lines = generate_lines(300)
    with log.producer(value_serde=serdes.String()) as producer:
        producer.produce_batch("text-input", [(None, line) for line in lines])
    log.close()
    first = word_count(path)
    assert first == Counter(w for line in lines for w in line.lower().split())

    done = strom("reset", "--application-id", "wc", "--bootstrap-servers", f"embedded:{path}")

    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "reset offsets of text-input (3 partition(s)) to the earliest" in done.stdout
    assert "deleted internal topic wc-counts-changelog" in done.stdout
    assert "deleted internal topic wc-counts-repartition" in done.stdout
    assert f"removed local state {path}/.state/wc" in done.stdout
    assert word_count(path) == first


def test_strom_reset_of_an_unreachable_kafka_fails_fast_in_one_line() -> None:
    servers = f"127.0.0.1:{closed_port()}"
    done = strom("reset", "--application-id", "wc", "--bootstrap-servers", servers)
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"strom reset: cannot reach the Kafka cluster at {servers}: {servers}: Connection refused"
    )


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ("embeded:data/log", "'embeded:data/log' is not host:port (the embedded log is"),
        ("localhost", "'localhost' is not host:port"),
        ("embedded:", "'embedded:': the embedded log is embedded:PATH"),
    ],
)
def test_strom_reset_names_a_mistyped_bootstrap(
    servers: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reset", "--application-id", "wc", "--bootstrap-servers", servers]) == 2
    assert message in one_line(capsys.readouterr().err)


def test_strom_reset_refuses_client_settings_for_the_embedded_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["reset", "--application-id", "wc", "--bootstrap-servers", f"embedded:{tmp_path}"]
    assert main([*args, "--set", "security.protocol=SSL"]) == 2
    assert "the embedded log takes none" in one_line(capsys.readouterr().err)


def test_strom_reset_reports_a_missing_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["reset", "--application-id", "wc", "--bootstrap-servers", f"embedded:{tmp_path / 'x'}"]
    assert main(args) == 1
    assert (
        one_line(capsys.readouterr().err)
        == f"strom reset: there is no embedded log at {tmp_path / 'x'}"
    )


def test_a_bad_setting_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["reset", "--application-id", "wc", "--bootstrap-servers", "h:1", "--set", "oops"]
    assert main(args) == 2
    assert "takes KEY=VALUE, got 'oops'" in capsys.readouterr().err


# --- MODULE:NAME ----------------------------------------------------------------------

APP_SOURCE = """
from strom import StreamsBuilder, serdes

NUMBER = 3

def build():
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.String(), value_serde=serdes.String()).to("out")
    return builder.build()

topology = build()
builder = StreamsBuilder()
builder.stream("in", key_serde=serdes.String(), value_serde=serdes.String()).to("out")

def broken():
    raise RuntimeError("the app's own bug")
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory with ``myapp_cli.py``, as the current directory; the
    import system is put back afterwards."""
    (tmp_path / "myapp_cli.py").write_text(textwrap.dedent(APP_SOURCE))
    (tmp_path / "needs_missing_cli.py").write_text("import no_such_dependency_cli\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in ("myapp_cli", "needs_missing_cli", "sub_app_cli"):
        sys.modules.pop(name, None)


def replay(spec: str, *extra: str) -> list[str]:
    # An unreachable Kafka source fails right after the app is loaded, before Spark starts.
    return [
        "replay",
        spec,
        "--source",
        f"127.0.0.1:{closed_port()}",
        "--application-id",
        "a",
        *extra,
    ]


@pytest.mark.parametrize("name", ["topology", "build", "builder"])
def test_app_specs_name_a_topology_a_function_or_a_builder(
    app_dir: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(replay(f"myapp_cli:{name}")) == 1
    assert "cannot reach the Kafka cluster" in one_line(capsys.readouterr().err)


def test_app_dir_is_searched_first(
    app_dir: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "sub_app_cli.py").write_text(textwrap.dedent(APP_SOURCE))
    assert main(replay("sub_app_cli:build")) == 2  # not in the current directory
    capsys.readouterr()
    assert main(replay("sub_app_cli:build", "--app-dir", str(elsewhere))) == 1
    assert "cannot reach the Kafka cluster" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("myapp_cli", "APP must be MODULE:NAME (e.g. myapp:topology), got 'myapp_cli'"),
        ("nosuchmodule_cli:topology", "no module named 'nosuchmodule_cli' (looked in "),
        ("myapp_cli.py:topology", "MODULE is a module name: myapp_cli:topology"),
        ("myapp_cli.sub:topology", "no module named 'myapp_cli.sub'"),
        ("myapp_cli:topolgy", "myapp_cli ("),
        ("myapp_cli:NUMBER", "myapp_cli:NUMBER is a int, not a Topology"),
    ],
)
def test_a_bad_spec_is_one_line_and_exit_code_2(
    app_dir: Path, spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(replay(spec)) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("strom replay: ") and message in line
    if spec == "myapp_cli:topolgy":
        assert line.endswith("has no attribute 'topolgy'") and str(app_dir) in line


def test_errors_in_the_apps_own_code_keep_their_traceback(
    app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(replay("myapp_cli:broken")) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: the app's own bug" in err
    assert err.strip().splitlines()[-1] == (
        'strom replay: myapp_cli:broken() raised RuntimeError("the app\'s own bug")'
    )
    # A module the app imports is missing: not reported as the app's module missing.
    assert main(replay("needs_missing_cli:x")) == 1
    err = capsys.readouterr().err
    assert "No module named 'no_such_dependency_cli'" in err
    assert err.strip().splitlines()[-1].startswith("strom replay: importing 'needs_missing_cli'")


def test_the_console_script_imports_from_the_current_directory(app_dir: Path) -> None:
    """Before: ``strom replay myapp:topology`` raised ModuleNotFoundError (the
    script's sys.path starts at its own bin directory) unless PYTHONPATH=."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = strom(*replay("myapp_cli:topology"), cwd=app_dir, env=env)
    assert done.returncode == 1
    assert "cannot reach the Kafka cluster" in one_line(done.stderr)
    done = strom(*replay("nosuchmodule_cli:topology"), cwd=app_dir, env=env)
    assert done.returncode == 2
    assert "no module named 'nosuchmodule_cli'" in one_line(done.stderr)


# --- strom demo, strom --help ---------------------------------------------------------


def test_strom_demo_counts_the_words_it_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--lines", "2000", "--path", str(tmp_path), "--top", "3"]) == 0
    out = capsys.readouterr().out
    counts = Counter(w for line in generate_lines(2000) for w in line.lower().split())
    for word, n in counts.most_common(3):
        assert f"  {word:<16} {n:>9,}" in out
    assert f"processed 2,000 lines ({sum(counts.values()):,} words)" in out


def test_help_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {verb} " in out for verb in ("demo", "replay", "reset"))
    assert main(["nosuchverb"]) == 2
    assert "No such command 'nosuchverb'" in capsys.readouterr().err
