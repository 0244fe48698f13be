"""Topology.describe() prints Kafka's TopologyDescription text to the
character: the expected texts are Kafka's own (its TopologyTest and
CogroupedKStreamImplTest); tests/differential compares the descriptions of
random topologies with Kafka's as well."""

from __future__ import annotations

import pytest

from strom import StreamsBuilder, serdes
from strom.errors import TopologyError
from strom.kstream import BufferConfig, JoinWindows, Materialized, Suppressed
from strom.processor.internals.describe_order import java_hash_order, java_string_hash

S, INT = serdes.String(), serdes.Integer()


def test_java_string_hash_is_javas() -> None:
    # "hello".hashCode() == 99162322; "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == 2**31
    assert java_string_hash("") == 0


def test_stores_print_in_java_hash_set_order() -> None:
    # TopologyTest.streamStreamOuterJoinTopologyWithCustomStoresNames
    assert java_hash_order(
        ["custom-name-outer-this-join-store", "custom-name-outer-shared-join-store"], copied=True
    ) == ["custom-name-outer-this-join-store", "custom-name-outer-shared-join-store"]
    assert java_hash_order(
        ["custom-name-outer-shared-join-store", "custom-name-outer-other-join-store"], copied=True
    ) == ["custom-name-outer-other-join-store", "custom-name-outer-shared-join-store"]


def test_outer_join_with_default_store_names() -> None:
    # TopologyTest.streamStreamOuterJoinTopologyWithDefaultStoresNames
    builder = StreamsBuilder()
    stream1 = builder.stream("input-topic1", key_serde=INT, value_serde=S)
    stream2 = builder.stream("input-topic2", key_serde=INT, value_serde=S)
    stream1.outer_join(
        stream2, lambda a, b: f"{a}+{b}", JoinWindows.of_time_difference_with_no_grace(100)
    )
    assert str(builder.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [input-topic1])\n"
        "      --> KSTREAM-WINDOWED-0000000002\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic2])\n"
        "      --> KSTREAM-WINDOWED-0000000003\n"
        "    Processor: KSTREAM-WINDOWED-0000000002 (stores: "
        "[KSTREAM-OUTERTHIS-0000000004-store])\n"
        "      --> KSTREAM-OUTERTHIS-0000000004\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-WINDOWED-0000000003 (stores: "
        "[KSTREAM-OUTEROTHER-0000000005-store])\n"
        "      --> KSTREAM-OUTEROTHER-0000000005\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: KSTREAM-OUTEROTHER-0000000005 (stores: "
        "[KSTREAM-OUTERTHIS-0000000004-store, KSTREAM-OUTERSHARED-0000000004-store])\n"
        "      --> KSTREAM-MERGE-0000000006\n"
        "      <-- KSTREAM-WINDOWED-0000000003\n"
        "    Processor: KSTREAM-OUTERTHIS-0000000004 (stores: "
        "[KSTREAM-OUTEROTHER-0000000005-store, KSTREAM-OUTERSHARED-0000000004-store])\n"
        "      --> KSTREAM-MERGE-0000000006\n"
        "      <-- KSTREAM-WINDOWED-0000000002\n"
        "    Processor: KSTREAM-MERGE-0000000006 (stores: [])\n"
        "      --> none\n"
        "      <-- KSTREAM-OUTERTHIS-0000000004, KSTREAM-OUTEROTHER-0000000005\n\n"
    )


def test_unmaterialized_and_named_table_map_values() -> None:
    # TopologyTest.kTableNonMaterializedMapValuesShouldPreserveTopologyStructure
    builder = StreamsBuilder()
    builder.table("input-topic").map_values(lambda v: None)
    assert str(builder.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [])\n"
        "      --> KTABLE-MAPVALUES-0000000003\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: KTABLE-MAPVALUES-0000000003 (stores: [])\n"
        "      --> none\n"
        "      <-- KTABLE-SOURCE-0000000002\n\n"
    )
    # ...NamedMaterializedMapValuesShouldPreserveTopologyStructure
    builder = StreamsBuilder()
    builder.table("input-topic").map_values(lambda v: None, materialized=Materialized("store-name"))
    assert str(builder.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [input-topic])\n"
        "      --> KTABLE-SOURCE-0000000002\n"
        "    Processor: KTABLE-SOURCE-0000000002 (stores: [])\n"
        "      --> KTABLE-MAPVALUES-0000000003\n"
        "      <-- KSTREAM-SOURCE-0000000001\n"
        "    Processor: KTABLE-MAPVALUES-0000000003 (stores: [store-name])\n"
        "      --> none\n"
        "      <-- KTABLE-SOURCE-0000000002\n\n"
    )


def test_names_given_to_operations_still_spend_their_index() -> None:
    """Kafka's NamedInternal.orElseGenerateWithPrefix: a named filter spends
    an index, so the names generated after it are those Kafka generates."""
    builder = StreamsBuilder()
    builder.stream("in").filter(lambda k, v: True, name="keep").to("out")
    assert "Sink: KSTREAM-SINK-0000000002 (topic: out)" in str(builder.build().describe())


def test_named_sources_name_a_stream_source_and_a_tables_processor_and_source() -> None:
    """Kafka's Consumed.as: a stream's source takes the name; a table's and a
    global table's processor take it, and their source ``<name>-source``.
    Each name still spends its index."""
    builder = StreamsBuilder()
    orders = builder.stream("orders", name="orders-in")
    prices = builder.table("prices", name="prices-in")
    builder.global_table("rates", name="rates-in")
    orders.join(prices, lambda o, p: o + p).to("out")
    text = str(builder.build().describe())
    assert "Source: orders-in (topics: [orders])" in text
    assert "Source: prices-in-source (topics: [prices])\n      --> prices-in\n" in text
    assert "Processor: prices-in (stores: [prices-STATE-STORE-0000000001])" in text
    assert "Source: rates-in-source (topics: [rates])\n      --> rates-in\n" in text
    assert "Processor: rates-in (stores: [rates-STATE-STORE-0000000004])" in text
    assert "Processor: KSTREAM-JOIN-0000000007 (stores: [prices-STATE-STORE-0000000001])" in text


def test_illegal_names_are_refused_as_kafka_refuses_them() -> None:
    """Kafka's Named.validate: a name becomes processor and topic names, so
    it must be a legal topic name, at most 249 characters."""
    stream = StreamsBuilder().stream("in", key_serde=S, value_serde=S)
    with pytest.raises(TopologyError, match="name 'my step' is illegal"):
        stream.filter(lambda k, v: True, name="my step")
    with pytest.raises(TopologyError, match="name 'a/b' is illegal"):
        stream.repartition(name="a/b")
    with pytest.raises(TopologyError, match="cannot be empty"):
        stream.split(name="s-").branch(lambda k, v: True, name="")
    with pytest.raises(TopologyError, match=r"cannot be '\.\.'"):
        Suppressed.until_time_limit(10, BufferConfig.unbounded()).with_name("..")
    with pytest.raises(TopologyError, match="250 characters long; at most 249"):
        stream.group_by_key().count(name="n" * 250)
    stream.filter(lambda k, v: True, name="A.legal_name-0").to("out")


def test_group_by_names_the_selector_and_the_repartition_topic() -> None:
    """Kafka's Grouped.as: the key selector is named, the repartition topic
    is <name>-repartition, and its nodes are named after it."""
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).group_by(
        lambda k, v: v, name="by-value"
    ).count()
    text = str(builder.build().describe())
    assert "Processor: by-value (stores: [])" in text
    assert "Sink: by-value-repartition-sink (topic: by-value-repartition)" in text
    assert "Source: by-value-repartition-source (topics: [by-value-repartition])" in text


def test_a_named_aggregation_names_its_processor_and_its_tables_repartition() -> None:
    """Kafka's Named on count/reduce/aggregate: the processor is named; a
    grouped table's repartition sink and source are <name>-sink/-source;
    the store keeps its generated name. tests/differential compares named
    aggregations of every kind with Kafka's descriptions."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.group_by_key().count(name="clicks")
    table = builder.table("users", key_serde=S, value_serde=S)
    table.group_by(lambda user, city: (city, user), key_serde=S, value_serde=S).count(
        name="by-city"
    )
    text = str(builder.build().describe())
    assert "Processor: clicks (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000001])" in text
    assert "Sink: by-city-sink (topic: KTABLE-AGGREGATE-STATE-STORE-" in text
    assert "Source: by-city-source (topics: [KTABLE-AGGREGATE-STATE-STORE-" in text
    assert "Processor: by-city (stores: [KTABLE-AGGREGATE-STATE-STORE-" in text


def test_count_with_an_unnamed_materialized_spends_a_store_name() -> None:
    """Kafka's count(Materialized) generates one more store name when the
    Materialized names no store (kept for its topologies' compatibility)."""

    def store_of_count(materialized: Materialized | None) -> str:
        builder = StreamsBuilder()
        builder.stream("in", key_serde=S, value_serde=S).group_by_key().count(materialized)
        text = str(builder.build().describe())
        return text.split("stores: [")[1].split("]", maxsplit=1)[0]

    assert store_of_count(None) == "KSTREAM-AGGREGATE-STATE-STORE-0000000001"
    assert store_of_count(Materialized(key_serde=S)) == "KSTREAM-AGGREGATE-STATE-STORE-0000000002"


def test_to_table_and_to_stream_take_kafkas_naming_and_mapper() -> None:
    """KStream.to_table(name=) names the table's processor and, after a key
    change, its repartition topic; KTable.to_stream(mapper) re-keys the
    updates (Kafka's toStream(KeyValueMapper) is toStream().selectKey)."""
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S)
    table = stream.select_key(lambda _k, v: v).to_table(name="latest")
    table.to_stream(lambda key, value: f"{key}/{value}").to("out", key_serde=S, value_serde=S)
    text = str(builder.build().describe())
    assert "Sink: latest-repartition-sink (topic: latest-repartition)" in text
    assert "Processor: latest (stores: [])" in text
    assert "--> KSTREAM-KEY-SELECT-" in text


def test_the_description_is_kafkas_text_and_its_nodes() -> None:
    # Kafka's TopologyDescription: subtopologies() and globalStores(), whose
    # nodes know their neighbours.
    builder = StreamsBuilder()
    builder.global_table("products", key_serde=S, value_serde=S, materialized="prod")
    stream = builder.stream("in", key_serde=S, value_serde=S)
    stream.select_key(lambda _k, v: v).group_by_key().count(Materialized("counts")).to_stream().to(
        "out", value_serde=serdes.Long()
    )
    description = builder.build().describe()
    assert isinstance(description, str)
    assert description == builder.build()._internal.describe()
    (global_store,) = description.global_stores
    assert global_store.source.topics == ("products",)
    assert global_store.processor.stores == ("prod",)
    assert global_store.source.successors == (global_store.processor.name,)
    first, second = description.subtopologies
    assert [type(n).__name__ for n in first.nodes] == ["Source", "Processor", "Processor", "Sink"]
    source, select, key_filter, sink = first.nodes
    assert source.topics == ("in",) and source.successors == (select.name,)
    assert select.predecessors == (source.name,) and select.successors == (key_filter.name,)
    assert sink.topic == "counts-repartition"
    assert sink.predecessors == (key_filter.name,)
    aggregate = next(n for n in second.nodes if type(n).__name__ == "Processor" and n.stores)
    assert aggregate.stores == ("counts",)
    assert f"Processor: {aggregate.name} (stores: [counts])" in description
