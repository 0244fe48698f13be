"""The windowed streams: a grouped stream cut into time, sliding or session
windows (Kafka's ``TimeWindowedKStream`` and ``SessionWindowedKStream``).

One base holds what the three share (the emit strategy, the built-in
aggregations on the native kernels, count); each subclass names its
processor and keeps its own ``reduce`` and ``aggregate``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, overload

from strom import agg as strom_agg
from strom.errors import TopologyError
from strom.kstream.emit_strategy import EmitStrategy
from strom.kstream.internals import aggregations
from strom.kstream.internals import window_aggregates as wa
from strom.kstream.internals.native_window import (
    NativeSessionWindowAggregate,
    NativeSlidingWindowAggregate,
    NativeTimeWindowAggregate,
)
from strom.kstream.materialized import Materialized
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows
from strom.serdes import Long

if TYPE_CHECKING:
    from typing_extensions import Self  # Python 3.10 has no typing.Self

    from strom.kstream.kgrouped_stream import KGroupedStream
    from strom.kstream.ktable import KTable
    from strom.processor.internals.nodes import Node
    from strom.serdes import Serde

W = TypeVar("W", TimeWindows, SlidingWindows, SessionWindows)
Aggregator = Callable[[Any, Any, Any], Any]


class _WindowedKStream(ABC, Generic[W]):
    """What the windowed streams share."""

    _native_node: ClassVar[
        type[NativeTimeWindowAggregate]
        | type[NativeSlidingWindowAggregate]
        | type[NativeSessionWindowAggregate]
    ]
    # Kafka's count(Materialized) of time and session windows (not sliding
    # ones) spends one more store name (see spend_count_store_name).
    _count_spends_a_store_name: ClassVar[bool] = True

    def __init__(self, grouped: KGroupedStream, windows: W) -> None:
        self._grouped = grouped
        self._windows: W = windows
        self._emit = EmitStrategy.on_window_update()

    def emit_strategy(self, emit_strategy: EmitStrategy) -> Self:
        """Every update (the default) or only final results, once per window."""
        if not isinstance(emit_strategy, EmitStrategy):
            raise TopologyError(
                "emit_strategy takes EmitStrategy.on_window_update() or "
                f"EmitStrategy.on_window_close(), not {emit_strategy!r}"
            )
        self._emit = emit_strategy
        return self

    @abstractmethod
    def _node(
        self,
        store: str,
        retention: int,
        initializer: Callable[[], Any] | None,
        aggregator: Aggregator,
        merger: Aggregator | None,
        final_only: bool,
    ) -> Node:
        """The processor of an aggregation in Python callbacks."""

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        initializer: Callable[[], Any] | None,
        aggregator: Aggregator,
        merger: Aggregator | None = None,
        name: str | None = None,
    ) -> KTable:
        grouped, final_only = self._grouped, self._emit.final_only
        return aggregations.add_aggregation(
            grouped._builder,
            grouped._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=grouped._key_serde,
            value_serde=grouped._value_serde,
            result_serde=result_serde,
            repartition_serde=grouped._value_serde,
            repartition=grouped._repartition_required,
            repartition_name=grouped._repartition_name,
            node=lambda store, retention: self._node(
                store, retention, initializer, aggregator, merger, final_only
            ),
            windows=self._windows,
            emit=self._emit,
            name=name,
        )

    def _native(
        self, aggregation: strom_agg.Aggregation, materialized: Any, name: str | None
    ) -> KTable:
        """A built-in aggregation on the native kernel (see strom.agg)."""
        return aggregations.native_windowed(
            self._grouped,
            self._windows,
            self._emit,
            aggregation,
            materialized,
            self._native_node,
            name,
        )

    def count(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        """Records per key and window (null keys are skipped, and in time and
        sliding windows null values too), on the native kernel
        (``strom.agg.count()``) unless ``materialized`` asks for a value
        serde other than ``Long``. ``name`` names the processor (Kafka's
        ``Named``), as it does for ``reduce`` and ``aggregate``."""
        if self._count_spends_a_store_name:
            aggregations.spend_count_store_name(self._grouped._builder, materialized)
        value_serde = Materialized.of(materialized).value_serde
        if value_serde is None or isinstance(value_serde, Long):
            return self._native(strom_agg.count(), materialized, name)
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, Long(), _zero, _count, _add_counts, name
        )


class TimeWindowedKStream(_WindowedKStream[TimeWindows]):
    """A grouped stream cut into time windows (Kafka's ``TimeWindowedKStream``)."""

    _native_node = NativeTimeWindowAggregate

    def _node(
        self,
        store: str,
        retention: int,
        initializer: Callable[[], Any] | None,
        aggregator: Aggregator,
        merger: Aggregator | None,
        final_only: bool,
    ) -> Node:
        return wa.KStreamWindowAggregate(store, self._windows, initializer, aggregator, final_only)

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and window."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped._value_serde,
            None,
            lambda _k, v, agg: reducer(agg, v),
            name=name,
        )

    @overload
    def aggregate(
        self,
        initializer: strom_agg.Aggregation,
        aggregator: Materialized | str | None = None,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable: ...
    @overload
    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Aggregator,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable: ...
    def aggregate(
        self,
        initializer: Callable[[], Any] | strom_agg.Aggregation,
        aggregator: Aggregator | Materialized | str | None = None,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key
        and window; or a built-in ``strom.agg`` aggregation, which runs on the
        native kernel: ``aggregate(strom.agg.sum("amount"), materialized)``."""
        if isinstance(initializer, strom_agg.Aggregation):
            if aggregator is not None and not isinstance(aggregator, Materialized | str):
                raise TopologyError("aggregate(strom.agg...) takes no aggregator")
            return self._native(initializer, materialized or aggregator, name)
        if not callable(aggregator):
            raise TopologyError("aggregate takes an initializer and an aggregator")
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator, name=name
        )


class SlidingWindowedKStream(_WindowedKStream[SlidingWindows]):
    """A grouped stream in sliding windows (Kafka's ``TimeWindowedKStream``
    over ``SlidingWindows``): windows ``[start, start + d]``, both bounds
    inclusive, made as records enter and leave them."""

    _native_node = NativeSlidingWindowAggregate
    _count_spends_a_store_name = False

    def _node(
        self,
        store: str,
        retention: int,
        initializer: Callable[[], Any] | None,
        aggregator: Aggregator,
        merger: Aggregator | None,
        final_only: bool,
    ) -> Node:
        assert initializer is not None  # reduce gives _reduce_initializer
        return wa.KStreamSlidingWindowAggregate(
            store, self._windows, initializer, aggregator, final_only
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and window."""
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped._value_serde,
            _reduce_initializer,
            _for_reducer(reducer),
            name=name,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any] | strom_agg.Aggregation,
        aggregator: Aggregator | Materialized | str | None = None,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key
        and window; or a built-in ``strom.agg`` aggregation on the native
        kernel (null values are skipped, as sliding windows skip them)."""
        if isinstance(initializer, strom_agg.Aggregation):
            return self._native(initializer, _agg_materialized(aggregator, materialized), name)
        if not callable(aggregator):
            raise TopologyError("aggregate takes an initializer and an aggregator")
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator, name=name
        )


class SessionWindowedKStream(_WindowedKStream[SessionWindows]):
    """A grouped stream in session windows (Kafka's
    ``SessionWindowedKStream``): per key, records less than the inactivity
    gap apart share a session ``[first, last]``; a record bridging two
    sessions merges them."""

    _native_node = NativeSessionWindowAggregate

    def emit_strategy(self, emit_strategy: EmitStrategy) -> Self:
        """Every update (the default) or only final results, once per session."""
        return super().emit_strategy(emit_strategy)

    def _node(
        self,
        store: str,
        retention: int,
        initializer: Callable[[], Any] | None,
        aggregator: Aggregator,
        merger: Aggregator | None,
        final_only: bool,
    ) -> Node:
        assert initializer is not None and merger is not None  # reduce and count give both
        return wa.KStreamSessionWindowAggregate(
            store, self._windows, retention, initializer, aggregator, merger, final_only
        )

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``reducer(aggregate, value)`` per key and session; merging two
        sessions reduces their aggregates."""
        aggregator = _for_reducer(reducer)
        return self._aggregate(
            "KSTREAM-REDUCE-",
            materialized,
            self._grouped._value_serde,
            _reduce_initializer,
            aggregator,
            # Kafka's mergerForAggregator: the second aggregate is added to the first.
            lambda key, agg1, agg2: aggregator(key, agg2, agg1),
            name,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any] | strom_agg.Aggregation,
        aggregator: Aggregator | Materialized | str | None = None,
        merger: Aggregator | Materialized | str | None = None,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` from ``initializer()`` per key
        and session; ``merger(key, agg1, agg2)`` combines the aggregates of
        sessions a record merges; or a built-in ``strom.agg`` aggregation on
        the native kernel."""
        if isinstance(initializer, strom_agg.Aggregation):
            return self._native(
                initializer, _agg_materialized(aggregator, merger, materialized), name
            )
        if not callable(aggregator) or not callable(merger):
            raise TopologyError("aggregate takes an initializer, an aggregator and a merger")
        return self._aggregate(
            "KSTREAM-AGGREGATE-", materialized, None, initializer, aggregator, merger, name
        )


def _zero() -> int:
    return 0


def _count(_key: Any, _value: Any, agg: Any) -> Any:
    return agg + 1


def _add_counts(_key: Any, agg1: Any, agg2: Any) -> Any:
    return agg1 + agg2


def _reduce_initializer() -> Any:
    return None


def _for_reducer(reducer: Callable[[Any, Any], Any]) -> Aggregator:
    """Kafka's aggregatorForReducer: the first value is the aggregate."""

    def aggregate(_key: Any, value: Any, agg: Any) -> Any:
        return value if agg is None else reducer(agg, value)

    return aggregate


def _agg_materialized(*rest: Any) -> Materialized | str | None:
    """The Materialized of ``aggregate(strom.agg..., [materialized])``."""
    given = [r for r in rest if r is not None]
    if len(given) > 1 or not all(isinstance(r, Materialized | str) for r in given):
        raise TopologyError("aggregate(strom.agg...) takes no aggregator or merger")
    return given[0] if given else None
