"""``strom demo``: word count over generated text on the embedded log."""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import click

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.cli.common import reports_errors
from strom.embedded import EmbeddedLog

INPUT_TOPIC = "text-input"
OUTPUT_TOPIC = "word-counts"

_SYLLABLES = ["ka", "fka", "str", "om", "eam", "ta", "ble", "win", "dow", "jo", "in", "lo", "g"]


def word_count_topology(
    input_topic: str = INPUT_TOPIC, output_topic: str = OUTPUT_TOPIC
) -> Topology:
    """Kafka's WordCount: split lines into words, group by word, count."""
    builder = StreamsBuilder()
    (
        builder.stream(input_topic, key_serde=serdes.String(), value_serde=serdes.String())
        .flat_map_values(lambda line: line.lower().split())
        .group_by(lambda _key, word: word, key_serde=serdes.String(), value_serde=serdes.String())
        .count(materialized="counts")
        .to_stream()
        .to(output_topic, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


def generate_lines(count: int, seed: int = 7) -> list[str]:
    """Lines of 4 to 12 words drawn from a skewed vocabulary (a few words are common)."""
    rng = random.Random(seed)
    vocabulary = sorted(
        {"".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))) for _ in range(5_000)}
    )
    rng.shuffle(vocabulary)  # which words are common is random, not alphabetical
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    words = rng.choices(vocabulary, weights=weights, k=count * 8)
    lines, at = [], 0
    for _ in range(count):
        n = rng.randint(4, 12)
        lines.append(" ".join(words[at : at + n]) if at + n <= len(words) else "strom")
        at += n
    return lines


@click.command()
@click.option(
    "--lines",
    type=click.IntRange(min=1),
    default=300_000,
    show_default=True,
    help="lines of text to generate",
)
@click.option(
    "--path",
    type=click.Path(file_okay=False, path_type=Path),
    help="embedded log directory (default: a new temp dir)",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="how many words to show",
)
@reports_errors
def demo(lines: int, path: Path | None, top: int) -> int:
    """Run word count on generated text (no broker)."""
    log_dir = str(path) if path is not None else tempfile.mkdtemp(prefix="strom-demo-")
    log = EmbeddedLog(log_dir)
    for topic in (INPUT_TOPIC, OUTPUT_TOPIC):
        if topic not in log.topics():
            log.create_topic(topic, partitions=3)
    click.echo(f"writing {lines:,} lines of generated text to '{INPUT_TOPIC}' …")
    text = generate_lines(lines)
    with log.producer(value_serde=serdes.String()) as producer:
        step = 10_000
        for start in range(0, len(text), step):
            producer.produce_batch(
                INPUT_TOPIC, [(None, line) for line in text[start : start + step]]
            )
    words = sum(len(line.split()) for line in text)

    app = KafkaStreams(
        word_count_topology(),
        {"application.id": "strom-demo-wordcount", "bootstrap.servers": f"embedded:{log_dir}"},
    )
    with app:
        started = time.perf_counter()
        app.run_until_end()
        elapsed = time.perf_counter() - started
        counts = sorted(((kv.value, kv.key) for kv in app.store("counts").all()), reverse=True)
    counts = counts[:top]

    click.echo(f"\ntop {len(counts)} words:")
    for count, word in counts:
        click.echo(f"  {word:<16} {count:>9,}")
    click.echo(
        f"\nprocessed {len(text):,} lines ({words:,} words) in {elapsed:.2f} s: "
        f"{len(text) / elapsed:,.0f} lines/s, {words / elapsed:,.0f} words/s"
    )
    click.echo(f"data lives in {log_dir}")
    click.echo(f"  input topic: {INPUT_TOPIC}, output topic: {OUTPUT_TOPIC},")
    click.echo("  internal topics: strom-demo-wordcount-counts-repartition, …-counts-changelog")
    return 0
