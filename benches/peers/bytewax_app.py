"""Bytewax 0.21 side of the side-by-side suite (runs in its own virtualenv).

Idiomatic Bytewax: a dataflow per workload, the Kafka connectors, ``key_on``
to key (no repartition topic: one worker), the windowing operators with an
event-time clock whose wait (60 s) matches the others' grace, which emit a
window's result once, when it closes (at the end of the input at the latest),
``stateful_map`` for running aggregates, ``join`` / ``join_window`` for the
joins. It reads the input to its end and stops (``tail=False``), so the driver
says "done" itself; Bytewax commits no consumer-group offsets.
"""

from __future__ import annotations

import json
import struct
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bytewax.operators as op
import bytewax.operators.windowing as win
from benches.peers import protocol as p
from bytewax.connectors.kafka import (
    KafkaSink,
    KafkaSinkMessage,
    KafkaSource,
    KafkaSourceMessage,
)
from bytewax.dataflow import Dataflow, Stream
from bytewax.run import cli_main

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
WINDOW = timedelta(milliseconds=p.WINDOW_MS)


def event_time(x: dict[str, Any]) -> datetime:
    return EPOCH + timedelta(milliseconds=x["dateTime"])


def clock() -> win.EventClock[Any]:
    return win.EventClock(event_time, wait_for_system_duration=timedelta(milliseconds=p.GRACE_MS))


def window_start(ts: int) -> int:
    return ts - ts % p.WINDOW_MS


def build(args: p.Args) -> Dataflow:
    flow = Dataflow(args.app_id)
    w, i = args.workload, args.inputs

    def source(role: str) -> Stream[KafkaSourceMessage[bytes, bytes]]:
        return op.input(
            role,
            flow,
            KafkaSource([args.bootstrap], [i[role]], tail=args.follow, batch_size=10_000),
        )

    def json_values(role: str) -> Stream[dict[str, Any]]:
        return op.map(f"{role}-json", source(role), lambda m: json.loads(m.value))

    def sink(step: str, stream: Stream[tuple[str, bytes]]) -> None:
        messages = op.map(f"{step}-msg", stream, lambda kv: KafkaSinkMessage(kv[0].encode(), kv[1]))
        op.output(step, messages, KafkaSink([args.bootstrap], args.output))

    if w == "q0":
        bids = op.map("json", source("bid"), lambda m: (m.key.decode(), json.loads(m.value)))
        sink("out", op.map("dump", bids, lambda kv: (kv[0], p.dumps(kv[1]))))
    elif w == "q1":
        bids = op.map("json", source("bid"), lambda m: (m.key.decode(), json.loads(m.value)))
        sink(
            "out",
            op.map(
                "q1",
                bids,
                lambda kv: (kv[0], p.dumps({**kv[1], "price": kv[1]["price"] * 89 // 100})),
            ),
        )
    elif w == "q2":
        bids = op.filter("q2", json_values("bid"), lambda b: b["auction"] % p.Q2_MODULUS == 0)
        sink(
            "out",
            op.map(
                "project",
                bids,
                lambda b: (
                    str(b["auction"]),
                    p.dumps({"auction": b["auction"], "price": b["price"]}),
                ),
            ),
        )
    elif w == "q3":
        persons = op.filter("local", json_values("person"), lambda x: x["state"] in p.LOCAL_STATES)
        auctions = op.filter("category", json_values("auction"), lambda a: a["category"] == 10)
        # "running" emits on every update, with None for a side not seen yet: the
        # inner join keeps the complete rows.
        joined = op.filter(
            "inner",
            op.join(
                "join",
                op.key_on("by-id", persons, lambda x: str(x["id"])),
                op.key_on("by-seller", auctions, lambda a: str(a["seller"])),
                insert_mode="product",
                emit_mode="running",
            ),
            lambda kv: kv[1][0] is not None and kv[1][1] is not None,
        )
        sink(
            "out",
            op.map(
                "row",
                joined,
                lambda kv: (
                    str(kv[1][1]["id"]),
                    p.dumps(
                        {
                            "name": kv[1][0]["name"],
                            "city": kv[1][0]["city"],
                            "state": kv[1][0]["state"],
                            "id": kv[1][1]["id"],
                        }
                    ),
                ),
            ),
        )
    elif w == "q5":
        counts = win.count_window(
            "count",
            json_values("bid"),
            clock(),
            win.SlidingWindower(WINDOW, timedelta(milliseconds=p.HOP_MS), EPOCH),
            lambda b: str(b["auction"]),
        ).down
        by_window = op.key_on(
            "by-window",
            op.map(
                "start",
                counts,
                lambda kv: {"start": kv[1][0] * p.HOP_MS, "auction": int(kv[0]), "count": kv[1][1]},
            ),
            lambda r: str(r["start"]),
        )

        def hottest(top: dict[str, Any] | None, r: dict[str, Any]) -> tuple[Any, Any]:
            top = top or {"count": 0, "auctions": []}
            if r["count"] > top["count"]:
                top = {"count": r["count"], "auctions": [r["auction"]]}
            elif r["count"] == top["count"] and r["auction"] not in top["auctions"]:
                top = {"count": top["count"], "auctions": sorted([*top["auctions"], r["auction"]])}
            return top, {"start": r["start"], **top}

        tops = op.stateful_map("hottest", by_window, hottest)
        sink("out", op.map("dump", tops, lambda kv: (kv[0], p.dumps(kv[1]))))
    elif w == "q7":

        def higher(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
            def rank(x: dict[str, Any]) -> tuple[int, int, int, int]:
                return x["price"], x["dateTime"], x["auction"], x["bidder"]

            return a if rank(a) >= rank(b) else b

        bids = op.map(
            "project",
            json_values("bid"),
            lambda b: {k: b[k] for k in ("auction", "bidder", "price", "dateTime")},
        )
        best = win.reduce_window(
            "max",
            op.key_on("all", bids, lambda _b: "all"),
            clock(),
            win.TumblingWindower(WINDOW, EPOCH),
            higher,
        ).down
        sink(
            "out",
            op.map(
                "dump",
                best,
                lambda kv: (
                    str(kv[1][0] * p.WINDOW_MS),
                    p.dumps({"start": kv[1][0] * p.WINDOW_MS, **kv[1][1]}),
                ),
            ),
        )
    elif w == "q8":
        persons = op.key_on("by-id", json_values("person"), lambda x: str(x["id"]))
        auctions = op.key_on("by-seller", json_values("auction"), lambda a: str(a["seller"]))
        pairs = win.join_window(
            "join",
            win.EventClock(event_time, wait_for_system_duration=timedelta(milliseconds=p.GRACE_MS)),
            win.TumblingWindower(WINDOW, EPOCH),
            persons,
            auctions,
            insert_mode="product",
            emit_mode="final",
        ).down
        # As with join: a window's rows come with None for a side it did not see.
        pairs = op.filter(
            "inner", pairs, lambda kv: kv[1][1][0] is not None and kv[1][1][1] is not None
        )
        sink(
            "out",
            op.map(
                "row",
                pairs,
                lambda kv: (
                    str(kv[1][1][1]["id"]),
                    p.dumps(
                        {
                            "id": kv[1][1][0]["id"],
                            "name": kv[1][1][0]["name"],
                            "reserve": kv[1][1][1]["reserve"],
                            "auction": kv[1][1][1]["id"],
                            "start": kv[1][0] * p.WINDOW_MS,
                        }
                    ),
                ),
            ),
        )
    elif w == "q11":
        sessions = win.fold_window(
            "sessions",
            op.key_on("by-bidder", json_values("bid"), lambda b: str(b["bidder"])),
            clock(),
            win.SessionWindower(WINDOW),
            lambda: (None, 0),
            lambda acc, b: (
                b["dateTime"] if acc[0] is None else min(acc[0], b["dateTime"]),
                acc[1] + 1,
            ),
            lambda a, b: (min(x for x in (a[0], b[0]) if x is not None), a[1] + b[1]),
        ).down
        sink(
            "out",
            op.map(
                "dump",
                sessions,
                lambda kv: (
                    f"{kv[0]}@{kv[1][1][0]}",
                    p.dumps({"bidder": int(kv[0]), "start": kv[1][1][0], "count": kv[1][1][1]}),
                ),
            ),
        )
    elif w == "word_count":
        words = op.flat_map("split", source("lines"), lambda m: m.value.decode().lower().split())
        counts = op.stateful_map(
            "count",
            op.key_on("by-word", words, lambda x: x),
            lambda n, _w: ((n or 0) + 1, (n or 0) + 1),
        )
        sink("out", op.map("long", counts, lambda kv: (kv[0], struct.pack(">q", kv[1]))))
    elif w == "filter_map":
        kept = op.filter("filter", source("input"), lambda m: not m.value.startswith(b"0"))
        sink("out", op.map("upper", kept, lambda m: (m.key.decode(), m.value.upper())))
    elif w == "windowed_count":
        records = op.map(
            "record", source("input"), lambda m: {"key": m.key.decode(), "dateTime": m.timestamp[1]}
        )
        counts = win.count_window(
            "count",
            records,
            # Bytewax drops any record older than the watermark (not only those of closed
            # windows, as Kafka Streams' no-grace windows do): the wait absorbs the
            # interleaving of the input partitions.
            clock(),
            win.TumblingWindower(WINDOW, EPOCH),
            lambda r: r["key"],
        ).down
        sink(
            "out",
            op.map(
                "long",
                counts,
                lambda kv: (f"{kv[0]}@{kv[1][0] * p.WINDOW_MS}", struct.pack(">q", kv[1][1])),
            ),
        )
    else:
        p.not_expressible(f"unknown workload {w}")
    return flow


def main() -> None:
    args = p.parse_args()
    if args.guarantee != "at_least_once":
        p.not_expressible("Bytewax has no exactly-once Kafka sink")
    flow = build(args)
    p.ready()
    cli_main(flow, workers_per_process=1)
    p.done()
    p.wait_for_sigterm()


if __name__ == "__main__":
    main()
