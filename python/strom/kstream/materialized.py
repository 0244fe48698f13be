"""Materialized: how a DSL operation's state store is named and built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from strom.errors import TopologyError
from strom.processor.internals.topology_builder import StoreDef
from strom.serdes import Serde
from strom.state.stores import KEY_VALUE, SESSION, VERSIONED, WINDOW, StoreSupplier


@dataclass(frozen=True)
class Materialized:
    """Names and configures the store behind a KTable or aggregation: its
    serdes, the record cache (``caching``), the changelog (``logging``:
    on, off, or on with these topic configs, Kafka's
    ``withLoggingEnabled(Map)``), a windowed store's ``retention``, an
    in-memory store in place of the persistent default (``in_memory``), or
    a store supplier in place of a name (a versioned one makes the table
    versioned).
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
    # Topic configs of the changelog (with ``logging`` on).
    log_config: dict[str, str] = field(default_factory=dict, hash=False)

    def __init__(
        self,
        store_name: str | StoreSupplier | None = None,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        retention: int | timedelta | None = None,
        caching: bool = True,
        logging: bool | Mapping[str, str] = True,
        in_memory: bool = False,
    ) -> None:
        log_config = changelog_config(logging, store_name)
        logging = logging if isinstance(logging, bool) else True
        supplier = None
        if isinstance(store_name, StoreSupplier):
            supplier, store_name = store_name, store_name.name
            if supplier.kind not in (KEY_VALUE, VERSIONED, WINDOW, SESSION):
                raise TopologyError(
                    f"store {store_name!r}: Materialized takes a key-value, versioned, "
                    f"window or session store supplier, not a {supplier.kind} store's"
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
        self,
        name: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        windowed: str | None = None,
    ) -> StoreDef:
        """The timestamped key-value store a table or aggregation keeps (or
        the versioned store its supplier names); for a windowed aggregation
        (``windowed``: the kind of store it keeps, whose windows and
        retention it sets) the store's flavour and name."""
        supplier_kind = None if self.supplier is None else self.supplier.kind
        if supplier_kind in (WINDOW, SESSION) and supplier_kind != windowed:
            raise TopologyError(
                f"store {name!r}: a {supplier_kind} store supplier materializes "
                + (
                    f"a windowed aggregation over {windowed} windows only with a {windowed} "
                    "store supplier"
                    if windowed
                    else "a windowed aggregation (windowed_by), not a table"
                )
            )
        if self.versioned:
            assert self.supplier is not None
            return StoreDef(
                name,
                key_serde,
                value_serde,
                logged=self.logging,
                log_config=self.log_config,
                kind=VERSIONED,
                retention_ms=self.supplier.retention_ms,
                segment_interval_ms=self.supplier.segment_interval,
            )
        return StoreDef(
            name,
            key_serde,
            value_serde,
            logged=self.logging,
            log_config=self.log_config,
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


def changelog_config(logging: bool | Mapping[str, str], store: object = None) -> dict[str, str]:
    """The changelog topic configs a ``logging=`` argument gives: none for
    True or False, else the mapping's (values as strings)."""
    if isinstance(logging, bool):
        return {}
    if not isinstance(logging, Mapping) or not all(isinstance(k, str) for k in logging):
        raise TopologyError(
            f"store {store!r}: logging= takes True, False or a mapping of changelog topic "
            f"configs (str keys), got {logging!r}"
        )
    return {key: str(value) for key, value in logging.items()}
