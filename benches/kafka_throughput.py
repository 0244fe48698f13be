"""End-to-end throughput and latency of strom apps on a Kafka broker.

Not part of ``make bench`` (it needs a broker). Two apps, as in issue 6:

- ``filter_map``: stateless, ``filter`` then ``map_values`` (about 9 in 10 pass);
- ``windowed_count``: ``group_by_key`` and a 10 s tumbling-window count.

Throughput: ``--records`` records of ~100 bytes (1,000 keys) are pre-loaded into
an input topic of ``--partitions`` partitions, then the app processes them with
``run_until_end``; records/s = input records / wall time of that call (group
join and internal-topic creation included; reported separately as startup).
Latency: the app runs while records are produced at ``--rate`` records/s for
``--latency-seconds``; a read_committed consumer of the output takes, per
output record, now minus the record's timestamp (the input record's own
timestamp for filter_map; for the windowed count the latest record of the
window, so it measures how soon an update follows its newest input). Under
exactly_once_v2 that includes the commit interval (100 ms).

The runner is kept apart from the app so the same loader and measurements can
drive another implementation later (Kafka Streams on the JVM): ``App`` is the
only strom-specific piece.

usage: python benches/kafka_throughput.py --bootstrap HOST:PORT [--records N]
       [--partitions P] [--rate R] [--latency-seconds S] [--apps filter_map,windowed_count]
       [--guarantees at_least_once,exactly_once_v2] [--json OUT.json]
       (or --start-broker DIR to start a single-node broker with the test harness)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.kstream import TimeWindows
from strom.streams import State

KEYS = 1000
VALUE_BYTES = 100


@dataclass
class Result:
    app: str
    guarantee: str
    records: int
    partitions: int
    seconds: float
    startup_seconds: float
    records_per_s: float
    rate: int
    latency_samples: int
    p50_ms: float | None
    p99_ms: float | None


def filter_map(source: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
        .filter(lambda _k, v: not v.startswith("0"))
        .map_values(lambda v: v.upper())
        .to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    )
    return builder.build()


def windowed_count(source: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10_000))
        .count(materialized="counts")
        .to_stream()
        .map(lambda w, n: (f"{w.key}@{w.window.start}", n))
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


APPS: dict[str, Callable[[str, str], Topology]] = {
    "filter_map": filter_map,
    "windowed_count": windowed_count,
}


def create_topics(boot: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": boot})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()]).values():
        future.result()
    while not all(t in admin.list_topics(timeout=10).topics for t in topics):
        time.sleep(0.05)


def _payloads(seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return ["".join(rng.choices("0123456789abcdef", k=VALUE_BYTES)).encode() for _ in range(256)]


def load(boot: str, topic: str, records: int) -> None:
    """``records`` records of ~100 bytes, keys from a fixed set, timestamps now."""
    producer = Producer(
        {
            "bootstrap.servers": boot,
            "partitioner": "murmur2_random",
            "linger.ms": 50,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    payloads = _payloads()
    keys = [f"key-{i:04d}".encode() for i in range(KEYS)]
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payloads[i % 256], keys[i % KEYS])
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(120)


class App:
    """A strom app under test (the piece another implementation would replace)."""

    commit_interval_ms: int | None = None  # None: the default of the guarantee

    def __init__(self, boot: str, name: str, guarantee: str, source: str, sink: str) -> None:
        config: dict[str, Any] = {
            "application.id": f"bench-{name}-{uuid.uuid4().hex[:8]}",
            "bootstrap.servers": boot,
            "processing.guarantee": guarantee,
            "state.dir": tempfile.mkdtemp(prefix="strom-bench-"),
        }
        if self.commit_interval_ms is not None:
            config["commit.interval.ms"] = self.commit_interval_ms
        self.streams = KafkaStreams(APPS[name](source, sink), config)

    def run_until_end(self) -> None:
        self.streams.run_until_end(timeout=3600)

    def start(self) -> None:
        self.streams.start()

    def close(self) -> None:
        self.streams.close()


def throughput(boot: str, name: str, guarantee: str, records: int, partitions: int) -> Any:
    """Wall time of ``run_until_end`` over pre-loaded input, and how much of it
    went to starting up (until the first assignment: RUNNING)."""
    source, sink = f"bench-in-{uuid.uuid4().hex[:8]}", f"bench-out-{uuid.uuid4().hex[:8]}"
    create_topics(boot, {source: partitions, sink: partitions})
    load(boot, source, records)
    app = App(boot, name, guarantee, source, sink)
    running: list[float] = []
    app.streams.set_state_listener(
        lambda new, _old: running.append(time.perf_counter()) if new is State.RUNNING else None
    )
    started = time.perf_counter()
    try:
        app.run_until_end()
    finally:
        app.close()
    return time.perf_counter() - started, (running[0] if running else started) - started


def latency(
    boot: str, name: str, guarantee: str, partitions: int, rate: int, seconds: float
) -> list[float]:
    """Per output record: receive time minus record timestamp, in ms."""
    source, sink = f"lat-in-{uuid.uuid4().hex[:8]}", f"lat-out-{uuid.uuid4().hex[:8]}"
    create_topics(boot, {source: partitions, sink: partitions})
    app = App(boot, name, guarantee, source, sink)
    app.start()
    consumer = Consumer(
        {
            "bootstrap.servers": boot,
            "group.id": f"lat-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(sink, p, 0) for p in range(partitions)])
    samples: list[float] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            now = time.time() * 1000
            samples.extend(
                now - m.timestamp()[1] for m in consumer.consume(1000, 0.1) if m.error() is None
            )

    reader = threading.Thread(target=read)
    reader.start()
    # The measured input starts once the app owns its tasks.
    while app.streams.state is not State.RUNNING:
        time.sleep(0.05)
    producer = Producer(
        {"bootstrap.servers": boot, "linger.ms": 5, "partitioner": "murmur2_random"}
    )
    payloads = _payloads(2)
    keys = [f"key-{i:04d}".encode() for i in range(KEYS)]
    start, sent = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        due = int((time.perf_counter() - start) * rate)
        while sent < due:
            producer.produce(source, payloads[sent % 256], keys[sent % KEYS])
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    # The tail of the output: until nothing new arrives for a second.
    count, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < 1.0:
        if len(samples) != count:
            count, quiet_since = len(samples), time.monotonic()
        time.sleep(0.1)
    done.set()
    reader.join()
    consumer.close()
    app.close()
    return samples


def percentile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--start-broker", help="start a one-node broker in this directory")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=int, default=2_000, help="records/s for latency")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--apps", default="filter_map,windowed_count")
    parser.add_argument("--guarantees", default="at_least_once,exactly_once_v2")
    parser.add_argument(
        "--commit-interval-ms",
        type=int,
        help="commit.interval.ms for every run (default: 30 s at_least_once, 100 ms "
        "exactly_once_v2; the windowed count's cached updates only leave at commits)",
    )
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)
    App.commit_interval_ms = args.commit_interval_ms
    cluster = None
    boot = args.bootstrap
    if boot is None:
        if args.start_broker is None:
            parser.error("give --bootstrap HOST:PORT or --start-broker DIR")
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.kafka_harness import KafkaCluster  # noqa: PLC0415 - only when asked

        cluster = KafkaCluster(args.start_broker).start(brokers=1)
        boot = cluster.bootstrap_servers
    results = []
    try:
        for name in args.apps.split(","):
            for guarantee in args.guarantees.split(","):
                seconds, startup = throughput(boot, name, guarantee, args.records, args.partitions)
                samples = latency(
                    boot, name, guarantee, args.partitions, args.rate, args.latency_seconds
                )
                result = Result(
                    name,
                    guarantee,
                    args.records,
                    args.partitions,
                    round(seconds, 2),
                    round(startup, 2),
                    round(args.records / seconds),
                    args.rate,
                    len(samples),
                    percentile(samples, 50),
                    percentile(samples, 99),
                )
                results.append(result)
                print(json.dumps(asdict(result)), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    print("\n| app | guarantee | records | records/s | p50 ms | p99 ms (at rate) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for r in results:
        p50 = "-" if r.p50_ms is None else f"{r.p50_ms:,.0f}"
        p99 = "-" if r.p99_ms is None else f"{r.p99_ms:,.0f}"
        print(
            f"| {r.app} | {r.guarantee} | {r.records:,} | {r.records_per_s:,} "
            f"| {p50} | {p99} ({r.rate:,}/s) |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
