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
        """Each case's result, in order."""
        return self.submit(cases).result()

    def submit(self, cases: Sequence[Case]) -> Pending:
        """Starts a batch: cases are written on one thread and answers read
        on another (neither pipe can fill up and stall the JVM), so the
        caller can run strom's side meanwhile; ``result()`` waits."""
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        lines = [
            json.dumps(c.to_json() | {"id": str(i)}).encode() + b"\n" for i, c in enumerate(cases)
        ]
        pending = Pending(self, len(cases))
        writer = threading.Thread(target=_write_all, args=(stdin, lines), daemon=True)
        reader = threading.Thread(target=pending.read, args=(stdout,), daemon=True)
        writer.start()
        reader.start()
        pending.threads = (writer, reader)
        return pending

    def stderr(self) -> str:
        return self._stderr.decode(errors="replace")

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


class Pending:
    """The answers to a submitted batch, as the reader thread collects them."""

    def __init__(self, reference: Reference, count: int) -> None:
        self.reference = reference
        self.count = count
        self.results: list[Result] = []
        self.error: ReferenceError | None = None
        self.threads: tuple[threading.Thread, ...] = ()

    def read(self, stdout: IO[bytes]) -> None:
        for i in range(self.count):
            line = stdout.readline()
            if not line:
                self.error = ReferenceError(
                    f"the reference JVM exited (code {self.reference._proc.poll()}) after "
                    f"{i} of {self.count} cases; its stderr:\n{self.reference.stderr()}"
                )
                return
            data = json.loads(line)
            if data.get("id") != str(i):
                self.error = ReferenceError(f"answer {data.get('id')!r} came for case {i}")
                return
            self.results.append(Result.from_reference(data))

    def result(self) -> list[Result]:
        for thread in self.threads:
            thread.join()
        if self.error is not None:
            raise self.error
        return self.results


def _write_all(stream: IO[bytes], lines: list[bytes]) -> None:
    for line in lines:
        stream.write(line)
    stream.flush()
