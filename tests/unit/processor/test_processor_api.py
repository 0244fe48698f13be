"""The Processor API on the embedded runtime: Kafka's classic word count
processor, forwarding to named children, punctuation and the context."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.support import wait_until

from strom import KafkaStreams, KeyValue, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import StoreError, TopologyError
from strom.kstream import Window, Windowed
from strom.processor import (
    ConnectedStoreProvider,
    ContextualProcessor,
    FixedKeyProcessor,
    FixedKeyProcessorSupplier,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    ProcessorSupplier,
    PunctuationType,
    Record,
    RecordMetadata,
)
from strom.state.stores import StoreBuilder, Stores
from strom.testing import TopologyTestDriver


class WordCountProcessor(Processor[str, str]):
    """Kafka's Processor API example: counts words into "Counts" and, every
    second of stream time, forwards every count and deletes it."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("Counts")
        context.schedule(1000, PunctuationType.STREAM_TIME, self.punctuate)

    def punctuate(self, timestamp: int) -> None:
        for entry in self.store.all():
            self.context.forward(Record(entry.key, str(entry.value), timestamp))
            self.store.delete(entry.key)

    def process(self, record: Record[str, str]) -> None:
        for word in record.value.lower().split():
            self.store.put(word, (self.store.get(word) or 0) + 1)


def word_count_topology() -> Topology:
    return (
        Topology()
        .add_source("Source", "text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("Process", WordCountProcessor, "Source")
        .add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("Counts"), serdes.String(), serdes.Integer()
            ),
            "Process",
        )
        .add_sink(
            "Sink", "word-counts", "Process", key_serde=serdes.String(), value_serde=serdes.String()
        )
    )


@pytest.fixture
def topics(log: EmbeddedLog) -> EmbeddedLog:
    log.create_topic("text-input")
    log.create_topic("word-counts")
    return log


def produce(log: EmbeddedLog, value: str, timestamp: int) -> None:
    with log.producer() as producer:
        producer.produce("text-input", None, value.encode(), timestamp=timestamp)


def outputs(log: EmbeddedLog, topic: str = "word-counts") -> list[tuple[str, str, int]]:
    end = log.end_offsets(topic)[0]
    return [
        (r.key.decode(), r.value.decode(), r.timestamp)  # type: ignore[union-attr]
        for r in log.read(topic, 0, 0, end)
    ]


def config(log_path: str, **extra: Any) -> dict[str, Any]:
    return {"application.id": "papi", "bootstrap.servers": f"embedded:{log_path}", **extra}


def test_word_count_processor_punctuates_on_stream_time(topics: EmbeddedLog, log_path: str) -> None:
    with KafkaStreams(word_count_topology(), config(log_path)) as app:
        produce(topics, "a b a", 0)
        app.run_until_end(timeout=30)
        # Stream-time punctuation fires on the first record (aligned to 0).
        assert outputs(topics) == [("a", "2", 0), ("b", "1", 0)]
        produce(topics, "b c", 500)
        app.run_until_end(timeout=30)
        assert len(outputs(topics)) == 2  # next punctuation at 1000
        produce(topics, "a", 1500)
        app.run_until_end(timeout=30)
        assert outputs(topics)[2:] == [("a", "1", 1500), ("b", "1", 1500), ("c", "1", 1500)]
        produce(topics, "c c", 2600)
        app.run_until_end(timeout=30)
        # 2000 was due: fires once at stream time 2600, the next one is 3000.
        assert outputs(topics)[5:] == [("c", "2", 2600)]
        assert app.store("Counts").approximate_num_entries() == 0


def test_describe_lists_the_store_on_its_processor() -> None:
    text = word_count_topology().describe()
    assert "Source: Source (topics: [text-input])" in text
    assert "Processor: Process (stores: [Counts])" in text
    assert "Sink: Sink (topic: word-counts)" in text


class Router(Processor[str, str]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.seen: list[RecordMetadata | None] = []

    def process(self, record: Record[str, str]) -> None:
        self.seen.append(self.context.record_metadata())
        child = "Even" if int(record.value) % 2 == 0 else "Odd"
        self.context.forward(record.with_value(record.value + "!"), child)


def test_forward_to_a_named_child_and_record_metadata(topics: EmbeddedLog, log_path: str) -> None:
    topics.create_topic("odd")
    routers: list[Router] = []

    def supplier() -> Router:
        routers.append(Router())
        return routers[-1]

    topology = (
        Topology()
        .add_source("S", "text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("R", supplier, "S")
        .add_sink(
            "Even", "word-counts", "R", key_serde=serdes.String(), value_serde=serdes.String()
        )
        .add_sink("Odd", "odd", "R", key_serde=serdes.String(), value_serde=serdes.String())
    )
    with topics.producer() as producer:
        producer.produce_batch("text-input", [(b"k", str(i).encode(), 10 + i) for i in range(5)])
    with KafkaStreams(topology, config(log_path)) as app:
        app.run_until_end(timeout=30)
    assert [(v, ts) for _, v, ts in outputs(topics)] == [("0!", 10), ("2!", 12), ("4!", 14)]
    assert [(v, ts) for _, v, ts in outputs(topics, "odd")] == [("1!", 11), ("3!", 13)]
    assert routers[0].seen == [RecordMetadata("text-input", 0, i) for i in range(5)]


def test_unconnected_store_and_unknown_child_are_clear_errors(
    topics: EmbeddedLog, log_path: str
) -> None:
    class Peeker(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            context.get_state_store("Counts")

        def process(self, record: Record[str, str]) -> None:
            """Never reached: init fails."""

    topology = word_count_topology().add_processor("Peek", Peeker, "Source")
    with pytest.raises(StoreError, match="'Peek' has no access to state store 'Counts'"):
        KafkaStreams(topology, config(log_path)).run_until_end(timeout=30)

    with pytest.raises(TopologyError, match="never added"):
        Topology().add_source("S", "t").add_processor(
            "P", Peeker, "S"
        ).connect_processor_and_state_stores("P", "nope")


def test_wall_clock_punctuation_and_requested_commit(topics: EmbeddedLog, log_path: str) -> None:
    fired = threading.Event()

    class Ticker(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            self.context = context
            self.schedule = context.schedule(5, PunctuationType.WALL_CLOCK_TIME, self.tick)

        def tick(self, timestamp: int) -> None:
            self.context.forward(Record("tick", str(timestamp), timestamp))
            self.schedule.cancel()  # once is enough
            fired.set()

        def process(self, record: Record[str, str]) -> None:
            self.context.commit()

    topology = (
        Topology()
        .add_source("S", "text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("T", Ticker, "S")
        .add_sink("K", "word-counts", "T", key_serde=serdes.String(), value_serde=serdes.String())
    )
    app = KafkaStreams(topology, config(log_path, **{"commit.interval.ms": 3_600_000}))
    app.start()
    try:
        wait_until(fired.is_set, timeout=30, what="the wall-clock punctuation")
        produce(topics, "x", 7)
        # context.commit() commits long before commit.interval.ms.
        wait_until(
            lambda: topics.committed_offsets("papi").get(("text-input", 0), (None,))[0] == 1,
            timeout=30,
            what="the requested commit",
        )
    finally:
        assert app.close(timeout=30)
    ticks = [r for r in outputs(topics) if r[0] == "tick"]
    assert len(ticks) == 1 and int(ticks[0][1]) > 1_600_000_000_000


def test_kstream_process_uses_a_store_added_to_the_builder(
    topics: EmbeddedLog, log_path: str
) -> None:
    builder = StreamsBuilder().add_state_store(
        Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("Counts"), serdes.String(), serdes.Integer()
        )
    )
    (
        builder.stream("text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .process(WordCountProcessor, "Counts")
        .to("word-counts", key_serde=serdes.String(), value_serde=serdes.String())
    )
    produce(topics, "x y x", 3)
    with KafkaStreams(builder.build(), config(log_path)) as app:
        app.run_until_end(timeout=30)
    assert outputs(topics) == [("x", "2", 3), ("y", "1", 3)]
    assert (
        "Processor: KSTREAM-PROCESSOR-0000000001 (stores: [Counts])" in builder.build().describe()
    )


class WindowedCounter(Processor[str, str]):
    """Counts records per key in 10 ms windows and per session (5 ms gap is
    not the point here: each record is its own session) by hand."""

    def init(self, context: ProcessorContext) -> None:
        self.windows = context.get_state_store("per-window")
        self.sessions = context.get_state_store("sessions")

    def process(self, record: Record[str, str]) -> None:
        start = record.timestamp - record.timestamp % 10
        self.windows.put(record.key, (self.windows.fetch(record.key, start) or 0) + 1, start)
        window = Windowed(record.key, Window(record.timestamp, record.timestamp))
        self.sessions.put(window, record.value)


def windowed_topology() -> Topology:
    return (
        Topology()
        .add_source("S", "text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("P", WindowedCounter, "S")
        .add_state_store(
            Stores.window_store_builder(
                Stores.persistent_window_store("per-window", 100_000, 10),
                serdes.String(),
                serdes.Integer(),
            ),
            "P",
        )
        .add_state_store(
            Stores.session_store_builder(
                Stores.persistent_session_store("sessions", 100_000),
                serdes.String(),
                serdes.String(),
            ),
            "P",
        )
    )


def test_window_and_session_stores_in_the_processor_api() -> None:
    with TopologyTestDriver(windowed_topology()) as driver:
        src = driver.create_input_topic("text-input", serdes.String(), serdes.String())
        src.pipe_records([Record("k", "a", 1), Record("k", "b", 5), Record("k", "c", 12)])
        windows = driver.get_window_store("per-window")
        assert list(windows.fetch("k", 0, 20)) == [KeyValue(0, 2), KeyValue(10, 1)]
        sessions = driver.get_session_store("sessions")
        assert [kv.value for kv in sessions.fetch("k")] == ["a", "b", "c"]


def test_window_store_is_restored_from_its_changelog(topics: EmbeddedLog, log_path: str) -> None:
    with topics.producer() as producer:
        producer.produce_batch("text-input", [(b"k", b"v", ts) for ts in (1, 2, 15)])
    with KafkaStreams(windowed_topology(), config(log_path)) as app:
        app.run_until_end(timeout=30)
    # Window and session changelogs are compacted and deleted after retention.
    changelog = topics.topic_config("papi-per-window-changelog")
    assert changelog["cleanup.policy"] == "compact,delete"
    assert changelog["retention.ms"] == str(100_000 + 86_400_000)
    for path in (Path(log_path) / ".state" / "papi").glob("*/*"):
        shutil.rmtree(path)
    with KafkaStreams(windowed_topology(), config(log_path)) as app:
        app.run_until_end(timeout=30)
        assert app.metrics()["restored-records"] == 3 + 3  # window puts + sessions
        windows = app.store("per-window")
        assert windows.approximate_num_entries() == 2


class RunningTotal(FixedKeyProcessor[str, int]):
    """Adds each value to its key's total in "Totals" and forwards the total."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("Totals")

    def process(self, record: FixedKeyRecord[str, int]) -> None:
        total = (self.store.get(record.key) or 0) + record.value
        self.store.put(record.key, total)
        self.context.forward(record.with_value(total))


def test_process_values_keeps_keys_and_needs_no_repartition() -> None:
    builder = StreamsBuilder().add_state_store(
        Stores.key_value_store_builder(
            Stores.in_memory_key_value_store("Totals"), serdes.String(), serdes.Integer()
        )
    )
    totals = builder.stream(
        "in", key_serde=serdes.String(), value_serde=serdes.Integer()
    ).process_values(RunningTotal, "Totals")
    totals.to("totals", value_serde=serdes.Integer())
    totals.group_by_key().count().to_stream().to("counts", value_serde=serdes.Long())
    topology = builder.build()
    text = topology.describe()
    # One sub-topology: process() would have split it at a repartition topic.
    assert "Sub-topology: 1" not in str(text) and "repartition" not in str(text)
    assert "KSTREAM-PROCESSVALUES-" in str(text)
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", serdes.String(), serdes.Integer())
        for key, value in [("a", 1), ("b", 5), ("a", 2), ("a", 3)]:
            source.pipe_input(key, value)
        out = driver.create_output_topic("totals", serdes.String(), serdes.Integer())
        assert out.read_key_values_to_list() == [("a", 1), ("b", 5), ("a", 3), ("a", 6)]
        counts = driver.create_output_topic("counts", serdes.String(), serdes.Long())
        assert counts.read_key_values_to_map() == {"a": 3, "b": 1}


class Rekeying(FixedKeyProcessor[str, int]):
    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: FixedKeyRecord[str, int]) -> None:
        self.context.forward(Record("other", record.value, record.timestamp))


def test_process_values_refuses_a_record_that_could_change_the_key() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.String(), value_serde=serdes.Integer()).process_values(
        Rekeying
    ).to("out", value_serde=serdes.Integer())
    with TopologyTestDriver(builder.build()) as driver:
        source = driver.create_input_topic("in", serdes.String(), serdes.Integer())
        with pytest.raises(Exception, match="forwards FixedKeyRecords"):
            source.pipe_input("a", 1)


def test_process_values_needs_a_fixed_key_processor() -> None:
    builder = StreamsBuilder()
    builder.stream("in", key_serde=serdes.String(), value_serde=serdes.Integer()).process_values(
        WordCountProcessor  # type: ignore[arg-type]
    ).to("out", value_serde=serdes.Integer())
    with pytest.raises(TopologyError, match="not a FixedKeyProcessor"):
        TopologyTestDriver(builder.build())


def test_a_contextual_processor_reads_serdes_state_dir_and_configs(tmp_path: Path) -> None:
    """Kafka's ContextualProcessor, and the context's keySerde, valueSerde,
    stateDir, appConfigs and appConfigsWithPrefix."""
    seen: dict[str, Any] = {}

    class Inspect(ContextualProcessor[str, str]):
        def process(self, record: Record[str, str]) -> None:
            context = self.context()
            seen["serdes"] = (context.key_serde, context.value_serde)
            seen["state_dir"] = context.state_dir
            seen["configs"] = context.app_configs()
            seen["consumer"] = context.app_configs_with_prefix("consumer.")
            context.forward(record.with_value(record.value.upper()))

    builder = StreamsBuilder()
    builder.stream("in").process(Inspect).to("out")
    keys, values = serdes.String(), serdes.String()
    config = {
        "application.id": "inspect",
        "state.dir": str(tmp_path),
        "default.key.serde": keys,
        "default.value.serde": values,
        "consumer.max.poll.records": 7,
    }
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("in", keys, values).pipe_input("k", "v")
        assert driver.create_output_topic("out", keys, values).read_value() == "V"
    assert seen["serdes"] == (keys, values)
    assert seen["state_dir"].is_dir()
    assert seen["state_dir"].is_relative_to(tmp_path) and seen["state_dir"].name == "0_0"
    assert seen["configs"]["application.id"] == "inspect"
    assert seen["configs"]["commit.interval.ms"] == 30_000  # a default
    assert seen["consumer"] == {"max.poll.records": 7}


def test_a_contextual_processor_has_no_context_before_init() -> None:
    class Early(ContextualProcessor[str, str]):
        def process(self, record: Record[str, str]) -> None: ...

    with pytest.raises(RuntimeError, match="Early has no context before init"):
        Early().context()


# --- ConnectedStoreProvider.stores(): suppliers that declare their stores ---------

COUNTS = Stores.key_value_store_builder(
    Stores.persistent_key_value_store("Counts"), serdes.String(), serdes.Integer()
)
TOTALS = Stores.key_value_store_builder(
    Stores.in_memory_key_value_store("Totals"), serdes.String(), serdes.Integer()
)


class WordCountSupplier(ProcessorSupplier[str, str]):
    """Kafka's ProcessorSupplier with stores(): the store comes with the processor."""

    def __init__(self, counts: StoreBuilder = COUNTS) -> None:
        self.counts = counts

    def get(self) -> WordCountProcessor:
        return WordCountProcessor()

    def stores(self) -> list[StoreBuilder]:
        return [self.counts]


def test_add_processor_adds_and_connects_the_stores_its_supplier_declares() -> None:
    topology = (
        Topology()
        .add_source("Source", "in", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("Process", WordCountSupplier(), "Source")
        .add_sink("Sink", "out", "Process", key_serde=serdes.String(), value_serde=serdes.String())
    )
    assert "Processor: Process (stores: [Counts])" in topology.describe()
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", serdes.String(), serdes.String())
        source.pipe_input(None, "a b a", 0)
        out = driver.create_output_topic("out", serdes.String(), serdes.String())
        assert out.read_key_values_to_list() == [("a", "2"), ("b", "1")]
        source.pipe_input(None, "c c", 500)  # counted, not yet punctuated
        assert driver.get_key_value_store("Counts").get("c") == 2


def test_suppliers_sharing_a_builder_share_its_store() -> None:
    """Kafka's ConnectedStoreProvider example: two suppliers return the same
    builder; the store is added once and connected to both. An equal builder
    counts as the same, as does adding it again with add_state_store."""
    topology = (
        Topology()
        .add_source("Source", "in", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("A", WordCountSupplier(), "Source")
        .add_processor(
            "B",
            WordCountSupplier(
                Stores.key_value_store_builder(
                    Stores.persistent_key_value_store("Counts"), serdes.String(), serdes.Integer()
                )
            ),
            "Source",
        )
        .add_state_store(COUNTS)
    )
    text = topology.describe()
    assert "Processor: A (stores: [Counts])" in text and "Processor: B (stores: [Counts])" in text
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("in", serdes.String(), serdes.String())
        source.pipe_input(None, "x y", 0)  # counted, then the punctuation at 0 empties the store
        assert driver.get_key_value_store("Counts").approximate_num_entries() == 0
        source.pipe_input(None, "x", 600)  # the next punctuation is at 1000
        assert driver.get_key_value_store("Counts").get("x") == 2  # once by A, once by B


def test_a_different_builder_under_a_taken_name_is_refused_before_anything_is_added() -> None:
    topology = (
        Topology()
        .add_source("Source", "in", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("A", WordCountSupplier(), "Source")
    )
    cached = WordCountSupplier(COUNTS.with_caching_enabled())
    with pytest.raises(TopologyError, match="'Counts' was already added from a different builder"):
        topology.add_processor("B", cached, "Source")
    assert "Processor: B" not in topology.describe()  # the processor was not added either
    with pytest.raises(TopologyError, match="'Counts' was already added from a different builder"):
        topology.add_state_store(COUNTS.with_logging_disabled())


def test_stores_must_return_store_builders() -> None:
    class Wrong(WordCountSupplier):
        def stores(self) -> list[StoreBuilder]:
            return ["Counts"]  # type: ignore[list-item]

    topology = Topology().add_source("Source", "in")
    with pytest.raises(TopologyError, match=r"stores\(\) returned 'Counts'"):
        topology.add_processor("P", Wrong(), "Source")


class TotalsSupplier(FixedKeyProcessorSupplier[str, int]):
    def get(self) -> RunningTotal:
        return RunningTotal()

    def stores(self) -> list[StoreBuilder]:
        return [TOTALS]


def test_kstream_process_and_process_values_add_the_declared_stores() -> None:
    builder = StreamsBuilder()
    words = builder.stream("text", key_serde=serdes.String(), value_serde=serdes.String())
    words.process(WordCountSupplier()).to(
        "counts", key_serde=serdes.String(), value_serde=serdes.String()
    )
    numbers = builder.stream("numbers", key_serde=serdes.String(), value_serde=serdes.Integer())
    numbers.process_values(TotalsSupplier()).to("totals", value_serde=serdes.Integer())
    text = builder.build().describe()
    assert "Processor: KSTREAM-PROCESSOR-0000000001 (stores: [Counts])" in text
    assert "Processor: KSTREAM-PROCESSVALUES-0000000004 (stores: [Totals])" in text
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("text", serdes.String(), serdes.String()).pipe_input(
            None, "b a b", 0
        )
        counts = driver.create_output_topic("counts", serdes.String(), serdes.String())
        assert counts.read_key_values_to_list() == [("a", "1"), ("b", "2")]
        source = driver.create_input_topic("numbers", serdes.String(), serdes.Integer())
        source.pipe_key_value_list([("a", 1), ("a", 2), ("b", 4)])
        totals = driver.create_output_topic("totals", serdes.String(), serdes.Integer())
        assert totals.read_key_values_to_list() == [("a", 1), ("a", 3), ("b", 4)]
        assert driver.get_key_value_store("Totals").get("a") == 3


def test_any_callable_supplier_may_declare_stores() -> None:
    """ConnectedStoreProvider mixed into a callable that is not a ProcessorSupplier."""

    class CountingSupplier(ConnectedStoreProvider):
        def __call__(self) -> WordCountProcessor:
            return WordCountProcessor()

        def stores(self) -> list[StoreBuilder]:
            return [COUNTS]

    topology = (
        Topology()
        .add_source("Source", "in", key_serde=serdes.String(), value_serde=serdes.String())
        .add_processor("P", CountingSupplier(), "Source")
    )
    assert "Processor: P (stores: [Counts])" in topology.describe()
