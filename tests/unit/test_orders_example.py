"""The orders/users/items example (examples/orders.py) on the test driver and
on the embedded log, against the same computation in plain Python."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

from strom import serdes
from strom.testing import TopologyTestDriver

EXAMPLE = Path(__file__).parents[2] / "examples" / "orders.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("orders_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ex = load_example()


def local_purchases() -> list[tuple[str, int]]:
    """(address, order time) of every purchase of a locally made item."""
    out = []
    for user, item, at, _quantity in ex.ORDER_DATA:
        address = (ex.USER_DATA.get(user) or {}).get("address")
        if address and ex.ITEM_DATA[item]["origin"] == address:
            out.append((address, at))
    return out


def expected_counts() -> dict[str, int]:
    return dict(Counter(address for address, _ in local_purchases()))


def expected_hourly() -> dict[tuple[str, int], int]:
    return dict(Counter((a, at - at % ex.HOUR_MS) for a, at in local_purchases()))


def test_orders_example_on_the_test_driver() -> None:
    string, json_ = serdes.String(), serdes.Json()
    with TopologyTestDriver(ex.build_topology()) as driver:
        users = driver.create_input_topic(ex.USERS, string, json_)
        items = driver.create_input_topic(ex.ITEMS, string, json_)
        orders = driver.create_input_topic(ex.ORDERS, string, json_)
        users.pipe_key_value_list(ex.USER_DATA.items())
        items.pipe_key_value_list(ex.ITEM_DATA.items())
        for user, item, at, quantity in ex.ORDER_DATA:
            # The record timestamp is wrong on purpose: the extractor uses order_time.
            orders.pipe_input(user, ex.order(user, item, at, quantity), timestamp=0)
        output = driver.create_output_topic(ex.OUTPUT, string, serdes.Long())
        records = output.read_records_to_list()
        hourly = driver.create_output_topic(
            ex.HOURLY, serdes.TimeWindowed(string, ex.HOUR_MS), serdes.Long()
        ).read_key_values_to_map()
    assert {r.key: r.value for r in records} == expected_counts() == {"Lyon": 2, "Oslo": 1}
    # Result timestamps are the orders' own times.
    assert sorted(r.timestamp for r in records) == [1_000, 3_000, 3_601_000]
    assert {(w.key, w.window.start): n for w, n in hourly.items()} == expected_hourly()
    assert expected_hourly() == {("Lyon", 0): 1, ("Oslo", 0): 1, ("Lyon", ex.HOUR_MS): 1}
    # Describe shows the split at the user topic it writes and reads back.
    assert "Sink: KSTREAM-SINK-" in ex.build_topology().describe()


def test_orders_example_runs_on_the_embedded_log(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "log")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == expected_counts()
