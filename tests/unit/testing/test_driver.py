"""The TopologyTestDriver runs the real tasks and nodes record by record."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from strom import KeyValue, StreamsBuilder, Topology, serdes
from strom.cli.demo import generate_lines, word_count_topology
from strom.errors import StoreError, TaskError, TopologyError
from strom.kstream import TimeWindows
from strom.processor import Processor, ProcessorContext, PunctuationType, Record
from strom.state.stores import Stores
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


def test_word_count_emits_every_update() -> None:
    with TopologyTestDriver(word_count_topology()) as driver:
        lines = driver.create_input_topic("text-input", S, S)
        counts = driver.create_output_topic("word-counts", S, L)
        lines.pipe_input(None, "a b a", timestamp=5)
        # Committed after the record: every update, through the repartition topic.
        assert counts.read_key_values_to_list() == [
            KeyValue("a", 1),
            KeyValue("b", 1),
            KeyValue("a", 2),
        ]
        assert counts.is_empty()
        lines.pipe_value_list(["b c"])
        # A result carries the latest timestamp of its key's records (Kafka's
        # timestamped aggregation stores): "b" was first counted at 5.
        assert counts.read_records_to_list() == [Record("b", 2, 5), Record("c", 1, 0)]
        assert driver.get_key_value_store("counts").get("a") == 2


def test_word_count_map_equals_counter() -> None:
    text = generate_lines(300, seed=4)
    with TopologyTestDriver(word_count_topology()) as driver:
        driver.create_input_topic("text-input", S, S).pipe_value_list(text)
        result = driver.create_output_topic("word-counts", S, L).read_key_values_to_map()
    assert result == dict(Counter(w for line in text for w in line.split()))


class WordCountProcessor(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("Counts")
        context.schedule(1000, PunctuationType.STREAM_TIME, self.punctuate)

    def punctuate(self, timestamp: int) -> None:
        for entry in self.store.all():
            self.context.forward(Record(entry.key, str(entry.value), timestamp))
            self.store.delete(entry.key)

    def process(self, record: Record[str, str]) -> None:
        for word in record.value.split():
            self.store.put(word, (self.store.get(word) or 0) + 1)


def processor_word_count() -> Topology:
    return (
        Topology()
        .add_source("Source", "in", key_serde=S, value_serde=S)
        .add_processor("Process", WordCountProcessor, "Source")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("Counts"), S, serdes.Integer()
            ),
            "Process",
        )
        .add_sink("Sink", "out", "Process", key_serde=S, value_serde=S)
    )


def test_stream_time_punctuation_fires_per_input_record() -> None:
    """Kafka's schedule semantics: first record fires (aligned to 0), then at
    interval multiples; missed ones are skipped."""
    with TopologyTestDriver(processor_word_count()) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        src.pipe_input(None, "a", 0)
        assert out.read_key_values_to_list() == [KeyValue("a", "1")]
        src.pipe_input(None, "a b", 999)
        assert out.is_empty()
        src.pipe_input(None, "b", 1000)
        assert out.read_records_to_list() == [Record("a", "1", 1000), Record("b", "2", 1000)]
        src.pipe_input(None, "c", 3500)  # 2000 and 3000 were missed: fires once
        src.pipe_input(None, "d", 3999)
        assert out.read_records_to_list() == [Record("c", "1", 3500)]
        src.pipe_input(None, "e", 2000)  # late: stream time stays 3999
        assert out.is_empty()
        src.pipe_input(None, "f", 4000)
        assert out.read_key_values_to_map() == {"d": "1", "e": "1", "f": "1"}


def test_wall_clock_punctuation_only_when_advanced() -> None:
    ticks: list[int] = []

    class Ticker(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            context.schedule(100, PunctuationType.WALL_CLOCK_TIME, ticks.append)

        def process(self, record: Record[str, str]) -> None:
            """Records are not the point here."""

    topology = (
        Topology().add_source("S", "in", key_serde=S, value_serde=S).add_processor("T", Ticker, "S")
    )
    with TopologyTestDriver(topology, initial_wall_clock_ms=1_000) as driver:
        driver.create_input_topic("in", S, S).pipe_input("k", "v")
        assert ticks == []
        driver.advance_wall_clock_time(99)
        assert ticks == []
        driver.advance_wall_clock_time(1)
        assert ticks == [1_100]
        driver.advance_wall_clock_time(timedelta(milliseconds=250))  # a Duration, as Kafka's
        assert ticks == [1_100, 1_350]
        with pytest.raises(ValueError, match="cannot go back"):
            driver.advance_wall_clock_time(timedelta(seconds=-1))


def test_input_topics_keep_their_own_time_when_asked() -> None:
    """Kafka's createInputTopic(…, startTimestamp, autoAdvance): records
    piped without a timestamp get the topic's time, which moves by the
    auto-advance after each of them and with advance_time(); records with
    a timestamp keep theirs and leave the topic's time as it is."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    builder.stream("other", key_serde=S, value_serde=S).to("out")
    with TopologyTestDriver(builder.build(), initial_wall_clock_ms=7) as driver:
        start = datetime(2026, 1, 1, tzinfo=UTC)
        topic = driver.create_input_topic("in", S, S, start, auto_advance=timedelta(seconds=1))
        topic.pipe_value_list(["a", "b"])
        topic.pipe_input("k", "c", timestamp=5)
        topic.advance_time(500)
        topic.pipe_input("k", "d")
        on_wall_clock = driver.create_input_topic("other", S, S)
        on_wall_clock.pipe_input("k", "e")
        on_wall_clock.advance_time(timedelta(milliseconds=3))
        on_wall_clock.pipe_input("k", "f")
        out = driver.create_output_topic("out", S, S).read_records_to_list()
    epoch = int(start.timestamp() * 1000)
    assert [(r.value, r.timestamp) for r in out] == [
        ("a", epoch),
        ("b", epoch + 1000),
        ("c", 5),
        ("d", epoch + 2500),
        ("e", 7),
        ("f", 10),
    ]


def test_lists_piped_from_a_start_time_leave_the_topics_time_alone() -> None:
    """Kafka's pipeKeyValueList and pipeValueList with a start time and an
    advance: each record the advance after the one before."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("out")
    with TopologyTestDriver(builder.build()) as driver:
        topic = driver.create_input_topic("in", S, S, 100, auto_advance=1)
        topic.pipe_key_value_list([("k", "a"), KeyValue("k", "b")], 1_000, timedelta(seconds=2))
        start = datetime(2026, 1, 1, tzinfo=UTC)
        topic.pipe_value_list(["c", "d"], start, 5)
        topic.pipe_value_list(["e"])
        out = driver.create_output_topic("out", S, S).read_records_to_list()
    epoch = int(start.timestamp() * 1000)
    assert [(r.key, r.value, r.timestamp) for r in out] == [
        ("k", "a", 1_000),
        ("k", "b", 3_000),
        (None, "c", epoch),
        (None, "d", epoch + 5),
        (None, "e", 100),
    ]


def test_stores_and_produced_topics_by_name() -> None:
    with TopologyTestDriver(word_count_topology()) as driver:
        assert driver.produced_topic_names() == set()
        driver.create_input_topic("text-input", S, S).pipe_input(None, "a b a", timestamp=5)
        produced = driver.produced_topic_names()
        stores = driver.get_all_state_stores()
        assert set(stores) == {"counts"}
        # The store as the processors see it: values with their timestamps.
        assert stores["counts"] is driver.get_state_store("counts")
        assert driver.get_state_store("counts").get("a") == (2, 5)
        with pytest.raises(StoreError, match="no store named 'nope'"):
            driver.get_state_store("nope")
    # The output, and the internal topics by their full names.
    app = "topology-test-driver"
    assert "word-counts" in produced
    assert f"{app}-counts-changelog" in produced
    assert any(t.startswith(app) and t.endswith("-repartition") for t in produced)
    assert len(produced) == 3


def test_user_topics_read_back_and_repartition_topics_are_handled_in_process() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).to("mid")
    (
        builder.stream("mid", key_serde=S, value_serde=S)
        .select_key(lambda k, v: v)
        .repartition(key_serde=S, value_serde=S)
        .map_values(str.upper)
        .to("out", value_serde=S)
    )
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([("k1", "x"), ("k2", "y")])
        # A user topic that the app reads back is output too.
        assert driver.create_output_topic("mid", S, S).read_key_values_to_list() == [
            KeyValue("k1", "x"),
            KeyValue("k2", "y"),
        ]
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [KeyValue("x", "X"), KeyValue("y", "Y")]
        with pytest.raises(IndexError, match="empty topic: out"):
            out.read_value()


def test_errors_name_the_node_and_the_input_record() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).map_values(int).to("out", value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        src.pipe_input("k", "1")
        with pytest.raises(TaskError, match=r"KSTREAM-MAPVALUES-0000000001.*in-0@1") as info:
            src.pipe_input("k", "one")
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(TopologyError, match="not an input"):
            driver.create_input_topic("out", S, S)


def test_window_store_getters_hide_or_show_the_timestamps() -> None:
    """Kafka's driver: ``getWindowStore`` on a timestamped store (a windowed
    aggregation's) hides the timestamps, ``getTimestampedWindowStore`` shows
    them."""
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10))
        .count(materialized="counts")
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for ts in (1, 4, 12):
            src.pipe_input("k", "v", ts)
        assert list(driver.get_window_store("counts").fetch("k", 0, 20)) == [
            KeyValue(0, 2),
            KeyValue(10, 1),
        ]
        assert driver.get_window_store("counts").fetch("k", 0) == 2
        stamped = driver.get_timestamped_window_store("counts")
        assert list(stamped.fetch("k", 0, 20)) == [KeyValue(0, (2, 4)), KeyValue(10, (1, 12))]
        with pytest.raises(StoreError, match="no window store named 'in'"):
            driver.get_window_store("in")
