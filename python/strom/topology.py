"""Topology: the compiled graph of source, processor and sink nodes."""

from __future__ import annotations

from strom.internals.topology_builder import InternalTopologyBuilder

__all__ = ["Topology"]


class Topology:
    """A processor topology, built by ``StreamsBuilder.build()``."""

    def __init__(self, internal: InternalTopologyBuilder | None = None) -> None:
        self._internal = internal if internal is not None else InternalTopologyBuilder()

    def describe(self) -> str:
        """Sub-topologies with their sources, processors (and stores) and sinks,
        in Kafka's ``TopologyDescription`` format."""
        return self._internal.describe()

    def __str__(self) -> str:
        return self.describe()
