"""Read-only views of stores for interactive queries and the test driver."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from strom.keyvalue import KeyValue
from strom.serdes import Timestamped


class PlainValues:
    """A timestamped key-value store seen with plain values, as Kafka's
    ``getKeyValueStore`` shows a timestamped store."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.name = store.name

    def get(self, key: Any) -> Any:
        pair = self.store.get(key)
        return None if pair is None else pair[0]

    def all(self) -> Iterator[KeyValue]:
        return (KeyValue(kv.key, kv.value[0]) for kv in self.store.all())

    def range(self, key_from: Any, key_to: Any) -> Iterator[KeyValue]:
        return (KeyValue(kv.key, kv.value[0]) for kv in self.store.range(key_from, key_to))

    def approximate_num_entries(self) -> int:
        return int(self.store.approximate_num_entries())


def plain(store: Any) -> Any:
    """The store itself, or a plain-value view of a timestamped one."""
    if isinstance(getattr(store, "value_serde", None), Timestamped):
        return PlainValues(store)
    return store
