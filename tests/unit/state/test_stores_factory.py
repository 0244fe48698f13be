"""The Stores factory validates like Kafka's and builds immutable builders."""

from __future__ import annotations

from datetime import timedelta

import pytest

from strom import serdes
from strom.errors import TopologyError
from strom.state.stores import Stores


def test_window_store_supplier_and_segment_interval() -> None:
    supplier = Stores.persistent_window_store("w", timedelta(hours=1), 60_000, True)
    assert (supplier.kind, supplier.persistent, supplier.retain_duplicates) == (
        "window",
        True,
        True,
    )
    assert supplier.retention_ms == 3_600_000 and supplier.window_size_ms == 60_000
    assert supplier.segment_interval_ms == 1_800_000
    # Kafka's floor of one minute for the segment interval.
    assert Stores.in_memory_window_store("w", 1_000, 1_000).segment_interval_ms == 60_000


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Stores.persistent_window_store("w", 1_000, 5_000), "at least the window size"),
        (lambda: Stores.persistent_session_store("s", -1), "must not be negative"),
        (lambda: Stores.persistent_key_value_store(""), "non-empty"),
        (lambda: Stores.in_memory_window_store("w", "1h", 1), "int milliseconds or a timedelta"),
        (
            lambda: Stores.window_store_builder(Stores.in_memory_key_value_store("kv"), None, None),
            "is a key_value store",
        ),
    ],
)
def test_bad_store_definitions_are_rejected(make: object, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        make()  # type: ignore[operator]


def test_builder_switches_return_new_builders() -> None:
    base = Stores.key_value_store_builder(
        Stores.persistent_key_value_store("counts"), serdes.String(), serdes.Long()
    )
    cached = base.with_caching_enabled().with_logging_enabled({"min.compaction.lag.ms": "10"})
    assert (base.caching, base.logging, base.log_config) == (False, True, {})
    assert (cached.caching, cached.logging, cached.log_config) == (
        True,
        True,
        {"min.compaction.lag.ms": "10"},
    )
    unlogged = cached.with_logging_disabled()
    assert (unlogged.logging, unlogged.log_config, unlogged.name) == (False, {}, "counts")
