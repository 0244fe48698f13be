"""``strom tail TOPIC``: print a topic's records, from its beginning or its
last records, and with ``--follow`` the ones that arrive after."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import click

from strom.cli.cluster import Consumed, Start, cluster_options, open_cluster
from strom.cli.common import BadInput, CommandError, reports_errors
from strom.cli.records import Codec, as_json, serde_options
from strom.errors import SerializationError


@click.command()
@click.argument("topic")
@cluster_options
@click.option("--from-beginning", is_flag=True, help="start at each partition's first record")
@click.option(
    "--last",
    "-n",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="start this many records before each partition's end (0: only new records)",
)
@click.option(
    "--follow",
    "-F",
    is_flag=True,
    help="after the end, print records as they arrive, until Ctrl-C (Kafka only)",
)
@click.option("--max-records", type=click.IntRange(min=1), help="stop after this many records")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: the value (KEY<sep>VALUE with --key-separator); json: one object a "
    "record with topic, partition, offset, timestamp, key, value, headers",
)
@click.option("--key-separator", metavar="SEP", help="print the key, SEP, then the value")
@serde_options
@reports_errors
def tail(
    topic: str,
    bootstrap_servers: str,
    config_file: Path | None,
    settings: dict[str, str],
    from_beginning: bool,
    last: int,
    follow: bool,
    max_records: int | None,
    fmt: str,
    key_separator: str | None,
    key_serde: str,
    value_serde: str,
) -> int:
    """Print the records of TOPIC: by default the last 10 of each partition,
    partition by partition; with --follow, then every new record.

    Keys and values are printed in the form of their serde (see strom produce),
    so that `strom tail T --format json | strom produce U --format json`
    copies T to U.
    """
    if key_separator is not None and fmt == "json":
        raise BadInput('--key-separator is for --format text; JSON has a "key" field')
    keys, values = Codec("key", key_serde, topic), Codec("value", value_serde, topic)
    stop = threading.Event()
    if follow:
        previous = {
            sig: signal.signal(sig, lambda *_: stop.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
    count = 0
    try:
        with open_cluster(bootstrap_servers, config_file, settings) as cluster:
            start = Start(from_beginning=from_beginning, last=last)

            def announce() -> None:
                if follow:  # from here on, what is written to the topic is printed
                    click.echo(f"strom tail: following {topic} …", err=True)

            records = cluster.read(
                topic, start, follow=follow, stopped=stop.is_set, started=announce
            )
            for record in records:
                click.echo(_line(record, fmt, key_separator, keys, values))
                count += 1
                if max_records is not None and count >= max_records:
                    break
    finally:
        if follow:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0


def _line(record: Consumed, fmt: str, key_separator: str | None, keys: Codec, values: Codec) -> str:
    try:
        if fmt == "json":
            return json.dumps(as_json(record, keys, values), ensure_ascii=False)
        if key_separator is not None:
            return f"{keys.to_text(record.key)}{key_separator}{values.to_text(record.value)}"
        return values.to_text(record.value)
    except SerializationError as exc:
        raise CommandError(
            f"{record.topic}, partition {record.partition}, offset {record.offset}: {exc}"
        ) from exc
