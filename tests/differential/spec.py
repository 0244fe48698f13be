"""A case of the differential test: a topology as a list of DSL steps, and the
input records to pipe through it. Plain dataclasses that round-trip through
JSON, the form the Kafka side (tests/reference) reads.

A step names its operation, the ids of the nodes it reads (``inputs``, JSON
``in``) and its arguments; user functions are named from the vocabulary in
functions.py, never given as code. The operations (``args`` in brackets):

- sources: ``stream`` / ``table`` [topic, store?, versioned? (a history
  retention: the store is a versioned one)] / ``global_table`` [topic]
- on a stream: ``filter`` ``filter_not`` ``map_values`` ``map`` ``select_key``
  ``flat_map`` ``flat_map_values`` [fn], ``merge`` (two inputs),
  ``split`` [preds, default] then ``branch`` [name: index or "default"],
  ``repartition``, ``to_table`` [store?, name?], ``process`` [fn, store],
  ``group_by_key``, ``group_by`` [fn], ``to`` [topic, key, value]
  (grouping steps may name ``serdes``: [key, value], Kafka's ``Grouped.with``)
- on a table: ``filter`` ``filter_not`` ``map_values`` [fn, and ``store``
  with ``serdes``: Kafka's ``Materialized.as(store)`` with them], ``to_stream``
  [fn?: a key selector, Kafka's ``toStream(KeyValueMapper)``],
  ``suppress`` [kind, limit_ms, buffer], ``group_by`` [fn]
- on a grouped stream: ``count`` [store?], ``reduce`` [fn, store?],
  ``aggregate`` [init, fn, store?], ``windowed_by`` [windows, emit]; a
  ``versioned`` history with the store of an aggregation that is not
  windowed (a cogroup's too, and a grouped table's) makes it a versioned
  one, as for ``table``; any aggregation may carry a ``name`` (Kafka's
  ``Named``), and a ``count`` without a store ``serdes`` (Kafka's
  ``Materialized.with``)
- on a windowed stream: ``count`` / ``reduce`` / ``aggregate`` (sessions take
  a ``merger`` too)
- ``cogroup`` (one input per grouped stream) [fns: an aggregator per input,
  init, windows?, merger? (sessions), store?]: Kafka's ``cogroup`` chain and
  its ``aggregate``, windowed when ``windows`` is given (grouping steps may
  then carry a ``name``, Kafka's ``Grouped.as``, so that two repartition
  topics do not clash there)
- on a grouped table: ``count``, ``reduce`` [adder, subtractor],
  ``aggregate`` [init, adder, subtractor]
- ``join`` / ``left_join`` / ``outer_join`` (two inputs) [fn, and
  ``windows`` for two streams, ``key_fn`` with a global table, ``fk`` for a
  foreign-key table join, ``grace`` for a stream join with a versioned table,
  ``store`` with ``serdes`` for a table-table join]
- a table operation's or table join's ``store`` may be versioned too

A sink's ``key`` is ``"s"`` (String), ``"tw:<size>"`` (time-windowed String)
or ``"sw"`` (session-windowed String); its ``value`` is ``"s"`` or ``"l"``
(Long). Keys and values of input records are strings or None.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Step:
    id: str
    op: str
    inputs: list[str] = field(default_factory=list)
    args: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, "in": list(self.inputs), "args": dict(self.args)}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Step:
        return Step(data["id"], data["op"], list(data.get("in", [])), dict(data.get("args", {})))


@dataclass
class Input:
    topic: str
    key: str | None
    value: str | None
    timestamp: int
    # Kafka's and strom's TopologyTestDriver read every topic as one
    # partition; kept so a spec can say where a record would go.
    partition: int = 0
    # (name, text value) pairs; which output records carry them shows
    # which input record each came from.
    headers: list[list[str]] | None = None


@dataclass
class Case:
    family: str
    steps: list[Step]
    inputs: list[Input]
    cache: bool = False
    id: str = ""
    # "in_memory" or "rocksdb": the DSL store suppliers of the Kafka side.
    stores: str = "in_memory"
    # Streams config both drivers get on top of their defaults.
    config: dict[str, Any] = field(default_factory=dict)

    def sinks(self) -> list[Step]:
        """The ``to`` steps, and the ``to`` of each split branch whose chain
        consumes it (Kafka's ``Branched.withConsumer``)."""
        out = []
        for s in self.steps:
            if s.op == "to":
                out.append(s)
            for name, chain in (s.args.get("chains") or {}).items():
                if "topic" in chain:
                    out.append(Step(f"{s.id}-{name}", "to", [s.id], chain))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "cache": self.cache,
            "stores": self.stores,
            "config": dict(self.config),
            "steps": [s.to_json() for s in self.steps],
            "inputs": [asdict(r) for r in self.inputs],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))

    @staticmethod
    def from_json(data: dict[str, Any]) -> Case:
        return Case(
            family=data.get("family", ""),
            steps=[Step.from_json(s) for s in data["steps"]],
            inputs=[Input(**r) for r in data["inputs"]],
            cache=bool(data.get("cache", False)),
            id=data.get("id", ""),
            stores=data.get("stores", "in_memory"),
            config=dict(data.get("config", {})),
        )

    @staticmethod
    def loads(text: str) -> Case:
        return Case.from_json(json.loads(text))


# One output record: key and value bytes as hex (None for null), timestamp,
# headers as (key, hex value) pairs. Both drivers' results take this shape.
OutputRecord = tuple[str | None, str | None, int, tuple[tuple[str, str], ...]]


@dataclass
class Result:
    """What one driver produced for a case: every sink topic's records in
    order, or the error that stopped it."""

    outputs: dict[str, list[OutputRecord]] = field(default_factory=dict)
    error: str | None = None
    # The topology's description (Topology.describe()), when it was built.
    topology: str | None = None

    @staticmethod
    def from_reference(data: dict[str, Any]) -> Result:
        if data.get("error"):
            return Result(error=str(data["error"]), topology=data.get("topology"))
        return Result(
            {
                topic: [(k, v, int(t), tuple((hk, hv) for hk, hv in h)) for k, v, t, h in records]
                for topic, records in data["outputs"].items()
            },
            topology=data.get("topology"),
        )
