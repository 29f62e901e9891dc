"""TileFlow at the graph level: fused dataflows for topologies that are not chains (issue 17
item 6).

Chimera's planner (:mod:`tilecraft.fusion.planner`) fuses producer -> consumer chains. Two
compute-intensive operators that read the *same* tensor and do not depend on each other (the
Q, K and V projections of one input, two GEMMs of a gated MLP) form no chain, yet a fused
dataflow can load the shared tensor once for both: a tile node over the loops that index the
shared tensor, around a ``Shar`` scope of the two operators (each with its private loops in its
own tile node). Run apart (a ``Seq`` scope: each operator loads its own tiles), each operator
has the whole level for its tiles. TileFlow's analysis (:func:`analyze_tree`) prices both on
the target's spec — DRAM traffic into the chosen level and latency — after a small search over
power-of-two tiles per tree, and the pair is fused when the fused tree fits and moves fewer
bytes between DRAM and the level. :func:`plan_shared_inputs` returns a
:class:`DataflowChoice` per pair, with both trees, their predicted traffic and the reason.

>>> from tilecraft import te, ops
>>> from tilecraft.graph import Graph
>>> from tilecraft.dataflow.chain_space import _example_spec
>>> X = te.placeholder((256, 128), name="X")
>>> A = ops.matmul(X, te.placeholder((128, 64), name="W1"), name="A")
>>> B = ops.matmul(X, te.placeholder((128, 64), name="W2"), name="B")
>>> [str(c.fused) for c in plan_shared_inputs(Graph.from_outputs([A, B]), _example_spec())]
['True']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import networkx as nx

from tilecraft.dataflow.cost import TreeCost, analyze_tree
from tilecraft.dataflow.errors import DataflowError
from tilecraft.dataflow.tree import DataflowTree, Loop, OpNode, ScopeKind, ScopeNode, TileNode
from tilecraft.dtypes import DType
from tilecraft.fusion.chain import Chain, ChainOp, FusionError, TensorAccess, TensorRole
from tilecraft.fusion.classify import is_compute_intensive
from tilecraft.fusion.derive import chain_from_computes
from tilecraft.graph import Graph
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor


@dataclass(frozen=True)
class DataflowChoice:
    """TileFlow's verdict on running ``ops`` (which share ``tensor``) as one fused dataflow."""

    ops: tuple[str, str]
    tensor: str
    level: str
    fused: bool
    reason: str
    fused_cost: TreeCost | None
    apart_cost: TreeCost

    @property
    def subject(self) -> str:
        return f"{self.ops[0]} + {self.ops[1]} (share {self.tensor})"

    def traffic(self, cost: TreeCost | None) -> int | None:
        return None if cost is None else cost.traffic_bytes(self.level)

    def __str__(self) -> str:
        return f"{self.subject}: {'fused' if self.fused else 'apart'} - {self.reason}"


def shared_input_pairs(graph: Graph) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Pairs of compute-intensive computes reading one tensor, neither depending on the other
    (first two readers per tensor, in topological order)."""
    order = {t: i for i, t in enumerate(graph.topological_order())}
    dag = graph.dag
    pairs, used = [], set()
    for tensor in sorted(graph.dag.nodes, key=lambda t: order.get(t, -1)):
        readers = [c for c in graph.consumers(tensor) if is_compute_intensive(c)
                   and c not in used]
        readers.sort(key=order.__getitem__)
        for first, second in itertools.combinations(readers, 2):
            if first in used or second in used:
                continue
            if nx.has_path(dag, first, second) or nx.has_path(dag, second, first):
                continue
            pairs.append((first, second, tensor))
            used |= {first, second}
    return pairs


def pair_chain(graph: Graph, first: Tensor, second: Tensor, shared: str) -> Chain:
    """The two operators over one set of loops: the loops indexing ``shared`` are one loop
    (named as the first operator's), every other loop keeps its own name per operator."""
    one = chain_from_computes([first], graph)
    two = chain_from_computes([second], graph)
    a, b = one.ops[0].access(shared), two.ops[0].access(shared)
    if len(a.indices) != len(b.indices) or any(
            len(x.terms) != 1 or len(y.terms) != 1 or x.terms[0][1] != 1 or y.terms[0][1] != 1
            for x, y in zip(a.indices, b.indices)):
        raise DataflowError(f"operators {first.name} and {second.name} index {shared} by more "
                            "than one loop per dimension (field indices); only plain loop "
                            "indices are merged")
    merged = {y.terms[0][0]: x.terms[0][0] for x, y in zip(a.indices, b.indices)}
    for old, new in merged.items():
        if one.extents[new] != two.extents[old]:
            raise DataflowError(f"{first.name} and {second.name} read {shared} over loops of "
                                f"different extents ({new}={one.extents[new]}, "
                                f"{old}={two.extents[old]})")
    ones = {lp: lp if lp in merged.values() else f"{lp}1" for lp in one.loop_names}
    twos = {lp: merged.get(lp, f"{lp}2") for lp in two.loop_names}
    one, two = one.renamed(ones), two.renamed(twos)
    loops = {lp.name: lp for lp in (*one.loops, *two.loops)}
    return Chain((one.ops[0], two.ops[0]), tuple(loops.values()))


def default_level(spec: TargetSpec) -> str:
    """The level tiles live in: the outermost bounded cache or scratchpad each core has its
    own of (x86: L2; Edge: L1), else the innermost bounded one."""
    bounded = [lv.name for lv in spec.memory.levels if lv.size_bytes is not None
               and lv.kind in (MemoryKind.CACHE, MemoryKind.SCRATCHPAD)]
    if not bounded:
        raise DataflowError(f"target {spec.name} has no bounded cache or scratchpad level "
                            "(field memory.levels) to keep tiles in")
    own = [name for name in bounded if spec.memory.instances(name) >= spec.compute.cores]
    return own[0] if own else bounded[-1]


def _choices(extent: int, smallest: int = 16) -> list[int]:
    powers = [p for p in (1 << e for e in range(14)) if smallest <= p < extent]
    return [*powers, extent]


def _best(trees: Sequence[DataflowTree], spec: TargetSpec, level: str) -> TreeCost | None:
    best = None
    for tree in trees:
        cost = analyze_tree(tree, spec)
        if not cost.feasible:
            continue
        key = (cost.traffic_bytes(level), cost.cycles)
        if best is None or key < (best.traffic_bytes(level), best.cycles):
            best = cost
    return best


def _search(chain: Chain, spec: TargetSpec, level: str, build, loops: Sequence[str],
            budget: int = 600, starts: Sequence[dict[str, int]] = ()) -> TreeCost | None:
    """The feasible tree of ``build(tiles)`` moving the fewest bytes into ``level`` (then the
    fewest cycles) over power-of-two tiles (from 16) of ``loops``: every combination when there
    are at most ``budget``, else coordinate descent from ``starts``, the smallest and the
    largest tiles."""
    best = _search_grid(chain, spec, level, build, loops, budget, starts, 16)
    # tiles below 16 only where nothing larger fits (they multiply the search)
    return best if best is not None else _search_grid(chain, spec, level, build, loops,
                                                      budget, starts, 1)


def _search_grid(chain: Chain, spec: TargetSpec, level: str, build, loops: Sequence[str],
                 budget: int, starts: Sequence[dict[str, int]],
                 smallest: int) -> TreeCost | None:
    grids = {lp: _choices(chain.extents[lp], smallest) for lp in loops}
    if math.prod(len(g) for g in grids.values()) <= budget:
        return _best([build(dict(zip(loops, vals)))
                      for vals in itertools.product(*(grids[lp] for lp in loops))], spec, level)
    best = None
    for tiles in (*starts, *({lp: grids[lp][end] for lp in loops} for end in (0, -1))):
        found = _best([build(tiles)], spec, level)
        for _ in range(3):
            for lp in loops:
                trial = _best([build({**tiles, lp: t}) for t in grids[lp]], spec, level)
                if trial is not None and (found is None or _key(trial, level) < _key(found,
                                                                                     level)):
                    found = trial
                    tiles = {v: _step(found.tree, v, chain.extents[v]) for v in loops}
        if found is not None and (best is None or _key(found, level) < _key(best, level)):
            best = found
    return best


def _loops(order: Sequence[str], tiles: dict[str, int], extents: dict[str, int]) -> tuple:
    """Tile loops of ``order`` (a tile covering its extent runs once and indexes nothing)."""
    return tuple(Loop(lp, min(tiles[lp], extents[lp])) for lp in order)


def _key(cost: TreeCost, level: str) -> tuple[int, float]:
    return cost.traffic_bytes(level), cost.cycles


def _step(tree: DataflowTree, var: str, extent: int) -> int:
    steps = [lp.step for n in tree.nodes() if isinstance(n, TileNode) for lp in n.loops
             if lp.var == var]
    return min([extent, *steps])


def fused_tree(chain: Chain, shared: Sequence[str], level: str,
               tiles: dict[str, int]) -> DataflowTree:
    """Tiles of the shared loops around ``Shar`` of the two operators' private loops."""
    first, second = chain.ops
    own = [[lp for lp in chain.loop_names if lp in chain.op_loops(i) and lp not in shared]
           for i in range(2)]
    ext = chain.extents
    children = tuple(TileNode(level, _loops(own[i], tiles, ext), OpNode(op.name), name=op.name)
                     for i, op in enumerate((first, second)))
    return DataflowTree(chain, TileNode(level, _loops(shared, tiles, ext),
                                        ScopeNode(ScopeKind.SHAR, children), name="shared"),
                        name=f"{first.name} + {second.name} fused")


def apart_tree(chain: Chain, level: str, tiles: Sequence[dict[str, int]],
               orders: Sequence[Sequence[str]]) -> DataflowTree:
    """Each operator in its own tile node (``tiles[i]`` in ``orders[i]`` for operator ``i``)
    under ``Seq``: it loads all its own data."""
    children = tuple(TileNode(level, _loops(orders[i], tiles[i], chain.extents),
                              OpNode(op.name), name=op.name) for i, op in enumerate(chain.ops))
    return DataflowTree(chain, ScopeNode(ScopeKind.SEQ, children),
                        name=f"{chain.ops[0].name}, {chain.ops[1].name} apart")


def _alone(chain: Chain, index: int, spec: TargetSpec,
           level: str) -> tuple[dict[str, int], tuple[str, ...]] | None:
    """The best tiles and order of operator ``index`` run by itself (its reductions innermost
    or outermost)."""
    op = chain.ops[index]
    loops = [lp for lp in chain.loop_names if lp in chain.op_loops(index)]
    single = Chain((op,), tuple(lp for lp in chain.loops if lp.name in loops))
    best, best_order = None, ()
    kept = [lp for lp in loops if lp not in op.reduce_loops]
    for order in (tuple(kept + list(op.reduce_loops)), tuple(list(op.reduce_loops) + kept)):
        found = _search(single, spec, level, lambda t, order=order: DataflowTree(
            single, TileNode(level, _loops(order, t, single.extents), OpNode(op.name))), loops)
        if found is not None and (best is None or _key(found, level) < _key(best, level)):
            best, best_order = found, order
    if best is None:
        return None
    return {lp: _step(best.tree, lp, chain.extents[lp]) for lp in loops}, best_order


def choose(chain: Chain, shared_tensor: str, spec: TargetSpec,
           level: str | None = None) -> DataflowChoice:
    """Fused or apart for the two operators of ``chain`` (see the module doc)."""
    level = level or default_level(spec)
    first, second = chain.ops
    shared = [lp for lp in chain.loop_names
              if lp in first.access(shared_tensor).loops]
    own = [_alone(chain, i, spec, level) for i in range(2)]
    starts = [{**own[1][0], **own[0][0]}] if None not in own else []
    fused = _search(chain, spec, level, lambda t: fused_tree(chain, shared, level, t),
                    chain.loop_names, starts=starts)
    apart = None if None in own else analyze_tree(apart_tree(
        chain, level, [o[0] for o in own], [o[1] for o in own]), spec)
    if apart is None or not apart.feasible:
        raise DataflowError(f"{first.name} and {second.name}: no tiling fits level {level} "
                            "even run apart (field size_bytes)")
    unit = f"B between DRAM and {level}"
    if fused is None:
        return DataflowChoice((first.name, second.name), shared_tensor, level, False,
                              f"no fused tiling fits {level}", None, apart)
    moved, alone = fused.traffic_bytes(level), apart.traffic_bytes(level)
    figures = (f"{moved:,} {unit} fused vs {alone:,} apart; {fused.cycles:,.0f} vs "
               f"{apart.cycles:,.0f} cycles")
    if moved < alone:
        reason = f"{shared_tensor} loaded once for both ({figures})"
    elif moved == alone:
        reason = f"fusing saves no traffic ({figures})"
    else:
        ours, theirs = _per_tensor(fused, level), _per_tensor(apart, level)
        grew = [t for t in ours if ours[t] > theirs.get(t, 0)]
        saved = theirs.get(shared_tensor, 0) - ours.get(shared_tensor, 0)
        reason = (f"loading {shared_tensor} once saves {saved:,} B, but the fused tiles move "
                  f"{sum(ours[t] - theirs.get(t, 0) for t in grew):,} B more of "
                  f"{', '.join(grew)} (partial sums or reloads: the two operators share "
                  f"{level}) ({figures})")
    return DataflowChoice((first.name, second.name), shared_tensor, level, moved < alone,
                          reason, fused, apart)


def _per_tensor(cost: TreeCost, level: str) -> dict[str, int]:
    """Bytes of each tensor crossing into or out of ``level``."""
    result: dict[str, int] = {}
    for record in cost.movement.records:
        if record.level == level:
            result[record.tensor] = result.get(record.tensor, 0) + record.bytes
    return result


_CHOICES: dict[tuple, object] = {}


def _cached_choice(chain: Chain, tensor: str, spec: TargetSpec,
                   level: str | None) -> DataflowChoice:
    """:func:`choose`, once per chain, tensor, spec and level in a process (a network repeats
    its layers' shapes)."""
    key = (chain, tensor, hash(spec.model_dump_json()), level)
    if key not in _CHOICES:
        _CHOICES[key] = choose(chain, tensor, spec, level)
    return _CHOICES[key]


def plan_shared_inputs(graph: Graph, spec: TargetSpec, level: str | None = None,
                       max_loops: int | None = None) -> tuple[DataflowChoice, ...]:
    """TileFlow's choice for every pair of :func:`shared_input_pairs` it can model (of at most
    ``max_loops`` loops together)."""
    choices = []
    for first, second, tensor in shared_input_pairs(graph):
        try:
            chain = pair_chain(graph, first, second, tensor.name)
            if max_loops is not None and len(chain.loops) > max_loops:
                continue
            choices.append(_cached_choice(chain, tensor.name, spec, level))
        except (DataflowError, FusionError):
            continue
    return tuple(choices)


# --- a chain with a residual ---------------------------------------------------------------

@dataclass(frozen=True)
class ResidualChoice:
    """TileFlow's verdict on adding ``residual`` (reading the chain's result and ``tensor``
    elementwise) inside the chain's fused tree, or after it."""

    chain: str
    residual: str
    tensor: str
    level: str
    fused: bool
    reason: str
    fused_cost: TreeCost | None
    apart_cost: TreeCost

    def traffic(self, cost: TreeCost | None) -> int | None:
        return None if cost is None else cost.traffic_bytes(self.level)

    def __str__(self) -> str:
        return (f"{self.chain} + {self.residual} (residual {self.tensor}): "
                f"{'fused' if self.fused else 'apart'} - {self.reason}")


def residual_sites(graph: Graph) -> list[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """``(producer, consumer, add, other)``: an elementwise compute ``add`` reading the result
    of a two-operator chain ``producer -> consumer`` and a tensor ``other`` of its shape."""
    from tilecraft.fusion.classify import is_elementwise_of

    sites = []
    for add in graph.computes:
        if is_compute_intensive(add):
            continue
        inputs = list(dict.fromkeys(add.inputs))
        if len(inputs) != 2:
            continue
        for result, other in (inputs, inputs[::-1]):
            if result.is_placeholder or not is_compute_intensive(result) or \
                    tuple(other.shape) != tuple(add.shape) or \
                    tuple(result.shape) != tuple(add.shape) or \
                    not is_elementwise_of(add, result) or not is_elementwise_of(add, other):
                continue
            producers = _intensive_above(graph, result)
            if len(producers) == 1:
                sites.append((producers[0], result, add, other))
                break
    return sites


def _intensive_above(graph: Graph, tensor: Tensor) -> list[Tensor]:
    found, stack, seen = [], [i for i in tensor.inputs if not i.is_placeholder], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if is_compute_intensive(node):
            found.append(node)
        else:
            stack.extend(i for i in node.inputs if not i.is_placeholder)
    return found


def residual_chain(graph: Graph, producer: Tensor, consumer: Tensor, add: Tensor,
                   other: Tensor) -> Chain:
    """The chain ``producer -> consumer`` with the residual as a third operator: it reads the
    consumer's result (now an intermediate) and ``other`` at the result's index."""
    chain = chain_from_computes([producer, consumer], graph)
    last = chain.ops[-1]
    out = last.output
    inner = replace(out, role=TensorRole.INTERMEDIATE)
    accesses = tuple(inner if a.tensor == out.tensor else a for a in last.accesses)
    residual = ChainOp(add.name, tuple(lp for lp in chain.loop_names if lp in out.loops), (), (
        inner, TensorAccess(other.name, out.indices, TensorRole.INPUT, DType(other.dtype)),
        TensorAccess(add.name, out.indices, TensorRole.OUTPUT, DType(add.dtype))))
    return Chain((*chain.ops[:-1], replace(last, accesses=accesses), residual), chain.loops)


def residual_trees(chain: Chain, level: str, tiles: dict[str, int]) -> tuple[DataflowTree,
                                                                               DataflowTree]:
    """The fused tree (the residual's tile node beside the chain's operators, under the
    loops they share) and the apart one (the chain's tree, then the residual's own)."""
    ext = chain.extents
    free = [lp for lp in chain.loop_names if not chain.loop(lp).full_extent]
    shared = [lp for lp in free if all(lp in chain.op_loops(i) for i in range(len(chain.ops)))]
    own = [TileNode(level, _loops([lp for lp in free if lp in chain.op_loops(i)
                                   and lp not in shared], tiles, ext), OpNode(op.name),
                    name=op.name) for i, op in enumerate(chain.ops)]
    fused = DataflowTree(chain, TileNode(level, _loops(shared, tiles, ext),
                                         ScopeNode(ScopeKind.SEQ, tuple(own)), name="shared"),
                         name="residual fused")
    pair = TileNode(level, _loops(shared, tiles, ext), ScopeNode(ScopeKind.SEQ, tuple(own[:-1])),
                    name="chain")
    alone = TileNode(level, _loops([lp for lp in free if lp in chain.op_loops(len(own) - 1)],
                                   tiles, ext), OpNode(chain.ops[-1].name), name="residual")
    apart = DataflowTree(chain, ScopeNode(ScopeKind.SEQ, (pair, alone)), name="residual apart")
    return fused, apart


def choose_residual(chain: Chain, other: str, spec: TargetSpec,
                    level: str | None = None) -> ResidualChoice:
    """Fused or apart for the residual (the chain's last operator) — see :func:`choose`."""
    level = level or default_level(spec)
    free = [lp for lp in chain.loop_names if not chain.loop(lp).full_extent]
    apart = _search(chain, spec, level, lambda t: residual_trees(chain, level, t)[1], free)
    names = " -> ".join(op.name for op in chain.ops[:-1])
    residual = chain.ops[-1].name
    if apart is None:
        raise DataflowError(f"chain {names}: no tiling fits level {level} even with the "
                            f"residual {residual} apart (field size_bytes)")
    starts = [{lp: _step(apart.tree, lp, chain.extents[lp]) for lp in free}]
    fused = _search(chain, spec, level, lambda t: residual_trees(chain, level, t)[0], free,
                    starts=starts)
    unit = f"B between DRAM and {level}"
    if fused is None:
        return ResidualChoice(names, residual, other, level, False,
                              f"no fused tiling fits {level}", None, apart)
    moved, alone = fused.traffic_bytes(level), apart.traffic_bytes(level)
    figures = f"{moved:,} {unit} fused vs {alone:,} apart"
    result = chain.ops[-2].output.tensor
    if moved < alone:
        reason = f"{result} stays in {level} for the residual ({figures})"
    else:
        ours, theirs = _per_tensor(fused, level), _per_tensor(apart, level)
        grew = [t for t in ours if ours[t] > theirs.get(t, 0)]
        reason = (f"keeping {result}'s tile for the residual shrinks the other tiles: "
                  f"{', '.join(grew) or 'nothing'} reloaded more than {result}'s store and "
                  f"load save ({figures})")
    return ResidualChoice(names, residual, other, level, moved < alone, reason, fused, apart)


def plan_residuals(graph: Graph, spec: TargetSpec, level: str | None = None,
                   max_loops: int | None = None) -> tuple[ResidualChoice, ...]:
    """TileFlow's choice for every :func:`residual_sites` entry it can model (chains of at
    most ``max_loops`` loops: a convolution chain's ten make the tile search seconds long)."""
    choices = []
    for producer, consumer, add, other in residual_sites(graph):
        try:
            chain = residual_chain(graph, producer, consumer, add, other)
            if max_loops is not None and len(chain.loops) > max_loops:
                continue
            key = (chain, other.name, hash(spec.model_dump_json()), level)
            if key not in _CHOICES:
                _CHOICES[key] = choose_residual(chain, other.name, spec, level)
        except (DataflowError, FusionError):
            continue
        choices.append(_CHOICES[key])
    return tuple(choices)


__all__ = ["DataflowChoice", "ResidualChoice", "apart_tree", "choose", "choose_residual",
           "default_level", "fused_tree", "pair_chain", "plan_residuals", "plan_shared_inputs",
           "residual_chain", "residual_sites", "residual_trees", "shared_input_pairs"]
