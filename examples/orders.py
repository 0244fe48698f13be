"""Orders, users and items: purchases of locally made items per address.

Orders (key: user) are timestamped by their own order time, left-joined with
the users table, kept when the user has an address, re-keyed by item and
repartitioned through a topic with a custom partitioner, left-joined with the
items table, kept when the item's origin is the user's address, and counted
per address.

Run on the embedded log: python examples/orders.py [LOG_DIR]
"""

from __future__ import annotations

import json
import sys
import tempfile
import zlib
from typing import Any

from strom import KafkaStreams, StreamsBuilder, Topology, serdes
from strom.embedded import EmbeddedLog
from strom.kstream import TimeWindows

ORDERS, USERS, ITEMS = "orders", "users", "items"
BY_ITEM = "orderuser-repartition-by-item"
OUTPUT = "local-purchases-per-address"
HOURLY = "local-purchases-per-address-hourly"
PARTITIONS = {ORDERS: 3, USERS: 3, ITEMS: 6, BY_ITEM: 6, OUTPUT: 3, HOURLY: 3}
HOUR_MS = 3_600_000


def item_partitioner(item: str, _value: Any, num_partitions: int) -> int:
    """A stable hash of the item name. The items topic must be partitioned
    the same way, or the join after the repartition would miss its items."""
    return zlib.crc32(item.encode()) % num_partitions


def order_time(record: Any, _partition_time: int) -> int:
    return int(record.value["order_time"])


def build_topology() -> Topology:
    string, json_ = serdes.String(), serdes.Json()
    builder = StreamsBuilder()
    users = builder.table(USERS, key_serde=string, value_serde=json_, materialized="users")
    items = builder.table(ITEMS, key_serde=string, value_serde=json_, materialized="items")
    (
        builder.stream(ORDERS, key_serde=string, value_serde=json_, timestamp_extractor=order_time)
        .left_join(users, lambda order, user: {**order, "address": (user or {}).get("address")})
        .filter(lambda _user, order: bool(order["address"]))
        .select_key(lambda _user, order: order["item"])
        .to(BY_ITEM, key_serde=string, value_serde=json_, partitioner=item_partitioner)
    )
    by_address = (
        builder.stream(BY_ITEM, key_serde=string, value_serde=json_)
        .left_join(items, lambda order, item: {**order, "origin": (item or {}).get("origin")})
        .filter(lambda _item, order: order["origin"] == order["address"])
        .group_by(lambda _item, order: order["address"], key_serde=string, value_serde=json_)
    )
    by_address.count("local-purchases").to_stream().to(
        OUTPUT, key_serde=string, value_serde=serdes.Long()
    )
    # The same purchases per one-hour window of order time.
    by_address.windowed_by(TimeWindows.of_size_with_no_grace(HOUR_MS)).count(
        "local-purchases-hourly"
    ).to_stream().to(
        HOURLY, key_serde=serdes.TimeWindowed(string, HOUR_MS), value_serde=serdes.Long()
    )
    return builder.build()


USER_DATA = {
    "alice": {"gender": "F", "address": "Lyon", "age": 31},
    "bob": {"gender": "M", "address": "Oslo", "age": 45},
    "carol": {"gender": "F", "address": None, "age": 27},
}
ITEM_DATA = {
    "cheese": {"price": 12.5, "category": "food", "origin": "Lyon"},
    "sweater": {"price": 80.0, "category": "clothes", "origin": "Oslo"},
    "wine": {"price": 20.0, "category": "drink", "origin": "Lyon"},
}
ORDER_DATA = [
    ("alice", "cheese", 1_000, 2),
    ("alice", "sweater", 2_000, 1),
    ("bob", "sweater", 3_000, 1),
    ("carol", "wine", 4_000, 6),
    ("alice", "wine", 3_601_000, 1),  # the next hour
    ("dave", "cheese", 3_602_000, 1),
]


def order(user: str, item: str, at: int, quantity: int) -> dict[str, Any]:
    return {"user": user, "item": item, "order_time": at, "quantity": quantity}


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="strom-orders-")
    log = EmbeddedLog(path)
    for topic, partitions in PARTITIONS.items():
        if topic not in log.topics():
            log.create_topic(topic, partitions=partitions)
    encode = serdes.Json().serialize
    with log.producer() as producer:
        for name, user in USER_DATA.items():
            producer.produce(USERS, name.encode(), encode(USERS, user))
        for name, item in ITEM_DATA.items():
            partition = item_partitioner(name, item, PARTITIONS[ITEMS])
            producer.produce(ITEMS, name.encode(), encode(ITEMS, item), partition=partition)
    # The tables first, so that the orders find them (a real app would wait
    # for the tables to be bootstrapped, e.g. with global tables).
    config = {"application.id": "orders-example", "bootstrap.servers": f"embedded:{path}"}
    with KafkaStreams(build_topology(), config) as app:
        app.run_until_end()
        with log.producer() as producer:
            for user, item, at, quantity in ORDER_DATA:
                producer.produce(
                    ORDERS, user.encode(), encode(ORDERS, order(user, item, at, quantity))
                )
        app.run_until_end()
        print(json.dumps({kv.key: kv.value for kv in app.store("local-purchases").all()}))


if __name__ == "__main__":
    main()
