"""strom's exception hierarchy: every error the library raises is a StromError.

The native module raises these classes too (it maps its error enum onto them), so
``except strom.errors.CorruptLogError`` catches a corrupt segment found in Rust.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CorruptLogError",
    "LogInUseError",
    "OffsetOutOfRangeError",
    "SerializationError",
    "StoreError",
    "StromError",
    "TaskError",
    "TopologyError",
    "UnknownTopicError",
]


class StromError(Exception):
    """Base class of every strom error."""


class ConfigError(StromError, ValueError):
    """A configuration key or value (or an argument) is invalid."""


class TopologyError(StromError):
    """The topology is invalid: unknown store, duplicate name, co-partitioning mismatch…"""


class SerializationError(StromError):
    """A serde could not (de)serialize a key or value."""


class StoreError(StromError):
    """A state store failed or was used wrongly."""


class CorruptLogError(StromError):
    """A log or store file is corrupt somewhere other than a torn tail."""


class LogInUseError(StromError):
    """Another process holds the embedded log."""


class UnknownTopicError(StromError, KeyError):
    """A topic (or partition) that does not exist was named."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class OffsetOutOfRangeError(StromError):
    """An offset outside a partition's log start/end was asked for."""


class TaskError(StromError):
    """A task failed while processing; wraps the cause with task, node and record."""
