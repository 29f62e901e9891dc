"""Data movement of a dataflow tree per tensor per memory level (thesis §3.4.2, Eq. 3.8-3.11).

For an operator and a tensor it touches, the tile of the tensor in level ``X`` is the bounding
box of its index over the steps of the innermost loops at ``X`` or outside it (spatial loops
at ``X`` split that tile over inner units, so they do not shrink it). Walking the operator's
loops at ``X`` or outside from the innermost outwards, the tile stays where it is until the
first loop that indexes the tensor and runs more than once (Eq. 3.9: the slices of consecutive
time steps are equal; a loop that runs once has one slice, so it indexes nothing); from there
on every step loads a new slice. Summed over the time-step boundaries (Eq. 3.10-3.11)
this is the movement of Algorithm 1: a dimension indexed by loops sweeps its whole extent
(partial tiles at the boundaries counted exactly), and every non-indexing loop outside the
innermost indexing one multiplies it by its trip count. Spatial loops outside ``X`` stand for
instances of ``X``, each filled on its own (no multicast). Where partial tiles make a loop run
once in some outer tiles and more often in others, it counts as indexing in all of them (an
over-count of the tiles where it runs once).

A tensor lives at its *home*: inputs and outputs of the workload in the outermost level; an
intermediate in the level of the innermost tile node around all operators that touch it (the
outermost level when there is none: the layer-wise case). It moves into each level of the
operator's path inside its home, from the next level out on the path. Under ``Shar``, ``Para``
and ``Pipe`` a slice two operators read in the same loops moves once; ``Seq`` clears a block's
data when it ends, so each operator loads its own (§3.4.2.2).

Per operator, the per-level counts are what a single-layer mapping tool reports: for a tree of
one operator, :meth:`TreeMovement.accesses` gives the fills and updates of each level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.tree import (
    DataflowTree,
    LoopKind,
    PathLoop,
    ScopeKind,
    ScopeNode,
    TileNode,
)
from tilecraft.fusion.chain import IndexExpr, TensorAccess, TensorRole


@dataclass(frozen=True)
class MovementRecord:
    """Elements of ``tensor`` moved between ``source`` and ``level`` for operator ``op``:
    ``load`` fills ``level`` from ``source``, ``store`` writes ``level``'s results back."""

    op: str
    tensor: str
    level: str
    source: str
    direction: str
    elements: int
    itemsize: int
    entry: TileNode

    @property
    def bytes(self) -> int:
        return self.elements * self.itemsize


@dataclass(frozen=True)
class TreeMovement:
    """Every movement of a tree (see the module doc)."""

    tree: DataflowTree
    levels: tuple[str, ...]
    records: tuple[MovementRecord, ...]
    homes: dict[str, str]

    def of_tensor(self, tensor: str, level: str | None = None) -> int:
        """Elements of ``tensor`` moved into or out of ``level`` (default: the level just
        inside the outermost, e.g. DRAM <-> L1 traffic)."""
        level = level or self.levels[1]
        return sum(r.elements for r in self.records if r.tensor == tensor and r.level == level)

    def per_tensor(self, level: str | None = None) -> dict[str, int]:
        level = level or self.levels[1]
        result: dict[str, int] = {}
        for record in self.records:
            if record.level == level:
                result[record.tensor] = result.get(record.tensor, 0) + record.elements
        return result

    def accesses(self) -> dict[str, dict[str, int]]:
        """Bytes per level: ``fill`` (written into it from outside), ``update`` (results
        written into it from inside), ``read`` (read by the level inside it)."""
        table = {name: {"fill": 0, "update": 0, "read": 0} for name in self.levels}
        for record in self.records:
            if record.direction == "load":
                table[record.level]["fill"] += record.bytes
                table[record.source]["read"] += record.bytes
            else:
                table[record.level]["read"] += record.bytes
                table[record.source]["update"] += record.bytes
        return table

    def boundary_bytes(self, level: str) -> int:
        """Bytes crossing into and out of ``level`` from outside."""
        return sum(r.bytes for r in self.records if r.level == level)


def analyze_movement(tree: DataflowTree, levels: Sequence[str]) -> TreeMovement:
    """The movement of ``tree`` on memory levels ``levels`` (outer to inner)."""
    levels = tuple(levels)
    _check_levels(tree, levels)
    rank = {name: i for i, name in enumerate(levels)}
    homes = _homes(tree, levels)
    chain = tree.workload
    records: list[MovementRecord] = []
    counted: dict[tuple, list[str]] = {}
    for op in chain.ops:
        path = tree.path(op.name)
        loops = tree.path_loops(op.name)
        path_levels = [n.level for n in path if isinstance(n, TileNode)]
        for access in op.accesses:
            if not access.on_chip:
                continue
            home = homes[access.tensor]
            writes = access.role is TensorRole.OUTPUT or (
                access.role is TensorRole.INTERMEDIATE and access.tensor == op.name)
            for level in dict.fromkeys(path_levels):
                if rank[level] <= rank[home]:
                    continue
                outer = [lv for lv in path_levels if rank[lv] < rank[level]]
                source = max([home, *outer], key=rank.__getitem__)
                elements, key = _tensor_movement(access, loops, level, rank, chain.extents)
                entry = next(n for n in path if isinstance(n, TileNode) and n.level == level)
                key = (access.tensor, level, writes, key)
                if not writes and _shared_with(tree, counted.get(key, []), op.name):
                    continue
                counted.setdefault(key, []).append(op.name)
                records.append(MovementRecord(op.name, access.tensor, level, source,
                                              "store" if writes else "load", elements,
                                              access.dtype.bytes, entry))
    return TreeMovement(tree, levels, tuple(records), homes)


def _check_levels(tree: DataflowTree, levels: tuple[str, ...]) -> None:
    rank = {name: i for i, name in enumerate(levels)}
    for node in tree.nodes():
        if isinstance(node, TileNode) and node.level not in rank:
            raise DataflowError(f"dataflow {tree.label}: tile node {node.name or node.level} "
                                f"lives in level {node.level!r} (field level), not a memory "
                                f"level of the target ({', '.join(levels)})")
    for op in tree.ops():
        tiles = [n for n in tree.path(op) if isinstance(n, TileNode)]
        for outer, inner in zip(tiles, tiles[1:]):
            if rank[inner.level] < rank[outer.level]:
                raise DataflowError(
                    f"dataflow {tree.label}: tile node {inner.name or inner.level} (field level"
                    f" {inner.level}) lies inside {outer.name or outer.level} (level "
                    f"{outer.level}) but its level is outer; levels nest outer to inner")


def _homes(tree: DataflowTree, levels: tuple[str, ...]) -> dict[str, str]:
    chain = tree.workload
    homes: dict[str, str] = {}
    for name, access in chain.tensors().items():
        if access.role is not TensorRole.INTERMEDIATE:
            homes[name] = levels[0]
            continue
        users = [op.name for op in chain.ops if any(a.tensor == name for a in op.accesses)]
        paths = [tree.path(op) for op in users]
        common = None
        for nodes in zip(*paths):
            if any(n is not nodes[0] for n in nodes):
                break
            if isinstance(nodes[0], TileNode):
                common = nodes[0]
        homes[name] = common.level if common is not None else levels[0]
    return homes


def _shared_with(tree: DataflowTree, others: list[str], op: str) -> bool:
    """Whether ``op`` finds the slice another operator loaded: their innermost common scope
    keeps data (anything but Seq)."""
    for other in others:
        a, b = tree.path(other), tree.path(op)
        scope = None
        for x, y in zip(a, b):
            if x is not y:
                break
            if isinstance(x, ScopeNode):
                scope = x
        if scope is not None and scope.kind is not ScopeKind.SEQ:
            return True
    return False


def _tensor_movement(access: TensorAccess, loops: Sequence[PathLoop], level: str,
                     rank: dict[str, int], extents: dict[str, int]) -> tuple[int, tuple]:
    """Elements of ``access`` moved into ``level`` and a key naming the slices moved."""
    seen = [lp for lp in loops if rank[lp.level] < rank[level]
            or (lp.level == level and lp.kind is LoopKind.TEMPORAL)]
    indexing = set(access.loops)
    last = max((i for i, lp in enumerate(seen) if lp.var in indexing
                and _splits(lp, seen[:i], extents[lp.var])), default=-1)
    reload = seen[:last + 1]
    counts = {v: _tile_count(extents[v], [lp.step for lp in seen if lp.var == v])
              for v in indexing}
    steps = {v: min([extents[v], *(lp.step for lp in seen if lp.var == v)]) for v in indexing}
    total = 1
    for dims in _components(access.indices):
        if len(dims) == 1:
            total *= _swept(access.indices[dims[0]], counts, extents)
        else:
            for d in dims:
                total *= _footprint(access.indices[d], steps)
            for v in dict.fromkeys(v for d in dims for v in access.indices[d].loops):
                total *= counts[v]
    for var in dict.fromkeys(lp.var for lp in reload if lp.var not in indexing):
        total *= _tile_count(extents[var], [lp.step for lp in reload if lp.var == var])
    key = (tuple((id(lp.node), lp.node, lp.var) for lp in reload), tuple(sorted(steps.items())))
    return total, key


def _splits(loop: PathLoop, outer: Sequence[PathLoop], extent: int) -> bool:
    """Whether ``loop`` runs more than once in some tile of the loops ``outer`` of it: one
    that never does indexes nothing (Eq. 3.9: its one slice is the slice before it)."""
    steps = [lp.step for lp in outer if lp.var == loop.var]
    return _tile_count(extent, [*steps, loop.step]) > _tile_count(extent, steps)


def _tile_count(extent: int, steps: Iterable[int]) -> int:
    """Tiles of the finest of the nested ``steps`` over ``extent`` (partial tiles exactly)."""
    lengths = {extent: 1}
    for step in steps:
        finer: dict[int, int] = {}
        for length, count in lengths.items():
            size = min(step, length)
            full, rest = divmod(length, size)
            finer[size] = finer.get(size, 0) + full * count
            if rest:
                finer[rest] = finer.get(rest, 0) + count
        lengths = finer
    return sum(lengths.values())


def _swept(index: IndexExpr, counts: dict[str, int], extents: dict[str, int]) -> int:
    """Sum over all tiles of one dimension's tile extent (Algorithm 1's exact sweep)."""
    if not index.terms:
        return 1
    loops = [v for v, _ in index.terms]
    total, weight = 0, 0
    for var, coef in index.terms:
        others = math.prod(counts[v] for v in loops if v != var)
        total += abs(coef) * extents[var] * others
        weight += abs(coef)
    return total + (1 - weight) * math.prod(counts[v] for v in loops)


def _footprint(index: IndexExpr, steps: dict[str, int]) -> int:
    return sum(abs(c) * (steps[v] - 1) for v, c in index.terms) + 1


def footprint_elements(access: TensorAccess, steps: dict[str, int]) -> int:
    """Elements of one tile of ``access`` for tile sizes ``steps`` (bounding box)."""
    return math.prod(_footprint(index, steps) for index in access.indices)


def _components(indices: Sequence[IndexExpr]) -> list[list[int]]:
    """Dimensions grouped so that no loop indexes two groups."""
    groups: list[tuple[set[str], list[int]]] = []
    for dim, index in enumerate(indices):
        merged_loops, merged_dims, rest = set(index.loops), [dim], []
        for group_loops, group_dims in groups:
            if group_loops & merged_loops:
                merged_loops |= group_loops
                merged_dims = group_dims + merged_dims
            else:
                rest.append((group_loops, group_dims))
        groups = [*rest, (merged_loops, sorted(merged_dims))]
    return [dims for _, dims in sorted(groups, key=lambda g: g[1][0])]


__all__ = ["MovementRecord", "TreeMovement", "analyze_movement",
           "footprint_elements"]
