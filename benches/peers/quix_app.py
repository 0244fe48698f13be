"""Quix Streams 3.x side of the side-by-side suite (runs in its own virtualenv).

Idiomatic Quix: a StreamingDataFrame per topic, ``group_by`` to re-key
(through a repartition topic), windows with ``.current()`` (an update per
record, as Kafka Streams' default), ``join_interval`` for the two joins (a
join of both sides, kept in state; with bounds wider than the data it is the
insert-only table join the query asks for), and a stateful ``apply`` where a
custom aggregation is needed (q5's per-window maximum, the word count).
"""

from __future__ import annotations

import struct
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benches.peers import protocol as p
from quixstreams import Application
from quixstreams.dataframe import StreamingDataFrame
from quixstreams.models.serializers import Serializer

EVER = timedelta(days=7)  # wider than any data set: the joins never expire a side


class LongField(Serializer):
    """Writes one field of the value as Kafka's 8-byte big-endian Long."""

    def __init__(self, field: str) -> None:
        self.field = field

    def __call__(self, value: Any, ctx: Any) -> bytes:
        return struct.pack(">q", value[self.field])


def window_start(ts: int) -> int:
    return ts - ts % p.WINDOW_MS


def build(app: Application, args: p.Args) -> None:
    w, i = args.workload, args.inputs

    def source(role: str, value: str = "json") -> StreamingDataFrame:
        return app.dataframe(app.topic(i[role], key_deserializer="str", value_deserializer=value))

    def sink(value: Any = "json") -> Any:
        return app.topic(args.output, key_serializer="str", value_serializer=value)

    if w == "q0":
        source("bid").to_topic(sink())
    elif w == "q1":
        source("bid").apply(lambda b: {**b, "price": b["price"] * 89 // 100}).to_topic(sink())
    elif w == "q2":
        (
            source("bid")
            .filter(lambda b: b["auction"] % p.Q2_MODULUS == 0)
            .apply(lambda b: {"auction": b["auction"], "price": b["price"]})
            .to_topic(sink())
        )
    elif w in ("q3", "q8"):
        persons, auctions = source("person"), source("auction")
        if w == "q3":
            persons = persons.filter(lambda x: x["state"] in p.LOCAL_STATES)
            persons = persons.group_by(lambda x: str(x["id"]), name="person-id")
            auctions = auctions.filter(lambda a: a["category"] == 10)
            auctions = auctions.group_by(lambda a: str(a["seller"]), name="seller")

            def merge(a: dict[str, Any], x: dict[str, Any]) -> dict[str, Any]:
                return {"name": x["name"], "city": x["city"], "state": x["state"], "id": a["id"]}

        else:
            persons = persons.group_by(
                lambda x: f"{x['id']}@{window_start(x['dateTime'])}", name="person-window"
            )
            auctions = auctions.group_by(
                lambda a: f"{a['seller']}@{window_start(a['dateTime'])}", name="seller-window"
            )

            def merge(a: dict[str, Any], x: dict[str, Any]) -> dict[str, Any]:
                return {
                    "id": x["id"],
                    "name": x["name"],
                    "reserve": a["reserve"],
                    "auction": a["id"],
                    "start": window_start(x["dateTime"]),
                }

        joined = auctions.join_interval(
            persons, on_merge=merge, grace_ms=EVER, backward_ms=EVER, forward_ms=EVER
        )
        key = "id" if w == "q3" else "auction"
        joined.to_topic(sink(), key=lambda v: str(v[key]))
    elif w == "q5":

        def hottest(update: dict[str, Any], state: Any) -> dict[str, Any]:
            top = state.get("top", {"count": 0, "auctions": []})
            if update["count"] > top["count"]:
                top = {"count": update["count"], "auctions": [update["auction"]]}
            elif update["count"] == top["count"] and update["auction"] not in top["auctions"]:
                top = {
                    "count": top["count"],
                    "auctions": sorted([*top["auctions"], update["auction"]]),
                }
            state.set("top", top)
            return {"start": update["start"], **top}

        counts = (
            source("bid")
            .hopping_window(p.WINDOW_MS, p.HOP_MS, grace_ms=p.GRACE_MS)
            .count()
            .current()
        )
        (
            counts.apply(
                lambda r, key, _ts, _h: {
                    "start": r["start"],
                    "auction": int(key),
                    "count": r["value"],
                },
                metadata=True,
            )
            .group_by(lambda r: str(r["start"]), name="window")
            .apply(hottest, stateful=True)
            .to_topic(sink())
        )
    elif w == "q7":

        def higher(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
            def rank(x: dict[str, Any]) -> tuple[int, int, int, int]:
                return x["price"], x["dateTime"], x["auction"], x["bidder"]

            return a if rank(a) >= rank(b) else b

        (
            source("bid")
            .apply(lambda b: {k: b[k] for k in ("auction", "bidder", "price", "dateTime")})
            .group_by(lambda _b: "all", name="all")
            .tumbling_window(p.WINDOW_MS, grace_ms=p.GRACE_MS)
            .reduce(reducer=higher, initializer=lambda b: b)
            .current()
            .apply(lambda r: {"start": r["start"], **r["value"]})
            .to_topic(sink(), key=lambda v: str(v["start"]))
        )
    elif w == "q11":
        (
            source("bid")
            .group_by(lambda b: str(b["bidder"]), name="bidder")
            .session_window(p.WINDOW_MS, grace_ms=p.GRACE_MS)
            .count()
            .current()
            .apply(
                lambda r, key, _ts, _h: {
                    "bidder": int(key),
                    "start": r["start"],
                    "count": r["value"],
                },
                metadata=True,
            )
            .to_topic(sink(), key=lambda v: f"{v['bidder']}@{v['start']}")
        )
    elif w == "word_count":

        def count(word: str, state: Any) -> dict[str, Any]:
            n = state.get("n", 0) + 1
            state.set("n", n)
            return {"word": word, "n": n}

        (
            source("lines", "str")
            .apply(lambda line: line.lower().split(), expand=True)
            .group_by(lambda word: word, name="word")
            .apply(count, stateful=True)
            .to_topic(sink(LongField("n")), key=lambda v: v["word"])
        )
    elif w == "filter_map":
        source("input", "str").filter(lambda v: not v.startswith("0")).apply(str.upper).to_topic(
            sink("str")
        )
    elif w == "windowed_count":
        (
            source("input", "str")
            .tumbling_window(p.WINDOW_MS)
            .count()
            .current()
            .apply(
                lambda r, key, _ts, _h: {"key": f"{key}@{r['start']}", "n": r["value"]},
                metadata=True,
            )
            .to_topic(sink(LongField("n")), key=lambda v: v["key"])
        )
    else:
        p.not_expressible(f"unknown workload {w}")


def main() -> None:
    args = p.parse_args()
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.app_id,
        auto_offset_reset="earliest",
        commit_interval=args.commit_interval_ms / 1000,
        processing_guarantee="exactly-once"
        if args.guarantee == "exactly_once_v2"
        else "at-least-once",
        state_dir=str(Path(args.state_dir) / "quix"),
        loglevel="WARNING",
    )
    build(app, args)
    p.ready()
    app.run()  # until the runner's SIGTERM


if __name__ == "__main__":
    main()
