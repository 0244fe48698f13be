"""Runs cases on both drivers, compares them record for record, classifies
and shrinks mismatches, and renders them for a person to read."""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tests.differential import strom_side
from tests.differential.reference import Reference
from tests.differential.spec import Case, OutputRecord, Result, Step

__all__ = ["Outcome", "Result", "render", "run", "shrink"]


@dataclass
class Outcome:
    case: Case
    kafka: Result
    strom: Result

    @property
    def agrees(self) -> bool:
        if self.kafka.error or self.strom.error:
            # Both refusing the case (e.g. a full suppression buffer that
            # shuts down) is agreement; what they say need not be.
            return bool(self.kafka.error) and bool(self.strom.error)
        return self.kafka.outputs == self.strom.outputs and self.topologies_agree

    @property
    def topologies_agree(self) -> bool:
        """Both describe the topology in the same words: sub-topologies,
        node names, topics, stores, wiring and the order of it all."""
        kafka, strom = self.kafka.topology, self.strom.topology
        return kafka is None or strom is None or described(kafka) == described(strom)

    @property
    def signature(self) -> str:
        """A coarse class of the mismatch: shrinking keeps it, so a shrunk
        case shows the same kind of difference as the one it came from."""
        if self.strom.error and not self.kafka.error:
            return "strom raises " + _error_name(self.strom.error)
        if self.kafka.error and not self.strom.error:
            return "kafka raises " + _error_name(self.kafka.error)
        kinds = [] if self.topologies_agree else ["topology names"]
        for topic in sorted(set(self.kafka.outputs) | set(self.strom.outputs)):
            k, s = self.kafka.outputs.get(topic, []), self.strom.outputs.get(topic, [])
            if k != s:
                kinds.append(_difference(k, s))
        return " + ".join(sorted(set(kinds)))


def described(text: str) -> str:
    """A topology description without strom's notes on natively run nodes
    (``(native: …)``), which Kafka has no counterpart of."""
    return re.sub(r" \(native: .*\)$", "", text, flags=re.MULTILINE)


def signature_of_error(error: str) -> str:
    return _error_name(error)


def _error_name(error: str) -> str:
    if not error.startswith("Traceback"):
        return error.split(":", 1)[0].strip()  # a Java stack trace: the exception's class
    lines = [line for line in error.strip().splitlines() if line and not line[0].isspace()]
    last = lines[-1] if lines else error
    return last.split(":")[0].strip()


def _difference(kafka: list[OutputRecord], strom: list[OutputRecord]) -> str:
    if Counter(kafka) == Counter(strom):
        return "order"
    if [r[:2] for r in kafka] == [r[:2] for r in strom]:
        return "timestamps"
    missing, extra = Counter(kafka) - Counter(strom), Counter(strom) - Counter(kafka)
    if not extra:
        tombstones = all(r[1] is None for r in missing)
        return "strom misses tombstones" if tombstones else "strom misses records"
    if not missing:
        tombstones = all(r[1] is None for r in extra)
        return "strom adds tombstones" if tombstones else "strom adds records"
    return "values"


def run(reference: Reference, cases: Sequence[Case]) -> list[Outcome]:
    """Both drivers on each case: strom's runs while the JVM works on Kafka's."""
    pending = reference.submit(cases)
    strom = [strom_side.run(c) for c in cases]
    kafka = pending.result()
    return [Outcome(c, k, s) for c, k, s in zip(cases, kafka, strom, strict=True)]


# --- shrinking ----------------------------------------------------------------


def _without_step(case: Case, step_id: str, replacement: str | None) -> Case | None:
    """The case without one step: readers of it read ``replacement``
    instead (a step it read), then steps nobody reads are pruned."""
    steps = []
    for step in case.steps:
        if step.id == step_id:
            continue
        inputs = [replacement if i == step_id else i for i in step.inputs]
        if None in inputs:
            return None
        steps.append(replace(step, inputs=inputs))  # type: ignore[arg-type]
    while True:
        read = {i for s in steps for i in s.inputs}
        dead = [s for s in steps if s.op != "to" and s.id not in read]
        if not dead:
            break
        steps = [s for s in steps if s not in dead]
    if not any(s.op == "to" for s in steps):
        return None
    used = {s.args.get("topic") for s in steps}
    inputs = [r for r in case.inputs if r.topic in used]
    return replace(case, steps=steps, inputs=inputs)


def _step_candidates(case: Case) -> list[Case]:
    out = []
    sinks = case.sinks()
    for step in reversed(case.steps):
        if step.op == "to":
            if len(sinks) > 1:
                out.append(_without_step(case, step.id, None))
            continue
        out.extend(_without_step(case, step.id, r) for r in dict.fromkeys(step.inputs))
    return [c for c in out if c is not None]


def _input_candidates(case: Case, chunks: int) -> list[Case]:
    records = case.inputs
    size = max(1, len(records) // chunks)
    return [
        replace(case, inputs=records[:start] + records[start + size :])
        for start in range(0, len(records), size)
    ]


def shrink(reference: Reference, outcome: Outcome, budget: int = 400) -> Outcome:
    """Greedy delta debugging: drop topology steps, then chunks of input
    records (halving the chunk size down to single records), while Kafka
    still runs the case and the mismatch keeps its signature."""
    signature = outcome.signature
    spent = 0

    def first_failing(candidates: list[Case]) -> Outcome | None:
        nonlocal spent
        if not candidates or spent >= budget:
            return None
        spent += len(candidates)
        for result in run(reference, candidates):
            if not result.kafka.error and not result.agrees and result.signature == signature:
                return result
        return None

    best = outcome
    changed = True
    while changed:
        changed = False
        if best.case.cache:
            smaller = first_failing([replace(best.case, cache=False)])
            if smaller:
                best, changed = smaller, True
        while smaller := first_failing(_step_candidates(best.case)):
            best, changed = smaller, True
        chunks = 2
        while len(best.case.inputs) > 1:
            smaller = first_failing(_input_candidates(best.case, chunks))
            if smaller:
                best, changed = smaller, True
                chunks = max(2, chunks - 1)
            elif chunks >= len(best.case.inputs):
                break
            else:
                chunks = min(len(best.case.inputs), chunks * 2)
    return best


# --- rendering ----------------------------------------------------------------


def _decode_key(kind: str, data: str | None) -> str:
    if data is None:
        return "null"
    raw = bytes.fromhex(data)
    if kind == "s":
        return raw.decode()
    if kind == "sw":
        end, start = int.from_bytes(raw[-16:-8], "big"), int.from_bytes(raw[-8:], "big")
        return f"{raw[:-16].decode()}@[{start},{end}]"
    size = int(kind[3:])
    start = int.from_bytes(raw[-8:], "big")
    return f"{raw[:-8].decode()}@[{start},{start + size})"


def _decode_value(kind: str, data: str | None) -> str:
    if data is None:
        return "null"
    raw = bytes.fromhex(data)
    return str(int.from_bytes(raw, "big", signed=True)) if kind == "l" else json.dumps(raw.decode())


def render_records(case: Case, result: Result) -> list[str]:
    if result.error:
        return ["  error: " + result.error.strip().splitlines()[-1][:300]]
    kinds = {s.args["topic"]: (s.args["key"], s.args["value"]) for s in case.sinks()}
    lines = []
    for topic, records in result.outputs.items():
        key_kind, value_kind = kinds.get(topic, ("s", "s"))
        lines.append(f"  {topic}:")
        for k, v, ts, headers in records:
            extra = f" headers={list(headers)}" if headers else ""
            lines.append(
                f"    {_decode_key(key_kind, k)} -> {_decode_value(value_kind, v)} @{ts}{extra}"
            )
    return lines


def render_steps(steps: list[Step]) -> list[str]:
    lines = []
    for s in steps:
        args = ", ".join(f"{k}={v!r}" for k, v in s.args.items())
        reads = f"({', '.join(s.inputs)})" if s.inputs else "()"
        lines.append(f"  {s.id} = {s.op}{reads} {args}".rstrip())
    return lines


def render(outcome: Outcome) -> str:
    case = outcome.case
    cache = "on" if case.cache else "off"
    lines = [f"family {case.family}, case {case.id!r}, cache {cache}: {outcome.signature}"]
    lines.append("topology:")
    lines += render_steps(case.steps)
    lines.append("input (topic key value @timestamp):")
    lines += [f"  {r.topic} {r.key} {r.value} @{r.timestamp}" for r in case.inputs]
    lines.append("kafka:")
    lines += render_records(case, outcome.kafka)
    lines.append("strom:")
    lines += render_records(case, outcome.strom)
    if not outcome.topologies_agree:
        lines.append("topology descriptions (kafka, strom):")
        diff = difflib.unified_diff(
            (outcome.kafka.topology or "").splitlines(),
            (outcome.strom.topology or "").splitlines(),
            "kafka",
            "strom",
            lineterm="",
            n=1,
        )
        lines += ["  " + line for line in diff]
    lines.append("as strom code:")
    lines += ["  " + line for line in code(case).splitlines()]
    lines.append("spec: " + case.dumps())
    return "\n".join(lines)


def report(
    reference: Reference,
    outcomes: Sequence[Outcome],
    *,
    shrink_per_signature: int = 1,
    log: Callable[[str], None] = print,
) -> dict[str, int]:
    """Counts mismatches by signature and logs a shrunk reproducer of the
    first ones of each."""
    counts: Counter[str] = Counter()
    shown: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome.agrees:
            continue
        counts[outcome.signature] += 1
        if shown[outcome.signature] < shrink_per_signature:
            shown[outcome.signature] += 1
            log(render(shrink(reference, outcome)))
    return dict(counts)


# --- a reproducer as strom code -------------------------------------------------


def _windows_code(w: dict[str, Any]) -> str:
    kind, size, grace = w["kind"], w["size"], w["grace"]
    if kind == "session":
        return f"SessionWindows.of_inactivity_gap_and_grace({size}, {grace})"
    if kind == "sliding":
        return f"SlidingWindows.of_time_difference_and_grace({size}, {grace})"
    code = f"TimeWindows.of_size_and_grace({size}, {grace})"
    return code + (f".advance_by({w['advance']})" if kind == "hopping" else "")


def _suppressed_code(args: dict[str, Any]) -> str:
    spec = args["buffer"]
    buffer = "BufferConfig.unbounded()"
    if spec["kind"] != "unbounded":
        buffer = f"BufferConfig.{spec['kind']}({spec['n']})"
        buffer += (
            ".emit_early_when_full()"
            if spec.get("full") == "emit_early"
            else ".shut_down_when_full()"
        )
    if args["kind"] == "window_closes":
        return f"Suppressed.until_window_closes({buffer})"
    return f"Suppressed.until_time_limit({args['limit_ms']}, {buffer})"


_SERDE_CODE = {"s": "String()", "l": "Long()", "sw": "SessionWindowed(String())"}


def _serde_code(kind: str) -> str:
    return _SERDE_CODE.get(kind) or f"TimeWindowed(String(), {kind[3:]})"


def _store_code(args: dict[str, Any]) -> str:
    if "versioned" in args:
        supplier = f"{args['store']!r}, {args['versioned']}"
        return f"Stores.persistent_versioned_key_value_store({supplier})"
    return repr(args["store"])


def _materialized_code(args: dict[str, Any]) -> str:
    """A table operation's or table join's store with its serdes."""
    k, v = args["serdes"]
    return (
        f"Materialized({_store_code(args)}, "
        f"key_serde={_serde_code(k)}, value_serde={_serde_code(v)})"
    )


def _chain_code(chain: dict[str, str] | None) -> str:
    if chain is None:
        return ""
    if "fn" in chain:
        keyed = ", with_key=True" if chain["fn"].startswith("mk_") else ""
        return f", chain=lambda branch: branch.map_values({chain['fn']}{keyed})"
    serdes = f"key_serde={_serde_code(chain['key'])}, value_serde={_serde_code(chain['value'])}"
    return f", chain=lambda branch: branch.to({chain['topic']!r}, {serdes})"


def code(case: Case) -> str:
    """The case as strom code (functions by their names in functions.py)."""
    lines = ["b = StreamsBuilder()"]
    used: list[str] = []
    for s in case.steps:
        a, src = s.args, (s.inputs[0] if s.inputs else "")
        fn = a.get("fn")
        store = f", {_store_code(a)}" if a.get("store") else ""
        if fn:
            used.append(fn)
        if s.op in ("stream", "global_table", "table"):
            method = "stream" if s.op == "stream" else s.op
            mat = f", materialized={_store_code(a)}" if a.get("store") else ""
            mat += f", name={a['name']!r}" if a.get("name") else ""
            rhs = f"b.{method}({a['topic']!r}, key_serde=String(), value_serde=String(){mat})"
        elif s.op == "to":
            lines.append(
                f"{src}.to({a['topic']!r}, key_serde={_serde_code(a['key'])}, "
                f"value_serde={_serde_code(a['value'])})"
            )
            continue
        elif s.op == "split":
            chains = a.get("chains", {})
            preds = "".join(
                f".branch({p}, {str(i)!r}{_chain_code(chains.get(str(i)))})"
                for i, p in enumerate(a["preds"])
            )
            default = f".default_branch('default'{_chain_code(chains.get('default'))})"
            end = default if a.get("default") else ".no_default_branch()"
            used += a["preds"] + [c["fn"] for c in chains.values() if "fn" in c]
            rhs = f"{src}.split({s.id + '-'!r}){preds}{end}"
        elif s.op == "branch":
            rhs = f"{src}[{src + '-' + a['name']!r}]"
        elif s.op == "windowed_by":
            emit = "on_window_close" if a.get("emit") == "close" else "on_window_update"
            windows = _windows_code(a["windows"])
            rhs = f"{src}.windowed_by({windows}).emit_strategy(EmitStrategy.{emit}())"
        elif s.op == "suppress":
            rhs = f"{src}.suppress({_suppressed_code(a)})"
        elif s.op in ("join", "left_join", "outer_join"):
            other = s.inputs[1]
            if "windows" in a:
                w = a["windows"]
                wide = max(abs(w["before"]), abs(w["after"]))
                rhs = (
                    f"{src}.{s.op}({other}, {fn}, JoinWindows.of_time_difference_and_grace("
                    f"{wide}, {w['grace']}).before({w['before']}).after({w['after']}))"
                )
            elif "key_fn" in a:
                used.append(a["key_fn"])
                rhs = f"{src}.{s.op}({other}, {a['key_fn']}, {fn})"
            else:
                rhs = f"{src}.{s.op}({other}, {fn}"
                if "fk" in a:
                    used.append(a["fk"])
                    rhs += f", foreign_key={a['fk']}"
                    if a["fk"].startswith("fk_"):  # KEYED_FOREIGN_KEYS
                        rhs += ", foreign_key_with_key=True"
                if a.get("store"):
                    rhs += f", materialized={_materialized_code(a)}"
                rhs += ")"
            if fn and fn.startswith("jk_"):
                rhs = rhs[:-1] + ", with_key=True)"
        elif s.op in ("filter", "filter_not", "map_values", "transform_values") and a.get("store"):
            keyed = ", with_key=True" if fn and fn.startswith("mk_") else ""
            rhs = f"{src}.{s.op}({fn}, materialized={_materialized_code(a)}{keyed})"
        elif s.op == "merge":
            rhs = f"{src}.merge({s.inputs[1]})"
        elif s.op == "cogroup":
            used += [*a["fns"], a["init"]] + ([a["merger"]] if "merger" in a else [])
            rhs = f"{src}.cogroup({a['fns'][0]})" + "".join(
                f".cogroup({g}, {agg})" for g, agg in zip(s.inputs[1:], a["fns"][1:], strict=True)
            )
            if "windows" in a:
                rhs += f".windowed_by({_windows_code(a['windows'])})"
            merger = f", {a['merger']}" if "merger" in a else ""
            mat = f", materialized={_store_code(a)}" if a.get("store") else ""
            rhs += f".aggregate({a['init']}{merger}{mat})"
        elif s.op == "process":
            rhs = (
                f"{src}.process(lambda: {fn}({a['store']!r}), {a['store']!r})  # + add_state_store"
            )
        elif s.op in ("reduce", "aggregate") and "adder" in a:
            used += [a["adder"], a["subtractor"]] + ([a["init"]] if "init" in a else [])
            init = f"{a['init']}, " if "init" in a else ""
            rhs = f"{src}.{s.op}({init}{a['adder']}, {a['subtractor']}{store})"
        elif s.op == "aggregate":
            used.append(a["init"])
            merger = f", {a['merger']}" if "merger" in a else ""
            used += [a["merger"]] if merger else []
            rhs = f"{src}.aggregate({a['init']}, {fn}{merger}{store})"
        else:
            serdes = ""
            if a.get("serdes"):
                k, v = a["serdes"]
                serdes = f"key_serde={_serde_code(k)}, value_serde={_serde_code(v)}"
            keyed = "with_key=True" if fn and fn.startswith(("mk_", "fmk_")) else ""
            args = ", ".join(x for x in (fn or "", store.lstrip(", "), serdes, keyed) if x)
            rhs = f"{src}.{s.op}({args})"
        if "name" in a and s.op not in ("branch",):
            # Grouped.as on a grouping, Named on an aggregation.
            rhs = rhs[:-1] + (", " if not rhs.endswith("(") else "") + f"name={a['name']!r})"
        lines.append(f"{s.id} = {rhs}")
    lines.append(
        "driver = TopologyTestDriver(b.build(), {'statestore.cache.max.bytes': "
        + ("10485760" if case.cache else "0")
        + "})"
    )
    lines.extend(
        f"{topic} = driver.create_input_topic({topic!r}, String(), String())"
        for topic in dict.fromkeys(r.topic for r in case.inputs)
    )
    lines += [
        f"{r.topic}.pipe_input({r.key!r}, {r.value!r}, {r.timestamp}"
        + (f", headers={[(n, v.encode()) for n, v in r.headers]!r})" if r.headers else ")")
        for r in case.inputs
    ]
    if used:
        lines.append(
            "# functions (tests/differential/functions.py): " + ", ".join(dict.fromkeys(used))
        )
    return "\n".join(lines)
