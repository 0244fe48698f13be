"""Global tables with several stream threads (Kafka's GlobalStreamThread:
one copy of the global stores per instance, bootstrapped before any stream
task runs, then updated while the stream threads read it)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.kafka_support import (
    BASE_TS,
    app_config,
    create_topics,
    latest_by_key,
    produce,
    read_all,
    unique,
)
from tests.kafka_harness import KafkaCluster
from tests.support import wait_until

from strom import KafkaStreams, StreamsBuilder, Topology, serdes


def _join_topology(orders: str, products: str, sink: str) -> Topology:
    builder = StreamsBuilder()
    table = builder.global_table(
        products, key_serde=serdes.String(), value_serde=serdes.String(), materialized="products"
    )
    (
        builder.stream(orders, key_serde=serdes.String(), value_serde=serdes.String())
        .join(table, lambda _k, product: product, lambda o, name: f"{o}={name}")
        .to(sink, key_serde=serdes.String(), value_serde=serdes.String())
    )
    return builder.build()


def test_global_table_join_with_two_stream_threads(kafka: KafkaCluster, tmp_path: Path) -> None:
    boot = kafka.bootstrap_servers
    orders, products, sink = unique("orders"), unique("products"), unique("out")
    create_topics(boot, {orders: 4, products: 3, sink: 2})
    names = {f"p{i}": f"product-{i}" for i in range(20)}
    produce(boot, products, ((k.encode(), v.encode(), BASE_TS) for k, v in names.items()))
    first = [(f"o{i}", f"p{i % 25}") for i in range(200)]  # p20..p24 unknown yet
    produce(boot, orders, ((o.encode(), p.encode(), BASE_TS + i) for i, (o, p) in enumerate(first)))
    config = app_config(boot, unique("global2"), str(tmp_path), **{"num.stream.threads": 2})
    with KafkaStreams(_join_topology(orders, products, sink), config) as app:
        # Bootstrapped before any task ran: every known product joins.
        app.run_until_end(timeout=120)
        threads = app._local_tasks()
        assert len(threads) == 2 and all(threads.values()), threads
        expected = {o: f"{p}={names[p]}" for o, p in first if p in names}
        assert latest_by_key(read_all(boot, sink), serdes.String(), serdes.String()) == expected

        # Updates arrive through the global thread while the stream threads run.
        more = {f"p{i}": f"product-{i}" for i in range(20, 25)}
        produce(boot, products, ((k.encode(), v.encode(), BASE_TS + 1) for k, v in more.items()))
        wait_until(
            lambda: all(app.store("products").get(k) == v for k, v in more.items()),
            timeout=60,
            what="the global store to apply the new products",
        )
        second = [(f"o{i}", f"p{i % 25}") for i in range(200, 300)]
        produce(
            boot,
            orders,
            ((o.encode(), p.encode(), BASE_TS + i) for i, (o, p) in enumerate(second, 200)),
        )
        app.run_until_end(timeout=120)
    names |= more
    expected |= {o: f"{p}={names[p]}" for o, p in second}
    assert latest_by_key(read_all(boot, sink), serdes.String(), serdes.String()) == expected
