"""KStream-KStream joins on a real broker: co-partitioned inputs, a
repartitioned side, and results equal to a brute-force computation."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from tests.integration.kafka_support import app_config, create_topics, produce, read_all, unique
from tests.kafka_harness import KafkaCluster

from strom import KafkaStreams, StreamsBuilder, serdes
from strom.errors import TopologyError
from strom.kstream import JoinWindows

S = serdes.String()
DIFFERENCE = 50


def join_topology(left: str, right: str, sink: str, rekey: bool) -> StreamsBuilder:
    builder = StreamsBuilder()
    left_stream = builder.stream(left, key_serde=S, value_serde=S)
    if rekey:  # values are "key|payload": the join key comes out of the value
        left_stream = left_stream.select_key(lambda _k, v: v.split("|")[0])
    right_stream = builder.stream(right, key_serde=S, value_serde=S)
    # Grace covering the whole input: no record expires, so the inner join's
    # results do not depend on how the partitions interleave.
    windows = JoinWindows.of_time_difference_and_grace(DIFFERENCE, 1_000_000)
    left_stream.join(right_stream, lambda a, b: f"{a}&{b}", windows, key_serde=S).to(
        sink, key_serde=S, value_serde=S
    )
    return builder


@pytest.mark.parametrize("rekey", [False, True])
def test_inner_join_on_kafka_equals_all_pairs_within_the_window(
    kafka: KafkaCluster, tmp_path: Path, rekey: bool
) -> None:
    boot = kafka.bootstrap_servers
    left, right, sink, app_id = unique("left"), unique("right"), unique("out"), unique("join")
    create_topics(boot, {left: 1 if rekey else 3, right: 3, sink: 2})
    rng = random.Random(7)
    lefts = [(f"k{rng.randrange(8)}", f"L{i}", 1_000 + rng.randrange(2_000)) for i in range(300)]
    rights = [(f"k{rng.randrange(8)}", f"R{i}", 1_000 + rng.randrange(2_000)) for i in range(300)]
    produce(
        boot,
        left,
        (
            (b"ignored" if rekey else k.encode(), f"{k}|{v}".encode() if rekey else v.encode(), t)
            for k, v, t in lefts
        ),
    )
    produce(boot, right, ((k.encode(), v.encode(), t) for k, v, t in rights))

    topology = join_topology(left, right, sink, rekey).build()
    with KafkaStreams(topology, app_config(boot, app_id, str(tmp_path))) as app:
        app.run_until_end(timeout=180)

    expected = Counter(
        (lk, f"{lk}|{lv}&{rv}" if rekey else f"{lv}&{rv}", max(lt, rt))
        for lk, lv, lt in lefts
        for rk, rv, rt in rights
        if lk == rk and abs(lt - rt) <= DIFFERENCE
    )
    got = Counter(
        (S.deserialize(sink, m.key()), S.deserialize(sink, m.value()), m.timestamp()[1])
        for m in read_all(boot, sink)
    )
    assert got == expected and sum(expected.values()) > 100


def test_mismatched_partitions_on_kafka_fail_before_processing(
    kafka: KafkaCluster, tmp_path: Path
) -> None:
    boot = kafka.bootstrap_servers
    left, right, sink, app_id = unique("left"), unique("right"), unique("out"), unique("join")
    create_topics(boot, {left: 2, right: 3, sink: 1})
    topology = join_topology(left, right, sink, rekey=False).build()
    with (
        KafkaStreams(topology, app_config(boot, app_id, str(tmp_path))) as app,
        pytest.raises(TopologyError, match="co-partitioned"),
    ):
        app.run_until_end(timeout=60)
