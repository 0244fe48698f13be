"""``Stores.lru_map``: Kafka's MemoryNavigableLRUCache under its change-logging
layer. At most ``max_cache_size`` entries, the least recently used evicted
(gets and puts are uses, scans are not), each eviction logged as a tombstone
before the put that caused it, so a restore from the changelog keeps exactly
what the store kept."""

from __future__ import annotations

from typing import Any

import pytest

from strom import KafkaStreams, KeyValue, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import InvalidStateStoreError, TopologyError
from strom.processor import Processor, ProcessorContext, Record
from strom.state.internals.lru import LruBytesStore
from strom.state.stores import Stores
from strom.testing import TopologyTestDriver

S = serdes.String()


def changelog(store: LruBytesStore) -> list[tuple[bytes, bytes | None, int]]:
    return list(zip(*store.take_changelog(), strict=True))


def keys(store: LruBytesStore) -> list[bytes]:
    return [k for k, _ in store.range()]


def test_the_least_recently_used_key_is_evicted_and_logged_before_the_put() -> None:
    store = LruBytesStore(2)
    store.enable_changelog()
    store.put(b"a", b"1", 1)
    store.put(b"b", b"2", 2)
    assert store.get(b"a") == b"1"  # a use: b is now the eldest
    assert store.range() == [(b"a", b"1"), (b"b", b"2")]  # a scan is no use
    store.put(b"c", b"3", 3)
    assert keys(store) == [b"a", b"c"]
    assert changelog(store) == [
        (b"a", b"1", 1),
        (b"b", b"2", 2),
        (b"b", None, 3),  # the eviction, stamped with the put's time, before it
        (b"c", b"3", 3),
    ]
    store.put(b"a", b"4", 4)  # an update is a use and evicts nothing
    store.put(b"d", b"5", 5)
    assert keys(store) == [b"a", b"d"]
    assert changelog(store) == [(b"a", b"4", 4), (b"c", None, 5), (b"d", b"5", 5)]
    assert len(store) == store.approximate_num_entries() == 2


def test_put_if_absent_put_all_and_delete_log_as_kafkas_layers_do() -> None:
    store = LruBytesStore(2)
    store.enable_changelog()
    store.put_all([b"a", b"b"], [b"1", b"2"], 1)
    assert store.put_if_absent(b"a", b"9", 2) == b"1"  # a read: a is used
    assert store.put_if_absent(b"c", b"3", 3) is None  # evicts b
    # put_all: its evictions as they happen, then its entries.
    store.put_all([b"d", b"e"], [b"4", b"5"], 4)
    assert keys(store) == [b"d", b"e"]
    assert store.delete(b"x", 5) is None  # absent, still logged
    assert store.delete(b"d", 6) == b"4"
    assert changelog(store) == [
        (b"a", b"1", 1),
        (b"b", b"2", 1),
        (b"b", None, 3),
        (b"c", b"3", 3),
        (b"a", None, 4),
        (b"c", None, 4),
        (b"d", b"4", 4),
        (b"e", b"5", 4),
        (b"x", None, 5),
        (b"d", None, 6),
    ]
    store.put(b"e", None, 7)  # a None value deletes
    assert keys(store) == []


def test_a_store_of_size_zero_keeps_nothing() -> None:
    store = LruBytesStore(0)
    store.enable_changelog()
    store.put(b"a", b"1", 1)
    assert store.get(b"a") is None and len(store) == 0
    # As Kafka: the new entry is the eldest, evicted (and logged) at once.
    assert changelog(store) == [(b"a", None, 1), (b"a", b"1", 1)]


def test_replaying_the_changelog_keeps_what_the_store_kept() -> None:
    """Reads reorder the keys but are not logged: the eviction tombstones,
    logged before their puts, make the replay end with the same keys."""
    live = LruBytesStore(3)
    live.enable_changelog()
    for i in range(40):
        live.put(f"k{i % 7}".encode(), str(i).encode(), i)
        live.get(f"k{(i * 3) % 7}".encode())
    restored = LruBytesStore(3)
    logged_keys, logged_values, _ = live.take_changelog()
    restored.restore(logged_keys, logged_values)
    assert restored.range() == live.range()
    assert restored.take_changelog() == ([], [], [])  # a restore logs nothing


def test_lru_map_is_checked_like_kafkas() -> None:
    supplier = Stores.lru_map("lru", 5)
    assert (supplier.kind, supplier.persistent, supplier.max_cache_size) == ("lru", False, 5)
    with pytest.raises(TopologyError, match="cannot be negative"):
        Stores.lru_map("lru", -1)
    with pytest.raises(TopologyError, match="must be an int"):
        Stores.lru_map("lru", 2.5)  # type: ignore[arg-type]
    builder = Stores.key_value_store_builder(supplier, S, S)
    with pytest.raises(TopologyError, match="no record cache"):
        builder.with_caching_enabled()
    with pytest.raises(TopologyError, match=r"use Stores\.key_value_store_builder"):
        Stores.window_store_builder(supplier, S, S)


class Cache(Processor[str, str]):
    """A value "?" reads the key (a use); any other value is put; each
    record forwards what the store holds then, as ``key=value`` pairs."""

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store("lru")

    def process(self, record: Record[str, str]) -> None:
        if record.value == "?":
            self.store.get(record.key)
        else:
            self.store.put(record.key, record.value)
        held = ",".join(f"{kv.key}={kv.value}" for kv in self.store.all())
        self.context.forward(record.with_value(held))


def lru_topology() -> Topology:
    return (
        Topology()
        .add_source("in", "in", key_serde=S, value_serde=S)
        .add_processor("cache", Cache, "in")
        .add_state_store(Stores.key_value_store_builder(Stores.lru_map("lru", 2), S, S), "cache")
        .add_sink("out", "out", "cache", key_serde=S, value_serde=S)
    )


def test_an_lru_map_in_the_test_driver() -> None:
    with TopologyTestDriver(lru_topology()) as driver:
        src = driver.create_input_topic("in", S, S)
        out = driver.create_output_topic("out", S, S)
        src.pipe_key_value_list([("a", "1"), ("b", "2"), ("a", "?"), ("c", "3"), ("d", "4")])
        assert out.read_values_to_list() == ["a=1", "a=1,b=2", "a=1,b=2", "a=1,c=3", "c=3,d=4"]
        store = driver.get_key_value_store("lru")
        assert list(store.all()) == [KeyValue("c", "3"), KeyValue("d", "4")]
        assert store.approximate_num_entries() == 2
        assert "topology-test-driver-lru-changelog" in driver.produced_topic_names()


def test_a_restart_on_the_embedded_log_restores_the_lru_map_and_its_evictions(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic("in")
    log.create_topic("out")
    config: dict[str, Any] = {"application.id": "lru", "bootstrap.servers": f"embedded:{log_path}"}

    def produce(*records: tuple[str, str]) -> None:
        with log.producer(S, S) as producer:
            for key, value in records:
                producer.produce("in", key, value, timestamp=10)

    # Reading a makes b the eldest: c evicts b, not a.
    produce(("a", "1"), ("b", "2"), ("a", "?"), ("c", "3"))
    with KafkaStreams(lru_topology(), config) as app:
        app.run_until_end(timeout=60)
        assert dict(app.store("lru").all()) == {"a": "1", "c": "3"}
        with pytest.raises(InvalidStateStoreError, match="lru store that keeps no timestamps"):
            app.store("lru", timestamped=True)
    stored = [
        (r.key, r.value, r.timestamp)
        for r in log.records("lru-lru-changelog", key_serde=S, value_serde=S)
    ]
    assert stored == [("a", "1", 10), ("b", "2", 10), ("b", None, 10), ("c", "3", 10)]
    # The in-memory store is rebuilt from its changelog: the same two keys,
    # in the changelog's order of use (a, then c), so d evicts a.
    produce(("d", "4"))
    with KafkaStreams(lru_topology(), config) as app:
        app.run_until_end(timeout=60)
        assert dict(app.store("lru").all()) == {"c": "3", "d": "4"}
    outputs = [r.value for r in log.records("out", key_serde=S, value_serde=S)]
    assert outputs == ["a=1", "a=1,b=2", "a=1,b=2", "a=1,c=3", "c=3,d=4"]
