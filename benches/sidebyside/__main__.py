"""python -m benches.sidebyside [--systems ...] [--queries ...] [--records N] [--rounds 3]"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from benches.sidebyside.suite import DEFAULT_RECORDS, Options, run
from benches.sidebyside.systems import SYSTEMS, SetupError
from benches.sidebyside.workloads import WORKLOADS


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benches.sidebyside",
        description="Side-by-side benchmarks: strom, Kafka Streams (JVM), Quix Streams, "
        "Bytewax and Faust on Nexmark and the README/Kafka workloads.",
    )
    parser.add_argument("--systems", type=_list, default=list(SYSTEMS), help=",".join(SYSTEMS))
    parser.add_argument("--queries", type=_list, default=list(WORKLOADS), help=",".join(WORKLOADS))
    parser.add_argument(
        "--records",
        type=int,
        default=DEFAULT_RECORDS,
        help="Nexmark events and kafka_throughput records; word count gets a quarter as lines",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--guarantee", default="at_least_once")
    parser.add_argument("--commit-interval-ms", type=int, default=100)
    parser.add_argument(
        "--threads", type=int, default=1, help="num.stream.threads (strom, Kafka Streams)"
    )
    parser.add_argument(
        "--latency", type=_list, default=["q0", "q7"], help="queries to time end to end"
    )
    parser.add_argument("--rate", type=int, default=2_000, help="bids/s in latency runs")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument("--output", default="docs/benchmarks.md", help="'-' for no report")
    parser.add_argument("--json", help="write every measurement here too")
    args = parser.parse_args(argv)
    options = Options(
        systems=args.systems,
        workloads=args.queries,
        records=args.records,
        rounds=args.rounds,
        partitions=args.partitions,
        guarantee=args.guarantee,
        commit_interval_ms=args.commit_interval_ms,
        threads=args.threads,
        run_timeout=args.run_timeout,
        latency_workloads=args.latency,
        latency_rate=args.rate,
        latency_seconds=args.latency_seconds,
        bootstrap=args.bootstrap,
        output=None if args.output == "-" else Path(args.output),
        json_path=Path(args.json) if args.json else None,
        command="python -m benches.sidebyside "
        + shlex.join(sys.argv[1:] if argv is None else argv),
    )
    try:
        outcome = run(options)
    except SetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 1 if outcome.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
