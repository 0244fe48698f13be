"""The data of the live web view (``GET /ui/api/state``): the topology as a
graph, the records that reached each node so far (the page turns the
difference between two readings into records/s), the tasks with their
thread, input partitions and lag, the stores' sizes and the app's state."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from strom.errors import StromError
from strom.processor.internals.topology_builder import ProcessorDef, SinkDef, SourceDef

if TYPE_CHECKING:
    from strom.processor.internals.topology_builder import InternalTopologyBuilder, Subtopology
    from strom.streams import KafkaStreams


def _node(builder: InternalTopologyBuilder, name: str) -> dict[str, Any]:
    node = builder.nodes[name]
    if isinstance(node, SourceDef):
        return {
            "name": name,
            "kind": "source",
            "topics": list(node.topics),
            "stores": [],
            "children": list(node.children),
        }
    if isinstance(node, SinkDef):
        topic = node.topic or "(chosen per record)"
        return {"name": name, "kind": "sink", "topics": [topic], "stores": [], "children": []}
    assert isinstance(node, ProcessorDef)
    return {
        "name": name,
        "kind": "processor",
        "topics": [],
        "stores": list(node.stores),
        "children": list(node.children),
    }


def topology_graph(builder: InternalTopologyBuilder) -> list[dict[str, Any]]:
    """The sub-topologies with their nodes (the global one last)."""
    subs: list[tuple[str, Subtopology]] = [("", sub) for sub in builder.subtopologies()]
    global_sub = builder.global_subtopology()
    if global_sub is not None:
        subs.append((" (global)", global_sub))
    return [
        {"id": f"{sub.id}{note}", "nodes": [_node(builder, n) for n in sub.nodes]}
        for note, sub in subs
    ]


def ui_state(streams: KafkaStreams) -> dict[str, Any]:
    builder = streams._topology._internal
    totals: dict[str, int] = dict.fromkeys(builder.nodes, 0)
    tasks = []
    for runtime in list(streams._runtimes):
        for task_id, task in sorted(list(runtime.tasks.items())):
            for name, node in task.nodes.items():
                totals[name] = totals.get(name, 0) + node.records_in
            partitions = task.input_partitions()
            lag: int | None = 0
            try:
                for topic, partition in partitions:
                    behind = runtime.records_lag(topic, partition)
                    lag = None if behind is None or lag is None else lag + behind
            except StromError:
                lag = None
            tasks.append(
                {
                    "task_id": task_id,
                    "thread": runtime.thread_name,
                    "partitions": [f"{t}-{p}" for t, p in partitions],
                    "lag": lag,
                    "processed": task.metrics.records_processed,
                }
            )
    # The global task (one, shared by the stream threads) feeds the global stores.
    global_task = next((r.global_task for r in list(streams._runtimes) if r.global_task), None)
    if global_task is not None:
        for name, node in global_task.nodes.items():
            totals[name] = totals.get(name, 0) + node.records_in
    stores = []
    for name in builder.stores:
        try:
            local = streams._local_store_partitions(name)
            size: int | None = sum(int(s.approximate_num_entries()) for s in local.values())
        except StromError:
            local, size = {}, None
        stores.append({"name": name, "entries": size, "partitions": sorted(local)})
    server = streams.config.application_server
    return {
        "application_id": streams.config.application_id,
        "state": streams.state.value,
        "host": None if server is None else server.endpoint(),
        "time_ms": time.time_ns() // 1_000_000,
        "topology": topology_graph(builder),
        "node_totals": totals,
        "tasks": tasks,
        "stores": stores,
    }
