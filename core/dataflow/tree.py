"""TileFlow's tile-centric tree of a fused dataflow (thesis §3.3, Table 3.3).

A tree has three kinds of node:

- :class:`TileNode` — a loop nest whose tiles live in one memory ``level``; each
  :class:`Loop` steps a workload variable by ``step`` and is spatial (``Sp``: iterations on
  different units) or temporal (``Tp``: iterations one after another). A loop's extent is not
  written: it is the step of the nearest enclosing loop over the same variable (or the
  variable's full extent), so a tree cannot contradict itself.
- :class:`ScopeNode` — the inter-tile primitive binding its children to resources: ``Seq``
  (one after another, exclusive), ``Shar`` (one after another, sharing memory), ``Para``
  (side by side) and ``Pipe`` (pipelined side by side).
- :class:`OpNode` — an operator of the workload (a :class:`tilecraft.fusion.Chain`: its
  operators, loops and affine tensor accesses).

>>> from tilecraft.fusion.examples import gemm_chain
>>> chain = gemm_chain(64, 32, 48, 16)
>>> root = TileNode("on_chip", (Loop("m", 16), Loop("l", 16)), ScopeNode(ScopeKind.SEQ, (
...     TileNode("on_chip", (Loop("k", 8),), OpNode("C")),
...     TileNode("on_chip", (Loop("n", 32),), OpNode("E")))))
>>> print(DataflowTree(chain, root))
dataflow of C -> E
on_chip: Tp(m 64/16) Tp(l 16/16)
  Seq
    on_chip: Tp(k 48/8)
      op C
    on_chip: Tp(n 32/32)
      op E
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from tilecraft.dataflow.errors import DataflowError
from tilecraft.fusion.chain import Chain


class LoopKind(str, enum.Enum):
    """Intra-tile primitives (Table 3.3)."""

    SPATIAL = "Sp"
    TEMPORAL = "Tp"


class ScopeKind(str, enum.Enum):
    """Inter-tile primitives (Table 3.3)."""

    SEQ = "Seq"
    SHAR = "Shar"
    PARA = "Para"
    PIPE = "Pipe"


@dataclass(frozen=True)
class Loop:
    """A loop over workload variable ``var`` in steps of ``step``."""

    var: str
    step: int
    kind: LoopKind = LoopKind.TEMPORAL


@dataclass(frozen=True)
class OpNode:
    """An operator of the workload."""

    op: str


@dataclass(frozen=True)
class ScopeNode:
    """Children bound to resources by one inter-tile primitive."""

    kind: ScopeKind
    children: tuple[Node, ...]
    name: str = ""


@dataclass(frozen=True)
class TileNode:
    """Loops whose tiles live in memory level ``level``, around one child."""

    level: str
    loops: tuple[Loop, ...]
    child: Node
    name: str = ""


Node = TileNode | ScopeNode | OpNode


@dataclass(frozen=True)
class PathLoop:
    """A loop seen from an operator: its tile node, level, extent, step and trip count."""

    node: int
    level: str
    var: str
    extent: int
    step: int
    kind: LoopKind

    @property
    def trips(self) -> int:
        return math.ceil(self.extent / self.step)


@dataclass(frozen=True)
class DataflowTree:
    """A workload and the tree that runs it; checked on construction."""

    workload: Chain
    root: Node
    name: str = ""
    _parents: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self)

    # walking ----------------------------------------------------------------------------------
    def nodes(self) -> Iterator[Node]:
        return _walk(self.root)

    def ops(self) -> tuple[str, ...]:
        return tuple(node.op for node in self.nodes() if isinstance(node, OpNode))

    def path(self, op: str) -> tuple[Node, ...]:
        """Nodes from the root down to ``op``'s :class:`OpNode` (inclusive)."""
        found = _path_to(self.root, op)
        if found is None:
            raise DataflowError(f"dataflow {self.label}: no node runs operator {op!r}")
        return tuple(found)

    def path_loops(self, op: str) -> tuple[PathLoop, ...]:
        """The loops around ``op``, outermost first, with extents resolved."""
        steps = dict(self.workload.extents)
        loops = []
        for index, node in enumerate(self.path(op)):
            if isinstance(node, TileNode):
                for loop in node.loops:
                    extent = steps[loop.var]
                    loops.append(PathLoop(index, node.level, loop.var, extent,
                                          min(loop.step, extent), loop.kind))
                    steps[loop.var] = min(loop.step, extent)
        return tuple(loops)

    @property
    def label(self) -> str:
        return self.name or self.workload.names

    def levels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n.level for n in self.nodes() if isinstance(n, TileNode)))

    def with_steps(self, steps: Mapping[tuple[str, str], int]) -> DataflowTree:
        """The same tree with loop steps replaced: ``{(node name, var): step}``."""
        return replace(self, root=_restep(self.root, steps))

    def __str__(self) -> str:
        lines = [f"dataflow of {self.label}"]
        _render(self.root, 0, dict(self.workload.extents), lines)
        return "\n".join(lines)


def _walk(node: Node) -> Iterator[Node]:
    yield node
    if isinstance(node, TileNode):
        yield from _walk(node.child)
    elif isinstance(node, ScopeNode):
        for child in node.children:
            yield from _walk(child)


def _path_to(node: Node, op: str) -> list[Node] | None:
    if isinstance(node, OpNode):
        return [node] if node.op == op else None
    children = (node.child,) if isinstance(node, TileNode) else node.children
    for child in children:
        found = _path_to(child, op)
        if found is not None:
            return [node, *found]
    return None


def subtree_ops(node: Node) -> tuple[str, ...]:
    return tuple(n.op for n in _walk(node) if isinstance(n, OpNode))


def _restep(node: Node, steps: Mapping[tuple[str, str], int]) -> Node:
    if isinstance(node, TileNode):
        loops = tuple(replace(lp, step=int(steps.get((node.name, lp.var), lp.step)))
                      for lp in node.loops)
        return replace(node, loops=loops, child=_restep(node.child, steps))
    if isinstance(node, ScopeNode):
        return replace(node, children=tuple(_restep(c, steps) for c in node.children))
    return node


def _check(tree: DataflowTree) -> None:
    chain = tree.workload
    names = [op.name for op in chain.ops]
    seen = tree.ops()
    for op in names:
        if seen.count(op) != 1:
            raise DataflowError(f"dataflow {tree.label}: operator {op!r} appears {seen.count(op)}"
                                " times in the tree (field op); place each operator once")
    unknown = sorted(set(seen) - set(names))
    if unknown:
        raise DataflowError(f"dataflow {tree.label}: unknown operators {', '.join(unknown)} "
                            f"(field op); the workload's are {', '.join(names)}")
    _check_node(tree, tree.root, dict(chain.extents))


def _check_node(tree: DataflowTree, node: Node, steps: dict[str, int]) -> None:
    chain = tree.workload
    names = [op.name for op in chain.ops]
    if isinstance(node, OpNode):
        return
    if isinstance(node, ScopeNode):
        if not node.children:
            raise DataflowError(f"dataflow {tree.label}: scope {node.name or node.kind.value} "
                                "has no children (field children)")
        for child in node.children:
            _check_node(tree, child, dict(steps))
        return
    label = node.name or node.level
    below = subtree_ops(node)
    used = set().union(*(chain.op_loops(names.index(op)) for op in below))
    for loop in node.loops:
        if loop.var not in steps:
            raise DataflowError(f"dataflow {tree.label}: tile node {label} loops over "
                                f"{loop.var!r} (field loops), not a variable of the workload"
                                f" ({', '.join(chain.extents)})")
        if isinstance(loop.step, bool) or not isinstance(loop.step, int) or loop.step < 1:
            raise DataflowError(f"dataflow {tree.label}: tile node {label}, loop {loop.var}:"
                                f" step {loop.step!r} must be an int >= 1 (field step)")
        if loop.var not in used:
            raise DataflowError(
                f"dataflow {tree.label}: tile node {label} claims loop {loop.var} (field "
                f"loops) but none of its operators ({', '.join(below)}) uses it")
        if len(below) > 1 and loop.step < steps[loop.var]:
            _check_reduction(tree, label, loop.var, below)
        steps[loop.var] = min(steps[loop.var], loop.step)
    _check_node(tree, node.child, steps)


def _check_reduction(tree: DataflowTree, label: str, var: str, below: tuple[str, ...]) -> None:
    """A producer's private reduction loop above its consumer hands it partial sums (§3.3.2)."""
    chain = tree.workload
    names = [op.name for op in chain.ops]
    for op in below:
        index = names.index(op)
        if var in chain.ops[index].reduce_loops and var in chain.private_loops(index) \
                and any(names.index(other) > index for other in below):
            raise DataflowError(
                f"dataflow {tree.label}: tile node {label} claims loop {var} (field loops), a "
                f"reduction private to producer {op}, around operators {', '.join(below)} that "
                f"do not share it; move {var} into {op}'s own tile node")


def _render(node: Node, depth: int, steps: dict[str, int], lines: list[str]) -> None:
    pad = "  " * depth
    if isinstance(node, OpNode):
        lines.append(f"{pad}op {node.op}")
        return
    if isinstance(node, ScopeNode):
        lines.append(f"{pad}{node.kind.value}" + (f" {node.name}" if node.name else ""))
        for child in node.children:
            _render(child, depth + 1, dict(steps), lines)
        return
    parts = []
    for loop in node.loops:
        extent = steps[loop.var]
        step = min(loop.step, extent)
        parts.append(f"{loop.kind.value}({loop.var} {extent}/{step})")
        steps[loop.var] = step
    name = f" [{node.name}]" if node.name else ""
    lines.append(f"{pad}{node.level}{name}: {' '.join(parts) or 'once'}")
    _render(node.child, depth + 1, steps, lines)
