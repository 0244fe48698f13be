"""Records as text, for ``strom produce`` (text in) and ``strom tail`` (text
out): one format read and written by both, so ``strom tail T --format json |
strom produce U --format json`` copies a topic.

A key or value is text in the form of its serde: ``string`` as is, ``json``
as JSON, ``long``/``integer``/``short``/``double``/``float`` as numbers,
``boolean`` as true or false, ``uuid`` as its text, ``bytes`` as base64."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable
from typing import Any, cast

import click

from strom import serdes
from strom.cli.cluster import Consumed, Headers, Outgoing
from strom.errors import SerializationError
from strom.serdes import Serde

SERDES: dict[str, Callable[[], Serde[Any]]] = {
    "string": serdes.String,
    "json": serdes.Json,
    "long": serdes.Long,
    "integer": serdes.Integer,
    "short": serdes.Short,
    "double": serdes.Double,
    "float": serdes.Float,
    "boolean": serdes.Boolean,
    "uuid": serdes.UUID,
    "bytes": serdes.ByteArray,
}
_INTEGERS = ("long", "integer", "short")
_FLOATS = ("double", "float")
_BOOLEANS = {"true": True, "false": False}


def serde_options(command: Any) -> Any:
    for side in ("value", "key"):
        command = click.option(
            f"--{side}-serde",
            type=click.Choice(list(SERDES)),
            default="string",
            show_default=True,
            help=f"the {side}s' format (Kafka's serdes of that name; bytes shown as base64)",
        )(command)
    return command


class Codec:
    """One side (key or value) of a record: text or JSON value <-> bytes."""

    def __init__(self, side: str, serde: str, topic: str) -> None:
        self.side, self.name, self.topic = side, serde, topic
        self.serde = SERDES[serde]()

    # --- in: text from produce --------------------------------------------------------
    def from_text(self, text: str) -> bytes | None:
        """``text`` as this serde reads it (a number for long, JSON for json, …)."""
        value: Any = text
        try:
            if self.name == "json":
                value = json.loads(text)
            elif self.name in _INTEGERS:
                value = int(text)
            elif self.name in _FLOATS:
                value = float(text)
            elif self.name == "boolean":
                if text.lower() not in _BOOLEANS:
                    raise ValueError("true or false")
                value = _BOOLEANS[text.lower()]
            elif self.name == "uuid":
                value = uuid.UUID(text)
            elif self.name == "bytes":
                value = base64.b64decode(text, validate=True)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"the {self.side} {text!r} is not {self._what()}: {exc}") from None
        return self._serialize(repr(text), value)

    def _serialize(self, shown: str, value: Any) -> bytes | None:
        try:
            return self.serde.serialize(self.topic, value)
        except SerializationError as exc:  # e.g. out of a short's range
            raise ValueError(
                f"the {self.side} {shown} is not {self._what(a=True)}: {exc}"
            ) from None

    def from_json(self, value: Any) -> bytes | None:
        """A JSON value (from a ``--format json`` line) as this serde's input."""
        if value is None or self.name == "json":
            return self.serde.serialize(self.topic, value)
        expected: dict[str, type | tuple[type, ...]] = {
            "string": str,
            "long": int,
            "integer": int,
            "short": int,
            "double": (int, float),
            "float": (int, float),
            "boolean": bool,
            "uuid": str,
            "bytes": str,
        }
        if not isinstance(value, expected[self.name]) or (
            isinstance(value, bool) and self.name != "boolean"
        ):
            raise ValueError(
                f"the {self.side} {json.dumps(value)} is not {self._what()} "
                f"(--{self.side}-serde {self.name})"
            )
        if self.name in ("bytes", "uuid"):
            return self.from_text(str(value))
        if self.name in _FLOATS:
            value = float(cast(float, value))
        return self._serialize(json.dumps(value), value)

    def _what(self, *, a: bool = False) -> str:
        """What this serde's text is (``a``: what its bytes are)."""
        if a:
            return {
                "long": "a long",
                "integer": "an integer",
                "short": "a short",
                "double": "a double",
                "float": "a float",
                "boolean": "a boolean",
                "uuid": "a UUID",
            }.get(self.name, f"{self.name} data")
        return {
            "string": "a string",
            "json": "JSON",
            "long": "an integer",
            "integer": "an integer",
            "short": "an integer",
            "double": "a number",
            "float": "a number",
            "boolean": "true or false",
            "uuid": "a UUID",
            "bytes": "base64",
        }[self.name]

    # --- out: tail ------------------------------------------------------------------
    def to_json(self, data: bytes | None) -> Any:
        try:
            value = self.serde.deserialize(self.topic, data)
        except SerializationError as exc:
            raise SerializationError(
                f"the {self.side} is not {self._what(a=True)} ({exc})"
            ) from exc
        if isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        if isinstance(value, uuid.UUID):
            return str(value)
        return value

    def to_text(self, data: bytes | None) -> str:
        value = self.to_json(data)
        if value is None:
            return "null"
        if self.name == "json":
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        if isinstance(value, bool):
            return "true" if value else "false"  # as produce reads it
        return str(value)


def parse_json_line(line: str, keys: Codec, values: Codec) -> Outgoing:
    """A ``--format json`` line: ``{"key": …, "value": …, "timestamp": …,
    "partition": …, "headers": [[name, text], …]}``, every field but
    ``value`` optional (what ``strom tail --format json`` prints)."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(record, dict) or "value" not in record:
        raise ValueError('a line is a JSON object with at least a "value"')
    unknown = set(record) - {"key", "value", "timestamp", "partition", "headers", "topic", "offset"}
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(sorted(unknown))}")
    for name in ("timestamp", "partition"):
        if record.get(name) is not None and (
            not isinstance(record[name], int) or isinstance(record[name], bool)
        ):
            raise ValueError(f"{name} must be an integer, got {json.dumps(record[name])}")
    headers: Headers = []
    for pair in record.get("headers") or []:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            raise ValueError(f"a header is [name, text], got {json.dumps(pair)}")
        headers.append((pair[0], None if pair[1] is None else str(pair[1]).encode()))
    return Outgoing(
        keys.from_json(record.get("key")),
        values.from_json(record["value"]),
        record.get("timestamp"),
        record.get("partition"),
        headers or None,
    )


def as_json(record: Consumed, keys: Codec, values: Codec) -> dict[str, Any]:
    """A record as ``strom tail --format json`` prints it (and ``produce`` reads it)."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "key": keys.to_json(record.key),
        "value": values.to_json(record.value),
        "headers": [
            [name, None if data is None else data.decode("utf-8", "backslashreplace")]
            for name, data in record.headers
        ],
    }
