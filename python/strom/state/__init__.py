"""State stores: the typed layer over strom's native bytes-in/bytes-out stores."""

from strom.state.key_value import KeyValueStore
from strom.state.stores import StoreBuilder, Stores, StoreSupplier

__all__ = ["KeyValueStore", "StoreBuilder", "StoreSupplier", "Stores"]
