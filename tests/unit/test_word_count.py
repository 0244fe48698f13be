"""Word count end to end on the embedded log, against a plain Counter."""

from __future__ import annotations

import random
import threading
from collections import Counter
from pathlib import Path

import pytest
from tests.support import wait_until

from strom import KafkaStreams, State, StreamsBuilder, serdes
from strom._core import partition_for_key
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog
from strom.errors import ConfigError, StromError, TopologyError
from strom.metadata import LagInfo
from strom.processor import StandbyUpdateListener

APP = "wordcount-test"


def produce_lines(log: EmbeddedLog, lines: list[str]) -> None:
    with log.producer() as producer:
        producer.produce_batch("text-input", [(None, line.encode()) for line in lines])


def final_counts(log: EmbeddedLog, topic: str = "word-counts") -> dict[str, int]:
    """The latest value per key over all partitions of the output topic."""
    latest: dict[str, int] = {}
    for partition, end in log.end_offsets(topic).items():
        offset = 0
        while offset < end:
            batch = log.read(topic, partition, offset, 10_000)
            for record in batch:
                assert record.key is not None and record.value is not None
                latest[record.key.decode()] = int.from_bytes(record.value, "big", signed=True)
            offset = batch[-1].offset + 1
    return latest


def make_app(path: str, **extra: object) -> KafkaStreams:
    return KafkaStreams(
        word_count_topology(),
        {"application.id": APP, "bootstrap.servers": f"embedded:{path}", **extra},
    )


@pytest.fixture
def wc_log(log: EmbeddedLog) -> EmbeddedLog:
    log.create_topic("text-input", partitions=3)
    log.create_topic("word-counts", partitions=2)
    return log


def test_word_count_equals_counter(wc_log: EmbeddedLog, log_path: str) -> None:
    lines = [*generate_lines(3_000, seed=11), "", "  Mixed CASE case  ", "ünïcödé wörds ünïcödé"]
    produce_lines(wc_log, lines)
    expected = Counter(word for line in lines for word in line.lower().split())

    with make_app(log_path) as app:
        app.run_until_end(timeout=120)
        assert app.state is State.RUNNING
        assert final_counts(wc_log) == dict(expected)
        assert {kv.key: kv.value for kv in app.store("counts").all()} == dict(expected)
        assert app.metrics()["records-processed"] >= len(lines)
    assert app.state is State.NOT_RUNNING
    # The group_by went through a repartition topic; the store has a changelog.
    topics = set(wc_log.topics())
    assert f"{APP}-counts-repartition" in topics
    assert f"{APP}-counts-changelog" in topics
    assert wc_log.partitions(f"{APP}-counts-repartition") == 3
    assert wc_log.partitions(f"{APP}-counts-changelog") == 3


def test_output_is_partitioned_by_murmur2_of_the_key(wc_log: EmbeddedLog, log_path: str) -> None:
    produce_lines(wc_log, ["a b c d e f g h i j k l m n o p"])
    with make_app(log_path) as app:
        app.run_until_end(timeout=60)
    for partition, end in wc_log.end_offsets("word-counts").items():
        for record in wc_log.read("word-counts", partition, 0, end):
            assert record.key is not None
            assert partition_for_key(record.key, 2) == partition


def test_restart_continues_from_committed_offsets(wc_log: EmbeddedLog, log_path: str) -> None:
    lines = generate_lines(2_000, seed=5)
    first, second = lines[:1200], lines[1200:]
    produce_lines(wc_log, first)
    with make_app(log_path) as app:
        app.run_until_end(timeout=120)
    assert final_counts(wc_log) == dict(Counter(w for line in first for w in line.split()))

    produce_lines(wc_log, second)
    with make_app(log_path) as app:
        app.run_until_end(timeout=120)
        expected = Counter(w for line in lines for w in line.split())
        # Stores reopened as of their commit, input resumed after it: no double counting.
        assert final_counts(wc_log) == dict(expected)
        assert {kv.key: kv.value for kv in app.store("counts").all()} == dict(expected)
        # The second run read only the new lines (and their words, repartitioned).
        second_words = sum(len(line.split()) for line in second)
        assert app.metrics()["records-processed"] == len(second) + second_words


def test_rerun_with_nothing_new_emits_nothing(wc_log: EmbeddedLog, log_path: str) -> None:
    produce_lines(wc_log, ["one two two"])
    with make_app(log_path) as app:
        app.run_until_end(timeout=60)
    ends = wc_log.end_offsets("word-counts")
    with make_app(log_path) as app:
        app.run_until_end(timeout=60)
    assert wc_log.end_offsets("word-counts") == ends


def test_run_until_end_again_processes_what_arrived_since(
    wc_log: EmbeddedLog, log_path: str
) -> None:
    with make_app(log_path) as app:
        produce_lines(wc_log, ["x y"])
        app.run_until_end(timeout=60)
        produce_lines(wc_log, ["y z"])
        app.run_until_end(timeout=60)
        assert final_counts(wc_log) == {"x": 1, "y": 2, "z": 1}


def test_start_and_close_in_the_background(wc_log: EmbeddedLog, log_path: str) -> None:
    app = make_app(log_path, **{"commit.interval.ms": 100})
    transitions: list[tuple[State, State]] = []
    app.set_state_listener(lambda new, old: transitions.append((new, old)))
    app.start()
    assert app.state is State.RUNNING
    rng = random.Random(3)
    lines = [" ".join(rng.choice("abcdefg") for _ in range(5)) for _ in range(500)]
    expected = dict(Counter(w for line in lines for w in line.split()))

    def produce() -> None:
        for start in range(0, len(lines), 100):
            produce_lines(wc_log, lines[start : start + 100])

    writer = threading.Thread(target=produce)
    writer.start()
    writer.join(timeout=30)
    wait_until(lambda: final_counts(wc_log) == expected, timeout=60, what="all counts")
    assert app.close(timeout=30)
    assert app.state is State.NOT_RUNNING
    assert transitions[0] == (State.REBALANCING, State.CREATED)
    assert transitions[-1] == (State.NOT_RUNNING, State.PENDING_SHUTDOWN)
    # Each one a transition of Kafka's state machine.
    assert all(old.is_valid_transition(new) for new, old in transitions), transitions
    assert app.state.has_completed_shutdown() and not app.state.is_shutting_down()


def test_describe_shows_the_repartition_split() -> None:
    text = word_count_topology().describe()
    assert "Sub-topology: 0" in text and "Sub-topology: 1" in text
    assert "Sink: counts-repartition-sink (topic: counts-repartition)" in text
    assert "Source: counts-repartition-source (topics: [counts-repartition])" in text
    assert "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts])" in text
    sub0, sub1 = text.split("Sub-topology: 1")
    assert "KSTREAM-FLATMAPVALUES-0000000001" in sub0 and "KSTREAM-AGGREGATE" not in sub0
    assert "KTABLE-TOSTREAM-0000000007" in sub1 and "KSTREAM-SINK-0000000008" in sub1


def test_pause_and_resume(wc_log: EmbeddedLog, log_path: str) -> None:
    """Kafka's pause(): started paused, the app stays RUNNING and processes
    nothing until resume(); then it catches up."""
    app = make_app(log_path, **{"commit.interval.ms": 100})
    app.pause()
    assert app.is_paused()
    app.start()
    try:
        produce_lines(wc_log, ["a b a"])
        runtime = app._runtimes[0]
        # Many polls of the stream thread since the records were written.
        seen = runtime.paused_polls
        wait_until(lambda: runtime.paused_polls > seen + 10, timeout=30, what="paused polls")
        assert app.state is State.RUNNING
        assert final_counts(wc_log) == {}
        app.resume()
        assert not app.is_paused()
        wait_until(lambda: final_counts(wc_log) == {"a": 2, "b": 1}, timeout=60, what="counts")
        # Paused again while running: what comes meanwhile waits.
        app.pause()
        wait_until(lambda: runtime._inputs_paused, timeout=30, what="the pause applied")
        produce_lines(wc_log, ["b"])
        seen = runtime.paused_polls
        wait_until(lambda: runtime.paused_polls > seen + 10, timeout=30, what="paused polls")
        assert final_counts(wc_log) == {"a": 2, "b": 1}
        app.resume()
        wait_until(lambda: final_counts(wc_log) == {"a": 2, "b": 2}, timeout=60, what="counts")
    finally:
        assert app.close(timeout=30)


def test_the_standby_listener_is_set_before_start(wc_log: EmbeddedLog, log_path: str) -> None:
    app = make_app(log_path)
    app.set_standby_update_listener(StandbyUpdateListener())  # the embedded log calls it never
    app.run_until_end(timeout=60)
    with pytest.raises(StromError, match="set_standby_update_listener works before start"):
        app.set_standby_update_listener(StandbyUpdateListener())
    app.close()


def test_stream_threads_on_the_embedded_log(wc_log: EmbeddedLog, log_path: str) -> None:
    app = make_app(log_path, **{"commit.interval.ms": 100})
    assert app.add_stream_thread() is None  # not running
    app.start()
    try:
        with pytest.raises(StromError, match="cannot add a stream thread: this transport runs one"):
            app.add_stream_thread()
        produce_lines(wc_log, ["a a"])
        wait_until(lambda: final_counts(wc_log) == {"a": 2}, timeout=60, what="counts")
        assert app.remove_stream_thread(timeout=30) == f"{APP}-StreamThread-1"
        assert app.remove_stream_thread() is None  # none left
        assert app.state is State.RUNNING and app._runtimes == []
    finally:
        assert app.close(timeout=30)
    assert app.state is State.NOT_RUNNING


def test_a_paused_app_does_not_run_until_the_end(wc_log: EmbeddedLog, log_path: str) -> None:
    app = make_app(log_path)
    app.pause()
    with pytest.raises(StromError, match="paused app would never end: resume"):
        app.run_until_end(timeout=10)
    app.resume()
    produce_lines(wc_log, ["c"])
    app.run_until_end(timeout=60)
    assert final_counts(wc_log) == {"c": 1}
    app.close()


def test_local_store_partition_lags(wc_log: EmbeddedLog, log_path: str) -> None:
    produce_lines(wc_log, ["a b a", "c"])
    with make_app(log_path) as app:
        app.run_until_end(timeout=60)
        lags = app.all_local_store_partition_lags()
    ends = wc_log.end_offsets(f"{APP}-counts-changelog")
    # Each partition's store is restored (here: written) up to its changelog's end.
    assert lags == {"counts": {p: LagInfo(end, end, 0) for p, end in ends.items()}}
    assert sum(ends.values()) == 3  # a, b, c: the record cache writes a key once a commit


def test_missing_input_topic_is_a_clear_error(log: EmbeddedLog, log_path: str) -> None:
    log.create_topic("word-counts")
    app = make_app(log_path)
    transitions: list[tuple[State, State]] = []
    app.set_state_listener(lambda new, old: transitions.append((new, old)))
    with pytest.raises(TopologyError, match="text-input"):
        app.run_until_end(timeout=10)
    assert app.state is State.ERROR
    app.close()  # a failed client stays in ERROR
    assert app.state is State.ERROR
    # Through PENDING_ERROR, as Kafka's state machine goes.
    assert all(old.is_valid_transition(new) for new, old in transitions), transitions


def test_state_predicates_are_kafkas() -> None:
    running = {s for s in State if s.is_running_or_rebalancing()}
    assert running == {State.RUNNING, State.REBALANCING}
    assert {s for s in State if s.has_not_started()} == {State.CREATED}
    assert {s for s in State if s.is_shutting_down()} == {
        State.PENDING_SHUTDOWN,
        State.PENDING_ERROR,
    }
    assert {s for s in State if s.has_completed_shutdown()} == {State.NOT_RUNNING, State.ERROR}
    assert State.RUNNING.is_valid_transition(State.REBALANCING)
    assert not State.CREATED.is_valid_transition(State.RUNNING)
    assert not State.NOT_RUNNING.is_valid_transition(State.CREATED)
    assert not any(State.ERROR.is_valid_transition(s) for s in State)


def test_bad_config_is_a_clear_error(log_path: str) -> None:
    with pytest.raises(ConfigError, match=r"application\.id"):
        KafkaStreams(word_count_topology(), {"bootstrap.servers": f"embedded:{log_path}"})
    with pytest.raises(ConfigError, match=r"did you mean .commit\.interval\.ms."):
        make_app(log_path, **{"commit.intervall.ms": 10})
    with pytest.raises(ConfigError, match=r"processing\.guarantee"):
        make_app(log_path, **{"processing.guarantee": "exactly_twice"})


def test_user_callback_error_names_node_and_record(wc_log: EmbeddedLog, log_path: str) -> None:
    def explode(line: str) -> list[str]:
        if "boom" in line:
            raise ValueError("bad line")
        return line.split()

    builder = StreamsBuilder()
    (
        builder.stream("text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .flat_map_values(explode)
        .to("word-counts", key_serde=serdes.String(), value_serde=serdes.String())
    )
    produce_lines(wc_log, ["fine", "boom"])
    app = KafkaStreams(
        builder.build(), {"application.id": "boom", "bootstrap.servers": f"embedded:{log_path}"}
    )
    with pytest.raises(
        Exception, match=r"KSTREAM-FLATMAPVALUES-0000000001.*text-input-\d@\d"
    ) as info:
        app.run_until_end(timeout=30)
    assert isinstance(info.value.__cause__, ValueError)
    assert app.state is State.ERROR
    app.close()


def test_a_cached_count_reads_keys_as_bytes_and_still_routes_bad_ones(tmp_path: Path) -> None:
    """The count takes the keys it reads as bytes (no strings made), yet a
    key or value that is not UTF-8 goes to the deserialization handler and
    a null value is dropped, as when the String serde reads them."""
    S = serdes.String()
    rnd = random.Random(3)
    words = [rnd.choice(["a", "bé", "c"]) for _ in range(300)]
    with EmbeddedLog(tmp_path) as log:
        log.create_topic("words")
        log.create_topic("counts-out")
        with log.producer() as producer:
            for i, word in enumerate(words):
                producer.produce("words", word.encode(), b"x", timestamp=i)
            producer.produce("words", b"\xff", b"x", timestamp=300)
            producer.produce("words", b"a", b"\xfe", timestamp=301)
            producer.produce("words", b"a", None, timestamp=302)
    b = StreamsBuilder()
    b.stream("words", key_serde=S, value_serde=S).group_by_key().count(
        materialized="c"
    ).to_stream().to("counts-out", key_serde=S, value_serde=serdes.Long())
    config = {
        "application.id": "raw-count",
        "bootstrap.servers": f"embedded:{tmp_path}",
        "deserialization.exception.handler": "log_and_continue",
        "poll.max.records": 50,  # the clean batches, then the one with the bad records
    }
    with KafkaStreams(b.build(), config) as app:
        app.run_until_end()
        metrics = app.metrics()
    with EmbeddedLog(tmp_path) as log:
        assert final_counts(log, "counts-out") == dict(Counter(words))
    assert (metrics["skipped-records"], metrics["dropped-records"]) == (2, 1)
