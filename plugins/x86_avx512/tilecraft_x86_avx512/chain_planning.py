"""Block sizes of a fused GEMM chain from Chimera's tile solver (thesis §3.4.3,
:func:`tilecraft.fusion.solve_chain`) instead of the x86 block-size model of :mod:`.fusion`.

The translation: the chain's intermediate must stay in half of L2 (as the fused kernels
assume), so the solver gets the L2 level at half its size, the intermediate's reduction loop
``L`` whole (the kernels keep whole rows of ``T``) and the rows ``M`` in multiples of both
register tiles; its tile of ``M`` at L2 becomes ``MC`` (rounded down to that multiple). The
register tiles are Eq. 3.4's: among the micro-kernel's feasible tiles, the one with the
highest intensity times the share of useful work after padding ``L`` (first product) or ``N``
(second product).

Chimera's model minimises the data one core moves; it has no term for spreading the blocks
over the cores, which the x86 model has. Measured on the bench chains (thesis Table 3.5, this
2-core Zen 4, quiet, best of 11 interleaved medians): on one thread the planner's blocks are as
fast or up to 4% slower (G7, G8: 96 vs 99-100 GFLOP/s); on two threads 1-2% slower on G4-G6
and G9, 5% on G7/G8 and 13% on G12 (7 blocks on 2 cores: 176 vs 202 GFLOP/s), equal on G1-G3,
G10, G11. So :func:`tilecraft_x86_avx512.fusion.fuse_chains` uses these blocks only when
``TILECRAFT_X86_CHAIN_BLOCKING=planner``.

>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> A = te.placeholder((2, 96, 64), name="A")
>>> B = te.placeholder((2, 64, 128), name="B")
>>> D = te.placeholder((2, 128, 64), name="D")
>>> E = ops.batch_matmul(ops.batch_matmul(A, B, name="T"), D, name="E")
>>> loops = chain_loops(Graph.from_outputs([E]).computes[0], E)
>>> loops
('i', 'k')
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tilecraft.target.spec import TargetSpec
from tilecraft.te.tensor import Tensor

#: environment variable choosing the fused chains' block sizes: ``model`` (default, the x86
#: block-size model of :mod:`.fusion`) or ``planner`` (Chimera's solver, this module)
BLOCKING_VARIABLE = "TILECRAFT_X86_CHAIN_BLOCKING"
BLOCKING_CHOICES = ("model", "planner")

#: a feasible register tile of the micro-kernel: rows, columns, Eq. 3.4 intensity
RegisterTile = tuple[int, int, float]


def chain_loops(first: Tensor, second: Tensor) -> tuple[str, str]:
    """The names Chimera's chain (:func:`tilecraft.fusion.chain_from_computes`) gives the rows
    ``M`` of the fused intermediate and its reduction loop ``L`` in the second product."""
    from tilecraft.fusion import chain_from_computes

    chain = chain_from_computes([first, second])
    last = chain.ops[-1]
    return last.output.indices[-2].loops[0], last.reduce_loops[0]


def _best_tile(tiles: Sequence[RegisterTile], extent: int, padded_by: int) -> RegisterTile:
    """Eq. 3.4's tile for a loop of ``extent`` padded to the tile's ``padded_by`` side
    (0: rows, 1: columns): intensity times the share of useful work."""
    def score(tile: RegisterTile) -> float:
        side = tile[padded_by]
        return tile[2] * extent / (math.ceil(extent / side) * side)

    return max(tiles, key=score)


def planned_chain_tiles(chain: Any, tiles: Sequence[RegisterTile], l2_bytes: int,
                        spec: TargetSpec, rows: bool = False) -> tuple[dict[str, Any] | None,
                                                                        str]:
    """The fields of a ``ChainBlocking`` for ``chain`` (a micro-kernel chain: ``first`` and
    ``second`` contractions) from the solver, or ``None`` and why it does not fit. ``tiles``
    are the micro-kernel's feasible register tiles; ``rows``: the tile of ``T`` has rows
    ``M`` (see the x86 fusion module)."""
    from tilecraft.fusion import FusionError, LoopConstraint, chain_from_computes, solve_chain

    _, _, l_total, _ = chain.first.extents()
    _, _, n_total, _ = chain.second.extents()
    mi1, nr1, _ = _best_tile(tiles, l_total, 1 if rows else 0)
    mi2, nr2, _ = _best_tile(tiles, n_total, 1)
    step = math.lcm(mi1 if rows else nr1, mi2)
    side = nr1 if rows else mi1
    l_padded = math.ceil(l_total / side) * side
    try:
        core = chain_from_computes([chain.first.tensor, chain.second.tensor])
        m_loop, l_loop = chain_loops(chain.first.tensor, chain.second.tensor)
    except FusionError as err:
        return None, f"the fusion planner cannot model the chain: {err}"
    extents = {loop.name: loop.extent for loop in core.loops}
    constraints = {m_loop: LoopConstraint(multiple_of=step),
                   l_loop: LoopConstraint(minimum=extents[l_loop])}
    solution = solve_chain(core, spec=spec, levels=["L2"], capacity_fraction=0.5,
                           constraints=constraints)
    if not solution.fused:
        return None, solution.reason
    mc = max(step, solution.tiles[m_loop] // step * step)
    while mc > step and 4 * l_padded * mc > l2_bytes // 2:
        mc -= step  # the kernels' own residency rule: the L x MC tile in half of L2
    return dict(mi1=mi1, nr1=nr1, mi2=mi2, nr2=nr2, mc=mc, rows=rows), ""


__all__ = ["BLOCKING_CHOICES", "BLOCKING_VARIABLE", "chain_loops", "planned_chain_tiles"]
