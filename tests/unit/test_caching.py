"""The record cache in front of DSL stores, as Kafka Streams' caching:
updates are deduplicated per key until a commit (or an eviction) forwards
them; with the cache off every update is forwarded."""

from __future__ import annotations

from collections import Counter
from typing import Any

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import EmitStrategy, Materialized, SessionWindows
from strom.testing import TopologyTestDriver

S, L = serdes.String(), serdes.Long()
WORDS = ["a", "b", "a", "c", "b", "a", "d", "a"]


def counting(caching: bool = True) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .count(Materialized("counts", caching=caching))
        .to_stream()
        .to("out", value_serde=L)
    )
    return builder


def run(log: EmbeddedLog, log_path: str, builder: StreamsBuilder, **config: Any) -> list[Any]:
    log.create_topic("in")
    log.create_topic("out")
    with log.producer() as producer:
        producer.produce_batch("in", [(w.encode(), b"x") for w in WORDS])
    props = {
        "application.id": "cache",
        "bootstrap.servers": f"embedded:{log_path}",
        "commit.interval.ms": 3_600_000,
        **config,
    }
    with KafkaStreams(builder.build(), props) as app:
        app.run_until_end(timeout=30)
        assert {kv.key: kv.value for kv in app.store("counts").all()} == Counter(WORDS)
    return [
        (r.key.decode(), int.from_bytes(r.value or b"", "big"))  # type: ignore[union-attr]
        for r in log.read("out", 0, 0, 100)
    ]


def test_a_commit_forwards_each_key_once_with_its_latest_value(
    log: EmbeddedLog, log_path: str
) -> None:
    out = run(log, log_path, counting())
    # In the order the keys were last updated before the commit.
    assert out == [("c", 1), ("b", 2), ("d", 1), ("a", 4)]


def test_without_a_cache_every_update_is_forwarded(log: EmbeddedLog, log_path: str) -> None:
    out = run(log, log_path, counting(caching=False))
    assert len(out) == len(WORDS)
    assert out[-1] == ("a", 4)


def test_a_zero_byte_cache_forwards_every_update(log: EmbeddedLog, log_path: str) -> None:
    out = run(log, log_path, counting(), **{"statestore.cache.max.bytes": 0})
    counts: Counter[str] = Counter()
    expected = []
    for word in WORDS:
        counts[word] += 1
        expected.append((word, counts[word]))
    assert out == expected


def test_a_small_cache_evicts_and_forwards_before_the_commit(
    log: EmbeddedLog, log_path: str
) -> None:
    # Room for three entries (1-byte key + 16-byte timestamped count + 45 each).
    out = run(log, log_path, counting(), **{"statestore.cache.max.bytes": 200})
    assert len(set(WORDS)) < len(out) < len(WORDS)
    assert {k: v for k, v in out} == Counter(WORDS)


def test_the_driver_commits_after_every_record_so_every_update_shows() -> None:
    with TopologyTestDriver(counting().build()) as driver:
        driver.create_input_topic("in", S, S).pipe_key_value_list([(w, "x") for w in WORDS])
        out = driver.create_output_topic("out", S, L).read_key_values_to_list()
    assert len(out) == len(WORDS)


def test_table_aggregation_with_cache_still_retracts_and_adds() -> None:
    builder = StreamsBuilder()
    (
        builder.table("users", key_serde=S, value_serde=S)
        .group_by(lambda user, city: (city, user), key_serde=S, value_serde=S)
        .count("per-city")
        .to_stream()
        .to("counts", value_serde=L)
    )
    with TopologyTestDriver(builder.build()) as driver:
        users = driver.create_input_topic("users", S, S)
        users.pipe_key_value_list([("ann", "oslo"), ("bob", "oslo"), ("ann", "rome")])
        assert driver.create_output_topic("counts", S, L).read_key_values_to_map() == {
            "oslo": 1,
            "rome": 1,
        }


def test_run_until_end_processes_what_its_final_commit_sends_through_a_repartition_topic(
    log: EmbeddedLog, log_path: str
) -> None:
    # The cache holds the table's updates until the commit; its flush feeds
    # the group-by's repartition topic, which the bounded run must drain too.
    builder = StreamsBuilder()
    (
        builder.table("users", key_serde=S, value_serde=S)
        .group_by(lambda user, city: (city, user), key_serde=S, value_serde=S)
        .count("per-city")
    )
    log.create_topic("users")
    cities = {f"user{i}": ["oslo", "rome", "lima"][i % 3] for i in range(30)}
    with log.producer() as producer:
        producer.produce_batch("users", [(u.encode(), c.encode()) for u, c in cities.items()])
    props = {
        "application.id": "cache-drain",
        "bootstrap.servers": f"embedded:{log_path}",
        "commit.interval.ms": 3_600_000,
    }
    with KafkaStreams(builder.build(), props) as app:
        app.run_until_end(timeout=30)
        assert {kv.key: kv.value for kv in app.store("per-city").all()} == Counter(cities.values())


# --- parity with Kafka's CachingKeyValueStore (tests/differential FINDINGS.md) ---------


def j_pair(left: Any, right: Any) -> str:
    return f"{'null' if left is None else left},{'null' if right is None else right}"


def read_all(driver: TopologyTestDriver) -> list[tuple[Any, Any, int]]:
    out = driver.create_output_topic("out0", S, S)
    return [(r.key, r.value, r.timestamp) for r in out.read_records_to_list()]


def test_c4_cache_does_not_forward_a_delete_of_a_key_that_never_existed() -> None:
    # FINDINGS.md C4, reproducer cache-null-null: Kafka's
    # CachingKeyValueStore.putAndMaybeForward neither writes nor forwards a
    # flushed delete when the store has no old value either.
    b = StreamsBuilder()
    n0 = b.table("in0", key_serde=S, value_serde=S, materialized="store-1")
    n0.to_stream().to("out0", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), {"statestore.cache.max.bytes": 10485760}) as driver:
        driver.create_input_topic("in0", S, S).pipe_input("b", None, 59)
        assert read_all(driver) == []
        # A delete of a key that was there is forwarded, with the cache too.
        driver.create_input_topic("in0", S, S).pipe_input("b", "1", 60)
        driver.create_input_topic("in0", S, S).pipe_input("b", None, 61)
        assert read_all(driver) == [("b", "1", 60), ("b", None, 61)]


def test_c4_outer_join_is_not_recomputed_for_a_delete_of_an_absent_key() -> None:
    # FINDINGS.md C4, reproducer cache-null-null-outer-join (Kafka's
    # CachingKeyValueStore): the source table forwards nothing, so the
    # table-table outer join emits only its first result.
    b = StreamsBuilder()
    n0 = b.table("in0", key_serde=S, value_serde=S, materialized="store-1")
    n1 = b.table("in1", key_serde=S, value_serde=S, materialized="store-2")
    n0.outer_join(n1, j_pair).to_stream().to("out0", key_serde=S, value_serde=S)
    with TopologyTestDriver(b.build(), {"statestore.cache.max.bytes": 10485760}) as driver:
        driver.create_input_topic("in1", S, S).pipe_input("b", "8", 25)
        driver.create_input_topic("in0", S, S).pipe_input("b", None, 35)
        assert read_all(driver) == [("b", "null,8", 25)]


def session_counts(aggregate: str, cache_bytes: int) -> list[tuple[str, int, int, Any, int]]:
    """FINDINGS.md C10's reproducer (session-cache-merge): session windows
    of gap 5 and no grace, updates emitted, a@88, c@98, a@93."""
    b = StreamsBuilder()
    windowed = (
        b.stream("in0", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(5, 0))
        .emit_strategy(EmitStrategy.on_window_update())
    )
    if aggregate == "count":  # the native session kernel
        table, values = windowed.count("store-1"), L
    else:  # the per-record processor with a user function
        table, values = windowed.reduce(lambda agg, v: agg + v, "store-1"), S
    table.to_stream().to("out0", key_serde=serdes.SessionWindowed(S), value_serde=values)
    with TopologyTestDriver(b.build(), {"statestore.cache.max.bytes": cache_bytes}) as driver:
        source = driver.create_input_topic("in0", S, S)
        for key, value, timestamp in [("a", "9", 88), ("c", "3", 98), ("a", "8", 93)]:
            source.pipe_input(key, value, timestamp)
        out = driver.create_output_topic("out0", serdes.SessionWindowed(S), values)
        return [
            (r.key.key, r.key.window.start, r.key.window.end, r.value, r.timestamp)
            for r in out.read_records_to_list()
        ]


def test_c10_cached_sessions_the_store_expired_still_merge() -> None:
    # FINDINGS.md C10: Kafka's CachingSessionStore.findSessions merges the
    # sessions its cache holds with the store's, so a@93 still merges with
    # [88, 88], which the store (retention gap + grace = 5, stream time 98)
    # already hides; with the cache off it does not (Kafka differs too).
    first = [("a", 88, 88, 1, 88), ("c", 98, 98, 1, 98)]
    assert session_counts("count", 10485760) == [*first, ("a", 88, 93, 2, 93)]
    assert session_counts("count", 0) == [*first, ("a", 93, 93, 1, 93)]
    reduced = [("a", 88, 88, "9", 88), ("c", 98, 98, "3", 98)]
    assert session_counts("reduce", 10485760) == [*reduced, ("a", 88, 93, "98", 93)]
    assert session_counts("reduce", 0) == [*reduced, ("a", 93, 93, "8", 93)]
