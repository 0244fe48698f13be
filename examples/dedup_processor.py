"""A Processor API app: drop duplicate events.

Events (JSON with an ``id``) are keyed by their id, so every copy of an event
lands on the same partition. The ``Deduplicate`` processor forwards the first
copy and remembers the id, with its timestamp, in a persistent key-value store
(changelogged: a restarted app still knows what it saw); a stream-time
punctuation forgets ids older than ``MEMORY_MS``, so the store stays small.

Run on the embedded log: python examples/dedup_processor.py [LOG_DIR]
"""

from __future__ import annotations

import random
import sys
import tempfile
from typing import Any

from strom import KafkaStreams, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.processor import Processor, ProcessorContext, PunctuationType, Record
from strom.state import Stores

EVENTS, UNIQUE = "events", "unique-events"
STORE = "seen-ids"
MEMORY_MS = 60_000  # a copy later than this after the first is not recognised
BASE_TIME_MS = 1_700_000_000_000


class Deduplicate(Processor[str, Any]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.seen = context.get_state_store(STORE)
        context.schedule(10_000, PunctuationType.STREAM_TIME, self.forget_old)

    def process(self, record: Record[str, Any]) -> None:
        if self.seen.get(record.key) is None:
            self.seen.put(record.key, record.timestamp)
            self.context.forward(record)

    def forget_old(self, stream_time: int) -> None:
        old = [kv.key for kv in self.seen.all() if kv.value < stream_time - MEMORY_MS]
        for event_id in old:
            self.seen.delete(event_id)


def build_topology() -> Topology:
    string, json_ = serdes.String(), serdes.Json()
    return (
        Topology()
        .add_source("events", EVENTS, key_serde=string, value_serde=json_)
        .add_processor("deduplicate", Deduplicate, "events")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store(STORE), string, serdes.Long()
            ),
            "deduplicate",
        )
        .add_sink("unique", UNIQUE, "deduplicate", key_serde=string, value_serde=json_)
    )


def generate_events(count: int, seed: int = 3) -> list[dict[str, Any]]:
    """``count`` events, a second apart; about a third are sent again a few
    seconds later (as a retrying producer would)."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for i in range(count):
        event = {"id": f"e{i}", "at": BASE_TIME_MS + i * 1_000, "amount": rng.randrange(100)}
        events.append(event)
        if rng.random() < 0.3:
            events.append({**event, "at": event["at"] + rng.randint(1, 5) * 1_000})
    return sorted(events, key=lambda e: e["at"])


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="strom-dedup-")
    log = EmbeddedLog(path)
    for topic in (EVENTS, UNIQUE):
        if topic not in log.topics():
            log.create_topic(topic, partitions=2)
    events = generate_events(500)
    with log.producer(key_serde=serdes.String(), value_serde=serdes.Json()) as producer:
        producer.produce_batch(EVENTS, [(e["id"], e, e["at"]) for e in events])

    config = {"application.id": "dedup", "bootstrap.servers": f"embedded:{path}"}
    with KafkaStreams(build_topology(), config) as app:
        app.run_until_end()
        remembered = app.store(STORE).approximate_num_entries()
    unique = [r.key for r in log.records(UNIQUE, key_serde=serdes.String())]
    print(f"events in: {len(events)}, unique out: {len(unique)}, ids remembered: {remembered}")
    print("duplicates out:", len(unique) - len(set(unique)))


if __name__ == "__main__":
    main()
