"""Block sizes of a fused GEMM chain from Chimera's tile solver (thesis §3.4.3,
:func:`tilecraft.fusion.solve_chain`): the translation between the solver's tiles and the x86
fused kernels' ``ChainBlocking``.

The solver gets the chain's loops with the kernels' constraints: the intermediate's reduction
loop ``L`` whole (the kernels keep whole rows of ``T``), the rows ``M`` in multiples of both
register tiles and at most as many as keep the ``L x MC`` tile of ``T`` within half of L2, one
batch per block. It minimises the most loaded core's time
(:class:`~tilecraft.fusion.ParallelExecution`): the blocks are (batch, ``MC`` rows) pairs
spread over the threads, each core computing at the spec's measured peak times the register
tiles' efficiency, plus the bytes moved into L2 over the bandwidth from L3. Its tile of ``M``
becomes ``MC`` (a tile covering all rows is one block). The register tiles are Eq. 3.4's:
among the micro-kernel's feasible tiles, the one with the highest intensity times the share of
useful work after padding ``L`` (first product) or ``N`` (second product).

Measured against the block-size model it replaces (this 2-core Zen 4, 1 thread, best of 7
interleaved medians of 9, bench chains G4-G12 of thesis Table 3.5): equal within 1% except G7
(the model's 3x112 register tile, 4% faster than Eq. 3.4's 5x80).

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


def _efficiency(tile: RegisterTile, best: float, extent: int, padded_by: int) -> float:
    """The share of one core's peak a register tile reaches on a loop of ``extent``: its Eq.
    3.4 intensity relative to the best tile's, times the useful share after padding."""
    side = tile[padded_by]
    return tile[2] / best * extent / (math.ceil(extent / side) * side)


def planned_chain_tiles(chain: Any, tiles: Sequence[RegisterTile], spec: TargetSpec,
                        threads: int, rows: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The fields of a ``ChainBlocking`` for ``chain`` (the fused kernels' chain: ``first``
    and ``second`` contractions) from the solver, or ``None`` and why it does not fit.
    ``tiles`` are the micro-kernel's feasible register tiles; ``rows``: the tile of ``T`` has
    rows ``M`` (see the x86 fusion module); ``threads``: the cores the blocks spread over."""
    from tilecraft.fusion import (
        FusionError,
        LoopConstraint,
        ParallelExecution,
        chain_from_computes,
        solve_chain,
    )

    _, m_total, l_total, _ = chain.first.extents()
    _, _, n_total, _ = chain.second.extents()
    mi1, nr1, ai1 = _best_tile(tiles, l_total, 1 if rows else 0)
    mi2, nr2, ai2 = _best_tile(tiles, n_total, 1)
    step = math.lcm(mi1 if rows else nr1, mi2)
    side = nr1 if rows else mi1
    l_padded = math.ceil(l_total / side) * side
    try:
        core = chain_from_computes([chain.first.tensor, chain.second.tensor])
        m_loop, l_loop = chain_loops(chain.first.tensor, chain.second.tensor)
    except FusionError as err:
        return None, f"the fusion planner cannot model the chain: {err}"
    extents = {loop.name: loop.extent for loop in core.loops}
    output = core.ops[-1].output
    batch_loops = [lp for index in output.indices[:-2] for lp in index.loops]
    # the kernels keep the L x MC tile of T in half of L2
    half_l2 = spec.memory.level("L2").size_bytes // 2
    rows_in_half_l2 = half_l2 // (4 * l_padded) // step * step
    if rows_in_half_l2 < min(step, m_total):
        return None, (f"the smallest intermediate tile ({l_total} x {step} rows) needs "
                      f"{4 * l_padded * step // 1024} KB, more than half of L2 "
                      f"({half_l2 // 1024} KB)")
    rows_in_half_l2 = max(step, rows_in_half_l2)
    constraints = {m_loop: LoopConstraint(multiple_of=step, maximum=rows_in_half_l2),
                   l_loop: LoopConstraint(minimum=extents[l_loop])}
    # the kernels take one batch per block
    constraints.update({lp: LoopConstraint(maximum=1) for lp in batch_loops})
    best = max(t[2] for t in tiles)
    peak = spec.compute.flops_per_core("float32") / spec.compute.frequency_hz
    rates = {core.ops[0].name: peak * _efficiency((mi1, nr1, ai1), best, l_total,
                                                  1 if rows else 0),
             core.ops[-1].name: peak * _efficiency((mi2, nr2, ai2), best, n_total, 1)}
    parallel = ParallelExecution(loops=(*batch_loops, m_loop), units=threads,
                                 flops_per_cycle=rates)
    solution = solve_chain(core, spec=spec, levels=["L2"],
                           constraints=constraints, parallel=parallel)
    if not solution.fused:
        return None, solution.reason
    tile = solution.tiles[m_loop]
    # a tile covering every row is one block (rounded up to whole register tiles)
    mc = math.ceil(m_total / step) * step if tile >= m_total else tile
    return dict(mi1=mi1, nr1=nr1, mi2=mi2, nr2=nr2, mc=mc, rows=rows), ""


__all__ = ["chain_loops", "planned_chain_tiles"]
