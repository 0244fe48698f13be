"""StreamsConfig: Kafka Streams' config keys, their defaults and validation."""

from __future__ import annotations

import difflib
import logging
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom import serdes
from strom.errors import ConfigError
from strom.metadata import HostInfo
from strom.metrics import RECORDING_LEVELS
from strom.offset_reset import AutoOffsetReset
from strom.processor import api as extractors
from strom.properties import read_properties
from strom.serdes import Serde

__all__ = ["StreamsConfig"]

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE_V2 = "exactly_once_v2"
EMIT_INTERVAL_WINDOWED = "__emit.interval.ms.kstreams.windowed.aggregation__"
# ``topic.`` keys configure the internal topics (Kafka's StreamsConfig.topicPrefix), not a client.
CLIENT_PREFIXES = (
    "consumer.",
    "producer.",
    "admin.",
    "main.consumer.",
    "restore.consumer.",
    "global.consumer.",
    "topic.",
    # Kafka's rack-aware assignment tags: no client's setting.
    "client.tag.",
)

log = logging.getLogger(__name__)

# Kafka Streams' earlier names of keys strom knows by their 4.x names; a Java
# app's properties still carry them.
_RENAMED = {
    "cache.max.bytes.buffering": "statestore.cache.max.bytes",
    "default.deserialization.exception.handler": "deserialization.exception.handler",
    "default.production.exception.handler": "production.exception.handler",
}

# Client settings Kafka Streams passes to its Java clients under names
# librdkafka spells otherwise.
_CLIENT_RENAMED = {
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
}

_WARM_UP = "strom's assignment is librdkafka's cooperative-sticky, without warm-up tasks"
_RACKS = "strom's assignment is not rack-aware"
_STORES = "strom's DSL stores are its own log-structured stores, not RocksDB"
_CLEANUP = "strom does not delete other tasks' state directories"
_JVM = "a JVM plug-in"

# Kafka Streams keys that concern what strom does not have (RocksDB, its task
# assignor, the JVM's plug-ins): accepted, so a Java app's properties load,
# and kept from the clients (librdkafka refuses unknown keys), with a warning.
_NO_EFFECT = {
    "acceptable.recovery.lag": _WARM_UP,
    "max.warmup.replicas": _WARM_UP,
    "probing.rebalance.interval.ms": _WARM_UP,
    "task.assignor.class": "strom's assignment is librdkafka's cooperative-sticky",
    "rack.aware.assignment.strategy": _RACKS,
    "rack.aware.assignment.tags": _RACKS,
    "rack.aware.assignment.traffic_cost": _RACKS,
    "rack.aware.assignment.non_overlap_cost": _RACKS,
    "group.protocol": "strom's groups use the classic consumer protocol",
    "upgrade.from": "no earlier strom version needs an upgrade path",
    "topology.optimization": "strom builds topologies unoptimized (no source topic as changelog)",
    "ensure.explicit.internal.resource.naming": "not checked by strom",
    "default.dsl.store": _STORES,
    "dsl.store.suppliers.class": _STORES,
    "dsl.store.format": _STORES,
    "rocksdb.config.setter": _STORES,
    "statestore.uncommitted.max.bytes": _STORES,
    "state.cleanup.delay.ms": _CLEANUP,
    "state.cleanup.dir.max.age.ms": _CLEANUP,
    "allow.os.group.write.access": "strom creates state directories with the process's umask",
    "buffered.records.per.partition": "strom buffers what a poll returns (poll.max.records)",
    "poll.ms": "strom's poll waits are its own",
    "task.timeout.ms": "strom retries client calls for a fixed time",
    "log.summary.interval.ms": "strom logs no periodic summary",
    "built.in.metrics.version": "strom has one metrics version",
    "metric.reporters": f"{_JVM} (strom exports metrics with metrics.port)",
    "enable.metrics.push": "strom does not push client metrics",
    "default.client.supplier": _JVM,
    "processor.wrapper.class": _JVM,
    "window.size.ms": "read by Java's windowed deserializers, not by the app",
    "processing.exception.handler.global.enabled": "not read by strom",
    "windowed.inner.class.serde": "read by Java's windowed serdes, not by the app",
}

# Kafka's built-in serdes and handlers by their Java class names, as a Java
# app's properties name them (org.apache.kafka.common.serialization.Serdes$StringSerde).
_JAVA_SERDES: dict[str, type[Serde[Any]]] = {
    "StringSerde": serdes.String,
    "LongSerde": serdes.Long,
    "IntegerSerde": serdes.Integer,
    "ShortSerde": serdes.Short,
    "DoubleSerde": serdes.Double,
    "FloatSerde": serdes.Float,
    "BooleanSerde": serdes.Boolean,
    "UUIDSerde": serdes.UUID,
    "VoidSerde": serdes.Void,
    "ByteArraySerde": serdes.ByteArray,
}
_JAVA_HANDLERS = {
    "LogAndFailExceptionHandler": "log_and_fail",
    "LogAndContinueExceptionHandler": "log_and_continue",
    "DefaultProductionExceptionHandler": "log_and_fail",
    "LogAndFailProcessingExceptionHandler": "log_and_fail",
    "LogAndContinueProcessingExceptionHandler": "log_and_continue",
}


def _java_class(value: Any) -> str | None:
    """The simple name of a Java class name (``a.b.Outer$Inner`` -> ``Inner``)."""
    if not isinstance(value, str) or "." not in value:
        return None
    return value.rsplit(".", 1)[-1].rsplit("$", 1)[-1]


_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(message)


@dataclass(frozen=True)
class _Key:
    default: Any
    check: Callable[[Any], Any]
    doc: str


def _positive_int(name: str, minimum: int = 0) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} must be an integer, got {value!r}") from None
        if isinstance(value, float) and value != number:
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        if number < minimum:
            raise ConfigError(f"{name} must be >= {minimum}, got {number}")
        return number

    return check


def _one_of(name: str, *choices: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
        return str(value)

    return check


def _offset_reset(value: Any) -> str:
    """Kafka's values, ``by_duration:PT1H`` included, or an AutoOffsetReset;
    kept as the config string."""
    try:
        return str(AutoOffsetReset.of(value))
    except ValueError as exc:
        raise ConfigError(f"auto.offset.reset: {exc}") from None


def _non_empty(name: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
        return value

    return check


def _endpoint(name: str) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if value is None:
            return None
        try:
            return HostInfo.build_from_endpoint(value).endpoint()
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc}") from None

    return check


def _flag(name: str) -> Callable[[Any], bool]:
    def check(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes", "on"):
            return True
        if text in ("false", "0", "no", "off"):
            return False
        raise ConfigError(f"{name} must be true or false, got {value!r}")

    return check


def _names_list_serde(value: Any) -> bool:
    """Whether a serde setting names Kafka's ListSerde (its class, or its Java
    class name), whose inner serde comes from ``default.list.*.serde.inner``."""
    return value is serdes.ListSerde or _java_class(value) == "ListSerde"


def _serde(name: str, *, lists: bool = True) -> Callable[[Any], Any]:
    """A serde setting's check. Named by class, ListSerde stays as given
    (``lists``) for ``StreamsConfig`` to build with its inner serde's key."""

    def check(value: Any) -> Any:
        if value is None or isinstance(value, Serde):
            return value
        if _names_list_serde(value):
            if lists:
                return value
            raise ConfigError(
                f"{name} cannot name ListSerde by class (its inner serde would be this same "
                "setting): give a serde object such as serdes.ListSerde(serdes.Integer())"
            )
        if isinstance(value, type) and issubclass(value, Serde):
            return value()
        java = _JAVA_SERDES.get(_java_class(value) or "")
        if java is not None:
            return java()
        raise ConfigError(
            f"{name} must be a strom serde (e.g. serdes.String()) or a Kafka built-in serde's "
            f"Java class name, got {value!r}"
        )

    return check


# The list classes Kafka's ListDeserializer may be configured to build
# (``default.list.*.serde.type``); strom's lists are Python lists either way.
_JAVA_LISTS = ("java.util.ArrayList", "java.util.LinkedList")


def _list_type(name: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None or value is list or value in _JAVA_LISTS:
            return value
        raise ConfigError(
            f"{name} must be {' or '.join(_JAVA_LISTS)} (a Python list either way), got {value!r}"
        )

    return check


def _list_serde(side: str, values: Mapping[str, Any]) -> Serde[Any]:
    """``default.<side>.serde`` set to Kafka's ListSerde by name: a
    ``serdes.ListSerde`` of ``default.list.<side>.serde.inner``."""
    inner_key = f"default.list.{side}.serde.inner"
    inner = values.get(inner_key)
    if inner is None:
        raise ConfigError(
            f"default.{side}.serde is Kafka's ListSerde, which needs its entries' serde: "
            f"set {inner_key!r} (e.g. to serdes.Integer() or "
            "org.apache.kafka.common.serialization.Serdes$IntegerSerde)"
        )
    return serdes.ListSerde(inner)


# Kafka's built-in extractors by their Java class names (a Java app's
# properties name them so).
_JAVA_EXTRACTORS = {
    f"org.apache.kafka.streams.processor.{cls}": fn
    for cls, fn in (
        ("FailOnInvalidTimestamp", extractors.fail_on_invalid_timestamp),
        ("LogAndSkipOnInvalidTimestamp", extractors.log_and_skip_on_invalid_timestamp),
        ("UsePartitionTimeOnInvalidTimestamp", extractors.use_partition_time_on_invalid_timestamp),
        ("WallclockTimestampExtractor", extractors.wallclock_timestamp_extractor),
    )
}


def _extractor(name: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is None or callable(value):
            return value
        if value in _JAVA_EXTRACTORS:
            return _JAVA_EXTRACTORS[value]
        raise ConfigError(
            f"{name} takes a Python function extractor(record, partition_time) -> int, "
            f"or the Java class name of one of Kafka's built-in extractors, got {value!r}"
        )

    return check


def _handler(name: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value in ("log_and_fail", "log_and_continue") or callable(value):
            return value
        java = _JAVA_HANDLERS.get(_java_class(value) or "")
        if java is not None:
            return java
        raise ConfigError(
            f"{name} must be 'log_and_fail', 'log_and_continue' or a callable, got {value!r}"
        )

    return check


_KEYS: dict[str, _Key] = {
    "application.id": _Key(None, _non_empty("application.id"), "consumer group and topic prefix"),
    # The head of the Kafka clients' ids in place of the application.id (see
    # StreamsConfig.client_id_prefix).
    "client.id": _Key(None, _non_empty("client.id"), "prefix of the clients' ids"),
    "bootstrap.servers": _Key(
        None, _non_empty("bootstrap.servers"), "'host:port,…' or 'embedded:PATH'"
    ),
    "processing.guarantee": _Key(
        AT_LEAST_ONCE,
        _one_of("processing.guarantee", AT_LEAST_ONCE, EXACTLY_ONCE_V2),
        "delivery guarantee",
    ),
    "commit.interval.ms": _Key(30_000, _positive_int("commit.interval.ms"), "commit period"),
    "num.stream.threads": _Key(1, _positive_int("num.stream.threads", 1), "threads per app"),
    "num.standby.replicas": _Key(0, _positive_int("num.standby.replicas"), "standby tasks"),
    # None: beside the embedded log (PATH/.state), else tempdir/strom-streams.
    "state.dir": _Key(None, _non_empty("state.dir"), "local state"),
    "statestore.cache.max.bytes": _Key(
        10 * 1024 * 1024, _positive_int("statestore.cache.max.bytes"), "record cache size"
    ),
    "max.task.idle.ms": _Key(0, _positive_int("max.task.idle.ms", -1), "wait for empty inputs"),
    "replication.factor": _Key(-1, _positive_int("replication.factor", -1), "internal topics"),
    "auto.offset.reset": _Key("earliest", _offset_reset, "no offset"),
    "repartition.purge.interval.ms": _Key(
        30_000, _positive_int("repartition.purge.interval.ms"), "purge consumed records"
    ),
    "poll.max.records": _Key(10_000, _positive_int("poll.max.records", 1), "records per poll"),
    "deserialization.exception.handler": _Key(
        "log_and_fail", _handler("deserialization.exception.handler"), "bad input records"
    ),
    # Records a sink cannot serialize or the broker rejects (Kafka's
    # default.production.exception.handler; strom names it like the one above).
    "production.exception.handler": _Key(
        "log_and_fail", _handler("production.exception.handler"), "bad output records"
    ),
    # A record whose processing raises at a node (a user function, a store):
    # Kafka's processing.exception.handler (KIP-1033).
    "processing.exception.handler": _Key(
        "log_and_fail", _handler("processing.exception.handler"), "failed records"
    ),
    # Kafka's internal config: how often (wall clock) a windowed aggregation
    # with EmitStrategy.on_window_close() looks for closed windows.
    EMIT_INTERVAL_WINDOWED: _Key(
        1000, _positive_int(EMIT_INTERVAL_WINDOWED), "emit-final check interval"
    ),
    # Kafka's KIP-1034: records the handlers reject are also written here.
    "errors.dead.letter.queue.topic.name": _Key(
        None, _non_empty("errors.dead.letter.queue.topic.name"), "dead-letter topic"
    ),
    # Kafka's metrics settings (KafkaStreams.metrics()): the level decides
    # which metrics exist; averages, maxima and rates cover num.samples
    # windows of sample.window.ms.
    "metrics.recording.level": _Key(
        "INFO", _one_of("metrics.recording.level", *RECORDING_LEVELS), "which metrics"
    ),
    "metrics.sample.window.ms": _Key(
        30_000, _positive_int("metrics.sample.window.ms", 1), "metric sample window"
    ),
    "metrics.num.samples": _Key(2, _positive_int("metrics.num.samples", 1), "metric samples"),
    # strom's own: the Prometheus exporter (strom[metrics]) serves the metrics
    # and the health checks on this port (None: no exporter; 0: any free port)
    # and address.
    "metrics.port": _Key(None, _positive_int("metrics.port"), "Prometheus exporter port"),
    "metrics.host": _Key("127.0.0.1", _non_empty("metrics.host"), "Prometheus exporter address"),
    # Where this instance serves interactive queries (host:port): other
    # instances learn it from the group (strom.kafka.instances).
    "application.server": _Key(None, _endpoint("application.server"), "IQ endpoint host:port"),
    # strom's own (strom[web]): one HTTP server per instance, for the
    # interactive-query endpoint (on application.server's port) and the live
    # web view (on the same server when both are on, else on ui.port; 0:
    # any free port), bound to web.host (default: application.server's
    # host, else 127.0.0.1).
    "iq.http": _Key(False, _flag("iq.http"), "serve interactive queries over HTTP"),
    "iq.forward": _Key(True, _flag("iq.forward"), "forward queries for other instances' keys"),
    "ui.enabled": _Key(False, _flag("ui.enabled"), "serve the live web view"),
    "ui.port": _Key(0, _positive_int("ui.port"), "web view port without iq.http"),
    "web.host": _Key(None, _non_empty("web.host"), "address the web server binds"),
    # Retention of windowed stores' changelog topics beyond the stores'.
    "windowstore.changelog.additional.retention.ms": _Key(
        24 * 60 * 60 * 1000,
        _positive_int("windowstore.changelog.additional.retention.ms"),
        "windowed changelog retention",
    ),
    # Sources without a timestamp_extractor of their own use it (None: the
    # records' own timestamps, Kafka's FailOnInvalidTimestamp aside).
    "default.timestamp.extractor": _Key(
        None, _extractor("default.timestamp.extractor"), "timestamp extractor"
    ),
    "default.key.serde": _Key(None, _serde("default.key.serde"), "key serde"),
    "default.value.serde": _Key(None, _serde("default.value.serde"), "value serde"),
    # Kafka's ListSerde named by class in default.key.serde or
    # default.value.serde takes its entries' serde from these; the list class
    # is optional in strom (lists are Python lists).
    "default.list.key.serde.inner": _Key(
        None, _serde("default.list.key.serde.inner", lists=False), "ListSerde key entries' serde"
    ),
    "default.list.value.serde.inner": _Key(
        None,
        _serde("default.list.value.serde.inner", lists=False),
        "ListSerde value entries' serde",
    ),
    "default.list.key.serde.type": _Key(
        None, _list_type("default.list.key.serde.type"), "ListSerde key list class"
    ),
    "default.list.value.serde.type": _Key(
        None, _list_type("default.list.value.serde.type"), "ListSerde value list class"
    ),
}


class StreamsConfig(Mapping[str, Any]):
    """Validated configuration of a strom app (keys are Kafka Streams' own).

    Known keys are checked and given their defaults. A key that looks like a
    misspelt known key is an error; any other key (``consumer.``/``producer.``/
    ``admin.``-prefixed, or a plain client key such as ``security.protocol``)
    passes through to the Kafka clients unchanged. A Java app's properties
    load as they are: Kafka's earlier names of keys (``cache.max.bytes.buffering``)
    stand for the current ones, and Kafka Streams keys strom has no use for
    (``topology.optimization``, ``rocksdb.config.setter``, …) are accepted with
    a warning and kept from the clients.
    """

    def __init__(self, props: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        given = dict(props or {})
        given.update({k.replace("_", "."): v for k, v in kwargs.items()})
        values: dict[str, Any] = {}
        for old, new in _RENAMED.items():
            if old not in given:
                continue
            if new in given and given[new] != given[old]:
                raise ConfigError(
                    f"{old} (Kafka's earlier name of {new}) and {new} are both set, "
                    "to different values"
                )
            _warn_once(old, f"config {old!r} is Kafka's earlier name of {new!r}; using it as that")
            given.setdefault(new, given.pop(old))
        for key, value in given.items():
            if not isinstance(key, str):
                raise ConfigError(f"config keys must be strings, got {key!r}")
            if key in _NO_EFFECT or key.startswith("client.tag."):
                reason = _NO_EFFECT.get(key, _RACKS)
                _warn_once(key, f"config {key!r} has no effect in strom: {reason}")
                values[key] = value
            elif key in _KEYS:
                values[key] = _KEYS[key].check(value)
            elif not key.startswith(CLIENT_PREFIXES):
                close = difflib.get_close_matches(key, _KEYS, n=1, cutoff=0.85)
                if close:
                    raise ConfigError(f"unknown config {key!r}; did you mean {close[0]!r}?")
                values[key] = value
            else:
                values[key] = value
        for side in ("key", "value"):
            if _names_list_serde(values.get(f"default.{side}.serde")):
                values[f"default.{side}.serde"] = _list_serde(side, values)
        if values.get("processing.guarantee") == EXACTLY_ONCE_V2:
            # Kafka Streams' default under exactly-once: commit every 100 ms.
            values.setdefault("commit.interval.ms", 100)
        for key, spec in _KEYS.items():
            values.setdefault(key, spec.default)
        self._values = values

    @classmethod
    def from_properties(cls, path: str | Path) -> StreamsConfig:
        """The settings of a Java ``.properties`` file, as a Java app's
        ``StreamsConfig`` reads them (values are text: numbers, flags,
        Kafka's built-in serdes and handlers by class name are understood)."""
        return cls(read_properties(path))

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def require(self, key: str) -> Any:
        """The value of a key that has no default; ConfigError if it is missing."""
        value = self._values.get(key)
        if value is None:
            raise ConfigError(f"missing required config {key!r} ({_KEYS[key].doc})")
        return value

    @property
    def application_id(self) -> str:
        return str(self.require("application.id"))

    def client_id_prefix(self, process_id: str) -> str:
        """The head of an instance's client ids: ``client.id`` (else the
        ``application.id``) and the process id, as Kafka's default
        ``<application.id>-<process id>``; the stream threads' clients add
        ``-StreamThread-<n>-consumer`` and the like. Unlike Kafka's, a given
        ``client.id`` keeps the process id after it: instances find each
        other's by it."""
        return f"{self['client.id'] or self.application_id}-{process_id}"

    @property
    def application_server(self) -> HostInfo | None:
        """``application.server``: where this instance serves interactive queries."""
        endpoint = self._values["application.server"]
        return None if endpoint is None else HostInfo.build_from_endpoint(endpoint)

    @property
    def state_dir(self) -> Path:
        """Where tasks keep local state (``state.dir``, or its default)."""
        if self._values["state.dir"] is not None:
            return Path(self._values["state.dir"])
        embedded = self.embedded_path
        if embedded is not None:
            return Path(embedded) / ".state"
        return Path(tempfile.gettempdir()) / "strom-streams"

    @property
    def embedded_path(self) -> str | None:
        """The log directory when ``bootstrap.servers`` is ``embedded:PATH``."""
        servers = str(self.require("bootstrap.servers"))
        if servers.startswith("embedded:"):
            path = servers.removeprefix("embedded:")
            if not path:
                raise ConfigError("bootstrap.servers 'embedded:' needs a path: 'embedded:PATH'")
            return path
        return None

    def topic_config(self) -> dict[str, str]:
        """``topic.``-prefixed settings (e.g. ``topic.min.insync.replicas``), unprefixed:
        applied to every internal topic."""
        return {
            k.removeprefix("topic."): str(v)
            for k, v in self._values.items()
            if k.startswith("topic.")
        }

    def client_config(self, prefix: str) -> dict[str, Any]:
        """Pass-through settings for one client: plain unknown keys plus
        ``prefix``-ed ones, in librdkafka's names (``receive.buffer.bytes`` is
        its ``socket.receive.buffer.bytes``)."""
        out = {
            k: v
            for k, v in self._values.items()
            if k not in _KEYS and k not in _NO_EFFECT and "." in k
        }
        out = {k: v for k, v in out.items() if not k.startswith(CLIENT_PREFIXES)}
        out.update(
            {k.removeprefix(prefix): v for k, v in self._values.items() if k.startswith(prefix)}
        )
        return {_CLIENT_RENAMED.get(k, k): v for k, v in out.items()}
