"""Faust (faust-streaming 0.15) side of the side-by-side suite (own virtualenv).

Idiomatic Faust: an agent per stage iterating its stream, ``group_by`` to
re-key (through a repartition topic), tables (in memory, changelogged) for
state, windowed tables (``tumbling``/``hopping``) read per window range, and
``send`` to the output topic. Faust has no stream or table joins and no
session windows: q3, q8 and q11 are not expressible.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import faust
from benches.peers import protocol as p

NOT_EXPRESSIBLE = {
    "q3": "Faust has no joins (stream-stream, stream-table or table-table)",
    "q8": "Faust has no joins (stream-stream, stream-table or table-table)",
    "q11": "Faust has no session windows (tumbling and hopping only)",
}
WINDOW_S, HOP_S = p.WINDOW_MS / 1000, p.HOP_MS / 1000
FIELDS = ("auction", "bidder", "price", "dateTime")
# Faust expires windows by the newest timestamp of a partition, which group_by's
# repartition makes wall-clock time; the data's event time may be an hour older.
EXPIRES = timedelta(days=1)


def window_start_ms(ts_s: float) -> int:
    ms = round(ts_s * 1000)
    return ms - ms % p.WINDOW_MS


def build(app: faust.App, args: p.Args, partitions: int) -> None:
    w, i = args.workload, args.inputs

    def topic(name: str) -> Any:
        return app.topic(name, key_serializer="raw", value_serializer="raw", partitions=partitions)

    def internal(name: str) -> Any:
        """A topic between two agents, created by Faust."""
        return app.topic(
            name, key_serializer="raw", value_serializer="raw", partitions=partitions, internal=True
        )

    out = topic(args.output)

    if w in ("q0", "q1", "q2"):

        @app.agent(topic(i["bid"]))
        async def bids(stream: Any) -> AsyncIterator[None]:
            async for key, value in stream.items():
                bid = json.loads(value)
                if w == "q1":
                    bid = {**bid, "price": bid["price"] * 89 // 100}
                elif w == "q2":
                    if bid["auction"] % p.Q2_MODULUS != 0:
                        continue
                    bid = {"auction": bid["auction"], "price": bid["price"]}
                await out.send(key=key, value=p.dumps(bid))
                yield

    elif w == "q5":
        counts = app.Table("counts", default=int, partitions=partitions).hopping(
            WINDOW_S, HOP_S, expires=EXPIRES
        )
        top = app.Table("top", partitions=partitions)
        updates = internal(f"{args.app_id}-window-counts")

        @app.agent(topic(i["bid"]))
        async def count(stream: Any) -> AsyncIterator[None]:
            async for event in stream.events():
                auction = event.key
                counts[auction] += 1
                for r in counts.table.window.ranges(event.message.timestamp):
                    start = window_start_ms(r[0]) if p.HOP_MS == p.WINDOW_MS else round(r[0] * 1000)
                    update = {"start": start, "auction": int(auction), "count": counts[auction][r]}
                    await updates.send(key=str(start).encode(), value=p.dumps(update))
                yield

        @app.agent(updates)
        async def hottest(stream: Any) -> AsyncIterator[None]:
            async for key, value in stream.items():
                u = json.loads(value)
                best = top.get(key) or {"count": 0, "auctions": []}
                if u["count"] > best["count"]:
                    best = {"count": u["count"], "auctions": [u["auction"]]}
                elif u["count"] == best["count"] and u["auction"] not in best["auctions"]:
                    best = {
                        "count": best["count"],
                        "auctions": sorted([*best["auctions"], u["auction"]]),
                    }
                top[key] = best
                await out.send(key=key, value=p.dumps({"start": u["start"], **best}))
                yield

    elif w == "q7":
        best = app.Table("best", default=dict, partitions=partitions).tumbling(
            WINDOW_S, expires=EXPIRES
        )

        def rank(x: dict[str, Any]) -> tuple[int, int, int, int]:
            return x["price"], x["dateTime"], x["auction"], x["bidder"]

        @app.agent(topic(i["bid"]))
        async def highest(stream: Any) -> AsyncIterator[None]:
            # group_by re-stamps records with the time they are forwarded: the window
            # range comes from the bid's own event time.
            # The repartition topic named after the app (Faust names it after the source).
            by_all = stream.group_by(
                lambda _b: b"all", name="all", topic=internal(f"{args.app_id}-all-repartition")
            )
            async for value in by_all:
                raw = json.loads(value)
                bid = {k: raw[k] for k in FIELDS}
                (window,) = best.table.window.ranges(bid["dateTime"] / 1000)
                current = best[b"all"][window]
                if not current or rank(bid) > rank(current):
                    best[b"all"][window] = current = bid
                start = window_start_ms(window[0])
                await out.send(key=str(start).encode(), value=p.dumps({"start": start, **current}))
                yield

    elif w == "word_count":
        words = app.Table("words", default=int, partitions=partitions)

        @app.agent(topic(i["lines"]))
        async def split(stream: Any) -> AsyncIterator[None]:
            async for line in stream:
                for word in line.decode().lower().split():
                    await count_word.send(key=word.encode(), value=b"1")
                yield

        @app.agent(internal(f"{args.app_id}-words"))
        async def count_word(stream: Any) -> AsyncIterator[None]:
            async for key, _one in stream.items():  # noqa: PERF102 - a Faust stream has no keys()
                words[key] += 1
                await out.send(key=key, value=struct.pack(">q", words[key]))
                yield

    elif w == "filter_map":

        @app.agent(topic(i["input"]))
        async def filter_map(stream: Any) -> AsyncIterator[None]:
            async for key, value in stream.items():
                if not value.startswith(b"0"):
                    await out.send(key=key, value=value.upper())
                yield

    elif w == "windowed_count":
        windowed = app.Table("counts", default=int, partitions=partitions).tumbling(
            WINDOW_S, expires=EXPIRES
        )

        @app.agent(topic(i["input"]))
        async def count_windows(stream: Any) -> AsyncIterator[None]:
            async for event in stream.events():
                windowed[event.key] += 1
                start = window_start_ms(event.message.timestamp)
                n = windowed[event.key].current()
                await out.send(
                    key=f"{event.key.decode()}@{start}".encode(), value=struct.pack(">q", n)
                )
                yield

    else:
        p.not_expressible(f"unknown workload {w}")


def main() -> None:
    args = p.parse_args()
    if args.workload in NOT_EXPRESSIBLE:
        p.not_expressible(NOT_EXPRESSIBLE[args.workload])
    partitions = 6
    app = faust.App(
        args.app_id,
        broker=f"kafka://{args.bootstrap}",
        store="memory://",
        processing_guarantee="exactly_once"
        if args.guarantee == "exactly_once_v2"
        else "at_least_once",
        broker_commit_interval=args.commit_interval_ms / 1000,
        consumer_auto_offset_reset="earliest",
        topic_partitions=partitions,
        web_enabled=False,
        datadir=str(Path(args.state_dir) / "faust"),
    )
    build(app, args, partitions)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True)
    p.ready()
    worker.execute_from_commandline()  # until the runner's SIGTERM


if __name__ == "__main__":
    main()
