"""The DSL's native steps: a topology written with ``strom.col`` expressions
gives what the same topology written with lambdas gives, record for record
and byte for byte, on the test driver and on the embedded log; values that
are not JSON go to the deserialization handler; failing expressions fail the
task naming the record; batch functions see pyarrow RecordBatches."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strom
from strom import KafkaStreams, StreamsBuilder, Topology, col, serdes, struct
from strom.embedded import EmbeddedLog
from strom.errors import SerializationError, TaskError
from strom.kstream import Materialized, TimeWindows
from strom.testing import TopologyTestDriver

S, J, L, B = serdes.String(), serdes.Json(), serdes.Long(), serdes.ByteArray()
OUTPUTS = ["kept", "dropped", "rekeyed", "counts", "mixed", "scalars"]


def expression_app(b: StreamsBuilder, p: str = "") -> None:
    bids = b.stream("bids", key_serde=S, value_serde=J)
    (
        bids.filter((col("auction") % 3 == 0) & (col("price") > 50))
        .map_values(
            struct(
                auction=col("auction"),
                price=col("price") * 89 // 100,
                euros=col("price") / 4,
                who=col("who.name").upper(),
                tags=col("tags"),
            )
        )
        .to(p + "kept", key_serde=S, value_serde=J)
    )
    bids.filter_not(col("price") > 50).to(p + "dropped", key_serde=S, value_serde=J)
    bids.select_key(col("who.name")).to(p + "rekeyed", key_serde=S, value_serde=J)
    (
        bids.group_by(col("auction").cast(str), key_serde=S)
        .count()
        .to_stream()
        .to(p + "counts", key_serde=S, value_serde=L)
    )
    # Mixed: a Python step, then expressions over its dicts.
    (
        bids.map_values(lambda v: {**v, "double": v["price"] * 2})
        .filter(col("double") >= 100)
        .map_values(struct(d=col("double"), a=col("auction")))
        .to(p + "mixed", key_serde=S, value_serde=J)
    )
    bids.map_values(col("price") % 7).to(p + "scalars", key_serde=S, value_serde=L)


def lambda_app(b: StreamsBuilder, p: str = "") -> None:
    bids = b.stream("bids", key_serde=S, value_serde=J)
    (
        bids.filter(lambda _k, v: v["auction"] % 3 == 0 and v["price"] > 50)
        .map_values(
            lambda v: {
                "auction": v["auction"],
                "price": v["price"] * 89 // 100,
                "euros": v["price"] / 4,
                "who": v["who"]["name"].upper(),
                "tags": v.get("tags"),
            }
        )
        .to(p + "kept", key_serde=S, value_serde=J)
    )
    bids.filter_not(lambda _k, v: v["price"] > 50).to(p + "dropped", key_serde=S, value_serde=J)
    bids.select_key(lambda _k, v: v["who"]["name"]).to(p + "rekeyed", key_serde=S, value_serde=J)
    (
        bids.group_by(lambda _k, v: str(v["auction"]), key_serde=S)
        .count()
        .to_stream()
        .to(p + "counts", key_serde=S, value_serde=L)
    )
    (
        bids.map_values(lambda v: {**v, "double": v["price"] * 2})
        .filter(lambda _k, v: v["double"] >= 100)
        .map_values(lambda v: {"d": v["double"], "a": v["auction"]})
        .to(p + "mixed", key_serde=S, value_serde=J)
    )
    bids.map_values(lambda v: v["price"] % 7).to(p + "scalars", key_serde=S, value_serde=L)


def build(app: Callable[..., None], prefix: str = "") -> Topology:
    """The app, writing to ``prefix``-named topics."""
    b = StreamsBuilder()
    app(b, prefix)
    return b.build()


bids = st.fixed_dictionaries(
    {
        "auction": st.integers(0, 20),
        "price": st.integers(-100, 10**12),
        "who": st.fixed_dictionaries({"name": st.text("abéß", min_size=1, max_size=5)}),
    },
    optional={"tags": st.lists(st.text("xy", max_size=2), max_size=2), "note": st.text()},
)


def run_driver(topology: Topology, records: list[tuple[str, Any]]) -> dict[str, list[Any]]:
    with TopologyTestDriver(topology) as driver:
        source = driver.create_input_topic("bids", S, J)
        for i, (key, value) in enumerate(records):
            source.pipe_input(key, value, timestamp=1_000 + i)
        return {
            topic: driver.create_output_topic(topic, B, B).read_key_values_to_list()
            for topic in OUTPUTS
        }


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["k1", "k2", "k3"]), bids), min_size=1, max_size=20))
def test_expressions_equal_lambdas_on_the_driver(records: list[tuple[str, Any]]) -> None:
    native = run_driver(build(expression_app), records)
    python = run_driver(build(lambda_app), records)
    assert native == python


_runs = itertools.count()


def run_embedded(path: Path, topology: Topology, prefix: str) -> dict[str, list[Any]]:
    config = {
        "application.id": f"native-{prefix}{next(_runs)}",
        "bootstrap.servers": f"embedded:{path}",
    }
    with EmbeddedLog(path) as log:
        for topic in OUTPUTS:
            log.create_topic(prefix + topic, partitions=2)
    with KafkaStreams(topology, config) as app:
        app.run_until_end()
    with EmbeddedLog(path) as log:
        return {
            topic: sorted(
                (r.partition, r.offset, r.key, r.value) for r in log.records(prefix + topic)
            )
            for topic in OUTPUTS
        }


def test_expressions_equal_lambdas_on_the_embedded_log(tmp_path: Path) -> None:
    rnd = random.Random(7)
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("bids", partitions=2)
        with log.producer(S, J) as producer:
            for i in range(3_000):
                value: dict[str, Any] = {
                    "auction": rnd.randrange(40),
                    "price": rnd.choice([rnd.randrange(-100, 200), rnd.randrange(10**9)]),
                    "who": {"name": rnd.choice(["ann", "bé", "straße"])},
                }
                if rnd.random() < 0.3:
                    value["tags"] = ["x"] * rnd.randrange(3)
                producer.produce("bids", f"k{i % 17}", value, timestamp=1_000 + i)
    native = run_embedded(tmp_path, build(expression_app, "n-"), "n-")
    python = run_embedded(tmp_path, build(lambda_app, "p-"), "p-")
    assert all(native[t] for t in OUTPUTS), {t: len(native[t]) for t in OUTPUTS}
    assert native == python


def test_describe_names_the_native_steps() -> None:
    text = build(expression_app).describe()
    assert "(native: (((col('auction') % 3) == 0) & (col('price') > 50)))" in text
    assert "(native: col('who.name'))" in text
    # The Python map_values is not native.
    lines = [line for line in text.splitlines() if "MAPVALUES" in line and "Processor" in line]
    assert sum("native" not in line for line in lines) == 1


def bad_json_app() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("bids", key_serde=S, value_serde=J)
        .filter(col("price") > 1)
        .map_values(struct(p=col("price")))
        .to("out", key_serde=S, value_serde=J)
    )
    return b.build()


def test_a_value_that_is_not_json_fails_the_task_naming_it() -> None:
    with TopologyTestDriver(bad_json_app()) as driver:
        source = driver.create_input_topic("bids", S, B)
        source.pipe_input("k", b'{"price": 5}')
        with pytest.raises(SerializationError, match=r"bids-0@1 .*Json serde cannot deserialize"):
            source.pipe_input("k", b'{"price": ')


def test_log_and_continue_skips_values_that_are_not_json(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("bids")
        log.create_topic("out")
        with log.producer() as producer:
            for value in [b'{"price":5}', b"{oops", b'{"price":7}', b"\xff", b'{"price":NaN}']:
                producer.produce("bids", b"k", value)
    config = {
        "application.id": "bad-json",
        "bootstrap.servers": f"embedded:{tmp_path}",
        "deserialization.exception.handler": "log_and_continue",
    }
    with KafkaStreams(bad_json_app(), config) as app:
        app.run_until_end()
        metrics = app.metrics()
    with EmbeddedLog(tmp_path) as log:
        out = [r.value for r in log.records("out")]
    assert out == [b'{"p":5}', b'{"p":7}']
    assert metrics["skipped-records"] == 3


def test_a_failing_expression_fails_the_task_naming_the_record() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=J).map_values(struct(n=col("n").cast(int))).to(
        "out", key_serde=S, value_serde=J
    )
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in", S, J)
        source.pipe_input("a", {"n": "12"})
        with pytest.raises(TaskError, match=r"in-0@1 \(key='b'\).*cannot cast str \"x1\" to int"):
            source.pipe_input("b", {"n": "x1"})
        out = driver.create_output_topic("out", S, J)
        assert out.read_value() == {"n": 12}


def test_a_failing_expression_goes_to_the_processing_handler() -> None:
    """With ``log_and_continue`` exactly the record the expression fails on
    is skipped, at the expression step, as a failing lambda's would be."""
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=J).map_values(struct(n=col("n").cast(int))).to(
        "out", key_serde=S, value_serde=J
    )
    config = {"processing.exception.handler": "log_and_continue"}
    with TopologyTestDriver(b.build(), config) as driver:
        source = driver.create_input_topic("in", S, J)
        for key, n in (("a", "12"), ("b", "x1"), ("c", "7")):
            source.pipe_input(key, {"n": n})
        out = driver.create_output_topic("out", S, J)
        assert [(r.key, r.value) for r in out.read_records_to_list()] == [
            ("a", {"n": 12}),
            ("c", {"n": 7}),
        ]


def test_a_python_step_after_a_struct_gets_dicts() -> None:
    seen: list[Any] = []
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=J)
        .map_values(struct(big=col("x") * 1e10, s=col("s")))
        .peek(lambda _k, v: seen.append(v))
        .to("out", key_serde=S, value_serde=J)
    )
    with TopologyTestDriver(b.build()) as driver:
        driver.create_input_topic("in", S, J).pipe_input("k", {"x": 2, "s": "é"})
        assert seen == [{"big": 2e10, "s": "é"}]
        out = driver.create_output_topic("out", S, B).read_value()
    assert out == '{"big":2.0E10,"s":"é"}'.encode()


def test_windowed_aggregation_of_an_expression_equals_the_lambda() -> None:
    def app(native: bool) -> Topology:
        b = StreamsBuilder()
        windowed = (
            b.stream("orders", key_serde=S, value_serde=J)
            .group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(100))
        )
        table = (
            windowed.aggregate(strom.agg.sum((col("price") * col("qty")).cast(int)))
            if native
            else windowed.aggregate(
                lambda: 0,
                lambda _k, v, a: a + v["price"] * v["qty"],
                Materialized("sums-store", value_serde=L),
            )
        )
        table.to_stream().map(lambda w, v: (f"{w.key}@{w.window.start}", v)).to(
            "sums", key_serde=S, value_serde=L
        )
        return b.build()

    rnd = random.Random(3)
    orders = [
        (rnd.choice("ab"), {"price": rnd.randrange(100), "qty": rnd.randrange(5)}, i * 7)
        for i in range(200)
    ]
    results = []
    for native in (True, False):
        with TopologyTestDriver(app(native)) as driver:
            source = driver.create_input_topic("orders", S, J)
            for key, value, ts in orders:
                source.pipe_input(key, value, timestamp=ts)
            results.append(driver.create_output_topic("sums", S, L).read_key_values_to_list())
    assert results[0] and results[0] == results[1]


def test_join_keys_of_foreign_key_and_global_table_joins_as_expressions() -> None:
    """Expressions as the foreign-key extractor of a table join and as the
    key selector of a global-table join give what the lambdas give."""

    def app(native: bool) -> Topology:
        b = StreamsBuilder()
        auctions = b.table("auctions", key_serde=S, value_serde=J)
        sellers = b.global_table("sellers", key_serde=S, value_serde=J)
        bids = b.table("bids", key_serde=S, value_serde=J)
        foreign_key = col("auction").cast(str) if native else (lambda v: str(v["auction"]))
        (
            bids.join(auctions, lambda bid, a: [bid["price"], a["seller"]], foreign_key=foreign_key)
            .to_stream()
            .to("fk", key_serde=S, value_serde=J)
        )
        seller_of = col("seller") if native else (lambda _k, v: v["seller"])
        (
            auctions.to_stream()
            .join(sellers, seller_of, lambda a, s: [a["seller"], s["name"]])
            .to("global", key_serde=S, value_serde=J)
        )
        return b.build()

    rnd = random.Random(5)
    inputs: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(120):
        if i % 3 == 0:
            inputs.append(("auctions", str(rnd.randrange(6)), {"seller": f"s{rnd.randrange(5)}"}))
        else:
            bid = {"auction": rnd.randrange(6), "price": rnd.randrange(100)}
            inputs.append(("bids", f"b{rnd.randrange(10)}", bid))
    results = []
    for native in (True, False):
        with TopologyTestDriver(app(native)) as driver:
            sellers = driver.create_input_topic("sellers", S, J)
            for s in range(4):
                sellers.pipe_input(f"s{s}", {"name": f"seller {s}"}, timestamp=0)
            topics = {t: driver.create_input_topic(t, S, J) for t in ("auctions", "bids")}
            for i, (topic, key, value) in enumerate(inputs):
                topics[topic].pipe_input(key, value, timestamp=10 + i)
            results.append(
                [
                    driver.create_output_topic(topic, S, J).read_key_values_to_list()
                    for topic in ("fk", "global")
                ]
            )
    assert all(results[0]), results[0]
    assert results[0] == results[1]


def test_batch_functions_over_record_batches(tmp_path: Path) -> None:
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("in")
        log.create_topic("out")
        with log.producer(S, J) as producer:
            for i in range(1_000):
                producer.produce("in", f"k{i}", {"price": i, "qty": i % 3}, timestamp=i)
    seen_sizes: list[int] = []

    def double(rb: Any) -> Any:
        seen_sizes.append(rb.num_rows)
        assert rb.schema.names == ["key", "value", "timestamp", "partition", "offset", "price"]
        return pa.RecordBatch.from_pydict(
            {"key": rb.column("key"), "value": pc.multiply(rb.column("price"), 2)}
        )

    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=J)
        .filter_batches(lambda rb: pc.not_equal(rb.column("qty"), 0), fields=["qty"])
        .map_batches(double, fields=["price"])
        .to("out", key_serde=S, value_serde=L)
    )
    config = {"application.id": "batches", "bootstrap.servers": f"embedded:{tmp_path}"}
    with KafkaStreams(b.build(), config) as app:
        app.run_until_end()
    with EmbeddedLog(tmp_path) as log:
        out = [
            (r.key, r.value, r.timestamp) for r in log.records("out", key_serde=S, value_serde=L)
        ]
    assert out == [(f"k{i}", 2 * i, i) for i in range(1_000) if i % 3]
    assert max(seen_sizes) > 1  # whole batches, not records


def test_batch_functions_report_a_bad_result() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=J).filter_batches(lambda rb: [True, False]).to("out")
    with TopologyTestDriver(b.build()) as driver, pytest.raises(TaskError, match="2 flags"):
        driver.create_input_topic("in", S, J).pipe_input("k", {"a": 1})


def test_json_serde_and_struct_agree_through_a_topology() -> None:
    """What a struct writes is what serdes.Json writes for the same dict."""
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=J).map_values(
        struct(f=col("f"), s=col("s"), n=col("n"))
    ).to("out", key_serde=S, value_serde=J)
    value = {"f": 12345678.9, "s": "\x02é\U0001f600", "n": [1e-5, {"x": None}]}
    with TopologyTestDriver(b.build()) as driver:
        driver.create_input_topic("in", S, J).pipe_input("k", value)
        raw = driver.create_output_topic("out", S, B).read_value()
    assert raw == J.serialize("out", value)
    assert json.loads(raw) == value
