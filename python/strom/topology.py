"""Topology: the compiled graph of source, processor and sink nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.errors import TopologyError
from strom.processor.api import Processor
from strom.processor.internals.processor_node import ProcessorAdapter
from strom.processor.internals.topology_builder import InternalTopologyBuilder, StoreDef
from strom.serdes import Serde
from strom.state.stores import KEY_VALUE, StoreBuilder

__all__ = ["Topology"]


def store_def(builder: StoreBuilder) -> StoreDef:
    """The topology's description of the store a ``Stores`` builder makes."""
    supplier = builder.supplier
    return StoreDef(
        builder.name,
        builder.key_serde,
        builder.value_serde,
        logged=builder.logging,
        persistent=supplier.persistent,
        kind=supplier.kind,
        retention_ms=supplier.retention_ms,
        window_size_ms=supplier.window_size_ms,
        retain_duplicates=supplier.retain_duplicates,
        log_config=dict(builder.log_config),
        caching=builder.caching,
    )


class Topology:
    """A processor topology: built by ``StreamsBuilder.build()``, or by hand
    with the Processor API (``add_source``, ``add_processor``, ``add_sink``,
    ``add_state_store``)."""

    def __init__(self, internal: InternalTopologyBuilder | None = None) -> None:
        self._internal = internal if internal is not None else InternalTopologyBuilder()

    def add_source(
        self,
        name: str,
        *topics: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        timestamp_extractor: Callable[[Any, int], int] | None = None,
        offset_reset: str | None = None,
    ) -> Topology:
        """A source node reading ``topics``."""
        self._internal.add_source(
            name, list(topics), key_serde, value_serde, timestamp_extractor, offset_reset
        )
        return self

    def add_processor(
        self, name: str, supplier: Callable[[], Processor[Any, Any]], *parents: str
    ) -> Topology:
        """A processor node; ``supplier()`` makes a new ``Processor`` for each task."""
        if not callable(supplier):
            raise TopologyError(
                f"processor {name!r} needs a supplier: a callable returning a Processor"
            )
        self._internal.add_processor(name, lambda: ProcessorAdapter(supplier), *parents)
        return self

    def add_sink(
        self,
        name: str,
        topic: str,
        *parents: str,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        partitioner: Callable[[Any, Any, int], int] | None = None,
    ) -> Topology:
        """A sink node writing to ``topic``; ``partitioner(key, value, n)`` picks the partition."""
        self._internal.add_sink(
            name,
            topic,
            *parents,
            key_serde=key_serde,
            value_serde=value_serde,
            partitioner=partitioner,
        )
        return self

    def add_state_store(self, builder: StoreBuilder, *processor_names: str) -> Topology:
        """Adds a store (from ``Stores.key_value_store_builder(...)``, or the
        window and session builders) and connects it to the named processors."""
        self._internal.add_store(store_def(builder), *processor_names)
        return self

    def add_global_store(
        self,
        builder: StoreBuilder,
        source_name: str,
        topic: str,
        processor_name: str,
        state_update_supplier: Callable[[], Processor[Any, Any]],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> Topology:
        """A global store: ``state_update_supplier()`` makes the processor that
        writes every record of every partition of ``topic`` into it; every
        processor may read it with ``get_state_store``."""
        if builder.supplier.kind != KEY_VALUE:
            raise TopologyError(f"global store {builder.name!r} must be a key-value store")
        self._internal.add_global_store(
            store_def(builder),
            source_name,
            topic,
            key_serde,
            value_serde,
            processor_name,
            lambda: ProcessorAdapter(state_update_supplier),
        )
        return self

    def connect_processor_and_state_stores(
        self, processor_name: str, *store_names: str
    ) -> Topology:
        """Gives a processor access to stores added before."""
        self._internal.connect_processor_and_stores([processor_name], list(store_names))
        return self

    def describe(self) -> str:
        """Sub-topologies with their sources, processors (and stores) and sinks,
        in Kafka's ``TopologyDescription`` format."""
        return self._internal.describe()

    def __str__(self) -> str:
        return self.describe()
