"""Resources, latency and energy of a dataflow tree on a target spec (thesis §3.4.2.3, §3.5.1).

- Footprint (Eq. 3.13): a tile node's data in its level is the tiles of every tensor its
  operators touch there (tensors living further in excluded); ``Seq`` children take the
  largest child's, the other primitives the union of their children's. Each tile node entering
  a level (its parent lives elsewhere) must fit one instance of it.
- Processing elements (Eq. 3.12): the product of a node's spatial trip counts times its
  child's; ``Seq``/``Shar`` children reuse the same PEs (max), ``Para``/``Pipe`` split them
  (sum). The total must not exceed ``cores * processing_elements``.
- Latency (Eq. 3.22, double-buffered): an operator takes ``MACs / PEs it spans`` cycles (its
  MACs counting the halo of a window recomputed per tile, as fused conv chains do); a tile
  node entering a level takes ``max(load / BW, body, store / BW)`` with the bandwidth of the
  level it loads from; ``Seq``/``Shar`` add their children, ``Para`` takes the slowest, and
  ``Pipe`` the slowest plus one tile of each other stage to fill the pipeline.
- Energy: every byte moved is read in one level and written in the other
  (``access_energy_pj_per_byte`` of each), plus ``mac_energy_pj`` per MAC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.movement import (
    TreeMovement,
    _components,
    _footprint,
    _swept,
    _tile_count,
    analyze_movement,
    footprint_elements,
)
from tilecraft.dataflow.tree import (
    DataflowTree,
    LoopKind,
    Node,
    OpNode,
    ScopeKind,
    ScopeNode,
    TileNode,
    subtree_ops,
)
from tilecraft.target.spec import TargetSpec


@dataclass(frozen=True)
class TreeCost:
    """The analysis of one tree on one spec."""

    tree: DataflowTree
    movement: TreeMovement
    cycles: float
    seconds: float
    energy_pj: float
    macs: int
    footprint_bytes: dict[str, int]
    pes_used: int
    pes_available: int
    violations: tuple[str, ...] = field(default=())

    @property
    def feasible(self) -> bool:
        return not self.violations

    def check(self) -> TreeCost:
        """``self``, or a :class:`DataflowError` naming what does not fit."""
        if self.violations:
            raise DataflowError(f"dataflow {self.tree.label} does not fit the target: "
                                + "; ".join(self.violations))
        return self

    def traffic_bytes(self, level: str) -> int:
        """Bytes crossing into and out of ``level``."""
        return self.movement.boundary_bytes(level)

    @property
    def utilization(self) -> float:
        return self.pes_used / self.pes_available

    def summary(self) -> str:
        levels = self.movement.levels
        parts = [f"{self.cycles:.4g} cycles", f"{self.energy_pj / 1e6:.4g} uJ",
                 f"PEs {self.pes_used}/{self.pes_available}"]
        parts += [f"{lv} traffic {self.traffic_bytes(lv)} B" for lv in levels[1:]]
        parts += [f"{lv} footprint {b} B" for lv, b in self.footprint_bytes.items()]
        return ", ".join(parts)


def analyze_tree(tree: DataflowTree, spec: TargetSpec) -> TreeCost:
    """Movement, resources, latency and energy of ``tree`` on ``spec``."""
    levels = spec.memory.names
    movement = analyze_movement(tree, levels)
    walker = _Walker(tree, spec, movement)
    cycles = walker.latency(tree.root, dict(tree.workload.extents), 1, 1)
    violations = list(walker.violations)
    pes = walker.pes(tree.root, dict(tree.workload.extents))
    available = spec.compute.cores * spec.compute.processing_elements
    if pes > available:
        violations.append(f"level PE: the tree spans {pes} processing elements, the target "
                          f"has {available} (field loops: fewer spatial iterations)")
    energy = 0.0
    for record in movement.records:
        energy += record.bytes * (spec.memory.level(record.level).access_energy_pj_per_byte
                                  + spec.memory.level(record.source).access_energy_pj_per_byte)
    macs = sum(_macs(tree, op.name) for op in tree.workload.ops)
    energy += macs * spec.compute.mac_energy_pj
    return TreeCost(tree, movement, cycles, cycles / spec.compute.frequency_hz, energy, macs,
                    walker.footprints, pes, available, tuple(violations))


def _macs(tree: DataflowTree, op: str) -> int:
    """MACs ``op`` performs in ``tree``: every output element its tiles compute (a window's
    halo computed again for each tile that needs it) times its reduction extents."""
    chain = tree.workload
    chain_op = chain.op(op)
    extents = chain.extents
    output = chain_op.output
    loops = tree.path_loops(op)
    counts = {v: _tile_count(extents[v], [lp.step for lp in loops if lp.var == v])
              for v in output.loops}
    steps = {v: min([extents[v], *(lp.step for lp in loops if lp.var == v)])
             for v in output.loops}
    elements = 1
    for dims in _components(output.indices):
        if len(dims) == 1:
            elements *= _swept(output.indices[dims[0]], counts, extents)
        else:
            elements *= math.prod(_footprint(output.indices[d], steps) for d in dims)
            elements *= math.prod(counts[v] for v in
                                  dict.fromkeys(v for d in dims for v in output.indices[d].loops))
    return elements * math.prod(extents[r] for r in chain_op.reduce_loops)


class _Walker:
    def __init__(self, tree: DataflowTree, spec: TargetSpec, movement: TreeMovement):
        self.tree = tree
        self.spec = spec
        self.movement = movement
        self.rank = {name: i for i, name in enumerate(spec.memory.names)}
        self.footprints: dict[str, int] = {}
        self.violations: list[str] = []
        self.parent_level: dict[int, str | None] = {}
        self._parents(tree.root, None)

    def _parents(self, node: Node, level: str | None) -> None:
        if isinstance(node, TileNode):
            self.parent_level[id(node)] = level
            self._parents(node.child, node.level)
        elif isinstance(node, ScopeNode):
            for child in node.children:
                self._parents(child, level)

    # latency ---------------------------------------------------------------------------------
    def latency(self, node: Node, steps: dict[str, int], par: int, iters: int) -> float:
        if isinstance(node, OpNode):
            return _macs(self.tree, node.op) / par
        if isinstance(node, ScopeNode):
            lats = [self.latency(c, dict(steps), par, iters) for c in node.children]
            if node.kind in (ScopeKind.SEQ, ScopeKind.SHAR):
                return sum(lats)
            if node.kind is ScopeKind.PARA:
                return max(lats)
            return max(lats) + (sum(lats) - max(lats)) / max(1, iters)
        inner = dict(steps)
        for loop in node.loops:
            trips = math.ceil(inner[loop.var] / min(loop.step, inner[loop.var]))
            inner[loop.var] = min(loop.step, inner[loop.var])
            if loop.kind is LoopKind.SPATIAL:
                par *= trips
            else:
                iters *= trips
        body = self.latency(node.child, inner, par, iters)
        if self.parent_level[id(node)] == node.level:
            return body
        self._footprint_check(node)
        load = store = 0.0
        for record in self.movement.records:
            if record.entry is node:
                source = self.spec.memory.level(record.source)
                bandwidth = source.bandwidth_bytes_per_cycle \
                    * self.spec.memory.instances(record.source)
                if record.direction == "load":
                    load += record.bytes / bandwidth
                else:
                    store += record.bytes / bandwidth
        return max(load, body, store)

    # resources -------------------------------------------------------------------------------
    def pes(self, node: Node, steps: dict[str, int]) -> int:
        if isinstance(node, OpNode):
            return 1
        if isinstance(node, ScopeNode):
            counts = [self.pes(c, dict(steps)) for c in node.children]
            return max(counts) if node.kind in (ScopeKind.SEQ, ScopeKind.SHAR) else sum(counts)
        spatial = 1
        for loop in node.loops:
            step = min(loop.step, steps[loop.var])
            if loop.kind is LoopKind.SPATIAL:
                spatial *= math.ceil(steps[loop.var] / step)
            steps[loop.var] = step
        return spatial * self.pes(node.child, steps)

    def _footprint_check(self, node: TileNode) -> None:
        level = node.level
        if self.rank[level] == 0:  # the outermost level holds everything by definition
            return
        used = sum(self._tensors(node.child, level).values())
        self.footprints[level] = max(self.footprints.get(level, 0), used)
        size = self.spec.memory.level(level).size_bytes
        if size is not None and used > size and not any(level in v for v in self.violations):
            self.violations.append(
                f"level {level}: tile node {node.name or level} holds {used} bytes, the level "
                f"has {size} (field step: smaller tiles)")

    def _tensors(self, node: Node, level: str) -> dict[str, int]:
        if isinstance(node, TileNode):
            return self._tensors(node.child, level)
        if isinstance(node, ScopeNode):
            parts = [self._tensors(c, level) for c in node.children]
            if node.kind is ScopeKind.SEQ:
                return max(parts, key=lambda p: sum(p.values()))
            merged: dict[str, int] = {}
            for part in parts:
                for name, size in part.items():
                    merged[name] = max(merged.get(name, 0), size)
            return merged
        return self._op_tensors(node.op, level)

    def _op_tensors(self, op: str, level: str) -> dict[str, int]:
        chain = self.tree.workload
        steps = dict(chain.extents)
        for loop in self.tree.path_loops(op):
            if self.rank[loop.level] < self.rank[level] or (
                    loop.level == level and loop.kind is LoopKind.TEMPORAL):
                steps[loop.var] = min(steps[loop.var], loop.step)
        result = {}
        for access in chain.op(op).accesses:
            home = self.movement.homes[access.tensor]
            if access.on_chip and self.rank[home] <= self.rank[level]:
                result[access.tensor] = footprint_elements(access, steps) * access.dtype.bytes
        return result


__all__ = ["TreeCost", "analyze_tree", "subtree_ops"]
