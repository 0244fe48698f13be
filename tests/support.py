"""Helpers shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Polls ``condition`` until it holds; fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.01)
