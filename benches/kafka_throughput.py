"""End-to-end throughput and latency of two apps on a Kafka broker, strom and
Kafka Streams (JVM) side by side (issues 6 and 17).

Not part of ``make bench`` (it needs a broker). The two apps:

- ``filter_map``: stateless, ``filter`` then ``map_values`` (about 9 in 10 pass);
- ``windowed_count``: ``group_by_key`` and a 10 s tumbling-window count.

Both are defined once per system in the side-by-side suite
(benches/sidebyside/strom_app.py for strom with Python lambdas,
benches/jvm for Kafka Streams 4.3.0) and measured by its runner: ``--records``
records of ~100 bytes (1,000 keys) are pre-loaded into a topic of
``--partitions`` partitions; each system runs in its own process from "ready"
until its consumer group has committed every input offset (group join and task
set-up included); records/s, CPU-seconds of the process and peak RSS are
reported, and each result is checked against the expected output. Latency:
the app runs while records are produced at ``--rate`` records/s for
``--latency-seconds``; per output record, arrival time minus the record
timestamp (for the windowed count, the window's newest input). Under
exactly_once_v2 that includes the commit interval.

usage: python benches/kafka_throughput.py --bootstrap HOST:PORT [--records N]
       [--partitions P] [--rate R] [--latency-seconds S] [--apps filter_map,windowed_count]
       [--guarantees at_least_once,exactly_once_v2] [--systems strom,kstreams]
       [--commit-interval-ms 100] [--json OUT.json]
       (or --start-broker DIR to start a single-node broker with the test harness;
       with neither, a broker is started in a temporary directory)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benches.sidebyside.suite import Options, run

APPS = ("filter_map", "windowed_count")


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _row(row: dict[str, Any]) -> str:
    return (
        f"| {row['app']} | {row['guarantee']} | {row['system']} | {row['status']} "
        f"| {row['records_per_s']:,} | {row['records_per_cpu_s']:,} "
        f"| {_cell(row['vs_kstreams'], '.2f')} | {_cell(row['p50_ms'], ',.1f')} "
        f"| {_cell(row['p99_ms'], ',.1f')} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--start-broker", help="start a one-node broker in this directory")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=int, default=2_000, help="records/s for latency")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--apps", default=",".join(APPS))
    parser.add_argument("--guarantees", default="at_least_once,exactly_once_v2")
    parser.add_argument("--systems", default="strom,kstreams")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--commit-interval-ms",
        type=int,
        default=100,
        help="commit.interval.ms for every system and guarantee (the runner sees progress "
        "through committed offsets)",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="num.stream.threads of strom and Kafka Streams"
    )
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None and args.start_broker is not None:
        from tests.kafka_harness import KafkaCluster  # noqa: PLC0415 - only when asked

        cluster = KafkaCluster(args.start_broker, jvm_opts=[]).start(brokers=1)
        bootstrap = cluster.bootstrap_servers
    apps = [a for a in args.apps.split(",") if a]
    systems = [s for s in args.systems.split(",") if s]
    rows, records = [], []
    failed = False
    try:
        for guarantee in args.guarantees.split(","):
            outcome = run(
                Options(
                    systems=systems,
                    workloads=apps,
                    records=args.records,
                    rounds=args.rounds,
                    partitions=args.partitions,
                    guarantee=guarantee,
                    commit_interval_ms=args.commit_interval_ms,
                    threads=args.threads,
                    latency_workloads=apps,
                    latency_rate=args.rate,
                    latency_seconds=args.latency_seconds,
                    bootstrap=bootstrap,
                    output=None,
                )
            )
            failed |= bool(outcome.mismatches)
            summary = outcome.summary()
            for app in apps:
                ref = summary.get(("kstreams", app), {})
                for system in systems:
                    cell = summary.get((system, app), {})
                    lat = next(
                        (x for x in outcome.latencies if x.system == system and x.workload == app),
                        None,
                    )
                    row = {
                        "app": app,
                        "guarantee": guarantee,
                        "system": system,
                        "status": cell.get("status"),
                        "records_per_s": round(cell.get("records_per_s", 0)),
                        "records_per_cpu_s": round(cell.get("records_per_cpu_s", 0)),
                        "cpu_seconds": cell.get("cpu_seconds"),
                        "peak_rss_mb": cell.get("peak_rss_mb"),
                        "vs_kstreams": (
                            cell["records_per_s"] / ref["records_per_s"]
                            if cell.get("records_per_s") and ref.get("records_per_s")
                            else None
                        ),
                        "p50_ms": lat.p50_ms if lat else None,
                        "p99_ms": lat.p99_ms if lat else None,
                    }
                    records.append(row)
                    rows.append(_row(row))
    finally:
        if cluster is not None:
            cluster.stop()
    print(f"\n{args.records:,} records, {args.partitions} partitions, latency at {args.rate:,}/s\n")
    print(
        "| app | guarantee | system | check | records/s | records/cpu-s | vs JVM "
        "| p50 ms | p99 ms |"
    )
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    print("\n".join(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
