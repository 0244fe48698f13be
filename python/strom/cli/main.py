"""``strom demo``: word count over generated text on the embedded log."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Sequence

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.cli import replay as replay_command
from strom.embedded import EmbeddedLog
from strom.errors import StromError

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


def demo(args: argparse.Namespace) -> int:
    path = args.path or tempfile.mkdtemp(prefix="strom-demo-")
    log = EmbeddedLog(path)
    if INPUT_TOPIC not in log.topics():
        log.create_topic(INPUT_TOPIC, partitions=3)
        log.create_topic(OUTPUT_TOPIC, partitions=3)
    print(f"writing {args.lines:,} lines of generated text to '{INPUT_TOPIC}' …")
    lines = generate_lines(args.lines)
    encode = serdes.String().serialize_batch
    with log.producer() as producer:
        step = 10_000
        for start in range(0, len(lines), step):
            chunk = encode(INPUT_TOPIC, lines[start : start + step])
            producer.produce_batch(INPUT_TOPIC, [(None, value) for value in chunk])
    words = sum(len(line.split()) for line in lines)

    app = KafkaStreams(
        word_count_topology(),
        {"application.id": "strom-demo-wordcount", "bootstrap.servers": f"embedded:{path}"},
    )
    with app:
        started = time.perf_counter()
        app.run_until_end()
        elapsed = time.perf_counter() - started
        counts = sorted(((kv.value, kv.key) for kv in app.store("counts").all()), reverse=True)
    counts = counts[: args.top]

    print(f"\ntop {len(counts)} words:")
    for count, word in counts:
        print(f"  {word:<16} {count:>9,}")
    print(
        f"\nprocessed {len(lines):,} lines ({words:,} words) in {elapsed:.2f} s: "
        f"{len(lines) / elapsed:,.0f} lines/s, {words / elapsed:,.0f} words/s"
    )
    print(f"data lives in {path}")
    print(f"  input topic: {INPUT_TOPIC}, output topic: {OUTPUT_TOPIC},")
    print("  internal topics: strom-demo-wordcount-counts-repartition, …-counts-changelog")
    return 0


def reset(args: argparse.Namespace) -> int:
    """Kafka's application reset tool: reprocess the input from scratch."""
    from strom.kafka import reset_application  # noqa: PLC0415 - needs confluent-kafka (optional)

    inputs = [t for t in (args.input_topics or "").split(",") if t]
    try:
        result = reset_application(
            args.application_id,
            args.bootstrap_servers,
            input_topics=inputs,
            state_dir=args.state_dir,
        )
    except StromError as exc:
        print(f"strom reset: {exc}", file=sys.stderr)
        return 1
    for topic, partitions in sorted(result.offsets_reset.items()):
        print(f"reset offsets of {topic} ({len(partitions)} partition(s)) to the earliest")
    for topic in result.topics_deleted:
        print(f"deleted internal topic {topic}")
    if result.state_removed is not None:
        print(f"removed local state {result.state_removed}")
    print(f"application {args.application_id} reset")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="strom", description="strom: Kafka Streams for Python")
    commands = parser.add_subparsers(dest="command", required=True)
    p_demo = commands.add_parser("demo", help="run word count on generated text (no broker)")
    p_demo.add_argument("--lines", type=int, default=300_000, help="lines of text to generate")
    p_demo.add_argument("--path", help="embedded log directory (default: a new temp dir)")
    p_demo.add_argument("--top", type=int, default=10, help="how many words to show")
    p_demo.set_defaults(run=demo)
    p_reset = commands.add_parser(
        "reset", help="reset an app on Kafka: input offsets to earliest, internal topics deleted"
    )
    p_reset.add_argument("--application-id", required=True)
    p_reset.add_argument("--bootstrap-servers", required=True)
    p_reset.add_argument("--input-topics", help="comma-separated input topics to reset too")
    p_reset.add_argument("--state-dir", help="the app's state.dir (default: the default one)")
    p_reset.set_defaults(run=reset)
    replay_command.add_parser(commands)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
