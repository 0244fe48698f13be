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


def expected_counts() -> dict[str, int]:
    counts: Counter[str] = Counter()
    for user, item, _at, _quantity in ex.ORDER_DATA:
        address = (ex.USER_DATA.get(user) or {}).get("address")
        if address and ex.ITEM_DATA[item]["origin"] == address:
            counts[address] += 1
    return dict(counts)


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
    assert {r.key: r.value for r in records} == expected_counts() == {"Lyon": 2, "Oslo": 1}
    # Result timestamps are the orders' own times.
    assert sorted(r.timestamp for r in records) == [1_000, 3_000, 5_000]
    # Describe shows the split at the through topic.
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
