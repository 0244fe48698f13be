"""Builds a case's topology with strom's public DSL and runs its input through
strom's TopologyTestDriver: the Python twin of tests/reference's Builder."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from tests.differential import functions as f
from tests.differential.spec import Case, OutputRecord, Result, Step

from strom import StreamsBuilder, Topology, serdes
from strom.kstream import (
    BufferConfig,
    EmitStrategy,
    GlobalKTable,
    JoinWindows,
    KGroupedStream,
    KGroupedTable,
    KStream,
    KTable,
    Materialized,
    SessionWindowedCogroupedKStream,
    SessionWindowedKStream,
    SessionWindows,
    SlidingWindowedKStream,
    SlidingWindows,
    Suppressed,
    TimeWindowedKStream,
    TimeWindows,
)
from strom.state import Stores
from strom.testing import TopologyTestDriver

CACHE_BYTES = 10 * 1024 * 1024  # Kafka's default statestore.cache.max.bytes

_GROUPED = (
    KGroupedStream,
    KGroupedTable,
    TimeWindowedKStream,
    SlidingWindowedKStream,
    SessionWindowedKStream,
)


def key_serde(kind: str) -> serdes.Serde[Any]:
    if kind == "s":
        return serdes.String()
    if kind == "sw":
        return serdes.SessionWindowed(serdes.String())
    if kind.startswith("tw:"):
        return serdes.TimeWindowed(serdes.String(), int(kind[3:]))
    raise ValueError(f"unknown key kind {kind!r}")


def value_serde(kind: str) -> serdes.Serde[Any]:
    if kind == "s":
        return serdes.String()
    if kind == "l":
        return serdes.Long()
    raise ValueError(f"unknown value kind {kind!r}")


def _grouped(args: dict[str, Any]) -> dict[str, Any]:
    """Kafka's Grouped.with(key, value) when the step names serdes."""
    if args.get("serdes") is None:
        return {}
    key, value = args["serdes"]
    return {"key_serde": key_serde(key), "value_serde": value_serde(value)}


def _suppressed(args: dict[str, Any]) -> Suppressed:
    spec = args["buffer"]
    kind = spec["kind"]
    if kind == "unbounded":
        buffer = BufferConfig.unbounded()
    elif kind == "max_records":
        buffer = BufferConfig.max_records(spec["n"])
    elif kind == "max_bytes":
        buffer = BufferConfig.max_bytes(spec["n"])
    else:
        raise ValueError(f"unknown buffer {kind!r}")
    if kind != "unbounded":
        emit_early = spec.get("full", "shut_down") == "emit_early"
        buffer = buffer.emit_early_when_full() if emit_early else buffer.shut_down_when_full()
    if args["kind"] == "window_closes":
        return Suppressed.until_window_closes(buffer)
    return Suppressed.until_time_limit(args["limit_ms"], buffer)


def _windows(spec: dict[str, Any]) -> TimeWindows | SlidingWindows | SessionWindows:
    kind, size, grace = spec["kind"], spec["size"], spec["grace"]
    if kind == "tumbling":
        return TimeWindows.of_size_and_grace(size, grace)
    if kind == "hopping":
        return TimeWindows.of_size_and_grace(size, grace).advance_by(spec["advance"])
    if kind == "sliding":
        return SlidingWindows.of_time_difference_and_grace(size, grace)
    if kind == "session":
        return SessionWindows.of_inactivity_gap_and_grace(size, grace)
    raise ValueError(f"unknown windows {kind!r}")


class Builder:
    """Applies a case's steps to a strom StreamsBuilder, in order."""

    def __init__(self) -> None:
        self.builder = StreamsBuilder()
        self.nodes: dict[str, Any] = {}
        self.sink_topics: list[str] = []

    def build(self, steps: list[Step]) -> Topology:
        for step in steps:
            result = self.step(step)
            if result is not None:
                self.nodes[step.id] = result
        return self.builder.build()

    def _chain(self, chain: dict[str, str] | None) -> Callable[[Any], Any] | None:
        """A split branch's chain: a value mapper (Kafka's
        ``Branched.withFunction``) or a sink (``withConsumer``)."""
        if chain is None:
            return None
        if "fn" in chain:
            fn = chain["fn"]
            if fn in f.KEYED_MAPPERS:
                return lambda branch: branch.map_values(f.KEYED_MAPPERS[fn], with_key=True)
            return lambda branch: branch.map_values(f.get(f.MAPPERS, fn, "mapper"))
        topic = chain["topic"]
        self.sink_topics.append(topic)
        return lambda branch: branch.to(
            topic, key_serde=key_serde(chain["key"]), value_serde=value_serde(chain["value"])
        )

    def _in(self, step: Step, index: int) -> Any:
        try:
            return self.nodes[step.inputs[index]]
        except (IndexError, KeyError):
            raise ValueError(f"step {step.id}: no input {index}") from None

    def step(self, step: Step) -> Any:
        op, args = step.op, step.args
        string = serdes.String()
        name = args.get("name")
        if op == "stream":
            return self.builder.stream(
                args["topic"], key_serde=string, value_serde=string, name=name
            )
        if op == "table":
            return self.builder.table(
                args["topic"],
                key_serde=string,
                value_serde=string,
                materialized=_store(args),
                name=name,
            )
        if op == "global_table":
            return self.builder.global_table(
                args["topic"], key_serde=string, value_serde=string, name=name
            )
        if op == "split":
            branched = self._in(step, 0).split(name=f"{step.id}-")
            chains = args.get("chains", {})
            for index, pred in enumerate(args["preds"]):
                predicate = f.get(f.PREDICATES, pred, "predicate")
                chain = self._chain(chains.get(str(index)))
                branched = branched.branch(predicate, str(index), chain=chain)
            if args.get("default"):
                return branched.default_branch("default", chain=self._chain(chains.get("default")))
            return branched.no_default_branch()
        if op == "branch":
            name = f"{step.inputs[0]}-{args['name']}"
            return self._in(step, 0)[name]
        if op == "to":
            self._in(step, 0).to(
                args["topic"],
                key_serde=key_serde(args["key"]),
                value_serde=value_serde(args["value"]),
            )
            self.sink_topics.append(args["topic"])
            return None
        if op == "process":
            store, fn = args["store"], args["fn"]
            self.builder.add_state_store(
                Stores.key_value_store_builder(
                    Stores.in_memory_key_value_store(store), string, string
                )
            )
            processor = f.get(f.PROCESSORS, fn, "processor")
            return self._in(step, 0).process(lambda: processor(store), store)
        if op == "windowed_by":
            windowed = self._in(step, 0).windowed_by(_windows(args["windows"]))
            emit = (
                EmitStrategy.on_window_close()
                if args.get("emit") == "close"
                else EmitStrategy.on_window_update()
            )
            return windowed.emit_strategy(emit)
        if op in ("join", "left_join", "outer_join"):
            return self._join(step)
        if op == "cogroup":
            return self._cogroup(step)
        parent = self._in(step, 0)
        if isinstance(parent, KStream):
            return self._stream_op(step, parent)
        if isinstance(parent, KTable):
            return self._table_op(step, parent)
        if isinstance(parent, _GROUPED):
            return self._aggregation(step, parent)
        raise ValueError(f"op {op} does not apply to {type(parent).__name__}")

    def _stream_op(self, step: Step, s: KStream) -> Any:
        op, args = step.op, step.args
        fn = args.get("fn")
        if op == "filter":
            return s.filter(f.get(f.PREDICATES, fn, "predicate"))
        if op == "filter_not":
            return s.filter_not(f.get(f.PREDICATES, fn, "predicate"))
        if op == "map_values" and fn in f.KEYED_MAPPERS:
            return s.map_values(f.KEYED_MAPPERS[fn], with_key=True)
        if op == "map_values":
            return s.map_values(f.get(f.MAPPERS, fn, "mapper"))
        if op == "map":
            return s.map(f.get(f.KV_MAPPERS, fn, "key-value mapper"))
        if op == "select_key":
            return s.select_key(f.get(f.KEY_SELECTORS, fn, "key selector"))
        if op == "flat_map":
            return s.flat_map(f.get(f.FLAT_MAPPERS, fn, "flat mapper"))
        if op == "flat_map_values" and fn in f.KEYED_FLAT_VALUE_MAPPERS:
            return s.flat_map_values(f.KEYED_FLAT_VALUE_MAPPERS[fn], with_key=True)
        if op == "flat_map_values":
            return s.flat_map_values(f.get(f.FLAT_VALUE_MAPPERS, fn, "flat value mapper"))
        if op == "merge":
            return s.merge(self._in(step, 1))
        if op == "repartition":
            return s.repartition()
        if op == "to_table":
            return s.to_table(args.get("store"), name=args.get("name"))
        if op == "group_by_key":
            return s.group_by_key(**_grouped(args), name=args.get("name"))
        if op == "group_by":
            selector = f.get(f.KEY_SELECTORS, fn, "key selector")
            return s.group_by(selector, **_grouped(args), name=args.get("name"))
        raise ValueError(f"op {op} does not apply to a KStream")

    def _table_op(self, step: Step, t: KTable) -> Any:
        op, args = step.op, step.args
        fn = args.get("fn")
        # Kafka's Materialized.as(store).withKeySerde(…).withValueSerde(…).
        mat = _materialized(args)
        if op == "filter":
            return t.filter(f.get(f.PREDICATES, fn, "predicate"), materialized=mat)
        if op == "filter_not":
            return t.filter_not(f.get(f.PREDICATES, fn, "predicate"), materialized=mat)
        if op == "map_values" and fn in f.KEYED_MAPPERS:
            return t.map_values(f.KEYED_MAPPERS[fn], materialized=mat, with_key=True)
        if op == "map_values":
            return t.map_values(f.get(f.MAPPERS, fn, "mapper"), materialized=mat)
        if op == "transform_values":
            f.get(f.TRANSFORMERS, fn, "transformer")  # an unknown name fails here
            return t.transform_values(lambda: f.Transformer(fn), materialized=mat)
        if op == "to_stream":
            return t.to_stream(f.get(f.KEY_SELECTORS, fn, "key selector") if fn else None)
        if op == "suppress":
            return t.suppress(_suppressed(args))
        if op == "group_by":
            mapper = f.get(f.KV_MAPPERS, fn, "key-value mapper")
            return t.group_by(mapper, **_grouped(args), name=args.get("name"))
        raise ValueError(f"op {op} does not apply to a KTable")

    def _aggregation(self, step: Step, g: Any) -> Any:
        op, args = step.op, step.args
        store = _materialized(args)
        named = {"name": args["name"]} if "name" in args else {}
        if op == "count":
            return g.count(store, **named)
        if isinstance(g, KGroupedTable):
            if op == "reduce":
                return g.reduce(
                    f.get(f.REDUCERS, args["adder"], "reducer"),
                    f.get(f.REDUCERS, args["subtractor"], "reducer"),
                    store,
                    **named,
                )
            if op == "aggregate":
                return g.aggregate(
                    f.get(f.INITIALIZERS, args["init"], "initializer"),
                    f.get(f.AGGREGATORS, args["adder"], "aggregator"),
                    f.get(f.AGGREGATORS, args["subtractor"], "aggregator"),
                    store,
                    **named,
                )
        elif op == "reduce":
            return g.reduce(f.get(f.REDUCERS, args["fn"], "reducer"), store, **named)
        elif op == "aggregate":
            init = f.get(f.INITIALIZERS, args["init"], "initializer")
            aggregator = f.get(f.AGGREGATORS, args["fn"], "aggregator")
            if isinstance(g, SessionWindowedKStream):
                merger = f.get(f.MERGERS, args["merger"], "merger")
                return g.aggregate(init, aggregator, merger, store, **named)
            return g.aggregate(init, aggregator, store, **named)
        raise ValueError(f"op {op} does not apply to {type(g).__name__}")

    def _cogroup(self, step: Step) -> KTable:
        args = step.args
        aggregators = [f.get(f.AGGREGATORS, fn, "aggregator") for fn in args["fns"]]
        cogrouped = self._in(step, 0).cogroup(aggregators[0])
        for index, aggregator in enumerate(aggregators[1:], start=1):
            cogrouped = cogrouped.cogroup(self._in(step, index), aggregator)
        init = f.get(f.INITIALIZERS, args["init"], "initializer")
        store = _materialized(args)
        if "windows" not in args:
            return cogrouped.aggregate(init, materialized=store)
        windowed = cogrouped.windowed_by(_windows(args["windows"]))
        if isinstance(windowed, SessionWindowedCogroupedKStream):
            merger = f.get(f.MERGERS, args["merger"], "merger")
            return windowed.aggregate(init, merger, materialized=store)
        return windowed.aggregate(init, materialized=store)

    def _join(self, step: Step) -> Any:
        op, args = step.op, step.args
        left, right = self._in(step, 0), self._in(step, 1)
        keyed = args["fn"] in f.KEYED_JOINERS
        joiner = f.KEYED_JOINERS[args["fn"]] if keyed else f.get(f.JOINERS, args["fn"], "joiner")
        with_key = {"with_key": True} if keyed else {}
        if isinstance(left, KStream) and isinstance(right, KStream):
            w = args["windows"]
            before, after = w["before"], w["after"]
            windows = (
                JoinWindows.of_time_difference_and_grace(max(abs(before), abs(after)), w["grace"])
                .before(before)
                .after(after)
            )
            return getattr(left, op)(right, joiner, windows, **with_key)
        if isinstance(left, KStream) and isinstance(right, KTable):
            return getattr(left, op)(right, joiner, **with_key, grace=args.get("grace"))
        if isinstance(left, KStream) and isinstance(right, GlobalKTable):
            selector = f.get(f.KEY_SELECTORS, args["key_fn"], "key selector")
            return getattr(left, op)(right, selector, joiner, **with_key)
        if isinstance(left, KTable) and isinstance(right, KTable):
            mat = _materialized(args)
            fk = args.get("fk")
            if fk is not None:
                keyed = fk in f.KEYED_FOREIGN_KEYS
                extractor = (
                    f.KEYED_FOREIGN_KEYS[fk]
                    if keyed
                    else f.get(f.FOREIGN_KEYS, fk, "foreign-key extractor")
                )
                return getattr(left, op)(
                    right,
                    joiner,
                    foreign_key=extractor,
                    foreign_key_with_key=keyed,
                    materialized=mat,
                )
            return getattr(left, op)(right, joiner, materialized=mat)
        raise ValueError(f"no {op} of {type(left).__name__} with {type(right).__name__}")


def _store(args: dict[str, Any]) -> Any:
    """A step's store: its name, or a versioned store with the step's
    history retention (KIP-914), or None."""
    if "versioned" in args:
        return Stores.persistent_versioned_key_value_store(args["store"], args["versioned"])
    return args.get("store")


def _materialized(args: dict[str, Any]) -> Materialized | None:
    """Kafka's ``Materialized.as(store)`` (a versioned store's supplier
    when the step gives a history) or ``Materialized.with(serdes)``, with
    the step's serdes; None when it names neither a store nor serdes."""
    if not args.get("store") and not args.get("serdes"):
        return None
    return Materialized(_store(args), **_grouped(args))


def _hex(data: bytes | None) -> str | None:
    return None if data is None else data.hex()


def run(case: Case) -> Result:
    """The case on strom's TopologyTestDriver: every sink topic's records, or
    the error that stopped building or running it."""
    try:
        builder = Builder()
        topology = builder.build(case.steps)
        description = str(topology.describe())
        config = {
            "statestore.cache.max.bytes": CACHE_BYTES if case.cache else 0,
            "default.key.serde": serdes.String(),
            "default.value.serde": serdes.String(),
            **case.config,
        }
        raw = serdes.ByteArray()
        string = serdes.String()
        with TopologyTestDriver(topology, config) as driver:
            inputs = {}
            for record in case.inputs:
                topic = inputs.get(record.topic)
                if topic is None:
                    topic = inputs[record.topic] = driver.create_input_topic(
                        record.topic, string, string
                    )
                headers = [(name, value.encode()) for name, value in record.headers or ()]
                topic.pipe_input(record.key, record.value, record.timestamp, headers=headers)
            outputs: dict[str, list[OutputRecord]] = {}
            for name in builder.sink_topics:
                if name in outputs:
                    continue
                out = driver.create_output_topic(name, raw, raw)
                outputs[name] = [
                    (
                        _hex(r.key),
                        _hex(r.value),
                        r.timestamp,
                        tuple((k, _hex(v) or "") for k, v in (r.headers or ())),
                    )
                    for r in out.read_records_to_list()
                ]
        return Result(outputs, topology=description)
    except Exception:  # any failure is an outcome to compare with Kafka's
        return Result(error=traceback.format_exc(limit=-8))
