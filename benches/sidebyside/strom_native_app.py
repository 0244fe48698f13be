"""strom's side-by-side workloads written with its native fast paths:
``strom.col`` expressions in place of the lambdas where the DSL step has an
expression form (the rest of each app is the lambda version's, so the two
systems differ only there). Reported as ``strom-native``.

- q0: the same app (no per-record function): a Json source feeding a Json
  sink passes the bytes on, checked natively.
- q1, q2, filter_map: every step an expression: no Python per record.
- q5: the same app; its windowed count reads no value, so bids stay bytes.
- q7: the projection and the constant grouping key are expressions; the
  reducer stays Python.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benches.peers import protocol as p
from benches.sidebyside import strom_app

from strom import StreamsBuilder, col, lit, serdes, struct
from strom.kstream import TimeWindows

S, J = serdes.String(), serdes.Json()


def q1(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .map_values(
            struct(
                auction=col("auction"),
                bidder=col("bidder"),
                price=col("price") * 89 // 100,
                dateTime=col("dateTime"),
                extra=col("extra"),
            )
        )
        .to(out, key_serde=S, value_serde=J)
    )


def q2(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .filter(col("auction") % p.Q2_MODULUS == 0)
        .map_values(struct(auction=col("auction"), price=col("price")))
        .to(out, key_serde=S, value_serde=J)
    )


def q7(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["bid"], key_serde=S, value_serde=J)
        .map_values(
            struct(
                auction=col("auction"),
                bidder=col("bidder"),
                price=col("price"),
                dateTime=col("dateTime"),
            )
        )
        .group_by(lit("all"), key_serde=S, value_serde=J)
        .windowed_by(TimeWindows.of_size_and_grace(p.WINDOW_MS, p.GRACE_MS))
        .reduce(strom_app._higher)
        .to_stream()
        .map(lambda w, bid: (str(w.window.start), {"start": w.window.start, **bid}))
        .to(out, key_serde=S, value_serde=J)
    )


def filter_map(b: StreamsBuilder, i: dict[str, str], out: str) -> None:
    (
        b.stream(i["input"], key_serde=S, value_serde=S)
        .filter(~col().startswith("0"))
        .map_values(col().upper())
        .to(out, key_serde=S, value_serde=S)
    )


NATIVE: dict[str, Callable[[StreamsBuilder, dict[str, str], str], None]] = {
    "q1": q1,
    "q2": q2,
    "q7": q7,
    "filter_map": filter_map,
}


if __name__ == "__main__":
    strom_app.WORKLOADS.update(NATIVE)
    strom_app.main()
