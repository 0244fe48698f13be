"""The native record loops behind Python nodes (rust/python/src/records.rs):
``flat_map_values`` calling the user's function from Rust, and a sink with
String keys and values serializing them as the embedded producer buffers
them. Each must give what the ordinary path gives, bad records included."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, _core, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ProductionError, SerializationError, TaskError
from strom.processor.internals.task import RecordCollector

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


# --- flat_map_values -> group_by -> repartition in one native pass -------------
# The README's word count: the split, the key selector, the null-key filter and
# the String/String repartition sink run as one loop (flat_map_select_strings).
# Each case runs it and the ordinary node-by-node path (the native producer
# hidden from the nodes) over the same input and compares everything written,
# counted and reported, with small polls so failures fall mid-batch.

NODE = "stream-processor-node-metrics"


def _word_count_run(
    path: str,
    split: Callable[[str], Any],
    select: Callable[[Any, str], Any],
    lines: list[str | None],
    config: dict[str, Any],
) -> tuple[Any, ...]:
    log = EmbeddedLog(path)
    log.create_topic("in", partitions=2)
    log.create_topic("out", partitions=2)
    with log.producer(value_serde=S) as producer:
        for i, line in enumerate(lines):
            producer.produce("in", f"k{i % 5}".encode(), line, timestamp=1000 + i)
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .flat_map_values(split)
        .group_by(select, key_serde=S, value_serde=S)
        .count(materialized="c")
        .to_stream()
        .to("out", key_serde=S, value_serde=serdes.Long())
    )
    props = {"application.id": "wc", "bootstrap.servers": f"embedded:{path}"}
    props |= {"poll.max.records": 7, "metrics.recording.level": "DEBUG"} | config
    try:
        with KafkaStreams(builder.build(), props) as app:
            app.run_until_end(timeout=60)
            counts = {kv.key: kv.value for kv in app.store("c").all()}
            metrics = app.metrics()
    except Exception as exc:  # the same failure, told the same way, on both paths
        return type(exc), str(exc), type(exc.__cause__)
    processed: dict[str, float] = {}
    for m in metrics.find("process-total", NODE):
        node = m.metric_name.tags["processor-node-id"]
        processed[node] = processed.get(node, 0) + m.metric_value()
    return _read(log, "wc-c-repartition"), counts, metrics["dropped-records"], processed


def _both_paths(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    split: Callable[[str], Any],
    select: Callable[[Any, str], Any],
    lines: list[str | None],
    **config: Any,
) -> tuple[Any, ...]:
    calls: list[str] = []
    native = _core.flat_map_select_strings

    def counted(*args: Any) -> Any:
        calls.append("native")
        return native(*args)

    monkeypatch.setattr(_core, "flat_map_select_strings", counted)
    fused = _word_count_run(str(tmp_path / "fused"), split, select, lines, config)
    assert calls, "the word count did not take the native pass"
    monkeypatch.setattr(RecordCollector, "native_string_producer", lambda _self: None)
    calls.clear()
    ordinary = _word_count_run(str(tmp_path / "ordinary"), split, select, lines, config)
    assert not calls
    assert fused == ordinary
    return fused


LINES: list[str | None] = [
    "the quick brown fox",
    "",
    "Köln 東京 köln the",
    "a a a",
    "skip me please",
    "bad line here",
    "the end",
    "x" * 300 + " tail",
] * 3


def test_fused_word_count_writes_and_counts_as_the_nodes_do(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None key is dropped by the repartition's filter, not written.
    select = lambda _k, w: None if w == "skip" else w  # noqa: E731
    repartitioned, counts, dropped, processed = _both_paths(
        tmp_path, monkeypatch, lambda line: line.lower().split(), select, LINES
    )
    words = [w for line in LINES if line for w in line.lower().split() if w != "skip"]
    assert sum(map(len, repartitioned)) == len(words)
    assert counts == {w: words.count(w) for w in set(words)}
    assert dropped == 0
    assert processed["KSTREAM-KEY-SELECT-0000000002"] == len(words) + 3
    assert processed["c-repartition-sink"] == len(words)


def test_fused_generator_split_failing_mid_record_keeps_what_it_yielded(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def split(line: str) -> Iterator[str]:
        for word in line.split():
            if word == "here":
                raise ValueError("no here")
            yield word

    config = {"processing.exception.handler": "log_and_continue"}
    _, counts, dropped, _ = _both_paths(
        tmp_path, monkeypatch, split, lambda _k, w: w, LINES, **config
    )
    assert dropped == 3
    assert counts["bad"] == counts["line"] == 3  # yielded before the failure


def test_fused_selector_failure_skips_that_value_only(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def select(_key: str, word: str) -> str:
        if word == "a":
            raise KeyError(word)
        return word

    config = {"processing.exception.handler": "log_and_continue"}
    _, counts, dropped, processed = _both_paths(
        tmp_path, monkeypatch, str.split, select, LINES, **config
    )
    assert "a" not in counts and counts["the"] == 9
    assert dropped == 9
    assert processed["c-repartition-filter"] == processed["KSTREAM-KEY-SELECT-0000000002"] - 9


def test_fused_key_the_serde_cannot_write_goes_to_the_production_handler(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    select = lambda _k, w: len(w) if w == "fox" else w  # noqa: E731
    config = {"production.exception.handler": "log_and_continue"}
    _, counts, dropped, _ = _both_paths(tmp_path, monkeypatch, str.split, select, LINES, **config)
    assert "fox" not in counts and 3 not in counts
    assert dropped == 3


@pytest.mark.parametrize(
    ("split", "select", "error"),
    [
        (lambda line: line.split(), lambda _k, w: 1 / 0 if w == "bad" else w, ZeroDivisionError),
        (lambda line: 1 / 0 if "bad" in line else line.split(), lambda _k, w: w, ZeroDivisionError),
        (lambda line: line.split(), lambda _k, w: b"x" if w == "bad" else w, SerializationError),
    ],
    ids=["selector", "split", "serialize"],
)
def test_fused_failure_names_the_node_and_the_record(
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    split: Callable[[str], Any],
    select: Callable[[Any, str], Any],
    error: type[Exception],
) -> None:
    failure = _both_paths(tmp_path, monkeypatch, split, select, LINES)
    kind, message, cause = failure
    assert kind in (TaskError, ProductionError) and cause is error
    assert "in-" in message and "@" in message  # the input record named


def _is_utf8(data: bytes | None) -> bool:
    try:
        data is None or data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("side", ["key", "value"])
@pytest.mark.parametrize("odd", [b"\xc3\xa9", b"\xe6\x9d\xb1", b"\xff", b"\xc3"])
def test_read_utf8_tells_what_decoding_tells(log: EmbeddedLog, odd: bytes, side: str) -> None:
    # Spans of every length around the 16-byte word it reads short ones in,
    # the last record's ending the batch, one non-ASCII (valid or not) anywhere.
    rng = random.Random(odd + side.encode())
    log.create_topic("t")
    rows: list[tuple[bytes | None, bytes | None]] = []
    for n in range(40):
        key = bytes(rng.randrange(32, 127) for _ in range(n % 20))
        rows.append((key if n % 7 else None, b"v" * (n % 33)))
    at = rng.choice([i for i in range(len(rows)) if rows[i][0] is not None])
    key, value = rows[at]
    rows[at] = (key + odd, value) if side == "key" else (key, (value or b"") + odd)
    with log.producer() as producer:
        producer.produce_batch("t", rows)
    consumer = log.consumer("g", ["t"])
    (records,) = consumer.native.poll_batches(1000, 1.0)
    consumer.close()
    keys_ok = all(_is_utf8(k) for k, _ in rows)
    values_ok = all(_is_utf8(v) for _, v in rows)
    assert _core.read_utf8(records, True, False) == keys_ok
    assert _core.read_utf8(records, False, True) == values_ok
    assert _core.read_utf8(records, True, True) == (keys_ok and values_ok)
