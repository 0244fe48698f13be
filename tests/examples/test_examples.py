"""Each example runs with one command on the embedded log and computes what
plain Python computes from the same input (the orders example:
tests/unit/test_orders_example.py; the Spark replay: tests/spark)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.examples.support import load, printed, run

from strom import serdes
from strom.embedded import EmbeddedLog


def test_word_count(tmp_path: Path) -> None:
    stdout = run("word_count", tmp_path / "log")
    counts = printed(stdout.split("| serialized")[0], "counts:")
    assert counts == Counter(w for line in load("word_count").LINES for w in line.split())
    assert "Sub-topology: 1" in stdout  # the repartition before the count


def test_nexmark_q7_finds_each_windows_highest_bid(tmp_path: Path) -> None:
    example = load("nexmark_q7")
    stdout = run("nexmark_q7", tmp_path / "log")
    expected: dict[int, int] = {}
    for bid in example.generate_bids(5_000):
        start = bid["date_time"] - bid["date_time"] % example.WINDOW_MS
        expected[start] = max(expected.get(start, 0), bid["price"])
    assert printed(stdout, "highest bid per window:") == expected
    assert "late bids dropped: 0" in stdout
    assert len(expected) > 5


def test_the_processor_api_app_drops_every_duplicate(tmp_path: Path) -> None:
    example = load("dedup_processor")
    stdout = run("dedup_processor", tmp_path / "log")
    events = example.generate_events(500)
    ids = [e["id"] for e in events]
    assert len(ids) > len(set(ids))  # the input has duplicates to drop
    out = [
        r.key
        for r in EmbeddedLog(tmp_path / "log").records("unique-events", key_serde=serdes.String())
    ]
    assert sorted(out) == sorted(set(ids))
    assert f"events in: {len(events)}, unique out: {len(set(ids))}," in stdout


def test_the_iq_service_answers_over_http(tmp_path: Path) -> None:
    example = load("iq_service")
    stdout = run("iq_service", tmp_path / "log")
    counts = Counter(w for line in example.LINES for w in line.split())
    assert printed(stdout, "all counts:") == dict(counts)
    assert printed(stdout, "prefix th:") == {w: n for w, n in counts.items() if w.startswith("th")}
    assert f"GET /iq/stores/counts/keys/the: {counts['the']}" in stdout
    assert "GET /iq/stores/counts/keys/unicorn: None" in stdout
