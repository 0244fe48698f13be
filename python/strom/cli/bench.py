"""``strom bench``: the side-by-side benchmark suite (benches/sidebyside:
strom, Kafka Streams, Quix Streams, Bytewax, Faust on one broker). The suite
lives in a checkout of strom, not in the wheel."""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import click

import strom
from strom.cli.common import CommandError, reports_errors
from strom.cli.output import Output, output_options

SUITE = Path("benches") / "sidebyside" / "__init__.py"
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def find_checkout(given: Path | None) -> Path:
    """The checkout holding the suite: ``given``, else the current directory
    or one above it, else the checkout strom itself was installed from."""
    if given is not None:
        candidates = [given]
    else:
        here = Path.cwd().resolve()
        candidates = [here, *here.parents, Path(strom.__file__).resolve().parents[2]]
    for candidate in candidates:
        if (candidate / SUITE).is_file():
            return candidate
    where = given if given is not None else Path.cwd()
    raise CommandError(
        f"no benchmark suite at {where} ({SUITE.parent}): strom bench runs in a checkout "
        "of strom (the suite is not in the wheel); cd into one or pass --checkout DIR"
    )


def _names(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str] | None:
    return None if value is None else [x.strip() for x in value.split(",") if x.strip()]


@click.command()
@click.option("--systems", callback=_names, help="comma-separated (default: all)")
@click.option("--queries", callback=_names, help="comma-separated workloads (default: all)")
@click.option("--records", type=click.IntRange(min=1), help="Nexmark events per workload")
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--partitions", type=click.IntRange(min=1), default=6, show_default=True)
@click.option(
    "--latency",
    callback=_names,
    help="queries to time end to end (default: q0,q7; '' for none)",
)
@click.option("--bootstrap-servers", help="an existing broker (default: start one)")
@click.option(
    "--report",
    default="docs/benchmarks.md",
    show_default=True,
    help="the report to write, in the checkout ('-': none)",
)
@click.option(
    "--checkout",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="the strom checkout with benches/ (default: found from the current directory)",
)
@output_options
@reports_errors
def bench(
    systems: list[str] | None,
    queries: list[str] | None,
    records: int | None,
    rounds: int,
    partitions: int,
    latency: list[str] | None,
    bootstrap_servers: str | None,
    report: str,
    checkout: Path | None,
    output: Output,
) -> int:
    """Run the side-by-side benchmarks (docs/benchmarks.md) from a checkout.

    Each system runs each workload on the same pre-loaded input, its result
    checked against an oracle; exit code 1 when any result is wrong.
    """
    root = find_checkout(checkout)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    suite: Any = importlib.import_module("benches.sidebyside")
    systems_module: Any = importlib.import_module("benches.sidebyside.systems")
    options: dict[str, Any] = {
        "rounds": rounds,
        "partitions": partitions,
        "bootstrap": bootstrap_servers,
        "output": None if report == "-" else root / report,
        "command": shlex.join(["strom", *sys.argv[1:]]),
    }
    given = {
        "systems": systems,
        "workloads": queries,
        "records": records,
        "latency_workloads": latency,
    }
    options.update({name: value for name, value in given.items() if value is not None})
    with output.progress("bench", unit="") as bar:

        def progress(line: str) -> None:
            if step := _STEP.match(line):
                bar.to(int(step[1]), int(step[2]))
            output.note(line)

        try:
            outcome = suite.run(suite.Options(**options, progress=progress))
        except systems_module.SetupError as exc:
            raise CommandError(str(exc)) from exc
    cells = [
        {"system": system, "workload": workload, **cell}
        for (system, workload), cell in sorted(outcome.summary().items())
    ]
    output.summary(
        {"cells": cells, "mismatches": len(outcome.mismatches)},
        [_line(cell) for cell in cells],
    )
    return 1 if outcome.mismatches else 0


def _line(cell: dict[str, Any]) -> str:
    head = f"{cell['system']:<9} {cell['workload']:<16}"
    if "records_per_s" not in cell:
        return f"{head} {cell['status']}: {cell.get('reason', '')}"
    return f"{head} {cell['records_per_s']:>12,.0f} records/s ({cell['status']})"
