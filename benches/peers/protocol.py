"""How the side-by-side runner talks to each system's driver process.

Standard library only: every peer's virtualenv runs this file with its own
interpreter. A driver is started as

    python DRIVER.py --bootstrap HOST:PORT --workload q0 --app-id ID \
        --inputs '{"bid": "topic", ...}' --output TOPIC [--guarantee ...] \
        [--commit-interval-ms 100] [--state-dir DIR]

and prints one JSON object per line on stdout:

- ``{"event": "ready", "t": <epoch s>}`` right before it starts processing;
- ``{"event": "done", "t": <epoch s>}`` when the system itself knows it has
  processed all input (only systems that stop at the end of their input);
- ``{"event": "n/a", "reason": "..."}`` when the system cannot express the
  workload (then it exits with status 3).

The runner decides when the input is processed (the group's committed offsets
reach the end offsets, or "done") and then sends SIGTERM; the driver shuts its
system down cleanly and exits.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn

NOT_EXPRESSIBLE = 3


@dataclass(frozen=True)
class Args:
    bootstrap: str
    workload: str
    app_id: str
    inputs: dict[str, str]
    output: str
    guarantee: str
    commit_interval_ms: int
    state_dir: str
    follow: bool  # keep running at the end of the input (latency runs)
    threads: int = 1  # stream threads (strom and Kafka Streams; the peers run one worker)


def parse_args(argv: list[str] | None = None) -> Args:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--app-id", required=True)
    parser.add_argument("--inputs", required=True, help="JSON object: role -> topic")
    parser.add_argument("--output", required=True)
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument("--state-dir", default="/tmp")
    parser.add_argument("--follow", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    ns = parser.parse_args(argv)
    return Args(
        ns.bootstrap,
        ns.workload,
        ns.app_id,
        json.loads(ns.inputs),
        ns.output,
        ns.guarantee,
        ns.commit_interval_ms,
        ns.state_dir,
        bool(ns.follow),
        ns.threads,
    )


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def ready() -> None:
    _say("ready", t=time.time())


def done() -> None:
    _say("done", t=time.time())


def not_expressible(reason: str) -> NoReturn:
    _say("n/a", reason=reason)
    sys.exit(NOT_EXPRESSIBLE)


def wait_for_sigterm() -> None:
    """Blocks until the runner's SIGTERM (for systems that stop by themselves)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    signal.sigwait({signal.SIGTERM})


def dumps(value: Any) -> bytes:
    """The JSON every system writes: compact, UTF-8."""
    return json.dumps(value, separators=(",", ":")).encode()


WINDOW_MS = 10_000  # q7, q8 tumbling windows; q5 window size; q11 session gap
HOP_MS = 5_000  # q5 advance
GRACE_MS = 60_000  # no record is dropped as late: repartitions reorder by a few seconds at most
LOCAL_STATES = ("OR", "ID", "CA")  # q3
Q2_MODULUS = 123
