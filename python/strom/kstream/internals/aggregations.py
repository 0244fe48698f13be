"""The graph builders behind the DSL's aggregations (Kafka's
KGroupedStreamImpl/KGroupedTableImpl and their aggregate builders): the
processor, its store, a repartition topic when the key changed, and the
result table."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom import agg as strom_agg
from strom.errors import TopologyError
from strom.kstream import ktable
from strom.kstream.internals import window_aggregates as wa
from strom.kstream.internals.names import check_name
from strom.kstream.internals.native_window import (
    MeanState,
    NativeSessionWindowAggregate,
    NativeSlidingWindowAggregate,
    NativeTimeWindowAggregate,
)
from strom.kstream.internals.table_processors import KStreamAggregate
from strom.kstream.internals.table_suppliers import AggregateSupplier, TableView, store_view
from strom.kstream.materialized import Materialized
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.processor.internals.nodes import PassThrough
from strom.serdes import Double, Long, Serde, SessionWindowed, TimeWindowed
from strom.state.stores import to_millis

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.emit_strategy import EmitStrategy
    from strom.kstream.kgrouped_stream import KGroupedStream
    from strom.kstream.ktable import KTable
    from strom.processor.internals.nodes import Node
    from strom.processor.internals.topology_builder import StoreDef

AnyWindows = TimeWindows | SlidingWindows | SessionWindows
Aggregator = Callable[[Any, Any, Any], Any]


def add_aggregation(
    builder: StreamsBuilder,
    parent: str,
    *,
    name_prefix: str,
    materialized: Materialized | str | None,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    result_serde: Serde[Any] | None,
    repartition_serde: Serde[Any] | None,
    repartition: bool,
    node: Callable[[str, int], Node],
    repartition_name: str | None = None,
    windows: AnyWindows | None = None,
    emit: EmitStrategy | None = None,
    store_value_serde: Serde[Any] | None = None,
    grouped_table: bool = False,
    name: str | None = None,
) -> KTable:
    """The shape every DSL aggregation shares: name the processor and its
    store (Kafka's ``<PREFIX>-STATE-STORE-…`` unless materialized with a
    name), repartition through ``<store>-repartition`` when the key changed
    (always after a ``KTable.group_by``: ``grouped_table``), add the store,
    and return the result table. ``node(store, retention)`` makes the
    processor (the retention of a windowed store, else 0); ``name`` names it
    (Kafka's ``Named``), and a grouped table's repartition sink and source."""
    mat = Materialized.of(materialized)
    if windows is not None:
        _refuse_versioned_windows(mat)
    # Kafka names the store first (MaterializedInternal); the processor
    # follows a grouped table's repartition topic and precedes a stream's.
    # A grouped table's reduce names its store KTABLE-AGGREGATE-STATE-STORE-.
    store_prefix = "KTABLE-AGGREGATE-" if grouped_table else name_prefix
    store_name = mat.store_name or builder.new_name(f"{store_prefix}STATE-STORE-")
    key_serde = mat.key_serde or key_serde
    value_serde = mat.value_serde or result_serde
    topic_prefix = repartition_name or store_name
    if grouped_table:
        assert repartition_serde is not None
        parent = builder.table_repartition(topic_prefix, parent, key_serde, repartition_serde, name)
    agg_name = builder.processor_name(name, name_prefix)
    if repartition and not grouped_table:
        parent = builder.repartition(topic_prefix, parent, key_serde, repartition_serde)
    store = _aggregate_store(
        mat, store_name, key_serde, store_value_serde or value_serde, windows, emit
    )
    builder.internal.add_processor(agg_name, lambda: node(store_name, store.retention), parent)
    builder.internal.add_store(store.definition, agg_name)
    return _result_table(builder, agg_name, store, mat, value_serde, windows)


def add_cogroup(
    builder: StreamsBuilder,
    patterns: Sequence[tuple[KGroupedStream, Aggregator]],
    initializer: Callable[[], Any],
    materialized: Materialized | str | None,
    name: str | None,
    windows: AnyWindows | None = None,
    merger: Aggregator | None = None,
) -> KTable:
    """Kafka's CogroupedStreamAggregateBuilder: one aggregation processor
    per grouped stream (each with its own aggregator and, windowed, its own
    observed stream time), all writing one store, and a pass-through that
    merges their updates into the result table. The grouped streams whose
    key changed are repartitioned first, and every input of the aggregation
    must be co-partitioned. Windowed results are emitted on every update
    (Kafka's cogroup has no emit strategy). The store's serdes are the
    Materialized's or the defaults, as in Kafka; repartition topics use the
    grouped streams' own."""
    mat = Materialized.of(materialized)
    if windows is not None:
        _refuse_versioned_windows(mat)
    prefix = "COGROUPKSTREAM-AGGREGATE-"
    store_name = mat.store_name or builder.new_name(f"{prefix}STATE-STORE-")
    parents = []
    unnamed = 0
    for grouped, _aggregator in patterns:
        parent = grouped._node
        if grouped._repartition_required:
            topic = grouped._repartition_name
            if topic is None:
                # Kafka names every unnamed one <store>-repartition, so that
                # two of them clash there; strom numbers the others.
                topic = store_name if unnamed == 0 else f"{store_name}-{unnamed}"
                unnamed += 1
            parent = builder.repartition(topic, parent, grouped._key_serde, grouped._value_serde)
        parents.append(parent)
    store = _aggregate_store(mat, store_name, mat.key_serde, mat.value_serde, windows, None)

    def make(aggregator: Aggregator) -> Callable[[], Node]:
        if isinstance(windows, TimeWindows):
            return lambda: wa.KStreamWindowAggregate(
                store_name, windows, initializer, aggregator, False
            )
        if isinstance(windows, SlidingWindows):
            return lambda: wa.KStreamSlidingWindowAggregate(
                store_name, windows, initializer, aggregator, False
            )
        if isinstance(windows, SessionWindows):
            assert merger is not None
            return lambda: wa.KStreamSessionWindowAggregate(
                store_name, windows, store.retention, initializer, aggregator, merger, False
            )
        return lambda: KStreamAggregate(store_name, initializer, aggregator)

    if name is not None:
        check_name(name)
    agg_names = []
    for i, ((_grouped, aggregator), parent) in enumerate(zip(patterns, parents, strict=True)):
        generated = builder.new_name(prefix)  # spent even when named, as Kafka does
        agg_name = f"{name}-cogroup-agg-{i}" if name else generated
        builder.internal.add_processor(agg_name, make(aggregator), parent)
        agg_names.append(agg_name)
    builder.internal.add_store(store.definition, *agg_names)
    generated = builder.new_name("COGROUPKSTREAM-MERGE-")
    merge_name = f"{name}-cogroup-merge" if name else generated
    builder.internal.add_processor(merge_name, PassThrough, *agg_names)
    builder.internal.co_partition(merge_name)
    return _result_table(builder, merge_name, store, mat, mat.value_serde, windows)


def spend_count_store_name(builder: StreamsBuilder, materialized: Any) -> None:
    """Kafka's ``count(Materialized)`` of a grouped stream and of time and
    session windows generates one store name more when the Materialized
    names no store (kept for its topologies' compatibility): spent here
    too, so that the names after it are Kafka's."""
    if materialized is not None and Materialized.of(materialized).store_name is None:
        builder.new_name("KSTREAM-AGGREGATE-STATE-STORE-")


def _refuse_versioned_windows(mat: Materialized) -> None:
    if mat.versioned:
        raise TopologyError(
            f"store {mat.store_name!r}: a windowed aggregation keeps a window or session "
            "store; a versioned store is a key-value store (as in Kafka, whose windowed "
            "Materialized takes no versioned store supplier)"
        )


def _window_retention(mat: Materialized, store_name: str, spec: WindowStoreSpec) -> int:
    """The windowed store's retention: the default, Materialized's, or its
    store supplier's, which must also fit the windows (Kafka takes a
    supplier as it is; one that would hide windows before they close, or
    keep windows of another size, is an error here)."""
    supplier = mat.supplier
    asked: int | None = None
    if supplier is not None and supplier.retention_ms is not None and not mat.versioned:
        if mat.retention is not None:
            raise TopologyError(
                f"store {store_name!r}: the retention comes from its store supplier; "
                "Materialized(retention=) goes with a store name"
            )
        if supplier.retain_duplicates:
            raise TopologyError(
                f"store {store_name!r}: an aggregation keeps one value per window, so its "
                "window store supplier must not retain duplicates"
            )
        if spec.window_size_ms is not None and supplier.window_size_ms != spec.window_size_ms:
            raise TopologyError(
                f"store {store_name!r}: its supplier's window size ({supplier.window_size_ms} "
                f"ms) is not the windows' ({spec.window_size_ms} ms)"
            )
        asked = supplier.retention_ms
    elif mat.retention is not None:
        asked = to_millis(mat.retention, "retention")
    # Kept for the default retention unless asked for longer.
    if asked is None:
        return spec.retention_ms
    if asked < spec.retention_ms:
        raise TopologyError(
            f"store {store_name!r}: the retention ({asked} ms) must be at least "
            f"{spec.minimum} ({spec.retention_ms} ms)"
        )
    return asked


@dataclass(frozen=True)
class _AggregateStore:
    """An aggregation's store, and what its processors and table need of it."""

    definition: StoreDef
    # A windowed store's retention, else 0.
    retention: int
    # How long after a window's end suppress(until_window_closes) waits.
    grace_ms: int | None
    table_key_serde: Serde[Any] | None


def _aggregate_store(
    mat: Materialized,
    store_name: str,
    key_serde: Serde[Any] | None,
    value_serde: Serde[Any] | None,
    windows: AnyWindows | None,
    emit: EmitStrategy | None,
) -> _AggregateStore:
    if windows is None:
        store = mat.store_def(store_name, key_serde, value_serde)
        return _AggregateStore(store, 0, None, key_serde)
    spec = window_store(windows)
    store = mat.store_def(store_name, key_serde, value_serde, windowed=spec.kind)
    retention = _window_retention(mat, store_name, spec)
    store.kind, store.window_size_ms = spec.kind, spec.window_size_ms
    store.retention_ms = retention
    if emit is not None and emit.final_only:
        if isinstance(windows, SessionWindows | SlidingWindows):
            # Kafka's SessionStoreMaterializer and SlidingWindowStoreMaterializer
            # never cache a store that serves final results; its
            # WindowStoreMaterializer (time windows) does, as Materialized says.
            store.caching = False
        # Final results come from Kafka's time-ordered stores, which keep
        # a little longer: one more window start, or whole time segments
        # of sessions; the processors hide the rest from lookups.
        store.retention_ms += wa.segment_interval(retention) if spec.kind == "session" else 1
    store.timestamped = spec.kind == "window"
    table_key_serde = None if key_serde is None else spec.key_serde(key_serde)
    return _AggregateStore(store, retention, spec.grace_ms, table_key_serde)


def _result_table(
    builder: StreamsBuilder,
    node: str,
    store: _AggregateStore,
    mat: Materialized,
    value_serde: Serde[Any] | None,
    windows: AnyWindows | None,
) -> KTable:
    store_name = store.definition.name
    view = store_view(store_name, mat.versioned)
    if windows is not None:
        # Joins read a windowed table by window, not by key.
        read = wa.session_getter if isinstance(windows, SessionWindows) else wa.window_getter
        view = TableView((store_name,), read(store_name))
    return ktable.KTable(
        builder,
        node,
        store.table_key_serde,
        value_serde,
        AggregateSupplier(view),
        store_name=mat.store_name,
        window_grace_ms=store.grace_ms,
    )


@dataclass(frozen=True)
class WindowStoreSpec:
    """The store behind a windowed aggregation, and what its table needs."""

    kind: str
    retention_ms: int
    window_size_ms: int | None
    # How long after a window's end suppress(until_window_closes) waits.
    grace_ms: int
    minimum: str
    key_serde: Callable[[Serde[Any]], Serde[Any]]


def window_store(windows: AnyWindows) -> WindowStoreSpec:
    if isinstance(windows, TimeWindows):
        size = windows.size_ms
        return WindowStoreSpec(
            "window",
            windows.retention_ms(),
            size,
            windows.grace_ms,
            "the window size plus the grace period",
            lambda inner: TimeWindowed(inner, size),
        )
    if isinstance(windows, SlidingWindows):
        difference = windows.time_difference_ms
        return WindowStoreSpec(
            "window",
            windows.retention_ms(),
            difference,
            windows.grace_ms,
            "twice the time difference plus the grace period",
            lambda inner: TimeWindowed(inner, difference),
        )
    # Kafka's suppression waits for the gap too: a session can grow until then.
    return WindowStoreSpec(
        "session",
        windows.retention_ms(),
        None,
        windows.inactivity_gap_ms + windows.grace_ms,
        "the inactivity gap plus the grace period",
        SessionWindowed,
    )


def native_windowed(
    grouped: KGroupedStream,
    windows: AnyWindows,
    emit: EmitStrategy,
    aggregation: strom_agg.Aggregation,
    materialized: Any,
    node_type: type[NativeTimeWindowAggregate]
    | type[NativeSlidingWindowAggregate]
    | type[NativeSessionWindowAggregate],
    name: str | None = None,
) -> KTable:
    """A built-in aggregation (see strom.agg) of any windows on the native
    kernel: its results are Longs or Doubles, a mean's store holds sum and
    count."""
    value_type = aggregation.value_type(grouped._value_serde)
    result_serde: Serde[Any] = (
        Double() if aggregation.result_type(grouped._value_serde) == "float" else Long()
    )
    asked = Materialized.of(materialized).value_serde
    if asked is not None and type(asked) is not type(result_serde):
        raise TopologyError(
            f"strom.agg.{aggregation.kind} results are {type(result_serde).__name__}s: "
            f"Materialized cannot give them the value serde {type(asked).__name__}"
        )
    return add_aggregation(
        grouped._builder,
        grouped._node,
        name_prefix="KSTREAM-AGGREGATE-",
        materialized=materialized,
        key_serde=grouped._key_serde,
        value_serde=grouped._value_serde,
        result_serde=result_serde,
        repartition_serde=grouped._value_serde,
        repartition=grouped._repartition_required,
        repartition_name=grouped._repartition_name,
        node=lambda store, retention: node_type(
            store,
            windows,  # type: ignore[arg-type]  # each node type takes its own windows
            aggregation,
            value_type,
            retention,
            emit_final=emit.final_only,
        ),
        windows=windows,
        emit=emit,
        store_value_serde=MeanState() if aggregation.kind == "mean" else None,
        name=name,
    )
