"""What long work shows: a progress display on stderr (tqdm, drawn only on a
terminal), notes, and a summary on stdout: lines for a person, or one JSON
object with ``--json``. ``--quiet`` keeps the summary and drops the rest.

tqdm rather than rich: the verbs need bars and nothing else (their other
output is plain lines or JSON), and tqdm is one small pure-Python package
with no dependencies of its own that turns itself off when stderr is not a
terminal, so logs and pipes get no control characters."""

from __future__ import annotations

import functools
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import click
from tqdm import tqdm

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Output:
    """How a verb reports: ``quiet`` (summary only), ``as_json`` (the summary
    as one JSON object on stdout, nothing else)."""

    quiet: bool = False
    as_json: bool = False

    @property
    def chatty(self) -> bool:
        return not (self.quiet or self.as_json)

    @contextmanager
    def progress(
        self, description: str, total: float | None = None, unit: str = ""
    ) -> Iterator[Bar]:
        """A progress bar (a counter when ``total`` is None) on stderr while
        the block runs; nothing unless chatty and stderr is a terminal."""
        size = shutil.get_terminal_size((80, 24))
        bar = tqdm(
            total=total,
            desc=description,
            unit=unit or "it",
            unit_scale=bool(unit),
            file=sys.stderr,
            disable=None if self.chatty else True,  # None: only on a terminal
            # The terminal's size; 80 x 24 where it reports none (tqdm hides
            # every bar on a terminal of 0 rows).
            ncols=min(size.columns or 80, 120),
            nrows=size.lines or 24,
            leave=True,
        )
        try:
            yield Bar(bar)
        finally:
            bar.close()

    def note(self, text: str) -> None:
        """A line about the work (stderr), kept clear of any bar drawn."""
        if self.chatty:
            tqdm.write(text, file=sys.stderr)

    def summary(self, data: dict[str, Any], lines: list[str]) -> None:
        """The result: ``lines`` for a person, or ``data`` as JSON."""
        if self.as_json:
            click.echo(json.dumps(data, sort_keys=True))
        else:
            for line in lines:
                click.echo(line)


class Bar:
    """The part of a tqdm bar the verbs use."""

    def __init__(self, bar: tqdm[Any]) -> None:
        self._bar = bar

    def advance(self, amount: float = 1) -> None:
        self._bar.update(amount)

    def to(self, done: float, total: float | None = None) -> None:
        """Shows ``done`` of ``total`` (a new total when given)."""
        if total is not None and total != self._bar.total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def describe(self, text: str) -> None:
        self._bar.set_postfix_str(text, refresh=False)


def output_options(command: F) -> F:
    """``--quiet`` and ``--json``, given to the command as ``output: Output``."""

    @functools.wraps(command)
    def wrapper(*args: Any, quiet: bool, as_json: bool, **kwargs: Any) -> Any:
        return command(*args, output=Output(quiet=quiet, as_json=as_json), **kwargs)

    with_json = click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="print the summary as one JSON object on stdout, and nothing else",
    )(wrapper)
    with_quiet = click.option(
        "--quiet", "-q", is_flag=True, help="no progress display; only the summary"
    )(with_json)
    return cast(F, with_quiet)
