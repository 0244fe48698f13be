"""Nexmark query 7, highest bid: the highest bid of each 10-second window.

Bids are JSON (``auction``, ``bidder``, ``price``, ``date_time``) from a small
seeded generator, timestamped by their own ``date_time``. All bids go to one
group (as Nexmark's Q7 ranks the whole stream), a tumbling window keeps the
highest bid so far (the first of equal bids), and each update goes to the
output keyed by the window's start.

The bids topic has one partition, as Nexmark's single stream of bids: a
global maximum gathers every bid in one place, and bids repartitioned from
several partitions read at catch-up speed would arrive there far out of time
order (each upstream task forwards a whole batch of its own partition at a
time), so a window would need a grace period as long as that disorder.

Run on the embedded log: python examples/nexmark_q7.py [LOG_DIR]
Its topology: strom describe nexmark_q7:build_topology --app-dir examples
"""

from __future__ import annotations

import random
import sys
import tempfile
from typing import Any

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import TimeWindows

BIDS, OUTPUT = "bids", "highest-bids"
WINDOW_MS = 10_000
BASE_TIME_MS = 1_700_000_000_000


def generate_bids(count: int, seed: int = 7) -> list[dict[str, int]]:
    """``count`` bids, 0-50 ms apart, on 100 auctions, with skewed prices."""
    rng = random.Random(seed)
    at, bids = BASE_TIME_MS, []
    for _ in range(count):
        at += rng.randint(0, 50)
        price = int(rng.lognormvariate(6, 1))
        bids.append(
            {
                "auction": 1000 + rng.randrange(100),
                "bidder": rng.randrange(500),
                "price": price,
                "date_time": at,
            }
        )
    return bids


def bid_time(record: Any, _partition_time: int) -> int:
    return int(record.value["date_time"])


def build_topology() -> Topology:
    string, json_ = serdes.String(), serdes.Json()
    builder = StreamsBuilder()
    (
        builder.stream(BIDS, key_serde=string, value_serde=json_, timestamp_extractor=bid_time)
        .group_by(lambda _key, _bid: "all", key_serde=string, value_serde=json_)
        .windowed_by(TimeWindows.of_size_with_no_grace(WINDOW_MS))
        .reduce(lambda best, bid: bid if bid["price"] > best["price"] else best, "highest")
        .to_stream()
        .map(lambda window, bid: (str(window.window.start), bid))
        .to(OUTPUT, key_serde=string, value_serde=json_)
    )
    return builder.build()


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="strom-nexmark-")
    log = EmbeddedLog(path)
    for topic, partitions in ((BIDS, 1), (OUTPUT, 3)):
        if topic not in log.topics():
            log.create_topic(topic, partitions=partitions)
    bids = generate_bids(5_000)
    with log.producer(key_serde=serdes.String(), value_serde=serdes.Json()) as producer:
        producer.produce_batch(BIDS, [(str(b["auction"]), b, b["date_time"]) for b in bids])

    config = {"application.id": "nexmark-q7", "bootstrap.servers": f"embedded:{path}"}
    with KafkaStreams(build_topology(), config) as app:
        app.run_until_end()
        print("late bids dropped:", app.metrics()["dropped-records"])
    # Every update of a window is in the output; its last one is the window's highest bid.
    highest: dict[int, dict[str, int]] = {}
    for r in log.records(OUTPUT, key_serde=serdes.String(), value_serde=serdes.Json()):
        highest[int(r.key)] = r.value
    print(
        "highest bid per window:", {start: bid["price"] for start, bid in sorted(highest.items())}
    )


if __name__ == "__main__":
    main()
