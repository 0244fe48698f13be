"""Tables and aggregations update their stores a batch at a time (one native
call to read the old values, one to write the new ones) yet must give what
Kafka Streams' record-at-a-time processing gives: the same output records,
changelog records and store contents, with the record cache evicting and
flushing exactly where puts one by one would make it. Each workload runs
twice on the embedded log, batched and forced record by record, over
batches with repeated keys, tombstones and a cache small enough to evict."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.errors import SerializationError, StromError
from strom.kstream import Materialized
from strom.kstream.internals import table_processors

S, L, J = serdes.String(), serdes.Long(), serdes.Json()
RECORDS = 3_000


def _input(tombstones: bool) -> list[tuple[bytes, bytes | None, int]]:
    rng = random.Random(7)
    out = []
    for i in range(RECORDS):
        key = f"k{rng.randrange(40)}".encode()
        value = None if tombstones and rng.random() < 0.1 else L.serialize("in", rng.randrange(50))
        # Timestamps out of order, so the latest-timestamp rule matters.
        out.append((key, value, 1_000 + i * 10 - rng.randrange(200)))
    return out


def table(b: StreamsBuilder, m: Materialized) -> None:
    b.table("in", key_serde=S, value_serde=L, materialized=m).to_stream().to(
        "out", key_serde=S, value_serde=L
    )


def reduce(b: StreamsBuilder, m: Materialized) -> None:
    b.stream("in", key_serde=S, value_serde=L).group_by_key().reduce(
        lambda agg, v: agg + v, m
    ).to_stream().to("out", key_serde=S, value_serde=L)


def mutable_aggregate(b: StreamsBuilder, m: Materialized) -> None:
    # The aggregate is a list changed in place: a record whose key came
    # earlier in the batch must still see the stored value, not that object.
    def add(_key: Any, value: int, agg: list[int]) -> list[int]:
        agg.append(value)
        del agg[:-3]
        return agg

    b.stream("in", key_serde=S, value_serde=L).group_by_key().aggregate(
        list, add, Materialized("store", value_serde=J, caching=m.caching)
    ).to_stream().to("out", key_serde=S, value_serde=J)


def table_count(b: StreamsBuilder, m: Materialized) -> None:
    source = b.table("in", key_serde=S, value_serde=L, materialized=Materialized("source"))
    source.group_by(lambda k, v: (f"g{v % 7}", v), key_serde=S, value_serde=L).count(
        m
    ).to_stream().to("out", key_serde=S, value_serde=L)


def table_reduce(b: StreamsBuilder, m: Materialized) -> None:
    source = b.table(
        "in", key_serde=S, value_serde=L, materialized=Materialized("source", caching=m.caching)
    )
    source.group_by(lambda k, v: (f"g{v % 5}", v), key_serde=S, value_serde=L).reduce(
        lambda agg, v: agg + v, lambda agg, v: agg - v, m
    ).to_stream().to("out", key_serde=S, value_serde=L)


def stream_count(b: StreamsBuilder, m: Materialized) -> None:
    b.stream("in", key_serde=S, value_serde=L).group_by_key().count(m).to_stream().to(
        "out", key_serde=S, value_serde=L
    )


def stream_count_by_aggregate(b: StreamsBuilder, m: Materialized) -> None:
    # count() spelled as an aggregate: the reference for its native kernel.
    b.stream("in", key_serde=S, value_serde=L).group_by_key().aggregate(
        lambda: 0,
        lambda _k, _v, agg: agg + 1,
        Materialized("store", value_serde=L, caching=m.caching),
    ).to_stream().to("out", key_serde=S, value_serde=L)


WORKLOADS: dict[str, tuple[Callable[[StreamsBuilder, Materialized], None], bool]] = {
    "table": (table, True),
    "reduce": (reduce, False),
    "mutable_aggregate": (mutable_aggregate, False),
    "table_count": (table_count, True),
    "table_reduce": (table_reduce, True),
    "stream_count": (stream_count, False),
    "stream_count_by_aggregate": (stream_count_by_aggregate, False),
}


def _run(path: Path, workload: str, cache_bytes: int | None) -> dict[str, Any]:
    build, tombstones = WORKLOADS[workload]
    log = EmbeddedLog(str(path))
    log.create_topic("in")
    log.create_topic("out")
    with log.producer() as producer:
        producer.produce_batch("in", _input(tombstones))
    b = StreamsBuilder()
    build(b, Materialized("store", caching=cache_bytes is not None))
    props = {
        "application.id": "batches",
        "bootstrap.servers": f"embedded:{path}",
        "commit.interval.ms": 3_600_000,
        "poll.max.records": 700,
        "statestore.cache.max.bytes": cache_bytes or 0,
    }
    with KafkaStreams(b.build(), props) as app:
        app.run_until_end(timeout=60)
        store = [(kv.key, kv.value) for kv in app.store("store").all()]

    def records(topic: str) -> list[Any]:
        end = log.end_offsets(topic)[0]
        return [(r.key, r.value, r.timestamp) for r in log.read(topic, 0, 0, end + 1)]

    return {
        "out": records("out"),
        "changelog": records("batches-store-changelog"),
        "store": store,
    }


def _one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forces the record-by-record path (the nodes take it when a batch's
    keys cannot be serialized together)."""

    def refuse(self: Any, keys: list[Any]) -> list[bytes]:
        raise ValueError("record by record")

    monkeypatch.setattr(table_processors._StoreNode, "_raw_keys", refuse)


@pytest.mark.parametrize("workload", sorted(set(WORKLOADS) - {"stream_count"}))
@pytest.mark.parametrize("cache_bytes", [None, 0, 1_500, 10_000_000])
def test_batches_give_what_records_one_by_one_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workload: str, cache_bytes: int | None
) -> None:
    batched = _run(tmp_path / "batched", workload, cache_bytes)
    with monkeypatch.context() as patch:
        _one_by_one(patch)
        one_by_one = _run(tmp_path / "one-by-one", workload, cache_bytes)
    assert batched["out"], "the workload produced output"
    assert batched == one_by_one
    if cache_bytes == 1_500:
        # Evictions flushed before the final commit: more than one emission per key.
        assert len(batched["out"]) > len(batched["store"])


def _raise_on_six(agg: int, value: int) -> int:
    if value == 6:
        raise ValueError("no sixes")
    return agg + value


def _text_on_six(agg: int, value: int) -> Any:
    return "six" if value == 6 else agg + value


@pytest.mark.parametrize("cache_bytes", [None, 0, 1_500, 10_000_000])
def test_the_count_kernel_gives_what_an_aggregate_one_by_one_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_bytes: int | None
) -> None:
    native = _run(tmp_path / "native", "stream_count", cache_bytes)
    with monkeypatch.context() as patch:
        _one_by_one(patch)
        one_by_one = _run(tmp_path / "one-by-one", "stream_count_by_aggregate", cache_bytes)
    assert native["out"], "the workload produced output"
    assert native["out"] == one_by_one["out"]
    assert native["store"] == one_by_one["store"]
    # Uncached (a 0-byte cache is none), the count kernel logs each count with
    # its result timestamp (as Kafka's timestamped stores log), the general
    # path with the record's.
    assert [r[:2] for r in native["changelog"]] == [r[:2] for r in one_by_one["changelog"]]
    if cache_bytes:
        assert native["changelog"] == one_by_one["changelog"]


@pytest.mark.parametrize("adder", [_raise_on_six, _text_on_six])
def test_a_failing_record_is_named_as_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adder: Callable[[int, int], Any]
) -> None:
    def run(path: Path) -> str:
        log = EmbeddedLog(str(path))
        log.create_topic("in")
        log.create_topic("out")
        with log.producer() as producer:
            records = [(f"k{i % 3}".encode(), L.serialize("in", i), i) for i in range(10)]
            producer.produce_batch("in", records)
        b = StreamsBuilder()
        b.stream("in", key_serde=S, value_serde=L).group_by_key().reduce(
            adder, Materialized("store", caching=False)
        ).to_stream().to("out", key_serde=S, value_serde=L)
        props = {"application.id": "fail", "bootstrap.servers": f"embedded:{path}"}
        app = KafkaStreams(b.build(), props)
        with pytest.raises(StromError) as raised:
            app.run_until_end(timeout=60)
        app.close()
        return str(raised.value)

    batched = run(tmp_path / "batched")
    _one_by_one(monkeypatch)
    assert batched == run(tmp_path / "one-by-one")
    assert "in-0@6" in batched, batched


def test_table_changes_frame_the_same_in_batches_as_one_by_one() -> None:
    change = table_processors.ChangeSerde(S)
    data: list[Any] = [("a", "b"), (None, "old"), ("new", None), ("", ""), (None, None)]
    one_by_one = [change.serialize("t", d) for d in data]
    assert change.serialize_batch("t", data) == one_by_one
    assert change.deserialize_batch("t", one_by_one) == data
    # A length past the end and unknown flag bits decode as slicing would.
    odd = [b"\x07\x00\x00\x00\x09abc", b"\x02\x00\x00\x00\x01xyz", None]
    assert change.deserialize_batch("t", odd) == [change.deserialize("t", d) for d in odd]
    with pytest.raises(SerializationError, match="needs 5 bytes, got 2"):
        change.deserialize_batch("t", [b"\x01\x00\x00\x00\x00", b"\x01\x00"])
