"""The names users give DSL operations (Kafka's ``Named``): they name
processors and internal topics, so they must be legal topic names."""

from __future__ import annotations

import re

from strom.errors import TopologyError

_LEGAL = re.compile(r"[A-Za-z0-9._-]+")
MAX_NAME_LENGTH = 249


def check_name(name: str) -> str:
    """``name`` if Kafka's ``Named.validate`` accepts it, else a TopologyError
    that says why."""
    if not isinstance(name, str):
        raise TopologyError(f"a name must be a string, got {name!r}")
    if not name:
        raise TopologyError("a name cannot be empty")
    if name in (".", ".."):
        raise TopologyError(f"a name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise TopologyError(
            f"name {name[:40]!r}… is {len(name)} characters long; at most {MAX_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        raise TopologyError(
            f"name {name!r} is illegal: use ASCII letters, digits, '.', '_' and '-' "
            "(it names processors and internal topics)"
        )
    return name
