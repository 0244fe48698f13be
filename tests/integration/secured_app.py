"""A strom app in its own process, for the secured-broker tests that watch
how an app fails (security_support.run_app): the spec comes as JSON on stdin,

    {"config": {...}, "topology": {"kind": "word_count", "source": S, "sink": T},
     "action": "run_until_end" | "start", "limit": SECONDS, "expect_records": N}

``run_until_end`` runs a bounded run (with ``limit`` as its timeout);
``start`` starts the app and watches it until it stops by itself, has
processed ``expect_records`` records, or ``limit`` passes. Either way the
action gets ``limit`` seconds; past that the app counts as hung. One line
``RESULT {json}`` on stdout reports the error (its classes and message), the
elapsed time, the state changes, the records processed, the assigned tasks
and every log record; stderr is left to what writes there directly
(librdkafka), which the caller counts."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from typing import Any

from tests.integration.kafka_support import word_count_topology

from strom import KafkaStreams, State

_STOPPED = (State.ERROR, State.PENDING_ERROR, State.NOT_RUNNING, State.PENDING_SHUTDOWN)


class _Collect(logging.Handler):
    def __init__(self, started: float, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.started = started
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and not record.name.startswith("strom"):
            return
        message = record.getMessage().replace("\n", " | ")
        at = record.created - self.started
        self.lines.append(f"{at:.2f}s {record.levelname} {record.name}: {message}")


def _error(exc: BaseException) -> dict[str, Any]:
    cause = exc.__cause__ or exc.__context__
    return {
        "classes": [c.__name__ for c in type(exc).__mro__],
        "message": str(exc),
        "cause": None if cause is None else f"{type(cause).__name__}: {cause}",
    }


def main() -> None:
    spec = json.loads(sys.stdin.read())
    limit = float(spec["limit"])
    started_wall = time.time()
    started = time.monotonic()
    logs: list[str] = []
    root = logging.getLogger()
    root.addHandler(_Collect(started_wall, logs))
    root.setLevel(logging.INFO)

    shape = spec["topology"]
    assert shape["kind"] == "word_count", shape
    topology = word_count_topology(shape["source"], shape["sink"])
    states: list[list[Any]] = []
    outcome: dict[str, Any] = {"error": None, "ended": None}
    app = KafkaStreams(topology, spec["config"])
    app.set_state_listener(
        lambda new, old: states.append([time.monotonic() - started, old.value, new.value])
    )
    expect = spec.get("expect_records")

    def processed() -> int:
        try:
            return int(app.metrics().get("records-processed", 0))
        except Exception:
            return -1

    def act() -> None:
        try:
            if spec["action"] == "run_until_end":
                app.run_until_end(timeout=limit)
            else:
                app.start()
                while time.monotonic() - started < limit and app.state not in _STOPPED:
                    if expect is not None and processed() >= expect:
                        break
                    time.sleep(0.05)
                if app.exception is not None:
                    outcome["error"] = _error(app.exception)
        except BaseException as exc:
            outcome["error"] = _error(exc)
        finally:
            outcome["ended"] = time.monotonic() - started

    worker = threading.Thread(target=act, daemon=True)
    worker.start()
    worker.join(limit + 2)
    hung = worker.is_alive() or (
        spec["action"] == "start"
        and outcome["error"] is None
        and app.state not in _STOPPED
        and (expect is None or processed() < expect)
    )
    try:
        assigned = int(app.metrics().get("assigned-tasks", 0))
    except Exception:
        assigned = -1
    result = {
        "elapsed": outcome["ended"] if outcome["ended"] is not None else limit,
        "hung": hung,
        "error": outcome["error"],
        "states": states,
        "final_state": app.state.value,
        "processed": processed(),
        "assigned": assigned,
        "logs": logs[:500],
    }
    print("RESULT " + json.dumps(result), flush=True)
    # Leave the group and end open transactions if the app lets us, briefly:
    # a stuck client must not keep this process alive.
    closer = threading.Thread(target=lambda: app.close(timeout=5), daemon=True)
    closer.start()
    closer.join(10)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
