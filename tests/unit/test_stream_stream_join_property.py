"""Random stream-stream join inputs against Python models of Kafka's semantics.

The inner-join model is brute force: every earlier record of the other side
with the same key, inside the window and not yet expired from that side's
window store. The left/outer model replays Kafka's KStreamKStreamJoin
algorithm (shared stream time, lower bound of waiting timestamps, the
outer-join store ordered by timestamp, side and key) on plain lists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import JoinWindows
from strom.testing import TopologyTestDriver

INT, S = serdes.Integer(), serdes.String()
NO_MIN = 2**63 - 1

Row = tuple[str, Any, Any, int]  # (side "L"/"R", key, value, timestamp)


def joiner(left: Any, right: Any) -> str:
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


@dataclass
class Side:
    records: list[tuple[Any, int, Any]] = field(default_factory=list)  # key, ts, value
    observed: int = -1


def fetch(side: Side, key: Any, lo: int, hi: int, retention: int) -> list[tuple[int, Any]]:
    """A window store fetch: same key, ``lo <= ts <= hi``, not expired;
    by timestamp, duplicates in insertion order (sorted() is stable)."""
    found = [
        (ts, value)
        for k, ts, value in side.records
        if k == key and lo <= ts <= hi and ts > side.observed - retention
    ]
    return sorted(found, key=lambda tv: tv[0])


def store(side: Side, key: Any, value: Any, ts: int, retention: int) -> None:
    """KStreamJoinWindow after forwarding: keep non-null records in retention."""
    if key is None or value is None:
        return
    side.observed = max(side.observed, ts)
    if ts > side.observed - retention:
        side.records.append((key, ts, value))


def model(rows: list[Row], windows: JoinWindows, kind: str) -> list[tuple[Any, str, int]]:
    left_outer, right_outer = kind in ("left", "outer"), kind == "outer"
    before, after, grace = windows.before_ms, windows.after_ms, windows.grace_ms
    retention = windows.retention_ms()
    sides = {"L": Side(), "R": Side()}
    # The outer-join store: (ts, side byte: 1 left / 0 right, key) -> values.
    waiting: dict[tuple[int, int, Any], list[Any]] = {}
    stream_time, min_time = -1, NO_MIN
    out: list[tuple[Any, str, int]] = []

    def emit_closed(join_after: int) -> None:
        nonlocal min_time
        if min_time + join_after + grace >= stream_time:
            return
        min_time = NO_MIN
        left_open = right_open = False
        for entry in sorted(waiting):
            ts, side_byte, key = entry
            min_time = ts
            if left_open and right_open:
                break
            look_ahead = after if side_byte == 1 else before
            if ts + look_ahead + grace >= stream_time:
                left_open, right_open = (True, right_open) if side_byte == 1 else (left_open, True)
                continue
            out.extend(
                (key, joiner(value, None) if side_byte else joiner(None, value), ts)
                for value in waiting.pop(entry)
            )

    for side_name, key, value, ts in rows:
        is_left = side_name == "L"
        this, other = sides[side_name], sides["R" if is_left else "L"]
        outer = left_outer if is_left else right_outer
        join_before, join_after = (before, after) if is_left else (after, before)

        def joined(this_value: Any, other_value: Any, left: bool = is_left) -> str:
            return joiner(this_value, other_value) if left else joiner(other_value, this_value)

        stream_time = max(stream_time, ts)
        if outer and key is None and value is not None:
            out.append((None, joined(value, None), ts))
        elif key is not None and value is not None:
            if left_outer and ts == stream_time:
                emit_closed(join_after)
            time_to = max(0, ts + join_after)
            matches = fetch(other, key, max(0, ts - join_before), time_to, retention)
            for other_ts, other_value in matches:
                waiting.pop((other_ts, 0 if is_left else 1, key), None)
                out.append((key, joined(value, other_value), max(ts, other_ts)))
            if outer and not matches:
                if time_to < stream_time:
                    out.append((key, joined(value, None), ts))
                else:
                    min_time = min(min_time, ts)
                    waiting.setdefault((ts, 1 if is_left else 0, key), []).append(value)
        store(this, key, value, ts, retention)
    return out


def run(rows: list[Row], windows: JoinWindows, kind: str) -> list[tuple[Any, str, int]]:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    join(right, joiner, windows).to("out", value_serde=S)
    with TopologyTestDriver(builder.build()) as driver:
        inputs = {
            "L": driver.create_input_topic("left", INT, S),
            "R": driver.create_input_topic("right", INT, S),
        }
        for side, key, value, ts in rows:
            inputs[side].pipe_input(key, value, ts)
        records = driver.create_output_topic("out", INT, S).read_records_to_list()
    return [(r.key, r.value, r.timestamp) for r in records]


@st.composite
def inputs(draw: st.DrawFn) -> tuple[list[Row], JoinWindows]:
    count = draw(st.integers(min_value=0, max_value=40))
    rows: list[Row] = []
    for i in range(count):
        side = draw(st.sampled_from("LR"))
        key = draw(st.one_of(st.integers(min_value=0, max_value=2), st.none()))
        # Multiples of 5, like the windows, so window bounds are hit often.
        ts = 5 * draw(st.integers(min_value=0, max_value=40))
        value = draw(st.sampled_from([f"{side}{i}", f"{side}{i}", f"{side}{i}", None]))
        rows.append((side, key, value, ts))
    after = draw(st.sampled_from([0, 5, 20, 60]))
    before = draw(st.sampled_from([0, 5, 20, 60, -after]))
    grace = draw(st.sampled_from([0, 10, 100]))
    windows = JoinWindows.of_time_difference_and_grace(0, grace).after(after).before(before)
    return rows, windows


@settings(max_examples=80, deadline=None)
@given(data=inputs())
def test_inner_join_equals_the_brute_force_model(data: tuple[list[Row], JoinWindows]) -> None:
    rows, windows = data
    assert run(rows, windows, "inner") == model(rows, windows, "inner")


@settings(max_examples=80, deadline=None)
@given(data=inputs(), kind=st.sampled_from(["left", "outer"]))
def test_left_and_outer_joins_equal_kafkas_algorithm(
    data: tuple[list[Row], JoinWindows], kind: str
) -> None:
    rows, windows = data
    assert run(rows, windows, kind) == model(rows, windows, kind)


@settings(max_examples=40, deadline=None)
@given(data=inputs(), kind=st.sampled_from(["left", "outer"]))
def test_every_record_is_joined_or_emitted_once_with_none_after_its_window_closes(
    data: tuple[list[Row], JoinWindows], kind: str
) -> None:
    # A property of the semantics, not of the algorithm: in-order input
    # followed by a record far in the future closes every window, so each
    # non-null left record (and right, for outer) appears in at least one
    # result, and one with None only if it never found a match.
    rows, windows = data
    rows = sorted(rows, key=lambda row: row[3])
    flush = [("L", 99, "flush", 10_000)]
    results = run(rows + flush, windows, kind)
    values = [v for _k, v, _t in results]
    for side, _key, value, _ts in rows:
        if value is None or (side == "R" and kind == "left"):
            continue
        mine = [v for v in values if value in v.split("+")]
        assert mine, (value, results)
        nulls = [v for v in mine if "null" in v.split("+")]
        assert len(nulls) <= 1 and (not nulls or len(mine) == 1), (value, mine)


def merged(lefts: list[Row], rights: list[Row]) -> list[Row]:
    """The order a task processes two partitions in: always the queue whose
    head has the smaller timestamp (timestamps here are distinct)."""
    out, i, j = [], 0, 0
    while i < len(lefts) or j < len(rights):
        if j == len(rights) or (i < len(lefts) and lefts[i][3] < rights[j][3]):
            out.append(lefts[i])
            i += 1
        else:
            out.append(rights[j])
            j += 1
    return out


@settings(max_examples=20, deadline=None)
@given(
    data=inputs(),
    kind=st.sampled_from(["inner", "left", "outer"]),
    split=st.floats(min_value=0, max_value=1),
)
def test_a_restarted_app_continues_exactly_as_one_run(
    data: tuple[list[Row], JoinWindows], kind: str, split: float, tmp_path_factory: Any
) -> None:
    # Stream time, the window stores and the outer-join store are committed
    # and reopened: stopping anywhere and restarting gives what one run gives.
    rows, windows = data
    rows = [(side, key, value, 3 * ts + i % 3) for i, (side, key, value, ts) in enumerate(rows)]
    rows = list({row[3]: row for row in rows}.values())  # distinct timestamps
    order = merged([r for r in rows if r[0] == "L"], [r for r in rows if r[0] == "R"])
    cut = int(split * len(order))
    path = str(tmp_path_factory.mktemp("log"))
    log = EmbeddedLog(path)
    for topic in ("left", "right", "out"):
        log.create_topic(topic)
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=INT, value_serde=S)
    right = builder.stream("right", key_serde=INT, value_serde=S)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[kind]
    join(right, joiner, windows).to("out", value_serde=S)
    topology = builder.build()
    config = {"application.id": "restart", "bootstrap.servers": f"embedded:{path}"}
    for part in (order[:cut], order[cut:]):
        with log.producer() as producer:
            for side, key, value, ts in part:
                producer.produce(
                    "left" if side == "L" else "right",
                    INT.serialize("", key),
                    S.serialize("", value),
                    timestamp=ts,
                )
        with KafkaStreams(topology, config) as app:
            app.run_until_end(timeout=60)
    end = log.end_offsets("out")[0]
    got = [
        (INT.deserialize("", r.key), S.deserialize("", r.value), r.timestamp)
        for r in log.read("out", 0, 0, end)
    ]
    assert got == run(order, windows, kind)
