"""``strom replay``: replay a topology's input history on Spark, with a
progress bar, show its result tables and outputs, optionally bootstrap the
streaming app."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from typing import Any, TextIO

from strom.errors import StromError
from strom.topology import Topology


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "replay", help="replay an app's input history on Spark (strom.spark; needs pyspark)"
    )
    parser.add_argument("app", help="MODULE:NAME of a Topology, or of a function that returns one")
    parser.add_argument(
        "--source", required=True, help="host:port,… (Kafka), embedded:PATH or a Parquet path"
    )
    parser.add_argument("--application-id", required=True)
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a StreamsConfig setting (repeatable)",
    )
    parser.add_argument("--master", default="local[*]", help="the Spark master (default local[*])")
    parser.add_argument("--table", action="append", default=[], help="a store to show")
    parser.add_argument("--output", action="append", default=[], help="an output topic to show")
    parser.add_argument("--show", type=int, default=20, help="rows to show of each")
    parser.add_argument(
        "--bootstrap",
        action="store_true",
        help="write the end state for the app (embedded:PATH in --config bootstrap.servers)",
    )
    parser.set_defaults(run=run)


def load_topology(spec: str) -> Topology:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise SystemExit(f"strom replay: APP must be MODULE:NAME, got {spec!r}")
    found: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        found = getattr(found, part)
    topology = found if isinstance(found, Topology) else found()
    if not isinstance(topology, Topology):
        raise SystemExit(f"strom replay: {spec} gave {type(topology).__name__}, not a Topology")
    return topology


class ProgressBar:
    """One line on a terminal, redrawn after each stage."""

    def __init__(self, out: TextIO, width: int = 30) -> None:
        self.out = out
        self.width = width
        self.started = time.monotonic()
        self.records = 0

    def __call__(self, done: int, total: int, records: int) -> None:
        self.records += records
        filled = self.width * done // max(total, 1)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.monotonic() - self.started
        self.out.write(
            f"\rreplay [{bar}] {done}/{total} sub-topologies, "
            f"{self.records:,} records, {elapsed:.1f} s"
        )
        if done == total:
            self.out.write("\n")
        self.out.flush()


def run(args: argparse.Namespace) -> int:
    topology = load_topology(args.app)
    config: dict[str, Any] = {"application.id": args.application_id}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"strom replay: --config takes KEY=VALUE, got {item!r}", file=sys.stderr)
            return 2
        config[key] = value
    # Executors run this interpreter, which has strom.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # pyspark is an optional dependency (strom[spark]): imported when used.
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from strom.spark import replay  # noqa: PLC0415

    ours = SparkSession.getActiveSession() is None
    spark = SparkSession.builder.master(args.master).appName("strom replay").getOrCreate()
    try:
        source: Any = args.source
        if not source.startswith("embedded:") and os.path.exists(source):
            source = spark.read.parquet(source)
        try:
            with replay(
                topology,
                spark,
                source=source,
                config=config,
                progress=ProgressBar(sys.stderr),
                changelogs=args.bootstrap,
            ) as result:
                print(f"metrics: {result.metrics()}")
                for store in args.table:
                    print(f"table {store}:")
                    result.table(store).show(args.show, truncate=False)
                for topic in args.output:
                    print(f"output {topic}:")
                    result.output(topic).show(args.show, truncate=False)
                if args.bootstrap:
                    result.bootstrap(config)
                    servers = config.get("bootstrap.servers")
                    print(f"bootstrapped {args.application_id} at {servers}")
        except StromError as exc:
            print(f"strom replay: {exc}", file=sys.stderr)
            return 1
    finally:
        if ours:
            spark.stop()
    return 0
