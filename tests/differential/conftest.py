"""Fixtures of the differential test: the Kafka reference JVM (built once per
source change, started once per session), the run's seed and case count."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from tests.differential.reference import Reference

# Per family. The default run (make test) takes about four minutes on two
# cores; make soak runs the long one.
DEFAULT_CASES = 1500
SOAK_CASES = 5000


@pytest.fixture(scope="session")
def reference() -> Iterator[Reference]:
    with Reference() as ref:
        yield ref


@pytest.fixture(scope="session")
def diff_seed() -> str:
    """STROM_DIFF_SEED, else a fresh one per run (failures print it)."""
    return os.environ.get("STROM_DIFF_SEED") or secrets.token_hex(4)


@pytest.fixture(scope="session")
def diff_cases(request: pytest.FixtureRequest) -> int:
    """Cases per family: --diff-cases, else STROM_DIFF_CASES, else 1,500 (5,000 with --soak)."""
    asked = request.config.getoption("--diff-cases")
    if asked is None and os.environ.get("STROM_DIFF_CASES"):
        asked = int(os.environ["STROM_DIFF_CASES"])
    if asked is None:
        asked = SOAK_CASES if request.config.getoption("--soak") else DEFAULT_CASES
    return int(asked)
