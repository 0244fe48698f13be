"""``strom topics list|describe|create|delete``, on the embedded log or Kafka."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from strom.cli.cluster import TopicInfo, cluster_options, open_cluster
from strom.cli.common import key_values, reports_errors
from strom.cli.output import Output, output_options

FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for a person, json for scripts",
)


@click.group()
def topics() -> None:
    """List, describe, create and delete topics."""


@topics.command("list")
@cluster_options
@FORMAT
@reports_errors
def list_topics(
    bootstrap_servers: str, config_file: Path | None, settings: dict[str, str], fmt: str
) -> int:
    """The names of the topics, sorted."""
    with open_cluster(bootstrap_servers, config_file, settings) as cluster:
        names = cluster.topics()
    click.echo(json.dumps(names) if fmt == "json" else "\n".join(names))
    return 0


@topics.command()
@click.argument("names", metavar="TOPIC...", nargs=-1, required=True)
@cluster_options
@FORMAT
@reports_errors
def describe(
    names: tuple[str, ...],
    bootstrap_servers: str,
    config_file: Path | None,
    settings: dict[str, str],
    fmt: str,
) -> int:
    """Partitions (log start and end offsets; leader and replicas on Kafka) and
    configuration of each TOPIC."""
    with open_cluster(bootstrap_servers, config_file, settings) as cluster:
        found = [cluster.describe(name) for name in names]
    if fmt == "json":
        click.echo(json.dumps([asdict(info) for info in found]))
    else:
        click.echo("\n".join(line for info in found for line in _text(info)))
    return 0


def _text(info: TopicInfo) -> list[str]:
    records = sum(p.end - p.start for p in info.partitions)
    lines = [f"Topic: {info.name}\tPartitionCount: {len(info.partitions)}\tRecords: {records:,}"]
    if info.config:
        lines.append("\tConfigs: " + ",".join(f"{k}={v}" for k, v in sorted(info.config.items())))
    for p in info.partitions:
        line = f"\tPartition: {p.partition}\tStart: {p.start}\tEnd: {p.end}"
        if p.leader is not None:
            line += (
                f"\tLeader: {p.leader}\tReplicas: {','.join(map(str, p.replicas))}"
                f"\tIsr: {','.join(map(str, p.in_sync))}"
            )
        lines.append(line)
    return lines


@topics.command()
@click.argument("name", metavar="TOPIC")
@cluster_options
@click.option("--partitions", "-p", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--replication-factor",
    "-r",
    type=click.IntRange(min=1),
    help="copies of each partition (Kafka; default: the broker's default)",
)
@click.option(
    "--topic-config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    callback=key_values,
    help="a topic setting, e.g. cleanup.policy=compact (repeatable)",
)
@click.option("--if-not-exists", is_flag=True, help="no error when the topic exists")
@output_options
@reports_errors
def create(
    name: str,
    bootstrap_servers: str,
    config_file: Path | None,
    settings: dict[str, str],
    partitions: int,
    replication_factor: int | None,
    config: dict[str, str],
    if_not_exists: bool,
    output: Output,
) -> int:
    """Create TOPIC (on the embedded log, the log directory too)."""
    with open_cluster(bootstrap_servers, config_file, settings, must_exist=False) as cluster:
        existed = if_not_exists and name in cluster.topics()
        if not existed:
            cluster.create(name, partitions, replication_factor, config)
    what = "exists already" if existed else f"created ({partitions} partition(s))"
    output.summary(
        {"topic": name, "created": not existed, "partitions": partitions},
        [f"topic {name} {what} at {cluster.where}"],
    )
    return 0


@topics.command()
@click.argument("names", metavar="TOPIC...", nargs=-1, required=True)
@cluster_options
@click.option("--if-exists", is_flag=True, help="no error when a topic does not exist")
@output_options
@reports_errors
def delete(
    names: tuple[str, ...],
    bootstrap_servers: str,
    config_file: Path | None,
    settings: dict[str, str],
    if_exists: bool,
    output: Output,
) -> int:
    """Delete each TOPIC with its records (and, on the embedded log, every
    group's committed offsets for it)."""
    deleted = []
    with open_cluster(bootstrap_servers, config_file, settings) as cluster:
        present = set(cluster.topics()) if if_exists else set(names)
        for name in names:
            if name in present:
                cluster.delete(name)
                deleted.append(name)
    output.summary(
        {"deleted": deleted}, [f"deleted topic {name} at {cluster.where}" for name in deleted]
    )
    return 0
