"""Batch functions through the Arrow C data interface: the columns of a
batch read reach pyarrow natively (``timestamp``/``offset`` sharing the
batch's memory, JSON fields typed as pyarrow would infer them), masks come
back natively, and an app written with batch functions writes what the
same app written with lambdas writes."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from strom import KafkaStreams, StreamsBuilder, _core, col, serdes
from strom.embedded import EmbeddedLog
from strom.errors import TaskError
from strom.testing import TopologyTestDriver

S, J, L = serdes.String(), serdes.Json(), serdes.Long()

DOCS: list[Any] = [
    {"i": 1, "f": 0.5, "m": 1, "s": "a", "b": True, "o": {"z": 1}, "x": "1"},
    {"i": -7, "f": 2.0, "m": 2.5, "s": "é\U0001f600", "b": False, "o": {"z": 2}, "x": 2},
    None,
    {"i": None, "f": 1e300, "s": None, "o": {"z": None}, "x": [1]},
    {"i": 2**62, "m": -3, "s": "", "b": None, "o": [1], "x": None},
]
PATHS = ["i", "f", "m", "s", "b", "o", "o.z", "x", "absent"]


def _values() -> list[bytes | None]:
    return [None if d is None else json.dumps(d).encode() for d in DOCS]


def _log_with(path: Path, values: list[bytes | None]) -> EmbeddedLog:
    log = EmbeddedLog(path)
    log.create_topic("in")
    with log.producer() as producer:
        for i, value in enumerate(values):
            producer.produce("in", f"k{i}".encode(), value, timestamp=1_000 + i)
    return log


def test_timestamp_and_offset_columns_share_the_batch_read(tmp_path: Path) -> None:
    with _log_with(tmp_path, _values()) as log:
        records = log.read_batch("in", 0)
        first = [pa.array(c) for c in _core.arrow_columns(records, key="utf8", value="binary")]
        again = [pa.array(c) for c in _core.arrow_columns(records, key=None, value=None)[2:]]
        keys, values = records.keys(), records.values()
        del records
        gc.collect()  # the columns keep the batch alive, not this frame
    key, value, timestamp, partition, offset = first
    # Exported twice, the same memory: the batch's own, not a copy each time.
    assert timestamp.buffers()[1].address == again[0].buffers()[1].address
    assert offset.buffers()[1].address == again[2].buffers()[1].address
    assert key.to_pylist() == [k.decode() for k in keys if k is not None]
    assert value.type == pa.binary()
    assert value.to_pylist() == values
    assert timestamp.to_pylist() == [1_000 + i for i in range(len(DOCS))]
    assert offset.to_pylist() == list(range(len(DOCS)))
    assert partition.type == pa.int32()
    assert partition.to_pylist() == [0] * len(DOCS)


def test_json_fields_are_typed_as_pyarrow_infers_them(tmp_path: Path) -> None:
    paths = [col(name).plan.fields[0] for name in PATHS]
    values = _values()
    from_list, errors = _core.arrow_json_fields(values, paths)
    assert errors == []
    with _log_with(tmp_path, values) as log:
        from_read, _ = _core.arrow_json_fields(log.read_batch("in", 0), paths)
    for name, listed, read in zip(PATHS, from_list, from_read, strict=True):
        if name in ("o", "x"):  # objects and mixed types are left to pyarrow
            assert listed is None
            assert read is None
            continue
        assert listed is not None
        assert read is not None
        python = pa.array(col(name).plan.to_python(values, raw=True)[0])
        for native in (pa.array(listed), pa.array(read)):
            assert native.type == python.type, name
            assert native.to_pylist() == python.to_pylist(), name


def test_values_that_are_not_json_are_reported_by_row() -> None:
    columns, errors = _core.arrow_json_fields([b'{"a": 1}', b"{nope", None, b"[1]"], [["a"]])
    assert [row for row, _ in errors] == [1]
    assert pa.array(columns[0]).to_pylist() == [1, None, None, None]


def test_masks_are_read_natively() -> None:
    mask = pa.array([False, True, None, True, False, True]).slice(1, 4)
    assert _core.arrow_mask_rows(mask) == (4, [0, 2])
    assert _core.arrow_mask_rows(pa.array(np.array([True, False, True]))) == (3, [0, 2])
    with pytest.raises(TypeError, match="an array of Int64, not a boolean mask"):
        _core.arrow_mask_rows(pa.array([1, 0]))


def bid_rows() -> list[tuple[str, bytes]]:
    """Bids as (key, JSON value): some without a price, one not JSON."""
    rows: list[tuple[str, bytes]] = []
    for i in range(2_000):
        doc = {"auction": i % 7, "price": i * 3, "name": f"n{i % 5}"}
        if i % 11 == 0:
            del doc["price"]
        rows.append((f"k{i % 13}", json.dumps(doc).encode()))
    rows.insert(777, ("bad", b'{"auction": '))
    return rows


def kept_by_apps(rows: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The rows the apps below write (JSON, auction % 3 != 0, a price)."""
    docs = [(k, v, json.loads(v)) for k, v in rows if k != "bad"]
    return [(k, v) for k, v, d in docs if d["auction"] % 3 and "price" in d]


def _bids(path: Path) -> list[tuple[str, bytes]]:
    rows = bid_rows()
    with EmbeddedLog(path) as log:
        log.create_topic("bids", partitions=2)
        log.create_topic("out")
        with log.producer() as producer:
            for i, (key, value) in enumerate(rows):
                producer.produce("bids", key.encode(), value, timestamp=i)
    return rows


def lambda_app(b: StreamsBuilder, source: str = "bids", sink: str = "out") -> None:
    """The app of :func:`batch_app` with lambdas (the Kafka tests run both)."""
    (
        b.stream(source, key_serde=S, value_serde=J)
        .filter(lambda _k, v: v["auction"] % 3 != 0)
        .filter(lambda _k, v: v.get("price") is not None)
        .map(lambda k, v: (k + v["name"], v["price"] * 2))
        .to(sink, key_serde=S, value_serde=L)
    )


def batch_app(b: StreamsBuilder, source: str = "bids", sink: str = "out") -> None:
    def double(rb: Any) -> Any:
        return pa.RecordBatch.from_arrays(
            [
                pc.binary_join_element_wise(rb.column("key"), rb.column("name"), ""),
                pc.multiply(rb.column("price"), 2),
            ],
            names=["key", "value"],
        )

    (
        b.stream(source, key_serde=S, value_serde=J)
        # a numpy mask, then a pyarrow one
        .filter_batches(lambda rb: np.asarray(rb.column("auction")) % 3 != 0, fields=["auction"])
        .filter_batches(lambda rb: pc.is_valid(rb.column("price")), fields=["price"])
        .map_batches(double, fields=["price", "name"])
        .to(sink, key_serde=S, value_serde=L)
    )


def test_batch_functions_write_what_lambdas_write(tmp_path: Path) -> None:
    outputs = {}
    for name, app in (("lambdas", lambda_app), ("batches", batch_app)):
        path = tmp_path / name
        rows = _bids(path)
        b = StreamsBuilder()
        app(b)
        config = {
            "application.id": name,
            "bootstrap.servers": f"embedded:{path}",
            "deserialization.exception.handler": "log_and_continue",
        }
        with KafkaStreams(b.build(), config) as streams:
            streams.run_until_end()
            assert streams.metrics()["skipped-records"] == 1
        with EmbeddedLog(path) as log:
            outputs[name] = [
                (r.partition, r.offset, r.key, r.value, r.timestamp)
                for r in log.records("out", key_serde=S, value_serde=L)
            ]
    assert len(outputs["batches"]) == len(kept_by_apps(rows))
    assert outputs["batches"] == outputs["lambdas"]


def test_two_branches_see_the_same_native_memory(tmp_path: Path) -> None:
    """Two batch functions on one stream get the batch read's timestamps
    themselves: a copy per export would live at two addresses."""
    with _log_with(tmp_path, _values()) as log:
        log.create_topic("out-a")
        log.create_topic("out-b")
    seen: dict[str, list[Any]] = {"a": [], "b": []}

    def keep(branch: str) -> Any:
        def fn(rb: Any) -> Any:
            seen[branch].append(rb.column("timestamp"))  # kept alive: no address reuse
            return pa.array([True] * rb.num_rows)

        return fn

    b = StreamsBuilder()
    stream = b.stream("in", key_serde=S, value_serde=J)
    stream.filter_batches(keep("a")).to("out-a", key_serde=S, value_serde=J)
    stream.filter_batches(keep("b")).to("out-b", key_serde=S, value_serde=J)
    config = {"application.id": "branches", "bootstrap.servers": f"embedded:{tmp_path}"}
    with KafkaStreams(b.build(), config) as streams:
        streams.run_until_end()
    assert seen["a"]
    assert [c.to_pylist() for c in seen["a"]] == [c.to_pylist() for c in seen["b"]]
    addresses = [[c.buffers()[1].address for c in seen[k]] for k in ("a", "b")]
    assert addresses[0] == addresses[1]


def test_a_mask_of_the_wrong_type_names_the_node_and_the_records() -> None:
    b = StreamsBuilder()
    b.stream("in", key_serde=S, value_serde=J).filter_batches(
        lambda rb: pa.array([1] * rb.num_rows), name="ints"
    ).to("out")
    with (
        TopologyTestDriver(b.build()) as driver,
        pytest.raises(
            TaskError,
            match=r"'ints'.*an array of Int64, not a boolean mask, for in-0 \(offsets 0..0\)",
        ),
    ):
        driver.create_input_topic("in", S, J).pipe_input("k", {"a": 1})


def test_tables_and_chunked_masks_are_taken_too() -> None:
    """A function may answer with a Table (chunked columns) or a chunked mask."""
    b = StreamsBuilder()
    (
        b.stream("in", key_serde=S, value_serde=J)
        .filter_batches(lambda rb: pa.chunked_array([pc.greater(rb.column("n"), 1)]), fields=["n"])
        .map_batches(
            lambda rb: pa.Table.from_batches(
                [pa.RecordBatch.from_arrays([rb.column("key"), rb.column("n")], ["key", "value"])]
            ),
            fields=["n"],
        )
        .to("out", key_serde=S, value_serde=L)
    )
    with TopologyTestDriver(b.build()) as driver:
        source = driver.create_input_topic("in", S, J)
        for i in range(4):
            source.pipe_input(f"k{i}", {"n": i})
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
    assert out == [("k2", 2), ("k3", 3)]


@pytest.mark.parametrize(
    "column",
    [["a", None, "é\U0001f600"], [b"\x00", None, b""], ["a", b"b"], [1, 2], [None, None], []],
)
def test_columns_from_lists_are_what_pyarrow_would_build(column: list[Any]) -> None:
    rows = len(column)
    built = _core.arrow_list_columns(column, column, list(range(rows)), [7] * rows, 3)
    for native in built[:2]:
        if any(isinstance(c, str) for c in column) != any(isinstance(c, bytes) for c in column):
            assert native is not None
            assert pa.array(native).equals(pa.array(column))
        else:  # mixed, other objects, only None: pyarrow's to infer
            assert native is None
    timestamp, partition, offset = (pa.array(c) for c in built[2:])
    assert timestamp.to_pylist() == list(range(rows))
    assert partition.type == pa.int32()
    assert partition.to_pylist() == [3] * rows
    assert offset.to_pylist() == [7] * rows
