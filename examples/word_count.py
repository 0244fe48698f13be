"""Word count on the embedded log: python examples/word_count.py [LOG_DIR]."""

from __future__ import annotations

import sys
import tempfile

from strom import KafkaStreams, serdes
from strom.cli.demo import word_count_topology
from strom.embedded import EmbeddedLog

LINES = ["the quick brown fox", "jumps over the lazy dog", "the end"]


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="strom-wc-")
    log = EmbeddedLog(path)
    for topic in ("text-input", "word-counts"):
        if topic not in log.topics():
            log.create_topic(topic, partitions=2)
    with log.producer() as producer:
        producer.produce_batch("text-input", [(None, line.encode()) for line in LINES])

    topology = word_count_topology()
    print(topology.describe())
    app = KafkaStreams(
        topology, {"application.id": "wordcount", "bootstrap.servers": f"embedded:{path}"}
    )
    with app:
        app.run_until_end()
        counts = {kv.key: kv.value for kv in app.store("counts").all()}
    long = serdes.Long()
    print(
        "counts:",
        dict(sorted(counts.items())),
        "| serialized 'the':",
        long.serialize("", counts["the"]),
    )


if __name__ == "__main__":
    main()
