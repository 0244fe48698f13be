"""Starting a streaming app where a replay ended.

The replay's end state is written the way the app itself would have left it
after processing the same records and committing: each store's changelog
(the latest record per key, as compaction keeps it), every task's local
stores restored from it and committed with the task's stream times, and the
input offsets with the partitions' times as offset metadata. The app then
opens its stores as of that commit and consumes from those offsets: no gap,
nothing counted twice, the same late-record drops.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strom.config import StreamsConfig
from strom.embedded import EmbeddedLog, OffsetAndMetadata
from strom.embedded.runtime import EmbeddedRuntime
from strom.errors import ConfigError, StromError
from strom.processor.internals.task import StreamTask
from strom.spark._task import unpack

if TYPE_CHECKING:
    from strom.spark.replay import Replay


@dataclass
class _EndState:
    """What the replay hands over: per changelog topic its records (sorted
    by partition and write order), the input offsets with each partition's
    time, and each task's stream times (task and per processor) by task id."""

    changelogs: dict[str, pa.Table]
    offsets: dict[tuple[str, int], tuple[int, str]]
    times: dict[str, dict[str, Any]]

    def changelog_columns(self, topic: str) -> tuple[list[Any], ...]:
        """keys, values, timestamps, partitions: what ``produce_columns`` takes."""
        rows = self.changelogs[topic]
        return tuple(rows.column(c).to_pylist() for c in ("key", "value", "timestamp", "partition"))


def bootstrap(result: Replay, config: Mapping[str, Any]) -> None:
    """Writes ``result``'s end state for the app ``config`` describes: on an
    embedded log (``bootstrap.servers = embedded:PATH``) or a Kafka cluster.
    The app must not have run yet: no committed offsets and empty changelogs."""
    if not result.changelogs:
        raise ConfigError(
            "bootstrap writes the stores' changelogs, which this replay did not keep: "
            "call replay(..., changelogs=True)"
        )
    streams_config = StreamsConfig(config)
    app_id = streams_config.application_id
    if app_id != result.config.application_id:
        raise ConfigError(
            f"the replay ran as application.id {result.config.application_id!r} but bootstrap "
            f"is for {app_id!r}: internal topic names would not match; replay with the app's "
            "config"
        )
    if streams_config.embedded_path is not None:
        _to_embedded_log(result, streams_config, _end_state(result))
    else:
        # Its own writes need no transaction: read_committed consumers see them.
        own = StreamsConfig({**config, "processing.guarantee": "at_least_once"})
        _to_kafka(result, own, _end_state(result))


def _end_state(result: Replay) -> _EndState:
    parts: dict[str, list[pa.Table]] = {}
    for row in result._collect("changelog"):
        packed = unpack(row["value"])
        partitions = pa.array([row["partition"]] * len(packed), pa.int32())
        parts.setdefault(row["name"], []).append(packed.append_column("partition", partitions))
    changelogs = {
        topic: pa.concat_tables(tables).sort_by([("partition", "ascending"), ("seq", "ascending")])
        for topic, tables in parts.items()
    }
    offsets = {
        (row["name"], row["partition"]): (int(row["offset"]), str(row["timestamp"]))
        for row in result._collect("offset")
        if row["name"] in result._external
    }
    # A partition the replay read no record of (empty, or bounded at its
    # start) still continues where the read ended: with no commit the app
    # would start it by auto.offset.reset and, at "latest", skip records
    # written since. No record, so no partition time.
    for key, end in result._read_ends.items():
        if key[0] in result._external and key not in offsets and end >= 0:
            offsets[key] = (end, "")
    times = {
        f"{stage.subtopology.id}_{meta['partition']}": meta
        for stage in result._stages
        for meta in stage.tasks
    }
    return _EndState(changelogs, offsets, times)


def _set_times(task: StreamTask, meta: dict[str, Any]) -> None:
    task.stream_time = int(meta["stream_time"])
    for node, node_time in meta["node_times"].items():
        task.state.set_node_stream_time(node, int(node_time))


def _to_embedded_log(result: Replay, config: StreamsConfig, end: _EndState) -> None:
    app_id, path = config.application_id, config.embedded_path
    assert path is not None
    log = EmbeddedLog(path)
    if log.committed_offsets(app_id):
        raise StromError(
            f"application {app_id!r} already committed offsets in {path}; bootstrap only "
            "starts an app that has not run (reset it first)"
        )
    builder = result._builder
    # Create the app's internal topics (and check the input topics exist),
    # as the app would on its first start; then fill the changelogs.
    EmbeddedRuntime(builder, config, path).abort()
    with log.producer() as producer:
        for topic in end.changelogs:
            if any(log.end_offsets(topic).values()):
                raise StromError(f"changelog {topic} is not empty; reset the application first")
            producer.produce_columns(topic, *end.changelog_columns(topic))
    log.commit_offsets(
        app_id,
        {key: OffsetAndMetadata(offset, stamp) for key, (offset, stamp) in end.offsets.items()},
    )
    # Open every task as the app will (restoring its stores from the
    # changelogs just written), give it the replay's stream times, commit.
    runtime = EmbeddedRuntime(builder, config, path)
    try:
        for task_id, task in runtime.tasks.items():
            if task_id in end.times:
                _set_times(task, end.times[task_id])
        runtime.commit()
    finally:
        runtime.abort()


def _to_kafka(result: Replay, config: StreamsConfig, end: _EndState) -> None:
    """The same on a Kafka cluster: internal topics created as the app
    creates them, changelogs produced, the input offsets committed for the
    app's group (it has no members yet), and the local stores of every task
    the replay ran restored into ``state.dir`` and committed with its stream
    times. An instance started with that ``state.dir`` drops late records as
    an uninterrupted run would; one elsewhere restores from the changelogs
    and starts from the committed partition times."""
    # confluent-kafka is an optional dependency: imported for a Kafka bootstrap only.
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    from strom.kafka.clients import REBALANCED, REQUEST_TIMEOUT_S, retrying  # noqa: PLC0415
    from strom.kafka.runtime import KafkaRuntime  # noqa: PLC0415

    app_id = config.application_id
    runtime = KafkaRuntime(result._builder, config)  # creates the internal topics
    try:
        # Out of the group: its offsets are committed by no member.
        runtime.consumer.unsubscribe()
        committed = runtime.consumer.committed(
            [TopicPartition(t, p) for t, p in end.offsets], timeout=REQUEST_TIMEOUT_S
        )
        if any(tp.offset >= 0 for tp in committed):
            raise StromError(
                f"application {app_id!r} already committed offsets on "
                f"{config['bootstrap.servers']}; bootstrap only starts an app that has not "
                "run (reset it first: strom reset)"
            )
        for topic in end.changelogs:
            for partition in range(runtime.partition_count(topic)):
                low, high = runtime.watermarks(topic, partition)
                if high > low:
                    raise StromError(f"changelog {topic} is not empty; reset the application first")
        for topic in end.changelogs:
            runtime.producer.produce_columns(topic, *end.changelog_columns(topic))
        runtime.producer.flush()

        # The broker takes a commit from no member only while the group is
        # empty: our own consumer may still be leaving it.
        offsets = [
            TopicPartition(t, p, offset, metadata=partition_time)
            for (t, p), (offset, partition_time) in end.offsets.items()
        ]
        retrying(
            lambda: runtime.consumer.commit(offsets),
            f"committing the input offsets for group {app_id!r} (bootstrap only starts an "
            "app that is not running)",
            also=REBALANCED,
        )

        subs = {sub.id: sub for sub in runtime.subtopologies}
        wanted = []
        for task_id in sorted(end.times):
            sub_id, number = task_id.split("_")
            wanted.append(TopicPartition(runtime.anchor_topic(subs[int(sub_id)]), int(number)))
        tasks, _ = runtime.open_tasks(wanted)
        for task in tasks:
            _set_times(task, end.times[task.task_id])
        runtime.close()
    except BaseException:
        runtime.abort()
        raise
