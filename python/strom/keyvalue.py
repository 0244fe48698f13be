"""KeyValue: a key and a value (Kafka's ``KeyValue``)."""

from __future__ import annotations

from typing import Any, NamedTuple


class KeyValue(NamedTuple):
    """A key and a value. Callbacks that return a pair may return a
    ``KeyValue`` or a plain tuple."""

    key: Any
    value: Any
