"""The reset tool on the embedded log (issue #23 point 3): no broker; input
offsets to the earliest, internal topics deleted, local state removed, so
the same app recounts from scratch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from strom import KafkaStreams, serdes
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog
from strom.embedded.reset import reset_application
from strom.errors import StromError
from strom.processor.internals.internal_topics import is_internal_topic

APP = "wc-reset"
S, L = serdes.String(), serdes.Long()


@pytest.fixture
def wc_log(log: EmbeddedLog) -> EmbeddedLog:
    log.create_topic("text-input", partitions=3)
    log.create_topic("word-counts", partitions=2)
    with log.producer(value_serde=S) as producer:
        producer.produce_batch("text-input", [(None, line) for line in generate_lines(500)])
    return log


def count(path: str) -> tuple[dict[str, int], dict[str, int]]:
    """One run of the word count: its store, and the output topic's latest values."""
    app = KafkaStreams(
        word_count_topology(), {"application.id": APP, "bootstrap.servers": f"embedded:{path}"}
    )
    with app:
        app.run_until_end(timeout=60)
        store = {kv.key: kv.value for kv in app.store("counts").all()}
    log = EmbeddedLog(path)
    output = {r.key: r.value for r in log.records("word-counts", key_serde=S, value_serde=L)}
    return store, output


def test_after_a_reset_the_app_counts_from_scratch(wc_log: EmbeddedLog, log_path: str) -> None:
    expected = Counter(w for line in generate_lines(500) for w in line.lower().split())
    first, output = count(log_path)
    assert first == output == expected
    internal = {f"{APP}-counts-repartition", f"{APP}-counts-changelog"}
    assert internal <= set(wc_log.topics())

    result = reset_application(APP, log_path)

    assert result.offsets_reset == {"text-input": [0, 1, 2]}
    assert sorted(result.topics_deleted) == sorted(internal)
    assert result.state_removed == Path(log_path) / ".state" / APP
    assert not result.state_removed.exists()
    assert wc_log.topics() == ["text-input", "word-counts"]
    assert {k: c.offset for k, c in wc_log.committed_offsets(APP).items()} == {
        ("text-input", p): 0 for p in range(3)
    }
    second, _ = count(log_path)
    assert second == first  # not double: the input was read again, from scratch


def test_a_reset_without_a_reset_doubles_nothing_either(wc_log: EmbeddedLog, log_path: str) -> None:
    """The control: running again without a reset continues (no new input, no
    new counts), so the test above really observes the reset."""
    first, _ = count(log_path)
    again, _ = count(log_path)
    assert again == first
    # Rewinding the input offsets alone, without the reset, counts twice.
    wc_log.commit_offsets(APP, {("text-input", p): 0 for p in range(3)})
    doubled, _ = count(log_path)
    assert doubled == {word: 2 * n for word, n in first.items()}


def test_a_running_instance_refuses_the_reset_and_nothing_changes(
    wc_log: EmbeddedLog, log_path: str
) -> None:
    app = KafkaStreams(
        word_count_topology(), {"application.id": APP, "bootstrap.servers": f"embedded:{log_path}"}
    )
    with app:
        app.run_until_end(timeout=60)
        before = wc_log.committed_offsets(APP)
        with pytest.raises(StromError, match="still running"):
            reset_application(APP, log_path)
        assert wc_log.committed_offsets(APP) == before
        assert f"{APP}-counts-changelog" in wc_log.topics()


def test_a_missing_input_topic_or_log_fails_before_any_change(
    wc_log: EmbeddedLog, log_path: str, tmp_path: Path
) -> None:
    count(log_path)
    before = wc_log.committed_offsets(APP)
    with pytest.raises(StromError, match=r"input topic.*nope"):
        reset_application(APP, log_path, input_topics=["text-input", "nope"])
    assert wc_log.committed_offsets(APP) == before
    assert f"{APP}-counts-changelog" in wc_log.topics()
    with pytest.raises(StromError, match="no embedded log at"):
        reset_application(APP, tmp_path / "typo")
    assert not (tmp_path / "typo").exists()


def test_named_input_topics_are_reset_and_kept_even_if_named_like_internal_ones(
    log: EmbeddedLog, log_path: str
) -> None:
    log.create_topic(f"{APP}-x-repartition")  # a user topic, by chance named so
    log.create_topic(f"{APP}-counts-changelog")
    log.create_topic("other")
    log.commit_offsets(APP, {("other", 0): 0})
    result = reset_application(APP, log_path, input_topics=[f"{APP}-x-repartition"])
    assert result.topics_deleted == [f"{APP}-counts-changelog"]
    assert set(result.offsets_reset) == {"other", f"{APP}-x-repartition"}
    assert f"{APP}-x-repartition" in log.topics()


@pytest.mark.parametrize(
    ("topic", "internal"),
    [
        ("app-counts-changelog", True),
        ("app-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition", True),
        ("app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000007-topic", True),
        ("app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000012-topic", True),
        ("app-my-fk-subscription-registration-topic", True),
        ("app-shutdown-control", True),
        ("app-counts", False),
        ("other-counts-changelog", False),
        ("app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-x-topic", False),
        ("apple-counts-changelog", False),
    ],
)
def test_internal_topic_names_are_kafkas(topic: str, internal: bool) -> None:
    assert is_internal_topic("app", topic) is internal
