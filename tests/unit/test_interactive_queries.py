"""Interactive queries on the embedded log: ``KafkaStreams.store(name)``
returns the view of the store's kind (key-value, window, session) over the
local tasks, with Kafka's reads, plain values for timestamped stores, and
reads that see the record cache between commits; the metadata calls name
this instance (``application.server``) and the key's partition as the
sinks compute it."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support import wait_until

from strom import KafkaStreams, StreamsBuilder, StreamsConfig, _core, serdes
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, InvalidStateStoreError, StoreError
from strom.kafka.clients import main_consumer_client_id, member_instance
from strom.keyvalue import KeyValue
from strom.kstream import Materialized, SessionWindows, TimeWindows, Window, Windowed
from strom.metadata import HostInfo, KeyQueryMetadata
from strom.processor import StreamPartitioner
from strom.query import (
    FailureReason,
    KeyQuery,
    RangeQuery,
    StateQueryRequest,
    StateQueryResult,
    TimestampedKeyQuery,
    TimestampedRangeQuery,
    WindowKeyQuery,
    WindowRangeQuery,
)
from strom.state import KeyValueStore
from strom.state.key_value import prefix_bounds
from strom.state.views import ReadOnlyKeyValueView, ReadOnlySessionView, ReadOnlyWindowView
from strom.streams import _answer

S = serdes.String()
WINDOW_MS = 10_000
GAP_MS = 5_000
WORDS = ["apple", "apricot", "banana", "blueberry", "cherry", "date", "fig", "grape"]


def topology() -> StreamsBuilder:
    builder = StreamsBuilder()
    grouped = builder.stream("words", key_serde=S, value_serde=S).group_by_key()
    grouped.count(Materialized("counts"))
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(WINDOW_MS)).count(
        Materialized("window-counts")
    )
    grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(GAP_MS)).count(
        Materialized("session-counts")
    )
    return builder


def records() -> list[tuple[str, int]]:
    """(word, timestamp): each word a few times, in two bursts apart by more
    than the session gap, across two windows."""
    out = [
        (word, base + i * 100 + j)
        for burst, base in enumerate((1_000, 30_000))
        for i, word in enumerate(WORDS)
        for j in range(1 + (i + burst) % 3)
    ]
    return sorted(out, key=lambda r: r[1])


def produce(log: EmbeddedLog, data: list[tuple[str, int]]) -> None:
    with log.producer() as producer:
        for word, ts in data:
            producer.produce("words", word.encode(), b"", timestamp=ts)


def config(log_path: str, **extra: object) -> dict[str, object]:
    return {
        "application.id": "iq-test",
        "bootstrap.servers": f"embedded:{log_path}",
        **{k.replace("__", "."): v for k, v in extra.items()},
    }


@pytest.fixture
def app(log: EmbeddedLog, log_path: str) -> Iterator[KafkaStreams]:
    log.create_topic("words", partitions=3)
    produce(log, records())
    streams = KafkaStreams(
        topology().build(), config(log_path, application__server="localhost:7070")
    )
    streams.run_until_end(timeout=120)
    yield streams
    streams.close()


def expected_counts() -> dict[str, int]:
    return dict(Counter(w for w, _ in records()))


def expected_windows() -> dict[tuple[str, int], int]:
    out: Counter[tuple[str, int]] = Counter()
    for word, ts in records():
        out[(word, ts - ts % WINDOW_MS)] += 1
    return dict(out)


def expected_sessions() -> dict[tuple[str, int, int], int]:
    """Per word, sessions of records no more than the gap apart."""
    by_word: dict[str, list[int]] = defaultdict(list)
    for word, ts in records():
        by_word[word].append(ts)
    out = {}
    for word, stamps in by_word.items():
        start = prev = stamps[0]
        count = 0
        for ts in stamps:
            if ts - prev > GAP_MS:
                out[(word, start, prev)] = count
                start, count = ts, 0
            count += 1
            prev = ts
        out[(word, start, prev)] = count
    return out


def test_key_value_view_reads(app: KafkaStreams) -> None:
    view = app.store("counts")
    assert isinstance(view, ReadOnlyKeyValueView)
    expected = expected_counts()
    assert {w: view.get(w) for w in WORDS} == expected
    assert view.get("kiwi") is None
    every = list(view.all())
    assert dict(every) == expected and len(every) == len(expected)
    assert sorted(view.reverse_all()) == sorted(every)
    assert view.approximate_num_entries() == len(expected)
    # Inclusive bounds, None open; each task's part in key order, and reversed.
    assert dict(view.range("b", "cherry")) == {
        w: n for w, n in expected.items() if "b" <= w <= "cherry"
    }
    assert dict(view.range(None, "banana")) == {w: n for w, n in expected.items() if w <= "banana"}
    assert dict(view.range("date", None)) == {w: n for w, n in expected.items() if w >= "date"}
    assert sorted(view.reverse_range("b", "g")) == sorted(view.range("b", "g"))
    assert dict(view.prefix_scan("ap")) == {
        "apple": expected["apple"],
        "apricot": expected["apricot"],
    }
    assert list(view.prefix_scan("zz")) == []


def test_scans_follow_key_order_within_a_task(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("words", partitions=1)
    produce(log, records())
    with KafkaStreams(topology().build(), config(log_path)) as app:
        app.run_until_end(timeout=120)
        view = app.store("counts")
        keys = [kv.key for kv in view.all()]
        assert keys == sorted(WORDS)
        assert [kv.key for kv in view.reverse_all()] == sorted(WORDS, reverse=True)
        assert [kv.key for kv in view.reverse_range("b", "d")] == ["cherry", "blueberry", "banana"]
        # A prefix given with another serde: its bytes are the prefix.
        assert [kv.key for kv in view.prefix_scan(b"b", serdes.ByteArray())] == [
            "banana",
            "blueberry",
        ]


def test_window_view_reads(app: KafkaStreams) -> None:
    view = app.store("window-counts")
    assert isinstance(view, ReadOnlyWindowView)
    expected = expected_windows()
    for (word, start), count in expected.items():
        assert view.fetch(word, start) == count
    assert view.fetch("apple", 20_000) is None
    apple = sorted((s, n) for (w, s), n in expected.items() if w == "apple")
    assert list(view.fetch("apple", 0, 100_000)) == [KeyValue(s, n) for s, n in apple]
    assert list(view.backward_fetch("apple", 0, 100_000)) == [
        KeyValue(s, n) for s, n in reversed(apple)
    ]
    assert list(view.fetch("apple", 0, 9_999)) == [KeyValue(*apple[0])]

    def as_dict(found: list[KeyValue]) -> dict[tuple[str, int], int]:
        for kv in found:
            assert kv.key.window == Window(kv.key.window.start, kv.key.window.start + WINDOW_MS)
        return {(kv.key.key, kv.key.window.start): kv.value for kv in found}

    assert as_dict(list(view.all())) == expected
    assert as_dict(list(view.backward_all())) == expected
    assert as_dict(list(view.fetch_all(20_000, 40_000))) == {
        k: n for k, n in expected.items() if 20_000 <= k[1] <= 40_000
    }
    assert as_dict(list(view.backward_fetch_all(0, 10_000))) == {
        k: n for k, n in expected.items() if k[1] <= 10_000
    }
    assert as_dict(list(view.fetch_range("b", "c", 0, 100_000))) == {
        k: n for k, n in expected.items() if "b" <= k[0] <= "c"
    }
    assert as_dict(list(view.backward_fetch_range(None, "b", 0, 100_000))) == {
        k: n for k, n in expected.items() if k[0] <= "b"
    }


def test_session_view_reads(app: KafkaStreams) -> None:
    view = app.store("session-counts")
    assert isinstance(view, ReadOnlySessionView)
    expected = expected_sessions()

    def as_dict(found: list[KeyValue]) -> dict[tuple[str, int, int], int]:
        assert all(isinstance(kv.key, Windowed) for kv in found)
        return {(kv.key.key, kv.key.window.start, kv.key.window.end): kv.value for kv in found}

    for word in WORDS:
        mine = {k: n for k, n in expected.items() if k[0] == word}
        assert len(mine) == 2  # two bursts, apart by more than the gap
        assert as_dict(list(view.fetch(word))) == mine
        assert list(view.backward_fetch(word)) == list(view.fetch(word))[::-1]
        # Sessions ending at or after 20 s: the second burst's.
        assert as_dict(list(view.find_sessions(word, 20_000, 100_000))) == {
            k: n for k, n in mine.items() if k[2] >= 20_000
        }
        (_, start, end), count = next(iter(mine.items()))
        assert view.fetch_session(word, start, end) == count
    assert as_dict(list(view.fetch_range("b", "c"))) == {
        k: n for k, n in expected.items() if "b" <= k[0] <= "c"
    }
    assert as_dict(list(view.backward_fetch_range(None, None))) == expected


def test_queries_see_the_record_cache_between_commits(log: EmbeddedLog, log_path: str) -> None:
    """No commit in the run (a 10-minute interval): every update is still in
    the record cache, and each view's reads see it, as Kafka's caching
    stores do."""
    log.create_topic("words", partitions=2)
    data = records()
    produce(log, data)
    with KafkaStreams(topology().build(), config(log_path, commit__interval__ms=600_000)) as app:
        app.start()
        wait_until(lambda: app.metrics()["records-processed"] == len(data), 60, "all processed")
        assert dict(app.store("counts").all()) == expected_counts()
        windows = {
            (kv.key.key, kv.key.window.start): kv.value for kv in app.store("window-counts").all()
        }
        assert windows == expected_windows()
        sessions = app.store("session-counts").fetch_range(None, None)
        found = {(kv.key.key, kv.key.window.start, kv.key.window.end): kv.value for kv in sessions}
        assert found == expected_sessions()


def test_a_key_query_that_skips_the_cache_reads_the_store_under_it(
    log: EmbeddedLog, log_path: str
) -> None:
    # Kafka's KeyQuery.skipCache(): no commit in the run, so every count is
    # still in the record cache and the store under it holds none of them.
    log.create_topic("words", partitions=1)
    data = records()
    produce(log, data)
    with KafkaStreams(topology().build(), config(log_path, commit__interval__ms=600_000)) as app:
        app.start()
        wait_until(lambda: app.metrics()["records-processed"] == len(data), 60, "all processed")
        word, count = next(iter(expected_counts().items()))

        def answer(query: Any) -> Any:
            request = StateQueryRequest.in_store("counts").with_query(query)
            return app.query(request).get_only_partition_result().get_result()

        assert answer(KeyQuery.with_key(word)) == count
        assert answer(KeyQuery.with_key(word).skip_cache()) is None
        assert answer(TimestampedKeyQuery.with_key(word).skip_cache()) is None
        assert KeyQuery.with_key(word).skip_cache().is_skip_cache()
        assert not KeyQuery.with_key(word).is_skip_cache()


def test_store_is_queryable_only_while_running(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("words", partitions=1)
    app = KafkaStreams(topology().build(), config(log_path))
    with pytest.raises(InvalidStateStoreError, match="not started"):
        app.store("counts")
    app.run_until_end(timeout=60)
    with pytest.raises(InvalidStateStoreError, match=r"no state store named 'nope'.*counts"):
        app.store("nope")
    view = app.store("counts")
    app.close()
    with pytest.raises(InvalidStateStoreError, match=r"not running \(state NOT_RUNNING\)"):
        view.all()
    with pytest.raises(InvalidStateStoreError, match="not running"):
        app.store("counts")
    with pytest.raises(InvalidStateStoreError, match="not running"):
        app.query_metadata_for_key("counts", "a", S)


def test_a_store_closed_under_a_view_is_reported_as_moved() -> None:
    """A rebalance may close a task's store between finding it and reading
    it: the view finds the stores again and, the store gone, says so."""
    store = KeyValueStore("counts", S, S)
    store.put("a", "1")
    store.native.close()
    still_there = ReadOnlyKeyValueView("counts", lambda: [store])
    with pytest.raises(StoreError, match="closed") as raised:
        still_there.all()
    assert not isinstance(raised.value, InvalidStateStoreError)
    calls = iter([[store]])
    gone = ReadOnlyKeyValueView("counts", lambda: next(calls, []))
    with pytest.raises(InvalidStateStoreError, match="moved while it was queried"):
        gone.all()


def test_a_view_of_one_partition(app: KafkaStreams) -> None:
    # Kafka's StoreQueryParameters.withPartition: that partition's store only.
    counts = expected_counts()
    for partition in range(3):
        view = app.store("counts", partition=partition)
        mine = {
            w: c for w, c in counts.items() if _core.partition_for_key(w.encode(), 3) == partition
        }
        assert dict(view.all()) == mine
        # With no standbys here, stale stores are the active ones.
        assert dict(app.store("counts", partition=partition, stale_stores=True).all()) == mine
    with pytest.raises(InvalidStateStoreError, match="partition 7 of store 'counts' is not on"):
        app.store("counts", partition=7).get("a")


def test_metadata_of_a_key_from_a_stream_partitioner(app: KafkaStreams) -> None:
    # Kafka's queryMetadataForKey(store, key, StreamPartitioner): given the
    # source topic with most partitions, the key and None for the value.
    seen: list[tuple[str, Any, Any, int]] = []

    class Last(StreamPartitioner[str, Any]):
        def partitions(self, topic: str, key: str, value: Any, num_partitions: int) -> Any:
            seen.append((topic, key, value, num_partitions))
            return {len(key) % num_partitions}

    meta = app.query_metadata_for_key("counts", "abcd", partitioner=Last())
    assert meta.partition == 1 and meta.active_host == HostInfo("localhost", 7070)
    assert seen == [("words", "abcd", None, 3)]
    # A plain function works too; two partitions for one key are an error.
    assert app.query_metadata_for_key("counts", "ab", partitioner=lambda k, v, n: 2).partition == 2
    with pytest.raises(ValueError, match="must name one partition"):
        app.query_metadata_for_key("counts", "a", partitioner=lambda k, v, n: [0, 1])
    with pytest.raises(StoreError, match="a key_serde or a partitioner"):
        app.query_metadata_for_key("counts", "a")


def test_metadata_names_this_instance_and_the_sinks_partition(
    app: KafkaStreams, log: EmbeddedLog
) -> None:
    here = HostInfo("localhost", 7070)
    for word in WORDS:
        meta = app.query_metadata_for_key("counts", word, S)
        assert meta.active_host == here and meta.standby_hosts == frozenset()
        assert meta.partition == _core.partition_for_key(word.encode(), 3)
        # The store holds the key in exactly that partition's task.
        assert word in dict(app._local_store_partitions("counts")[meta.partition].all())
    (instance,) = app.metadata_for_all_streams_clients()
    assert instance.host_info == here and instance.host() == "localhost" and instance.port() == 7070
    assert instance.state_store_names == {"counts", "window-counts", "session-counts"}
    assert {tp.partition for tp in instance.topic_partitions} == {0, 1, 2}
    assert app.streams_metadata_for_store("window-counts") == [instance]
    with pytest.raises(StoreError, match="no state store named 'nope'"):
        app.streams_metadata_for_store("nope")
    (thread,) = app.metadata_for_local_threads()
    assert {t.task_id for t in thread.active_tasks} == {"0_0", "0_1", "0_2"}
    assert thread.thread_state == "RUNNING"
    # Run to the end and committed: every input partition's committed offset is its end.
    ends = log.end_offsets("words")
    for task in thread.active_tasks:
        (tp,) = task.topic_partitions
        assert task.committed_offsets == task.end_offsets == {tp: ends[tp.partition]}
    assert sum(ends.values()) == len(records())
    # The embedded log has no clients, and keeps no standbys.
    assert thread.consumer_client_id == "" and thread.producer_client_ids == frozenset()
    assert thread.standby_tasks == frozenset()


def test_metadata_without_application_server(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("words", partitions=1)
    with KafkaStreams(topology().build(), config(log_path)) as app:
        app.run_until_end(timeout=60)
        assert app.query_metadata_for_key("counts", "a", S) == KeyQueryMetadata.NOT_AVAILABLE
        assert app.metadata_for_all_streams_clients() == []


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [("localhost", "not a host:port"), ("h:70000", "not a host:port"), (":80", "not a host")],
)
def test_application_server_is_validated(endpoint: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"application.server: '{endpoint}' is {message}"):
        StreamsConfig(
            {"application.id": "a", "bootstrap.servers": "x", "application.server": endpoint}
        )


def test_host_info_endpoints() -> None:
    assert HostInfo.build_from_endpoint("[::1]:8080") == HostInfo("::1", 8080)
    assert HostInfo("::1", 8080).endpoint() == "[::1]:8080"
    assert HostInfo.build_from_endpoint("example.com:1").endpoint() == "example.com:1"
    assert KeyQueryMetadata.NOT_AVAILABLE.active_host == HostInfo.unavailable()


def test_the_endpoint_travels_in_the_consumer_client_id() -> None:
    """How instances on Kafka learn each other's application.server."""
    client_id = main_consumer_client_id("app-123-ab-StreamThread-2", HostInfo("::1", 80))
    assert client_id == "app-123-ab-StreamThread-2-consumer@[::1]:80"
    assert member_instance(client_id, "app") == ("123-ab", HostInfo("::1", 80))
    assert member_instance("app-9-StreamThread-1-consumer", "app") == ("9", None)
    assert member_instance("other-9-StreamThread-1-consumer", "app") is None
    assert main_consumer_client_id("t", None) == "t-consumer"
    # Headed by a client.id of the user's own (the process id as strom makes them).
    custom = "app-eu-1-4711-0a1b2c3d-StreamThread-1-consumer@host:80"
    assert member_instance(custom, "app") == ("4711-0a1b2c3d", HostInfo("host", 80))


def test_prefix_bounds_cover_exactly_the_prefixed_keys() -> None:
    assert prefix_bounds(b"ab") == (b"ab", b"ac")
    assert prefix_bounds(b"a\xff\xff") == (b"a\xff\xff", b"b")
    assert prefix_bounds(b"\xff") == (b"\xff", None)
    store = KeyValueStore("s", serdes.ByteArray(), S)
    for key in (b"a", b"a\xff", b"a\xff\x00", b"b", b"\xff", b"\xff\x01"):
        store.put(key, key.hex())
    assert [kv.key for kv in store.prefix_scan(b"a\xff")] == [b"a\xff", b"a\xff\x00"]
    assert [kv.key for kv in store.prefix_scan(b"\xff")] == [b"\xff", b"\xff\x01"]
    assert [kv.key for kv in store.prefix_scan(b"")] == sorted(kv.key for kv in store.all())


# --- IQv2: KafkaStreams.query ---------------------------------------------------


def _successes(result: StateQueryResult[Any]) -> dict[int, Any]:
    answers = result.get_partition_results()
    assert all(a.is_success() for a in answers.values()), answers
    return {p: a.get_result() for p, a in answers.items()}


def test_query_key_and_range_per_partition(app: KafkaStreams) -> None:
    counts = expected_counts()
    # Each word is in exactly one of the three partitions.
    for word, count in counts.items():
        found = _successes(
            app.query(StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key(word)))
        )
        assert sorted(found) == [0, 1, 2]
        assert [v for v in found.values() if v is not None] == [count]
    everything = _successes(
        app.query(StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds()))
    )
    rows = {p: [(kv.key, kv.value) for kv in it] for p, it in everything.items()}
    assert dict(kv for part in rows.values() for kv in part) == counts
    assert all(part == sorted(part) for part in rows.values())  # key order within a partition
    bounded = _successes(
        app.query(StateQueryRequest.in_store("counts").with_query(RangeQuery.with_range("b", "c")))
    )
    keys = sorted(kv.key for it in bounded.values() for kv in it)
    assert keys == [w for w in sorted(counts) if "b" <= w <= "c"]
    descending = _successes(
        app.query(
            StateQueryRequest.in_store("counts").with_query(
                RangeQuery.with_no_bounds().with_descending_keys()
            )
        )
    )
    backwards = {p: [(kv.key, kv.value) for kv in it] for p, it in descending.items()}
    assert backwards == {p: part[::-1] for p, part in rows.items()}
    assert max(len(part) for part in rows.values()) > 1


def test_timestamped_queries_give_each_value_its_timestamp(app: KafkaStreams) -> None:
    """Kafka's TimestampedKeyQuery and TimestampedRangeQuery on a DSL count:
    ``(value, timestamp)``, the timestamp the latest record's."""
    counts = expected_counts()
    latest = {word: max(ts for w, ts in records() if w == word) for word in counts}
    for word in ("apple", "grape"):
        request = StateQueryRequest.in_store("counts").with_query(
            TimestampedKeyQuery.with_key(word)
        )
        found = [v for v in _successes(app.query(request)).values() if v is not None]
        assert found == [(counts[word], latest[word])]
    request = StateQueryRequest.in_store("counts").with_query(
        TimestampedRangeQuery.with_no_bounds().with_descending_keys()
    )
    parts = {
        p: [(kv.key, kv.value) for kv in it] for p, it in _successes(app.query(request)).items()
    }
    assert {k: v for part in parts.values() for k, v in part} == {
        word: (counts[word], latest[word]) for word in counts
    }
    assert all(part == sorted(part, reverse=True) for part in parts.values())


def test_timestamped_views_give_each_value_its_timestamp(app: KafkaStreams) -> None:
    """``store(name, timestamped=True)``: Kafka's
    ``QueryableStoreTypes.timestampedKeyValueStore()`` and
    ``timestampedWindowStore()``, values as ``(value, timestamp)`` with the
    latest record's timestamp (of the key, of the key's window)."""
    counts = expected_counts()
    latest = {word: max(ts for w, ts in records() if w == word) for word in counts}
    view = app.store("counts", timestamped=True)
    assert isinstance(view, ReadOnlyKeyValueView)
    assert view.get("apple") == (counts["apple"], latest["apple"])
    assert view.get("kiwi") is None
    assert dict(view.all()) == {w: (n, latest[w]) for w, n in counts.items()}
    assert dict(view.range("b", "cherry")) == {
        w: (n, latest[w]) for w, n in counts.items() if "b" <= w <= "cherry"
    }
    assert dict(view.prefix_scan("ap")) == {w: (counts[w], latest[w]) for w in ("apple", "apricot")}
    # The plain view of the same store.
    assert app.store("counts").get("apple") == counts["apple"]

    windows = expected_windows()
    window_latest: dict[tuple[str, int], int] = {}
    for word, ts in records():
        window_latest[(word, ts - ts % WINDOW_MS)] = ts
    stamped = app.store("window-counts", timestamped=True)
    assert isinstance(stamped, ReadOnlyWindowView)
    for (word, start), count in windows.items():
        assert stamped.fetch(word, start) == (count, window_latest[(word, start)])
    apple = sorted(k for k in windows if k[0] == "apple")
    assert list(stamped.fetch("apple", 0, 100_000)) == [
        KeyValue(k[1], (windows[k], window_latest[k])) for k in apple
    ]
    found = {(kv.key.key, kv.key.window.start): kv.value for kv in stamped.all()}
    assert found == {k: (n, window_latest[k]) for k, n in windows.items()}
    assert app.store("window-counts").fetch("apple", apple[0][1]) == windows[apple[0]]


def test_a_timestamped_view_of_a_store_without_timestamps_is_refused(app: KafkaStreams) -> None:
    with pytest.raises(InvalidStateStoreError, match="session store that keeps no timestamps"):
        app.store("session-counts", timestamped=True)
    assert isinstance(app.store("session-counts"), ReadOnlySessionView)


def test_a_timestamped_query_of_a_store_without_timestamps_fails_as_unknown() -> None:
    store = KeyValueStore("plain", S, S)
    store.put("k", "v")
    view = ReadOnlyKeyValueView("plain", lambda: [store])
    for query in (TimestampedKeyQuery.with_key("k"), TimestampedRangeQuery.with_no_bounds()):
        result = _answer(view, query)
        assert result.get_failure_reason() is FailureReason.UNKNOWN_QUERY_TYPE
        assert "keeps no timestamps" in (result.get_failure_message() or "")
    assert _answer(view, KeyQuery.with_key("k")).get_result() == "v"


def test_query_chosen_partitions(app: KafkaStreams) -> None:
    request = StateQueryRequest.in_store("counts").with_query(RangeQuery.with_no_bounds())
    only = app.query(request.with_partitions([1])).get_only_partition_result()
    assert only.is_success() and list(only.get_result()) == list(
        app.query(request).get_partition_results()[1].get_result()
    )
    missing = app.query(request.with_partitions([7])).get_only_partition_result()
    assert missing.get_failure_reason() is FailureReason.DOES_NOT_EXIST
    assert "partition 7" in (missing.get_failure_message() or "")
    with pytest.raises(ValueError, match="DOES_NOT_EXIST"):
        missing.get_result()
    with pytest.raises(ValueError, match="3 partitions"):
        app.query(request).get_only_partition_result()


def test_query_window_and_session_stores(app: KafkaStreams) -> None:
    windows = expected_windows()
    word = WORDS[1]
    found = _successes(
        app.query(
            StateQueryRequest.in_store("window-counts").with_query(
                WindowKeyQuery.with_key_and_window_start_range(word, 0, 100_000)
            )
        )
    )
    got = {(word, kv.key): kv.value for it in found.values() for kv in it}
    assert got == {k: v for k, v in windows.items() if k[0] == word}
    every = _successes(
        app.query(
            StateQueryRequest.in_store("window-counts").with_query(
                WindowRangeQuery.with_window_start_range(0, 100_000)
            )
        )
    )
    assert {
        (kv.key.key, kv.key.window.start): kv.value for it in every.values() for kv in it
    } == windows
    sessions = _successes(
        app.query(
            StateQueryRequest.in_store("session-counts").with_query(WindowRangeQuery.with_key(word))
        )
    )
    assert {
        (word, kv.key.window.start, kv.key.window.end): kv.value
        for it in sessions.values()
        for kv in it
    } == {k: v for k, v in expected_sessions().items() if k[0] == word}


def test_query_a_store_cannot_answer(app: KafkaStreams) -> None:
    answers = app.query(
        StateQueryRequest.in_store("window-counts").with_query(KeyQuery.with_key("fig"))
    ).get_partition_results()
    assert {a.get_failure_reason() for a in answers.values()} == {FailureReason.UNKNOWN_QUERY_TYPE}
    with pytest.raises(InvalidStateStoreError, match="no state store named 'nope'"):
        app.query(StateQueryRequest.in_store("nope").with_query(KeyQuery.with_key("x")))
