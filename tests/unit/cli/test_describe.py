"""``strom describe``: Kafka's text, and the same graph as Mermaid and DOT
text and as SVG/PNG drawn by the real Graphviz (installed by .ci/run); a
clear error when a format needs Graphviz and it is missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.unit.cli.test_cli import strom

from strom.cli.demo import word_count_topology

APP = """
from strom import Topology, serdes
from strom.processor import Processor
from strom.state import Stores

S = serdes.String()

class Pass(Processor):
    def init(self, context):
        self.context = context

    def process(self, record):
        self.context.forward(record)

def topology():
    # Two sub-topologies joined by the topic "mid"; P2 has a store.
    return (
        Topology()
        .add_source("Source1", "in", key_serde=S, value_serde=S)
        .add_processor("P1", Pass, "Source1")
        .add_sink("Sink1", "mid", "P1", key_serde=S, value_serde=S)
        .add_source("Source2", "mid", key_serde=S, value_serde=S)
        .add_processor("P2", Pass, "Source2")
        .add_state_store(
            Stores.key_value_store_builder(Stores.in_memory_key_value_store("Seen"), S, S), "P2"
        )
        .add_sink("Sink2", "out", "P2", key_serde=S, value_serde=S)
    )
"""

# The graph every drawing must show, by label.
EDGES = {
    ("in", "Source1"),
    ("Source1", "P1"),
    ("P1", "Sink1"),
    ("Sink1", "mid"),
    ("mid", "Source2"),
    ("Source2", "P2"),
    ("P2", "Seen"),
    ("P2", "Sink2"),
    ("Sink2", "out"),
}


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "drawn.py").write_text(textwrap.dedent(APP))
    return tmp_path


def describe(
    app_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return strom("describe", "drawn:topology", "--app-dir", str(app_dir), *args, env=env)


def test_text_is_kafkas_description() -> None:
    done = strom("describe", "strom.cli.demo:word_count_topology")
    assert done.returncode == 0, done.stderr
    assert done.stdout == word_count_topology().describe()


def test_mermaid_draws_every_node_and_edge(app_dir: Path) -> None:
    done = describe(app_dir, "--format", "mermaid")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("flowchart TB\n")
    labels = dict(re.findall(r'^\s*(\w+)\W*"([^"]+)"', done.stdout, flags=re.M))
    edges = re.findall(r"^\s*(\w+) --> (\w+)$", done.stdout, flags=re.M)
    assert {(labels[a], labels[b]) for a, b in edges} == EDGES
    assert done.stdout.count("subgraph ") == 2


def test_dot_is_read_by_graphviz_as_the_same_graph(app_dir: Path, tmp_path: Path) -> None:
    done = describe(app_dir, "--format", "dot", "--output", str(tmp_path / "t.dot"))
    assert done.returncode == 0 and done.stdout == "", done.stderr
    dot = shutil.which("dot")
    assert dot is not None, "Graphviz (dot) is needed for this test: .ci/run installs it"
    laid_out = subprocess.run(
        [dot, "-Tjson", str(tmp_path / "t.dot")], capture_output=True, check=True, text=True
    )
    graph = json.loads(laid_out.stdout)
    names = {o["_gvid"]: o["label"] for o in graph["objects"] if "nodes" not in o}
    assert {(names[e["tail"]], names[e["head"]]) for e in graph["edges"]} == EDGES
    clusters = [o["label"] for o in graph["objects"] if "nodes" in o]
    assert clusters == ["Sub-topology 0", "Sub-topology 1"]


def test_svg_and_png_are_drawn_by_graphviz(app_dir: Path, tmp_path: Path) -> None:
    svg = describe(app_dir, "--format", "svg")
    assert svg.returncode == 0, svg.stderr
    root = ET.fromstring(svg.stdout)
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {label for edge in EDGES for label in edge} <= texts
    png = tmp_path / "t.png"
    assert describe(app_dir, "--format", "png", "-o", str(png)).returncode == 0
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_svg_without_graphviz_says_so(app_dir: Path) -> None:
    # A PATH with this Python's bin directory only: strom, no dot.
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}
    done = describe(app_dir, "--format", "svg", env=env)
    assert done.returncode == 1
    assert done.stderr == (
        "strom describe: --format svg needs Graphviz's dot, which is not on PATH "
        "(apt install graphviz, brew install graphviz, …); "
        "--format mermaid and --format dot print text and need nothing\n"
    )
    assert describe(app_dir, "--format", "mermaid", env=env).returncode == 0


def test_the_mermaid_drawing_in_the_cli_guide_is_what_describe_prints() -> None:
    guide = (Path(__file__).parents[3] / "docs" / "cli.md").read_text()
    (drawn,) = re.findall(r"```mermaid\n(.*?)```", guide, flags=re.S)
    done = strom("describe", "strom.cli.demo:word_count_topology", "--format", "mermaid")
    assert done.stdout == drawn
