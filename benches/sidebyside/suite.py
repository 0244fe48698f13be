"""The whole suite: systems x workloads x rounds on one broker, checked against
the oracle, summarised into docs/benchmarks.md and a bar chart."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benches.sidebyside import latency, report
from benches.sidebyside.runner import Broker, Measurement, RunError, measure
from benches.sidebyside.systems import ROOT, SYSTEMS, SetupError, System
from benches.sidebyside.workloads import (
    WORKLOADS,
    Dataset,
    Digest,
    Workload,
    recent_base_time_ms,
)

DEFAULT_RECORDS = 100_000


@dataclass
class Options:
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    records: int = DEFAULT_RECORDS  # Nexmark events; kafka_throughput records; lines / 4
    rounds: int = 3
    partitions: int = 6
    guarantee: str = "at_least_once"
    commit_interval_ms: int = 100
    threads: int = 1  # num.stream.threads of strom and Kafka Streams
    run_timeout: float = 600.0
    latency_workloads: list[str] = field(default_factory=lambda: ["q0", "q7"])
    latency_rate: int = 2_000
    latency_seconds: float = 5.0
    bootstrap: str | None = None  # None: start a one-node broker with the test harness
    output: Path | None = ROOT / "docs" / "benchmarks.md"
    json_path: Path | None = None
    command: str = ""
    progress: Callable[[str], None] = field(default=lambda line: print(line, flush=True))


def dataset_for(workload: str, records: int, base_time_ms: int) -> Dataset:
    name = WORKLOADS[workload].dataset
    return Dataset(name, max(1, records // 4) if name == "lines" else records, base_time_ms)


@dataclass
class Outcome:
    """Everything a run produced: per-round measurements and latency figures."""

    options: Options
    measurements: list[Measurement]
    latencies: list[latency.Latency]
    expected: dict[tuple[str, int], Digest]
    started: float
    finished: float

    @property
    def mismatches(self) -> list[Measurement]:
        return [m for m in self.measurements if m.status == "mismatch"]

    def summary(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Median and spread per (system, workload)."""
        cells: dict[tuple[str, str], list[Measurement]] = {}
        for m in self.measurements:
            cells.setdefault((m.system, m.workload), []).append(m)
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for key, runs in cells.items():
            good = [m for m in runs if m.status == "ok"]
            wrong = [m for m in runs if m.status == "mismatch"]
            if wrong or not good:
                # A wrong result in any round is the cell's result: no figure for it.
                worst = wrong[0] if wrong else next(m for m in runs if m.status != "ok")
                out[key] = {"status": worst.status, "reason": worst.reason}
                continue
            rates = [m.records_per_s for m in good]
            out[key] = {
                "status": "ok" if len(good) == len(runs) else "partly failed",
                "reason": "; ".join(sorted({m.reason for m in runs if m.reason})),
                "records": good[0].records,
                "rounds": len(good),
                "records_per_s": statistics.median(rates),
                "spread": (max(rates) - min(rates)) / statistics.median(rates) if rates else 0,
                "records_per_cpu_s": statistics.median(m.records_per_cpu_s for m in good),
                "steady_records_per_s": statistics.median(m.steady_records_per_s for m in good),
                "cpu_seconds": statistics.median(m.cpu_seconds for m in good),
                "peak_rss_mb": max(m.peak_rss_mb for m in good),
                "seconds": statistics.median(m.seconds for m in good),
            }
        return out


def _broker(options: Options) -> tuple[str, Any]:
    if options.bootstrap:
        return options.bootstrap, None
    sys.path.insert(0, str(ROOT))
    from tests.kafka_harness import KafkaCluster  # noqa: PLC0415 - only when no broker is given

    # The benchmark broker gets the JVM's full JIT (the harness's test defaults are
    # tuned for start-up), and the default heap of the harness.
    cluster = KafkaCluster(tempfile.mkdtemp(prefix="sbs-broker-"), jvm_opts=[]).start(brokers=1)
    return cluster.bootstrap_servers, cluster


def run(options: Options) -> Outcome:
    """Runs the suite; writes the report unless ``options.output`` is None."""
    say = options.progress
    for name in options.systems:
        if name not in SYSTEMS:
            raise SetupError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")
    for name in options.workloads:
        if name not in WORKLOADS:
            raise SetupError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    for name in options.systems:
        SYSTEMS[name].setup()
    started = time.time()
    bootstrap, cluster = _broker(options)
    logs = Path(tempfile.mkdtemp(prefix="sbs-logs-"))
    say(f"[suite] broker {bootstrap}; driver logs in {logs}")
    broker = Broker(bootstrap)
    base = recent_base_time_ms()
    measurements: list[Measurement] = []
    latencies: list[latency.Latency] = []
    expected: dict[tuple[str, int], Digest] = {}
    try:
        loaded: dict[Dataset, dict[str, int]] = {}
        for name in options.workloads:
            for ds in sorted(
                {
                    dataset_for(name, SYSTEMS[s].records(options.records), base)
                    for s in options.systems
                },
                key=lambda d: d.records,
            ):
                if ds not in loaded:
                    t0 = time.perf_counter()
                    loaded[ds] = broker.load(ds, options.partitions)
                    say(
                        f"[load] {ds.name}: {sum(loaded[ds].values()):,} records "
                        f"in {time.perf_counter() - t0:.1f} s"
                    )
                t0 = time.perf_counter()
                expected[name, ds.records] = WORKLOADS[name].expected(ds)
                say(
                    f"[oracle] {name} on {ds.records:,}: {expected[name, ds.records][0]:,} "
                    f"entries ({time.perf_counter() - t0:.1f} s)"
                )
        not_expressible: set[tuple[str, str]] = set()
        total = options.rounds * len(options.workloads) * len(options.systems)
        done = 0
        for round_ in range(1, options.rounds + 1):
            for workload_name in options.workloads:
                workload = WORKLOADS[workload_name]
                for system_name in options.systems:
                    done += 1
                    if (system_name, workload_name) in not_expressible:
                        continue
                    system = SYSTEMS[system_name]
                    ds = dataset_for(workload_name, system.records(options.records), base)
                    t0 = time.perf_counter()
                    m = _one(broker, system, workload, ds, loaded[ds], round_, options, logs)
                    want = expected[workload_name, ds.records]
                    m.expected = list(want)
                    if m.status == "n/a":
                        not_expressible.add((system_name, workload_name))
                    elif m.status == "ok" and tuple(m.digest) != want:
                        m.status = "mismatch"
                        m.reason = (
                            f"result {tuple(m.digest)} != expected {want} (entries, checksum)"
                        )
                    measurements.append(m)
                    say(f"{_line(done, total, m)}  (wall {time.perf_counter() - t0:.1f} s)")
        for workload_name in options.latency_workloads:
            if workload_name not in options.workloads:
                continue
            for system_name in options.systems:
                if (system_name, workload_name) in not_expressible:
                    continue
                try:
                    lat = latency.measure(
                        broker, SYSTEMS[system_name], WORKLOADS[workload_name], options, logs
                    )
                except RunError as exc:
                    lat = latency.Latency(
                        system_name, workload_name, options.latency_rate, 0, None, None, str(exc)
                    )
                latencies.append(lat)
                say(f"[latency] {system_name} {workload_name}: {lat.describe()}")
    finally:
        broker.close()
        if cluster is not None:
            cluster.stop()
    outcome = Outcome(options, measurements, latencies, expected, started, time.time())
    for m in outcome.mismatches:
        say(f"[MISMATCH] {m.system} {m.workload} round {m.round}: {m.reason}")
    if options.json_path is not None:
        options.json_path.write_text(
            json.dumps(
                {
                    "command": options.command,
                    "machine": report.machine(),
                    "measurements": [m.as_dict() for m in measurements],
                    "latencies": [lat.__dict__ for lat in latencies],
                },
                indent=1,
            )
        )
    if options.output is not None:
        report.write(outcome, options.output)
        say(f"[report] {options.output} and {report.chart_path(options.output)}")
    return outcome


def _one(
    broker: Broker,
    system: System,
    workload: Workload,
    ds: Dataset,
    loaded: dict[str, int],
    round_: int,
    options: Options,
    logs: Path,
) -> Measurement:
    try:
        m, output = measure(
            broker,
            system,
            workload,
            ds,
            loaded,
            round_=round_,
            partitions=options.partitions,
            guarantee=options.guarantee,
            commit_interval_ms=options.commit_interval_ms,
            threads=options.threads,
            timeout=options.run_timeout,
            logs=logs,
        )
    except RunError as exc:
        return Measurement(system.name, workload.name, round_, "error", reason=str(exc)[:2000])
    if m.status == "ok":
        records = list(broker.read(output))
        m.output_records = len(records)
        m.digest = list(workload.observed(records))
    # The app's internal topics too: a broker with hundreds of idle topics slows every
    # metadata request of the runs after it.
    app_topics = [t for t in broker.topics() if m.app_id and m.app_id in t]
    broker.delete_topics([output, *app_topics])
    return m


def _line(done: int, total: int, m: Measurement) -> str:
    head = f"[{done}/{total}] round {m.round} {m.workload:<14} {m.system:<9}"
    if m.status in ("n/a", "error"):
        return f"{head} {m.status}: {m.reason.splitlines()[0] if m.reason else ''}"
    return (
        f"{head} {m.records_per_s:>11,.0f} rec/s  {m.records_per_cpu_s:>11,.0f} rec/cpu-s  "
        f"(steady {m.steady_records_per_s:>9,.0f})  "
        f"{m.seconds:6.2f} s  cpu {m.cpu_seconds:6.2f} s  rss {m.peak_rss_mb:6.0f} MB  "
        f"out {m.output_records:,}  {m.status.upper() if m.status != 'ok' else 'ok'}"
    )
