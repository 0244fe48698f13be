"""``strom replay``: replay a topology's input history on Spark, with a
progress bar, show its result tables and outputs, optionally bootstrap the
streaming app."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import click

from strom.cli.common import (
    app_dir_option,
    check_bootstrap,
    load_topology,
    merged_settings,
    reports_errors,
    settings_options,
)


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


@click.command()
@click.argument("app", metavar="APP")
@click.option(
    "--source", required=True, help="host:port,… (Kafka), embedded:PATH or a Parquet path"
)
@click.option("--application-id", required=True, help="the app's application.id")
@settings_options("the app's StreamsConfig settings, client settings included")
@click.option("--master", default="local[*]", show_default=True, help="the Spark master")
@click.option("--table", "tables", multiple=True, metavar="STORE", help="a store to show")
@click.option("--output", "outputs", multiple=True, metavar="TOPIC", help="an output topic to show")
@click.option(
    "--show", type=click.IntRange(min=0), default=20, show_default=True, help="rows to show of each"
)
@click.option(
    "--bootstrap",
    is_flag=True,
    help="write the end state for the app (at bootstrap.servers of --config)",
)
@app_dir_option
@reports_errors
def replay(
    app: str,
    source: str,
    application_id: str,
    settings: dict[str, str],
    command_config: Path | None,
    master: str,
    tables: tuple[str, ...],
    outputs: tuple[str, ...],
    show: int,
    bootstrap: bool,
    app_dir: Path | None,
) -> int:
    """Replay an app's input history on Spark (strom.spark; needs pyspark).

    APP is MODULE:NAME of a Topology, a StreamsBuilder or a function returning
    one; MODULE is imported from --app-dir, then the current directory.
    """
    topology = load_topology(app, app_dir)
    config: dict[str, Any] = merged_settings(command_config, settings) | {
        "application.id": application_id
    }
    is_kafka = not source.startswith("embedded:") and not os.path.exists(source)
    if is_kafka:
        check_bootstrap(source)
    # Executors run this interpreter, which has strom.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # pyspark is an optional dependency (strom[spark]): imported when used.
    from pyspark.sql import SparkSession  # noqa: PLC0415

    from strom.spark import replay as run_replay  # noqa: PLC0415

    ours = SparkSession.getActiveSession() is None
    spark = SparkSession.builder.master(master).appName("strom replay").getOrCreate()
    try:
        history: Any = source
        if not is_kafka and not source.startswith("embedded:"):
            history = spark.read.parquet(source)
        with run_replay(
            topology,
            spark,
            source=history,
            config=config,
            progress=ProgressBar(sys.stderr),
            changelogs=bootstrap,
        ) as result:
            click.echo(f"metrics: {result.metrics()}")
            for store in tables:
                click.echo(f"table {store}:")
                result.table(store).show(show, truncate=False)
            for topic in outputs:
                click.echo(f"output {topic}:")
                result.output(topic).show(show, truncate=False)
            if bootstrap:
                result.bootstrap(config)
                click.echo(f"bootstrapped {application_id} at {config.get('bootstrap.servers')}")
    finally:
        if ours:
            spark.stop()
    return 0
