"""Record headers travel from input records to output records, as in Kafka:
a DSL operator's output carries the headers of the input record it came
from, a Processor forwards records with their own headers, a suppression
buffer emits records with the headers they were buffered with, and sinks
write them (on the embedded log and, in the integration tests, on Kafka)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, col, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ErrorHandlerContext, SerializationError
from strom.kstream import BufferConfig, Materialized, Suppressed, TimeWindows
from strom.kstream.internals.suppress import Buffered, BufferedSerde
from strom.processor import Processor, ProcessorContext, Record
from strom.processor.api import RecordContext
from strom.testing import TopologyTestDriver

S, L, J = serdes.String(), serdes.Long(), serdes.Json()
TRACE = [("trace", b"t-1"), ("empty", None)]


def _stateless(builder: StreamsBuilder) -> None:
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .filter(lambda _k, v: v != "drop")
        .map_values(str.upper)
        .flat_map_values(lambda v: [v, v + "!"])
        .to("out", key_serde=S, value_serde=S)
    )


def test_stateless_operators_keep_the_input_records_headers() -> None:
    builder = StreamsBuilder()
    _stateless(builder)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        source.pipe_input("k", "a", 1, headers=TRACE)
        source.pipe_input("k", "drop", 2, headers=[("x", b"1")])
        source.pipe_input("k", "b", 3)
        source.pipe_records([Record("k", "c", 4, [("r", b"2")])])
        got = [(r.value, r.headers) for r in out.read_records_to_list()]
    assert got == [
        ("A", TRACE),
        ("A!", TRACE),
        ("B", None),
        ("B!", None),
        ("C", [("r", b"2")]),
        ("C!", [("r", b"2")]),
    ]


def test_headers_cross_a_repartition_topic_and_reach_aggregation_results() -> None:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .select_key(lambda _k, v: v)
        .group_by_key(key_serde=S, value_serde=S)
        .count(Materialized(caching=False))
        .to_stream()
        .to("out", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, L)
        source.pipe_input(None, "a", 1, headers=[("n", b"1")])
        source.pipe_input(None, "a", 2, headers=[("n", b"2")])
        source.pipe_input(None, "b", 3)
        got = [(r.key, r.value, r.headers) for r in out.read_records_to_list()]
    # Each update carries the headers of the record that made it.
    assert got == [("a", 1, [("n", b"1")]), ("a", 2, [("n", b"2")]), ("b", 1, None)]


@pytest.mark.parametrize("windowed", [False, True])
def test_a_record_cache_writes_out_the_headers_of_each_keys_last_update(windowed: bool) -> None:
    """With caching (the default), what the cache writes out at commit
    carries the headers of the record that last updated the key, as Kafka's
    cache keeps each entry's record context."""
    builder = StreamsBuilder()
    grouped = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    counted = (
        grouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10))).count()
        if windowed
        else grouped.count()
    )
    stream = counted.to_stream()
    if windowed:
        stream = stream.select_key(lambda w, _count: w.key)
    stream.to("out", key_serde=S, value_serde=L)
    # A large commit interval: the driver still commits after each record.
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, L)
        source.pipe_input("a", "x", 1, headers=[("n", b"1")])
        source.pipe_input("a", "x", 2)
        source.pipe_input("b", "x", 3, headers=[("n", b"3")])
        got = [(r.key, r.value, r.headers) for r in out.read_records_to_list()]
    assert got == [("a", 1, [("n", b"1")]), ("a", 2, None), ("b", 1, [("n", b"3")])]


class _Tagging(Processor[str, str]):
    """Forwards each record twice: as it came (headers kept) and as a new
    record with headers of its own; a record whose value is "bare" goes on
    as a new record without headers."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record[str, str]) -> None:
        if record.value == "bare":
            self.context.forward(Record(record.key, record.value, record.timestamp))
            return
        self.context.forward(record.with_value(record.value + "-kept"))
        seen = str(len(record.headers or [])).encode()
        self.context.forward(Record(record.key, record.value + "-new", 9, [("seen", seen)]))


def test_a_processor_reads_input_headers_and_forwards_its_own() -> None:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .process(_Tagging)
        .map_values(str.upper)  # after the processor, its records' own headers go on
        .to("out", key_serde=S, value_serde=S)
    )
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        source.pipe_input("k", "a", 1, headers=TRACE)
        source.pipe_input("k", "bare", 2, headers=TRACE)
        got = [(r.value, r.headers) for r in out.read_records_to_list()]
    assert got == [
        ("A-KEPT", TRACE),
        ("A-NEW", [("seen", b"2")]),
        ("BARE", None),  # a new Record has no headers, whatever the input had
    ]


def test_a_topic_name_extractor_sees_the_headers() -> None:
    builder = StreamsBuilder()

    def by_header(_key: Any, _value: Any, context: RecordContext) -> str:
        return dict(context.headers).get("route", b"other").decode()

    builder.stream("in", key_serde=S, value_serde=S).to(by_header, key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "1", 1, headers=[("route", b"left")])
        source.pipe_input("k", "2", 2)
        left = driver.create_output_topic("left", S, S).read_records_to_list()
        other = driver.create_output_topic("other", S, S).read_records_to_list()
    assert [(r.value, r.headers) for r in left] == [("1", [("route", b"left")])]
    assert [(r.value, r.headers) for r in other] == [("2", None)]


def test_suppressed_results_carry_the_headers_they_were_buffered_with() -> None:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(milliseconds=10)))
        .count(Materialized(caching=False))
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream()
        .select_key(lambda windowed, _count: windowed.key)
        .to("out", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, L)
        source.pipe_input("a", "x", 1, headers=[("n", b"first")])
        source.pipe_input("a", "x", 2, headers=[("n", b"second")])
        # Closes the window: "a"'s final count goes out with the headers of
        # its last update, not those of the record that closed it.
        source.pipe_input("b", "x", 20, headers=[("n", b"closer")])
        got = [(r.key, r.value, r.headers) for r in out.read_records_to_list()]
    assert got == [("a", 2, [("n", b"second")])]


def test_driver_refuses_malformed_headers() -> None:
    builder = StreamsBuilder()
    _stateless(builder)
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", S, S)
        with pytest.raises(TypeError, match="a header is a"):
            source.pipe_input("k", "a", 1, headers=[("name", "not bytes")])  # type: ignore[list-item]


def test_error_handlers_and_dead_letters_get_the_failed_records_headers() -> None:
    seen: list[ErrorHandlerContext] = []

    def handler(context: ErrorHandlerContext, _record: Any, _exc: BaseException) -> str:
        seen.append(context)
        return "continue"

    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(lambda v: str(1 // int(v))).to(
        "out", key_serde=S, value_serde=S
    )
    config = {
        "processing.exception.handler": handler,
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    with TopologyTestDriver(builder.build(), config) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_input("k", "0", 1, headers=TRACE)
        source.pipe_input("k", "0", 2)
        letters = driver.create_output_topic("dlq", S, S).read_records_to_list()
    assert [c.headers for c in seen] == [TRACE, []]
    # Kafka's dead letter: the record's own headers, then the error's.
    assert letters[0].headers[:2] == TRACE
    assert letters[1].headers[0][0] == "__streams.errors.exception"
    errors = [letters[0].headers[2:], letters[1].headers]
    assert [[name for name, _ in h] for h in errors] == [[n for n, _ in errors[1]]] * 2
    assert all(name.startswith("__streams.errors.") for name, _ in errors[1])


def test_a_deserialization_dead_letter_keeps_the_records_headers(tmp_path: Path) -> None:
    def build(builder: StreamsBuilder) -> None:
        builder.stream("in", key_serde=S, value_serde=L).to("out", key_serde=S, value_serde=L)

    where = str(tmp_path / "log")
    EmbeddedLog(where).create_topic("dlq")
    config = {
        "deserialization.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    out = _run_on_log(
        tmp_path,
        build,
        [(b"a", (1).to_bytes(8, "big"), 1, None), (b"b", b"bad", 2, TRACE)],
        config,
    )
    assert [r.key for r in out] == [b"a"]
    [letter] = EmbeddedLog(where).read("dlq", 0, 0, 10)
    assert letter.headers[:2] == TRACE
    assert dict(letter.headers[2:])["__streams.errors.offset"] == b"1"


def _run_on_log(
    tmp_path: Path,
    build: Callable[[StreamsBuilder], None],
    records: list[Any],
    config: dict[str, Any] | None = None,
) -> list[Any]:
    where = str(tmp_path / "log")
    log = EmbeddedLog(where)
    log.create_topic("in")
    log.create_topic("out")
    with log.producer() as producer:
        for key, value, timestamp, headers in records:
            producer.produce("in", key, value, timestamp=timestamp, headers=headers)
    builder = StreamsBuilder()
    build(builder)
    config = {
        "application.id": "headers",
        "bootstrap.servers": f"embedded:{where}",
        **(config or {}),
    }
    with KafkaStreams(builder.build(), config) as app:
        app.run_until_end()
    return log.read("out", 0, 0, 100)


def test_headers_reach_the_output_topic_on_the_embedded_log(tmp_path: Path) -> None:
    out = _run_on_log(
        tmp_path,
        _stateless,
        [(b"k", b"a", 1, TRACE), (b"k", b"drop", 2, None), (b"k", b"b", 3, None)],
    )
    assert [(r.value, r.headers) for r in out] == [
        (b"A", TRACE),
        (b"A!", TRACE),
        (b"B", []),
        (b"B!", []),
    ]


def test_headers_are_kept_where_a_sub_topology_runs_fused(tmp_path: Path) -> None:
    """A sub-topology of native expression steps runs fused on a batch
    without headers; a batch with headers takes the ordinary path, so they
    are not lost."""

    def build(builder: StreamsBuilder) -> None:
        builder.stream("in", key_serde=S, value_serde=J).filter(col("n") > 1).to(
            "out", key_serde=S, value_serde=J
        )

    rows = [(b"k", b'{"n": %d}' % n, n, [("h", b"%d" % n)] if n % 2 else None) for n in range(6)]
    out = _run_on_log(tmp_path, build, rows)
    assert [(json.loads(r.value)["n"], r.headers) for r in out] == [
        (2, []),
        (3, [("h", b"3")]),
        (4, []),
        (5, [("h", b"5")]),
    ]


def test_a_suppression_buffer_entry_keeps_its_headers_through_the_changelog() -> None:
    serde = BufferedSerde(S)
    entry = Buffered(10, 7, "new", "old", "prior", "in", 12, TRACE)
    raw = serde.serialize("changelog", entry)
    assert serde.deserialize("changelog", raw) == entry
    # An entry written before headers were kept (none after the values) reads back as none.
    bare = serde.serialize("changelog", entry._replace(headers=None))
    assert serde.deserialize("changelog", bare) == entry._replace(headers=None)
    assert raw is not None and bare is not None and raw.startswith(bare)
    with pytest.raises(SerializationError, match="cut short"):
        serde.deserialize("changelog", raw[:-3])
