"""Java ``.properties`` files, as Kafka's tools read ``--command-config``
(``java.util.Properties.load``): ``key=value``, ``key: value`` or
``key value`` lines, ``#``/``!`` comments, backslash line continuations and
escapes (``\\t``, ``\\n``, ``\\uXXXX``, ``\\=``, …)."""

from __future__ import annotations

import os
from pathlib import Path

from strom.errors import ConfigError

__all__ = ["parse_properties", "read_properties"]

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """The properties of the file at ``path`` (UTF-8, which covers the
    ASCII-with-``\\u``-escapes files Java writes)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read properties file {os.fspath(path)}: {exc}") from exc
    return parse_properties(text, source=os.fspath(path))


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The properties of ``text``; a later duplicate key wins, as in Java."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        out[_unescape(key, source, number)] = _unescape(value, source, number)
    return out


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Non-blank, non-comment lines with their continuations joined, each
    with its first line's number."""
    lines: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(_WHITESPACE)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending, start = "", number
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        lines.append((start, pending + line))
        pending = None
    if pending is not None:
        lines.append((start, pending))
    return lines


def _split(line: str) -> tuple[str, str]:
    """Key and raw value: the key ends at the first unescaped ``=``, ``:`` or
    whitespace; whitespace and one ``=`` or ``:`` separate it from the value."""
    i = 0
    while i < len(line) and line[i] not in "=:" + _WHITESPACE:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def _unescape(text: str, source: str, line: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        escaped = text[i + 1]
        if escaped == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ConfigError(f"{source}, line {line}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(escaped, escaped))
            i += 2
    try:  # \uXXXX escapes are UTF-16 code units: join surrogate pairs
        return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}, line {line}: unpaired \\u surrogate escape") from None
