"""``strom replay``: a progress bar, the tables and outputs asked for, and
the bootstrap of the streaming app."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from tests.spark.support import Scenario, write_log
from tests.spark.test_replay import page_views, views

from strom import serdes
from strom.cli import main
from strom.embedded import EmbeddedLog

S, L = serdes.String(), serdes.Long()


def test_strom_replay_shows_progress_results_and_bootstraps(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = Scenario(
        views,
        {"views": page_views(200, seed=10)},
        {"views": (S, S), "view-counts": (S, L)},
        ["view-counts"],
    )
    servers = write_log(scenario, tmp_path / "log")
    # Settings from a properties file (--config-file; bootstrap.servers is
    # where the bootstrap writes) and from --set.
    settings = tmp_path / "app.properties"
    settings.write_text(f"bootstrap.servers={servers}\n")
    code = main(
        [
            "replay",
            "tests.spark.test_replay:views",
            "--source",
            servers,
            "--application-id",
            "cli-replay",
            "--config-file",
            str(settings),
            "--set",
            "statestore.cache.max.bytes=0",
            "--table",
            "counts",
            "--output",
            "view-counts",
            "--bootstrap",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "replay: sub-topology 1/1 done (200 records)" in err
    assert "'records-processed': 200" in out
    assert "table counts:" in out and "output view-counts:" in out
    assert "user-" in out
    log = EmbeddedLog(servers.removeprefix("embedded:"))
    committed = {k: c.offset for k, c in log.committed_offsets("cli-replay").items()}
    assert committed == {("views", p): end for p, end in log.end_offsets("views").items()}


def test_strom_replay_reports_a_refused_topology(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "replay",
            "tests.spark.test_replay:views",
            "--source",
            f"embedded:{tmp_path / 'empty'}",
            "--application-id",
            "cli-replay",
        ]
    )
    assert code == 1
    assert "views" in capsys.readouterr().err  # the missing topic is named


def test_strom_replay_json_is_the_summary_alone(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = page_views(120, seed=11)
    scenario = Scenario(
        views,
        {"views": history},
        {"views": (S, S), "view-counts": (S, L)},
        ["view-counts"],
    )
    servers = write_log(scenario, tmp_path / "log")
    args = ["replay", "tests.spark.test_replay:views", "--source", servers]
    code = main([*args, "--application-id", "cli-json", "--table", "counts", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["metrics"]["records-processed"] == 120
    # The store's final counts: the views per user, bots left out (12 users: all rows shown).
    rows = summary["tables"]["counts"]
    assert {row["key"]: row["value"] for row in rows} == Counter(
        user for user, page, _ in history if page != "bot"
    )
    assert summary["outputs"] == {} and "bootstrapped" not in summary
