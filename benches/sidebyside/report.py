"""The side-by-side section of docs/benchmarks.md and its bar chart.

The section sits between two markers so that ``make bench`` (the
micro-benchmarks' report, benches/report.py) and this suite each rewrite only
their own part of the page.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benches.sidebyside.systems import SYSTEMS
from benches.sidebyside.workloads import WORKLOADS

if TYPE_CHECKING:
    from benches.sidebyside.suite import Outcome

BEGIN = "<!-- side-by-side: begin (written by `python -m benches.sidebyside`) -->"
END = "<!-- side-by-side: end -->"
REFERENCE = "kstreams"


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):  # not Linux: the CPU stays unnamed
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def chart_path(page: Path) -> Path:
    return page.with_name("benchmarks-sidebyside.png")


def _rate(x: float) -> str:
    return f"{x / 1000:,.1f}k" if x < 1e6 else f"{x / 1e6:,.2f}M"


def _cell(cell: dict[str, Any] | None, ref: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    if cell["status"] in ("n/a", "error", "mismatch"):
        return cell["status"] if cell["status"] != "mismatch" else "**MISMATCH**"
    text = f"{_rate(cell['records_per_s'])}/s ±{cell['spread'] * 50:.0f}%"
    if ref is not None and ref.get("status") == "ok" and ref.get("records_per_s"):
        text += f" ({cell['records_per_s'] / ref['records_per_s']:.2f}x)"
    if cell["status"] != "ok":
        text += " (some rounds failed)"
    return text


def table(outcome: Outcome) -> list[str]:
    summary = outcome.summary()
    systems = outcome.options.systems
    workloads = outcome.options.workloads
    head = "| query | " + " | ".join(SYSTEMS[s].label for s in systems) + " |"
    lines = [head, "| --- |" + " ---: |" * len(systems)]
    for w in workloads:
        ref = summary.get((REFERENCE, w))
        cells = [_cell(summary.get((s, w)), ref) for s in systems]
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Records/s after start-up (from the first commit the runner sees to the end: no group "
        "join, no JIT warm-up; Bytewax commits nothing), median:",
        "",
        head,
        "| --- |" + " ---: |" * len(systems),
    ]
    for w in workloads:
        ref = summary.get((REFERENCE, w)) or {}
        cells = []
        for s in systems:
            steady = (summary.get((s, w)) or {}).get("steady_records_per_s")
            if not steady:
                cells.append("-")
                continue
            text = f"{_rate(steady)}/s"
            if ref.get("steady_records_per_s"):
                text += f" ({steady / ref['steady_records_per_s']:.2f}x)"
            cells.append(text)
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    lines += ["", "Records per CPU-second (median), peak RSS (max over rounds):", ""]
    lines += [head, "| --- |" + " ---: |" * len(systems)]
    for w in workloads:
        cells = []
        for s in systems:
            cell = summary.get((s, w))
            if cell is None or "records_per_cpu_s" not in cell:
                cells.append("-")
            else:
                cells.append(f"{_rate(cell['records_per_cpu_s'])} · {cell['peak_rss_mb']:,.0f} MB")
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return lines


def _reasons(outcome: Outcome) -> list[str]:
    out = []
    for (system, workload), cell in sorted(outcome.summary().items()):
        if cell["status"] != "ok" and cell.get("reason"):
            reason = " ".join(cell["reason"].split())[:400]
            out.append(f"- {SYSTEMS[system].label}, {workload} — {cell['status']}: {reason}")
    return out


def _latency(outcome: Outcome) -> list[str]:
    if not outcome.latencies:
        return []
    lines = [
        "",
        f"End-to-end latency at {outcome.options.latency_rate:,} bids/s "
        f"({outcome.options.latency_seconds:.0f} s after a 3 s warm-up), p50 / p99:",
        "",
        "| query | " + " | ".join(SYSTEMS[s].label for s in outcome.options.systems) + " |",
        "| --- |" + " ---: |" * len(outcome.options.systems),
    ]
    for w in outcome.options.latency_workloads:
        cells = []
        for s in outcome.options.systems:
            lat = next((x for x in outcome.latencies if x.system == s and x.workload == w), None)
            if lat is None:
                cells.append("-")
            elif lat.p50_ms is None or lat.p99_ms is None:
                cells.append("no output")
            else:
                cells.append(f"{lat.p50_ms:,.0f} / {lat.p99_ms:,.0f} ms")
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return lines


def _threads(threads: int) -> str:
    if threads == 1:
        return "one stream thread / worker"
    return f"{threads} stream threads (strom, Kafka Streams; the peers one worker)"


def _caps(systems: list[str], records: int) -> str:
    capped = [SYSTEMS[s] for s in systems if SYSTEMS[s].records(records) < records]
    return "".join(
        f" {s.label} runs on the first {s.records(records):,} of each (its records_cap)."
        for s in capped
    )


def section(outcome: Outcome, chart: str) -> str:
    o = outcome.options
    when = datetime.datetime.fromtimestamp(outcome.started, tz=datetime.timezone.utc)
    minutes = (outcome.finished - outcome.started) / 60
    versions = ", ".join(f"{SYSTEMS[s].label} {SYSTEMS[s].version}" for s in o.systems)
    lines = [
        BEGIN,
        "## Side by side: strom, Kafka Streams and the Python peers",
        "",
        f"Run on {when:%Y-%m-%d %H:%M} UTC, {machine()}; {minutes:.0f} minutes.",
        f"Command: `{o.command}`",
        "",
        f"Systems: {versions}. One local KRaft broker; every system reads the same pre-loaded "
        f"topics ({o.partitions} partitions), {_threads(o.threads)}, "
        f"{o.guarantee}, commit interval {o.commit_interval_ms} ms. "
        f"Nexmark: {o.records:,} events; word count: {max(1, o.records // 4):,} lines; "
        f"kafka_throughput apps: {o.records:,} records.{_caps(o.systems, o.records)}",
        "",
        f"Input records per second, median of {o.rounds} rounds, ± half the spread "
        "(max - min) as a share of the median, and the ratio to Kafka Streams. "
        "Every result was checked against the oracle (docs below); a mismatch is shown, "
        "not a figure.",
        "",
        *table(outcome),
        *_latency(outcome),
    ]
    reasons = _reasons(outcome)
    if reasons:
        lines += ["", "Not run, failed or wrong:", "", *reasons]
    lines += ["", f"![records/s per query and system]({chart})", "", END]
    return "\n".join(lines)


def write(outcome: Outcome, page: Path) -> None:
    chart = chart_path(page)
    draw(outcome, chart)
    text = page.read_text() if page.exists() else "# Benchmarks\n"
    block = section(outcome, chart.name)
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    page.write_text(text)


def draw(outcome: Outcome, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only the report needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    summary = outcome.summary()
    systems, workloads = outcome.options.systems, outcome.options.workloads
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(workloads) * len(systems) / 3), 5))
    width = 0.8 / len(systems)
    for i, s in enumerate(systems):
        xs, ys = [], []
        for j, w in enumerate(workloads):
            cell = summary.get((s, w))
            if cell is not None and cell.get("status") == "ok":
                xs.append(j + i * width)
                ys.append(cell["records_per_s"])
        ax.bar(xs, ys, width, label=SYSTEMS[s].label)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(workloads))])
    ax.set_xticklabels([WORKLOADS[w].name for w in workloads])
    ax.set_yscale("log")
    ax.set_ylabel("input records/s (log scale)")
    ax.set_title("Side by side: median records/s per query (missing bar: n/a or failed)")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
