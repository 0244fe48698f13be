"""One regression test per mismatch class the differential test found
(tests/differential/FINDINGS.md, issues #16 and #24): each runs the class's
shrunk reproducer on Kafka Streams' TopologyTestDriver and on strom's, and
both must give the records the Kafka class named in its docstring
prescribes (the expected records are Kafka's; the test also checks Kafka
still gives them, so a reproducer cannot silently stop reproducing)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.differential import runner
from tests.differential.reference import Reference
from tests.differential.spec import Case, Input, Step

pytestmark = pytest.mark.differential


class Spec:
    """A case built step by step: each call adds a step and returns its id."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __getattr__(self, op: str) -> Any:
        def add(*inputs: str, **args: Any) -> str:
            step_id = f"n{len(self.steps)}"
            self.steps.append(Step(step_id, op, list(inputs), args))
            return step_id

        return add

    def to(self, node: str, key: str = "s", value: str = "s") -> None:
        self.steps.append(Step(f"n{len(self.steps)}", "to", [node], _sink(key, value)))


def _sink(key: str, value: str) -> dict[str, Any]:
    return {"topic": "out0", "key": key, "value": value}


def records(*rows: tuple[str, str | None, str | None, int]) -> list[Input]:
    return [Input(topic, key, value, timestamp) for topic, key, value, timestamp in rows]


def check(
    reference: Reference,
    spec: Spec,
    inputs: list[Input],
    expected: list[str],
    *,
    cache: bool = False,
    stores: str = "in_memory",
) -> None:
    """Kafka gives ``expected`` (records of out0 as runner.render_records
    prints them) and so does strom."""
    case = Case("regression", spec.steps, inputs, cache=cache, stores=stores)
    [outcome] = runner.run(reference, [case])
    kafka = [line.strip() for line in runner.render_records(case, outcome.kafka)[1:]]
    strom = [line.strip() for line in runner.render_records(case, outcome.strom)[1:]]
    assert kafka == expected, "the reproducer no longer shows Kafka's behaviour"
    assert strom == expected, runner.render(outcome)


TUMBLING_30 = {"kind": "tumbling", "size": 30, "grace": 0}


def test_c1_suppression_evicts_by_buffer_time_then_key_bytes(reference: Reference) -> None:
    """C1. Kafka's InMemoryTimeOrderedKeyValueChangeBuffer keeps its entries
    in BufferKey order: buffer time (the window end for until_window_closes,
    TimeDefinitions.WindowEndTimeDefinition), then the serialized key's
    bytes. Windows closing at the same stream time leave in key order, not
    in the order they were buffered (strom evicted by insertion order)."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    windowed = t.windowed_by(grouped, windows=TUMBLING_30, emit="update")
    suppressed = t.suppress(
        t.reduce(windowed, fn="r_sum"), kind="window_closes", buffer={"kind": "unbounded"}
    )
    t.to(t.to_stream(suppressed), key="tw:30")
    inputs = records(("in0", "b", "2", 36), ("in0", "a", "6", 56), ("in0", "a", "6", 66))
    check(reference, t, inputs, ['a@[30,60) -> "6" @56', 'b@[30,60) -> "2" @36'], stores="rocksdb")


def test_c1_time_limit_and_emit_early_follow_the_same_order(reference: Reference) -> None:
    """C1. Records buffered at the same time (until_time_limit) leave in key
    order, and a full emit-early buffer evicts the smallest (time, key), even
    the record just added (KTableSuppressProcessor.enforceConstraints)."""
    t = Spec()
    table = t.to_table(t.stream(topic="in0"))
    t.to(
        t.to_stream(t.suppress(table, kind="time_limit", limit_ms=10, buffer={"kind": "unbounded"}))
    )
    inputs = records(("in0", "c", "8", 20), ("in0", "b", "5", 20), ("in0", "b", "2", 44))
    check(reference, t, inputs, ['b -> "2" @44', 'c -> "8" @20'])

    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    hopping = {"kind": "hopping", "size": 30, "grace": 10, "advance": 5}
    counts = t.count(t.windowed_by(grouped, windows=hopping, emit="update"))
    early = {"kind": "max_records", "n": 3, "full": "emit_early"}
    t.to(
        t.to_stream(t.suppress(counts, kind="time_limit", limit_ms=5, buffer=early)),
        key="tw:30",
        value="l",
    )
    inputs = records(("in0", "c", "9", 45), ("in0", "a", "5", 45))
    windows = [f"c@[{s},{s + 30}) -> 1 @45" for s in (20, 25, 30)]
    windows += [f"a@[{s},{s + 30}) -> 1 @45" for s in (20, 25, 30, 35, 40, 45)]
    check(reference, t, inputs, windows, stores="rocksdb")


def test_c2_suppression_buffer_sizes_records_as_kafka(reference: Reference) -> None:
    """C2. A max_bytes buffer counts what Kafka's
    InMemoryTimeOrderedKeyValueChangeBuffer.computeRecordSize counts: 8 bytes
    of buffer time, the serialized key, the prior, old (unless equal to the
    prior) and new values, and the record context (timestamp, offset, topic
    name, partition, headers). Here the third record overflows 120 bytes and
    the oldest entry is emitted early; strom's old estimate emitted nothing."""
    t = Spec()
    counts = t.count(t.group_by_key(t.stream(topic="in0")), store="store-1")
    full = {"kind": "max_bytes", "n": 120, "full": "emit_early"}
    t.to(t.to_stream(t.suppress(counts, kind="time_limit", limit_ms=30, buffer=full)), value="l")
    inputs = records(("in0", "a", "3", 5), ("in0", "c", "8", 15), ("in0", "b", "3", 10))
    check(reference, t, inputs, ["a -> 1 @5"])

    # Behind a record cache, a record keeps the topic it was cached under:
    # here the repartition topic's long name makes the second record overflow.
    t = Spec()
    grouped = t.group_by_key(t.map(t.stream(topic="in0"), fn="kv_rekey_ab"), serdes=["s", "s"])
    small = {"kind": "max_bytes", "n": 60, "full": "emit_early"}
    suppressed = t.suppress(t.count(grouped), kind="time_limit", limit_ms=30, buffer=small)
    t.to(t.to_stream(suppressed), value="l")
    check(reference, t, records(("in0", "c", "5", 5)), ["b -> 1 @5"], cache=True)


def test_c3_a_filter_of_a_materialized_table_drops_what_was_never_there(
    reference: Reference,
) -> None:
    """C3. Kafka's KTableFilter asks its parent for old values when it is made
    (parent.enableSendingOldValues(false)); a materialized parent gives them,
    and then an update that fails the filter before and after is not
    forwarded (strom forwarded a tombstone for it)."""
    t = Spec()
    table = t.table(topic="in0", store="store-1")
    t.to(t.to_stream(t.filter_not(table, fn="p_small_or_null")))
    inputs = records(("in0", "c", "2", 61), ("in0", "c", "5", 62), ("in0", "c", "1", 63))
    check(reference, t, inputs, ['c -> "5" @62', "c -> null @63"])


def test_c3_a_filter_of_a_windowed_count_and_before_a_join(reference: Reference) -> None:
    """C3. The same for an aggregation (always materialized): a windowed count
    filtered until it reaches 3; and a filtered table on the right of a
    left join, whose needless tombstone made the join emit its result twice."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    hopping = {"kind": "hopping", "size": 10, "grace": 5, "advance": 5}
    counts = t.count(t.windowed_by(grouped, windows=hopping, emit="update"))
    t.to(t.to_stream(t.filter_not(counts, fn="p_small_or_null")), key="tw:10", value="l")
    inputs = records(*[("in0", "a", "2", 104)] * 3)
    expected = ["a@[95,105) -> 3 @104", "a@[100,110) -> 3 @104"]
    check(reference, t, inputs, expected, stores="rocksdb")

    t = Spec()
    filtered = t.filter(t.table(topic="in0", store="store-1"), fn="p_key_a")
    joined = t.left_join(t.table(topic="in1"), filtered, fn="j_pair")
    t.to(t.to_stream(joined))
    inputs = records(("in1", "c", "9", 20), ("in0", "c", "4", 19))
    check(reference, t, inputs, ['c -> "9,null" @20'])


def test_c5_an_unnamed_source_table_is_not_cached(reference: Reference) -> None:
    """C5. Kafka's KTableSource without a queryable name has no store (and so
    no cache) until something needs one: with caching on, each update is
    forwarded at once (strom cached it, merging the two updates of one input
    record into one)."""
    t = Spec()
    table = t.to_table(t.flat_map_values(t.stream(topic="in0"), fn="fmv_split"))
    t.to(t.to_stream(t.filter_not(table, fn="p_not_null")))
    inputs = records(("in0", "c", "4", 20))
    check(reference, t, inputs, ["c -> null @20", "c -> null @20"], cache=True)


def test_c6_a_null_aggregate_keeps_the_aggregate_timestamp(reference: Reference) -> None:
    """C6. Kafka's KStreamReduce and KTableAggregate time a result, null
    included, with max(record, previous aggregate); with
    statestore.cache.max.bytes=0 Kafka has no caching layer at all
    (InternalTopologyBuilder.rewriteTopology), while strom's 0-byte cache
    forwarded the tombstone with the record's own timestamp."""
    t = Spec()
    t.to(t.to_stream(t.reduce(t.group_by_key(t.stream(topic="in0")), fn="r_null_if_big")))
    inputs = records(("in0", "b", "6", 16), ("in0", "b", "3", 11))
    check(reference, t, inputs, ['b -> "6" @16', "b -> null @16"])

    t = Spec()
    grouped = t.group_by(t.table(topic="in0"), fn="kv_swap")
    aggregated = t.aggregate(grouped, init="i_zero", adder="a_null_if_big", subtractor="a_sub_null")
    t.to(t.to_stream(aggregated))
    inputs = records(("in0", "b", "2", 45), ("in0", "b", None, 44))
    check(reference, t, inputs, ['2 -> "1" @45', "2 -> null @45"])


def test_c7_internal_values_wrap_the_default_serde(reference: Reference) -> None:
    """C7. Kafka wraps whatever value serde a table ends up with, the default
    one included: ChangedSerializer on a re-grouped table's repartition
    topic (KGroupedTableImpl), FullChangeSerde in the suppression buffer
    (KTableSuppressProcessorSupplier, WrappingNullableSerde.setIfUnset).
    strom passed the bare default serde a composite value and crashed."""
    t = Spec()
    counts = t.count(t.group_by(t.table(topic="in0", store="store-1"), fn="kv_same"))
    t.to(t.to_stream(counts), value="l")
    check(reference, t, records(("in0", "b", "1", 57)), ["b -> 1 @57"])

    t = Spec()
    mapped = t.map_values(t.table(topic="in0"), fn="m_inc")
    unbounded = {"kind": "unbounded"}
    t.to(t.to_stream(t.suppress(mapped, kind="time_limit", limit_ms=0, buffer=unbounded)))
    check(reference, t, records(("in0", "c", "6", 9)), ['c -> "7" @9'])

    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    hopping = {"kind": "hopping", "size": 20, "grace": 0, "advance": 15}
    aggregated = t.aggregate(
        t.windowed_by(grouped, windows=hopping, emit="update"), init="i_empty", fn="a_concat"
    )
    final = t.suppress(aggregated, kind="window_closes", buffer=unbounded)
    t.to(t.to_stream(final), key="tw:20")
    inputs = records(("in0", "c", "8", 0), ("in0", "c", "1", 40))
    check(reference, t, inputs, ['c@[0,20) -> "8" @0'], stores="rocksdb")


def test_c8_a_mapped_table_getter_hides_a_null_result(reference: Reference) -> None:
    """C8. Kafka's KTableMapValues getter returns ValueAndTimestamp.make(new
    value, ...), which is absent for a null value, so the getter of a
    second map_values maps nothing (strom mapped None: "xnull")."""
    t = Spec()
    table = t.map_values(
        t.map_values(t.to_table(t.stream(topic="in0")), fn="m_null_if_odd"), fn="m_tag"
    )
    t.to(t.left_join(t.stream(topic="in1"), table, fn="j_pair"))
    inputs = records(("in0", "a", "1", 15), ("in1", "a", "4", 25))
    check(reference, t, inputs, ['a -> "4,null" @25'])


def test_c9_left_joins_with_tables_keep_null_keys(reference: Reference) -> None:
    """C9. Kafka's KStreamKTableJoinProcessor.maybeDropRecord (KIP-962): a
    left join keeps a record whose key, or for a global table the selected
    key, is null, and joins it with null; strom dropped it."""
    t = Spec()
    t.to(t.left_join(t.stream(topic="in0"), t.table(topic="in1"), fn="j_pair"))
    check(reference, t, records(("in0", None, "8", 0)), ['null -> "8,null" @0'])

    t = Spec()
    joined = t.left_join(
        t.stream(topic="in0"), t.global_table(topic="in1"), fn="j_pair", key_fn="k_null_for_c"
    )
    t.to(joined)
    inputs = records(("in1", "c", "1", 0), ("in0", "c", "8", 1), ("in0", None, "2", 2))
    check(reference, t, inputs, ['c -> "8,null" @1', 'null -> "2,null" @2'])

    # A repartition keeps null keys when such a join lies downstream
    # (InternalStreamsBuilder.rewriteRepartitionNodes).
    t = Spec()
    rekeyed = t.select_key(t.stream(topic="in0"), fn="k_null_for_c")
    t.to(t.left_join(rekeyed, t.table(topic="in1", store="store-1"), fn="j_pair"))
    check(reference, t, records(("in0", "c", "5", 123)), ['null -> "5,null" @123'])


@pytest.mark.parametrize("op", ["aggregate", "count"])
def test_c11_emit_on_window_close_reads_through_the_cache(reference: Reference, op: str) -> None:
    """C11. Kafka's WindowStoreMaterializer keeps caching on a time-window
    store that serves EmitStrategy.onWindowClose() (its session and sliding
    materializers turn it off), and the final results are read through
    TimeOrderedCachingWindowStore.fetchAll, which shows the windows the
    cache holds although the store's retention already hides them: [20, 40)
    is emitted with caching on (and lost with it off, in Kafka as in strom).
    strom emitted nothing with caching on: its store was never cached."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    windowed = t.windowed_by(
        grouped, windows={"kind": "tumbling", "size": 20, "grace": 5}, emit="close"
    )
    value = "l" if op == "count" else "s"
    aggregated = (
        t.count(windowed) if op == "count" else t.aggregate(windowed, init="i_empty", fn="a_concat")
    )
    t.to(t.to_stream(aggregated), key="tw:20", value=value)
    inputs = records(("in0", "a", "3", 31), ("in0", "c", "0", 61))
    result = "1" if op == "count" else '"3"'
    check(reference, t, inputs, [f"a@[20,40) -> {result} @31"], cache=True, stores="rocksdb")
    check(reference, t, inputs, [], cache=False, stores="rocksdb")


@pytest.mark.parametrize("op", ["reduce", "count"])  # the Python path and the native kernel
def test_c15_a_sliding_window_finds_the_previous_window_in_the_cache(
    reference: Reference, op: str
) -> None:
    """C15. Kafka's CachingWindowStore merges the windows its cache holds,
    unfiltered, over the store's fetch; the store hides windows older than
    its retention (2 x time difference + grace for sliding windows). b@26
    arrives at stream time 31: the left window [10, 20] of b@20 is expired
    in the store but still cached, so KStreamSlidingWindowAggregate finds
    the previous record and makes its right window [21, 31] with b@26 in
    it (with caching off it finds nothing, in Kafka as in strom). strom's
    caching window store hid cached windows the store had expired."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    sliding = {"kind": "sliding", "size": 10, "grace": 0}
    windowed = t.windowed_by(grouped, windows=sliding, emit="update")
    if op == "count":
        t.to(t.to_stream(t.count(windowed)), key="tw:10", value="l")
        values = ["1", "1", "1", "2", "1"]
    else:
        t.to(t.to_stream(t.reduce(windowed, fn="r_concat")), key="tw:10")
        values = ['"9"', '"8"', '"6"', '"8|6"', '"8"']
    inputs = records(
        ("in0", "b", "9", 20), ("in0", "a", "8", 30), ("in0", "a", "6", 31), ("in0", "b", "8", 26)
    )
    windows = ["b@[10,20)", "a@[20,30)", "a@[31,41)", "a@[21,31)", "b@[21,31)"]
    stamps = [20, 30, 31, 31, 26]
    lines = [f"{w} -> {v} @{ts}" for w, v, ts in zip(windows, values, stamps, strict=True)]
    check(reference, t, inputs, lines, cache=True)
    check(reference, t, inputs, lines[:4], cache=False)


def test_c12_session_reduce_of_a_null_value(reference: Reference) -> None:
    """C12. Kafka's KStreamSessionWindowAggregate hands a null value to the
    aggregator; a reduce's first null value is a null session, forwarded as
    a tombstone (strom's 0-byte record cache swallowed it)."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    session = {"kind": "session", "size": 5, "grace": 20}
    reduced = t.reduce(t.windowed_by(grouped, windows=session, emit="update"), fn="r_sum")
    t.to(t.to_stream(reduced), key="sw")
    check(reference, t, records(("in0", "a", None, 0)), ["a@[0,0] -> null @0"], stores="rocksdb")


def test_c13_a_first_aggregate_retracts_the_initializer(reference: Reference) -> None:
    """C13. Kafka's KStreamAggregate forwards, as the old value of a key's
    first aggregate, the initializer's aggregate (not null): a filter that
    keeps it ("" is small) sends a retraction, and a left join with a table
    without the key emits a tombstone (strom emitted nothing)."""
    t = Spec()
    aggregated = t.aggregate(t.group_by_key(t.stream(topic="in0")), init="i_empty", fn="a_concat")
    filtered = t.filter(aggregated, fn="p_small_or_null")
    t.to(t.to_stream(t.left_join(filtered, t.table(topic="in1"), fn="j_pair")))
    check(reference, t, records(("in0", "a", "6", 1)), ["a -> null @1"])


def test_c14_outer_join_emits_every_unmatched_record(reference: Reference) -> None:
    """C14. Kafka's KStreamKStreamJoin.emitNonJoinedOuterRecords scans the
    outer-join store (a ListValueStore) value by value: it stops at the
    value after both sides were found open, even between two values of one
    key, and leaves the shared min time there. strom stopped at the next
    key, so its min time ran ahead and the three records still waiting at
    50 were never emitted: data lost."""
    t = Spec()
    left = t.select_key(t.stream(topic="in0"), fn="k_abc_from_value")
    windows = {"before": 5, "after": 5, "grace": 10}
    t.to(t.outer_join(left, t.stream(topic="in1"), fn="j_null_if_both_even", windows=windows))
    inputs = records(
        ("in0", "c", "5", 50),
        ("in1", "a", "2", 50),
        ("in1", "b", "1", 45),
        ("in0", "b", "2", 50),
        ("in1", "b", "8", 60),
        ("in0", "c", "7", 65),
        ("in0", "a", "4", 70),
    )
    expected = [
        'b -> "null,1" @45',
        'b -> "7,8" @65',
        'a -> "null,2" @50',
        'c -> "5,null" @50',
        'c -> "2,null" @50',
    ]
    check(reference, t, inputs, expected, stores="rocksdb")


@pytest.mark.parametrize("cache", [False, True])
def test_issue_16_a_record_inside_a_session_retracts_it_first(
    reference: Reference, cache: bool
) -> None:
    """#16, class 2. Kafka's KStreamSessionWindowAggregate removes every
    session a record merges and forwards a tombstone for each whenever the
    merged window differs from the record's own, even when it equals an
    existing session; then it forwards the new aggregate. A record at 2
    inside session [0, 4] therefore gives [0,4] -> null, then [0,4] -> 3
    (with caching on, the cache keeps only the latest per session)."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    session = {"kind": "session", "size": 5, "grace": 0}
    t.to(
        t.to_stream(t.count(t.windowed_by(grouped, windows=session, emit="update"))),
        key="sw",
        value="l",
    )
    inputs = records(("in0", "b", "1", 0), ("in0", "b", "1", 4), ("in0", "b", "1", 2))
    expected = ["b@[0,0] -> 1 @0", "b@[0,0] -> null @0", "b@[0,4] -> 2 @4"]
    expected += ["b@[0,4] -> 3 @4"] if cache else ["b@[0,4] -> null @4", "b@[0,4] -> 3 @4"]
    check(reference, t, inputs, expected, cache=cache, stores="rocksdb")


def test_c16_a_null_sliding_aggregate_deletes_its_window(reference: Reference) -> None:
    """C16 (found by the cogroup family). Kafka's
    KStreamSlidingWindowAggregate puts ``ValueAndTimestamp.make(newAgg,
    ts)``, which is null for a null aggregate: the window is deleted, and
    later records no longer find it. strom stored the null aggregate as an
    empty value, which later records then found and built on."""
    t = Spec()
    grouped = t.group_by_key(t.stream(topic="in0"))
    sliding = {"kind": "sliding", "size": 20, "grace": 10}
    windowed = t.windowed_by(grouped, windows=sliding, emit="update")
    t.to(t.to_stream(t.aggregate(windowed, init="i_empty", fn="a_null_if_big")), key="tw:20")
    inputs = records(("in0", "c", "3", 69), ("in0", "c", "3", 74), ("in0", "c", "9", 75))
    check(
        reference,
        t,
        inputs,
        [
            'c@[49,69) -> "3" @69',
            'c@[70,90) -> "3" @74',
            'c@[54,74) -> "6" @74',
            "c@[70,90) -> null @75",
            "c@[75,95) -> null @75",
            "c@[55,75) -> null @75",
        ],
    )


def test_c17_a_cached_null_never_stored_does_not_move_the_store_time(
    reference: Reference,
) -> None:
    """C17 (found by the cogroup family). Kafka's CachingWindowStore neither
    writes nor forwards a null aggregate for a window the store does not
    hold, so the store's time stays where it was. Here the second stream's
    first window is null (9 > 8); the first stream's late record (its own
    stream time is 16) then still finds b@[0,20) in the store, and its null
    aggregate deletes it. strom wrote the null, the store's time moved to 20
    and hid b@[0,20): the delete was then of nothing, and dropped."""
    t = Spec()
    rekeyed = t.group_by_key(t.select_key(t.stream(topic="in0"), fn="k_abc_from_value"))
    direct = t.group_by_key(t.stream(topic="in1"))
    tumbling = {"kind": "tumbling", "size": 20, "grace": 0}
    fns = ["a_null_if_big", "a_null_if_big"]
    table = t.cogroup(rekeyed, direct, fns=fns, init="i_empty", windows=tumbling)
    t.to(t.to_stream(table), key="tw:20")
    inputs = records(
        ("in0", "a", "1", 15), ("in0", "c", "7", 16), ("in1", "c", "9", 21), ("in0", "c", "1", 1)
    )
    lines = ['b@[0,20) -> "1" @15', 'b@[0,20) -> "8" @16', "b@[0,20) -> null @1"]
    check(reference, t, inputs, lines, cache=True, stores="rocksdb")


@pytest.mark.parametrize(
    ("inputs", "lines"),
    [
        (  # the key's only version replaced: nothing is left of it
            records(("in0", "a", "8", 5), ("in0", "a", None, 5), ("in0", "a", "0", 0)),
            ["a -> 1 @5", "a -> 0 @5", "a -> 1 @5"],
        ),
        (  # after a tombstone: the same
            records(
                ("in0", "b", None, 16),
                ("in0", "b", "5", 56),
                ("in0", "b", None, 56),
                ("in0", "b", "8", 41),
            ),
            ["b -> 1 @56", "b -> 0 @56", "a -> 1 @41"],
        ),
        (  # after a value: that value now ends where the replaced one began
            records(
                ("in0", "b", "5", 10),
                ("in0", "b", "6", 56),
                ("in0", "b", None, 56),
                ("in0", "b", "8", 41),
            ),
            ["b -> 1 @10", "b -> 0 @56", "a -> 1 @56", "a -> 0 @56"],
        ),
        (  # a value on a tombstone at its time: the tombstone still bounds
            records(
                ("in0", "b", None, 75),
                ("in0", "b", "8", 75),
                ("in0", "b", None, 75),
                ("in0", "b", "6", 74),
            ),
            ["a -> 1 @75", "a -> 0 @75"],
        ),
        (  # C19: an out-of-order tombstone is a segment record ending where the
            # latest value began; after that value's deletion it still ends
            # there, so an older put inside it is not the latest (seed a3679daa)
            records(
                ("in0", "b", "6", 20),
                ("in0", "b", None, 0),
                ("in0", "b", None, 20),
                ("in0", "b", "8", 16),
            ),
            ["a -> 1 @20", "a -> 0 @20"],
        ),
    ],
)
def test_c18_a_tombstone_replacing_a_versioned_tables_latest_value(
    reference: Reference, inputs: list[Input], lines: list[str]
) -> None:
    """C18 (found by versioned tables in the differential test). Kafka's
    RocksDBVersionedStore keeps a key's latest value apart: a tombstone at
    its very timestamp just drops it, and only a previous value it had moved
    out (ending where the latest began) bounds a later, older put. So an
    out-of-order update can then be the latest (and reach a re-grouping),
    unless a previous value ends at the dropped one. strom kept the
    tombstone as a version, which made every older put not the latest."""
    t = Spec()
    table = t.table(topic="in0", store="store-1", versioned=1_000)
    counted = t.count(t.group_by(table, fn="kv_rekey_ab", serdes=["s", "s"]))
    t.to(t.to_stream(counted), value="l")
    check(reference, t, inputs, lines)
