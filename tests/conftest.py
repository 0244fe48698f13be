"""Shared fixtures: an embedded log per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.embedded import EmbeddedLog

# Spark sessions started by the tests and by the programs they run take
# the tests' Spark defaults (tests/spark/conf/spark-defaults.conf).
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "spark" / "conf"))


@pytest.fixture
def log_path(tmp_path: Path) -> str:
    return str(tmp_path / "log")


@pytest.fixture
def log(log_path: str) -> Iterator[EmbeddedLog]:
    yield EmbeddedLog(log_path)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("strom differential test (tests/differential)")
    group.addoption(
        "--soak",
        action="store_true",
        help="run the long differential soak (5,000 cases per family) instead of the default 1,500",
    )
    group.addoption(
        "--diff-cases",
        type=int,
        default=None,
        help="differential cases per family (default 1500, 5000 with --soak; or STROM_DIFF_CASES)",
    )
