"""The order Kafka's ``TopologyDescription`` lists things in, so that
``Topology.describe()`` prints Kafka's text to the character.

Kafka sorts a sub-topology's nodes, and each node's successors and
predecessors, by the size of the node's sub-tree (largest first), then by
name. It computes the sizes while it connects the nodes, visiting them in
the order of a Java ``HashMap`` of their names, and inserts into each
node's ``TreeSet`` of neighbours with the sizes of that moment; a
processor's stores print in ``HashSet`` order. This module replays exactly
that: Java's string hash and hash-table order, and the red-black tree that
``TreeSet`` inserts into (a later size change does not re-sort a set).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as an unsigned int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _table_size(count: int, copied: bool) -> int:
    """A Java HashMap's table size after ``count`` puts (or, ``copied``,
    when made by ``new HashSet<>(collection)`` of that many)."""
    if copied:
        wanted = max(int(count / 0.75) + 1, 16)
        size = 1
        while size < wanted:
            size *= 2
        return size
    size = 16
    while count > size * 3 // 4:
        size *= 2
    return size


def java_hash_order(names: Sequence[str], *, copied: bool = False) -> list[str]:
    """``names`` in the order a Java ``HashSet<String>`` iterates them:
    by bucket of the spread hash, then in the order they were added."""
    mask = _table_size(len(names), copied) - 1

    def bucket(name: str) -> int:
        h = java_string_hash(name)
        return (h ^ (h >> 16)) & mask

    return sorted(names, key=bucket)  # stable: a bucket keeps insertion order


@dataclass
class _Entry:
    name: str
    red: bool = True
    left: _Entry | None = None
    right: _Entry | None = None
    parent: _Entry | None = None


class _TreeSet:
    """``java.util.TreeSet`` of names under a comparator that may change
    between insertions (as Kafka's does): ``TreeMap``'s red-black insertion,
    whose in-order walk is what Kafka's ``TreeSet`` iterates."""

    def __init__(self, compare: Callable[[str, str], int]) -> None:
        self.compare = compare
        self.root: _Entry | None = None

    def add(self, name: str) -> None:
        node = self.root
        if node is None:
            self.root = _Entry(name, red=False)
            return
        while True:
            order = self.compare(name, node.name)
            if order == 0:
                return
            child = node.left if order < 0 else node.right
            if child is None:
                entry = _Entry(name, parent=node)
                if order < 0:
                    node.left = entry
                else:
                    node.right = entry
                self._fix_after_insertion(entry)
                return
            node = child

    def names(self) -> list[str]:
        """The in-order walk: what the set iterates."""
        out: list[str] = []
        stack: list[_Entry] = []
        node = self.root
        while stack or node is not None:
            while node is not None:
                stack.append(node)
                node = node.left
            node = stack.pop()
            out.append(node.name)
            node = node.right
        return out

    # TreeMap.fixAfterInsertion, rotateLeft and rotateRight.
    def _fix_after_insertion(self, x: _Entry) -> None:
        while x is not self.root and x.parent is not None and x.parent.red:
            parent = x.parent
            grand = parent.parent
            assert grand is not None  # a red node is never the root
            if parent is grand.left:
                uncle = grand.right
                if uncle is not None and uncle.red:
                    parent.red, uncle.red, grand.red = False, False, True
                    x = grand
                else:
                    if x is parent.right:
                        x = parent
                        self._rotate_left(x)
                    assert x.parent is not None and x.parent.parent is not None
                    x.parent.red, x.parent.parent.red = False, True
                    self._rotate_right(x.parent.parent)
            else:
                uncle = grand.left
                if uncle is not None and uncle.red:
                    parent.red, uncle.red, grand.red = False, False, True
                    x = grand
                else:
                    if x is parent.left:
                        x = parent
                        self._rotate_right(x)
                    assert x.parent is not None and x.parent.parent is not None
                    x.parent.red, x.parent.parent.red = False, True
                    self._rotate_left(x.parent.parent)
        assert self.root is not None
        self.root.red = False

    def _rotate_left(self, p: _Entry) -> None:
        r = p.right
        assert r is not None
        p.right = r.left
        if r.left is not None:
            r.left.parent = p
        r.parent = p.parent
        if p.parent is None:
            self.root = r
        elif p.parent.left is p:
            p.parent.left = r
        else:
            p.parent.right = r
        r.left = p
        p.parent = r

    def _rotate_right(self, p: _Entry) -> None:
        left = p.left
        assert left is not None
        p.left = left.right
        if left.right is not None:
            left.right.parent = p
        left.parent = p.parent
        if p.parent is None:
            self.root = left
        elif p.parent.right is p:
            p.parent.right = left
        else:
            p.parent.left = left
        left.right = p
        p.parent = left


@dataclass
class DescribedOrder:
    """One sub-topology as Kafka lists it."""

    nodes: list[str]
    successors: dict[str, list[str]] = field(default_factory=dict)
    predecessors: dict[str, list[str]] = field(default_factory=dict)


def describe_order(parents: dict[str, list[str]]) -> DescribedOrder:
    """Kafka's order for a sub-topology whose nodes (in the order they were
    added to the topology) have these parents (in the order they were
    given); as ``InternalTopologyBuilder.describeSubtopology``."""
    size = dict.fromkeys(parents, 1)
    connected_parents: dict[str, list[str]] = {name: [] for name in parents}

    def compare(a: str, b: str) -> int:
        if a == b:
            return 0
        if size[a] != size[b]:
            return size[b] - size[a]
        return -1 if a < b else 1

    successors = {name: _TreeSet(compare) for name in parents}
    predecessors = {name: _TreeSet(compare) for name in parents}

    def grow(name: str, delta: int) -> None:
        size[name] += delta
        for parent in connected_parents[name]:
            grow(parent, delta)

    # The node group is a HashSet filled in topology order, and Kafka's map
    # of its nodes, filled from it and as large, iterates in the same order.
    for name in java_hash_order(list(parents)):
        for parent in parents[name]:
            predecessors[name].add(parent)
            connected_parents[name].append(parent)
            successors[parent].add(name)
            grow(parent, size[name])
    # The description's own set is filled once the sizes are final.
    return DescribedOrder(
        sorted(parents, key=lambda name: (-size[name], name)),
        {name: tree.names() for name, tree in successors.items()},
        {name: tree.names() for name, tree in predecessors.items()},
    )
