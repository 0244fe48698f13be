"""The versioned key-value store (Kafka's VersionedKeyValueStore, KIP-889).
The cases and their expected results are those of Kafka's
RocksDBVersionedStoreTest (history retention 300 s, segment interval 100 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strom import KafkaStreams, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.processor import Processor, ProcessorContext, Record
from strom.query import MultiVersionedKeyQuery, StateQueryRequest, VersionedKeyQuery
from strom.state import Stores, VersionedKeyValueStore, VersionedRecord
from strom.state.versioned import NOT_PUT, VALID_TO_UNDEFINED, VersionedBytesStore
from strom.testing import TopologyTestDriver

S = serdes.String()
HISTORY = 300_000
SEGMENT = HISTORY // 3
BASE = 10


def store(history: int = HISTORY) -> VersionedKeyValueStore[str, str]:
    native, _ = VersionedBytesStore.open(None, history)
    return VersionedKeyValueStore("versioned", S, S, native=native)


def at(s: VersionedKeyValueStore[str, str], key: str, as_of: int) -> Any:
    found = s.get(key, as_of)
    return None if found is None else (found.value, found.timestamp, found.valid_to)


def test_put_latest() -> None:
    s = store()
    assert s.put("k", "v", BASE) == VALID_TO_UNDEFINED
    assert s.put("k", "v2", BASE + 1) == VALID_TO_UNDEFINED
    assert s.get("k") == VersionedRecord("v2", BASE + 1)
    assert at(s, "k", BASE) == ("v", BASE, BASE + 1)
    assert at(s, "k", BASE + 2) == ("v2", BASE + 1, None)


def test_put_older_versions_returns_when_they_stop_being_valid() -> None:
    s = store()
    assert s.put("k", "v", BASE) == VALID_TO_UNDEFINED
    assert s.put("k", "v2", BASE - 2) == BASE
    assert s.put("k", "v1", BASE - 1) == BASE
    assert s.put("k", "v4", BASE - 4) == BASE - 2
    assert at(s, "k", BASE - 1) == ("v1", BASE - 1, BASE)
    assert at(s, "k", BASE - 2) == ("v2", BASE - 2, BASE - 1)
    assert at(s, "k", BASE - 3) == ("v4", BASE - 4, BASE - 2)


def test_tombstones_are_versions() -> None:
    # shouldPutOlderNullWithNonNullLatest
    s = store()
    s.put("k", "v", BASE)
    for value, ts, valid_to in [
        (None, BASE - 2, BASE),
        (None, BASE - 1, BASE),
        (None, BASE - 4, BASE - 2),
        ("v5", BASE - 5, BASE - 4),
        ("v3", BASE - 3, BASE - 2),
        (None, BASE - 6, BASE - 5),
    ]:
        assert s.put("k", value, ts) == valid_to
    assert at(s, "k", BASE) == ("v", BASE, None)
    assert at(s, "k", BASE - 1) is None
    assert at(s, "k", BASE - 3) == ("v3", BASE - 3, BASE - 2)
    assert at(s, "k", BASE - 4) is None
    assert at(s, "k", BASE - 5) == ("v5", BASE - 5, BASE - 4)
    assert at(s, "k", BASE - 6) is None


def test_delete_returns_what_was_valid() -> None:
    s = store()
    s.put("k", "vp20", SEGMENT + 20)
    s.put("k", "vp10", SEGMENT + 10)
    s.put("k", "vn10", SEGMENT - 10)
    s.put("k", "vn2", SEGMENT - 2)
    assert s.delete("k", SEGMENT - 5) == VersionedRecord("vn10", SEGMENT - 10, SEGMENT - 2)
    assert s.delete("k", SEGMENT + 10) == VersionedRecord("vp10", SEGMENT + 10, SEGMENT + 20)
    assert s.delete("k", SEGMENT + 10) is None
    assert s.delete("k", SEGMENT + 25) == VersionedRecord("vp20", SEGMENT + 20, None)


def test_puts_and_deletes_older_than_the_history_do_nothing() -> None:
    s = store()
    s.put("k", "v", HISTORY + 10)
    assert s.put("k1", "v1", 10) == VALID_TO_UNDEFINED
    assert s.put("k2", "v2", 9) == NOT_PUT
    assert s.get("k2") is None
    t = store()
    t.put("k2", "v2", 1)
    t.put("other", "x", HISTORY + 10)
    assert t.delete("k2", 9) is None
    assert t.get("k2") == VersionedRecord("v2", 1)


def test_reads_older_than_the_history_find_only_the_latest() -> None:
    # shouldNotGetExpired and shouldGetExpiredIfLatestValue
    s = store()
    s.put("k", "v_old", 0)
    s.put("k", "v", SEGMENT - 10)
    s.put("ko", "vo", HISTORY + SEGMENT - 11)
    assert at(s, "k", SEGMENT - 11) == ("v_old", 0, SEGMENT - 10)
    s.put("ko", "vo2", HISTORY + SEGMENT - 10)
    assert at(s, "k", SEGMENT - 11) is None
    t = store()
    t.put("k", "v", 1)
    t.put("ko", "vo_old", 1)
    t.put("ko", "vo_new", HISTORY + 12)
    assert at(t, "k", 10) == ("v", 1, None)
    assert at(t, "ko", 10) is None
    assert [r.value for r in t.versions("k", 0, 10)] == ["v"]
    assert t.versions("ko", 0, 10) == []


def test_zero_history_retention() -> None:
    s = store(0)
    assert s.put("k", "v", BASE) == VALID_TO_UNDEFINED
    assert at(s, "k", BASE + 1) == ("v", BASE, None)
    s.put("k", "updated", BASE)
    assert s.get("k") == VersionedRecord("updated", BASE)
    s.put("k", "v2", BASE + 2)
    assert at(s, "k", BASE + 1) is None
    s.delete("k", BASE + 3)
    assert s.get("k") is None
    assert s.put("k2", "v", BASE + 2) == NOT_PUT


def test_versions_in_a_time_range() -> None:
    s = store()
    for value, ts in [("v1", SEGMENT - 30), ("v2", SEGMENT - 25), ("v3", SEGMENT - 10)]:
        s.put("k", value, ts)
    s.put("k", "v4", SEGMENT - 5)
    found = s.versions("k", SEGMENT - 30, SEGMENT - 5)
    assert [(r.value, r.timestamp, r.valid_to) for r in found] == [
        ("v1", SEGMENT - 30, SEGMENT - 25),
        ("v2", SEGMENT - 25, SEGMENT - 10),
        ("v3", SEGMENT - 10, SEGMENT - 5),
        ("v4", SEGMENT - 5, None),
    ]
    assert [r.value for r in s.versions("k", SEGMENT - 9, SEGMENT - 6)] == ["v3"]


def test_a_versioned_builder_refuses_caching() -> None:
    supplier = Stores.persistent_versioned_key_value_store("v", HISTORY)
    builder = Stores.versioned_key_value_store_builder(supplier, S, S)
    with pytest.raises(TopologyError, match="caching"):
        builder.with_caching_enabled()
    with pytest.raises(TopologyError, match="versioned store"):
        Stores.key_value_store_builder(supplier, S, S)


class Recorder(Processor[str, str]):
    """Puts each record as a version at its timestamp; a value "del" deletes."""

    def init(self, context: ProcessorContext) -> None:
        self.store: VersionedKeyValueStore[str, str] = context.get_state_store("prices")

    def process(self, record: Record[str, str]) -> None:
        if record.value == "del":
            self.store.delete(record.key, record.timestamp)
        else:
            self.store.put(record.key, record.value, record.timestamp)


def topology() -> Topology:
    topology = Topology()
    topology.add_source("src", "prices", key_serde=S, value_serde=S)
    topology.add_processor("rec", Recorder, "src")
    supplier = Stores.persistent_versioned_key_value_store("prices", 60_000)
    topology.add_state_store(Stores.versioned_key_value_store_builder(supplier, S, S), "rec")
    return topology


def test_processors_use_it_and_the_driver_reads_it() -> None:
    with TopologyTestDriver(topology()) as driver:
        src = driver.create_input_topic("prices", S, S)
        src.pipe_input("apple", "1.00", 1_000)
        src.pipe_input("apple", "1.20", 5_000)
        src.pipe_input("apple", "0.90", 3_000)  # out of order: an older version
        src.pipe_input("apple", "del", 7_000)
        prices = driver.get_versioned_key_value_store("prices")
        assert prices.get("apple") is None
        assert prices.get("apple", 4_000) == VersionedRecord("0.90", 3_000, 5_000)
        assert prices.get("apple", 6_000) == VersionedRecord("1.20", 5_000, 7_000)


def apple_prices(tmp_path: Path) -> EmbeddedLog:
    """An embedded log with three prices of one key, one out of order."""
    log = EmbeddedLog(str(tmp_path / "log"))
    log.create_topic("prices")
    with log.producer(S, S) as producer:
        for value, ts in [("1.00", 1_000), ("1.20", 5_000), ("0.90", 3_000)]:
            producer.produce("prices", "apple", value, timestamp=ts)
    return log


def app(tmp_path: Path, app_id: str, state: str) -> KafkaStreams:
    props = {
        "application.id": app_id,
        "bootstrap.servers": f"embedded:{tmp_path / 'log'}",
        "state.dir": str(tmp_path / state),
    }
    return KafkaStreams(topology(), props)


def test_it_is_restored_from_its_changelog(tmp_path: Path) -> None:
    """The changelog holds each put at its version's timestamp; a new
    instance without local state replays it into the same versions."""
    log = apple_prices(tmp_path)
    with app(tmp_path, "versioned", "first") as first:
        first.run_until_end(timeout=30)
    changelog = [
        (r.key, r.value, r.timestamp) for r in log.read("versioned-prices-changelog", 0, 0, 10)
    ]
    assert changelog == [
        (b"apple", b"1.00", 1_000),
        (b"apple", b"1.20", 5_000),
        (b"apple", b"0.90", 3_000),
    ]
    with app(tmp_path, "versioned", "second") as second:
        second.run_until_end(timeout=30)
        seen = second.store("prices").versions("apple")
        assert second.store("prices").get("apple", 4_000) == VersionedRecord("0.90", 3_000, 5_000)
    assert [(r.value, r.timestamp, r.valid_to) for r in seen] == [
        ("1.00", 1_000, 3_000),
        ("0.90", 3_000, 5_000),
        ("1.20", 5_000, None),
    ]


def test_interactive_queries_v2_read_versions(tmp_path: Path) -> None:
    apple_prices(tmp_path)
    with app(tmp_path, "versioned-iq", "state") as running:
        running.run_until_end(timeout=30)
        in_store = StateQueryRequest.in_store("prices")
        latest = running.query(in_store.with_query(VersionedKeyQuery.with_key("apple")))
        assert latest.get_only_partition_result().get_result() == VersionedRecord("1.20", 5_000)
        then = running.query(in_store.with_query(VersionedKeyQuery.with_key("apple").as_of(3_500)))
        assert then.get_only_partition_result().get_result() == VersionedRecord(
            "0.90", 3_000, 5_000
        )
        query = MultiVersionedKeyQuery.with_key("apple").from_time(2_000).to_time(4_000)
        newest_first = running.query(in_store.with_query(query))
        records = list(newest_first.get_only_partition_result().get_result())
        assert [r.value for r in records] == ["0.90", "1.00"]
        ascending = running.query(in_store.with_query(query.with_ascending_timestamps()))
        assert [r.value for r in ascending.get_only_partition_result().get_result()] == [
            "1.00",
            "0.90",
        ]
