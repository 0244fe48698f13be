"""``strom replay``: replay a topology's input history on Spark, with a
progress display, show its result tables and outputs, optionally bootstrap
the streaming app."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from strom.cli.common import (
    app_dir_option,
    check_bootstrap,
    load_topology,
    merged_settings,
    reports_errors,
    settings_options,
)
from strom.cli.output import Output, output_options


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
    help="write the end state for the app (at the bootstrap.servers of the settings)",
)
@app_dir_option
@output_options
@reports_errors
def replay(
    app: str,
    source: str,
    application_id: str,
    settings: dict[str, str],
    config_file: Path | None,
    master: str,
    tables: tuple[str, ...],
    outputs: tuple[str, ...],
    show: int,
    bootstrap: bool,
    app_dir: Path | None,
    output: Output,
) -> int:
    """Replay an app's input history on Spark (strom.spark; needs pyspark).

    APP is MODULE:NAME of a Topology, a StreamsBuilder or a function returning
    one; MODULE is imported from --app-dir, then the current directory.
    """
    topology = load_topology(app, app_dir)
    config: dict[str, Any] = merged_settings(config_file, settings) | {
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
        with output.progress("replay", unit="") as bar:

            def progress(done: int, total: int, records: int) -> None:
                bar.to(done, total)
                output.note(f"replay: sub-topology {done}/{total} done ({records:,} records)")

            result = run_replay(
                topology,
                spark,
                source=history,
                config=config,
                progress=progress,
                changelogs=bootstrap,
            )
        with result:
            summary: dict[str, Any] = {"metrics": result.metrics(), "tables": {}, "outputs": {}}
            if not output.as_json:
                click.echo(f"metrics: {summary['metrics']}")
            for kind, names, frame in (
                ("tables", tables, result.table),
                ("outputs", outputs, result.output),
            ):
                for name in names:
                    if output.as_json:
                        rows = frame(name).limit(show).collect()
                        summary[kind][name] = [row.asDict() for row in rows]
                    else:
                        click.echo(f"{kind[:-1]} {name}:")
                        frame(name).show(show, truncate=False)
            if bootstrap:
                result.bootstrap(config)
                summary["bootstrapped"] = config.get("bootstrap.servers")
                if not output.as_json:
                    click.echo(f"bootstrapped {application_id} at {summary['bootstrapped']}")
    finally:
        if ours:
            spark.stop()
    if output.as_json:
        click.echo(json.dumps(summary, default=str, sort_keys=True))
    return 0
