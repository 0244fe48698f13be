"""Interactive queries as JSON, across the application's instances: what the
HTTP endpoint answers, apart from HTTP itself (strom.web.server).

A query for one key (a key-value ``get``, a window or session ``fetch``) is
answered by the instance running the key's partition: asked elsewhere, this
instance forwards it there (``iq.forward``, the default) or redirects the
asker (307, with the right host named). A scan (range, prefix, all) is
gathered from every instance running a partition of the store; the answer
names the partitions it covers, and is only returned once every partition
is covered exactly once.

Metadata can be stale right after a rebalance. An instance asked (by
another) for a partition it does not run answers 421 Misdirected; the
asker then reads the group's assignment again and retries, until its
deadline. So an answer always comes from the partition's active task.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strom.errors import InvalidStateStoreError, StoreError
from strom.keyvalue import KeyValue
from strom.metadata import HostInfo, KeyQueryMetadata
from strom.serdes import (
    UUID,
    Boolean,
    ByteArray,
    Double,
    Float,
    Integer,
    Json,
    Long,
    Serde,
    Short,
    String,
)
from strom.state.internals.registry import store_kind
from strom.state.stores import KEY_VALUE_KINDS, SESSION, VERSIONED, WINDOW
from strom.windowed import Windowed

if TYPE_CHECKING:
    from strom.streams import KafkaStreams

log = logging.getLogger("strom.web")

# The header of a query one instance forwards to another: never forwarded again.
FORWARDED = "X-Strom-Forwarded"
MIN_TIME = 0
MAX_TIME = 2**63 - 1
# How long a query waits for metadata to settle (a rebalance) before 503.
QUERY_TIMEOUT_S = 15.0
RETRY_S = 0.1
FORWARD_TIMEOUT_S = 10.0


@dataclass
class Answer:
    """An HTTP answer: status, JSON body, extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


class QueryError(Exception):
    """A query this endpoint cannot answer, with the status to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def to_json(value: Any) -> Any:
    """A store's key or value as JSON: windowed keys as ``{"key", "start",
    "end"}``, bytes as UTF-8 text (base64 when they are not), UUIDs as their
    strings."""
    if isinstance(value, Windowed):
        return {
            "key": to_json(value.key),
            "start": value.window.start,
            "end": value.window.end,
        }
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return repr(value)


def entries(found: Iterable[KeyValue]) -> list[dict[str, Any]]:
    return [{"key": to_json(kv.key), "value": to_json(kv.value)} for kv in found]


def parse_key(serde: Serde[Any], text: str, what: str = "key") -> Any:
    """A key given as URL text, in the type the store's key serde takes."""
    try:
        if isinstance(serde, String):
            return text
        if isinstance(serde, (Long, Integer, Short)):
            return int(text)
        if isinstance(serde, (Double, Float)):
            return float(text)
        if isinstance(serde, Boolean):
            if text not in ("true", "false"):
                raise ValueError("true or false")
            return text == "true"
        if isinstance(serde, UUID):
            return uuid.UUID(text)
        if isinstance(serde, ByteArray):
            return text.encode()
        if isinstance(serde, Json):
            return json.loads(text)
    except ValueError as exc:
        raise QueryError(
            400, f"{what} {text!r} is not a {type(serde).__name__} value: {exc}"
        ) from None
    raise QueryError(
        400, f"keys of serde {type(serde).__name__} cannot be given in a URL (built-in serdes only)"
    )


def _int_param(params: Mapping[str, str], name: str, default: int) -> int:
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise QueryError(400, f"parameter {name}={text!r} is not an integer") from None


class QueryService:
    """The queries of one ``KafkaStreams`` instance."""

    def __init__(self, streams: KafkaStreams, forward: bool = True) -> None:
        self.streams = streams
        self.forward = forward
        self.this_host = streams.config.application_server
        self.timeout_s = QUERY_TIMEOUT_S

    # --- what the store is ----------------------------------------------------
    def _store_def(self, store: str) -> Any:
        store_def = self.streams._topology._internal.stores.get(store)
        if store_def is None:
            known = ", ".join(sorted(self.streams._topology._internal.stores)) or "none"
            raise QueryError(404, f"no state store named {store!r} (stores: {known})")
        return store_def

    def key_serde(self, store: str) -> Serde[Any]:
        """The store's key serde: its local instances', else its definition's,
        else ``default.key.serde``."""
        for local in self.streams._local_stores(store):
            serde: Serde[Any] = local.key_serde
            return serde
        found = self._store_def(store).key_serde or self.streams.config["default.key.serde"]
        if found is None:
            raise QueryError(400, f"store {store!r} has no key serde to read a key with")
        return found  # type: ignore[no-any-return]

    def stores(self) -> list[dict[str, Any]]:
        builder = self.streams._topology._internal
        out = []
        for name, store_def in builder.stores.items():
            entries_now: int | None
            try:
                entries_now = sum(
                    int(s.approximate_num_entries()) for s in self.streams._local_stores(name)
                )
            except StoreError:
                entries_now = None
            out.append(
                {
                    "name": name,
                    "kind": store_kind(store_def).name,
                    "global": name in builder.global_stores,
                    "local_entries": entries_now,
                }
            )
        return out

    # --- queries for one key --------------------------------------------------
    def key(
        self, store: str, key_text: str, params: Mapping[str, str], path: str, forwarded: bool
    ) -> Answer:
        """The key's value (key-value), windows (window: ``from``/``to``
        window starts), sessions (session) or version (versioned: the latest,
        or ``as_of`` a time). ``forward=false`` in the
        query asks for a redirect rather than a forwarded answer."""
        forward = self.forward and params.get("forward", "").lower() != "false"
        kind = store_kind(self._store_def(store)).name
        key = parse_key(self.key_serde(store), key_text)
        if kind in KEY_VALUE_KINDS:

            def read(view: Any) -> Any:
                return {"value": to_json(view.get(key))}

        elif kind == WINDOW:
            time_from = _int_param(params, "from", MIN_TIME)
            time_to = _int_param(params, "to", MAX_TIME)

            def read(view: Any) -> Any:
                return {"windows": entries(view.fetch(key, time_from, time_to))}

        elif kind == VERSIONED:
            as_of = _int_param(params, "as_of", -1) if params.get("as_of") else None

            def read(view: Any) -> Any:
                found = view.get(key, as_of)
                if found is None:
                    return {"value": None}
                return {
                    "value": to_json(found.value),
                    "timestamp": found.timestamp,
                    "valid_to": found.valid_to,
                }

        else:
            assert kind == SESSION

            def read(view: Any) -> Any:
                return {"sessions": entries(view.fetch(key))}

        return self._routed(store, key, key_text, read, path, forwarded, forward)

    def key_metadata(self, store: str, key_text: str) -> Answer:
        key = parse_key(self.key_serde(store), key_text)
        meta = self.streams.query_metadata_for_key(store, key, self.key_serde(store))
        return Answer(200, metadata_json(meta))

    def _routed(
        self,
        store: str,
        key: Any,
        key_text: str,
        read: Callable[[Any], dict[str, Any]],
        path: str,
        forwarded: bool,
        forward: bool,
    ) -> Answer:
        if self.this_host is None:
            # No application.server (the web view alone): this instance's tasks.
            return self._answer(store, key_text, -1, read(self._view(store, None)))
        deadline = time.monotonic() + self.timeout_s
        serde = self.key_serde(store)
        while True:
            meta = self.streams.query_metadata_for_key(store, key, serde)
            if meta.partition < 0 and meta != KeyQueryMetadata.NOT_AVAILABLE:
                # A global store: every instance has all of it.
                return self._answer(store, key_text, -1, read(self._view(store, None)))
            if meta != KeyQueryMetadata.NOT_AVAILABLE:
                if meta.active_host == self.this_host:
                    view = self._view(store, meta.partition)
                    if view is not None:
                        try:
                            return self._answer(store, key_text, meta.partition, read(view))
                        except InvalidStateStoreError:
                            pass  # the task moved under the read: find it again
                elif forwarded:
                    return self._misdirected(store, meta)
                elif not forward:
                    location = f"http://{meta.active_host.endpoint()}{path}"
                    body = {"error": "another instance hosts this key", **metadata_json(meta)}
                    return Answer(307, body, {"Location": location})
                else:
                    answer = self._ask(meta.active_host, path)
                    if answer is not None and answer.status != 421:
                        return answer
            self._pause(deadline, f"store {store!r}: no instance answered for key {key_text!r}")

    def _pause(self, deadline: float, failure: str) -> None:
        """Before asking again: a short pause, the metadata to be read again;
        503 past the deadline."""
        if time.monotonic() >= deadline:
            raise QueryError(
                503, f"{failure} within {self.timeout_s:.0f}s (is the application rebalancing?)"
            )
        time.sleep(RETRY_S)
        self.streams.refresh_metadata()

    def _misdirected(self, store: str, meta: KeyQueryMetadata) -> Answer:
        self.streams.refresh_metadata()
        body = {"error": f"this instance does not host that partition of {store!r}"}
        return Answer(421, body | metadata_json(meta))

    def _answer(self, store: str, key: str, partition: int, body: dict[str, Any]) -> Answer:
        host = None if self.this_host is None else self.this_host.endpoint()
        return Answer(
            200, {"store": store, "key": key, "partition": partition, "host": host, **body}
        )

    def _snapshot(self, store: str, partition: int | None) -> tuple[list[int], Any] | None:
        """This instance's partitions of ``store`` (one, or every local one:
        None) and a view of exactly those, which raises
        InvalidStateStoreError once any of them is no longer this
        instance's; None when it does not run that partition."""
        parts = self.streams._local_store_partitions(store)
        if partition is not None:
            if partition not in parts:
                return None
            parts = {partition: parts[partition]}

        def provider() -> list[Any]:
            live = self.streams._local_store_partitions(store)
            if any(live.get(p) is not s for p, s in parts.items()):
                raise InvalidStateStoreError(f"store {store!r} moved during the query")
            return list(parts.values())

        return sorted(parts), store_kind(self._store_def(store)).view_class(store, provider)

    def _view(self, store: str, partition: int | None) -> Any:
        found = self._snapshot(store, partition)
        return None if found is None else found[1]

    def _local(
        self, store: str, read: Callable[[Any], list[dict[str, Any]]]
    ) -> tuple[list[int], list[dict[str, Any]]]:
        """``read`` of this instance's partitions of ``store``, and which they are."""
        found = self._snapshot(store, None)
        assert found is not None
        parts, view = found
        return parts, read(view)

    def _ask(self, host: HostInfo, path: str) -> Answer | None:
        """The answer of another instance; None when it cannot be reached
        (it may have just left the group)."""
        request = urllib.request.Request(
            f"http://{host.endpoint()}{path}", headers={FORWARDED: "1"}
        )
        try:
            with urllib.request.urlopen(request, timeout=FORWARD_TIMEOUT_S) as response:
                return Answer(response.status, json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                body = {"error": str(exc)}
            return Answer(exc.code, body)
        except (OSError, ValueError) as exc:
            log.debug("interactive queries: %s did not answer (%s)", host, exc)
            return None

    # --- scans --------------------------------------------------------------
    def scan(
        self,
        store: str,
        op: str,
        params: Mapping[str, str],
        path: str,
        local_only: bool,
    ) -> Answer:
        """``op`` ("range", "prefix", "all") over every partition: this
        instance's own (``local_only``, what one instance asks another), or
        gathered from every instance running a partition."""
        read = self._scan_reader(store, op, params)
        builder = self.streams._topology._internal
        if local_only or store in builder.global_stores:
            parts, found = self._local(store, read)
            return Answer(200, {"partitions": parts, "entries": found})
        expected = list(range(self.streams._store_partition_count(store)))
        if not self.forward or self.this_host is None:
            # Only this instance's partitions, and who has the others.
            parts, found = self._local(store, read)
            others = sorted(
                m.host_info.endpoint()
                for m in self.streams.streams_metadata_for_store(store)
                if m.host_info != self.this_host and store in m.state_store_names
            )
            body = {"store": store, "partitions": parts, "entries": found}
            return Answer(200, body | {"partial": parts != expected, "others": others})
        deadline = time.monotonic() + self.timeout_s
        while True:
            gathered = self._gather(store, read, path)
            if gathered is not None:
                covered, found = gathered
                if sorted(covered) == expected:
                    return Answer(200, {"store": store, "partitions": expected, "entries": found})
            self._pause(deadline, f"store {store!r}: not every partition answered")

    def _gather(
        self, store: str, read: Callable[[Any], list[dict[str, Any]]], path: str
    ) -> tuple[list[int], list[dict[str, Any]]] | None:
        covered: list[int] = []
        found: list[dict[str, Any]] = []
        hosts = [
            m.host_info
            for m in self.streams.streams_metadata_for_store(store)
            if store in m.state_store_names
        ]
        for host in hosts:
            if host == self.this_host:
                try:
                    parts, local = self._local(store, read)
                except InvalidStateStoreError:
                    return None
                covered += parts
                found += local
                continue
            answer = self._ask(host, path)
            if answer is None or answer.status != 200:
                return None
            covered += answer.body["partitions"]
            found += answer.body["entries"]
        return covered, found

    def _scan_reader(
        self, store: str, op: str, params: Mapping[str, str]
    ) -> Callable[[Any], list[dict[str, Any]]]:
        kind = store_kind(self._store_def(store)).name
        serde = self.key_serde(store)
        reverse = params.get("reverse", "").lower() in ("1", "true", "yes")

        def bound(name: str) -> Any:
            text = params.get(name)
            return None if text is None else parse_key(serde, text, name)

        if op == "prefix" and kind in KEY_VALUE_KINDS:
            prefix = bound("prefix")
            if prefix is None:
                raise QueryError(400, "a prefix scan needs ?prefix=…")
            return lambda view: entries(view.prefix_scan(prefix))
        if op == "range" and kind in KEY_VALUE_KINDS:
            lo, hi = bound("from"), bound("to")
            if reverse:
                return lambda view: entries(view.reverse_range(lo, hi))
            return lambda view: entries(view.range(lo, hi))
        if op == "all" and kind in KEY_VALUE_KINDS:
            return lambda view: entries(view.reverse_all() if reverse else view.all())
        if kind == WINDOW and op in ("range", "all"):
            lo, hi = (bound("from"), bound("to")) if op == "range" else (None, None)
            t0 = _int_param(params, "time_from", MIN_TIME)
            t1 = _int_param(params, "time_to", MAX_TIME)
            if reverse:
                return lambda view: entries(view.backward_fetch_range(lo, hi, t0, t1))
            return lambda view: entries(view.fetch_range(lo, hi, t0, t1))
        if kind == SESSION and op in ("range", "all"):
            lo, hi = (bound("from"), bound("to")) if op == "range" else (None, None)
            if reverse:
                return lambda view: entries(view.backward_fetch_range(lo, hi))
            return lambda view: entries(view.fetch_range(lo, hi))
        raise QueryError(400, f"store {store!r} is a {kind} store: it has no {op!r} scan")


def metadata_json(meta: KeyQueryMetadata) -> dict[str, Any]:
    return {
        "active_host": meta.active_host.endpoint(),
        "standby_hosts": sorted(h.endpoint() for h in meta.standby_hosts),
        "partition": meta.partition,
    }
