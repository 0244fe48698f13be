"""GlobalKTable and global stores: every partition in every instance,
bootstrapped before processing, joinable without co-partitioning."""

from __future__ import annotations

from typing import Any

from strom import KafkaStreams, KeyValue, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.processor import Processor, ProcessorContext, Record
from strom.state import Stores
from strom.testing import TopologyTestDriver

S = serdes.String()


def enrich_topology(left: bool) -> StreamsBuilder:
    builder = StreamsBuilder()
    products = builder.global_table("products", key_serde=S, value_serde=S, materialized="prod")
    orders = builder.stream("orders", key_serde=S, value_serde=S)
    join = orders.left_join if left else orders.join
    join(products, lambda _k, order: order.split(":")[0], lambda o, p: f"{o}={p}").to(
        "out", value_serde=S
    )
    return builder


def test_global_join_on_the_driver() -> None:
    with TopologyTestDriver(enrich_topology(left=False).build()) as driver:
        driver.create_input_topic("products", S, S).pipe_key_value_list([("p1", "apple")])
        orders = driver.create_input_topic("orders", S, S)
        orders.pipe_key_value_list([("o1", "p1:2"), ("o2", "p9:1")])
        out = driver.create_output_topic("out", S, S)
        assert out.read_key_values_to_list() == [KeyValue("o1", "p1:2=apple")]
        assert driver.get_key_value_store("prod").get("p1") == "apple"


def test_global_table_is_bootstrapped_and_needs_no_co_partitioning(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("products", partitions=2)
    log.create_topic("orders", partitions=3)
    log.create_topic("out", partitions=3)
    with log.producer() as producer:
        # Products on every partition; orders produced before the app starts.
        for i in range(10):
            producer.produce("products", f"p{i}".encode(), f"item{i}".encode(), partition=i % 2)
        for i in range(30):
            producer.produce("orders", f"o{i}".encode(), f"p{i % 12}:1".encode())
    config = {"application.id": "global", "bootstrap.servers": f"embedded:{log_path}"}
    with KafkaStreams(enrich_topology(left=True).build(), config) as app:
        app.run_until_end(timeout=60)
        assert app.store("prod").approximate_num_entries() == 10
        with log.producer() as producer:
            producer.produce("products", b"p10", b"late-item", partition=0)
            producer.produce("orders", b"o99", b"p10:1")
        app.run_until_end(timeout=60)
    values = {
        r.key.decode(): r.value.decode()  # type: ignore[union-attr]
        for partition, end in log.end_offsets("out").items()
        for r in log.read("out", partition, 0, max(end, 1))
    }
    expected = {
        f"o{i}": f"p{i % 12}:1=" + (f"item{i % 12}" if i % 12 < 10 else "None") for i in range(30)
    }
    assert values == {**expected, "o99": "p10:1=late-item"}


def test_add_global_store_with_a_state_update_processor() -> None:
    class Upper(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            self.store = context.get_state_store("names")

        def process(self, record: Record[str, str]) -> None:
            self.store.put(record.key, record.value.upper())

    class Greeter(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            self.context = context
            self.names = context.get_state_store("names")

        def process(self, record: Record[str, Any]) -> None:
            self.context.forward(record.with_value(f"hello {self.names.get(record.key)}"))

    topology = (
        Topology()
        .add_global_store(
            Stores.key_value_store_builder(
                Stores.in_memory_key_value_store("names"), S, S
            ).with_logging_disabled(),
            "names-source",
            "names",
            "names-updater",
            Upper,
            key_serde=S,
            value_serde=S,
        )
        .add_source("in", "greet", key_serde=S, value_serde=S)
        .add_processor("greeter", Greeter, "in")
        .add_sink("out", "greetings", "greeter", key_serde=S, value_serde=S)
    )
    text = topology.describe()
    assert "Sub-topology: 0 for global store (will not generate tasks)" in text
    assert "Sub-topology: 1\n" in text
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("names", S, S).pipe_input("u1", "ada")
        driver.create_input_topic("greet", S, S).pipe_input("u1", "")
        assert driver.create_output_topic("greetings", S, S).read_value() == "hello ADA"


def test_a_global_tables_timestamp_extractor_gives_its_stores_timestamps() -> None:
    # The value carries the event time: "name@ts".
    def event_time(record: Any, _partition_time: int) -> int:
        return int(record.value.split("@")[1])

    builder = StreamsBuilder()
    builder.global_table(
        "products",
        key_serde=S,
        value_serde=S,
        materialized="prod",
        timestamp_extractor=event_time,
    )
    with TopologyTestDriver(builder.build()) as driver:
        products = driver.create_input_topic("products", S, S)
        products.pipe_input("p1", "apple@42", 1_000)
        products.pipe_input("p2", "pear@7", 2_000)
        store = driver.get_timestamped_key_value_store("prod")
        assert store.get("p1") == ("apple@42", 42)
        assert store.get("p2") == ("pear@7", 7)


def test_streams_builder_add_global_store_feeds_it_with_timestamps() -> None:
    # StreamsBuilder.addGlobalStore: named as a global table's source and
    # processor; the extractor's timestamps reach the update processor.
    class Stamp(Processor[str, str]):
        def __init__(self, store: str = "stamps") -> None:
            self.store_name = store

        def init(self, context: ProcessorContext) -> None:
            self.store = context.get_state_store(self.store_name)

        def process(self, record: Record[str, str]) -> None:
            self.store.put(record.key, f"{record.value}@{record.timestamp}")

    builder = StreamsBuilder()
    builder.add_global_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("stamps"), S, S),
        "stamps-topic",
        Stamp,
        key_serde=S,
        value_serde=S,
        timestamp_extractor=lambda record, _time: len(record.value),
    )
    builder.add_global_store(
        Stores.key_value_store_builder(Stores.in_memory_key_value_store("named"), S, S),
        "named-topic",
        lambda: Stamp("named"),
        key_serde=S,
        value_serde=S,
        name="updates",
    )
    topology = builder.build()
    described = topology.describe()
    assert "Source: KSTREAM-SOURCE-0000000000 (topics: [stamps-topic])" in described
    assert "Processor: KTABLE-SOURCE-0000000001 (stores: [stamps])" in described
    assert "Source: updates-source (topics: [named-topic])" in described
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("stamps-topic", S, S).pipe_input("k", "abc", 1_000)
        assert driver.get_key_value_store("stamps").get("k") == "abc@3"
