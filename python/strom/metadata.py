"""Where the application's instances run what (Kafka's HostInfo,
KeyQueryMetadata, StreamsMetadata, ThreadMetadata and TaskMetadata): the
answers of ``KafkaStreams.query_metadata_for_key``,
``streams_metadata_for_store``, ``metadata_for_all_streams_clients`` and
``metadata_for_local_threads``. A leaf: no strom imports."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

__all__ = [
    "HostInfo",
    "KeyQueryMetadata",
    "LagInfo",
    "StreamsMetadata",
    "TaskMetadata",
    "ThreadMetadata",
    "TopicPartition",
]

_ENDPOINT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]\s]+)):(?P<port>[0-9]+)$")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, order=True)
class HostInfo:
    """An instance's ``application.server``: where its interactive queries
    are served."""

    host: str
    port: int

    UNAVAILABLE_HOST: ClassVar[str] = "unavailable"

    @classmethod
    def build_from_endpoint(cls, endpoint: str) -> HostInfo:
        """``host:port`` (``[v6 address]:port`` for IPv6) as a HostInfo;
        ValueError naming the value when it is not one."""
        match = _ENDPOINT.match(endpoint.strip()) if isinstance(endpoint, str) else None
        port = int(match["port"]) if match else -1
        if match is None or not 0 < port < 65536:
            raise ValueError(
                f"{endpoint!r} is not a host:port endpoint (e.g. 'localhost:8080', '[::1]:8080')"
            )
        return cls(match["v6"] or match["host"], port)

    @classmethod
    def unavailable(cls) -> HostInfo:
        """The host of metadata not known (yet): Kafka's ``HostInfo.unavailable()``."""
        return cls(cls.UNAVAILABLE_HOST, -1)

    def endpoint(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.endpoint()


@dataclass(frozen=True)
class KeyQueryMetadata:
    """Where a key of a store lives: the instance with the active task of
    the key's partition and those with its standbys."""

    active_host: HostInfo
    standby_hosts: frozenset[HostInfo]
    partition: int

    NOT_AVAILABLE: ClassVar[KeyQueryMetadata]


KeyQueryMetadata.NOT_AVAILABLE = KeyQueryMetadata(HostInfo.unavailable(), frozenset(), -1)


@dataclass(frozen=True)
class StreamsMetadata:
    """One instance of the application: its host, the stores and input
    partitions of its active tasks, and those of its standby tasks."""

    host_info: HostInfo
    state_store_names: frozenset[str] = frozenset()
    topic_partitions: frozenset[TopicPartition] = frozenset()
    standby_state_store_names: frozenset[str] = frozenset()
    standby_topic_partitions: frozenset[TopicPartition] = frozenset()

    def host(self) -> str:
        return self.host_info.host

    def port(self) -> int:
        return self.host_info.port


@dataclass(frozen=True)
class LagInfo:
    """How far a local store's copy is behind its changelog partition
    (Kafka's ``LagInfo``): the offset it has reached, the changelog's end
    offset, and the difference."""

    current_offset_position: int
    end_offset_position: int
    offset_lag: int


@dataclass(frozen=True)
class TaskMetadata:
    """A task of a local stream thread."""

    task_id: str
    topic_partitions: frozenset[TopicPartition] = frozenset()
    # Read when the metadata was made (not part of its identity).
    committed_offsets: dict[TopicPartition, int] = field(
        default_factory=dict, compare=False, hash=False
    )
    end_offsets: dict[TopicPartition, int] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class ThreadMetadata:
    """A local stream thread: its name, state and tasks."""

    thread_name: str
    thread_state: str
    active_tasks: frozenset[TaskMetadata] = frozenset()
    standby_tasks: frozenset[TaskMetadata] = frozenset()
    # Its clients' ids (none on the embedded log, which has no clients).
    consumer_client_id: str = ""
    restore_consumer_client_id: str = ""
    producer_client_ids: frozenset[str] = frozenset()
