"""What a table's processor answers while the DSL is built (Kafka's
KTableProcessorSupplier, KStreamAggProcessorSupplier and KTableSource):
whether it sends old values downstream, and how a value getter reads the
table.

Kafka decides both on the fly as the topology grows: a filter asks its parent
for old values when it is made (so a materialized parent lets it drop
updates that were and stay filtered out), an outer join or a re-grouping
forces them, and a source table gets a store only when something needs one
(a name, a value getter, old values). The nodes read ``send_old_values``
when they run, after the whole topology is built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from strom.errors import TopologyError
from strom.kstream.internals.table_processors import (
    ValueGetterSupplier,
    filtered_getter,
    mapped_getter,
    store_getter,
    transformed_getter,
    versioned_getter,
)
from strom.state.stores import VERSIONED

if TYPE_CHECKING:
    from strom.kstream.ktable import KTable
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, StoreDef


class TableView(NamedTuple):
    """How to read a table by key (Kafka's KTableValueGetterSupplier): the
    stores a reader must be connected to, the getter, and whether the table
    is versioned (its getter then also reads as of a time)."""

    stores: tuple[str, ...]
    getter: ValueGetterSupplier
    versioned: bool = False


def store_view(store_name: str, versioned: bool = False) -> TableView:
    """How to read a table kept in a store of its own (a versioned one
    also as of a time)."""
    if versioned:
        return TableView((store_name,), versioned_getter(store_name), True)
    return TableView((store_name,), store_getter(store_name))


class TableSupplier(ABC):
    """The build-time side of the processor behind a table."""

    # Whether the processor's changes carry real old values (Kafka's
    # sendOldValues); read by the nodes when they run.
    send_old_values: bool = False

    @property
    def versioned(self) -> bool:
        """Whether the table is versioned (Kafka's isOutputVersioned, and
        the versioned semantics of what reads it)."""
        return False

    @abstractmethod
    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        """Asks for old values; False when they would need a store that the
        table does not have and ``force_materialization`` is off."""

    @abstractmethod
    def view(self) -> TableView | None:
        """How to read the table by key (None: it cannot be read)."""


class SourceSupplier(TableSupplier):
    """``builder.table``, ``KStream.to_table`` and a foreign-key join's
    result (Kafka's KTableSource): materialized only when named, or once a
    value getter or old values need its store; unmaterialized it forwards
    each update at once, without an old value."""

    def __init__(self, internal: InternalTopologyBuilder, node: str, store: StoreDef) -> None:
        self.internal = internal
        self.node = node
        self.store = store
        # The store's name once it is materialized (the node reads it).
        self.store_name: str | None = None

    @property
    def versioned(self) -> bool:
        return self.store.kind == VERSIONED

    def materialize(self) -> None:
        """Adds the store, connected to the source's node (added before)."""
        if self.store_name is None:
            self.store_name = self.store.name
            self.internal.add_store(self.store, self.node)

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        if not force_materialization and self.store_name is None:
            return False
        self.materialize()
        self.send_old_values = True
        return True

    def view(self) -> TableView:
        self.materialize()
        assert self.store_name is not None
        return store_view(self.store_name, self.versioned)


class AggregateSupplier(TableSupplier):
    """An aggregation's result (Kafka's KStreamAggProcessorSupplier and
    KTableAggregate): always materialized, so old values are always there."""

    def __init__(self, view: TableView) -> None:
        self._view = view

    @property
    def versioned(self) -> bool:
        return self._view.versioned

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        self.send_old_values = True
        return True

    def view(self) -> TableView:
        return self._view


class _ChildSupplier(TableSupplier):
    """A processor computing a table from its parent table (Kafka's
    KTableFilter and KTableMapValues): without a store, old values when the
    parent sends them and a getter through the parent's; with one
    (``materialize``), old values from it and its getter."""

    def __init__(self, parent: KTable) -> None:
        self.parent = parent
        self.store_name: str | None = None
        self.store_versioned = False

    def materialize(self, store_name: str, versioned: bool = False) -> None:
        self.store_name = store_name
        self.store_versioned = versioned

    @property
    def versioned(self) -> bool:
        # With a store of its own the table is as that store; without one it
        # reads as its parent (Kafka's isVersionedUpstream).
        if self.store_name is not None:
            return self.store_versioned
        return self.parent._supplier.versioned

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        if self.store_name is not None or self.parent._enable_sending_old_values(
            force_materialization
        ):
            self.send_old_values = True
        return self.send_old_values

    def view(self) -> TableView | None:
        if self.store_name is not None:
            return store_view(self.store_name, self.store_versioned)
        parent = self.parent._view()
        if parent is None:
            return None
        return TableView(parent.stores, self.derive_getter(parent.getter), parent.versioned)

    @abstractmethod
    def derive_getter(self, parent: ValueGetterSupplier) -> ValueGetterSupplier: ...


class FilterSupplier(_ChildSupplier):
    """KTableFilter: asks its parent for old values when made, without
    forcing a store, so that an update filtered out both before and after
    is not forwarded as a tombstone."""

    def __init__(self, parent: KTable, predicate: Callable[[Any, Any], bool], negate: bool) -> None:
        super().__init__(parent)
        self.predicate = predicate
        self.negate = negate
        self.send_old_values = parent._enable_sending_old_values(False)

    def derive_getter(self, parent: ValueGetterSupplier) -> ValueGetterSupplier:
        return filtered_getter(parent, self.predicate, self.negate)


class MapValuesSupplier(_ChildSupplier):
    """KTableMapValues."""

    def __init__(self, parent: KTable, mapper: Callable[..., Any], with_key: bool) -> None:
        super().__init__(parent)
        self.mapper = mapper
        self.with_key = with_key

    def derive_getter(self, parent: ValueGetterSupplier) -> ValueGetterSupplier:
        return mapped_getter(parent, self.mapper, self.with_key)


class TransformValuesSupplier(_ChildSupplier):
    """KTableTransformValues: its readers also read the transformer's stores."""

    def __init__(
        self,
        parent: KTable,
        node: str,
        supplier: Callable[[], Any],
        store_names: tuple[str, ...],
    ) -> None:
        super().__init__(parent)
        self.node = node
        self.supplier = supplier
        self.store_names = store_names

    def view(self) -> TableView | None:
        found = super().view()
        if found is None or self.store_name is not None:
            return found
        return found._replace(stores=found.stores + self.store_names)

    def derive_getter(self, parent: ValueGetterSupplier) -> ValueGetterSupplier:
        return transformed_getter(parent, self.node, list(self.store_names), self.supplier)


class SuppressSupplier(TableSupplier):
    """KTableSuppressProcessorSupplier: its buffer needs its parent's old
    values (forced when made), and it forwards them."""

    def __init__(self, parent: KTable) -> None:
        if parent._supplier.versioned:
            raise TopologyError(
                "suppress() works on non-versioned tables only (as Kafka's); this table "
                "is versioned, or reads one through filters or value mappers"
            )
        self.parent = parent
        self.send_old_values = parent._enable_sending_old_values(True)

    def enable_sending_old_values(self, force_materialization: bool) -> bool:
        return self.parent._enable_sending_old_values(force_materialization)

    def view(self) -> TableView | None:
        return None
