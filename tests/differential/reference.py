"""Kafka's side of the differential test: one long-lived JVM running
tests/reference, fed case specs as JSON lines on stdin."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from tests.differential.spec import Case, Result
from tests.reference import build


class ReferenceError(RuntimeError):
    """The reference JVM died or answered out of protocol."""


class Reference:
    """Runs cases on Kafka Streams' TopologyTestDriver (one JVM for all)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._command = build.command(directory or build.build())
        self._stderr = b""
        self._proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=False,
        )
        # Drained on a thread: a full stderr pipe would stall the JVM.
        self._stderr_thread = threading.Thread(target=self._drain_stderr, daemon=True)
        self._stderr_thread.start()

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr = (self._stderr + line)[-20_000:]

    def run(self, cases: Sequence[Case]) -> list[Result]:
        """Each case's result, in order. Cases are written on a thread while
        answers are read, so neither pipe can fill up and stall the other."""
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        lines = [
            json.dumps(c.to_json() | {"id": str(i)}).encode() + b"\n" for i, c in enumerate(cases)
        ]
        writer = threading.Thread(target=_write_all, args=(stdin, lines), daemon=True)
        writer.start()
        results = []
        for i in range(len(cases)):
            line = stdout.readline()
            if not line:
                raise ReferenceError(
                    f"the reference JVM exited (code {self._proc.poll()}) after {i} of "
                    f"{len(cases)} cases; its stderr:\n{self._stderr.decode(errors='replace')}"
                )
            data = json.loads(line)
            if data.get("id") != str(i):
                raise ReferenceError(f"answer {data.get('id')!r} came for case {i}")
            results.append(Result.from_reference(data))
        writer.join()
        return results

    def evaluate(self, calls: Sequence[tuple[str, str, Sequence[Any]]]) -> list[Any]:
        """The Java vocabulary's functions applied to arguments: each call is
        (table name in functions.py, function name, arguments)."""
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        request = {
            "id": "eval",
            "eval": [{"kind": k, "name": n, "args": list(a)} for k, n, a in calls],
        }
        stdin.write(json.dumps(request).encode() + b"\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise ReferenceError(
                f"the reference JVM exited: {self._stderr.decode(errors='replace')}"
            )
        values: list[Any] = json.loads(line)["values"]
        return values

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr_thread.join(timeout=10)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _write_all(stream: IO[bytes], lines: list[bytes]) -> None:
    for line in lines:
        stream.write(line)
    stream.flush()
