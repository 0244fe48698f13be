"""Cogrouped streams: several grouped streams aggregated into one table
(Kafka's ``CogroupedKStream``, ``TimeWindowedCogroupedKStream`` and
``SessionWindowedCogroupedKStream``).

Each grouped stream brings its own aggregator; all update one aggregate per
key (and window), kept in one store::

    totals = (
        clicks.group_by_key()
        .cogroup(lambda k, click, agg: {**agg, "clicks": agg["clicks"] + 1})
        .cogroup(buys.group_by_key(), lambda k, buy, agg: {**agg, "spent": agg["spent"] + buy})
        .aggregate(lambda: {"clicks": 0, "spent": 0}, materialized="totals")
    )

As in Kafka, ``cogroup`` adds to the cogrouped stream it is called on and
returns it, and all the grouped streams must be co-partitioned (those whose
key changed are repartitioned first).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from strom.errors import TopologyError
from strom.kstream import kgrouped_stream
from strom.kstream.internals import aggregations
from strom.kstream.windows import SessionWindows, SlidingWindows, TimeWindows

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.kgrouped_stream import KGroupedStream
    from strom.kstream.ktable import KTable
    from strom.kstream.materialized import Materialized

Aggregator = Callable[[Any, Any, Any], Any]
W = TypeVar("W", TimeWindows | SlidingWindows, SessionWindows)
Patterns = list[tuple["KGroupedStream", Aggregator]]


class CogroupedKStream:
    """Grouped streams, each with its aggregator, to aggregate into one table."""

    def __init__(self, grouped: KGroupedStream, aggregator: Aggregator) -> None:
        self._builder = grouped._builder
        self._patterns: Patterns = []
        self.cogroup(grouped, aggregator)

    def cogroup(self, grouped_stream: KGroupedStream, aggregator: Aggregator) -> CogroupedKStream:
        """Adds ``grouped_stream``, whose records update the aggregate with
        ``aggregator(key, value, aggregate)``; returns this cogrouped stream.
        A grouped stream added again keeps its place and takes the new
        aggregator (Kafka's map of grouped streams)."""
        if not isinstance(grouped_stream, kgrouped_stream.KGroupedStream):
            raise TopologyError(
                f"cogroup takes a KGroupedStream, not {type(grouped_stream).__name__}"
            )
        if not callable(aggregator):
            raise TopologyError("cogroup takes an aggregator(key, value, aggregate)")
        if grouped_stream._builder is not self._builder:
            raise TopologyError("cogroup takes grouped streams of the same StreamsBuilder")
        for i, (known, _) in enumerate(self._patterns):
            if known is grouped_stream:
                self._patterns[i] = (grouped_stream, aggregator)
                return self
        self._patterns.append((grouped_stream, aggregator))
        return self

    @overload
    def windowed_by(self, windows: TimeWindows) -> TimeWindowedCogroupedKStream: ...
    @overload
    def windowed_by(self, windows: SlidingWindows) -> TimeWindowedCogroupedKStream: ...
    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedCogroupedKStream: ...
    def windowed_by(
        self, windows: TimeWindows | SlidingWindows | SessionWindows
    ) -> TimeWindowedCogroupedKStream | SessionWindowedCogroupedKStream:
        """Aggregates per key and window; results are keyed by ``Windowed``
        and emitted on every update. Sliding windows give a
        ``TimeWindowedCogroupedKStream``, as in Kafka."""
        if isinstance(windows, TimeWindows | SlidingWindows):
            return TimeWindowedCogroupedKStream(self._builder, self._patterns, windows)
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedKStream(self._builder, self._patterns, windows)
        raise TopologyError(
            "windowed_by takes TimeWindows, SlidingWindows or SessionWindows, "
            f"not {type(windows).__name__}"
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """One aggregate per key, from ``initializer()``, updated by each
        grouped stream's aggregator (null keys and values are skipped). The
        store's serdes come from ``materialized`` (or the defaults);
        ``name`` names the processors ``<name>-cogroup-agg-<i>`` and
        ``<name>-cogroup-merge``."""
        _check_initializer(initializer)
        return aggregations.add_cogroup(
            self._builder, list(self._patterns), initializer, materialized, name
        )


class _WindowedCogrouped(Generic[W]):
    """What the windowed cogrouped streams share: the cogrouped stream's own
    list of grouped streams (as Kafka shares its map) and the windows."""

    def __init__(self, builder: StreamsBuilder, patterns: Patterns, windows: W) -> None:
        self._builder = builder
        self._patterns = patterns
        self._windows: W = windows

    def _aggregate(
        self,
        initializer: Callable[[], Any],
        materialized: Materialized | str | None,
        name: str | None,
        merger: Aggregator | None = None,
    ) -> KTable:
        _check_initializer(initializer)
        return aggregations.add_cogroup(
            self._builder,
            list(self._patterns),
            initializer,
            materialized,
            name,
            self._windows,
            merger,
        )


class TimeWindowedCogroupedKStream(_WindowedCogrouped[TimeWindows | SlidingWindows]):
    """A cogrouped stream in time or sliding windows (Kafka's
    ``TimeWindowedCogroupedKStream``)."""

    def aggregate(
        self,
        initializer: Callable[[], Any],
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """One aggregate per key and window, from ``initializer()``."""
        return self._aggregate(initializer, materialized, name)


class SessionWindowedCogroupedKStream(_WindowedCogrouped[SessionWindows]):
    """A cogrouped stream in session windows (Kafka's
    ``SessionWindowedCogroupedKStream``)."""

    def aggregate(
        self,
        initializer: Callable[[], Any],
        merger: Aggregator,
        *,
        materialized: Materialized | str | None = None,
        name: str | None = None,
    ) -> KTable:
        """One aggregate per key and session, from ``initializer()``;
        ``merger(key, agg1, agg2)`` combines the aggregates of sessions a
        record merges."""
        if not callable(merger):
            raise TopologyError("aggregate takes an initializer and a merger(key, agg1, agg2)")
        return self._aggregate(initializer, materialized, name, merger)


def _check_initializer(initializer: Any) -> None:
    if not callable(initializer):
        raise TopologyError("aggregate takes an initializer: a function of no arguments")
