"""Helpers for the runtime tests against the real broker: topics, input, and
reading a topic to its end."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.cimpl import NewTopic

from strom import StreamsBuilder, Topology, serdes
from strom.kstream import TimeWindows

TIMEOUT = 60.0

WINDOW_MS = 10_000

# Record timestamps start an hour ago (on a window boundary): the broker
# deletes records older than the topic's retention (7 days) at once, so
# timestamps near 0 would make the input vanish under the test.
BASE_TS = int(time.time() * 1000) // WINDOW_MS * WINDOW_MS - 3_600_000


# A cluster's clients: its bootstrap servers, or the whole client config (a
# secured cluster's SASL and TLS settings with them).
Connection = str | Mapping[str, Any]


def client_config(connection: Connection) -> dict[str, Any]:
    if isinstance(connection, str):
        return {"bootstrap.servers": connection}
    return dict(connection)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topics(
    bootstrap: Connection,
    topics: dict[str, int],
    replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    admin = AdminClient(client_config(bootstrap))
    futures = admin.create_topics(
        [NewTopic(t, n, replication_factor, config=config or {}) for t, n in topics.items()]
    )
    for future in futures.values():
        future.result()
    deadline = time.monotonic() + TIMEOUT
    while True:
        metadata = admin.list_topics(timeout=10).topics
        if all(t in metadata and len(metadata[t].partitions) == n for t, n in topics.items()):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"topics {sorted(topics)} did not appear")
        time.sleep(0.05)


def ordered_producer(bootstrap: Connection) -> Producer:
    """A producer that keeps each partition in the order of its produce
    calls. Idempotence is what guarantees it: without it a batch that is
    retried (e.g. while a new topic's leader is being elected, as on a
    freshly started broker) can land after the batches sent behind it, and
    input out of timestamp order makes a windowed count drop records."""
    return Producer(
        client_config(bootstrap)
        | {
            "partitioner": "murmur2_random",  # keyed records on Java's partition
            "enable.idempotence": True,
        }
    )


def produce(
    bootstrap: Connection, topic: str, records: Iterable[tuple[bytes | None, bytes | None, int]]
) -> int:
    """Writes (key, value, timestamp) records in order, keyed ones on Java's partition."""
    producer = ordered_producer(bootstrap)
    count = 0
    for key, value, timestamp in records:
        producer.produce(topic, value, key, timestamp=timestamp)
        producer.poll(0)
        count += 1
    assert producer.flush(TIMEOUT) == 0
    return count


def _settled(bootstrap: Connection, topic: str) -> bool:
    """No open transaction on ``topic``: its last stable offsets equal its ends."""
    admin = AdminClient(client_config(bootstrap))
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(topic, p): latest for p in partitions}
    ends = {tp.partition: f.result().offset for tp, f in admin.list_offsets(request).items()}
    stable = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED)
    return all(f.result().offset == ends[tp.partition] for tp, f in stable.items())


def read_all(bootstrap: Connection, topic: str, *, committed_only: bool = True) -> list[Any]:
    """Every record of ``topic`` up to its current end, as messages. With
    ``committed_only``, first waits until no transaction is open on it (a
    killed producer's is aborted after its timeout), so that the end is final."""
    if committed_only:
        deadline = time.monotonic() + TIMEOUT
        while not _settled(bootstrap, topic):
            if time.monotonic() > deadline:
                pytest.fail(f"{topic} still has an open transaction")
            time.sleep(0.2)
    consumer = Consumer(
        client_config(bootstrap)
        | {
            "group.id": unique("reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed_only else "read_uncommitted",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(metadata.partitions)
        pending = set()
        assign = []
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > low:
                pending.add(p)
                assign.append(TopicPartition(topic, p, low))
        consumer.assign(assign)
        out = []
        deadline = time.monotonic() + TIMEOUT
        while pending:
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(message.partition())
                        continue
                    raise AssertionError(error.str())
                out.append(message)
            if time.monotonic() > deadline:
                pytest.fail(f"reading {topic} did not reach its end")
        return out
    finally:
        consumer.close()


def latest_by_key(messages: list[Any], key_serde: Any, value_serde: Any) -> dict[Any, Any]:
    """The last value of each key (the table a changelog-like output describes)."""
    out: dict[Any, Any] = {}
    for message in messages:
        key = key_serde.deserialize(message.topic(), message.key())
        out[key] = value_serde.deserialize(message.topic(), message.value())
    return out


def word_count_topology(source: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
        .flat_map_values(lambda line: line.split())
        .group_by(lambda _k, word: word, key_serde=serdes.String(), value_serde=serdes.String())
        .count(materialized="counts")
        .to_stream()
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


def windowed_count_topology(
    source: str, sink: str, slow: Callable[[], None] | None = None
) -> Topology:
    """Counts per key and 10 s tumbling window; output keyed ``key@start``.
    ``slow`` runs for every record (to make a run last)."""
    builder = StreamsBuilder()
    stream = builder.stream(source, key_serde=serdes.String(), value_serde=serdes.String())
    if slow is not None:
        stream = stream.peek(lambda _k, _v: slow())
    (
        stream.group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(WINDOW_MS))
        .count(materialized="window-counts")
        .to_stream()
        .map(lambda w, count: (f"{w.key}@{w.window.start}", count))
        .to(sink, key_serde=serdes.String(), value_serde=serdes.Long())
    )
    return builder.build()


def app_config(bootstrap: str, app_id: str, state_dir: str, **extra: Any) -> dict[str, Any]:
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": state_dir,
        "commit.interval.ms": 200,
        # A member that dies leaves the group after 6 s (the broker's minimum), not 45 s.
        "consumer.session.timeout.ms": 6000,
        "consumer.heartbeat.interval.ms": 500,
        **{k.replace("__", "."): v for k, v in extra.items()},
    }


def per_key_in_order(messages: list[Any]) -> dict[tuple[int, bytes], list[tuple[bytes, int]]]:
    """Each output partition's records per key, in offset order. Input
    partitions are tasks of their own, whose records interleave in an output
    partition as their fetches happen to arrive: offsets may differ between
    two runs of one app, while every key's sequence may not."""
    by_key: dict[tuple[int, bytes], list[tuple[int, bytes, int]]] = {}
    for m in messages:
        by_key.setdefault((m.partition(), m.key()), []).append(
            (m.offset(), m.value(), m.timestamp()[1])
        )
    return {
        where: [(value, ts) for _, value, ts in sorted(records)]
        for where, records in by_key.items()
    }
