"""``strom describe APP``: the topology's description, as Kafka prints it or
drawn: Mermaid and Graphviz DOT text, or SVG and PNG rendered by Graphviz's
``dot`` (which only those two formats need)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from strom.cli.common import BadInput, CommandError, app_dir_option, load_topology, reports_errors

DOT_TIMEOUT_S = 60


@dataclass
class Node:
    kind: str  # Source | Processor | Sink
    name: str
    topics: list[str] = field(default_factory=list)  # a source's; a sink's one topic
    stores: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    extractor: bool = False  # a sink whose topic is chosen per record


@dataclass
class Subtopology:
    id: str
    note: str  # e.g. "for global store (will not generate tasks)"
    nodes: list[Node] = field(default_factory=list)


_HEADER = re.compile(r"^\s*Sub-topology:\s*(\S+)\s*(.*)$")
_NODE = re.compile(r"^\s*(Source|Processor|Sink):\s*(\S+)\s*\((\w+):\s*(.*)\)\s*$")
_CHILDREN = re.compile(r"^\s*-->\s*(.*)$")


def parse(description: str) -> list[Subtopology]:
    """The sub-topologies of a description in Kafka's ``TopologyDescription``
    text format (what ``Topology.describe()`` returns)."""
    subs: list[Subtopology] = []
    for line in description.splitlines():
        if header := _HEADER.match(line):
            subs.append(Subtopology(header[1], header[2].strip()))
        elif node := _NODE.match(line):
            kind, name, what, items = node.groups()
            listed = [t.strip() for t in items.strip("[]").split(",") if t.strip()]
            entry = Node(kind, name)
            if what == "stores":
                entry.stores = listed
            elif what == "extractor":
                entry.extractor = True
            else:  # topics: [a, b] of a source, topic: t of a sink
                entry.topics = listed
            subs[-1].nodes.append(entry)
        elif (children := _CHILDREN.match(line)) and subs and subs[-1].nodes:
            names = [c.strip() for c in children[1].split(",")]
            subs[-1].nodes[-1].children = [c for c in names if c and c != "none"]
    return subs


class _Ids:
    """Short identifiers for the graph languages (names have '-' and more)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str], str] = {}

    def __call__(self, kind: str, name: str) -> str:
        return self.ids.setdefault((kind, name), f"{kind[0]}{len(self.ids)}")


def _edges(subs: list[Subtopology], ids: _Ids) -> list[tuple[str, str]]:
    edges = []
    for sub in subs:
        for node in sub.nodes:
            me = ids("node", node.name)
            edges += [(me, ids("node", child)) for child in node.children]
            if node.kind == "Source":
                edges += [(ids("topic", t), me) for t in node.topics]
            elif node.kind == "Sink":
                edges += [(me, ids("topic", t)) for t in node.topics]
            edges += [(me, ids("store", s)) for s in node.stores]
    return edges


def _topics_and_stores(subs: list[Subtopology]) -> tuple[list[str], list[str]]:
    topics: dict[str, None] = {}
    stores: dict[str, None] = {}
    for node in (n for sub in subs for n in sub.nodes):
        topics.update(dict.fromkeys(node.topics))
        stores.update(dict.fromkeys(node.stores))
    return list(topics), list(stores)


def _label(node: Node) -> str:
    return f"{node.name}\n(topic per record)" if node.extractor else node.name


def to_mermaid(subs: list[Subtopology]) -> str:
    """A Mermaid flowchart: sub-topologies as boxes, topics as parallelograms,
    stores as cylinders (renders on GitHub and in the docs site)."""

    def text(label: str) -> str:
        return '"' + label.replace('"', "#quot;").replace("\n", "<br/>") + '"'

    ids = _Ids()
    lines = ["flowchart TB"]
    topics, stores = _topics_and_stores(subs)
    lines += [f"    {ids('topic', topic)}[/{text(topic)}/]" for topic in topics]
    lines += [f"    {ids('store', store)}[({text(store)})]" for store in stores]
    for sub in subs:
        title = f"Sub-topology {sub.id}" + (f" {sub.note}" if sub.note else "")
        lines.append(f"    subgraph sub{sub.id}[{text(title)}]")
        for node in sub.nodes:
            shape = ("([", "])") if node.kind in ("Source", "Sink") else ("[", "]")
            lines.append(
                f"        {ids('node', node.name)}{shape[0]}{text(_label(node))}{shape[1]}"
            )
        lines.append("    end")
    lines += [f"    {a} --> {b}" for a, b in _edges(subs, ids)]
    return "\n".join(lines) + "\n"


def to_dot(subs: list[Subtopology]) -> str:
    """Graphviz DOT: one cluster per sub-topology, topics as boxes outside them,
    stores as cylinders."""

    def text(label: str) -> str:
        return '"' + label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    ids = _Ids()
    lines = [
        "digraph topology {",
        "    rankdir=TB;",
        '    node [fontname="Helvetica", fontsize=11];',
    ]
    topics, stores = _topics_and_stores(subs)
    topic_style = "shape=box, style=filled, fillcolor=lightgrey"
    lines += [f"    {ids('topic', t)} [label={text(t)}, {topic_style}];" for t in topics]
    lines += [f"    {ids('store', s)} [label={text(s)}, shape=cylinder];" for s in stores]
    for index, sub in enumerate(subs):
        title = f"Sub-topology {sub.id}" + (f" {sub.note}" if sub.note else "")
        lines.append(f"    subgraph cluster_{index} {{")
        lines.append(f"        label={text(title)}; style=rounded;")
        for node in sub.nodes:
            shape = "ellipse" if node.kind in ("Source", "Sink") else "box"
            lines.append(
                f"        {ids('node', node.name)} [label={text(_label(node))}, shape={shape}];"
            )
        lines.append("    }")
    lines += [f"    {a} -> {b};" for a, b in _edges(subs, ids)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot_source: str, fmt: str) -> bytes:
    """SVG or PNG of a DOT graph, by Graphviz's ``dot``."""
    dot = shutil.which("dot")
    if dot is None:
        raise CommandError(
            f"--format {fmt} needs Graphviz's dot, which is not on PATH "
            "(apt install graphviz, brew install graphviz, …); "
            "--format mermaid and --format dot print text and need nothing"
        )
    done = subprocess.run(
        [dot, f"-T{fmt}"],
        input=dot_source.encode(),
        capture_output=True,
        check=False,
        timeout=DOT_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise CommandError(f"dot -T{fmt} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


@click.command()
@click.argument("app", metavar="APP")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "mermaid", "dot", "svg", "png"]),
    default="text",
    show_default=True,
    help="text: Kafka's TopologyDescription; mermaid, dot: graph text; "
    "svg, png: drawn by Graphviz (needs its dot command)",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="write to FILE instead of stdout (png goes to a file or a pipe, not a terminal)",
)
@app_dir_option
@reports_errors
def describe(app: str, fmt: str, output: Path | None, app_dir: Path | None) -> int:
    """Print the topology of APP (MODULE:NAME, as for strom run).

    Mermaid text renders on GitHub and in the docs site; svg and png need
    Graphviz installed.
    """
    description = load_topology(app, app_dir).describe()
    data: bytes
    if fmt == "text":
        data = description.encode()
    else:
        subs = parse(description)
        if not subs:
            raise CommandError(f"{app} has no nodes to draw")
        data = (to_mermaid(subs) if fmt == "mermaid" else to_dot(subs)).encode()
        if fmt in ("svg", "png"):
            data = render(data.decode(), fmt)
    if output is not None:
        output.write_bytes(data)
    elif fmt == "png" and sys.stdout.isatty():
        raise BadInput("--format png is binary: write it with --output FILE or into a pipe")
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    return 0
