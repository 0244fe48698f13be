"""The native record loops behind Python nodes (rust/python/src/records.rs):
``flat_map_values`` calling the user's function from Rust, and a sink with
String keys and values serializing them as the embedded producer buffers
them. Each must give what the ordinary path gives, bad records included."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ProductionError, TaskError

S = serdes.String()


def _run(
    log: EmbeddedLog,
    log_path: str,
    build: Callable[[StreamsBuilder], None],
    records: list[tuple[bytes | None, bytes | None]],
    **config: Any,
) -> dict[str, Any]:
    for topic in ("in", "out", "expected"):
        log.create_topic(topic, partitions=3)
    with log.producer() as producer:
        producer.produce_batch("in", [(k, v, 1000 + i) for i, (k, v) in enumerate(records)])
    builder = StreamsBuilder()
    build(builder)
    props = {"application.id": "loops", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(builder.build(), props | config) as app:
        app.run_until_end(timeout=60)
        metrics: dict[str, Any] = app.metrics()
    return metrics


def _read(log: EmbeddedLog, topic: str) -> list[list[tuple[Any, ...]]]:
    return [
        [(r.key, r.value, r.timestamp) for r in log.read(topic, p, 0, 1000)]
        for p in range(log.partitions(topic))
    ]


def test_string_sink_writes_what_the_string_serde_and_murmur2_give(
    log: EmbeddedLog, log_path: str
) -> None:
    words = ["a", "köln", "東京", "", "a b", None, "zz", "köln"]
    records = [(f"k{i}".encode(), None if w is None else w.encode()) for i, w in enumerate(words)]

    def build(b: StreamsBuilder) -> None:
        stream = b.stream("in", key_serde=S, value_serde=S)
        stream.select_key(lambda k, v: v).to("out", key_serde=S, value_serde=S)

    _run(log, log_path, build, records)
    # The typed producer serializes with the serde, then partitions by the bytes.
    with log.producer(key_serde=S, value_serde=S) as producer:
        for i, word in enumerate(words):
            if word is not None:
                producer.produce("expected", word, word, timestamp=1000 + i)
    out, expected = _read(log, "out"), _read(log, "expected")
    # A null key goes to any partition (round robin): compare it apart. The
    # input's partitions interleave in the output's: compare in time order.
    assert [r for p in out for r in p if r[0] is None] == [(None, None, 1005)]
    assert [sorted((r for r in p if r[0] is not None), key=lambda r: r[2]) for p in out] == expected
    assert sum(map(len, expected)) == len(words) - 1


@pytest.mark.parametrize("bad", [42, "\ud800"], ids=["int", "lone-surrogate"])
def test_string_sink_hands_a_value_it_cannot_serialize_to_the_handler(
    log: EmbeddedLog, log_path: str, bad: Any
) -> None:
    def build(b: StreamsBuilder) -> None:
        stream = b.stream("in", key_serde=S, value_serde=S)
        stream.map_values(lambda v: bad if v == "x" else v).to("out", key_serde=S, value_serde=S)

    records = [(b"k", b"a"), (b"k", b"x"), (b"k", b"c")]
    with pytest.raises(ProductionError, match=r"value of a record for topic out \(from in-\d@1\)"):
        _run(log, log_path, build, records)


def test_string_sink_skipping_a_bad_value_writes_the_others(
    log: EmbeddedLog, log_path: str
) -> None:
    def build(b: StreamsBuilder) -> None:
        stream = b.stream("in", key_serde=S, value_serde=S)
        stream.map_values(lambda v: 7 if v == "x" else v).to("out", key_serde=S, value_serde=S)

    records = [(b"k", b"a"), (b"k", b"x"), (b"k", b"c")]
    metrics = _run(
        log, log_path, build, records, **{"production.exception.handler": "log_and_continue"}
    )
    assert [r[:2] for p in _read(log, "out") for r in p] == [(b"k", b"a"), (b"k", b"c")]
    assert metrics["dropped-records"] == 1


def _halves(value: str) -> Iterator[str]:
    """Yields the value, then fails on "bad" (after yielding it once)."""
    yield value
    if value == "bad":
        raise ValueError("no second half")
    yield value.upper()


def _flat(mapper: Callable[[str], Any]) -> Callable[[StreamsBuilder], None]:
    def build(b: StreamsBuilder) -> None:
        stream = b.stream("in", key_serde=S, value_serde=S)
        stream.flat_map_values(mapper).to("out", key_serde=S, value_serde=S)

    return build


def test_flat_map_values_goes_on_after_a_failing_record_keeping_what_it_yielded(
    log: EmbeddedLog, log_path: str
) -> None:
    records = [(b"k0", b"a"), (b"k1", b"bad"), (b"k2", b"c")]
    config = {"processing.exception.handler": "log_and_continue"}
    metrics = _run(log, log_path, _flat(_halves), records, **config)
    out = sorted(r for p in _read(log, "out") for r in p)
    assert out == [
        (b"k0", b"A", 1000),
        (b"k0", b"a", 1000),
        (b"k1", b"bad", 1001),  # yielded before the failure: Kafka forwarded it
        (b"k2", b"C", 1002),
        (b"k2", b"c", 1002),
    ]
    assert metrics["dropped-records"] == 1


def test_flat_map_values_failure_names_the_record(log: EmbeddedLog, log_path: str) -> None:
    records = [(b"k0", b"a"), (b"k1", b"bad"), (b"k2", b"c")]
    with pytest.raises(TaskError, match=r"failed on record in-\d@\d \(key='k1'\)") as info:
        _run(log, log_path, _flat(_halves), records)
    assert isinstance(info.value.__cause__, ValueError)


def test_flat_map_values_returning_no_iterable_is_a_clear_error(
    log: EmbeddedLog, log_path: str
) -> None:
    records = [(b"k0", b"a"), (b"k1", b"none"), (b"k2", b"c")]
    build = _flat(lambda v: None if v == "none" else [v])
    with pytest.raises(TaskError, match=r"\(key='k1'\).*'NoneType' object is not iterable"):
        _run(log, log_path, build, records)


def test_a_negative_timestamp_is_dropped_where_timestamps_are_read_natively(
    log: EmbeddedLog, log_path: str
) -> None:
    # The count reads its keys as bytes: the batch's timestamps are compared
    # where the batch holds them.
    log.create_topic("words")
    log.create_topic("out")
    with log.producer() as producer:
        for i, word in enumerate(["a", "b", "a", "c", "a"]):
            producer.produce("words", word.encode(), b"x", timestamp=-1 if i == 3 else 10 + i)
    builder = StreamsBuilder()
    grouped = builder.stream("words", key_serde=S, value_serde=S).group_by_key()
    grouped.count(materialized="c").to_stream().to("out", key_serde=S, value_serde=serdes.Long())
    props = {"application.id": "negative", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(builder.build(), props) as app:
        app.run_until_end(timeout=60)
        counts = {kv.key: kv.value for kv in app.store("c").all()}
        metrics = app.metrics()
    assert counts == {"a": 3, "b": 1}
    assert metrics["dropped-records"] == 1


@pytest.mark.parametrize("topics", [["words"], ["words", "more"]])
def test_a_count_reading_keys_where_the_batch_holds_them_counts_as_kafka(
    log: EmbeddedLog, log_path: str, topics: list[str]
) -> None:
    # The count reads its keys and timestamps natively from the batch read;
    # a batch with a null key or value goes the ordinary way (those skipped).
    # With two topics, batches interleave by timestamp (and are split).
    for topic in [*topics, "out"]:
        log.create_topic(topic, partitions=2)
    rows = [
        (None if i in (17, 1500) else f"w{i * i % 11}", None if i == 900 else "x", 100 + i % 50)
        for i in range(2_000)
    ]
    with log.producer(key_serde=S, value_serde=S) as producer:
        for i, (key, value, timestamp) in enumerate(rows):
            producer.produce(topics[i % len(topics)], key, value, timestamp=timestamp)
    builder = StreamsBuilder()
    grouped = builder.stream(topics, key_serde=S, value_serde=S).group_by_key()
    grouped.count(materialized="c").to_stream().to("out", key_serde=S, value_serde=serdes.Long())
    props = {"application.id": "native-count", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(builder.build(), props | {"poll.max.records": 100}) as app:
        app.run_until_end(timeout=60)
        counts = {kv.key: kv.value for kv in app.store("c").all()}
        metrics = app.metrics()
    expected: dict[str, int] = {}
    latest: dict[str, int] = {}
    for key, value, timestamp in rows:
        if key is not None and value is not None:
            expected[key] = expected.get(key, 0) + 1
            latest[key] = max(latest.get(key, -1), timestamp)
    assert counts == expected
    assert metrics["dropped-records"] == sum(k is None or v is None for k, v, _ in rows)
    final = {}
    for partition in _read(log, "out"):
        for key, value, timestamp in partition:
            final[key.decode()] = (serdes.Long().deserialize("out", value), timestamp)
    assert final == {key: (count, latest[key]) for key, count in expected.items()}
