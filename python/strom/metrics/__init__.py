"""What ``KafkaStreams.metrics()`` returns: Kafka Streams' metrics, keyed by
:class:`MetricName` (name, group, tags) as Kafka's ``Map<MetricName, Metric>``,
each read on demand. ``strom.metrics.prometheus`` serves them over HTTP.

A leaf: no strom imports, so the runtime and the exporter may both use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RECORDING_LEVELS", "Metric", "MetricName", "Metrics"]

# Kafka's Sensor.RecordingLevel: a metric is recorded when its level is at
# most the configured ``metrics.recording.level``.
RECORDING_LEVELS = ("INFO", "DEBUG", "TRACE")


@dataclass(frozen=True)
class MetricName:
    """Kafka's ``MetricName``: equal names have equal name, group and tags
    (the description is not part of the identity)."""

    name: str
    group: str
    tags: Mapping[str, str] = field(default_factory=dict)
    description: str = field(default="", compare=False)

    def __hash__(self) -> int:
        return hash((self.name, self.group, tuple(sorted(self.tags.items()))))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetricName):
            return NotImplemented
        return (self.name, self.group, dict(self.tags)) == (
            other.name,
            other.group,
            dict(other.tags),
        )


class Metric:
    """Kafka's ``Metric``: its name, and its value read when asked
    (a float; ``nan`` when nothing was measured yet; a few client-level
    metrics, such as ``state``, are strings as in Kafka)."""

    __slots__ = ("_read", "metric_name")

    def __init__(self, metric_name: MetricName, read: Callable[[], float | str]) -> None:
        self.metric_name = metric_name
        self._read = read

    def metric_value(self) -> float | str:
        value = self._read()
        return value if isinstance(value, str) else float(value)

    def __repr__(self) -> str:
        name = self.metric_name
        return f"Metric({name.name!r}, {name.group!r}, {self.metric_value()!r})"


class Metrics(Mapping[MetricName, Metric]):
    """The metrics of one ``KafkaStreams`` instance, as of the call (tasks
    that move later are not followed; call ``metrics()`` again)."""

    def __init__(self, metrics: list[Metric], totals: Mapping[str, int]) -> None:
        self._metrics = {m.metric_name: m for m in metrics}
        self._totals = dict(totals)

    def __getitem__(self, key: MetricName | str) -> Metric | Any:
        # A plain string reads strom's instance-wide totals (records-processed,
        # dropped-records, skipped-records, restored-records, …), as
        # metrics() returned them before Kafka's metric names.
        if isinstance(key, str):
            return self._totals[key]
        return self._metrics[key]

    def __iter__(self) -> Iterator[MetricName]:
        return iter(self._metrics)

    def __len__(self) -> int:
        return len(self._metrics)

    def totals(self) -> dict[str, int]:
        """strom's instance-wide counters by name."""
        return dict(self._totals)

    def find(self, name: str, group: str | None = None, **tags: str) -> list[Metric]:
        """The metrics called ``name`` (in ``group``) whose tags include
        ``tags`` (keyword arguments use ``_`` for ``-``: ``task_id="0_1"``)."""
        wanted = {k.replace("_", "-"): v for k, v in tags.items()}
        return [
            m
            for n, m in self._metrics.items()
            if n.name == name
            and (group is None or n.group == group)
            and all(n.tags.get(k) == v for k, v in wanted.items())
        ]

    def value(self, name: str, group: str | None = None, **tags: str) -> float:
        """The sum of the numeric metrics :meth:`find` returns (``nan`` when none;
        for a metric of one task or partition, pass its tags)."""
        found = [m.metric_value() for m in self.find(name, group, **tags)]
        numbers = [v for v in found if isinstance(v, float) and not math.isnan(v)]
        if not numbers:
            return math.nan
        return math.fsum(numbers)
