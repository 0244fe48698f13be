"""Kafka's metered store layer, for ``metrics.recording.level`` DEBUG only:
the rate and latency of each store operation (``put``, ``get``, ``range``,
``flush``, …) called through the store's object. Everything else passes
through to the store it wraps, attributes set on it included.

The DSL's batch kernels read and write their stores in native batches, not
through these per-record operations, so they are not counted here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["OPERATIONS", "MeteredStore"]

# Kafka's StateStoreMetrics operations, as the store methods strom has.
OPERATIONS = frozenset(
    {
        "put",
        "put_if_absent",
        "put_all",
        "get",
        "delete",
        "remove",
        "range",
        "reverse_range",
        "prefix_scan",
        "all",
        "fetch",
        "fetch_all",
        "backward_fetch",
        "find_sessions",
        "flush",
    }
)


class MeteredStore:
    """Times each operation of ``inner`` into a sensor made by ``sensor()``
    (iterating operations: until the iterator is returned)."""

    def __init__(self, inner: Any, scope: str, sensor: Callable[[], Any]) -> None:
        own = object.__setattr__
        own(self, "inner", inner)
        # Kafka's tag of the store: <scope>-state-id.
        own(self, "scope", scope)
        own(self, "sensors", {})
        own(self, "_sensor", sensor)
        own(self, "_timed", {})

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in OPERATIONS or not callable(attr):
            return attr
        timed = self._timed.get(name)
        if timed is None:
            timed = self._timed[name] = self._time(name, attr)
        return timed

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.inner, name, value)

    def _time(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        sensor = self.sensors.setdefault(name.replace("_", "-"), self._sensor())
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return method(*args, **kwargs)
            finally:
                sensor.record((clock() - started) * 1000)

        return timed
