"""The Python blocks of README.md and docs/*.md as programs to run, following
the convention of docs/writing-docs.md: a block runs as written, alone, unless
a comment on the lines just above it says otherwise:

- ``<!-- name: NAME -->`` names the block;
- ``<!-- continues: NAME -->`` makes it a fragment that runs after the block
  ``NAME`` (and after the fragments before it that continue the same program);
- ``<!-- requires: kafka -->`` / ``<!-- requires: spark -->``: its program needs
  the test broker (``BOOTSTRAP`` in the environment) or a local Spark, and runs
  in the ``kafka`` or ``spark`` suite instead.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REQUIREMENTS = frozenset({"kafka", "spark"})

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<key>name|continues|requires):\s*(?P<value>\S+)\s*-->\s*$")


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    code: str
    markers: dict[str, str]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass
class Program:
    """A block and the fragments that continue it, run as one script."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def where(self) -> str:
        return self.blocks[0].where

    @property
    def requires(self) -> set[str]:
        return {b.markers["requires"] for b in self.blocks if "requires" in b.markers}

    @property
    def source(self) -> str:
        return "\n".join(f"# --- {b.where}\n{b.code}" for b in self.blocks)

    def run(
        self, workdir: Path, *, env: dict[str, str] | None = None, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Runs the program as a script in ``workdir`` (its current directory)."""
        script = workdir.parent / f"{workdir.name}.py"
        script.write_text(self.source)
        workdir.mkdir(exist_ok=True)
        return subprocess.run(
            [sys.executable, str(script)],
            check=False,
            cwd=workdir,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, with their markers."""
    lines = path.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("````"):  # an example of Markdown: skip it whole
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("````"):
                i += 1
            i += 1
            continue
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if fence["lang"] == "python":
            markers: dict[str, str] = {}
            above = i - 1
            while above >= 0 and (marker := _MARKER.match(lines[above])):
                markers[marker["key"]] = marker["value"]
                above -= 1
            code = textwrap.dedent("\n".join(lines[i + 1 : end]))
            blocks.append(Block(path, i + 1, code, markers))
        i = end + 1
    return blocks


def programs(paths: list[Path] = DOCUMENTS) -> list[Program]:
    """Every program of the documents, in order; an unknown or misplaced
    ``continues`` or an unknown requirement raises ``ValueError``."""
    found: list[Program] = []
    for path in paths:
        named: dict[str, Program] = {}
        for block in python_blocks(path):
            target = block.markers.get("continues")
            if target is None:
                program = Program()
                found.append(program)
            elif target in named:
                program = named[target]
            else:
                raise ValueError(f"{block.where}: continues {target!r}, named by no block above")
            if block.markers.get("requires", "kafka") not in REQUIREMENTS:
                raise ValueError(f"{block.where}: requires one of {sorted(REQUIREMENTS)}")
            program.blocks.append(block)
            if "name" in block.markers:
                named[block.markers["name"]] = program
    return found


def failure(program: Program, done: subprocess.CompletedProcess[str]) -> str:
    """What to show when a program failed."""
    return (
        f"the Python program at {program.where} exited with {done.returncode}:\n"
        f"{done.stderr[-4000:]}\n--- its source:\n{program.source}"
    )


def printed(stdout: str, label: str) -> dict[str, int]:
    """The dict a program printed after ``label``."""
    (line,) = [line for line in stdout.splitlines() if line.startswith(label)]
    value = ast.literal_eval(line.removeprefix(label).strip())
    assert isinstance(value, dict)
    return value
