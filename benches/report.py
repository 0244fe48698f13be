"""Turns a pytest-benchmark JSON file into docs/benchmarks.md.

usage: python benches/report.py RESULTS.json OUTPUT.md
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path


def main(source: str, target: str) -> None:
    data = json.loads(Path(source).read_text())
    machine = data.get("machine_info", {})
    rows = []
    for bench in data["benchmarks"]:
        stats, extra = bench["stats"], bench.get("extra_info", {})
        rate = extra.get("records_per_s")
        rows.append(
            f"| {bench['fullname'].split('::')[-1]} | {bench.get('group') or ''} "
            f"| {stats['median'] * 1000:,.1f} ms | "
            f"{f'{rate:,.0f}' if rate else ''} | {extra.get('note', '')} |"
        )
    text = "\n".join(
        [
            "# Benchmarks",
            "",
            "Written by `make bench` (pytest-benchmark); figures from one run on "
            f"{machine.get('cpu', {}).get('brand_raw', platform.processor() or 'this machine')}, "
            f"Python {machine.get('python_version', platform.python_version())}. "
            "Absolute times on shared 2-core machines are noisy; compare ratios within one run.",
            "",
            "| benchmark | group | median | records/s | note |",
            "| --- | --- | ---: | ---: | --- |",
            *rows,
            "",
        ]
    )
    Path(target).write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
