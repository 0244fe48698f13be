"""Interactive queries v2 (Kafka's IQv2, KIP-796): a typed query against one
store, answered partition by partition with a result or a reason it failed,
by ``KafkaStreams.query(request)``.

    request = StateQueryRequest.in_store("counts").with_query(KeyQuery.with_key("ann"))
    result = app.query(request)
    for partition, answer in result.get_partition_results().items():
        if answer.is_success():
            print(partition, answer.get_result())

Queries: ``KeyQuery`` and ``RangeQuery`` on key-value stores (plain values
of the DSL's timestamped stores, as Kafka's), ``WindowKeyQuery`` on window
stores, ``WindowRangeQuery`` on window stores (a window start range) and
session stores (a key), ``VersionedKeyQuery`` and ``MultiVersionedKeyQuery``
on versioned stores. A leaf: no strom imports."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from strom.state.stores import epoch_millis

__all__ = [
    "FailureReason",
    "KeyQuery",
    "MultiVersionedKeyQuery",
    "Query",
    "QueryResult",
    "RangeQuery",
    "StateQueryRequest",
    "StateQueryResult",
    "TimestampedKeyQuery",
    "TimestampedRangeQuery",
    "VersionedKeyQuery",
    "WindowKeyQuery",
    "WindowRangeQuery",
]

R = TypeVar("R")

Time = int | datetime  # epoch milliseconds, or a datetime (Kafka's Instant)


class Query:
    """A query a store can answer (Kafka's ``Query``)."""


_Point = TypeVar("_Point", bound="_PointQuery")


@dataclass(frozen=True)
class _PointQuery(Query):
    """One key, read through the record cache unless told to skip it."""

    key: Any
    skips_cache: bool = False

    def skip_cache(self: _Point) -> _Point:
        """The same query, read from the store under the record cache (Kafka's
        ``skipCache()``): what the last flush wrote, not the cache's newer
        updates."""
        return replace(self, skips_cache=True)

    def is_skip_cache(self) -> bool:
        return self.skips_cache


@dataclass(frozen=True)
class KeyQuery(_PointQuery):
    """The value of one key of a key-value store."""

    @staticmethod
    def with_key(key: Any) -> KeyQuery:
        return KeyQuery(key)


@dataclass(frozen=True)
class TimestampedKeyQuery(_PointQuery):
    """The value of one key of a timestamped key-value store (a DSL table's
    or aggregation's) with its timestamp: ``(value, timestamp)``, or None."""

    @staticmethod
    def with_key(key: Any) -> TimestampedKeyQuery:
        return TimestampedKeyQuery(key)


_Range = TypeVar("_Range", bound="_KeyRange")


@dataclass(frozen=True)
class _KeyRange(Query):
    """Keys in ``[lower, upper]`` (None: open), in the order of their
    serialized keys within a partition: ascending, or descending after
    ``with_descending_keys``."""

    lower: Any = None
    upper: Any = None
    descending: bool = False

    @classmethod
    def with_range(cls: type[_Range], lower: Any, upper: Any) -> _Range:
        return cls(lower, upper)

    @classmethod
    def with_lower_bound(cls: type[_Range], lower: Any) -> _Range:
        return cls(lower, None)

    @classmethod
    def with_upper_bound(cls: type[_Range], upper: Any) -> _Range:
        return cls(None, upper)

    @classmethod
    def with_no_bounds(cls: type[_Range]) -> _Range:
        return cls()

    def with_descending_keys(self: _Range) -> _Range:
        return replace(self, descending=True)

    def with_ascending_keys(self: _Range) -> _Range:
        return replace(self, descending=False)


@dataclass(frozen=True)
class RangeQuery(_KeyRange):
    """The entries of a key-value store with keys in ``[lower, upper]``
    (None: open), as ``KeyValue``s in the order of their serialized keys
    within a partition: ascending, or descending after
    :meth:`with_descending_keys`."""


@dataclass(frozen=True)
class TimestampedRangeQuery(_KeyRange):
    """As :class:`RangeQuery`, over a timestamped key-value store, each
    ``KeyValue``'s value a ``(value, timestamp)`` pair."""


@dataclass(frozen=True)
class WindowKeyQuery(Query):
    """One key's windows of a window store starting in ``[time_from,
    time_to]``, as ``KeyValue(window_start, value)``."""

    key: Any
    time_from: int
    time_to: int

    @staticmethod
    def with_key_and_window_start_range(key: Any, time_from: Time, time_to: Time) -> WindowKeyQuery:
        return WindowKeyQuery(key, epoch_millis(time_from), epoch_millis(time_to))


@dataclass(frozen=True)
class WindowRangeQuery(Query):
    """Every key's windows of a window store starting in ``[time_from,
    time_to]`` (``with_window_start_range``), or one key's sessions of a
    session store (``with_key``), as ``KeyValue(Windowed(key, window), value)``."""

    key: Any = None
    time_from: int | None = None
    time_to: int | None = None

    @staticmethod
    def with_key(key: Any) -> WindowRangeQuery:
        return WindowRangeQuery(key=key)

    @staticmethod
    def with_window_start_range(time_from: Time, time_to: Time) -> WindowRangeQuery:
        return WindowRangeQuery(time_from=epoch_millis(time_from), time_to=epoch_millis(time_to))


@dataclass(frozen=True)
class VersionedKeyQuery(Query):
    """One key of a versioned store: its latest ``VersionedRecord``, or with
    ``as_of(t)`` the one valid at ``t`` (None when there is none)."""

    key: Any
    as_of_timestamp: int | None = None

    @staticmethod
    def with_key(key: Any) -> VersionedKeyQuery:
        return VersionedKeyQuery(key)

    def as_of(self, at: Time) -> VersionedKeyQuery:
        return replace(self, as_of_timestamp=epoch_millis(at))


@dataclass(frozen=True)
class MultiVersionedKeyQuery(Query):
    """The ``VersionedRecord``s of one key of a versioned store valid at some
    time in ``[from_time, to_time]`` (None: open), newest first unless
    ``with_ascending_timestamps()``; tombstones are left out."""

    key: Any
    from_timestamp: int | None = None
    to_timestamp: int | None = None
    ascending: bool = False

    @staticmethod
    def with_key(key: Any) -> MultiVersionedKeyQuery:
        return MultiVersionedKeyQuery(key)

    def from_time(self, at: Time) -> MultiVersionedKeyQuery:
        return replace(self, from_timestamp=epoch_millis(at))

    def to_time(self, at: Time) -> MultiVersionedKeyQuery:
        return replace(self, to_timestamp=epoch_millis(at))

    def with_ascending_timestamps(self) -> MultiVersionedKeyQuery:
        return replace(self, ascending=True)

    def with_descending_timestamps(self) -> MultiVersionedKeyQuery:
        return replace(self, ascending=False)


class FailureReason(enum.Enum):
    """Why a partition could not answer (Kafka's ``FailureReason``)."""

    UNKNOWN_QUERY_TYPE = "UNKNOWN_QUERY_TYPE"  # the store cannot answer this kind of query
    NOT_ACTIVE = "NOT_ACTIVE"
    NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"
    NOT_PRESENT = "NOT_PRESENT"  # the partition's task is not on this instance
    DOES_NOT_EXIST = "DOES_NOT_EXIST"  # no such partition
    STORE_EXCEPTION = "STORE_EXCEPTION"


@dataclass(frozen=True)
class QueryResult(Generic[R]):
    """One partition's answer: a result, or the reason there is none."""

    result: R | None = None
    failure_reason: FailureReason | None = None
    failure_message: str | None = None

    @staticmethod
    def for_result(result: R) -> QueryResult[R]:
        return QueryResult(result)

    @staticmethod
    def for_failure(reason: FailureReason, message: str) -> QueryResult[Any]:
        return QueryResult(None, reason, message)

    def is_success(self) -> bool:
        return self.failure_reason is None

    def is_failure(self) -> bool:
        return self.failure_reason is not None

    def get_result(self) -> R:
        """The result; raises ValueError for a failure (as Kafka's
        ``IllegalArgumentException``)."""
        if self.failure_reason is not None:
            raise ValueError(
                f"the query failed ({self.failure_reason.value}): {self.failure_message}"
            )
        return self.result  # type: ignore[return-value]

    def get_failure_reason(self) -> FailureReason | None:
        return self.failure_reason

    def get_failure_message(self) -> str | None:
        return self.failure_message


@dataclass(frozen=True)
class StateQueryRequest(Generic[R]):
    """A query of one store: all of its local partitions, or those named
    (``with_partitions``). ``require_active`` is accepted for Kafka's API:
    strom answers from active tasks only."""

    store_name: str
    query: Query
    partitions: frozenset[int] | None = None
    active_only: bool = False

    @staticmethod
    def in_store(name: str) -> _InStore:
        return _InStore(name)

    def with_partitions(self, partitions: Iterable[int]) -> StateQueryRequest[R]:
        return replace(self, partitions=frozenset(partitions))

    def with_all_partitions(self) -> StateQueryRequest[R]:
        return replace(self, partitions=None)

    def require_active(self) -> StateQueryRequest[R]:
        return replace(self, active_only=True)

    def is_all_partitions(self) -> bool:
        return self.partitions is None


@dataclass(frozen=True)
class _InStore:
    name: str

    def with_query(self, query: Query) -> StateQueryRequest[Any]:
        return StateQueryRequest(self.name, query)


@dataclass(frozen=True)
class StateQueryResult(Generic[R]):
    """The answers of the partitions a request reached, by partition."""

    partition_results: dict[int, QueryResult[R]]

    def get_partition_results(self) -> dict[int, QueryResult[R]]:
        return dict(self.partition_results)

    def get_only_partition_result(self) -> QueryResult[R]:
        """The one partition's answer; ValueError unless exactly one answered."""
        if len(self.partition_results) != 1:
            raise ValueError(
                f"the query reached {len(self.partition_results)} partitions "
                f"({sorted(self.partition_results)}), not one"
            )
        return next(iter(self.partition_results.values()))
