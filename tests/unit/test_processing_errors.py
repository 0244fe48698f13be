"""A record whose processing fails is named (topic, partition, offset, key,
node, task) at every node that calls user code, and goes to the
``processing.exception.handler`` (Kafka's KIP-1033): ``log_and_fail`` stops
the app, ``log_and_continue`` or a callable's ``"continue"`` skips exactly
that record, and the dead-letter topic gets it with Kafka's headers.

The input is one batch on the embedded log: values 1, 2, 5, 0, 2 under keys
k0..k4, and every user function divides by the value, so record 3 (offset 3)
fails in the middle of its batch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strom import KafkaStreams, KeyValue, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import (
    ConfigError,
    DeadLetterRecord,
    ErrorHandlerContext,
    Response,
    TaskError,
    dead_letter_records,
)
from strom.kstream import (
    JoinWindows,
    Materialized,
    SessionWindows,
    SlidingWindows,
    TimeWindows,
)
from strom.processor import Processor, ProcessorContext, PunctuationType, Record
from strom.testing import TopologyTestDriver

S = serdes.String()
VALUES = ["1", "2", "5", "0", "2"]
FAILING = 3  # the index (and offset) of the record "0"
OUTPUTS = ("out", "out2", "out3")
SERDES = {"default.key.serde": S, "default.value.serde": S}


def tenth(value: str) -> str:
    """The user function of every case: fails on "0" (ZeroDivisionError)."""
    return str(10 // int(value))


class _Dividing(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value(tenth(record.value)))


def _table(b: StreamsBuilder, topic: str) -> Any:
    # Uncached: changes a record cache writes out carry no input offset.
    return b.table(
        topic, key_serde=S, value_serde=S, materialized=Materialized(topic, caching=False)
    )


def _fk_join(b: StreamsBuilder) -> None:
    right = _table(b, "right")
    left = _table(b, "in")
    left.join(right, lambda v, r: v + r, foreign_key=tenth).to_stream().to("out")


def _table_aggregate(b: StreamsBuilder) -> None:
    (
        _table(b, "in")
        .group_by(lambda k, v: (k, v))
        .aggregate(lambda: "", lambda k, v, agg: agg + tenth(v), lambda k, v, agg: agg)
        .to_stream()
        .to("out")
    )


def _stream(b: StreamsBuilder) -> Any:
    return b.stream("in", key_serde=S, value_serde=S)


def _split(b: StreamsBuilder) -> None:
    branches = (
        _stream(b)
        .split("s-")
        .branch(lambda k, v: v == "5", "five")
        .branch(lambda k, v: int(tenth(v)) > 4, "big")
        .default_branch("rest")
    )
    for topic, branch in zip(OUTPUTS, branches.values(), strict=True):
        branch.to(topic)


def _stream_aggregate(b: StreamsBuilder) -> None:
    grouped = _stream(b).group_by_key()
    grouped.aggregate(lambda: "", lambda k, v, agg: agg + tenth(v), "agg").to_stream().to("out")


def _aggregate_old_values(b: StreamsBuilder) -> None:
    # Uncached, the aggregate's changes carry old values (the initializer's
    # for a new key), which the counts downstream retract.
    grouped = _stream(b).group_by_key()
    table = grouped.aggregate(
        lambda: "", lambda k, v, agg: agg + tenth(v), Materialized("agg", caching=False)
    )
    counts = table.group_by(lambda k, v: (v, v)).count(Materialized("counts", caching=False))
    counts.to_stream().to("out", value_serde=serdes.Long())


def _initializer() -> Callable[[], str]:
    calls = iter(range(100))  # one new key per record: the 4th call is record 3's

    def initializer() -> str:
        return tenth(str(FAILING - next(calls)))

    return initializer


def _windowed(windows: Any) -> Callable[[StreamsBuilder], None]:
    def build(b: StreamsBuilder) -> None:
        windowed = _stream(b).group_by_key().windowed_by(windows)
        table = windowed.aggregate(lambda: "", lambda k, v, agg: agg + tenth(v))
        table.to_stream().map(lambda k, v: (k.key, v)).to("out")

    return build


def _session(b: StreamsBuilder) -> None:
    windowed = (
        _stream(b).group_by_key().windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10))
    )
    table = windowed.aggregate(lambda: "", lambda k, v, agg: agg + tenth(v), lambda k, a, b: a + b)
    table.to_stream().map(lambda k, v: (k.key, v)).to("out")


def _reduce(b: StreamsBuilder) -> None:
    # One key, so that the reducer runs from the second record on.
    grouped = _stream(b).group_by(lambda k, v: "same")
    grouped.reduce(lambda agg, v: agg + tenth(v)).to_stream().to("out")


def _partitioner(key: Any, value: Any, partitions: int) -> int:
    return int(tenth(value)) % partitions


# name -> the topology, the user function dividing by the value
CASES: dict[str, Callable[[StreamsBuilder], None]] = {
    "map_values": lambda b: _stream(b).map_values(tenth).to("out"),
    "map": lambda b: _stream(b).map(lambda k, v: (k, tenth(v))).to("out"),
    "select_key": lambda b: _stream(b).select_key(lambda k, v: k + tenth(v)).to("out"),
    "flat_map": lambda b: _stream(b).flat_map(lambda k, v: [(k, v), (k, tenth(v))]).to("out"),
    "flat_map_values": lambda b: _stream(b).flat_map_values(lambda v: [v, tenth(v)]).to("out"),
    "filter": lambda b: _stream(b).filter(lambda k, v: int(tenth(v)) > 2).to("out"),
    "filter_not": lambda b: _stream(b).filter_not(lambda k, v: int(tenth(v)) > 2).to("out"),
    "peek": lambda b: _stream(b).peek(lambda k, v: tenth(v)).to("out"),
    "foreach": lambda b: _stream(b).foreach(lambda k, v: tenth(v)),
    "split": _split,
    "process": lambda b: _stream(b).process(_Dividing).to("out"),
    "to_topic_extractor": lambda b: _stream(b).to(lambda k, v, ctx: OUTPUTS[int(tenth(v)) % 3]),
    "to_partitioner": lambda b: _stream(b).to("out", partitioner=_partitioner),
    "stream_table_join": lambda b: (
        _stream(b).join(_table(b, "right"), lambda v, r: tenth(v) + r).to("out")
    ),
    "stream_global_table_join": lambda b: (
        _stream(b)
        .join(
            b.global_table("right", key_serde=S, value_serde=S),
            lambda k, v: k,
            lambda v, r: tenth(v) + r,
        )
        .to("out")
    ),
    "global_table_key_selector": lambda b: (
        _stream(b)
        .left_join(
            b.global_table("right", key_serde=S, value_serde=S),
            lambda k, v: k + tenth(v),
            lambda v, r: v,
        )
        .to("out")
    ),
    "stream_stream_join": lambda b: (
        _stream(b)
        .join(
            b.stream("other", key_serde=S, value_serde=S),
            lambda v, o: tenth(v) + o,
            JoinWindows.of_time_difference_with_no_grace(10_000),
        )
        .to("out")
    ),
    "aggregate": _stream_aggregate,
    "aggregate_old_values": _aggregate_old_values,
    "aggregate_initializer": lambda b: (
        _stream(b)
        .group_by_key()
        .aggregate(_initializer(), lambda k, v, agg: agg + v, Materialized("agg", caching=False))
        .to_stream()
        .to("out")
    ),
    "time_window_aggregate": _windowed(TimeWindows.of_size_with_no_grace(60_000)),
    "sliding_window_aggregate": _windowed(SlidingWindows.of_time_difference_with_no_grace(5)),
    "session_window_aggregate": _session,
    "table_filter": lambda b: (
        _table(b, "in").filter(lambda k, v: int(tenth(v)) > 2).to_stream().to("out")
    ),
    "table_map_values": lambda b: _table(b, "in").map_values(tenth).to_stream().to("out"),
    "table_group_by": lambda b: (
        _table(b, "in")
        .group_by(lambda k, v: (k, tenth(v)))
        .count()
        .to_stream()
        .to("out", value_serde=serdes.Long())
    ),
    "table_table_join": lambda b: (
        _table(b, "in").join(_table(b, "right"), lambda v, r: tenth(v) + r).to_stream().to("out")
    ),
    "foreign_key_extractor": _fk_join,
}
# Where the failing record is not an input record but the repartition
# topic's between group_by and the aggregation (same order): its key there.
REPARTITIONED = {"table_aggregate": (_table_aggregate, "k3"), "reduce": (_reduce, "same")}
# The initializer fails on its 4th call, whichever record that is: the run
# without record 3 is no reference for it.
COUNTED_CALLS = {"aggregate_initializer"}


def _prepare(log: EmbeddedLog, skip: int | None = None) -> None:
    for topic in ("in", "right", "other", "dlq", *OUTPUTS):
        log.create_topic(topic, partitions=2 if topic == "out" else 1)
    with log.producer() as producer:
        # The tables' and the other stream's records come first (earlier
        # timestamps): the input's records then run as one batch.
        for topic in ("right", "other"):
            producer.produce_batch(topic, [(f"k{i}".encode(), b"R", i) for i in range(5)])
            # Keys the foreign-key extractor gives
            producer.produce_batch(topic, [(t.encode(), b"R", 5) for t in ("10", "5", "2")])
        producer.produce_batch(
            "in",
            [(f"k{i}".encode(), v.encode(), 1000 + i) for i, v in enumerate(VALUES) if i != skip],
        )


def _topology(build: Callable[[StreamsBuilder], None]) -> Topology:
    builder = StreamsBuilder()
    build(builder)
    return builder.build()


def _run(
    tmp_path: Path,
    name: str,
    build: Callable[[StreamsBuilder], None],
    skip: int | None,
    **config: Any,
) -> tuple[EmbeddedLog, dict[str, Any]]:
    path = tmp_path / name
    log = EmbeddedLog(str(path / "log"))
    _prepare(log, skip)
    props = {
        "application.id": "errors",
        "bootstrap.servers": f"embedded:{path / 'log'}",
        "state.dir": str(path / "state"),
    } | SERDES
    with KafkaStreams(_topology(build), props | config) as app:
        app.run_until_end(timeout=60)
        metrics = app.metrics()
    return log, metrics


def _outputs(log: EmbeddedLog) -> dict[str, list[tuple[Any, ...]]]:
    return {
        f"{topic}-{p}": [(r.key, r.value, r.timestamp) for r in log.read(topic, p, 0, 1000)]
        for topic in OUTPUTS
        for p in range(log.partitions(topic))
    }


def _case(case: str) -> Callable[[StreamsBuilder], None]:
    return CASES[case] if case in CASES else REPARTITIONED[case][0]


@pytest.mark.parametrize("case", list(CASES) + list(REPARTITIONED))
def test_a_failing_record_is_named_and_fails_the_app(tmp_path: Path, case: str) -> None:
    with pytest.raises(TaskError) as info:
        _run(tmp_path, "fail", _case(case), None)
    message = str(info.value)
    topic, key = (
        (r"errors-\S+-repartition", REPARTITIONED[case][1])
        if case in REPARTITIONED
        else ("in", "k3")
    )
    assert info.match(rf"task \d+_0 node '[^']+' failed on record {topic}-0@3 \(key='{key}'\)")
    assert "ZeroDivisionError" in message
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.parametrize("case", [c for c in [*CASES, *REPARTITIONED] if c not in COUNTED_CALLS])
def test_log_and_continue_skips_exactly_the_failing_record(tmp_path: Path, case: str) -> None:
    build = _case(case)
    handled, metrics = _run(
        tmp_path, "handled", build, None, **{"processing.exception.handler": "log_and_continue"}
    )
    # The same app on the input without record 3: what continue must equal.
    without, expected = _run(tmp_path, "without", build, FAILING)
    outputs = _outputs(handled)
    assert outputs == _outputs(without)
    assert any(outputs.values()) or case == "foreach"  # the other records went through
    assert metrics["dropped-records"] == expected["dropped-records"] + 1


@pytest.mark.parametrize("handler", ["log_and_fail", "log_and_continue"])
def test_a_function_raising_stop_iteration_fails_its_record(tmp_path: Path, handler: str) -> None:
    # map() would take it for the end of the batch and drop the rest.
    def predicate(key: str, value: str) -> bool:
        if value == "0":
            raise StopIteration
        return True

    def build(b: StreamsBuilder) -> None:
        _stream(b).filter(predicate).to("out")

    config = {"processing.exception.handler": handler}
    if handler == "log_and_fail":
        with pytest.raises(TaskError, match=r"in-0@3 \(key='k3'\): RuntimeError: .* StopIteration"):
            _run(tmp_path, "stop", build, None, **config)
        return
    log, metrics = _run(tmp_path, "stop", build, None, **config)
    keys = [r.key for p in range(2) for r in log.read("out", p, 0, 10)]
    assert sorted(keys, key=repr) == [b"k0", b"k1", b"k2", b"k4"]
    assert metrics["dropped-records"] == 1


def test_the_dead_letter_queue_gets_the_failing_input_record(tmp_path: Path) -> None:
    config = {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    log, _ = _run(tmp_path, "dlq", CASES["map_values"], None, **config)
    assert [r.value for r in log.read("out", 0, 0, 10) + log.read("out", 1, 0, 10)] != []
    [letter] = log.read("dlq", 0, 0, 10)
    assert (letter.key, letter.value, letter.timestamp) == (b"k3", b"0", 1003)
    headers = dict(letter.headers)
    assert headers["__streams.errors.topic"] == b"in"
    assert headers["__streams.errors.partition"] == b"0"
    assert headers["__streams.errors.offset"] == b"3"
    assert headers["__streams.errors.message"] == b"integer division or modulo by zero"
    assert (headers["__streams.errors.exception"] or b"").startswith(b"builtins.ZeroDivisionError")
    assert b"in tenth" in (headers["__streams.errors.stacktrace"] or b"")


def test_a_handler_response_sends_its_own_dead_letters(tmp_path: Path) -> None:
    # Kafka's ProcessingExceptionHandler.Response (KIP-1034): the handler's
    # records go out, to topics of its choosing, and no default one is added.
    def handler(context: ErrorHandlerContext, record: Record[Any, Any], exc: Exception) -> Any:
        built = dead_letter_records("dlq", b"mine", context.source_raw_value, context, exc)
        extra = DeadLetterRecord("other", b"note", str(exc).encode(), timestamp=7)
        return Response.resume([*built, extra])

    config = {
        "processing.exception.handler": handler,
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    log, metrics = _run(tmp_path, "own-letters", CASES["map_values"], None, **config)
    assert metrics["dropped-records"] == 1
    [letter] = log.read("dlq", 0, 0, 10)
    assert (letter.key, letter.value, letter.timestamp) == (b"mine", b"0", 1003)
    assert dict(letter.headers)["__streams.errors.offset"] == b"3"
    noted = [r for r in log.read("other", 0, 0, 100) if r.key == b"note"]
    assert [(r.value, r.timestamp) for r in noted] == [(b"integer division or modulo by zero", 7)]


def test_a_handler_response_that_fails_still_sends_its_dead_letters(tmp_path: Path) -> None:
    def handler(context: ErrorHandlerContext, record: Record[Any, Any], exc: Exception) -> Any:
        return Response.fail([DeadLetterRecord("dlq", context.source_raw_key, b"failed")])

    with pytest.raises(TaskError, match=r"in-0@3"):
        _run(
            tmp_path,
            "fail-letters",
            CASES["map_values"],
            None,
            **{"processing.exception.handler": handler},
        )
    log = EmbeddedLog(str(tmp_path / "fail-letters" / "log"))
    assert [(r.key, r.value) for r in log.read("dlq", 0, 0, 10)] == [(b"k3", b"failed")]


def test_log_and_fail_dead_letters_the_record_and_commits_nothing(tmp_path: Path) -> None:
    config = {"errors.dead.letter.queue.topic.name": "dlq"}
    with pytest.raises(TaskError, match=r"in-0@3"):
        _run(tmp_path, "dlq", CASES["map"], None, **config)
    log = EmbeddedLog(str(tmp_path / "dlq" / "log"))
    assert [(r.key, r.value) for r in log.read("dlq", 0, 0, 10)] == [(b"k3", b"0")]
    assert log.committed_offsets("errors") == {}


def test_a_callable_handler_gets_the_context_record_and_exception(tmp_path: Path) -> None:
    seen: list[tuple[ErrorHandlerContext, Record[Any, Any], Exception]] = []

    def handler(context: ErrorHandlerContext, record: Record[Any, Any], exc: Exception) -> str:
        seen.append((context, record, exc))
        return "continue"

    config = {"processing.exception.handler": handler}
    _, metrics = _run(tmp_path, "callable", CASES["filter"], None, **config)
    [(context, record, exc)] = seen
    assert (context.topic, context.partition, context.offset, context.timestamp) == (
        "in",
        0,
        3,
        1003,
    )
    assert context.processor_node_id is not None
    assert context.processor_node_id.startswith("KSTREAM-FILTER-")
    assert context.task_id == "0_0"
    assert (context.source_raw_key, context.source_raw_value) == (b"k3", b"0")
    assert (record.key, record.value, record.timestamp) == ("k3", "0", 1003)
    assert isinstance(exc, ZeroDivisionError)
    assert metrics["dropped-records"] == 1


def test_a_callable_handler_saying_fail_stops_the_app(tmp_path: Path) -> None:
    calls: list[int] = []

    def handler(context: ErrorHandlerContext, record: Any, exc: Exception) -> str:
        calls.append(context.offset)
        return "fail"

    with pytest.raises(TaskError, match=r"in-0@3 \(key='k3'\)"):
        _run(tmp_path, "fail", CASES["peek"], None, **{"processing.exception.handler": handler})
    assert calls == [3]


@pytest.mark.parametrize(
    ("answer", "error"),
    [("maybe", "got 'maybe'"), (None, "got None")],
)
def test_a_handler_with_a_bad_answer_fails_naming_the_record(
    tmp_path: Path, answer: Any, error: str
) -> None:
    config = {"processing.exception.handler": lambda context, record, exc: answer}
    with pytest.raises(
        TaskError,
        match=rf"handler must return 'continue', 'fail' or a Response, {error} for record in-0@3",
    ):
        _run(tmp_path, "bad", CASES["map_values"], None, **config)


def test_a_handler_that_raises_fails_the_app(tmp_path: Path) -> None:
    def handler(context: Any, record: Any, exc: Exception) -> str:
        raise RuntimeError("handler bug")

    config = {"processing.exception.handler": handler}
    with pytest.raises(TaskError, match=r"processing.exception.handler failed on .*in-0@3") as info:
        _run(tmp_path, "raises", CASES["map_values"], None, **config)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_an_unknown_handler_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"processing.exception.handler must be .* got 'skip'"):
        TopologyTestDriver(_topology(CASES["map_values"]), {"processing.exception.handler": "skip"})


def test_a_record_a_cache_wrote_out_is_named_by_topic_and_key(tmp_path: Path) -> None:
    def build(b: StreamsBuilder) -> None:
        table = b.table("in", key_serde=S, value_serde=S, materialized="in-store")  # cached
        table.filter(lambda k, v: int(tenth(v)) > 2).to_stream().to("out")

    with pytest.raises(TaskError, match=r"failed on a record of in with key 'k3' \(offset unknown"):
        _run(tmp_path, "cached", build, None)


# --- the test driver: one record at a time ------------------------------------
def test_driver_log_and_continue_skips_the_record_and_counts_it() -> None:
    config = {"processing.exception.handler": "log_and_continue"}
    with TopologyTestDriver(_topology(CASES["aggregate"]), SERDES | config) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_key_value_list([KeyValue("k", v) for v in VALUES])
        out = driver.create_output_topic("out", S, S)
        assert out.read_values_to_list() == ["10", "105", "1052", "10525"]
        assert driver.metrics()["dropped-records"] == 1


def test_driver_dead_letters_the_failing_record() -> None:
    config = SERDES | {
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": "dlq",
    }
    with TopologyTestDriver(_topology(CASES["map_values"]), config) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_key_value_list([(f"k{i}", v) for i, v in enumerate(VALUES)])
        out = driver.create_output_topic("out", S, S).read_key_values_to_list()
        assert out == [("k0", "10"), ("k1", "5"), ("k2", "2"), ("k4", "5")]
        # The driver's output records carry no headers: the key and value here.
        assert driver.create_output_topic("dlq", S, S).read_key_values_to_list() == [("k3", "0")]


def test_driver_default_names_the_record() -> None:
    with TopologyTestDriver(_topology(CASES["process"]), SERDES) as driver:
        source = driver.create_input_topic("in", S, S)
        source.pipe_key_value_list([("a", "1"), ("b", "2")])
        with pytest.raises(
            TaskError, match=r"KSTREAM-PROCESSOR-\d+' failed on record in-0@2 \(key='c'\)"
        ):
            source.pipe_input("c", "0")


class _Punctuating(Processor[str, str]):
    """Forwards the records it has seen at each punctuation; the second
    punctuation fails."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.fired = 0
        context.schedule(1000, PunctuationType.WALL_CLOCK_TIME, self.punctuate)

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record)

    def punctuate(self, timestamp: int) -> None:
        self.fired += 1
        if self.fired == 2:
            raise ValueError("punctuation bug")
        self.context.forward(Record("tick", str(self.fired), timestamp))


def _punctuating() -> Topology:
    builder = StreamsBuilder()
    _stream(builder).process(_Punctuating).to("out")
    return builder.build()


def test_a_failing_punctuation_goes_to_the_handler_without_a_record() -> None:
    seen: list[tuple[ErrorHandlerContext, Any]] = []

    def handler(context: ErrorHandlerContext, record: Any, exc: Exception) -> str:
        seen.append((context, record))
        return "continue"

    with TopologyTestDriver(
        _punctuating(), SERDES | {"processing.exception.handler": handler}
    ) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", timestamp=0)
        for _ in range(3):
            driver.advance_wall_clock_time(1000)
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [("k", "v"), ("tick", "1"), ("tick", "3")]
        assert driver.metrics()["dropped-records"] == 1
    [(context, record)] = seen
    assert record is None
    assert (context.topic, context.partition, context.offset) == (None, -1, -1)
    assert context.timestamp == 2000
    assert context.processor_node_id is not None
    assert context.processor_node_id.startswith("KSTREAM-PROCESSOR-")


def test_a_failing_punctuation_fails_by_default() -> None:
    with TopologyTestDriver(_punctuating(), SERDES) as driver:
        driver.advance_wall_clock_time(1000)
        with pytest.raises(TaskError, match=r"failed on a punctuation at 2000: ValueError"):
            driver.advance_wall_clock_time(1000)
