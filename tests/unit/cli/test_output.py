"""What long work shows: a progress display on a terminal (read through a real
pseudo-terminal), nothing of it in a pipe, ``--quiet`` and ``--json``; and
``strom bench`` outside a checkout."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import termios
from collections import Counter
from pathlib import Path

from tests.unit.cli.test_cli import COMMAND_TIMEOUT_S, STROM, strom

from strom.cli.demo import generate_lines

LINES = 3_000


def expected_top(n: int) -> list[list[object]]:
    counts = Counter(w for line in generate_lines(LINES) for w in line.lower().split())
    return [[word, count] for word, count in counts.most_common(n)]


def test_demo_json_is_the_summary_alone(tmp_path: Path) -> None:
    done = strom("demo", "--lines", str(LINES), "--top", "3", "--path", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["top"] == expected_top(3)
    assert summary["lines"] == LINES and summary["path"] == str(tmp_path)
    assert done.stderr == ""


def test_demo_quiet_prints_the_summary_only(tmp_path: Path) -> None:
    done = strom("demo", "--lines", str(LINES), "--top", "3", "--path", str(tmp_path), "-q")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.startswith("top 3 words:\n")
    for word, count in expected_top(3):
        assert f"  {word:<16} {count:>9,}" in done.stdout


def test_a_terminal_gets_progress_bars(tmp_path: Path) -> None:
    """stderr on a pseudo-terminal, as when a person runs the command; in a
    pipe (the tests above) there is no bar."""
    leader, follower = pty.openpty()
    # 120 columns by 40 rows, as a terminal window has (a new pty has 0 x 0).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    with subprocess.Popen(
        [STROM, "demo", "--lines", str(LINES), "--top", "1", "--path", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=follower,
    ) as process:
        os.close(follower)
        screen = b""
        while True:
            ready, _, _ = select.select([leader], [], [], COMMAND_TIMEOUT_S)
            assert ready, f"no output within {COMMAND_TIMEOUT_S} s"
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: the process is done
                break
            if not chunk:
                break
            screen += chunk
        process.wait(timeout=COMMAND_TIMEOUT_S)
    os.close(leader)
    assert process.returncode == 0
    text = screen.decode(errors="replace")
    words = sum(len(line.split()) for line in generate_lines(LINES))
    # Each bar's last state: all lines written, every line and word counted.
    assert "write: 100%" in text and f"{LINES / 1000:.2f}k/{LINES / 1000:.2f}k" in text
    total = LINES + words
    assert "count: 100%" in text and f"{total / 1000:.1f}k/{total / 1000:.1f}k" in text


def test_bench_outside_a_checkout_is_one_line(tmp_path: Path) -> None:
    done = strom("bench", "--checkout", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (
        f"strom bench: no benchmark suite at {tmp_path} (benches/sidebyside): strom bench "
        "runs in a checkout of strom (the suite is not in the wheel); cd into one or "
        "pass --checkout DIR\n"
    )
