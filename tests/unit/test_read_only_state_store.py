"""Read-only state stores (Kafka's ``Topology.addReadOnlyStateStore``,
KIP-813): a source reads the topic from its start into the user's processor,
the only writer of the store; the store has no changelog of its own, the
topic is its changelog: after a restart it is restored from the topic up to
the offset its task committed, the records put in as they are on it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_local_state import Recorder

from strom import KafkaStreams, KeyValue, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.offset_reset import AutoOffsetReset
from strom.processor import Processor, ProcessorContext, Record, StateRestoreListener
from strom.processor.internals.topology_builder import SourceDef
from strom.state import StoreBuilder, Stores
from strom.testing import TopologyTestDriver

S = serdes.String()
APP = "read-only"

Records = list[tuple[bytes | None, bytes | None]]

# What the store's processors were given, by every instance (reset per test).
PUT: list[tuple[str | None, str | None]] = []


@pytest.fixture(autouse=True)
def _reset_put() -> Iterator[None]:
    PUT.clear()
    yield
    PUT.clear()


class PriceUpdater(Processor[str, str]):
    """The store's writer: puts each record as it is (None deletes)."""

    def init(self, context: ProcessorContext) -> None:
        self.store = context.get_state_store("prices")

    def process(self, record: Record[str, str]) -> None:
        PUT.append((record.key, record.value))
        if record.key is not None:
            self.store.put(record.key, record.value)


class UpperPriceUpdater(PriceUpdater):
    """A writer that changes what it reads (a restore does not)."""

    def process(self, record: Record[str, str]) -> None:
        PUT.append((record.key, record.value))
        self.store.put(record.key, record.value.upper())


class StampedPriceUpdater(PriceUpdater):
    """The writer of a timestamped store: the value with its record's timestamp."""

    def process(self, record: Record[str, str]) -> None:
        PUT.append((record.key, record.value))
        self.store.put(record.key, (record.value, record.timestamp))


class Pricer(Processor[str, str]):
    """Another processor reading the store by name: order ``item`` -> price."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.prices = context.get_state_store("prices")

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value(f"{record.value}@{self.prices.get(record.value)}"))


def builder(persistent: bool = True, timestamped: bool = False) -> StoreBuilder:
    supplier = (
        Stores.persistent_key_value_store("prices")
        if persistent
        else Stores.in_memory_key_value_store("prices")
    )
    if timestamped:
        return Stores.timestamped_key_value_store_builder(supplier, S, S)
    return Stores.key_value_store_builder(supplier, S, S)


def prices_topology(
    updater: type[PriceUpdater] = PriceUpdater, store: StoreBuilder | None = None
) -> Topology:
    return Topology().add_read_only_state_store(
        store or builder(),
        "prices-source",
        "prices",
        "prices-updater",
        updater,
        key_serde=S,
        value_serde=S,
    )


def pricing_topology() -> Topology:
    return (
        prices_topology()
        .add_source("orders-source", "orders", key_serde=S, value_serde=S)
        .add_processor("pricer", Pricer, "orders-source")
        .connect_processor_and_state_stores("pricer", "prices")
        .add_sink("priced", "priced-orders", "pricer", key_serde=S, value_serde=S)
    )


# --- the topology -------------------------------------------------------------------
def test_records_reach_the_processor_that_fills_the_store_another_reads() -> None:
    with TopologyTestDriver(pricing_topology()) as driver:
        prices = driver.create_input_topic("prices", S, S)
        orders = driver.create_input_topic("orders", S, S)
        out = driver.create_output_topic("priced-orders", S, S)
        prices.pipe_key_value_list([("apple", "3"), ("pear", "5")])
        orders.pipe_input("o1", "apple")
        prices.pipe_key_value_list([("apple", "4"), ("pear", None)])
        orders.pipe_key_value_list([("o2", "apple"), ("o3", "pear")])
        assert PUT == [("apple", "3"), ("pear", "5"), ("apple", "4"), ("pear", None)]
        assert out.read_key_values_to_list() == [
            KeyValue("o1", "apple@3"),
            KeyValue("o2", "apple@4"),
            KeyValue("o3", "pear@None"),
        ]
        store = driver.get_key_value_store("prices")
        assert [(kv.key, kv.value) for kv in store.all()] == [("apple", "4")]


def test_the_description_is_kafkas() -> None:
    assert str(prices_topology().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: prices-source (topics: [prices])\n"
        "      --> prices-updater\n"
        "    Processor: prices-updater (stores: [prices])\n"
        "      --> none\n"
        "      <-- prices-source\n\n"
    )
    # A processor connected to the store shares its sub-topology (nodes in
    # Kafka's order: by the size of the sub-tree they root, then by name).
    description = pricing_topology().describe()
    assert str(description) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: orders-source (topics: [orders])\n"
        "      --> pricer\n"
        "    Processor: pricer (stores: [prices])\n"
        "      --> priced\n"
        "      <-- orders-source\n"
        "    Source: prices-source (topics: [prices])\n"
        "      --> prices-updater\n"
        "    Sink: priced (topic: priced-orders)\n"
        "      <-- pricer\n"
        "    Processor: prices-updater (stores: [prices])\n"
        "      --> none\n"
        "      <-- prices-source\n\n"
    )
    (sub,) = description.subtopologies
    stores = {n.name: getattr(n, "stores", None) for n in sub.nodes}
    assert stores["pricer"] == stores["prices-updater"] == ("prices",)
    assert description.global_stores == ()


def test_the_store_is_not_logged_and_its_source_reads_from_the_start() -> None:
    internal = prices_topology()._internal
    assert internal.stores["prices"].logged is False
    assert internal.source_changelogs == {"prices": "prices"}
    source = internal.nodes["prices-source"]
    assert isinstance(source, SourceDef)
    assert source.offset_reset == AutoOffsetReset.earliest()


class _AlwaysLogged(StoreBuilder):
    """A builder that ignores ``with_logging_disabled``."""

    def with_logging_disabled(self) -> StoreBuilder:
        return self


@pytest.mark.parametrize(
    ("add", "match"),
    [
        (
            lambda t: t.add_read_only_state_store(
                Stores.window_store_builder(
                    Stores.persistent_window_store("prices", 60_000, 1_000), S, S
                ),
                "src",
                "prices",
                "proc",
                PriceUpdater,
            ),
            "must be a key-value store",
        ),
        (
            lambda t: t.add_read_only_state_store(
                Stores.persistent_key_value_store("prices"), "src", "prices", "proc", PriceUpdater
            ),
            "expected a StoreBuilder",
        ),
        (
            lambda t: t.add_read_only_state_store(
                _AlwaysLogged(Stores.persistent_key_value_store("prices"), S, S),
                "src",
                "prices",
                "proc",
                PriceUpdater,
            ),
            "cannot disable logging",
        ),
        (
            lambda t: t.add_read_only_state_store(builder(), "src", "prices", "src", PriceUpdater),
            "need different names",
        ),
        (
            lambda t: t.add_read_only_state_store(
                builder(), "taken", "prices", "proc", PriceUpdater
            ),
            "a node named 'taken' was already added",
        ),
        (
            lambda t: t.add_read_only_state_store(
                builder(), "src", "prices", "taken", PriceUpdater
            ),
            "a node named 'taken' was already added",
        ),
        (
            lambda t: t.add_read_only_state_store(
                builder(), "src", "taken-topic", "proc", PriceUpdater
            ),
            "topic 'taken-topic' is already read by source 'taken'",
        ),
        (
            lambda t: t.add_read_only_state_store(
                Stores.key_value_store_builder(Stores.in_memory_key_value_store("used"), S, S),
                "src",
                "prices",
                "proc",
                PriceUpdater,
            ),
            "a state store named 'used' was already added",
        ),
        (
            lambda t: t.add_read_only_state_store(builder(), "src", "prices", "proc", "nope"),
            "needs a supplier",
        ),
    ],
)
def test_refused_stores_leave_the_topology_as_it_was(add: Any, match: str) -> None:
    topology = (
        Topology()
        .add_source("taken", "taken-topic")
        .add_processor("worker", PriceUpdater, "taken")
        .add_state_store(
            Stores.key_value_store_builder(Stores.in_memory_key_value_store("used"), S, S),
            "worker",
        )
    )
    before = str(topology.describe())
    with pytest.raises(TopologyError, match=match):
        add(topology)
    assert str(topology.describe()) == before
    assert topology._internal.source_changelogs == {}


def test_a_second_read_only_store_of_the_same_name_is_refused() -> None:
    topology = prices_topology()
    with pytest.raises(TopologyError, match="a state store named 'prices' was already added"):
        topology.add_read_only_state_store(builder(), "src2", "prices2", "proc2", PriceUpdater)


# --- on the embedded log: restoring from the topic ------------------------------------
@pytest.fixture
def prices_log(log: EmbeddedLog) -> EmbeddedLog:
    log.create_topic("prices", partitions=2)
    return log


def produce(log: EmbeddedLog, records: Records) -> None:
    with log.producer() as producer:
        for i, (key, value) in enumerate(records):
            producer.produce("prices", key, value, timestamp=1_000 + i)


def prices(count: int, start: int = 0) -> Records:
    return [(f"k{i}".encode(), f"v{i}".encode()) for i in range(start, start + count)]


def run(
    log_path: str,
    topology: Topology,
    listener: StateRestoreListener | None = None,
    timestamped: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs to the end; the store's contents (by interactive query) and the
    restored and processed record counts."""
    config = {
        "application.id": APP,
        "bootstrap.servers": f"embedded:{log_path}",
        # The source of a read-only store reads from the start regardless.
        "auto.offset.reset": "latest",
    }
    app = KafkaStreams(topology, config)
    if listener is not None:
        app.set_global_state_restore_listener(listener)
    with app:
        app.run_until_end(timeout=120)
        contents = {kv.key: kv.value for kv in app.store("prices", timestamped=timestamped).all()}
        metrics = app.metrics()
        counts = {
            "restored": metrics["restored-records"],
            "processed": metrics["records-processed"],
        }
    return contents, counts


def delete_local_state(log_path: str) -> None:
    state = Path(log_path) / ".state" / APP
    assert sorted(p.parent.name for p in state.glob("*/prices")) == ["0_0", "0_1"]
    shutil.rmtree(state)


def expected(records: Records) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in records:
        if key is None:
            continue
        if value is None:
            out.pop(key.decode(), None)
        else:
            out[key.decode()] = value.decode()
    return out


def test_no_changelog_topic_is_made_and_records_before_the_start_are_read(
    prices_log: EmbeddedLog, log_path: str
) -> None:
    produce(prices_log, prices(20))
    contents, counts = run(log_path, prices_topology())
    assert contents == expected(prices(20))
    assert counts == {"restored": 0, "processed": 20}
    assert prices_log.topics() == ["prices"]


def test_reopened_persistent_stores_need_no_restore(prices_log: EmbeddedLog, log_path: str) -> None:
    produce(prices_log, prices(20))
    run(log_path, prices_topology())
    produce(prices_log, prices(5, start=20))
    PUT.clear()
    contents, counts = run(log_path, prices_topology())
    assert contents == expected(prices(25))
    assert counts == {"restored": 0, "processed": 5}
    assert sorted(PUT) == [(f"k{i}", f"v{i}") for i in range(20, 25)]


def test_deleted_local_state_is_restored_from_the_topic_up_to_the_committed_offset(
    prices_log: EmbeddedLog, log_path: str
) -> None:
    first = [*prices(30), (b"k3", None), (b"k4", b"again")]
    produce(prices_log, first)
    run(log_path, prices_topology())
    delete_local_state(log_path)
    # Records after the committed offsets are processed, not restored.
    later: Records = [(b"k5", b"later"), (b"k40", b"v40")]
    produce(prices_log, later)
    PUT.clear()
    contents, counts = run(log_path, prices_topology())
    assert contents == expected(first + later)
    assert counts == {"restored": len(first), "processed": len(later)}
    assert sorted(PUT) == [("k40", "v40"), ("k5", "later")]


def test_the_restore_puts_the_topics_records_as_they_are(
    prices_log: EmbeddedLog, log_path: str
) -> None:
    """Kafka restores a source-changelog store from the topic's bytes: what
    the processor changed in them comes back as it was on the topic."""
    produce(prices_log, [(b"a", b"x"), (b"b", b"y")])
    contents, _ = run(log_path, prices_topology(UpperPriceUpdater))
    assert contents == {"a": "X", "b": "Y"}
    delete_local_state(log_path)
    contents, counts = run(log_path, prices_topology(UpperPriceUpdater))
    assert contents == {"a": "x", "b": "y"}
    assert counts == {"restored": 2, "processed": 0}


def test_in_memory_stores_are_rebuilt_from_the_topic_skipping_records_without_a_key(
    prices_log: EmbeddedLog, log_path: str
) -> None:
    records = [*prices(10), (None, b"no key"), (b"k1", None)]
    produce(prices_log, records)
    topology = prices_topology(store=builder(persistent=False))
    contents, counts = run(log_path, topology)
    assert contents == expected(records)
    assert counts == {"restored": 0, "processed": 12}
    assert not list((Path(log_path) / ".state" / APP).glob("*/prices"))
    PUT.clear()
    contents, counts = run(log_path, prices_topology(store=builder(persistent=False)))
    assert contents == expected(records)
    # The record without a key is not restored; the tombstone is.
    assert counts == {"restored": 11, "processed": 0}
    assert PUT == []


def test_a_timestamped_store_is_restored_with_the_records_timestamps(
    prices_log: EmbeddedLog, log_path: str
) -> None:
    produce(prices_log, prices(4))

    def topology() -> Topology:
        return prices_topology(StampedPriceUpdater, builder(timestamped=True))

    contents, _ = run(log_path, topology(), timestamped=True)
    stamped = {f"k{i}": (f"v{i}", 1_000 + i) for i in range(4)}
    assert contents == stamped
    delete_local_state(log_path)
    contents, counts = run(log_path, topology(), timestamped=True)
    assert contents == stamped
    assert counts == {"restored": 4, "processed": 0}


def test_the_restore_listener_hears_the_source_topic_partitions(
    prices_log: EmbeddedLog, log_path: str
) -> None:
    produce(prices_log, prices(12))
    run(log_path, prices_topology())
    ends = prices_log.end_offsets("prices")
    assert all(ends.values())
    delete_local_state(log_path)
    produce(prices_log, prices(3, start=12))  # not restored: processed
    listener = Recorder()
    run(log_path, prices_topology(), listener)
    calls = []
    for partition, end in sorted(ends.items()):
        tp = ("prices", partition)
        calls += [
            ("start", tp, "prices", 0, end),
            ("batch", tp, "prices", end - 1, end),
            ("end", tp, "prices", end),
        ]
    assert listener.calls == calls
