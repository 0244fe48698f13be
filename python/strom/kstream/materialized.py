"""Materialized: how a DSL operation's state store is named and built."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from strom.errors import TopologyError
from strom.processor.internals.topology_builder import StoreDef
from strom.serdes import Serde
from strom.state.stores import KEY_VALUE, VERSIONED, StoreSupplier


@dataclass(frozen=True)
class Materialized:
    """Names and configures the store behind a KTable or aggregation: its
    serdes, the record cache (``caching``), the changelog (``logging``), a
    windowed store's ``retention``, an in-memory store in place of the
    persistent default (``in_memory``), or a store supplier in place of a
    name (a versioned one makes the table versioned).
    """

    store_name: str | None = None
    # A Stores supplier given in place of a name (Kafka's Materialized.as(supplier)).
    supplier: StoreSupplier | None = None
    key_serde: Serde[Any] | None = None
    value_serde: Serde[Any] | None = None
    retention: int | timedelta | None = None
    caching: bool = True
    logging: bool = True
    in_memory: bool = False

    def __init__(
        self,
        store_name: str | StoreSupplier | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        retention: int | timedelta | None = None,
        caching: bool = True,
        logging: bool = True,
        in_memory: bool = False,
    ) -> None:
        supplier = None
        if isinstance(store_name, StoreSupplier):
            supplier, store_name = store_name, store_name.name
            if supplier.kind not in (KEY_VALUE, VERSIONED):
                raise TopologyError(
                    f"store {store_name!r}: Materialized takes a key-value or versioned "
                    f"store supplier here, not a {supplier.kind} store's"
                )
            in_memory = not supplier.persistent
            if supplier.kind == VERSIONED:
                caching = False  # as Kafka: versioned stores have no record cache
        if store_name is not None and not store_name:
            raise TopologyError("a store name must be non-empty")
        for name, value in locals().items():
            if name != "self":
                object.__setattr__(self, name, value)

    @property
    def versioned(self) -> bool:
        """Whether the store keeps versions (a versioned store supplier)."""
        return self.supplier is not None and self.supplier.kind == VERSIONED

    def store_def(
        self, name: str, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> StoreDef:
        """The timestamped key-value store a table or aggregation keeps (or
        the versioned store its supplier names)."""
        if self.versioned:
            assert self.supplier is not None
            return StoreDef(
                name,
                key_serde,
                value_serde,
                logged=self.logging,
                kind=VERSIONED,
                retention_ms=self.supplier.retention_ms,
            )
        return StoreDef(
            name,
            key_serde,
            value_serde,
            logged=self.logging,
            persistent=not self.in_memory,
            caching=self.caching,
            timestamped=True,
        )

    @staticmethod
    def of(materialized: Materialized | str | StoreSupplier | None) -> Materialized:
        """Accepts a Materialized, a plain store name, a store supplier, or None."""
        if materialized is None:
            return Materialized()
        if isinstance(materialized, str | StoreSupplier):
            return Materialized(materialized)
        if isinstance(materialized, Materialized):
            return materialized
        raise TopologyError(f"expected a Materialized or a store name, got {materialized!r}")
