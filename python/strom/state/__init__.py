"""State stores: the typed layer over strom's native bytes-in/bytes-out stores."""

from strom.state.key_value import KeyValueStore

__all__ = ["KeyValueStore"]
