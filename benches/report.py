"""Turns a pytest-benchmark JSON file into the micro-benchmarks section of
docs/benchmarks.md (between its markers; the rest of the page, e.g. the
side-by-side suite's section, is kept).

usage: python benches/report.py RESULTS.json OUTPUT.md
"""

from __future__ import annotations

import json
import platform
import re
import sys
from pathlib import Path

BEGIN = "<!-- micro-benchmarks: begin (written by `make bench`) -->"
END = "<!-- micro-benchmarks: end -->"


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
    block = "\n".join(
        [
            BEGIN,
            "## Micro-benchmarks",
            "",
            "Written by `make bench` (pytest-benchmark); figures from one run on "
            f"{machine.get('cpu', {}).get('brand_raw', platform.processor() or 'this machine')}, "
            f"Python {machine.get('python_version', platform.python_version())}. "
            "Absolute times on shared 2-core machines are noisy; compare ratios within one run.",
            "",
            "| benchmark | group | median | records/s | note |",
            "| --- | --- | ---: | ---: | --- |",
            *rows,
            END,
        ]
    )
    page = Path(target)
    text = page.read_text() if page.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)
    print(block)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
