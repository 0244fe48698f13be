"""KGroupedStream: a stream grouped by key, ready to aggregate."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from strom.errors import TopologyError
from strom.kstream import cogrouped_kstream, windowed_kstream
from strom.kstream.internals import aggregations
from strom.kstream.internals import processors as p
from strom.kstream.internals import table_processors as tp
from strom.kstream.materialized import Materialized
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.serdes import Long

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.ktable import KTable
    from strom.kstream.windowed_kstream import (
        SessionWindowedKStream,
        SlidingWindowedKStream,
        TimeWindowedKStream,
    )
    from strom.processor.internals.nodes import Node
    from strom.serdes import Serde


class KGroupedStream:
    """A stream grouped by key, ready to aggregate (Kafka's ``KGroupedStream``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_required: bool,
        repartition_name: str | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_required = repartition_required
        # Kafka's Grouped.as: the repartition topic's name, <name>-repartition.
        self._repartition_name = repartition_name

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        node: Callable[[str], Node],
        name: str | None,
    ) -> KTable:
        return aggregations.add_aggregation(
            self._builder,
            self._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=self._key_serde,
            value_serde=self._value_serde,
            result_serde=result_serde,
            repartition_serde=self._value_serde,
            repartition=self._repartition_required,
            repartition_name=self._repartition_name,
            node=lambda store, _retention: node(store),
            name=name,
        )

    def cogroup(
        self, aggregator: Callable[[Any, Any, Any], Any]
    ) -> cogrouped_kstream.CogroupedKStream:
        """Starts aggregating this and other grouped streams into one table:
        this stream's records update the aggregate with
        ``aggregator(key, value, aggregate)``; add others with
        ``CogroupedKStream.cogroup``, then ``aggregate``."""
        return cogrouped_kstream.CogroupedKStream(self, aggregator)

    def count(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        """Counts records per key (null keys and values are skipped) into a
        KTable of ``int``. ``name`` names the processor (Kafka's ``Named``),
        as it does for ``reduce`` and ``aggregate``."""
        aggregations.spend_count_store_name(self._builder, materialized)
        node: Callable[[str], Node] = p.KStreamCount
        if Materialized.of(materialized).versioned:
            # The native count writes a plain store: a versioned one takes
            # Kafka's count as an aggregate (its initializer and adder).
            def node(store: str) -> Node:
                return tp.KStreamAggregate(store, tp.count_initializer, tp.count_adder)

        return self._aggregate("KSTREAM-AGGREGATE-", materialized, Long(), node, name)

    @overload
    def windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream: ...
    @overload
    def windowed_by(self, windows: SlidingWindows) -> SlidingWindowedKStream: ...
    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream: ...
    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedKStream | SlidingWindowedKStream | SessionWindowedKStream:
        """Aggregates per key and window (time, sliding or session windows);
        results are keyed by ``Windowed``."""
        if isinstance(windows, TimeWindows):
            return windowed_kstream.TimeWindowedKStream(self, windows)
        if isinstance(windows, SlidingWindows):
            return windowed_kstream.SlidingWindowedKStream(self, windows)
        if isinstance(windows, SessionWindows):
            return windowed_kstream.SessionWindowedKStream(self, windows)
        raise TopologyError(
            "windowed_by takes TimeWindows, SlidingWindows or SessionWindows, "
            f"not {type(windows).__name__}"
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """Combines each key's values: ``reducer(aggregate, value)``; the first
        value is the first aggregate. Null keys and values are skipped."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._value_serde,
            lambda store: tp.KStreamAggregate(store, None, lambda _k, v, agg: reducer(agg, v)),
            name,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key.
        The result serde comes from ``materialized`` (or default.value.serde)."""
        return self._aggregate(
            "KSTREAM-AGGREGATE-",
            materialized,
            None,
            lambda store: tp.KStreamAggregate(store, initializer, aggregator),
            name,
        )
