"""strom's TopologyTestDriver against Kafka Streams' own, record for record,
on random cases of every DSL family (issues #16 and #24).

Each family runs ``--diff-cases`` cases (1,500 by default, 5,000 with
``--soak``, ``make soak``) from a fresh seed; a failure prints the seed (rerun with
``STROM_DIFF_SEED=<seed>``), the count of mismatches per class, and a shrunk
reproducer of each class: topology, input, Kafka's output and strom's.
tests/differential/FINDINGS.md catalogs the classes found so far.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from tests.differential import functions as f
from tests.differential import generate, runner
from tests.differential.reference import Reference

pytestmark = pytest.mark.differential

# Shrinking costs a few hundred runs per reproducer: bound it per family.
SHRUNK_PER_FAMILY = 2
# One case in this many per family is also checked on both store types.
STAND_IN_SHARE = 20


@pytest.mark.parametrize("family", sorted(generate.FAMILIES))
def test_family(family: str, reference: Reference, diff_seed: str, diff_cases: int) -> None:
    cases = [generate.case(family, f"{diff_seed}-{i}") for i in range(diff_cases)]
    outcomes = runner.run(reference, cases)
    kafka_refused = sum(1 for o in outcomes if o.kafka.error)
    # A generator whose cases Kafka itself rejects tests nothing.
    assert kafka_refused <= diff_cases // 4, _kafka_errors(outcomes)
    mismatches = [o for o in outcomes if not o.agrees]
    if not mismatches:
        return
    counts = Counter(o.signature for o in mismatches)
    shown: list[str] = []
    for signature in counts:
        if len(shown) >= SHRUNK_PER_FAMILY:
            break
        first = next(o for o in mismatches if o.signature == signature)
        shown.append(runner.render(runner.shrink(reference, first)))
    summary = ", ".join(f"{n} x {sig}" for sig, n in counts.most_common())
    pytest.fail(
        f"{family}: {len(mismatches)} of {diff_cases} cases differ from Kafka Streams "
        f"(seed {diff_seed}; rerun with STROM_DIFF_SEED={diff_seed}): {summary}\n\n"
        + "\n\n".join(shown),
        pytrace=False,
    )


def test_in_memory_stores_stand_in_for_rocksdb(
    reference: Reference, diff_seed: str, diff_cases: int
) -> None:
    """The generator runs a case on Kafka's in-memory stores, much faster
    than its default RocksDB ones, only where Kafka's results do not depend
    on the store type (generate._stores): on such cases of the families with
    window and session stores, Kafka on RocksDB gives the same records."""
    count = max(1, diff_cases // STAND_IN_SHARE)
    for family in ("windowed", "suppress", "stream_join"):
        generated = (generate.case(family, f"{diff_seed}-stores-{i}") for i in range(count))
        cases = [c for c in generated if c.stores == "in_memory"]
        on_rocksdb = reference.run([replace(c, stores="rocksdb") for c in cases])
        in_memory = reference.run(cases)
        differ = [
            runner.render(runner.Outcome(c, r, m))
            for c, r, m in zip(cases, on_rocksdb, in_memory, strict=True)
            if not runner.Outcome(c, r, m).agrees
        ]
        assert not differ, (
            f"{family}: Kafka on RocksDB ('kafka') and on in-memory stores ('strom') differ "
            f"(seed {diff_seed}):\n\n" + "\n\n".join(differ[:2])
        )


def _kafka_errors(outcomes: list[runner.Outcome]) -> str:
    errors = Counter(runner.signature_of_error(o.kafka.error) for o in outcomes if o.kafka.error)
    return f"Kafka refused too many generated cases: {dict(errors)}"


# Arguments that reach the vocabulary: strings of digits, other text, None,
# and Long (count results).
_VALUES: list[Any] = [None, "0", "3", "8", "-4", "x7", "", "a|b", 5, 12]
_KEYS: list[Any] = [None, "a", "b", "c", "k1"]


def _calls() -> list[tuple[str, str, list[Any]]]:
    calls: list[tuple[str, str, list[Any]]] = []
    two = [(k, v) for k in _KEYS for v in _VALUES]
    pairs = [(a, b) for a in _VALUES for b in _VALUES]
    tables: dict[str, list[Any]] = {
        "PREDICATES": two,
        "KV_MAPPERS": two,
        "KEY_SELECTORS": two,
        "FLAT_MAPPERS": two,
        "MAPPERS": [(v,) for v in _VALUES],
        "FLAT_VALUE_MAPPERS": [(v,) for v in _VALUES],
        "FOREIGN_KEYS": [(v,) for v in _VALUES],
        "KEYED_FOREIGN_KEYS": two,
        "REDUCERS": pairs,
        "JOINERS": pairs,
        "INITIALIZERS": [()],
        "AGGREGATORS": [("a", v, agg) for v, agg in pairs],
        "MERGERS": [("a", x, y) for x, y in pairs],
        "KEYED_MAPPERS": two,
        "TRANSFORMERS": two,
    }
    for table, argument_lists in tables.items():
        for name in getattr(f, table):
            calls += [(table, name, list(args)) for args in argument_lists]
    return calls


def _python(table: str, name: str, args: list[Any]) -> Any:
    result = getattr(f, table)[name](*args)
    if table == "KV_MAPPERS":
        return list(result)
    if table in ("FLAT_MAPPERS", "FLAT_VALUE_MAPPERS"):
        return [list(r) if table == "FLAT_MAPPERS" else r for r in result]
    return result


def test_vocabulary_twins_compute_the_same(reference: Reference) -> None:
    """Every function of functions.py equals its Java twin in the reference
    on the kinds of arguments the cases feed them; a difference here would
    show up as a false mismatch everywhere."""
    calls = _calls()
    java = reference.evaluate(calls)
    differ = [
        (call, expected, got)
        for call, got in zip(calls, java, strict=True)
        if (expected := _python(*call)) != got
    ]
    assert not differ, differ[:10]
    assert {name for table, name, _ in calls} >= set(f.PREDICATES) | set(f.AGGREGATORS)


def test_every_mapper_that_makes_nulls_is_known_to_the_store_choice() -> None:
    """generate._stores runs a stream-stream join on RocksDB when a null
    value can reach it (Kafka's in-memory window store moves its time for
    one, RocksDB's does not): each value mapper that can turn a value into
    null must be in NULL_MAKERS (a keyed one missing once made CI fail)."""
    samples = [(k, v) for k in ("a", "b", "c") for v in [str(n) for n in range(10)]]
    makers = {name for name, fn in f.MAPPERS.items() if any(fn(v) is None for _, v in samples)} | {
        name for name, fn in f.KEYED_MAPPERS.items() if any(fn(k, v) is None for k, v in samples)
    }
    assert makers == generate.NULL_MAKERS


def test_comparison_sees_each_kind_of_difference() -> None:
    """The comparison classifies, and never passes, a changed output."""
    case = generate.case("aggregate", "self-test")
    record = ("61", "31", 5, ())
    base = runner.Result({"out0": [record, ("62", None, 7, ())]})

    def outcome(strom: list[Any]) -> runner.Outcome:
        return runner.Outcome(case, base, runner.Result({"out0": strom}))

    assert outcome(list(base.outputs["out0"])).agrees
    assert outcome([base.outputs["out0"][1], record]).signature == "order"
    assert outcome([record]).signature == "strom misses tombstones"
    assert outcome([("61", "31", 6, ()), ("62", None, 7, ())]).signature == "timestamps"
    assert (
        outcome([*base.outputs["out0"], ("63", None, 9, ())]).signature == "strom adds tombstones"
    )
    failed = runner.Outcome(case, base, runner.Result(error="Traceback\nValueError: boom"))
    assert not failed.agrees
    assert failed.signature == "strom raises ValueError"
