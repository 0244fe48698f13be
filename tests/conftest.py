"""Shared fixtures: an embedded log per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.embedded import EmbeddedLog


@pytest.fixture
def log_path(tmp_path: Path) -> str:
    return str(tmp_path / "log")


@pytest.fixture
def log(log_path: str) -> Iterator[EmbeddedLog]:
    yield EmbeddedLog(log_path)
