"""Seeded random cases over the DSL, by family. Each family draws a small
topology from the parts issue #16 and #24 list and an input of few keys with
out-of-order and tied timestamps (ties on window and join bounds especially),
late records, tombstones and null keys; ``case(family, seed)`` is a pure
function of its arguments, so a printed seed reproduces a case."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.differential.spec import Case, Input, Step

KEYS = ("a", "b", "c")

# Kafka's default DSL stores are RocksDB, which cost the reference program
# some 50 ms per case (a flush per store and commit) against a few for its
# in-memory stores. Where Kafka's results do not depend on the store type, a
# case runs on in-memory stores (_stores says where; test_store_stand_in
# checks it); STROM_DIFF_STORES=rocksdb gives every case RocksDB.
STORES = os.environ.get("STROM_DIFF_STORES", "")

PREDICATES = ("p_even", "p_gt4", "p_key_a", "p_not_null", "p_small_or_null")
MAPPERS = ("m_inc", "m_tag", "m_null_if_odd", "m_mod3")
# With the key (with_key=True): one pick in three of a value mapper.
KEYED_MAPPERS = ("mk_key_tag", "mk_null_unless_key_a")
VALUE_MAPPERS = MAPPERS + MAPPERS + KEYED_MAPPERS
TRANSFORMERS = ("t_key_arrow", "t_keep_nulls")
# A versioned table's history retention: one shorter than a case's inputs
# span (some puts and reads fall outside it), one longer.
VERSIONED_HISTORY_MS = (20, 1_000)
REKEY_SELECTORS = ("k_from_value", "k_abc_from_value", "k_const", "k_null_for_c")
KV_REKEYS = ("kv_key_from_value", "kv_rekey_ab", "kv_swap")
REDUCERS = ("r_concat", "r_sum", "r_null_if_big")
AGGREGATORS = ("a_concat", "a_sum", "a_null_if_big")
SUBTRACTING = (
    ("r_sum", "r_sub"),
    ("r_concat", "r_sub_concat"),
    ("r_null_if_big", "r_sub"),
)
SUBTRACTING_AGGREGATORS = (
    ("a_sum", "a_sub"),
    ("a_concat", "a_sub_concat"),
    ("a_null_if_big", "a_sub_null"),
    ("a_sum", "a_sub_null"),
)


@dataclass
class Node:
    """What a step produced: its kind, key and value types (spec.py's sink
    kinds) and, for a windowed table, that it may be suppressed to close."""

    kind: str  # stream, table, gstream, gtable, windowed, global, split
    key: str = "s"
    value: str = "s"
    windowed_table: bool = False
    session: bool = False


@dataclass
class Gen:
    """A case under construction."""

    family: str
    rng: random.Random
    steps: list[Step] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    # topic -> "stream" | "table": what reads it (its inputs are drawn to suit).
    topics: dict[str, str] = field(default_factory=dict)
    stores: int = 0
    sinks: int = 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def pick(self, options: tuple[Any, ...] | list[Any]) -> Any:
        return self.rng.choice(options)

    def named_grouping(self, grouped: str) -> str:
        """Names one grouping in four (Kafka's Grouped.as: the key selector
        and the repartition topic), by its id, with no draw, so that the
        cases stay those of the same seeds."""
        if int(grouped[1:]) % 4 == 0:
            self.steps[-1].args["name"] = f"{grouped}-grouped"
        return grouped

    def add(self, op: str, inputs: list[str], node: Node, **args: Any) -> str:
        step_id = f"n{len(self.steps)}"
        self.steps.append(Step(step_id, op, inputs, args))
        self.nodes[step_id] = node
        return step_id

    def store(self) -> str:
        self.stores += 1
        return f"store-{self.stores}"

    def to_table(self, s: str, p: float) -> str:
        """KStream.to_table, named one time in four (Kafka's Named: the
        processor, and the repartition topic after a key change), with no
        draw, so that the cases stay those of the same seeds."""
        t = self.add("to_table", [s], Node("table"), **self.maybe_store(p))
        if int(t[1:]) % 4 == 1:
            self.steps[-1].args["name"] = f"{t}-table"
        return t

    def named_aggregation(self, aggregation: str) -> str:
        """Names one aggregation in five (Kafka's Named: its processor, and a
        grouped table's repartition sink and source), and gives one count in
        seven without a store Kafka's ``Materialized.with(serdes)`` (which
        spends a store name), by its id, with no draw, so that the cases
        stay those of the same seeds."""
        step = self.steps[-1]
        if int(aggregation[1:]) % 5 == 2:
            step.args["name"] = f"{aggregation}-agg"
        if step.op == "count" and "store" not in step.args and int(aggregation[1:]) % 7 == 3:
            step.args["serdes"] = [self.nodes[step.inputs[0]].key, "l"]
        return aggregation

    def maybe_store(
        self, p: float = 0.3, versionable: bool = False, serdes: list[str] | None = None
    ) -> dict[str, Any]:
        """A store name, with probability ``p``; with ``serdes`` (Kafka's
        Materialized.as(store) with them) when given."""
        if not self.chance(p):
            return {}
        args: dict[str, Any] = {"store": self.store()}
        if versionable and len(self.steps) % 3 == 0:
            # One in three of the key-value stores that can be versioned is
            # (KIP-914), chosen with no draw, so that the cases stay those
            # of the same seeds.
            args["versioned"] = VERSIONED_HISTORY_MS[len(self.steps) % 2]
        if serdes is not None:
            args["serdes"] = serdes
        return args

    # --- sources ---------------------------------------------------------------
    def topic(self, role: str) -> str:
        name = f"in{len(self.topics)}"
        self.topics[name] = role
        return name

    def named_source(self, source: str, named: bool | None = None) -> str:
        """Names one source in five (Kafka's Consumed.as: a stream's source;
        a table's processor, and its source ``<name>-source``), by its id,
        with no draw, so that the cases stay those of the same seeds; or as
        ``named`` says."""
        if int(source[1:]) % 5 == 2 if named is None else named:
            self.steps[-1].args["name"] = f"{source}-in"
        return source

    def stream(self) -> str:
        return self.named_source(self.add("stream", [], Node("stream"), topic=self.topic("stream")))

    def table(self, materialized: bool | None = None, versioned: bool = False) -> str:
        if materialized is None:
            materialized = self.chance(0.5)
        materialized = materialized or versioned
        args: dict[str, Any] = {"store": self.store()} if materialized else {}
        if versioned or (materialized and len(self.steps) % 3 == 0):
            # One materialized table in three is versioned (KIP-914), chosen
            # with no draw: its history is what the inputs' times span.
            args["versioned"] = VERSIONED_HISTORY_MS[len(self.steps) % 2]
        t = self.add("table", [], Node("table"), topic=self.topic("table"), **args)
        return self.named_source(t)

    def global_table(self) -> str:
        # A draw: a case's global table is always its second step.
        named = self.chance(0.3)
        g = self.add("global_table", [], Node("global"), topic=self.topic("table"))
        return self.named_source(g, named)

    # --- streams -----------------------------------------------------------------
    def stateless(self, s: str, *, rekey: bool = True) -> str:
        """One stateless stream operation."""
        node = self.nodes[s]
        plain_key = node.key == "s"
        ops = ["filter", "filter_not", "map_values", "flat_map_values"]
        if rekey and plain_key:
            ops += ["select_key", "map", "flat_map"]
        op = self.pick(ops)
        if op in ("filter", "filter_not"):
            return self.add(op, [s], Node("stream", node.key, node.value), fn=self.pick(PREDICATES))
        if op == "map_values":
            return self.add(op, [s], Node("stream", node.key), fn=self.pick(VALUE_MAPPERS))
        if op == "flat_map_values":
            fn = self.pick(("fmv_split", "fmv_split", "fmk_key_and_value"))
            return self.add(op, [s], Node("stream", node.key), fn=fn)
        if op == "select_key":
            return self.add(op, [s], Node("stream", "s", node.value), fn=self.pick(REKEY_SELECTORS))
        if op == "map":
            return self.add(op, [s], Node("stream"), fn=self.pick(KV_REKEYS))
        return self.add(op, [s], Node("stream"), fn=self.pick(("fm_dup", "fm_drop_odd")))

    def chain(self, s: str, length: int, *, rekey: bool = True) -> str:
        for _ in range(length):
            s = self.stateless(s, rekey=rekey)
        return s

    def sink(self, node_id: str) -> None:
        node = self.nodes[node_id]
        if node.kind == "table":
            # One table in five (not windowed) goes out re-keyed, Kafka's
            # toStream(KeyValueMapper), its selector chosen with no draw.
            step_no = len(self.steps)
            rekey = node.key == node.value == "s" and step_no % 5 == 1
            fn = {"fn": REKEY_SELECTORS[step_no % len(REKEY_SELECTORS)]} if rekey else {}
            node_id = self.add("to_stream", [node_id], Node("stream", node.key, node.value), **fn)
        topic = f"out{self.sinks}"
        self.sinks += 1
        self.add("to", [node_id], Node("sink"), topic=topic, key=node.key, value=node.value)

    # --- grouping and aggregation ----------------------------------------------
    def serdes(self, value: str, p: float = 0.5) -> dict[str, Any]:
        """Grouped.with(String, value serde) or the serdes Kafka infers. A
        re-keyed windowed table needs them: Kafka's suppress buffer would
        otherwise use the default String serde for the Windowed key."""
        return {"serdes": ["s", value]} if self.chance(p) else {}

    def group(self, s: str, *, serdes_p: float = 0.5) -> str:
        """A grouped stream: by key, by a new key, or re-keyed then by key."""
        how = self.pick(("by_key", "group_by", "select_key", "map"))
        value = self.nodes[s].value
        if how == "group_by":
            return self.named_grouping(
                self.add(
                    "group_by",
                    [s],
                    Node("gstream", value=value),
                    fn=self.pick(REKEY_SELECTORS),
                    **self.serdes(value, serdes_p),
                )
            )
        if how == "select_key":
            s = self.add(
                "select_key", [s], Node("stream", value=value), fn=self.pick(REKEY_SELECTORS)
            )
        elif how == "map":
            s = self.add("map", [s], Node("stream"), fn=self.pick(KV_REKEYS))
            value = "s"
        p = 0.5 if how == "by_key" else serdes_p
        return self.named_grouping(
            self.add("group_by_key", [s], Node("gstream", value=value), **self.serdes(value, p))
        )

    def aggregate(self, g: str) -> str:
        """count, reduce or aggregate of a grouped stream: a table."""
        return self.named_aggregation(self._aggregate(g))

    def _aggregate(self, g: str) -> str:
        ops = ["count", "aggregate"] + (["reduce"] if self.nodes[g].value == "s" else [])
        op = self.pick(ops)
        store = self.maybe_store(versionable=True)
        if op == "count":
            return self.add("count", [g], Node("table", value="l"), **store)
        if op == "reduce":
            return self.add("reduce", [g], Node("table"), fn=self.pick(REDUCERS), **store)
        return self.add(
            "aggregate",
            [g],
            Node("table"),
            init=self.pick(("i_empty", "i_zero")),
            fn=self.pick(AGGREGATORS),
            **store,
        )

    def windows(self) -> dict[str, Any]:
        kind = self.pick(("tumbling", "hopping", "sliding", "session"))
        grace = self.pick((0, 0, 5, 10, 20))
        if kind == "session":
            return {"kind": kind, "size": self.pick((5, 10, 20)), "grace": grace}
        size = self.pick((10, 20, 30))
        spec = {"kind": kind, "size": size, "grace": grace}
        if kind == "hopping":
            spec["advance"] = self.pick([a for a in (5, 10, 15) if a < size])
        return spec

    def windowed_aggregate(self, g: str, *, emit: str | None = None) -> str:
        return self.named_aggregation(self._windowed_aggregate(g, emit))

    def _windowed_aggregate(self, g: str, emit: str | None) -> str:
        windows = self.windows()
        emit = emit or self.pick(("update", "update", "close"))
        session = windows["kind"] == "session"
        w = self.add(
            "windowed_by", [g], Node("windowed", session=session), windows=windows, emit=emit
        )
        key = "sw" if session else f"tw:{windows['size']}"
        table = Node("table", key, "s", windowed_table=True, session=session)
        op = self.pick(
            ("count", "reduce", "aggregate")
            if self.nodes[g].value == "s"
            else ("count", "aggregate")
        )
        store = self.maybe_store(0.2)
        if op == "count":
            return self.add("count", [w], Node("table", key, "l", True, session), **store)
        if op == "reduce":
            return self.add("reduce", [w], table, fn=self.pick(("r_concat", "r_sum")), **store)
        args: dict[str, Any] = {"init": "i_empty", "fn": "a_concat", **store}
        if session:
            args["merger"] = "g_concat"
        return self.add("aggregate", [w], table, **args)

    # --- tables --------------------------------------------------------------------
    def table_op(self, t: str) -> str:
        node = self.nodes[t]
        op = self.pick(("filter", "filter_not", "map_values"))
        value = "s" if op == "map_values" else node.value
        # A store of its own (Kafka's queryable name), with the result's
        # serdes (keyed as the table: windowed keys only on windowed tables).
        store: dict[str, Any] = {}
        if node.key == "s":
            store = self.maybe_store(versionable=True, serdes=[node.key, value])
        if op == "map_values":
            fn = self.pick(VALUE_MAPPERS)
            step_no = len(self.steps)
            if step_no % 3 == 0:
                # One value mapping in three is a transform_values, chosen
                # with no draw, so that the cases stay those of the same seeds.
                op, fn = "transform_values", TRANSFORMERS[step_no % len(TRANSFORMERS)]
            return self.add(
                op,
                [t],
                Node("table", node.key, "s", node.windowed_table, node.session),
                fn=fn,
                **store,
            )
        return self.add(
            op,
            [t],
            Node("table", node.key, node.value, node.windowed_table, node.session),
            fn=self.pick(PREDICATES),
            **store,
        )

    def table_chain(self, t: str, length: int) -> str:
        for _ in range(length):
            t = self.table_op(t)
        return t

    def suppress_time_limit(self, t: str) -> str:
        node = self.nodes[t]
        kind = self.pick(("unbounded", "max_records", "max_bytes"))
        buffer: dict[str, Any] = {"kind": kind}
        if kind == "max_records":
            buffer["n"] = self.pick((1, 2, 3))
        elif kind == "max_bytes":
            buffer["n"] = self.pick((60, 120, 250))
        if kind != "unbounded":
            buffer["full"] = self.pick(("emit_early", "emit_early", "shut_down"))
        return self.add(
            "suppress",
            [t],
            Node("table", node.key, node.value, node.windowed_table, node.session),
            kind="time_limit",
            limit_ms=self.pick((0, 5, 10, 30)),
            buffer=buffer,
        )

    def suppress_window_closes(self, t: str) -> str:
        node = self.nodes[t]
        buffer: dict[str, Any] = {"kind": "unbounded"}
        if self.chance(0.2):
            buffer = {"kind": "max_records", "n": 50, "full": "shut_down"}
        return self.add(
            "suppress",
            [t],
            Node("table", node.key, node.value, True, node.session),
            kind="window_closes",
            buffer=buffer,
        )

    def regroup(self, t: str) -> str:
        """KTable.group_by then count / reduce / aggregate with a subtractor."""
        return self.named_aggregation(self._regroup(t))

    def _regroup(self, t: str) -> str:
        g = self.named_grouping(
            self.add(
                "group_by",
                [t],
                Node("gtable"),
                fn=self.pick(("kv_same", *KV_REKEYS)),
                **self.serdes("s"),
            )
        )
        op = self.pick(("count", "reduce", "aggregate"))
        store = self.maybe_store(versionable=True)
        if op == "count":
            return self.add("count", [g], Node("table", value="l"), **store)
        if op == "reduce":
            adder, subtractor = self.pick(SUBTRACTING)
            return self.add(
                "reduce", [g], Node("table"), adder=adder, subtractor=subtractor, **store
            )
        adder, subtractor = self.pick(SUBTRACTING_AGGREGATORS)
        return self.add(
            "aggregate",
            [g],
            Node("table"),
            init=self.pick(("i_empty", "i_zero")),
            adder=adder,
            subtractor=subtractor,
            **store,
        )

    def join_windows(self) -> dict[str, Any]:
        while True:
            before = self.pick((-10, -5, 0, 5, 10, 20))
            after = self.pick((-10, -5, 0, 5, 10, 20))
            if before + after >= 0:
                return {"before": before, "after": after, "grace": self.pick((0, 0, 5, 10))}


# --- families ----------------------------------------------------------------------


def stateless(g: Gen) -> None:
    """Stateless operations, repartition, stateful processors (#16)."""
    s = g.stream()
    if g.chance(0.3):
        s = g.add("merge", [s, g.chain(g.stream(), 1)], Node("stream"))
    s = g.chain(s, g.rng.randint(0, 3))
    if g.chance(0.3):
        s = g.add("repartition", [s], Node("stream", value=g.nodes[s].value))
    if g.chance(0.4):
        s = g.add(
            "process",
            [s],
            Node("stream"),
            fn=g.pick(("proc_concat", "proc_dedupe")),
            store=g.store(),
        )
        s = g.chain(s, g.rng.randint(0, 1))
    g.sink(s)


def merge_split(g: Gen) -> None:
    """merge + split with named branches across a repartition (#24)."""
    left, right = g.chain(g.stream(), g.rng.randint(0, 1)), g.chain(g.stream(), g.rng.randint(0, 1))
    s = g.add("merge", [left, right], Node("stream"))
    if g.chance(0.7):
        s = g.add("repartition", [s], Node("stream"))
    preds = [g.pick(PREDICATES) for _ in range(g.rng.randint(1, 2))]
    default = g.chance(0.7)
    split = g.add("split", [s], Node("split"), preds=preds, default=default)
    names = [str(i) for i in range(len(preds))] + (["default"] if default else [])
    chains: dict[str, dict[str, str]] = {}
    for n, name in enumerate(names):
        # Kafka's Branched.withFunction (one branch in four) and
        # withConsumer (one in six), chosen with no draw: a chain runs when
        # its branch is made, so what it adds is named before the next one.
        pick = int(split[1:]) + n
        if pick % 4 == 1:
            chains[name] = {"fn": VALUE_MAPPERS[pick % len(VALUE_MAPPERS)]}
        elif pick % 6 == 2:
            node = g.nodes[s]
            chains[name] = {"topic": f"out{g.sinks}", "key": node.key, "value": node.value}
            g.sinks += 1
    if chains:
        g.steps[-1].args["chains"] = chains
    for name in names:
        if "topic" in chains.get(name, {}):
            continue  # consumed by its chain: not among the branches
        branch = g.add("branch", [split], Node("stream"), name=name)
        if g.chance(0.4):
            g.sink(g.aggregate(g.group(branch)))
        else:
            g.sink(g.chain(branch, g.rng.randint(0, 1)))


def aggregate(g: Gen) -> None:
    """KGroupedStream count / reduce / aggregate, after group_by, select_key or
    map (repartitioning) or by key; reducers and aggregators that return null;
    to_table (#16, #24 re-grouped aggregations)."""
    s = g.chain(g.stream(), g.rng.randint(0, 1), rekey=False)
    t = g.to_table(s, 0.5) if g.chance(0.15) else g.aggregate(g.group(s))
    if g.chance(0.3):
        t = g.table_op(t)
    g.sink(t)


def table_ops(g: Gen) -> None:
    """KTable filter / filter_not / map_values chains on plain, materialized
    and aggregated parents, then to_stream, suppress(until_time_limit),
    group_by().count(), a table-table join or a stream-table join (#24)."""
    parent = g.pick(("plain", "materialized", "aggregated", "to_table"))
    if parent == "plain":
        t = g.table(False)
    elif parent == "materialized":
        t = g.table(True)
    elif parent == "to_table":
        t = g.to_table(g.stream(), 0.5)
    else:
        t = g.aggregate(g.group(g.stream()))
    t = g.table_chain(t, g.rng.randint(1, 3))
    follow = g.pick(("to_stream", "suppress", "regroup", "table_join", "stream_join"))
    if follow == "suppress":
        g.sink(g.suppress_time_limit(t))
    elif follow == "regroup":
        g.sink(
            g.add(
                "count",
                [g.add("group_by", [t], Node("gtable"), fn=g.pick(("kv_same", *KV_REKEYS)))],
                Node("table", value="l"),
            )
        )
    elif follow == "table_join":
        other = g.table()
        op = g.pick(("join", "left_join", "outer_join"))
        first, second = (t, other) if g.chance(0.5) else (other, t)
        g.sink(
            g.add(op, [first, second], Node("table"), fn=g.pick(("j_pair", "j_null_if_both_even")))
        )
    elif follow == "stream_join":
        s = g.chain(g.stream(), g.rng.randint(0, 1), rekey=False)
        fn = g.pick(("j_pair", "j_pair", "jk_key_pair"))
        g.sink(g.add(g.pick(("join", "left_join")), [s, t], Node("stream"), fn=fn))
    else:
        g.sink(t)


def table_aggregate(g: Gen) -> None:
    """KGroupedTable count / reduce / aggregate with a subtractor (#16)."""
    t = g.table()
    if g.chance(0.4):
        t = g.table_op(t)
    t = g.regroup(t)
    if g.chance(0.2):
        t = g.table_op(t)
    g.sink(t)


def windowed(g: Gen) -> None:
    """All four window types with grace, late records, both emit strategies,
    suppress(until_window_closes), an order-revealing aggregator (#16, #24)."""
    s = g.chain(g.stream(), g.rng.randint(0, 1), rekey=False)
    grouped = (
        g.group(s, serdes_p=1.0) if g.chance(0.3) else g.add("group_by_key", [s], Node("gstream"))
    )
    t = g.windowed_aggregate(grouped)
    if g.chance(0.4):
        t = g.suppress_window_closes(t)
    if g.chance(0.2):
        t = g.table_op(t)
    g.sink(t)


def cogroup(g: Gen) -> None:
    """KGroupedStream.cogroup of one to three grouped streams (by key or
    re-keyed, so repartitioned), each with its own aggregator, then
    aggregate: per key, or in time, sliding or session windows."""
    inputs: list[str] = []
    for _ in range(g.pick((1, 2, 2, 3))):
        s = g.chain(g.stream(), g.rng.randint(0, 1), rekey=False)
        grouped = g.group(s)
        if inputs:
            # Kafka names every repartition topic of a cogroup after its
            # store unless Grouped.as names it; strom numbers them.
            g.steps[-1].args["name"] = f"{grouped}-grouped"
        inputs.append(grouped)
    windows = g.windows() if g.chance(0.5) else None
    # Kafka's sliding windows with caching fail on a null aggregate (a
    # NullPointerException in its cache's iterator), so none there.
    aggregators = AGGREGATORS[:2] if windows and windows["kind"] == "sliding" else AGGREGATORS
    args: dict[str, Any] = {
        "fns": [g.pick(aggregators) for _ in inputs],
        "init": g.pick(("i_empty", "i_zero")),
        **g.maybe_store(versionable=windows is None),
    }
    node = Node("table")
    if windows is not None:
        args["windows"] = windows
        session = windows["kind"] == "session"
        if session:
            args["merger"] = "g_concat"
        key = "sw" if session else f"tw:{windows['size']}"
        node = Node("table", key, "s", windowed_table=True, session=session)
    t = g.add("cogroup", inputs, node, **args)
    if g.chance(0.2):
        t = g.table_op(t)
    g.sink(t)


def suppress(g: Gen) -> None:
    """suppress(until_time_limit) with each buffer policy, and
    until_window_closes with a bounded strict buffer (#16)."""
    s = g.stream()
    if g.chance(0.35):
        t = g.windowed_aggregate(g.add("group_by_key", [s], Node("gstream")), emit="update")
        t = g.suppress_window_closes(t) if g.chance(0.4) else g.suppress_time_limit(t)
    else:
        t = g.aggregate(g.group(s)) if g.chance(0.7) else g.table()
        t = g.suppress_time_limit(t)
    g.sink(t)


def stream_join(g: Gen) -> None:
    """Stream-stream inner / left / outer joins with asymmetric (also
    negative) before / after, grace, self-joins and repeated records (#16, #24)."""
    left = g.stream()
    right = left if g.chance(0.2) else g.stream()  # sometimes a self-join
    if g.chance(0.3):
        left = g.add(
            "select_key", [left], Node("stream"), fn=g.pick(("k_null_for_c", "k_abc_from_value"))
        )
    if right != left and g.chance(0.2):
        right = g.stateless(right, rekey=False)
    op = g.pick(("join", "left_join", "outer_join"))
    joined = g.add(
        op,
        [left, right],
        Node("stream"),
        fn=g.pick(("j_pair", "j_null_if_both_even", "jk_key_pair")),
        windows=g.join_windows(),
    )
    g.sink(joined)


def table_join(g: Gen) -> None:
    """Stream-table, stream-global-table, table-table and foreign-key joins (#16)."""
    kind = g.pick(("stream_table", "stream_global", "table_table", "foreign_key"))
    fn = g.pick(("j_pair", "j_null_if_both_even"))
    if kind in ("stream_table", "stream_global") and g.chance(0.3):
        fn = "jk_key_pair"  # Kafka's table joins take no ValueJoinerWithKey
    if kind == "stream_table":
        s = g.stream()
        if g.chance(0.3):
            s = g.add(
                "select_key", [s], Node("stream"), fn=g.pick(("k_null_for_c", "k_abc_from_value"))
            )
        # Half on a versioned table, read as of each stream record, two in
        # three of those with a grace period.
        versioned = g.chance(0.5)
        t = g.table(versioned=versioned)
        if g.chance(0.3):
            t = g.table_op(t)
        op = g.pick(("join", "left_join"))
        # Kafka's grace buffer fails on a left join's null key (a
        # NullPointerException in RocksDBTimeOrderedKeyValueBuffer.put; strom
        # joins such a record at once), so only inner joins take a grace.
        grace_ms = g.pick((None, 5, 20)) if versioned and op == "join" else None
        grace = {} if grace_ms is None else {"grace": grace_ms}
        g.sink(g.add(op, [s, t], Node("stream"), fn=fn, **grace))
    elif kind == "stream_global":
        s, t = g.stream(), g.global_table()
        key_fn = g.pick(("k_same", "k_abc_from_value", "k_null_for_c"))
        g.sink(g.add(g.pick(("join", "left_join")), [s, t], Node("stream"), fn=fn, key_fn=key_fn))
    elif kind == "table_table":
        left, right = g.table(), g.table()
        if g.chance(0.3):
            left = g.table_op(left)
        op = g.pick(("join", "left_join", "outer_join"))
        store = g.maybe_store(versionable=True, serdes=["s", "s"])
        joined = g.add(op, [left, right], Node("table"), fn=fn, **store)
        g.sink(g.regroup(joined) if g.chance(0.2) else joined)
    else:
        left, right = g.table(), g.table()
        # fk_key_abc takes the key too (Kafka's BiFunction extractor).
        fk = g.pick(("f_abc", "f_abc_or_null", "fk_key_abc"))
        op = g.pick(("join", "left_join"))
        store = g.maybe_store(versionable=True, serdes=["s", "s"])
        g.sink(g.add(op, [left, right], Node("table"), fn=fn, fk=fk, **store))


FAMILIES: dict[str, Callable[[Gen], None]] = {
    "stateless": stateless,
    "merge_split": merge_split,
    "aggregate": aggregate,
    "table_ops": table_ops,
    "table_aggregate": table_aggregate,
    "windowed": windowed,
    "suppress": suppress,
    "cogroup": cogroup,
    "stream_join": stream_join,
    "table_join": table_join,
}


# --- input ------------------------------------------------------------------------------


def inputs(g: Gen) -> list[Input]:
    """A few to a few dozen records over the case's input topics: keys a, b,
    c (sometimes null), values 0-9 (sometimes null), timestamps on a 5 ms
    grid that mostly advance, often tie, sometimes go back (late, and
    sometimes beyond any grace), and records repeated as they were."""
    rng = g.rng
    topics = list(g.topics)
    count = rng.randint(3, 28)
    clock = rng.choice((0, 5, 10, 20))
    records: list[Input] = []
    null_key = rng.choice((0.0, 0.05, 0.1))
    tombstone = rng.choice((0.0, 0.1, 0.2))
    for _ in range(count):
        if records and rng.random() < 0.1:
            prev = rng.choice(records)
            records.append(
                Input(
                    prev.topic,
                    prev.key,
                    rng.choice((prev.value, str(rng.randint(0, 9)))),
                    prev.timestamp,
                )
            )
            continue
        topic = rng.choice(topics)
        key = None if rng.random() < null_key else rng.choice(KEYS)
        value = None if rng.random() < tombstone else str(rng.randint(0, 9))
        roll = rng.random()
        if roll < 0.55:
            delta = rng.choice((0, 0, 1, 5, 5, 10))
        elif roll < 0.85:
            delta = -rng.choice((1, 5, 5, 10, 20))
        else:
            delta = rng.choice((30, -40, -60))
        timestamp = max(0, clock + delta)
        clock = max(clock, timestamp)
        records.append(Input(topic, key, value, timestamp))
    # Two records in three name themselves in a header (no draw: the cases
    # stay those of the same seeds), so that outputs show their origin.
    for i, record in enumerate(records):
        if i % 3 != 2:
            record.headers = [["i", str(i)]]
    return records


def case(family: str, seed: str, *, cache: bool | None = None) -> Case:
    """The case ``seed`` of ``family``: a pure function of both."""
    rng = random.Random(f"{family}:{seed}")
    g = Gen(family, rng)
    FAMILIES[family](g)
    records = inputs(g)
    return Case(
        family=family,
        steps=g.steps,
        inputs=records,
        cache=rng.random() < 0.5 if cache is None else cache,
        id=seed,
        stores=STORES or _stores(g.steps, records),
    )


def _stores(steps: list[Step], records: list[Input]) -> str:
    """RocksDB where Kafka's results depend on the store type, else in-memory:

    - emit-on-window-close results are read from Kafka's time-ordered window
      and session stores, which RocksDB expires by whole segments and the
      in-memory ones record by record;
    - a stream-stream join puts a null-valued record into its window store:
      the in-memory store moves its observed stream time (and so what a later
      fetch sees) for it, RocksDB's skips the put.

    Key-value stores, and window and session stores read only within their
    retention, behave alike (tests/differential: test_store_stand_in)."""
    emit_close = any(s.op == "windowed_by" and s.args.get("emit") == "close" for s in steps)
    # A cogroup's processors share one store, whose time any of them moves:
    # one of them may read past what its own stream time would keep.
    shared_windows = any(s.op == "cogroup" and "windows" in s.args for s in steps)
    stream_join = any(s.op.endswith("join") and "windows" in s.args for s in steps)
    null_values = any(r.value is None for r in records) or any(
        s.args.get("fn") in NULL_MAKERS for s in steps
    )
    if emit_close or shared_windows or (stream_join and null_values):
        return "rocksdb"
    return "in_memory"


# Mappers that return null for a value that is not.
NULL_MAKERS = frozenset({"m_null_if_odd", "mk_null_unless_key_a"})
