"""Local state of the word count: persistent stores under
``<state.dir>/<application.id>/<task>/<store>``, committed with the changelog
offset they reflect, restored from the changelog when missing or corrupt."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.cli.demo import generate_lines, word_count_topology
from strom.embedded import EmbeddedLog
from strom.errors import StoreError, StromError
from strom.kstream import Materialized
from strom.processor import StateRestoreListener

APP = "state-test"


@pytest.fixture
def wc_log(log: EmbeddedLog) -> EmbeddedLog:
    log.create_topic("text-input", partitions=2)
    log.create_topic("word-counts", partitions=2)
    return log


def produce(log: EmbeddedLog, lines: list[str]) -> None:
    with log.producer() as producer:
        producer.produce_batch("text-input", [(None, line.encode()) for line in lines])


def app_for(log_path: str, topology: object = None, **extra: object) -> KafkaStreams:
    return KafkaStreams(
        topology or word_count_topology(),  # type: ignore[arg-type]
        {"application.id": APP, "bootstrap.servers": f"embedded:{log_path}", **extra},
    )


def store_dirs(log_path: str) -> list[Path]:
    return sorted((Path(log_path) / ".state" / APP).glob("*/counts"))


def run(log_path: str, topology: object = None, **extra: object) -> tuple[dict[str, int], dict]:
    with app_for(log_path, topology, **extra) as app:
        app.run_until_end(timeout=120)
        return {kv.key: kv.value for kv in app.store("counts").all()}, app.metrics()


LINES = generate_lines(1_500, seed=9)
EXPECTED = dict(Counter(w for line in LINES for w in line.split()))


def test_reopened_stores_need_no_replay(wc_log: EmbeddedLog, log_path: str) -> None:
    produce(wc_log, LINES)
    counts, metrics = run(log_path)
    assert counts == EXPECTED and metrics["restored-records"] == 0
    # The store of sub-topology 1 lives in one directory per task.
    assert [p.parent.name for p in store_dirs(log_path)] == ["1_0", "1_1"]
    counts, metrics = run(log_path)
    assert counts == EXPECTED
    assert metrics["restored-records"] == 0  # committed offset == changelog end


def test_deleted_local_state_is_restored_from_the_changelog(
    wc_log: EmbeddedLog, log_path: str
) -> None:
    produce(wc_log, LINES)
    run(log_path)
    changelog_records = sum(wc_log.end_offsets(f"{APP}-counts-changelog").values())
    for path in store_dirs(log_path):
        for file in path.iterdir():
            file.unlink()
        path.rmdir()
    counts, metrics = run(log_path)
    assert counts == EXPECTED
    assert metrics["restored-records"] == changelog_records


def test_clean_up_deletes_the_local_state_only_when_not_running(
    wc_log: EmbeddedLog, log_path: str
) -> None:
    """Kafka's cleanUp: the app's state directory goes, the next run restores
    every store from its changelog; refused while the app runs."""
    produce(wc_log, LINES)
    run(log_path)
    changelog_records = sum(wc_log.end_offsets(f"{APP}-counts-changelog").values())
    assert store_dirs(log_path)
    app = app_for(log_path)
    app.clean_up()
    assert not (Path(log_path) / ".state" / APP).exists()
    app.start()
    try:
        with pytest.raises(StromError, match="cannot clean up a KafkaStreams in state"):
            app.clean_up()
    finally:
        app.close()
    app.clean_up()  # after close(): allowed
    counts, metrics = run(log_path)
    assert counts == EXPECTED
    assert metrics["restored-records"] == changelog_records


class Recorder(StateRestoreListener):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_restore_start(
        self, topic_partition: tuple[str, int], store_name: str, start: int, end: int
    ) -> None:
        self.calls.append(("start", topic_partition, store_name, start, end))

    def on_batch_restored(
        self, topic_partition: tuple[str, int], store_name: str, end_offset: int, count: int
    ) -> None:
        self.calls.append(("batch", topic_partition, store_name, end_offset, count))

    def on_restore_end(self, topic_partition: tuple[str, int], store_name: str, total: int) -> None:
        self.calls.append(("end", topic_partition, store_name, total))


def test_the_restore_listener_hears_each_restored_changelog_partition(
    wc_log: EmbeddedLog, log_path: str
) -> None:
    """Kafka's StateRestoreListener: start, batches and end for each
    changelog partition replayed, with its offsets and counts."""
    produce(wc_log, LINES)
    run(log_path)
    ends = wc_log.end_offsets(f"{APP}-counts-changelog")
    app = app_for(log_path)
    app.clean_up()
    listener = Recorder()
    app.set_global_state_restore_listener(listener)
    with app:
        app.run_until_end(timeout=120)
        restored = app.metrics()["restored-records"]
        with pytest.raises(StromError, match="before start"):
            app.set_global_state_restore_listener(Recorder())
    changelog = f"{APP}-counts-changelog"
    expected = []
    for partition, end in sorted(ends.items()):
        tp = (changelog, partition)
        expected += [
            ("start", tp, "counts", 0, end),
            ("batch", tp, "counts", end - 1, end),
            ("end", tp, "counts", end),
        ]
    assert listener.calls == expected
    assert restored == sum(ends.values())


def test_corrupt_local_state_is_wiped_and_restored(wc_log: EmbeddedLog, log_path: str) -> None:
    produce(wc_log, LINES)
    run(log_path)
    segment = max(
        (f for f in store_dirs(log_path)[0].iterdir() if f.stat().st_size > 100),
        key=lambda f: f.stat().st_size,
    )
    data = bytearray(segment.read_bytes())
    data[40] ^= 0xFF  # inside the first committed frame
    segment.write_bytes(bytes(data))
    counts, metrics = run(log_path)
    assert counts == EXPECTED
    assert metrics["restored-records"] > 0


def test_two_instances_never_share_a_task_directory(wc_log: EmbeddedLog, log_path: str) -> None:
    produce(wc_log, ["a b"])
    with app_for(log_path) as first:
        first.run_until_end(timeout=60)
        with pytest.raises(StoreError, match="locked"):
            app_for(log_path).run_until_end(timeout=60)


def test_in_memory_stores_are_rebuilt_from_the_changelog(
    wc_log: EmbeddedLog, log_path: str
) -> None:
    builder = StreamsBuilder()
    (
        builder.stream("text-input", key_serde=serdes.String(), value_serde=serdes.String())
        .flat_map_values(str.split)
        .group_by(lambda _k, w: w, key_serde=serdes.String(), value_serde=serdes.String())
        .count(Materialized("counts", in_memory=True))
        .to_stream()
        .to("word-counts", key_serde=serdes.String(), value_serde=serdes.Long())
    )
    produce(wc_log, LINES)
    counts, _ = run(log_path, builder.build())
    assert counts == EXPECTED and store_dirs(log_path) == []
    counts, metrics = run(log_path, builder.build())
    assert counts == EXPECTED
    assert metrics["restored-records"] == sum(
        wc_log.end_offsets(f"{APP}-counts-changelog").values()
    )
