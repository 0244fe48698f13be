"""The guides' programs that need Spark (``<!-- requires: spark -->``,
docs/writing-docs.md), run as written. Before (issue #23 point 7): the
opening example of docs/spark.md used ``word_count_topology()`` and an
embedded log at ``/data/log`` it never made."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest
from tests.docs.snippets import ROOT, Program, failure, programs, python_blocks

SPARK = [p for p in programs() if "spark" in p.requires]


def test_the_spark_guide_opens_with_a_program_run_here() -> None:
    (opening, *_) = python_blocks(ROOT / "docs" / "spark.md")
    assert [p.blocks for p in SPARK] == [[opening]]


@pytest.mark.parametrize("program", SPARK, ids=[p.where for p in SPARK])
def test_the_spark_programs_run_as_written(program: Program, tmp_path: Path) -> None:
    env = {"SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    env["PYSPARK_PYTHON"] = sys.executable
    done = program.run(tmp_path / "work", env=env)
    assert done.returncode == 0, failure(program, done)
    # The streaming app, bootstrapped by the replay, holds the counts of the input.
    counts = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert counts == {"be": 3, "not": 1, "or": 1, "quick": 1, "to": 2}
