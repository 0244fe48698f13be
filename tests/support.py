"""Helpers shared by the tests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest


def wait_until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Polls ``condition`` until it holds; fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.01)


def get_json(url: str, timeout: float = 30.0) -> tuple[int, Any]:
    """The status and JSON body of a GET (error statuses included)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
