"""What the verbs share: one-line errors, client settings (``--config``,
``--command-config``), loading an app from ``MODULE:NAME`` and the quick
check that a Kafka bootstrap list can be reached."""

from __future__ import annotations

import functools
import importlib
import os
import queue
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from strom.builder import StreamsBuilder
from strom.cli.properties import read_properties
from strom.errors import StromError
from strom.topology import Topology

F = TypeVar("F", bound=Callable[..., Any])

# How long the bootstrap check waits for a server to answer.
CONNECT_TIMEOUT_S = 5.0


class CommandError(click.ClickException):
    """A failure reported as one line on stderr, ``strom VERB: message``;
    exit code 1."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        ctx = click.get_current_context(silent=True)
        self.command = ctx.command_path if ctx is not None else "strom"

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"{self.command}: {self.format_message()}", file=file or sys.stderr)


class BadInput(CommandError):
    """Input that names nothing usable (exit code 2, as for bad usage)."""

    exit_code = 2


class UserCodeError(CommandError):
    """The app's own code raised: its traceback, then the one line."""

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause

    def show(self, file: IO[Any] | None = None) -> None:
        out = file or sys.stderr
        traceback.print_exception(type(self.cause), self.cause, self.cause.__traceback__, file=out)
        super().show(out)


def reports_errors(command: F) -> F:
    """Turns the library's errors (``StromError``) into one line and exit code 1."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except StromError as exc:
            raise CommandError(str(exc)) from exc

    return wrapper  # type: ignore[return-value]


# --- client settings ----------------------------------------------------------


def _parse_settings(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    settings: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"takes KEY=VALUE, got {item!r}")
        settings[key.strip()] = value
    return settings


def settings_options(what: str) -> Callable[[F], F]:
    """``--config KEY=VALUE`` (repeatable) and ``--command-config FILE`` (a Java
    properties file, as Kafka's tools take it); ``--config`` wins over the file."""

    def decorate(command: F) -> F:
        command = click.option(
            "--command-config",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            metavar="FILE",
            help=f"a properties file of {what} (key=value lines, as Kafka's tools read it)",
        )(command)
        return click.option(
            "--config",
            "settings",
            multiple=True,
            metavar="KEY=VALUE",
            callback=_parse_settings,
            help=f"one of {what} (repeatable; wins over --command-config)",
        )(command)

    return decorate


def merged_settings(command_config: Path | None, settings: dict[str, str]) -> dict[str, str]:
    """The settings of ``--command-config`` overridden by those of ``--config``."""
    return (read_properties(command_config) if command_config is not None else {}) | settings


# --- MODULE:NAME --------------------------------------------------------------


def app_dir_option(command: F) -> F:
    return click.option(
        "--app-dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        metavar="DIR",
        help="import the app's module from DIR too (before the current directory)",
    )(command)


def load_topology(spec: str, app_dir: Path | None = None) -> Topology:
    """The ``Topology`` named by ``MODULE:NAME``: a Topology, a StreamsBuilder,
    or a function returning either. ``MODULE`` is imported as ``python -m``
    imports it: ``app_dir`` first, then the current directory, then
    ``sys.path``. A spec that names nothing usable is a one-line error (exit
    code 2); an exception raised by the app's own code keeps its traceback."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise BadInput(f"APP must be MODULE:NAME (e.g. myapp:topology), got {spec!r}")
    search = [str(app_dir.resolve())] if app_dir is not None else []
    search.append(os.getcwd())
    for directory in reversed(search):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    importlib.invalidate_caches()
    try:
        found: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise UserCodeError(f"importing {module_name!r} failed: {exc}", exc) from exc
        hint = ""
        if module_name.endswith(".py"):
            hint = f"; MODULE is a module name: {module_name.removesuffix('.py')}:{attribute}"
        raise BadInput(
            f"no module named {exc.name!r} (looked in {', '.join(search)} and sys.path){hint}"
        ) from None
    except Exception as exc:
        raise UserCodeError(f"importing {module_name!r} failed: {exc!r}", exc) from exc
    where = getattr(found, "__file__", None) or module_name
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:  # noqa: PERF203 - reported at the first miss
            raise BadInput(f"{module_name} ({where}) has no attribute {attribute!r}") from None
    if not isinstance(found, (Topology, StreamsBuilder)) and callable(found):
        try:
            found = found()
        except Exception as exc:
            raise UserCodeError(f"{spec}() raised {exc!r}", exc) from exc
    if isinstance(found, StreamsBuilder):
        found = found.build()
    if not isinstance(found, Topology):
        raise BadInput(
            f"{spec} is a {type(found).__name__}, not a Topology, a StreamsBuilder "
            "or a function returning one"
        )
    return found


# --- bootstrap servers --------------------------------------------------------


def check_bootstrap(servers: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fails within ``timeout`` with one line when no server of a Kafka
    ``host:port,…`` list accepts a connection (librdkafka would retry for a
    minute, logging every attempt)."""
    addresses = []
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise BadInput(
                f"bootstrap servers {servers!r}: {item.strip()!r} is not host:port "
                "(the embedded log is 'embedded:PATH')"
            )
        addresses.append((host.strip("[]"), int(port)))
    answers: queue.Queue[str | None] = queue.Queue()

    def probe(host: str, port: int) -> None:
        answers.put(_connect(host, port, timeout))

    for address in addresses:
        # Daemon threads: a name lookup that hangs must not hold up the exit.
        threading.Thread(target=probe, args=address, daemon=True).start()
    problems = []
    for _ in addresses:
        try:
            problem = answers.get(timeout=timeout)
        except queue.Empty:
            problems.append(f"no answer within {timeout:.0f} s")
            break
        if problem is None:
            return
        problems.append(problem)
    raise CommandError(f"cannot reach the Kafka cluster at {servers}: {'; '.join(problems)}")


def _connect(host: str, port: int, timeout: float) -> str | None:
    """None when ``host:port`` accepts a TCP connection, else why not."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"{host!r} does not resolve ({exc.strerror or exc})"
    problem = f"{host}:{port}: no address"
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout)
                sock.connect(address)
                return None
        except OSError as exc:  # noqa: PERF203 - one attempt per address
            problem = f"{host}:{port}: {exc.strerror or exc}"
    return problem
