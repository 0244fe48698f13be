"""``strom run APP``: run an app in the foreground, with its config from a
file and ``--set``, until SIGINT or SIGTERM (or, with ``--until-end``, until
its input's end offsets as of the start); exit code 1 when it ends in ERROR."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import click

from strom import KafkaStreams
from strom.cli.cluster import embedded_path
from strom.cli.common import (
    BadInput,
    CommandError,
    UserCodeError,
    app_dir_option,
    check_bootstrap,
    load_topology,
    merged_settings,
    reports_errors,
    settings_options,
)
from strom.errors import StromError, TaskError

log = logging.getLogger("strom.cli.run")

LOG_LEVELS = ["debug", "info", "warning", "error"]


@click.command()
@click.argument("app", metavar="APP")
@settings_options("the app's settings (application.id, bootstrap.servers, any StreamsConfig key)")
@click.option(
    "--until-end",
    is_flag=True,
    help="process the input up to its end offsets as of the start, commit and exit",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS),
    default="info",
    show_default=True,
    help="of the lines strom logs on stderr (state changes are info)",
)
@click.option(
    "--ui",
    is_flag=True,
    help="serve the live web view (topology, rates, tasks, stores; needs strom[web]); "
    "its address is logged (ui.port, web.host)",
)
@app_dir_option
@reports_errors
def run(
    app: str,
    config_file: Path | None,
    settings: dict[str, str],
    until_end: bool,
    log_level: str,
    ui: bool,
    app_dir: Path | None,
) -> int:
    """Run APP in the foreground until Ctrl-C or SIGTERM, then close it
    gracefully (commit, release the stores).

    APP is MODULE:NAME of a Topology, a StreamsBuilder or a function returning
    one; MODULE is imported from --app-dir, then the current directory. The
    settings need application.id and bootstrap.servers (host:port,… for
    Kafka, embedded:PATH for the embedded log). Exit code 0 after a clean
    stop, 1 when the app ends in ERROR.
    """
    config = merged_settings(config_file, settings)
    if ui:
        config["ui.enabled"] = "true"
    for key in ("application.id", "bootstrap.servers"):
        if not str(config.get(key, "")).strip():
            raise BadInput(f"no {key}: put it in --config-file, or --set {key}=…")
    servers = str(config["bootstrap.servers"])
    if embedded_path(servers) is None:
        check_bootstrap(servers)
    topology = load_topology(app, app_dir)
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    streams = KafkaStreams(topology, config)
    streams.set_state_listener(lambda new, old: log.info("state %s -> %s", old.name, new.name))
    log.info(
        "running %s as %s on %s; Ctrl-C or SIGTERM stops it",
        app,
        config["application.id"],
        servers,
    )
    try:
        if until_end:
            _run_until_end(streams)
        else:
            streams.run()
    except Exception as exc:
        raise _failure(streams, config, exc) from exc
    log.info("stopped")
    return 0


def _run_until_end(streams: KafkaStreams) -> None:
    """A bounded run; SIGTERM stops it as Ctrl-C does, closing the app."""

    def interrupt(_sig: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        with streams:
            streams.run_until_end()
    except KeyboardInterrupt:
        raise CommandError("interrupted before the end of the input") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _failure(streams: KafkaStreams, config: dict[str, Any], exc: Exception) -> CommandError:
    """How an app that stopped on ``exc`` is reported: with the traceback
    when its own code (or a task) failed, in one line otherwise."""
    if isinstance(exc, CommandError):
        return exc
    state = streams.state.name
    message = f"application {config['application.id']} stopped in {state}: {exc}"
    if isinstance(exc, StromError) and not isinstance(exc, TaskError):
        return CommandError(message)
    return UserCodeError(message, exc)
