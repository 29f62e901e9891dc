"""The 3-D design space of a two-operator chain (thesis §3.3.2): computation order, resource
binding and loop tiling, and the tree each point stands for.

A *structure* is the order of the loops, the primitive binding the two operators (``Seq``,
``Shar``, ``Pipe``) and the memory level they are fused in, or ``None`` for layer-wise
execution (each operator's own tile nest, the intermediate through the outermost level). The
tiles are one size per loop. Every tree is mapped onto the target's compute the same way: the
outermost loop shared by both operators spreads over the cores (a spatial loop in the
outermost level, the first with more than one iteration), and each operator's two widest
non-reduction loops over the columns and rows of a square PE array (spatial loops in its
leaf; a single such loop spans the whole array) — the rows split between the two operators
under ``Pipe`` and ``Para``, which run them side by side.

>>> from tilecraft.fusion import gemm_chain
>>> space = ChainSpace(gemm_chain(64, 64, 32, 32), _example_spec())
>>> tree = space.tree(Structure(("m", "l", "k", "n"), ScopeKind.SEQ, "L1"),
...                   {"m": 16, "n": 64, "l": 32, "k": 32})
>>> print(tree)
dataflow of m l k n Seq fused in L1
DRAM: Sp(m 64/16)
  L1 [L1]: Tp(m 16/16) Tp(l 32/32)
    Seq
      L1 [C]: Tp(k 32/32)
        L1: Sp(m 16/2) Sp(l 32/4)
          op C
      L1 [E]: Tp(n 64/64)
        L1: Sp(m 16/2) Sp(n 64/8)
          op E
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tilecraft.dataflow.cost import TreeCost, analyze_tree
from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.from_chimera import from_tile_tree
from tilecraft.dataflow.tree import (
    DataflowTree,
    Loop,
    LoopKind,
    Node,
    OpNode,
    ScopeKind,
    ScopeNode,
    TileNode,
)
from tilecraft.fusion.chain import Chain
from tilecraft.fusion.orders import dataflow_classes, legal_orders
from tilecraft.fusion.solver import solve_chain
from tilecraft.fusion.tiletree import TileTree
from tilecraft.search.space import ChoiceSpace, Space
from tilecraft.target.spec import TargetSpec


@dataclass(frozen=True)
class Structure:
    """Order (outermost first), binding and fusion level (``None``: layer-wise)."""

    order: tuple[str, ...]
    scope: ScopeKind
    level: str | None

    def __str__(self) -> str:
        where = f"fused in {self.level}" if self.level else "layer-wise"
        return f"{' '.join(self.order)} {self.scope.value} {where}"


class ChainSpace:
    """Structures, tile choices and trees of ``chain`` on ``spec``.

    ``orders``, ``scopes`` and ``levels`` narrow the structures (default: every legal order,
    or one order per dataflow class beyond five loops; Seq/Shar/Pipe; every level inside the
    outermost plus layer-wise); ``fixed_tiles`` pins loops (e.g. ``{"m": 512}`` leaves ``m``
    untiled); ``tiled`` lists the loops that may be tiled at all (others run whole).
    """

    def __init__(self, chain: Chain, spec: TargetSpec, *,
                 orders: Sequence[Sequence[str]] | None = None,
                 scopes: Sequence[ScopeKind] = (ScopeKind.SEQ, ScopeKind.SHAR, ScopeKind.PIPE),
                 levels: Sequence[str | None] | None = None,
                 fixed_tiles: Mapping[str, int] | None = None,
                 tiled: Sequence[str] | None = None):
        if len(chain.ops) != 2:
            raise DataflowError(f"ChainSpace builds trees of two-operator chains; {chain.names} "
                                f"has {len(chain.ops)} operators")
        self.chain = chain
        self.spec = spec
        if orders is None:  # I! orders are too many beyond five loops: one per dataflow class
            orders = legal_orders(chain) if len(chain.loops) <= 5 else \
                [c.order for c in dataflow_classes(chain)]
        self.orders = [tuple(o) for o in orders]
        self.scopes = tuple(scopes)
        inner = spec.memory.names[1:]
        self.levels = tuple(levels) if levels is not None else (*inner, None)
        self.fixed = dict(fixed_tiles or {})
        for loop in chain.fixed_loops():
            self.fixed.setdefault(loop, chain.extents[loop])
        allowed = set(tiled) if tiled is not None else set(chain.loop_names)
        for loop in chain.loop_names:
            if loop not in allowed:
                self.fixed.setdefault(loop, chain.extents[loop])
        self.choices = {lp: _tile_choices(extent) for lp, extent in chain.extents.items()
                        if lp not in self.fixed}
        side = math.isqrt(spec.compute.processing_elements)
        self.pe_rows, self.pe_cols = side, spec.compute.processing_elements // side
        self.cores = spec.compute.cores

    # the structure dimension ------------------------------------------------------------------
    def structure_space(self) -> Space:
        return Space([("order", ChoiceSpace(self.orders)),
                      ("scope", ChoiceSpace(self.scopes)),
                      ("level", ChoiceSpace(self.levels))], name=f"{self.chain.names} structure")

    def structure(self, point: Sequence[int]) -> Structure:
        values = self.structure_space().values(tuple(point))
        return Structure(tuple(values["order"]), values["scope"], values["level"])

    def structure_point(self, structure: Structure) -> tuple[int, ...]:
        return (self.orders.index(structure.order), self.scopes.index(structure.scope),
                self.levels.index(structure.level))

    # the tiling dimension --------------------------------------------------------------------
    def tile_space(self) -> Space:
        return Space([(lp, ChoiceSpace(values)) for lp, values in self.choices.items()],
                     name=f"{self.chain.names} tiles")

    def tiles(self, point: Sequence[int]) -> dict[str, int]:
        tiles = dict(self.fixed)
        for (lp, values), index in zip(self.choices.items(), point):
            tiles[lp] = values[index]
        return tiles

    def tile_point(self, tiles: Mapping[str, int]) -> tuple[int, ...]:
        """The nearest choice at or below each of ``tiles`` (a warm start)."""
        point = []
        for lp, values in self.choices.items():
            want = tiles.get(lp, self.chain.extents[lp])
            point.append(max(i for i, v in enumerate(values) if v <= max(want, values[0])))
        return tuple(point)

    def exact_tile_point(self, tiles: Mapping[str, int]) -> tuple[int, ...]:
        """The point of ``tiles`` (a warm start from a space this one contains): each tiled
        loop's tile one of its choices, each pinned loop's tile its pinned value."""
        for lp, value in self.fixed.items():
            if min(tiles.get(lp, self.chain.extents[lp]), self.chain.extents[lp]) != value:
                raise DataflowError(f"tiles {dict(tiles)} are not a point of this space: loop "
                                    f"{lp} is pinned to {value}, not {tiles.get(lp)}")
        point = []
        for lp, values in self.choices.items():
            want = min(tiles.get(lp, self.chain.extents[lp]), self.chain.extents[lp])
            if want not in values:
                raise DataflowError(f"tiles {dict(tiles)} are not a point of this space: loop "
                                    f"{lp}'s tile {want} is none of {values}")
            point.append(values.index(want))
        return tuple(point)

    def admit(self, structure: Structure) -> tuple[int, ...]:
        """The point of ``structure`` (of a space this one contains), its order added to the
        space's orders if missing; its binding and level must be among the space's."""
        if structure.scope not in self.scopes or structure.level not in self.levels:
            raise DataflowError(f"structure {structure} is not in this space: its bindings are "
                                f"{[s.value for s in self.scopes]}, levels {list(self.levels)}")
        if structure.order not in self.orders:
            self.orders.append(structure.order)
        return self.structure_point(structure)

    # trees ------------------------------------------------------------------------------------
    def tree(self, structure: Structure, tiles: Mapping[str, int]) -> DataflowTree:
        chain = self.chain
        full = {lp: int(tiles.get(lp, self.fixed.get(lp, chain.extents[lp])))
                for lp in chain.loop_names}
        core_var = next((lp for lp in structure.order
                         if lp in chain.op_loops(0) & chain.op_loops(1) and chain.extents[lp] > 1
                         and not any(lp in op.reduce_loops for op in chain.ops)), None)
        if structure.level is None:
            inner = self.spec.memory.names[-1]
            leaves = []
            for index, op in enumerate(chain.ops):
                mine = chain.op_loops(index)
                loops = tuple(Loop(lp, full[lp]) for lp in structure.order if lp in mine)
                leaves.append(TileNode(inner, loops, OpNode(op.name), name=op.name))
            body: Node = ScopeNode(ScopeKind.SEQ, tuple(leaves))
        else:
            tile_tree = TileTree.build(chain, [(structure.level, structure.order, full)])
            body = from_tile_tree(tile_tree, structure.scope).root
        share = 2 if structure.scope in (ScopeKind.PIPE, ScopeKind.PARA) \
            and structure.level is not None else 1
        steps = dict(chain.extents)  # a core's slice: the PE array maps what one core runs
        if core_var is not None and self.cores > 1:
            steps[core_var] = math.ceil(chain.extents[core_var] / self.cores)
        body = self._map_pes(body, steps, share)
        if core_var is not None and self.cores > 1:
            step = math.ceil(chain.extents[core_var] / self.cores)
            body = TileNode(self.spec.memory.names[0], (Loop(core_var, step, LoopKind.SPATIAL),),
                            body)
        return DataflowTree(chain, body, name=str(structure))

    def _map_pes(self, node: Node, steps: dict[str, int], share: int) -> Node:
        if isinstance(node, ScopeNode):
            return ScopeNode(node.kind, tuple(self._map_pes(c, dict(steps), share)
                                              for c in node.children), node.name)
        if isinstance(node, TileNode):
            for loop in node.loops:
                steps[loop.var] = min(steps[loop.var], loop.step)
            if isinstance(node.child, OpNode):
                return TileNode(node.level, node.loops,
                                self._array(node.level, node.child, steps, share), node.name)
            return TileNode(node.level, node.loops, self._map_pes(node.child, steps, share),
                            node.name)
        return node

    def _array(self, level: str, op: OpNode, steps: dict[str, int], share: int) -> Node:
        chain_op = self.chain.op(op.op)
        index = [o.name for o in self.chain.ops].index(op.op)
        spatial = [lp for lp in self.chain.loop_names
                   if lp in self.chain.op_loops(index) and lp not in chain_op.reduce_loops
                   and steps[lp] > 1]
        widest = sorted(spatial, key=lambda lp: -steps[lp])[:2]
        spatial = [lp for lp in spatial if lp in widest]
        rows = max(1, self.pe_rows // share)
        dims = [self.pe_cols, rows] if len(spatial) > 1 else [rows * self.pe_cols]
        loops = []
        for lp, width in zip(reversed(spatial), dims):
            loops.insert(0, Loop(lp, math.ceil(steps[lp] / min(width, steps[lp])),
                                 LoopKind.SPATIAL))
        return TileNode(level, tuple(loops), op) if loops else op

    def cost(self, tree: DataflowTree) -> TreeCost:
        return analyze_tree(tree, self.spec)

    def chimera_start(self) -> tuple[Structure, dict[str, int]]:
        """Chimera's analytical solution for the innermost level: its order, Seq, its tiles."""
        level = self.spec.memory.levels[-1]
        solution = solve_chain(self.chain, capacity_bytes=level.size_bytes)
        order = tuple(solution.order)
        if order not in self.orders:
            self.orders.append(order)
        return Structure(order, ScopeKind.SEQ, level.name), dict(solution.tiles)


def _tile_choices(extent: int) -> tuple[int, ...]:
    values = {extent}
    size = 1
    while size < extent:
        values.add(size)
        size *= 2
    return tuple(sorted(values))


def _example_spec() -> TargetSpec:
    from tilecraft.target.spec import load_spec
    return load_spec({
        "name": "example", "api_version": 1, "version": "0",
        "memory": {"levels": [
            {"name": "DRAM", "size_bytes": None, "bandwidth_bytes_per_cycle": 16,
             "kind": "dram"},
            {"name": "L1", "size_bytes": 1 << 18, "bandwidth_bytes_per_cycle": 128}]},
        "compute": {"cores": 4, "frequency_hz": 1e9, "vector_bits": 0,
                    "processing_elements": 64},
        "primitives": ["split"], "loop_kinds": ["serial"], "evaluation": "estimate",
        "capabilities": {"models_performance": True}})


__all__ = ["ChainSpace", "Structure"]
