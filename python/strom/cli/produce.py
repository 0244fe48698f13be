"""``strom produce TOPIC``: write records from lines of text or JSON (stdin or
a file) to a topic of the embedded log or of Kafka."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import click

from strom.cli.cluster import Outgoing, cluster_options, open_cluster
from strom.cli.common import BadInput, reports_errors
from strom.cli.output import Output, output_options
from strom.cli.records import Codec, parse_json_line, serde_options


@click.command()
@click.argument("topic")
@cluster_options
@click.option(
    "--file",
    "-f",
    "source",
    type=click.File("r", encoding="utf-8"),
    default="-",
    show_default=True,
    help="where the records are, one a line ('-': stdin)",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["lines", "json"]),
    default="lines",
    show_default=True,
    help="lines: each line a value (or KEY<sep>VALUE with --key-separator); "
    'json: each line {"key": …, "value": …, "timestamp": …, "partition": …, "headers": …}',
)
@click.option(
    "--key-separator",
    metavar="SEP",
    help="lines are KEY<SEP>VALUE, split at the first SEP (without it: values, no keys)",
)
@click.option(
    "--partition", type=click.IntRange(min=0), help="write every record to this partition"
)
@serde_options
@output_options
@reports_errors
def produce(
    topic: str,
    bootstrap_servers: str,
    config_file: Path | None,
    settings: dict[str, str],
    source: TextIO,
    fmt: str,
    key_separator: str | None,
    partition: int | None,
    key_serde: str,
    value_serde: str,
    output: Output,
) -> int:
    """Write records to TOPIC, one per line of input.

    Keys and values are text in the form of their serde: strings as they are,
    numbers for long/integer/double, JSON for json, base64 for bytes. Records
    without a partition go to their key's (murmur2, as Kafka's Java clients).
    """
    if key_separator is not None and fmt == "json":
        raise BadInput('--key-separator is for --format lines; a JSON line has a "key"')
    if key_separator == "":
        raise BadInput("--key-separator must not be empty")
    keys, values = Codec("key", key_serde, topic), Codec("value", value_serde, topic)
    name = "<stdin>" if source is sys.stdin else source.name

    def records() -> Iterator[Outgoing]:
        for number, raw in enumerate(source, start=1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            try:
                if fmt == "json":
                    record = parse_json_line(line, keys, values)
                elif key_separator is not None:
                    key, sep, value = line.partition(key_separator)
                    if not sep:
                        raise ValueError(f"no key separator {key_separator!r} in the line")
                    record = Outgoing(keys.from_text(key), values.from_text(value))
                else:
                    record = Outgoing(None, values.from_text(line))
            except ValueError as exc:
                raise BadInput(f"{name}, line {number}: {exc}") from None
            yield record._replace(partition=partition) if partition is not None else record

    with (
        open_cluster(bootstrap_servers, config_file, settings) as cluster,
        output.progress(f"produce {topic}", unit="records") as bar,
    ):
        count = cluster.produce(topic, records(), bar.advance)
    output.summary(
        {"topic": topic, "records": count, "bootstrap_servers": cluster.where},
        [f"wrote {count:,} record(s) to {topic} at {cluster.where}"],
    )
    return 0
