"""A deterministic Nexmark event generator, vectorized with numpy.

It follows Apache Beam's Nexmark ``Generator``/``GeneratorConfig``: event
number ``n`` is a person when ``n % 50 == 0``, an auction when ``n % 50`` is 1
to 3 and a bid otherwise (the 1:3:46 mix); ids start at 1000; auctions pick a
category in 10..14 and a seller that is, with probability ``1 - 1/4``, the
"hot" seller of the last 100 people; bids pick the hot auction of the last
100 auctions with probability ``1 - 1/2`` and the hot bidder with ``1 - 1/4``,
otherwise a random one of the last 100 in-flight auctions (plus 10 not yet
created) or of the 1,000 active people (plus 10); prices are log-uniform
(``round(10 ** (6u) * 100)``); event time is ``base + n * inter-event delay``.
A ``padding`` string brings each value to the configured average size (person
200 B, auction 500 B, bid 100 B, ±20% as Beam's ``nextExtra``).

Two differences from Beam, both deliberate: the random draws come from numpy's
PCG64 seeded with ``(seed, chunk)`` instead of one ``java.util.Random`` per
event, so the stream is deterministic for a seed but not bit-identical to
Beam's; and the average sizes are those of the JSON value on the wire (Beam
counts its own binary encoding). Out-of-order events: a fraction of events is
stamped up to ``max_delay_ms`` earlier than their position in the stream (as
Beam's delayed events arrive after younger ones).

Values are JSON objects with Beam's field names. Keys are decimal strings:
persons by ``id``, auctions by ``id``, bids by ``auction``.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
HOT_RATIO_BATCH = 100  # hot sellers/bidders/auctions: the first of each batch of 100
ID_LEAD = 10  # ids not yet created that a random pick may name

CHUNK = 50_000  # events per RNG stream: the output does not depend on how callers chunk

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah"]
FIRST_NAMES += ["Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones"]
LAST_NAMES += ["Noris"]

TOPICS = ("person", "auction", "bid")

Int64s = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GeneratorConfig:
    """Beam's defaults, plus a seed and a fixed base time (so runs repeat)."""

    seed: int = 42
    base_time_ms: int = 1_700_000_000_000
    inter_event_delay_us: int = 100  # Beam's default rate: 10,000 events/s
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100
    hot_auction_ratio: int = 2
    hot_bidders_ratio: int = 4
    hot_sellers_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    out_of_order_fraction: float = 0.0
    max_delay_ms: int = 3000  # Beam's occasionalDelaySec


@dataclass
class Columns:
    """One topic's records: decimal-string keys, JSON values, timestamps (ms)."""

    keys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.values)


# --------------------------------------------------------------------------
# Beam's id arithmetic, on arrays of event numbers


def last_base0_person_id(n: Int64s) -> Int64s:
    return (n // PROPORTION_DENOMINATOR) * PERSON_PROPORTION


def last_base0_auction_id(n: Int64s) -> Int64s:
    epoch, offset = np.divmod(n, PROPORTION_DENOMINATOR)
    before = offset < PERSON_PROPORTION  # a person: the last auction of the previous epoch
    epoch = epoch - before
    offset = np.where(
        before | (offset >= PERSON_PROPORTION + AUCTION_PROPORTION),
        AUCTION_PROPORTION - 1,
        offset - PERSON_PROPORTION,
    )
    result: Int64s = epoch * AUCTION_PROPORTION + offset
    return result


def _uniform_below(u: npt.NDArray[np.float64], bound: Int64s) -> Int64s:
    """``floor(u * bound)``: a uniform pick in ``[0, bound)`` from ``u`` in [0, 1)."""
    return np.minimum((u * bound).astype(np.int64), bound - 1)


def next_base0_person_id(n: Int64s, u: npt.NDArray[np.float64], config: GeneratorConfig) -> Int64s:
    num_people = last_base0_person_id(n) + 1
    active = np.minimum(num_people, config.num_active_people)
    return num_people - active + _uniform_below(u, active + ID_LEAD)


def next_base0_auction_id(n: Int64s, u: npt.NDArray[np.float64], config: GeneratorConfig) -> Int64s:
    max_auction = last_base0_auction_id(n)
    min_auction = np.maximum(max_auction - config.num_in_flight_auctions, 0)
    return min_auction + _uniform_below(u, max_auction - min_auction + 1 + ID_LEAD)


def next_price(rng: np.random.Generator, size: int) -> Int64s:
    return np.round(10.0 ** (rng.random(size) * 6.0) * 100.0).astype(np.int64)


# --------------------------------------------------------------------------
# Values: numbers and picks are drawn as arrays; each record is one bytes
# %-format (measured: faster than assembling byte matrices in numpy).

_POWERS = 10 ** np.arange(1, 19, dtype=np.int64)


def _digit_counts(values: Int64s) -> Int64s:
    counts: Int64s = np.searchsorted(_POWERS, values, side="right") + 1
    return counts


def _padding_lengths(rng: np.random.Generator, current: Int64s, average: int) -> Int64s:
    """Beam's ``nextExtra``: the padding that brings a record to ``average`` bytes ±20%."""
    desired = np.maximum(average - current, 0)
    delta = np.round(desired * 0.2).astype(np.int64)
    spread = (rng.random(current.size) * (2 * delta)).astype(np.int64)
    lengths: Int64s = np.where(current > average, 0, desired - delta + spread)
    return lengths


class _Pool:
    """Random text to slice strings from: letters only, or with 1 in 13 a space
    (Beam's ``nextString``, whose result is trimmed)."""

    SIZE = 1 << 16

    def __init__(self, rng: np.random.Generator, *, spaces: bool) -> None:
        raw = rng.integers(ord("a"), ord("z") + 1, size=self.SIZE, dtype=np.uint8)
        if spaces:
            raw[rng.random(self.SIZE) < 1 / 13] = ord(" ")
        self.text = raw.tobytes()

    def offsets(self, rng: np.random.Generator, rows: int, longest: int) -> list[int]:
        offsets: list[int] = rng.integers(0, self.SIZE - longest, rows).tolist()
        return offsets


_PERSON = (
    b'{"id":%d,"name":"%s %s","emailAddress":"%s@%s.com","creditCard":"%04d %04d %04d %04d",'
    b'"city":"%s","state":"%s","dateTime":%d,"extra":"%s"}'
)
_AUCTION = (
    b'{"id":%d,"itemName":"%s","description":"%s","initialBid":%d,"reserve":%d,'
    b'"dateTime":%d,"expires":%d,"seller":%d,"category":%d,"extra":"%s"}'
)
_BID = b'{"auction":%d,"bidder":%d,"price":%d,"dateTime":%d,"extra":"%s"}'


def _encoded(words: list[str]) -> list[bytes]:
    return [w.encode() for w in words]


_FIRST, _LAST = _encoded(FIRST_NAMES), _encoded(LAST_NAMES)
_CITIES, _STATES = _encoded(US_CITIES), _encoded(US_STATES)


def _persons(
    rng: np.random.Generator, n: Int64s, ts: Int64s, config: GeneratorConfig
) -> tuple[Int64s, list[bytes]]:
    rows = n.size
    ids = last_base0_person_id(n) + FIRST_PERSON_ID
    letters = _Pool(rng, spaces=False)
    text = letters.text
    first = rng.integers(0, len(_FIRST), rows).tolist()
    last = rng.integers(0, len(_LAST), rows).tolist()
    user_len = rng.integers(3, 7, rows).tolist()
    host_len = rng.integers(3, 5, rows).tolist()
    user_at = letters.offsets(rng, rows, 8)
    host_at = letters.offsets(rng, rows, 8)
    card = rng.integers(0, 10_000, (rows, 4)).tolist()
    city = rng.integers(0, len(_CITIES), rows).tolist()
    state = rng.integers(0, len(_STATES), rows).tolist()
    heads = []
    for i, (pid, t) in enumerate(zip(ids.tolist(), ts.tolist(), strict=True)):
        u, h, c = user_at[i], host_at[i], card[i]
        heads.append(
            (
                pid,
                _FIRST[first[i]],
                _LAST[last[i]],
                text[u : u + user_len[i]],
                text[h : h + host_len[i]],
                c[0],
                c[1],
                c[2],
                c[3],
                _CITIES[city[i]],
                _STATES[state[i]],
                t,
            )
        )
    return ids, _padded(rng, _PERSON, heads, config.avg_person_bytes)


def _auctions(
    rng: np.random.Generator, n: Int64s, ts: Int64s, config: GeneratorConfig
) -> tuple[Int64s, list[bytes]]:
    rows = n.size
    ids = last_base0_auction_id(n) + FIRST_AUCTION_ID
    hot = rng.integers(0, config.hot_sellers_ratio, rows) > 0
    hot_seller = (last_base0_person_id(n) // HOT_RATIO_BATCH) * HOT_RATIO_BATCH
    seller = np.where(hot, hot_seller, next_base0_person_id(n, rng.random(rows), config))
    seller += FIRST_PERSON_ID
    category = FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, rows)
    initial_bid = next_price(rng, rows)
    reserve = initial_bid + next_price(rng, rows)
    # Auctions last on average until the auction num_in_flight_auctions ahead is created.
    events_ahead = config.num_in_flight_auctions * PROPORTION_DENOMINATOR // AUCTION_PROPORTION
    horizon_ms = events_ahead * config.inter_event_delay_us // 1000
    expires = ts + 1 + _uniform_below(rng.random(rows), np.full(rows, max(horizon_ms * 2, 1)))
    words = _Pool(rng, spaces=True)
    text = words.text
    name_len = rng.integers(3, 20, rows).tolist()
    desc_len = rng.integers(3, 100, rows).tolist()
    name_at = words.offsets(rng, rows, 20)
    desc_at = words.offsets(rng, rows, 100)
    heads = [
        (
            aid,
            text[name_at[i] : name_at[i] + name_len[i]].strip(),
            text[desc_at[i] : desc_at[i] + desc_len[i]].strip(),
            ib,
            rs,
            t,
            ex,
            se,
            ca,
        )
        for i, (aid, ib, rs, t, ex, se, ca) in enumerate(
            zip(
                ids.tolist(),
                initial_bid.tolist(),
                reserve.tolist(),
                ts.tolist(),
                expires.tolist(),
                seller.tolist(),
                category.tolist(),
                strict=True,
            )
        )
    ]
    return ids, _padded(rng, _AUCTION, heads, config.avg_auction_bytes)


def _padded(
    rng: np.random.Generator, template: bytes, heads: Sequence[tuple[object, ...]], average: int
) -> list[bytes]:
    """Formats ``template`` with each head and a padding (its last field) that
    brings the value to ``average`` bytes on average."""
    current = np.array([len(template % (*h, b"")) for h in heads], dtype=np.int64)
    lengths = _padding_lengths(rng, current, average).tolist()
    pool = _Pool(rng, spaces=False)
    at = pool.offsets(rng, len(heads), max(lengths, default=0) + 1)
    text = pool.text
    return [template % (*h, text[a : a + n]) for h, a, n in zip(heads, at, lengths, strict=True)]


def _bids(
    rng: np.random.Generator, n: Int64s, ts: Int64s, config: GeneratorConfig
) -> tuple[Int64s, list[bytes]]:
    rows = n.size
    hot_auction = (last_base0_auction_id(n) // HOT_RATIO_BATCH) * HOT_RATIO_BATCH
    auction = np.where(
        rng.integers(0, config.hot_auction_ratio, rows) > 0,
        hot_auction,
        next_base0_auction_id(n, rng.random(rows), config),
    )
    auction += FIRST_AUCTION_ID
    # The second person of the batch, so hot bidders and hot sellers differ.
    hot_bidder = (last_base0_person_id(n) // HOT_RATIO_BATCH) * HOT_RATIO_BATCH + 1
    bidder = np.where(
        rng.integers(0, config.hot_bidders_ratio, rows) > 0,
        hot_bidder,
        next_base0_person_id(n, rng.random(rows), config),
    )
    bidder += FIRST_PERSON_ID
    price = next_price(rng, rows)
    # The value's size without padding, from the digit counts (no formatting twice).
    template = len(_BID % (0, 0, 0, 0, b"")) - 4
    current = template + _digit_counts(auction) + _digit_counts(bidder) + _digit_counts(price)
    current += _digit_counts(ts)
    lengths = _padding_lengths(rng, current, config.avg_bid_bytes).tolist()
    pool = _Pool(rng, spaces=False)
    at = pool.offsets(rng, rows, max(lengths, default=0) + 1)
    text = pool.text
    values = [
        _BID % (a, b, p, t, text[o : o + k])
        for a, b, p, t, o, k in zip(
            auction.tolist(),
            bidder.tolist(),
            price.tolist(),
            ts.tolist(),
            at,
            lengths,
            strict=True,
        )
    ]
    return auction, values


def _keys(ids: Int64s) -> list[bytes]:
    return [b"%d" % i for i in ids.tolist()]


def timestamps(n: Int64s, config: GeneratorConfig, rng: np.random.Generator) -> Int64s:
    ts = config.base_time_ms + (n * config.inter_event_delay_us) // 1000
    if config.out_of_order_fraction > 0:
        late = rng.random(n.size) < config.out_of_order_fraction
        ts = ts - np.where(late, rng.integers(0, config.max_delay_ms + 1, n.size), 0)
    return ts


def generate_chunk(config: GeneratorConfig, chunk: int, stop: int) -> dict[str, Columns]:
    """Events ``chunk * CHUNK`` up to ``min((chunk + 1) * CHUNK, stop)``, by topic.

    The whole chunk is drawn and then cut at ``stop``, so a shorter run is an
    exact prefix of a longer one.
    """
    rng = np.random.default_rng([config.seed, chunk])
    n = np.arange(chunk * CHUNK, (chunk + 1) * CHUNK, dtype=np.int64)
    ts = timestamps(n, config, rng)
    rem = n % PROPORTION_DENOMINATOR
    kinds = {
        "person": (rem < PERSON_PROPORTION, _persons),
        "auction": (
            (rem >= PERSON_PROPORTION) & (rem < PERSON_PROPORTION + AUCTION_PROPORTION),
            _auctions,
        ),
        "bid": (rem >= PERSON_PROPORTION + AUCTION_PROPORTION, _bids),
    }
    out: dict[str, Columns] = {}
    for index, (topic, (mask, make)) in enumerate(kinds.items()):
        sub_rng = np.random.default_rng([config.seed, chunk, index + 1])
        ids, values = make(sub_rng, n[mask], ts[mask], config)
        keep = int(np.count_nonzero(n[mask] < stop))
        out[topic] = Columns(_keys(ids[:keep]), values[:keep], ts[mask][:keep].tolist())
    return out


def generate(config: GeneratorConfig, events: int) -> Iterator[dict[str, Columns]]:
    """The first ``events`` events in chunks of up to :data:`CHUNK`, by topic."""
    for chunk in range(math.ceil(events / CHUNK)):
        yield generate_chunk(config, chunk, events)


def generate_parallel(
    config: GeneratorConfig, events: int, workers: int | None = None
) -> Iterator[dict[str, Columns]]:
    """As :func:`generate`, the chunks made by ``workers`` processes (default: one
    per core, at most 2) and yielded in order, a few chunks ahead of the caller."""
    workers = workers or min(2, os.cpu_count() or 1)
    chunks = math.ceil(events / CHUNK)
    if workers <= 1 or chunks <= 1:
        yield from generate(config, events)
        return
    # A process pool that reports a dead worker (multiprocessing.Pool would wait forever).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending: deque[Future[dict[str, Columns]]] = deque()
        for chunk in range(chunks):
            pending.append(pool.submit(generate_chunk, config, chunk, events))
            if len(pending) > 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def write_embedded(
    path: str, config: GeneratorConfig, events: int, partitions: int, prefix: str = ""
) -> dict[str, int]:
    """Creates topics ``<prefix>person|auction|bid`` in the embedded log at ``path``
    and writes the first ``events`` events; returns the record count per topic."""
    from strom.embedded import EmbeddedLog  # noqa: PLC0415 - the peers' envs have no strom

    counts = dict.fromkeys(TOPICS, 0)
    with EmbeddedLog(path) as log:
        for topic in TOPICS:
            log.create_topic(prefix + topic, partitions=partitions)
        with log.producer() as producer:
            for chunk in generate_parallel(config, events):
                for topic, cols in chunk.items():
                    producer.produce_columns(
                        prefix + topic, cols.keys, cols.values, cols.timestamps
                    )
                    counts[topic] += len(cols)
            producer.flush()
    return counts
