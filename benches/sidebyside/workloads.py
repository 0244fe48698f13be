"""The workloads of the side-by-side suite: their input data sets, the
expected result of each (an oracle written from the query's definition, not
from any system's code), and how a system's output topic is reduced to a
comparable final state.

A final state is a multiset of rows (stateless queries) or a dict of the last
value per output key (tables and windows: every system emits updates or final
values; the last one per key is the result either way; a ``None`` value, a
tombstone, deletes the key). Its digest is ``(entries, checksum)``; the
checksum is order-independent.
"""

from __future__ import annotations

import functools
import itertools
import json
import random
import struct
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from benches.nexmark.generator import TOPICS, GeneratorConfig, generate_parallel
from benches.peers import protocol as p

Record = tuple[bytes | None, bytes | None]  # key, value of an output record
Digest = tuple[int, int]


DATASET_ROLES = {"nexmark": TOPICS, "lines": ("lines",), "kt": ("input",)}


@dataclass(frozen=True)
class Dataset:
    """Input records by role (topic), in produce order: (key, value, timestamp)."""

    name: str  # nexmark | lines | kt
    records: int  # the size asked for (events, lines or records)
    # Event time starts here. Recent, so that no broker retention (7 days by
    # default) or store expiry by wall-clock time removes records while a run reads them.
    base_time_ms: int

    @property
    def roles(self) -> tuple[str, ...]:
        return DATASET_ROLES[self.name]

    def topic(self, role: str) -> str:
        return f"sbs-{self.name}-{self.records}-{self.base_time_ms // 1000}-{role}"

    def topics(self) -> dict[str, str]:
        return {role: self.topic(role) for role in self.roles}

    def rows(self) -> Iterator[tuple[str, list[bytes], list[bytes], list[int]]]:
        """Batches of (role, keys, values, timestamps)."""
        yield from _ROWS[self.name](self.records, self.base_time_ms)


# --------------------------------------------------------------------------
# Input data

Rows = Iterator[tuple[str, list[bytes], list[bytes], list[int]]]


def recent_base_time_ms() -> int:
    """The start of the current hour: windows of every size used here align to it."""
    return int(time.time()) // 3600 * 3600 * 1000


def nexmark_rows(events: int, base_time_ms: int) -> Rows:
    for chunk in generate_parallel(GeneratorConfig(base_time_ms=base_time_ms), events):
        for topic in TOPICS:
            cols = chunk[topic]
            yield topic, cols.keys, cols.values, cols.timestamps


_SYLLABLES = ["ka", "lo", "mi", "nu", "ra", "se", "ti", "vo", "an", "el", "or", "us", "st", "re"]


def word_lines(lines: int, seed: int = 7) -> list[str]:
    """The README word count's input: lines of 4 to 12 words from a Zipf-like
    vocabulary of 5,000 words (a few words are very common)."""
    rng = random.Random(seed)
    vocabulary = sorted(
        {"".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))) for _ in range(5_000)}
    )
    rng.shuffle(vocabulary)
    weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
    words = rng.choices(vocabulary, weights=weights, k=lines * 12)
    out, at = [], 0
    for _ in range(lines):
        n = rng.randint(4, 12)
        out.append(" ".join(words[at : at + n]))
        at += n
    return out


def lines_rows(lines: int, base_time_ms: int) -> Rows:
    text = word_lines(lines)
    for start in range(0, lines, 50_000):
        batch = text[start : start + 50_000]
        stamps = [base_time_ms + (start + i) // 10 for i in range(len(batch))]
        yield (
            "lines",
            [b"%d" % (start + i) for i in range(len(batch))],
            [t.encode() for t in batch],
            stamps,
        )


KT_KEYS = 1000
KT_VALUE_BYTES = 100


def kt_payloads(seed: int = 1) -> list[bytes]:
    """benches/kafka_throughput.py's records: 256 distinct ~100-byte hex values."""
    rng = random.Random(seed)
    return ["".join(rng.choices("0123456789abcdef", k=KT_VALUE_BYTES)).encode() for _ in range(256)]


def kt_rows(records: int, base_time_ms: int) -> Rows:
    """1,000 keys in turn, 100 records per millisecond of event time (so the 10 s
    windowed count sees a few windows, as with kafka_throughput's wall-clock stamps)."""
    payloads = kt_payloads()
    keys = [f"key-{i:04d}".encode() for i in range(KT_KEYS)]
    for start in range(0, records, 50_000):
        idx = range(start, min(start + 50_000, records))
        yield (
            "input",
            [keys[i % KT_KEYS] for i in idx],
            [payloads[i % 256] for i in idx],
            [base_time_ms + i // 100 for i in idx],
        )


_ROWS: dict[str, Callable[[int, int], Rows]] = {
    "nexmark": nexmark_rows,
    "lines": lines_rows,
    "kt": kt_rows,
}

# --------------------------------------------------------------------------
# Digests


def _crc(item: Any) -> int:
    return zlib.crc32(repr(item).encode())


def multiset_digest(rows: Iterable[Any]) -> Digest:
    count, total = 0, 0
    for row in rows:
        count += 1
        total += _crc(row)
    return count, total & 0xFFFF_FFFF_FFFF


def table_digest(table: dict[Any, Any]) -> Digest:
    return multiset_digest(table.items())


def last_per_key(records: Iterable[Record], decode: Callable[[bytes], Any]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for key, value in records:
        k = key.decode() if key is not None else ""
        if value is None:
            table.pop(k, None)
        else:
            table[k] = decode(value)
    return table


def _long(value: bytes) -> int:
    (n,) = struct.unpack(">q", value)
    return int(n)


# --------------------------------------------------------------------------
# Workloads: oracle (expected digest from the input) and the output's digest


@dataclass(frozen=True)
class Workload:
    name: str
    dataset: str  # nexmark | lines | kt
    roles: tuple[str, ...]  # the inputs it reads
    description: str
    expected: Callable[[Dataset], Digest]
    observed: Callable[[Iterable[Record]], Digest]


@functools.lru_cache(maxsize=1)
def _nexmark(dataset: Dataset) -> dict[str, list[dict[str, Any]]]:
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for role, _keys, values, _ts in dataset.rows():
        events[role].extend(json.loads(v) for v in values)
    return events


def _q0_row(b: dict[str, Any]) -> tuple[Any, ...]:
    return b["auction"], b["bidder"], b["price"], b["dateTime"], b["extra"]


def _q1_row(b: dict[str, Any]) -> tuple[Any, ...]:
    return b["auction"], b["bidder"], b["price"], b["dateTime"]


def _windows(ts: int, size: int, advance: int) -> range:
    """Start times of the hopping windows that contain ``ts`` (starts >= 0, as Kafka)."""
    last = ts - ts % advance
    first = max(0, last - size + advance)
    return range(first, last + 1, advance)


def q0_expected(d: Dataset) -> Digest:
    return multiset_digest(_q0_row(b) for b in _nexmark(d)["bid"])


def q1_expected(d: Dataset) -> Digest:
    return multiset_digest(
        _q1_row({**b, "price": b["price"] * 89 // 100}) for b in _nexmark(d)["bid"]
    )


def q2_expected(d: Dataset) -> Digest:
    return multiset_digest(
        (b["auction"], b["price"]) for b in _nexmark(d)["bid"] if b["auction"] % p.Q2_MODULUS == 0
    )


def q3_expected(d: Dataset) -> Digest:
    ev = _nexmark(d)
    persons = {x["id"]: x for x in ev["person"] if x["state"] in p.LOCAL_STATES}
    return table_digest(
        {
            str(a["id"]): (persons[s]["name"], persons[s]["city"], persons[s]["state"], a["id"])
            for a in ev["auction"]
            if a["category"] == 10 and (s := a["seller"]) in persons
        }
    )


def q5_expected(d: Dataset) -> Digest:
    counts: Counter[tuple[int, int]] = Counter()
    for b in _nexmark(d)["bid"]:
        for start in _windows(b["dateTime"], p.WINDOW_MS, p.HOP_MS):
            counts[start, b["auction"]] += 1
    best: dict[int, tuple[int, list[int]]] = {}
    for (start, auction), n in counts.items():
        top = best.get(start)
        if top is None or n > top[0]:
            best[start] = (n, [auction])
        elif n == top[0]:
            top[1].append(auction)
    return table_digest({str(s): (n, tuple(sorted(a))) for s, (n, a) in best.items()})


def _q7_rank(b: dict[str, Any]) -> tuple[int, int, int, int]:
    return b["price"], b["dateTime"], b["auction"], b["bidder"]


def q7_expected(d: Dataset) -> Digest:
    best: dict[int, tuple[int, int, int, int]] = {}
    for b in _nexmark(d)["bid"]:
        start = b["dateTime"] - b["dateTime"] % p.WINDOW_MS
        best[start] = max(best.get(start, (-1, 0, 0, 0)), _q7_rank(b))
    return table_digest({str(s): (r[2], r[3], r[0], r[1]) for s, r in best.items()})


def _window(ts: int) -> int:
    return ts - ts % p.WINDOW_MS


def q8_expected(d: Dataset) -> Digest:
    ev = _nexmark(d)
    persons = {(x["id"], _window(x["dateTime"])): x for x in ev["person"]}
    table = {}
    for a in ev["auction"]:
        person = persons.get((a["seller"], _window(a["dateTime"])))
        if person is not None:
            table[str(a["id"])] = (
                person["id"],
                person["name"],
                a["reserve"],
                _window(person["dateTime"]),
            )
    return table_digest(table)


def q11_expected(d: Dataset) -> Digest:
    times: dict[int, list[int]] = defaultdict(list)
    for b in _nexmark(d)["bid"]:
        times[b["bidder"]].append(b["dateTime"])
    table = {}
    for bidder, ts in times.items():
        ts.sort()
        start, count = ts[0], 1
        for prev, t in itertools.pairwise(ts):
            if t - prev > p.WINDOW_MS:
                table[f"{bidder}@{start}"] = count
                start, count = t, 0
            count += 1
        table[f"{bidder}@{start}"] = count
    return table_digest(table)


def word_count_expected(d: Dataset) -> Digest:
    counts: Counter[str] = Counter()
    for _role, _keys, values, _ts in d.rows():
        for v in values:
            counts.update(v.decode().lower().split())
    return table_digest(dict(counts))


def filter_map_expected(d: Dataset) -> Digest:
    return multiset_digest(
        v.decode().upper()
        for _role, _keys, values, _ts in d.rows()
        for v in values
        if not v.startswith(b"0")
    )


def windowed_count_expected(d: Dataset) -> Digest:
    counts: Counter[str] = Counter()
    for _role, keys, _values, stamps in d.rows():
        for k, t in zip(keys, stamps, strict=True):
            counts[f"{k.decode()}@{_window(t)}"] += 1
    return table_digest(dict(counts))


def _json_rows(row: Callable[[dict[str, Any]], Any]) -> Callable[[Iterable[Record]], Digest]:
    return lambda records: multiset_digest(row(json.loads(v)) for _k, v in records if v)


def _json_table(field: Callable[[dict[str, Any]], Any]) -> Callable[[Iterable[Record]], Digest]:
    return lambda records: table_digest(last_per_key(records, lambda v: field(json.loads(v))))


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "q0",
            "nexmark",
            ("bid",),
            "pass-through (JSON in, JSON out)",
            q0_expected,
            _json_rows(_q0_row),
        ),
        Workload(
            "q1",
            "nexmark",
            ("bid",),
            "currency conversion: price * 89 / 100",
            q1_expected,
            _json_rows(_q1_row),
        ),
        Workload(
            "q2",
            "nexmark",
            ("bid",),
            "selection: auction % 123 == 0",
            q2_expected,
            _json_rows(lambda b: (b["auction"], b["price"])),
        ),
        Workload(
            "q3",
            "nexmark",
            ("person", "auction"),
            "local item suggestion: category-10 auctions x sellers in OR/ID/CA",
            q3_expected,
            _json_table(lambda x: (x["name"], x["city"], x["state"], x["id"])),
        ),
        Workload(
            "q5",
            "nexmark",
            ("bid",),
            "hot items: bids per auction in 10 s windows every 5 s, the max",
            q5_expected,
            _json_table(lambda x: (x["count"], tuple(sorted(x["auctions"])))),
        ),
        Workload(
            "q7",
            "nexmark",
            ("bid",),
            "highest bid per 10 s tumbling window",
            q7_expected,
            _json_table(lambda x: (x["auction"], x["bidder"], x["price"], x["dateTime"])),
        ),
        Workload(
            "q8",
            "nexmark",
            ("person", "auction"),
            "new users: persons x their auctions in the same 10 s window",
            q8_expected,
            _json_table(lambda x: (x["id"], x["name"], x["reserve"], x["start"])),
        ),
        Workload(
            "q11",
            "nexmark",
            ("bid",),
            "user sessions: bids per bidder per session (10 s gap)",
            q11_expected,
            _json_table(lambda x: x["count"]),
        ),
        Workload(
            "word_count",
            "lines",
            ("lines",),
            "the README's word count (flat_map_values, group_by, count)",
            word_count_expected,
            lambda records: table_digest(last_per_key(records, _long)),
        ),
        Workload(
            "filter_map",
            "kt",
            ("input",),
            "kafka_throughput.py: filter + map_values (stateless)",
            filter_map_expected,
            lambda records: multiset_digest(v.decode() for _k, v in records if v is not None),
        ),
        Workload(
            "windowed_count",
            "kt",
            ("input",),
            "kafka_throughput.py: 10 s tumbling-window count per key",
            windowed_count_expected,
            lambda records: table_digest(last_per_key(records, _long)),
        ),
    ]
}
