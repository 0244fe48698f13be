"""The docs check (issue #23 points 1 and 7): every Python block of README.md
and docs/ runs as written in a fresh directory (or as the fragment its marker
says it is; docs/writing-docs.md), the README's word count runs twice in a
row, and every relative link points at a file and heading that exist."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from tests.docs.snippets import (
    DOCUMENTS,
    ROOT,
    Program,
    failure,
    printed,
    programs,
    python_blocks,
)

from strom import serdes
from strom.embedded import EmbeddedLog

PROGRAMS = programs()
PLAIN = [p for p in PROGRAMS if not p.requires]


@pytest.mark.parametrize("program", PLAIN, ids=[p.where for p in PLAIN])
def test_the_python_blocks_run_as_written(program: Program, tmp_path: Path) -> None:
    done = program.run(tmp_path / "work")
    assert done.returncode == 0, failure(program, done)


def test_the_readme_example_runs_twice_in_a_row(tmp_path: Path) -> None:
    """Before: it read a topic nothing created or wrote and failed with
    ``TopologyError: topic(s) text-input, word-counts do not exist``. Now it
    creates its topics once, writes its input with the typed producer and
    reads its output back as typed values; the second run counts the lines it
    wrote again on top of the first run's counts."""
    (program,) = [p for p in PROGRAMS if p.blocks[0].path == ROOT / "README.md"]
    workdir = tmp_path / "work"
    runs = []
    for _ in range(2):
        done = program.run(workdir)
        assert done.returncode == 0, failure(program, done)
        store = printed(done.stdout, "counts in the store:")
        output = printed(done.stdout, "last update per word in word-counts:")
        assert store == output
        runs.append(store)
    # What the runs wrote, read back independently of the example's own prints.
    log = EmbeddedLog(workdir / "strom-data")
    lines = [r.value for r in log.records("text-input", value_serde=serdes.String())]
    assert runs[1] == Counter(w for line in lines for w in str(line).lower().split())
    assert runs[1] == {word: 2 * n for word, n in runs[0].items()}


def test_every_program_is_run_by_some_suite() -> None:
    """Programs that need the broker or Spark run in those suites
    (tests/integration/test_docs_kafka.py, tests/spark/test_docs_spark.py)."""
    assert {r for p in PROGRAMS for r in p.requires} <= {"kafka", "spark"}
    assert sum(len(p.blocks) for p in PROGRAMS) == sum(len(python_blocks(d)) for d in DOCUMENTS)


_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    anchors: set[str] = set()
    seen: Counter[str] = Counter()
    fenced = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (heading := re.match(r"#{1,6}\s+(.*)", line)):
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            anchors.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return anchors


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # not in code blocks
    return _LINK.findall(re.sub(r"`[^`\n]*`", "", text))


@pytest.mark.parametrize("document", DOCUMENTS, ids=[str(d.relative_to(ROOT)) for d in DOCUMENTS])
def test_relative_links_point_at_what_exists(document: Path) -> None:
    """Before: docs/state-stores.md linked a DESIGN.md the project does not
    have. Web links are not followed (CI has no network)."""
    broken = []
    for link in _links(document):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, …
            continue
        target, _, anchor = link.partition("#")
        path = (document.parent / target).resolve() if target else document
        if not path.exists():
            broken.append(
                f"{link}: no {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
            )
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(f"{link}: no heading #{anchor} in {path.relative_to(ROOT)}")
    assert not broken, f"broken links in {document.relative_to(ROOT)}: {broken}"


def test_the_link_check_sees_links() -> None:
    """Guards against a link pattern that matches nothing."""
    links = _links(ROOT / "README.md")
    assert "docs/getting-started.md#install" in links and len(links) >= 8
    assert "install" in _anchors(ROOT / "docs" / "getting-started.md")
