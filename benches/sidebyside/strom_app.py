"""strom's side of the side-by-side suite: each workload as a user would write
it, with Python lambdas and strom's public API only (the native fast paths get
their own variants as they land).

Run by the runner as a driver process (see benches/peers/protocol.py).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benches.peers import protocol as p

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.kstream import Materialized, SessionWindows, TimeWindows

S, J, L = serdes.String(), serdes.Json(), serdes.Long()


def window_start(ts: int) -> int:
    return ts - ts % p.WINDOW_MS


def q0(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    b.stream(i["bid"], key_serde=S, value_serde=J).to(out, key_serde=S, value_serde=J)


def q1(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .map_values(lambda bid: {**bid, "price": bid["price"] * 89 // 100})
        .to(out, key_serde=S, value_serde=J)
    )


def q2(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .filter(lambda _k, bid: bid["auction"] % p.Q2_MODULUS == 0)
        .map_values(lambda bid: {"auction": bid["auction"], "price": bid["price"]})
        .to(out, key_serde=S, value_serde=J)
    )


def q3(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    persons = (
        b.stream(i["person"], key_serde=S, value_serde=J)
        .filter(lambda _k, person: person["state"] in p.LOCAL_STATES)
        .to_table()
    )
    (
        b.stream(i["auction"], key_serde=S, value_serde=J)
        .filter(lambda _k, auction: auction["category"] == 10)
        .to_table()
        .join(
            persons,
            lambda auction, person: {
                "name": person["name"],
                "city": person["city"],
                "state": person["state"],
                "id": auction["id"],
            },
            foreign_key=lambda auction: str(auction["seller"]),
        )
        .to_stream()
        .to(out, key_serde=S, value_serde=J)
    )


def q5(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    def hottest(_window: str, update: dict[str, int], top: dict[str, Any]) -> dict[str, Any]:
        if update["count"] > top["count"]:
            return {"count": update["count"], "auctions": [update["auction"]]}
        if update["count"] == top["count"] and update["auction"] not in top["auctions"]:
            return {
                "count": top["count"],
                "auctions": sorted([*top["auctions"], update["auction"]]),
            }
        return top

    windows = TimeWindows.of_size_and_grace(p.WINDOW_MS, p.GRACE_MS).advance_by(p.HOP_MS)
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .group_by_key()
        .windowed_by(windows)
        .count()
        .to_stream()
        .map(lambda w, n: (str(w.window.start), {"auction": int(w.key), "count": n}))
        .group_by_key(key_serde=S, value_serde=J)
        .aggregate(
            lambda: {"count": 0, "auctions": []},
            hottest,
            Materialized("hottest", key_serde=S, value_serde=J),
        )
        .to_stream()
        .map(lambda start, top: (start, {"start": int(start), **top}))
        .to(out, key_serde=S, value_serde=J)
    )


def _higher(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    def rank(bid: dict[str, Any]) -> tuple[int, int, int, int]:
        return bid["price"], bid["dateTime"], bid["auction"], bid["bidder"]

    return a if rank(a) >= rank(b) else b


def q7(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .map_values(lambda bid: {k: bid[k] for k in ("auction", "bidder", "price", "dateTime")})
        .group_by(lambda _k, _bid: "all", key_serde=S, value_serde=J)
        .windowed_by(TimeWindows.of_size_and_grace(p.WINDOW_MS, p.GRACE_MS))
        .reduce(_higher)
        .to_stream()
        .map(lambda w, bid: (str(w.window.start), {"start": w.window.start, **bid}))
        .to(out, key_serde=S, value_serde=J)
    )


def q8(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    new_persons = (
        b.stream(i["person"], key_serde=S, value_serde=J)
        .select_key(lambda _k, person: f"{person['id']}@{window_start(person['dateTime'])}")
        .to_table(Materialized("new-persons", key_serde=S, value_serde=J))
    )
    (
        b.stream(i["auction"], key_serde=S, value_serde=J)
        .to_table()
        .join(
            new_persons,
            lambda auction, person: {
                "id": person["id"],
                "name": person["name"],
                "reserve": auction["reserve"],
                "auction": auction["id"],
                "start": window_start(person["dateTime"]),
            },
            foreign_key=lambda auction: f"{auction['seller']}@{window_start(auction['dateTime'])}",
        )
        .to_stream()
        .to(out, key_serde=S, value_serde=J)
    )


def q11(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .group_by(lambda _k, bid: str(bid["bidder"]), key_serde=S, value_serde=J)
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(p.WINDOW_MS, p.GRACE_MS))
        .count()
        .to_stream()
        .map(
            lambda w, n: (
                f"{w.key}@{w.window.start}",
                None if n is None else {"bidder": int(w.key), "start": w.window.start, "count": n},
            )
        )
        .to(out, key_serde=S, value_serde=J)
    )


def word_count(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["lines"], key_serde=S, value_serde=S)
        .flat_map_values(lambda line: line.lower().split())
        .group_by(lambda _key, word: word, key_serde=S, value_serde=S)
        .count()
        .to_stream()
        .to(out, key_serde=S, value_serde=L)
    )


def filter_map(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["input"], key_serde=S, value_serde=S)
        .filter(lambda _k, v: not v.startswith("0"))
        .map_values(lambda v: v.upper())
        .to(out, key_serde=S, value_serde=S)
    )


def windowed_count(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["input"], key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(p.WINDOW_MS))
        .count(materialized="counts")
        .to_stream()
        .map(lambda w, n: (f"{w.key}@{w.window.start}", n))
        .to(out, key_serde=S, value_serde=L)
    )


WORKLOADS: dict[str, Callable[[StreamsBuilder, dict[str, str], str], None]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q5": q5,
    "q7": q7,
    "q8": q8,
    "q11": q11,
    "word_count": word_count,
    "filter_map": filter_map,
    "windowed_count": windowed_count,
}


def topology(workload: str, inputs: dict[str, str], output: str) -> Topology:
    builder = StreamsBuilder()
    WORKLOADS[workload](builder, inputs, output)
    return builder.build()


def main() -> None:
    args = p.parse_args()
    config = {
        "application.id": args.app_id,
        "bootstrap.servers": args.bootstrap,
        "processing.guarantee": args.guarantee,
        "commit.interval.ms": args.commit_interval_ms,
        "num.stream.threads": args.threads,
        "state.dir": tempfile.mkdtemp(prefix="strom-", dir=args.state_dir),
    }
    app = KafkaStreams(topology(args.workload, args.inputs, args.output), config)
    p.ready()
    app.run()  # until the runner's SIGTERM; closes the app


if __name__ == "__main__":
    main()
