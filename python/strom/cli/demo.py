"""``strom demo``: word count over generated text on the embedded log."""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.cli.common import reports_errors
from strom.cli.output import Output, output_options
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
@output_options
@reports_errors
def demo(lines: int, path: Path | None, top: int, output: Output) -> int:
    """Run word count on generated text (no broker)."""
    log_dir = str(path) if path is not None else tempfile.mkdtemp(prefix="strom-demo-")
    log = EmbeddedLog(log_dir)
    for topic in (INPUT_TOPIC, OUTPUT_TOPIC):
        if topic not in log.topics():
            log.create_topic(topic, partitions=3)
    output.note(f"writing {lines:,} lines of generated text to '{INPUT_TOPIC}' …")
    text = generate_lines(lines)
    with (
        output.progress("write", total=len(text), unit="lines") as bar,
        log.producer(value_serde=serdes.String()) as producer,
    ):
        step = 10_000
        for start in range(0, len(text), step):
            chunk = text[start : start + step]
            producer.produce_batch(INPUT_TOPIC, [(None, line) for line in chunk])
            bar.advance(len(chunk))
    words = sum(len(line.split()) for line in text)

    app = KafkaStreams(
        word_count_topology(),
        {"application.id": "strom-demo-wordcount", "bootstrap.servers": f"embedded:{log_dir}"},
    )
    with app:
        # Each line goes through the first sub-topology, each word through the second.
        with output.progress("count", total=len(text) + words, unit="records") as bar:
            started = time.perf_counter()
            _while_showing(app.run_until_end, lambda: bar.to(_processed(app)))
            elapsed = time.perf_counter() - started
            bar.to(_processed(app))
        counts = sorted(((kv.value, kv.key) for kv in app.store("counts").all()), reverse=True)
    counts = counts[:top]

    summary = [f"top {len(counts)} words:"]
    summary += [f"  {word:<16} {count:>9,}" for count, word in counts]
    summary += [
        "",
        f"processed {len(text):,} lines ({words:,} words) in {elapsed:.2f} s: "
        f"{len(text) / elapsed:,.0f} lines/s, {words / elapsed:,.0f} words/s",
        f"data lives in {log_dir}",
        f"  input topic: {INPUT_TOPIC}, output topic: {OUTPUT_TOPIC},",
        "  internal topics: strom-demo-wordcount-counts-repartition, …-counts-changelog",
    ]
    output.summary(
        {
            "lines": len(text),
            "words": words,
            "seconds": elapsed,
            "top": [[word, count] for count, word in counts],
            "path": log_dir,
        },
        summary,
    )
    return 0


def _processed(app: KafkaStreams) -> int:
    return int(app.metrics().totals().get("records-processed", 0))


def _while_showing(work: Callable[[], None], show: Callable[[], None]) -> None:
    """Runs ``work`` and calls ``show`` every 0.1 s until it returns."""
    done = threading.Event()

    def refresh() -> None:
        while not done.wait(0.1):
            show()

    shower = threading.Thread(target=refresh, name="strom-demo-progress", daemon=True)
    shower.start()
    try:
        work()
    finally:
        done.set()
        shower.join()
