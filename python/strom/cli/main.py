"""The ``strom`` command: one Click group, one module per verb (``demo``,
``reset``, ``replay``; ``run``, ``topics``, ``produce``, ``tail``,
``describe`` and ``bench`` join it the same way), with what they share
(errors, client settings, ``MODULE:NAME``) in ``strom.cli.common``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from strom import __version__
from strom.cli.demo import demo
from strom.cli.replay import replay
from strom.cli.reset import reset


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="strom")
def cli() -> None:
    """strom: Kafka Streams for Python."""


for command in (demo, reset, replay):
    cli.add_command(command)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs ``strom`` with ``argv`` (default: the process's arguments) and
    returns its exit code: 0, 1 when the work failed, 2 for bad usage."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None, prog_name="strom", standalone_mode=False
        )
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
