"""Timestamped key-value and window stores built with ``Stores`` for the
Processor API: values are ``(value, timestamp)`` pairs (Kafka's
``ValueAndTimestamp``), a pair with a None value deletes (Kafka's
``ValueAndTimestamp.make(null, ts)`` is null), and the test driver's plain
getters hide the timestamps as Kafka's facades do."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, KeyValue, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import SerializationError, StoreError, TaskError, TopologyError
from strom.kstream import Window, Windowed
from strom.processor import Processor, ProcessorContext, Record
from strom.serdes import Timestamped
from strom.state.stores import Stores, StoreSupplier
from strom.state.window import WindowStore
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()


class LatestWithTime(Processor[str, str]):
    """Keeps each key's latest value with its record's timestamp in "latest"
    and forwards what the store held before: ``value@timestamp``. A value
    "-" deletes with a ``(None, timestamp)`` pair."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("latest")

    def process(self, record: Record[str, str]) -> None:
        previous = self.store.get(record.key)
        value = None if record.value == "-" else record.value
        self.store.put(record.key, (value, record.timestamp))
        shown = "none" if previous is None else f"{previous[0]}@{previous[1]}"
        self.context.forward(record.with_value(shown))


def latest_topology(supplier: StoreSupplier) -> Topology:
    return (
        Topology()
        .add_source("in", "in", key_serde=S, value_serde=S)
        .add_processor("latest-with-time", LatestWithTime, "in")
        .add_state_store(
            Stores.timestamped_key_value_store_builder(supplier, S, S), "latest-with-time"
        )
        .add_sink("out", "out", "latest-with-time", key_serde=S, value_serde=S)
    )


@pytest.mark.parametrize(
    "supplier",
    [
        Stores.persistent_timestamped_key_value_store("latest"),
        Stores.in_memory_key_value_store("latest"),
        Stores.lru_map("latest", 10),
    ],
    ids=["persistent", "in-memory", "lru"],
)
def test_a_processor_puts_and_reads_values_with_their_timestamps(supplier: StoreSupplier) -> None:
    with TopologyTestDriver(latest_topology(supplier)) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        src.pipe_input("k", "a", 5)
        src.pipe_input("k", "b", 9)
        src.pipe_input("j", "x", 7)
        assert out.read_values_to_list() == ["none", "a@5", "none"]
        store = driver.get_timestamped_key_value_store("latest")
        assert store.get("k") == ("b", 9)
        assert list(store.all()) == [KeyValue("j", ("x", 7)), KeyValue("k", ("b", 9))]
        assert driver.get_key_value_store("latest").get("k") == "b"
        # A pair with a None value is no value: the key is deleted.
        src.pipe_input("k", "-", 11)
        assert out.read_values_to_list() == ["b@9"]
        assert store.get("k") is None
        assert [kv.key for kv in store.all()] == ["j"]
        src.pipe_input("k", "c", 12)
        assert out.read_values_to_list() == ["none"]


def test_a_timestamped_store_takes_pairs_only() -> None:
    class PutsPlain(Processor[str, str]):
        def init(self, context: ProcessorContext) -> None:
            self.store = context.get_state_store("latest")

        def process(self, record: Record[str, str]) -> None:
            self.store.put(record.key, record.value)

    topology = (
        Topology()
        .add_source("in", "in", key_serde=S, value_serde=S)
        .add_processor("p", PutsPlain, "in")
        .add_state_store(
            Stores.timestamped_key_value_store_builder(
                Stores.in_memory_key_value_store("latest"), S, S
            ),
            "p",
        )
    )
    with TopologyTestDriver(topology) as driver, pytest.raises(TaskError) as raised:
        driver.create_input_topic("in", S, S).pipe_input("k", "v", 1)
    assert isinstance(raised.value.__cause__, SerializationError)
    assert "(value, timestamp) pair" in str(raised.value.__cause__)


def test_the_timestamped_serde_makes_a_null_value_a_delete() -> None:
    serde = Timestamped(S)
    assert serde.serialize("t", ("v", 258)) == (258).to_bytes(8, "big") + b"v"
    assert serde.serialize("t", (None, 258)) is None
    assert serde.serialize("t", None) is None
    with pytest.raises(SerializationError, match="pair"):
        serde.serialize("t", "v")  # type: ignore[arg-type]


class WindowedLatest(Processor[str, str]):
    """Puts each record into its 10 ms window of "windows" with its timestamp."""

    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store("windows")

    def process(self, record: Record[str, str]) -> None:
        start = record.timestamp - record.timestamp % 10
        value = None if record.value == "-" else record.value
        self.store.put(record.key, (value, record.timestamp), start)


def windowed_topology(cached: bool = False) -> Topology:
    builder = Stores.timestamped_window_store_builder(
        Stores.persistent_timestamped_window_store("windows", 1_000, 10), S, S
    )
    return (
        Topology()
        .add_source("in", "in", key_serde=S, value_serde=S)
        .add_processor("p", WindowedLatest, "in")
        .add_state_store(builder.with_caching_enabled() if cached else builder, "p")
    )


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
def test_a_timestamped_window_store_in_the_processor_api(cached: bool) -> None:
    with TopologyTestDriver(windowed_topology(cached)) as driver:
        src = driver.create_input_topic("in", S, S)
        for key, value, ts in [("k", "a", 3), ("k", "b", 7), ("k", "c", 12), ("j", "x", 15)]:
            src.pipe_input(key, value, ts)
        stamped = driver.get_timestamped_window_store("windows")
        assert stamped.fetch("k", 0) == ("b", 7)
        assert list(stamped.fetch("k", 0, 100)) == [KeyValue(0, ("b", 7)), KeyValue(10, ("c", 12))]
        assert [(kv.key, kv.value) for kv in stamped.fetch_all(10, 10)] == [
            (Windowed("j", Window(10, 20)), ("x", 15)),
            (Windowed("k", Window(10, 20)), ("c", 12)),
        ]
        plain = driver.get_window_store("windows")
        assert plain.fetch("k", 0) == "b"
        assert list(plain.fetch("k", 0, 100)) == [KeyValue(0, "b"), KeyValue(10, "c")]
        # One segment: in key order, then by start.
        assert [kv.value for kv in plain.all()] == ["x", "b", "c"]
        # Kafka's WindowStoreFacade stamps what it writes with NO_TIMESTAMP.
        plain.put("n", "new", 20)
        assert stamped.fetch("n", 20) == ("new", -1)
        # A pair with a None value deletes the window.
        src.pipe_input("k", "-", 14)
        assert stamped.fetch("k", 10) is None
        assert list(plain.fetch("k", 0, 100)) == [KeyValue(0, "b")]


def test_the_drivers_plain_key_value_facade_stamps_writes_with_no_timestamp() -> None:
    topology = latest_topology(Stores.in_memory_key_value_store("latest"))
    with TopologyTestDriver(topology) as driver:
        plain = driver.get_key_value_store("latest")
        plain.put("a", "1")
        plain.put_all([("b", "2"), ("c", "3")])
        assert plain.put_if_absent("a", "9") == "1"
        assert plain.delete("b") == "2"
        stamped = driver.get_timestamped_key_value_store("latest")
        assert list(stamped.all()) == [KeyValue("a", ("1", -1)), KeyValue("c", ("3", -1))]
        assert dict(plain.all()) == {"a": "1", "c": "3"}


def test_timestamped_getters_refuse_stores_without_timestamps() -> None:
    topology = (
        Topology()
        .add_source("in", "in", key_serde=S, value_serde=S)
        .add_processor("p", WindowedLatest, "in")
        .add_state_store(
            Stores.window_store_builder(Stores.persistent_window_store("windows", 100, 10), S, S),
            "p",
        )
        .add_state_store(
            Stores.key_value_store_builder(Stores.in_memory_key_value_store("kv"), S, S), "p"
        )
    )
    with TopologyTestDriver(topology) as driver:
        with pytest.raises(StoreError, match="keeps no timestamps: get it with get_window_store"):
            driver.get_timestamped_window_store("windows")
        with pytest.raises(StoreError, match="get_key_value_store"):
            driver.get_timestamped_key_value_store("kv")
        with pytest.raises(StoreError, match="no window store named 'kv'"):
            driver.get_timestamped_window_store("kv")
        # A store without timestamps is given as it is.
        assert isinstance(driver.get_window_store("windows"), WindowStore)


def test_builders_carry_timestamped_and_check_the_kind() -> None:
    kv = Stores.persistent_timestamped_key_value_store("t")
    assert kv == Stores.persistent_key_value_store("t")
    built = Stores.timestamped_key_value_store_builder(kv, S, L)
    assert built.timestamped and not Stores.key_value_store_builder(kv, S, L).timestamped
    assert built.with_logging_disabled().timestamped
    window = Stores.persistent_timestamped_window_store("w", 1_000, 100, retain_duplicates=True)
    assert (window.kind, window.retention_ms, window.window_size_ms) == ("window", 1_000, 100)
    assert window.retain_duplicates
    assert Stores.timestamped_window_store_builder(window, S, L).timestamped
    with pytest.raises(TopologyError, match=r"is a window store; use Stores\.window_store_builder"):
        Stores.timestamped_key_value_store_builder(window, S, L)
    with pytest.raises(TopologyError, match="key_value_store_builder"):
        Stores.timestamped_window_store_builder(kv, S, L)
    versioned = Stores.persistent_versioned_key_value_store("v", 1_000)
    with pytest.raises(TopologyError, match="versioned_key_value_store_builder"):
        Stores.timestamped_key_value_store_builder(versioned, S, L)


def test_a_timestamped_store_is_restored_with_its_timestamps(
    log: EmbeddedLog, log_path: str
) -> None:
    """An in-memory timestamped store comes back from its changelog with the
    timestamps its values had."""
    log.create_topic("in")
    log.create_topic("out")
    config: dict[str, Any] = {
        "application.id": "ts-restore",
        "bootstrap.servers": f"embedded:{log_path}",
    }
    topology = latest_topology(Stores.in_memory_key_value_store("latest"))
    with log.producer(S, S) as producer:
        for key, value, ts in [("k", "a", 5), ("j", "x", 6), ("k", "b", 9)]:
            producer.produce("in", key, value, timestamp=ts)
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=60)
    with log.producer(S, S) as producer:
        producer.produce("in", "k", "c", timestamp=20)
    with KafkaStreams(topology, config) as app:
        app.run_until_end(timeout=60)
        assert dict(app.store("latest", timestamped=True).all()) == {
            "j": ("x", 6),
            "k": ("c", 20),
        }
    values = [r.value for r in log.records("out", key_serde=S, value_serde=S)]
    assert values == ["none", "none", "a@5", "b@9"]
