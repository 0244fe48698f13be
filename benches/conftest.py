"""Shared fixtures of the benchmarks."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture
def fresh_dir() -> Iterator[Callable[[str], str]]:
    """Makes a new directory per call (a round's embedded log), all removed
    when the benchmark ends, failed or not: rounds write hundreds of MB."""
    made: list[str] = []

    def make(prefix: str) -> str:
        made.append(tempfile.mkdtemp(prefix=prefix))
        return made[-1]

    yield make
    for path in made:
        shutil.rmtree(path, ignore_errors=True)
