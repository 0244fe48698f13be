"""KGroupedTable: a re-keyed table, ready to aggregate."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.kstream.internals import aggregations
from strom.kstream.internals import table_processors as tp
from strom.serdes import Long

if TYPE_CHECKING:
    from strom.builder import StreamsBuilder
    from strom.kstream.ktable import KTable
    from strom.kstream.materialized import Materialized
    from strom.serdes import Serde


class KGroupedTable:
    """A re-keyed table, ready to aggregate (Kafka's ``KGroupedTable``)."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        repartition_name: str | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._repartition_name = repartition_name

    def _aggregate(
        self,
        prefix: str,
        materialized: Materialized | str | None,
        result_serde: Serde[Any] | None,
        initializer: Callable[[], Any] | None,
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        name: str | None,
    ) -> KTable:
        inner = self._value_serde
        return aggregations.add_aggregation(
            self._builder,
            self._node,
            name_prefix=prefix,
            materialized=materialized,
            key_serde=self._key_serde,
            value_serde=inner,
            result_serde=result_serde,
            # Changes go through the value serde, else the default one.
            repartition_serde=tp.ChangeSerde(inner),
            repartition=True,
            repartition_name=self._repartition_name,
            grouped_table=True,
            node=lambda store, _retention: tp.KTableAggregate(
                store, initializer, adder, subtractor
            ),
            name=name,
        )

    def count(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        """The number of entries per new key. ``name`` names the processor
        and the repartition sink and source (Kafka's ``Named``), as it does
        for ``reduce`` and ``aggregate``."""
        return self._aggregate(
            "KTABLE-AGGREGATE-",
            materialized,
            Long(),
            tp.count_initializer,
            tp.count_adder,
            tp.count_subtractor,
            name,
        )

    def reduce(
        self,
        adder: Callable[[Any, Any], Any],
        subtractor: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``adder(aggregate, new_value)`` and ``subtractor(aggregate, old_value)``."""
        return self._aggregate(
            "KTABLE-REDUCE-",
            materialized,
            self._value_serde,
            None,
            lambda _k, v, agg: adder(agg, v),
            lambda _k, v, agg: subtractor(agg, v),
            name,
        )

    def aggregate(
        self,
        initializer: Callable[[], Any],
        adder: Callable[[Any, Any, Any], Any],
        subtractor: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``adder(key, new_value, aggregate)`` / ``subtractor(key, old_value,
        aggregate)`` from ``initializer()`` per new key."""
        return self._aggregate(
            "KTABLE-AGGREGATE-", materialized, None, initializer, adder, subtractor, name
        )
