"""Helpers for the embedded log tests: subprocesses, segment files, Kafka's murmur2."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

M32 = 0xFFFFFFFF


def kafka_murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` transcribed to Python (signed 32-bit result)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & M32
    for i in range(length // 4):
        i4 = i * 4
        k = data[i4] | data[i4 + 1] << 8 | data[i4 + 2] << 16 | data[i4 + 3] << 24
        k = (k * m) & M32
        k ^= k >> r
        k = (k * m) & M32
        h = (h * m) & M32
        h ^= k
    tail = length & ~3
    rest = length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & M32
    h ^= h >> 13
    h = (h * m) & M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (kafka_murmur2(key) & 0x7FFFFFFF) % partitions


def run_python(code: str, *args: str, timeout: float = 60) -> Any:
    """Runs ``code`` in a fresh interpreter; returns the JSON it printed last.

    The child prints ``{"error": class name, "message": str}`` for a strom
    error it did not expect to survive, so tests can assert on it.
    """
    wrapped = (
        "import json, sys\n"
        "from strom.errors import StromError\n"
        "def main():\n" + textwrap.indent(textwrap.dedent(code), "    ") + "\ntry:\n"
        "    out = main()\n"
        "except (StromError, OSError) as e:\n"
        "    out = {'error': type(e).__name__, 'message': str(e)}\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapped, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def release(*handles: Any) -> None:
    """Closes handles and collects garbage, so the process lets go of the log."""
    for handle in handles:
        handle.close()
    gc.collect()


def segment_files(log_path: str, topic: str) -> list[Path]:
    """The ``.log`` segment files of a one-partition topic, oldest first."""
    files = [p for p in Path(log_path).rglob("*.log") if topic in str(p.relative_to(log_path))]
    return sorted(files, key=lambda p: p.name)
