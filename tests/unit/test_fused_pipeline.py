"""The fused native path: a sub-topology whose steps from its source to its
sink are all expressions over JSON runs each batch read from the embedded
log in one native call. What it writes, commits and counts equals what the
ordinary nodes (and the lambda version of the app) do; a batch holding a
bad record takes the ordinary path, which routes exactly that record to its
handler and processes the rest."""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from strom import StreamsBuilder, Topology, col, serdes, struct
from strom._core import ExprPipeline, RecordBatch
from strom.config import StreamsConfig
from strom.embedded import EmbeddedLog
from strom.embedded.runtime import EmbeddedRuntime

S, J = serdes.String(), serdes.Json()
MODULUS = 3


def expressions(b: StreamsBuilder, out: str) -> None:
    (
        b.stream("bids", key_serde=S, value_serde=J)
        .filter(col("auction") % MODULUS == 0)
        .map_values(struct(auction=col("auction"), price=col("price") * 89 // 100))
        .to(out, key_serde=S, value_serde=J)
    )


def lambdas(b: StreamsBuilder, out: str) -> None:
    (
        b.stream("bids", key_serde=S, value_serde=J)
        .filter(lambda _k, v: v["auction"] % MODULUS == 0)
        .map_values(lambda v: {"auction": v["auction"], "price": v["price"] * 89 // 100})
        .to(out, key_serde=S, value_serde=J)
    )


def build(app: Callable[[StreamsBuilder, str], None], out: str) -> Topology:
    b = StreamsBuilder()
    app(b, out)
    return b.build()


class Spy:
    """The task's native producer, counting the batches the fused path took
    and those it left to the ordinary path."""

    def __init__(self, native: Any) -> None:
        self.native = native
        self.taken = 0
        self.declined = 0

    def produce_fused(self, topic: str, records: RecordBatch, pipeline: ExprPipeline) -> Any:
        result = self.native.produce_fused(topic, records, pipeline)
        if result is None:
            self.declined += 1
        else:
            self.taken += 1
        return result


def run(path: Path, topology: Topology, app_id: str, **config: Any) -> tuple[dict[str, int], Spy]:
    """Runs the app to the end in batches of 10 records; its metrics, and
    the fused path's counts over every task."""
    settings = StreamsConfig(
        {
            "application.id": app_id,
            "bootstrap.servers": f"embedded:{path}",
            "poll.max.records": 10,
            **config,
        }
    )
    runtime = EmbeddedRuntime(topology._internal, settings, str(path))
    spies = []
    try:
        for task in runtime.tasks.values():
            fused = task._fused
            if fused is not None:
                spy = Spy(fused.producer)
                task._fused = dataclasses.replace(fused, producer=cast(Any, spy))
                spies.append(spy)
        runtime.run_until_end(time.monotonic() + 60)
        metrics = runtime.metrics()
    finally:
        runtime.close()
    total = Spy(cast(Any, None))
    total.taken = sum(s.taken for s in spies)
    total.declined = sum(s.declined for s in spies)
    return metrics, total


def records(path: Path, topic: str) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    with EmbeddedLog(path) as log:
        return [(r.partition, r.offset, r.key, r.value, r.timestamp) for r in log.records(topic)]


def committed(path: Path, app_id: str) -> dict[tuple[str, int], tuple[int, str]]:
    with EmbeddedLog(path) as log:
        return {k: (c.offset, c.metadata) for k, c in log.committed_offsets(app_id).items()}


def write_bids(path: Path, values: list[tuple[bytes | None, bytes | None, int]], **kw: Any) -> None:
    with EmbeddedLog(path) as log:
        log.create_topic("bids", **kw)
        for topic in ("out", "out-lambdas", "dlq"):
            log.create_topic(topic, **kw)
        with log.producer() as producer:
            for key, value, timestamp in values:
                producer.produce("bids", key, value, timestamp=timestamp)


def test_the_fused_path_writes_and_commits_what_the_lambdas_do(tmp_path: Path) -> None:
    rnd = random.Random(11)
    bids = []
    for i in range(600):
        bid = {"auction": rnd.randrange(30), "price": rnd.randrange(-50, 10**6), "s": "é😀\t"}
        if rnd.random() < 0.2:
            bid["extra"] = {"nested": [1, 2.5, None, "x"]}
        key = None if i % 50 == 0 else f"k{rnd.randrange(40)}".encode()
        # Timestamps that go back now and then (stream time must not).
        bids.append((key, json.dumps(bid).encode(), 10_000 + i - 7 * (i % 5)))
    write_bids(tmp_path, bids, partitions=3)

    native, spy = run(tmp_path, build(expressions, "out"), "native")
    python, _ = run(tmp_path, build(lambdas, "out-lambdas"), "python")

    out, expected = records(tmp_path, "out"), records(tmp_path, "out-lambdas")
    assert len(out) > 100
    assert sorted(repr(r[2:]) for r in out) == sorted(repr(r[2:]) for r in expected)
    # Null keys go round-robin from a random start: the others, in order.
    keyed = [[(p, k, v, ts) for p, _, k, v, ts in rs if k is not None] for rs in (out, expected)]
    assert keyed[0] == keyed[1]
    assert spy.taken >= len(bids) // 10 and spy.declined == 0
    assert native == python
    assert native["records-processed"] == len(bids)
    # The same offsets, each partition's time as its metadata.
    assert committed(tmp_path, "native") == committed(tmp_path, "python")
    with EmbeddedLog(tmp_path) as log:
        ends = log.end_offsets("bids")
        for p, end in ends.items():
            offset, metadata = committed(tmp_path, "native")[("bids", p)]
            stamps = [r.timestamp for r in log.records("bids") if r.partition == p]
            assert (offset, metadata) == (end, str(max(stamps)))


def test_a_batch_with_bad_records_routes_exactly_those(tmp_path: Path) -> None:
    good = [(f"k{i}".encode(), {"auction": i, "price": 100 + i}) for i in range(40)]
    rows: list[tuple[bytes | None, bytes | None, int]] = [
        (k, json.dumps(v).encode(), 1_000 + i) for i, (k, v) in enumerate(good)
    ]
    rows.insert(13, (b"bad-json", b'{"auction": ', 5))
    rows.insert(17, (b"bad-type", b'{"auction": "x", "price": 1}', 6))
    rows.insert(25, (b"\xff\xfe", b'{"auction": 3, "price": 1}', 7))
    rows.insert(33, (b"late", b'{"auction": 3, "price": 1}', -1))
    write_bids(tmp_path, rows)
    metrics, spy = run(
        tmp_path,
        build(expressions, "out"),
        "routed",
        **{
            "deserialization.exception.handler": "log_and_continue",
            "processing.exception.handler": "log_and_continue",
            "errors.dead.letter.queue.topic.name": "dlq",
        },
    )
    expected = [
        (k, b'{"auction":%d,"price":%d}' % (v["auction"], v["price"] * 89 // 100))
        for k, v in good
        if v["auction"] % MODULUS == 0
    ]
    assert [(r[2], r[3]) for r in records(tmp_path, "out")] == expected
    # The bad JSON value and the key that is not UTF-8 were skipped, the
    # record the expression fails on and the negative timestamp dropped.
    assert metrics["skipped-records"] == 2
    assert metrics["dropped-records"] == 2
    assert metrics["records-processed"] == len(rows) - 2
    dead = [r[3] for r in records(tmp_path, "dlq")]
    assert b'{"auction": ' in dead and b'{"auction": "x", "price": 1}' in dead
    # Batches of 10: the three with bad records went the ordinary way.
    assert (spy.taken, spy.declined) == (2, 3)
    assert committed(tmp_path, "routed")[("bids", 0)][0] == len(rows)


def test_a_batch_failing_after_its_first_chunks_leaves_no_output_behind(tmp_path: Path) -> None:
    # Batches of 3,000 run 1,024 rows at a time and write their output as
    # they go: the batch whose third chunk holds a bad value must take back
    # what its first two wrote before the ordinary path runs it.
    rows: list[tuple[bytes | None, bytes | None, int]] = [
        (b"k%d" % i, b'{"auction": %d, "price": %d}' % (i, i), i) for i in range(6_000)
    ]
    rows[2_500] = (b"bad", b'{"auction": 3, "price": ', 2_500)
    write_bids(tmp_path, rows)
    handlers = {"deserialization.exception.handler": "log_and_continue"}
    native, spy = run(
        tmp_path, build(expressions, "out"), "native", **{"poll.max.records": 3_000, **handlers}
    )
    python, _ = run(tmp_path, build(lambdas, "out-lambdas"), "python", **handlers)
    out = [(k, v, ts) for _, _, k, v, ts in records(tmp_path, "out")]
    assert out == [(k, v, ts) for _, _, k, v, ts in records(tmp_path, "out-lambdas")]
    assert len(out) == len([i for i in range(6_000) if i != 2_500 and i % MODULUS == 0])
    assert (spy.taken, spy.declined) == (1, 1)
    assert native["skipped-records"] == python["skipped-records"] == 1


def test_only_expression_chains_to_a_plain_sink_are_fused(tmp_path: Path) -> None:
    write_bids(tmp_path, [(b"k", b'{"auction": 3, "price": 1}', 1)])
    b = StreamsBuilder()
    stream = b.stream("bids", key_serde=S, value_serde=J)
    stream.filter(col("auction") > 0).to("out", key_serde=S, value_serde=J)
    fused = b.build()
    assert "(native: (col('auction') > 0))" in fused.describe()
    others = []
    for change in (
        lambda s: s.map_values(lambda v: v),
        lambda s: s.map_values(col("auction")),
        lambda s: s.select_key(col("auction").cast(str)),
    ):
        b = StreamsBuilder()
        change(b.stream("bids", key_serde=S, value_serde=J)).to("out", key_serde=S, value_serde=J)
        others.append(b.build())
    b = StreamsBuilder()
    b.stream("bids", key_serde=S, value_serde=J).filter(col("auction") > 0).to(
        "out", key_serde=S, value_serde=J, partitioner=lambda _k, _v, n: n - 1
    )
    others.append(b.build())
    for i, topology in enumerate([fused, *others]):
        _, spy = run(tmp_path, topology, f"app-{i}")
        assert (spy.taken == 1) is (topology is fused)


def test_copied_fields_are_byte_equal_to_the_json_serializer(tmp_path: Path) -> None:
    """A struct that copies fields writes them as they were read only when
    that is the serializer's form; numbers, strings and objects written in
    other forms are rewritten, byte for byte as the Json serde writes the
    same value from the lambda path."""
    texts = [
        b'{"i":1700000000000,"z":-0,"f":1.0e2,"s":"\\u0041\\/","e":"\xf0\x9f\x98\x80\xc3\xa9",'
        b'"o":{ "k" : [1, 2.50, "\\u00e9", -0] },"t":true,"n":null,"p":7}',
        b'{"i":-5,"z":0,"f":-0.0,"s":"plain","e":"x","o":[],"t":false,"n":7,"p":-3}',
        b'{ "i" : 123456789012345678901234 , "z" : "-0" , "f" : 1E-7 , "s" : "" ,'
        b' "e" : "\\ud83d\\ude00" , "o" : {} , "t" : "true" , "n" : "null" , "p" : 0 }',
        b'{"i":9223372036854775807,"f":1e400,"s":"tab\\tquote\\"","o":[1.5e300,true],"p":1}',
    ]
    write_bids(tmp_path, [(b"k%d" % i, t, i) for i, t in enumerate(texts)])
    names = ["i", "z", "f", "s", "e", "o", "t", "n", "m"]

    def copies(b: StreamsBuilder, out: str) -> None:
        members = {n: col(n) for n in names}
        (
            b.stream("bids", key_serde=S, value_serde=J)
            .map_values(struct(**members, p=col("p") * 89 // 100))
            .to(out, key_serde=S, value_serde=J)
        )

    def dicts(b: StreamsBuilder, out: str) -> None:
        (
            b.stream("bids", key_serde=S, value_serde=J)
            .map_values(lambda v: {**{n: v.get(n) for n in names}, "p": v["p"] * 89 // 100})
            .to(out, key_serde=S, value_serde=J)
        )

    _, spy = run(tmp_path, build(copies, "out"), "copies")
    run(tmp_path, build(dicts, "out-lambdas"), "dicts")
    assert spy.taken == 1
    out = [r[3] for r in records(tmp_path, "out")]
    assert out == [r[3] for r in records(tmp_path, "out-lambdas")]
    assert out[0] == (
        b'{"i":1700000000000,"z":0,"f":100.0,"s":"A/","e":"\\uD83D\\uDE00\xc3\xa9",'
        b'"o":{"k":[1,2.5,"\xc3\xa9",0]},"t":true,"n":null,"m":null,"p":6}'
    )
