"""State stores: the typed layer over strom's native bytes-in/bytes-out stores."""

from strom.state.key_value import KeyValueStore
from strom.state.session import SessionStore
from strom.state.stores import StoreBuilder, Stores, StoreSupplier
from strom.state.versioned import VersionedKeyValueStore, VersionedRecord
from strom.state.window import WindowStore

__all__ = [
    "KeyValueStore",
    "SessionStore",
    "StoreBuilder",
    "StoreSupplier",
    "Stores",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowStore",
]
