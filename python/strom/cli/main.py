"""The ``strom`` command: one Click group, one module per verb, with what
they share in ``strom.cli.common`` (errors, settings, ``MODULE:NAME``),
``strom.cli.cluster`` (topics on the embedded log or Kafka) and
``strom.cli.output`` (progress, ``--quiet``, ``--json``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from strom import __version__
from strom.cli.bench import bench
from strom.cli.demo import demo
from strom.cli.describe import describe
from strom.cli.produce import produce
from strom.cli.replay import replay
from strom.cli.reset import reset
from strom.cli.run import run
from strom.cli.tail import tail
from strom.cli.topics import topics


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="strom")
def cli() -> None:
    """strom: Kafka Streams for Python."""


for command in (run, topics, produce, tail, describe, reset, replay, demo, bench):
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
