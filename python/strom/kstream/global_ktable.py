"""GlobalKTable: a table replicated in full to every instance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strom.serdes import Serde


class GlobalKTable:
    """A table replicated in full to every instance (Kafka's ``GlobalKTable``):
    bootstrapped from all partitions of its topic before processing starts,
    readable by every task, joined with ``KStream.join(table, key_selector, joiner)``."""

    def __init__(
        self, store_name: str, key_serde: Serde[Any] | None, value_serde: Serde[Any] | None
    ) -> None:
        self.queryable_store_name = store_name
        self._key_serde = key_serde
        self._value_serde = value_serde
