"""What the verbs share: one-line errors, settings (``--config-file``,
``--set``), loading an app from ``MODULE:NAME`` and the quick check that a
Kafka bootstrap list can be reached."""

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
from strom.errors import StromError
from strom.properties import read_properties
from strom.topology import Topology

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

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


# --- settings -----------------------------------------------------------------


def key_values(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """A Click callback: repeated ``KEY=VALUE`` options as a dict."""
    settings: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"takes KEY=VALUE, got {item!r}")
        settings[key.strip()] = value
    return settings


def settings_options(what: str) -> Callable[[F], F]:
    """``--config-file FILE`` (a Java ``.properties`` file, as Kafka's tools
    read it, or a ``.toml`` file) and ``--set KEY=VALUE`` (repeatable, wins
    over the file): the same two options on every verb that takes settings."""

    def decorate(command: F) -> F:
        command = click.option(
            "--set",
            "settings",
            multiple=True,
            metavar="KEY=VALUE",
            callback=key_values,
            help=f"one of {what} (repeatable; wins over --config-file)",
        )(command)
        return click.option(
            "--config-file",
            "--command-config",  # the name Kafka's own tools (reset, admin) give it
            "config_file",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            metavar="FILE",
            help=f"{what}: a .properties file (key=value lines) or a .toml file",
        )(command)

    return decorate


def merged_settings(config_file: Path | None, settings: dict[str, str]) -> dict[str, Any]:
    """The settings of ``--config-file`` overridden by those of ``--set``."""
    return (read_config_file(config_file) if config_file is not None else {}) | settings


def read_config_file(path: Path) -> dict[str, Any]:
    """A ``.properties`` or ``.toml`` file's settings. TOML tables and dotted
    keys give Kafka's dotted names (``[producer] linger.ms = 5`` is
    ``producer.linger.ms``); arrays become comma-separated lists."""
    if path.suffix == ".properties":
        return read_properties(path)
    if path.suffix != ".toml":
        raise BadInput(f"{path}: a config file is .properties or .toml, not {path.suffix!r}")
    try:
        with path.open("rb") as file:
            table = tomllib.load(file)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"cannot read {path}: {exc}") from None
    flat: dict[str, Any] = {}
    _flatten(table, "", flat, path)
    return flat


def _flatten(table: dict[str, Any], prefix: str, out: dict[str, Any], path: Path) -> None:
    for key, value in table.items():
        name = prefix + key
        if isinstance(value, dict):
            _flatten(value, name + ".", out, path)
        elif isinstance(value, list):
            if any(isinstance(v, (dict, list)) for v in value):
                raise BadInput(f"{path}: {name} is a list of tables; a setting is a value")
            out[name] = ",".join(str(v) for v in value)
        elif isinstance(value, (str, int, float, bool)):
            out[name] = value
        else:  # dates and times: no Kafka setting takes one
            raise BadInput(f"{path}: {name} is a {type(value).__name__}; a setting is a value")


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
