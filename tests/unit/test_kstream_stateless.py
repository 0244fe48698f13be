"""The stateless KStream operations on the embedded runtime."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import strom
from strom import KafkaStreams, KeyValue, StreamsBuilder, serdes
from strom._core import partition_for_key
from strom.embedded import EmbeddedLog
from strom.errors import TopologyError
from strom.kstream import KStream
from strom.kstream.internals.processors import KStreamPrint, PrintFile
from strom.processor import ContextualProcessor, Record
from strom.processor.internals.batch import Batch
from strom.testing import TopologyTestDriver

S = serdes.String()
RECORDS = [("a", "1"), ("b", "2"), (None, "3"), ("c", "4"), ("a", "5")]


def run(
    log: EmbeddedLog,
    log_path: str,
    build: Callable[[KStream], KStream | None],
    partitions: int = 1,
) -> list[tuple[Any, Any, int]]:
    """Pipes RECORDS (timestamps 100, 101, …) through ``build`` and returns
    what reached topic "out" (in partition then offset order)."""
    log.create_topic("in", partitions=partitions)
    log.create_topic("out", partitions=partitions)
    with log.producer() as producer:
        for i, (k, v) in enumerate(RECORDS):
            producer.produce(
                "in", None if k is None else k.encode(), v.encode(), timestamp=100 + i, partition=0
            )
    builder = StreamsBuilder()
    out = build(builder.stream("in", key_serde=S, value_serde=S))
    if out is not None:
        out.to("out", key_serde=S, value_serde=S)
    with KafkaStreams(
        builder.build(), {"application.id": "ops", "bootstrap.servers": f"embedded:{log_path}"}
    ) as app:
        app.run_until_end(timeout=30)
    return [
        (None if r.key is None else r.key.decode(), r.value.decode(), r.timestamp)  # type: ignore[union-attr]
        for partition, end in log.end_offsets("out").items()
        for r in log.read("out", partition, 0, max(end, 1))
    ]


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda s: s.filter(lambda k, v: int(v) % 2 == 1), [("a", "1"), (None, "3"), ("a", "5")]),
        (lambda s: s.filter_not(lambda k, v: int(v) % 2 == 1), [("b", "2"), ("c", "4")]),
        (
            lambda s: s.map_values(lambda v: v * 2),
            [("a", "11"), ("b", "22"), (None, "33"), ("c", "44"), ("a", "55")],
        ),
        (
            lambda s: s.map(lambda k, v: (v, k or "-")),
            [("1", "a"), ("2", "b"), ("3", "-"), ("4", "c"), ("5", "a")],
        ),
        (
            lambda s: s.select_key(lambda k, v: v),
            [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4"), ("5", "5")],
        ),
        (
            lambda s: s.flat_map(lambda k, v: [(k, v)] * int(v) if int(v) < 3 else []),
            [("a", "1"), ("b", "2"), ("b", "2")],
        ),
        (
            lambda s: s.flat_map_values(lambda v: [] if v == "3" else [v, "x"]),
            [
                ("a", "1"),
                ("a", "x"),
                ("b", "2"),
                ("b", "x"),
                ("c", "4"),
                ("c", "x"),
                ("a", "5"),
                ("a", "x"),
            ],
        ),
    ],
)
def test_stateless_operation(
    log: EmbeddedLog,
    log_path: str,
    build: Callable[[KStream], KStream],
    expected: list[tuple[Any, Any]],
) -> None:
    out = run(log, log_path, build)
    assert [(k, v) for k, v, _ in out] == expected
    # Timestamps are the input records' own.
    assert all(100 <= ts <= 104 for _, _, ts in out)


def test_peek_and_foreach_see_every_record(log: EmbeddedLog, log_path: str) -> None:
    peeked: list[tuple[Any, Any]] = []
    each: list[tuple[Any, Any]] = []

    def build(s: KStream) -> KStream:
        s.foreach(lambda k, v: each.append((k, v)))
        return s.peek(lambda k, v: peeked.append((k, v)))

    out = run(log, log_path, build)
    assert peeked == each == RECORDS
    assert [(k, v) for k, v, _ in out] == RECORDS


def test_split_routes_to_the_first_matching_branch(log: EmbeddedLog, log_path: str) -> None:
    seen: dict[str, list[str]] = {}

    def build(s: KStream) -> None:
        branches = (
            s.split(name="route-")
            .branch(lambda k, v: int(v) < 3, name="small")
            .branch(lambda k, v: int(v) < 5)
            .default_branch(name="rest")
        )
        assert list(branches) == ["route-small", "route-2", "route-rest"]
        for name, branch in branches.items():
            branch.foreach(lambda k, v, name=name: seen.setdefault(name, []).append(v))

    run(log, log_path, build)
    assert seen == {"route-small": ["1", "2"], "route-2": ["3", "4"], "route-rest": ["5"]}


def test_split_names_follow_kafka_without_names() -> None:
    builder = StreamsBuilder()
    branches = builder.stream("in").split().branch(lambda k, v: True).no_default_branch()
    assert list(branches) == ["KSTREAM-BRANCH-00000000011"]
    with pytest.raises(TopologyError, match="already has its default branch"):
        split = builder.stream("in2").split()
        split.default_branch()
        split.branch(lambda k, v: True)


def test_split_chains_transform_or_consume_their_branches(log: EmbeddedLog, log_path: str) -> None:
    """Kafka's Branched.withFunction and withConsumer: a chain's stream
    takes its branch's place in the result; a chain that returns None
    (here one ending in ``to``) leaves its branch out."""
    seen: dict[str, list[str]] = {}

    def build(s: KStream) -> None:
        branches = (
            s.split(name="route-")
            .branch(
                lambda k, v: int(v) < 3,
                name="small",
                chain=lambda b: b.map_values(lambda v: "small" + v),
            )
            .branch(
                lambda k, v: int(v) < 5,
                chain=lambda b: b.to("out", key_serde=S, value_serde=S),
            )
            .default_branch(name="rest", chain=lambda b: b.filter(lambda k, v: v != "5"))
        )
        assert list(branches) == ["route-small", "route-rest"]
        for name, branch in branches.items():
            branch.foreach(lambda k, v, name=name: seen.setdefault(name, []).append(v))

    out = run(log, log_path, build)
    assert seen == {"route-small": ["small1", "small2"]}
    assert [v for _, v, _ in out] == ["3", "4"]


def test_a_split_chain_is_applied_when_its_branch_is_made() -> None:
    """As in Kafka, what a chain adds is named before the next branch."""
    builder = StreamsBuilder()
    branches = (
        builder.stream("in")
        .split(name="s-")
        .branch(lambda k, v: True, name="a", chain=lambda b: b.map_values(str.upper))
        .branch(lambda k, v: True, name="b")
        .no_default_branch()
    )
    branches["s-b"].map_values(str.lower)
    described = builder.build().describe()
    assert "Processor: s-a (stores: [])\n      --> KSTREAM-MAPVALUES-0000000003\n" in described
    assert "Processor: s-b (stores: [])\n      --> KSTREAM-MAPVALUES-0000000005\n" in described


def test_a_split_chain_that_returns_no_stream_is_refused() -> None:
    split = StreamsBuilder().stream("in").split(name="s-")
    with pytest.raises(TopologyError, match="chain of branch 's-a' returned a KTable"):
        split.branch(lambda k, v: True, name="a", chain=lambda b: b.to_table())


def test_repartition_with_a_partitioner_of_its_own(log: EmbeddedLog, log_path: str) -> None:
    """Kafka's Repartitioned.streamPartitioner: the partitioner, not the
    key's murmur2, picks each record's partition of the internal topic."""
    seen: list[tuple[str, int]] = []

    class Where(ContextualProcessor[str, str]):
        def process(self, record: Record[str, str]) -> None:
            metadata = self.context().record_metadata()
            assert metadata is not None
            seen.append((record.value, metadata.partition))
            self.context().forward(record)

    def build(s: KStream) -> KStream:
        return s.repartition(
            name="by-value",
            num_partitions=3,
            key_serde=S,
            partitioner=lambda k, v, n: int(v) % n,
        ).process(Where)

    out = run(log, log_path, build)
    keyed = [v for k, v in RECORDS if k is not None]  # the repartition drops null keys
    assert sorted(seen) == sorted((v, int(v) % 3) for v in keyed)
    assert sorted(v for _, v, _ in out) == sorted(keyed)


def test_merge_combines_both_streams(log: EmbeddedLog, log_path: str) -> None:
    def build(s: KStream) -> KStream:
        odd = s.filter(lambda k, v: int(v) % 2 == 1).map_values(lambda v: "odd" + v)
        even = s.filter(lambda k, v: int(v) % 2 == 0)
        return odd.merge(even)

    out = run(log, log_path, build)
    assert sorted(v for _, v, _ in out) == ["2", "4", "odd1", "odd3", "odd5"]


def test_repartition_moves_records_to_the_murmur2_partition_of_their_new_key(
    log: EmbeddedLog, log_path: str
) -> None:
    out = run(
        log,
        log_path,
        lambda s: s.select_key(lambda k, v: "key" + v).repartition(
            name="by-value", num_partitions=3, key_serde=S
        ),
        partitions=2,
    )
    assert sorted(v for _, v, _ in out) == ["1", "2", "3", "4", "5"]
    assert log.partitions("ops-by-value-repartition") == 3
    # Read back from the repartition topic: each key on its murmur2 partition.
    for partition, end in log.end_offsets("ops-by-value-repartition").items():
        for record in log.read("ops-by-value-repartition", partition, 0, max(end, 1)):
            assert record.key is not None
            assert partition_for_key(record.key, 3) == partition


def test_through_is_a_deprecated_alias_that_still_writes_and_reads_back(
    log: EmbeddedLog, log_path: str
) -> None:
    """Kafka Streams 4.0 removed ``through()``; strom keeps it as Kafka 3.x
    did, deprecated in favour of ``repartition()``."""
    log.create_topic("mid", partitions=1)

    with pytest.warns(DeprecationWarning, match=r"through\(\) is deprecated.*repartition\(\)"):
        out = run(log, log_path, lambda s: s.through("mid").map_values(str.upper))
    assert [v for _, v, _ in out] == ["1", "2", "3", "4", "5"]
    assert sum(log.end_offsets("mid").values()) == 5


def test_print_writes_label_key_value(
    log: EmbeddedLog, log_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def build(s: KStream) -> None:
        s.print(label="dbg")

    run(log, log_path, build)
    assert capsys.readouterr().out.splitlines() == [f"[dbg]: {k}, {v}" for k, v in RECORDS]


def test_print_with_a_mapper_to_a_file(log: EmbeddedLog, log_path: str, tmp_path: Path) -> None:
    """Kafka's Printed.toFile and withKeyValueMapper; the label defaults to
    the printed stream's node name, as Kafka's does."""
    path = tmp_path / "printed.txt"
    path.write_text("left over from before\n")

    def build(s: KStream) -> None:
        s.print(mapper=lambda k, v: f"{v}<-{k}", file_path=str(path))

    run(log, log_path, build)
    expected = [f"[KSTREAM-SOURCE-0000000000]: {v}<-{k}" for k, v in RECORDS]
    assert path.read_text().splitlines() == expected


def test_tasks_on_two_threads_print_whole_lines_to_one_file(tmp_path: Path) -> None:
    """Every task's printer shares the file (as Kafka's tasks share one
    PrintWriter): lines are never cut by another thread's, and the last
    task to close closes it."""
    path = tmp_path / "printed.txt"
    shared = PrintFile(str(path))
    words = [f"w{i}" * 50 for i in range(200)]  # long lines, many buffer flushes

    def print_all(task: int) -> None:
        printer = KStreamPrint(f"task-{task}", None, shared)
        printer.init(SimpleNamespace())  # type: ignore[arg-type]
        for word in words:
            rows = list(range(20))
            printer.process(Batch("in", 0, [word] * 20, [str(task)] * 20, rows, rows))
        printer.close()

    threads = [threading.Thread(target=print_all, args=(t,)) for t in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = path.read_text().splitlines()
    assert len(lines) == 2 * 200 * 20
    assert all(line.startswith(("[task-1]: w", "[task-2]: w")) for line in lines)
    assert all(line.endswith(f", {line[6]}") for line in lines)
    with pytest.raises(RuntimeError, match="not open"):
        shared.write("after the last close\n")


def test_print_to_a_file_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    stream = StreamsBuilder().stream("in")
    with pytest.raises(TopologyError, match=r"cannot write to .*no-such-dir"):
        stream.print(file_path=str(tmp_path / "no-such-dir" / "printed.txt"))
    with pytest.raises(TopologyError, match="empty string"):
        stream.print(file_path=" ")


def test_value_mappers_with_key_get_the_key_and_keep_it() -> None:
    """``with_key=True``: Kafka's ValueMapperWithKey on map_values,
    flat_map_values and KTable.map_values (the key is read-only: no
    repartition follows, and grouping by key after it needs none)."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.map_values(lambda k, v: f"{k}:{v}", with_key=True).to("mapped", value_serde=S)
    stream.flat_map_values(lambda k, v: [k] * int(v), with_key=True).to("flat", value_serde=S)
    table = builder.table("t", key_serde=S, value_serde=S, materialized="t-store")
    upper = table.map_values(lambda k, v: f"{k}={v.upper()}", with_key=True)
    upper.to_stream().to("table-out", value_serde=S)
    # The mapped table's getter maps with the key too (a join reads through it).
    stream.join(upper, lambda v, tv: f"{v}|{tv}").to("joined", value_serde=S)
    topology = builder.build()
    assert "repartition" not in topology.describe()
    with TopologyTestDriver(topology) as driver:
        driver.create_input_topic("t", S, S).pipe_input("a", "x", 1)
        driver.create_input_topic("in", S, S).pipe_input("a", "2", 2)

        def read(topic: str) -> list[KeyValue]:
            return driver.create_output_topic(topic, S, S).read_key_values_to_list()

        assert read("mapped") == [KeyValue("a", "a:2")]
        assert read("flat") == [KeyValue("a", "a"), KeyValue("a", "a")]
        assert read("table-out") == [KeyValue("a", "a=X")]
        assert read("joined") == [KeyValue("a", "2|a=X")]
    with pytest.raises(TopologyError, match="with_key=True takes a Python function"):
        stream.map_values(strom.col("x"), with_key=True)


def test_joiners_with_key_get_the_key_first() -> None:
    """``with_key=True`` on every joiner-taking method (Kafka's
    ValueJoinerWithKey): stream-stream (inner and outer, where a record
    joins None when its window closes), stream-table, stream-global and
    table-table (each side's change, and the unmaterialized result's getter
    a join reads through) joins."""
    from strom.kstream import JoinWindows  # noqa: PLC0415 - one test's import

    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=S, value_serde=S)
    right = builder.stream("right", key_serde=S, value_serde=S)
    table = builder.table("t", key_serde=S, value_serde=S)
    other_table = builder.table("t2", key_serde=S, value_serde=S)
    globals_ = builder.global_table("g", key_serde=S, value_serde=S)
    windows = JoinWindows.of_time_difference_and_grace(10, 0)

    def joiner(key: Any, a: Any, b: Any) -> str:
        return f"{key}:{a}+{b}"

    left.outer_join(right, joiner, windows, with_key=True).to("ss", value_serde=S)
    left.join(table, joiner, with_key=True).to("st", value_serde=S)
    left.left_join(globals_, lambda k, v: v, joiner, with_key=True).to("sg", value_serde=S)
    tt = table.join(other_table, joiner, with_key=True)
    tt.to_stream().to("tt", value_serde=S)
    left.join(tt, lambda v, j: f"{v}|{j}").to("through-getter", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("t", S, S).pipe_input("a", "t", 1)
        driver.create_input_topic("t2", S, S).pipe_input("a", "u", 1)
        driver.create_input_topic("g", S, S).pipe_input("x", "gx", 1)
        driver.create_input_topic("right", S, S).pipe_input("a", "r", 2)
        driver.create_input_topic("left", S, S).pipe_input("a", "x", 3)
        # Moves stream time on past the right record "b"'s window: joined with None.
        driver.create_input_topic("right", S, S).pipe_input("b", "rb", 4)
        driver.create_input_topic("left", S, S).pipe_input("c", "y", 100)

        def values(topic: str) -> list[Any]:
            return driver.create_output_topic(topic, S, S).read_values_to_list()

        assert values("ss") == ["a:x+r", "b:None+rb"]
        assert values("st") == ["a:x+t"]
        assert values("sg") == ["a:x+gx", "c:y+None"]
        assert values("tt") == ["a:t+u"]
        assert values("through-getter") == ["x|a:t+u"]
