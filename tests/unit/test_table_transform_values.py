"""KTable.transform_values (Kafka's transformValues), on the
TopologyTestDriver; the expected records are those of Kafka's
KTableTransformValuesTest."""

from __future__ import annotations

from typing import Any

import pytest

from strom import StreamsBuilder, serdes
from strom.errors import TopologyError
from strom.kstream import Materialized
from strom.processor import ProcessorContext, Record, ValueTransformerWithKey
from strom.state import Stores
from strom.testing import TopologyTestDriver

S, INT = serdes.String(), serdes.Integer()


class Exclamation(ValueTransformerWithKey[str, str]):
    """``key->value!``; checks at init that its stores are there."""

    def __init__(self, *stores: str) -> None:
        self.stores = stores

    def init(self, context: ProcessorContext) -> None:
        for name in self.stores:
            assert context.get_state_store(name) is not None

    def transform(self, read_only_key: str, value: str | None) -> str:
        return f"{read_only_key}->{value}!"


class Counting(ValueTransformerWithKey[str, str]):
    """Stateful in the object: 1, 2, 3, ... whatever the value."""

    def __init__(self) -> None:
        self.counter = 0

    def transform(self, read_only_key: str, value: str | None) -> int:
        self.counter += 1
        return self.counter


class Length(ValueTransformerWithKey[str, str]):
    def transform(self, read_only_key: str, value: str | None) -> int | None:
        return None if value is None else len(value)


def store(name: str) -> Any:
    return Stores.key_value_store_builder(Stores.in_memory_key_value_store(name), S, S)


def outputs(driver: TopologyTestDriver, value_serde: Any = S) -> list[tuple[Any, Any, int]]:
    out = driver.create_output_topic("out", S, value_serde).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in out]


def test_transforms_values_with_their_keys_deletes_included() -> None:
    # shouldTransformValuesWithKey
    builder = StreamsBuilder()
    builder.add_state_store(store("store")).add_state_store(store("other"))
    table = builder.table("in", key_serde=S, value_serde=S)
    table.transform_values(lambda: Exclamation("store", "other"), "store", "other").to_stream().to(
        "out", key_serde=S, value_serde=S
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        src.pipe_input("A", "a", 5)
        src.pipe_input("B", "b", 10)
        src.pipe_input("D", None, 15)
        assert outputs(driver) == [("A", "A->a!", 5), ("B", "B->b!", 10), ("D", "D->None!", 15)]


def test_materialized_keeps_the_results_in_a_queryable_store() -> None:
    # shouldTransformValuesWithKeyAndMaterialize
    builder = StreamsBuilder()
    builder.add_state_store(store("store"))
    table = builder.table("in", key_serde=S, value_serde=S)
    table.transform_values(
        lambda: Exclamation("store", "queryable"),
        "store",
        materialized=Materialized("queryable", key_serde=S, value_serde=S),
    ).to_stream().to("out", key_serde=S, value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        src.pipe_input("A", "a", 5)
        src.pipe_input("C", None, 15)
        assert outputs(driver) == [("A", "A->a!", 5), ("C", "C->None!", 15)]
        assert driver.get_key_value_store("queryable").get("C") == "C->None!"
        assert driver.get_timestamped_key_value_store("queryable").get("A") == ("A->a!", 5)


def _regrouped(builder: StreamsBuilder, transformed: Any) -> None:
    # Forces old values through: the reduce subtracts what the transformer made before.
    (
        transformed.group_by(lambda k, v: (k, v), key_serde=S, value_serde=INT)
        .reduce(lambda a, b: a + b, lambda a, b: a - b)
        .map_values(str)
        .to_stream()
        .to("out", key_serde=S, value_serde=S)
    )


def test_a_stateful_transformer_gets_its_old_values_from_the_store() -> None:
    # shouldCalculateCorrectOldValuesIfMaterializedEvenIfStateful: re-running
    # the transformer on the old value would count again; the store has it.
    builder = StreamsBuilder()
    table = builder.table("in", key_serde=S, value_serde=S)
    _regrouped(
        builder,
        table.transform_values(
            Counting, materialized=Materialized("queryable", key_serde=S, value_serde=INT)
        ),
    )
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for value, ts in [("ignored", 5), ("ignored1", 15), ("ignored2", 10)]:
            src.pipe_input("A", value, ts)
        assert outputs(driver) == [("A", "1", 5), ("A", "2", 15), ("A", "3", 15)]
        assert driver.get_key_value_store("queryable").get("A") == 3


@pytest.mark.parametrize("materialized", [None, Materialized(key_serde=S, value_serde=INT)])
def test_a_stateless_transformer_computes_old_values_again(materialized: Any) -> None:
    # shouldCalculateCorrectOldValuesIfNotStatefulEvenIfNotMaterialized (and
    # ...NoQueryableName: a Materialized without a store name keeps none).
    builder = StreamsBuilder()
    table = builder.table("in", key_serde=S, value_serde=S)
    _regrouped(builder, table.transform_values(Length, materialized=materialized))
    with TopologyTestDriver(builder.build()) as driver:
        src = driver.create_input_topic("in", S, S)
        for value, ts in [("a", 5), ("aa", 15), ("aaa", 10)]:
            src.pipe_input("A", value, ts)
        assert outputs(driver) == [("A", "1", 5), ("A", "2", 15), ("A", "3", 15)]


def stream_joining_transformed_table(supplier: Any) -> Any:
    """A stream joined with a table transformed by ``supplier``'s
    transformers (unmaterialized: the join reads it through its getter)."""
    builder = StreamsBuilder()
    table = builder.table("table", key_serde=S, value_serde=S, materialized="parent")
    transformed = table.transform_values(supplier)
    builder.stream("stream", key_serde=S, value_serde=S).join(
        transformed, lambda v, tv: f"{v}/{tv}"
    ).to("out", key_serde=S, value_serde=S)
    return builder.build()


def test_a_join_reads_the_transformed_table_through_its_transformer() -> None:
    # shouldTransformOnGetIfNotMaterialized: the getter transforms the
    # parent's value with a transformer of its own.
    with TopologyTestDriver(stream_joining_transformed_table(Exclamation)) as driver:
        driver.create_input_topic("table", S, S).pipe_input("A", "a", 1)
        driver.create_input_topic("stream", S, S).pipe_input("A", "x", 2)
        # An absent key: the transformer still makes a value of None.
        driver.create_input_topic("stream", S, S).pipe_input("B", "y", 3)
        assert outputs(driver) == [("A", "x/A->a!", 2), ("B", "y/B->None!", 3)]


def test_every_transformer_is_closed_with_the_task_the_getters_too() -> None:
    # Kafka's KTableTransformValuesGetter closes its transformer.
    made: list[Closing] = []

    class Closing(Exclamation):
        closed = 0

        def __init__(self) -> None:
            super().__init__()
            made.append(self)

        def close(self) -> None:
            self.closed += 1

    with TopologyTestDriver(stream_joining_transformed_table(Closing)) as driver:
        driver.create_input_topic("table", S, S).pipe_input("A", "a", 1)
        driver.create_input_topic("stream", S, S).pipe_input("A", "x", 2)
        assert outputs(driver) == [("A", "x/A->a!", 2)]
        # The node's transformer and the join's getter's.
        assert len(made) == 2 and all(t.closed == 0 for t in made)
    assert [t.closed for t in made] == [1, 1]


def test_the_transformer_cannot_forward() -> None:
    class Forwarding(ValueTransformerWithKey[str, str]):
        def init(self, context: ProcessorContext) -> None:
            self.context = context

        def transform(self, read_only_key: str, value: str | None) -> str:
            self.context.forward(Record("other", value, 0))
            return "never"

    builder = StreamsBuilder()
    builder.table("in", key_serde=S, value_serde=S).transform_values(Forwarding).to_stream().to(
        "out", key_serde=S, value_serde=S
    )
    with (
        TopologyTestDriver(builder.build()) as driver,
        pytest.raises(Exception, match="cannot forward"),
    ):
        driver.create_input_topic("in", S, S).pipe_input("A", "a", 1)


def test_a_supplier_must_make_a_transformer() -> None:
    builder = StreamsBuilder()
    with pytest.raises(TopologyError, match="supplier"):
        builder.table("in").transform_values("nope")  # type: ignore[arg-type]
    builder = StreamsBuilder()
    builder.table("in", key_serde=S, value_serde=S).transform_values(
        lambda: "not a transformer"  # type: ignore[arg-type,return-value]
    ).to_stream().to("out", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="not a ValueTransformerWithKey"):
        TopologyTestDriver(builder.build()).close()


def test_names_as_kafka_does() -> None:
    builder = StreamsBuilder()
    builder.table("in").transform_values(Length).to_stream()
    text = str(builder.build().describe())
    assert "Processor: KTABLE-TRANSFORMVALUES-0000000003 (stores: [])" in text
