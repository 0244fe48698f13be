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

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strom.config import StreamsConfig
from strom.embedded import EmbeddedLog, OffsetAndMetadata
from strom.errors import ConfigError, StromError
from strom.internals.runtime import EmbeddedRuntime
from strom.spark._task import unpack

if TYPE_CHECKING:
    from strom.spark.replay import Replay


def bootstrap(result: Replay, config: Mapping[str, Any]) -> None:
    """Writes ``result``'s end state for the app ``config`` describes (an
    embedded log: ``bootstrap.servers = embedded:PATH``). The app must not
    have run yet: no committed offsets and empty changelogs."""
    streams_config = StreamsConfig(config)
    app_id = streams_config.application_id
    path = streams_config.embedded_path
    if path is None:
        raise ConfigError(
            "Replay.bootstrap writes to an embedded log ('bootstrap.servers' = "
            f"'embedded:PATH'); got {streams_config['bootstrap.servers']!r}"
        )
    if app_id != result.config.application_id:
        raise ConfigError(
            f"the replay ran as application.id {result.config.application_id!r} but bootstrap "
            f"is for {app_id!r}: internal topic names would not match; replay with the app's "
            "config"
        )
    log = EmbeddedLog(path)
    if log.committed_offsets(app_id):
        raise StromError(
            f"application {app_id!r} already committed offsets in {path}; bootstrap only "
            "starts an app that has not run (reset it first)"
        )
    builder = result._builder

    # Create the app's internal topics (and check the input topics exist),
    # as the app would on its first start; then fill the changelogs.
    EmbeddedRuntime(builder, streams_config, path).abort()
    changelogs: dict[str, list[pa.Table]] = {}
    for row in result._collect("changelog"):
        packed = unpack(row["value"])
        partitions = pa.array([row["partition"]] * len(packed), pa.int32())
        changelogs.setdefault(row["name"], []).append(packed.append_column("partition", partitions))
    with log.producer() as producer:
        for topic, parts in changelogs.items():
            if any(log.end_offsets(topic).values()):
                raise StromError(f"changelog {topic} is not empty; reset the application first")
            rows = pa.concat_tables(parts).sort_by(
                [("partition", "ascending"), ("seq", "ascending")]
            )
            producer.produce_columns(
                topic,
                rows.column("key").to_pylist(),
                rows.column("value").to_pylist(),
                rows.column("timestamp").to_pylist(),
                rows.column("partition").to_pylist(),
            )

    offsets = {
        (row["name"], row["partition"]): OffsetAndMetadata(row["offset"], str(row["timestamp"]))
        for row in result._collect("offset")
        if row["name"] in result._external
    }
    log.commit_offsets(app_id, offsets)

    # Open every task as the app will (restoring its stores from the
    # changelogs just written), give it the replay's stream times, commit.
    times: dict[str, dict[str, Any]] = {}
    for stage in result._stages:
        assert stage.output is not None
        for row in stage.output.filter("kind = 'task'").select("task", "value").collect():
            times[f"{stage.subtopology.id}_{row['task']}"] = json.loads(row["value"])
    runtime = EmbeddedRuntime(builder, streams_config, path)
    try:
        for task_id, task in runtime.tasks.items():
            meta = times.get(task_id)
            if meta is None:
                continue
            task.stream_time = int(meta["stream_time"])
            for node, time in meta["node_times"].items():
                task.state.set_node_stream_time(node, int(time))
        runtime.commit()
    finally:
        runtime.abort()
