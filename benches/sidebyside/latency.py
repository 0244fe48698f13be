"""End-to-end latency at a fixed input rate (q0 and q7).

The input is produced in real time at ``rate`` records/s, each record stamped
with the wall-clock time it is due and sent then: bids from the Nexmark
generator (base time "now", inter-event delay for the rate) for q0 and q7,
kafka_throughput.py's records for its two apps. A read_committed consumer of
the output takes, per output record, its arrival time minus the event time of
the input it answers: the bid's ``dateTime`` in the value for q0; otherwise
the output record's timestamp (Kafka Streams and strom keep the input's
timestamp through stateless steps and stamp a window's result with its newest
input, so this is how soon an update follows the record that caused it; a
system that stamps otherwise, or emits only when a window closes, shows that
here). The first ``WARMUP_S`` seconds are not counted.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benches.nexmark.generator import CHUNK, GeneratorConfig, generate_chunk
from benches.sidebyside.runner import Broker, Driver, RunError, app_args
from benches.sidebyside.systems import System
from benches.sidebyside.workloads import KT_KEYS, Workload, kt_payloads
from confluent_kafka import Consumer, Producer, TopicPartition

if TYPE_CHECKING:
    from benches.sidebyside.suite import Options

WARMUP_S = 3.0
BIDS_PER_EVENTS = 46 / 50


@dataclass
class Latency:
    system: str
    workload: str
    rate: int
    samples: int
    p50_ms: float | None
    p99_ms: float | None
    reason: str = ""

    def describe(self) -> str:
        if self.p50_ms is None or self.p99_ms is None:
            return f"no samples {self.reason.splitlines()[0] if self.reason else ''}"
        return f"p50 {self.p50_ms:,.1f} ms, p99 {self.p99_ms:,.1f} ms ({self.samples:,} samples)"


def _percentile(samples: list[float], q: int) -> float | None:
    if len(samples) < 2:
        return None
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def live_rows(
    workload: Workload, start_ms: int, options: Options
) -> list[tuple[str, bytes, bytes, int]]:
    """The input of a latency run, stamped with the wall-clock time each record is due."""
    total_s = WARMUP_S + options.latency_seconds
    if workload.dataset == "nexmark":
        delay_us = round(1e6 * BIDS_PER_EVENTS / options.latency_rate)
        events = int(total_s * 1e6 / delay_us)
        if events > CHUNK:
            raise RunError(f"latency runs are limited to {CHUNK:,} Nexmark events")
        config = GeneratorConfig(base_time_ms=start_ms, inter_event_delay_us=delay_us)
        bids = generate_chunk(config, 0, events)["bid"]
        return [
            ("bid", k, v, t)
            for k, v, t in zip(bids.keys, bids.values, bids.timestamps, strict=True)
        ]
    if workload.dataset == "kt":
        payloads = kt_payloads(2)
        return [
            (
                "input",
                f"key-{i % KT_KEYS:04d}".encode(),
                payloads[i % 256],
                start_ms + i * 1000 // options.latency_rate,
            )
            for i in range(int(total_s * options.latency_rate))
        ]
    raise RunError(f"no latency run is defined for {workload.name}")


def measure(
    broker: Broker, system: System, workload: Workload, options: Options, logs: Path
) -> Latency:
    uid = uuid.uuid4().hex[:8]
    inputs = {role: f"lat-{uid}-{role}" for role in workload.roles}
    output = f"lat-out-{uid}"
    broker.create_topics(dict.fromkeys([*inputs.values(), output], options.partitions))
    app_id = f"lat-{system.name}-{workload.name}-{uid}".replace("_", "-")
    args = [
        *app_args(
            broker,
            workload,
            app_id,
            inputs,
            output,
            options.guarantee,
            options.commit_interval_ms,
            options.threads,
        ),
        "--follow",
        "1",
    ]
    driver = Driver(system.command(args), logs / f"{app_id}.log")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"lat-reader-{uid}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
        }
    )
    consumer.assign([TopicPartition(output, p, 0) for p in range(options.partitions)])
    samples: list[tuple[float, float]] = []  # (input event time ms, latency ms)
    stop = threading.Event()
    by_timestamp = workload.name != "q0"

    def read() -> None:
        # poll() returns as soon as a record is there; consume(n, timeout) waits
        # for n records or the whole timeout, which would add up to that timeout.
        while not stop.is_set():
            m = consumer.poll(0.05)
            if m is None or m.error() is not None or m.value() is None:
                continue
            now = time.time() * 1000
            born = m.timestamp()[1] if by_timestamp else json.loads(m.value())["dateTime"]
            samples.append((born, now - born))

    reader = threading.Thread(target=read, daemon=True)
    try:
        message = driver.event(timeout=180)
        if message is None or message["event"] != "ready":
            raise RunError(f"{system.name} did not start:\n{driver.tail()}")
        reader.start()
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "partitioner": "murmur2_random"}
        )
        start_ms = int(time.time() * 1000) + 500
        for role, key, value, ts in live_rows(workload, start_ms, options):
            wait = ts / 1000 - time.time()
            if wait > 0:
                time.sleep(wait)
            producer.produce(inputs[role], value, key, timestamp=ts)
            producer.poll(0)
        producer.flush(30)
        # The tail: until no output arrives for two seconds.
        count, quiet = -1, time.monotonic()
        while time.monotonic() - quiet < 2.0:
            if len(samples) != count:
                count, quiet = len(samples), time.monotonic()
            time.sleep(0.1)
    finally:
        stop.set()
        if reader.is_alive():
            reader.join()
        consumer.close()
        driver.stop()
    counted = [lat for born, lat in samples if born >= start_ms + WARMUP_S * 1000]
    return Latency(
        system.name,
        workload.name,
        options.latency_rate,
        len(counted),
        _percentile(counted, 50),
        _percentile(counted, 99),
    )
