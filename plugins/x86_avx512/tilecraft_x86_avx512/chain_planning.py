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
useful work after padding ``L`` (first product) or ``N`` (second product). A chain whose blocks
would each read ``B1`` and ``D`` again from beyond L2, for more bytes than the unfused
intermediate moves (:func:`_chain_traffic`: a Transformer's FFN), is left unfused, with the
figures in the reason.

Convolution chains (thesis Table 3.6) are blocked by ``NC`` output pixels
(:func:`planned_column_tiles`): the solver sees the two matrix products the column kernel
computes on im2col columns; the packing zero-pads the last block, so every block counts whole
(``whole_blocks``).

Measured against the block-size model it replaces (AMD EPYC Zen 4, 2 cores, 1 thread, best of
interleaved medians; the machine was shared, so differences under ~1% are noise): the same
blocks on G1-G3 and G10 (and on two threads on G11, G12); G4-G6, G9, G11, G12 equal within 1%;
G7 4% slower (the model's 3x112 register tile beats Eq. 3.4's 5x80); conv chains C1-C5, C7,
C8: the same blocks or within 1%.

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


def _useful_intensity(tile: RegisterTile, extent: int, padded_by: int) -> float:
    """A register tile's Eq. 3.4 intensity times the share of useful work on a loop of
    ``extent`` padded to the tile's ``padded_by`` side (0: rows, 1: columns)."""
    side = tile[padded_by]
    return tile[2] * extent / (math.ceil(extent / side) * side)


def _best_tile(tiles: Sequence[RegisterTile], extent: int, padded_by: int) -> RegisterTile:
    """Eq. 3.4's tile for a loop of ``extent`` padded to the tile's ``padded_by`` side."""
    return max(tiles, key=lambda tile: _useful_intensity(tile, extent, padded_by))


def _block_tile(core: Any, spec: TargetSpec, constraints: dict[str, Any], loop: str,
                total: int, step: int, parallel: Any) -> tuple[int | None, str]:
    """The solver's L2 tile of ``loop`` (of ``total`` iterations) with the blocks spread as
    ``parallel`` says: a tile covering the whole loop is one block, rounded up to ``step``;
    or ``None`` and why the chain does not fit."""
    from tilecraft.fusion import solve_chain

    solution = solve_chain(core, spec=spec, levels=["L2"], constraints=constraints,
                           parallel=parallel)
    if not solution.fused:
        return None, solution.reason
    tile = solution.tiles[loop]
    return (math.ceil(total / step) * step if tile >= total else tile), ""


def _rates(spec: TargetSpec, tiles: Sequence[RegisterTile],
           uses: dict[str, tuple[RegisterTile, int, int]]) -> dict[str, float]:
    """Flops per cycle of each product (by operator name): one core's fp32 peak times its
    register tile's useful intensity relative to the best tile's."""
    best = max(t[2] for t in tiles)
    peak = spec.compute.flops_per_core("float32") / spec.compute.frequency_hz
    return {name: peak * _useful_intensity(tile, extent, side) / best
            for name, (tile, extent, side) in uses.items()}


def planned_chain_tiles(chain: Any, tiles: Sequence[RegisterTile], spec: TargetSpec,
                        threads: int, rows: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The fields of a ``ChainBlocking`` for ``chain`` (the fused kernels' chain: ``first``
    and ``second`` contractions) from the solver, or ``None`` and why it does not fit.
    ``tiles`` are the micro-kernel's feasible register tiles; ``rows``: the tile of ``T`` has
    rows ``M`` (see the x86 fusion module); ``threads``: the cores the blocks spread over."""
    from tilecraft.fusion import FusionError, LoopConstraint, ParallelExecution, chain_from_computes

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
    rates = _rates(spec, tiles, {core.ops[0].name: ((mi1, nr1, ai1), l_total, 1 if rows else 0),
                                 core.ops[-1].name: ((mi2, nr2, ai2), n_total, 1)})
    parallel = ParallelExecution(loops=(*batch_loops, m_loop), units=threads,
                                 flops_per_cycle=rates)
    mc, reason = _block_tile(core, spec, constraints, m_loop, m_total, step, parallel)
    if mc is None:
        return None, reason
    fused_bytes, unfused_bytes, weights = _chain_traffic(
        chain, mc, spec.memory.level("L2").size_bytes - 4 * l_padded * mc)
    if fused_bytes > unfused_bytes:
        blocks = math.ceil(m_total / mc)
        return None, (f"fusing reads B1 and D ({weights / 2**20:.1f} MB) again for each of its "
                      f"{blocks} blocks of {mc} rows per batch: {fused_bytes / 2**20:.0f} MB "
                      f"from beyond L2 against {unfused_bytes / 2**20:.0f} MB unfused (the "
                      "intermediate written and read once per pass), for the same flops")
    return dict(mi1=mi1, nr1=nr1, mi2=mi2, nr2=nr2, mc=mc, rows=rows), ""


def _chain_traffic(chain: Any, mc: int, room: int) -> tuple[int, int, int]:
    """Bytes the chain moves between memory and L2, fused with blocks of ``mc`` rows and
    unfused, and the bytes of one reading of ``B1`` and ``D``: fused, each block reads all of
    ``B1`` and ``D`` (of its batch) while the intermediate stays in L2 — from beyond L2 unless
    they fit the ``room`` the intermediate's tile leaves there; unfused, the GEMM
    template reads them about once (its row blocks span hundreds of rows) and the intermediate
    is written and read once, plus once more by each full-size memory-bound compute between.
    ``A1`` and ``E`` cost the same either way. A chain whose weights are large against its
    intermediate (a Transformer's FFN: ``B1``, ``D`` 9 MB each, ``T`` 6 MB, 9 blocks of 60
    rows) moves more fused; measured on the BERT-base FFN (Xeon family 6 model 167, 1 thread,
    loaded machine) the unfused GEMMs won 45 of 48 back-to-back pairs (medians 40.3-41.1 ms
    against 46.9-47.2 fused), and were within +-5% of fused on a quieter one."""
    from tilecraft_x86_avx512.blocking.building import axes_in

    first, second = chain.first, chain.second
    batch, m_total, l_total, k_total = first.extents()
    _, _, n_total, _ = second.extents()
    batched = [any(a in axes_in(c.b) for a in c.batch_axes) for c in (first, second)]
    per_batch = 4 * (k_total * l_total + l_total * n_total)
    weights = 4 * sum((batch if b else 1) * size for b, size in
                      zip(batched, (k_total * l_total, l_total * n_total)))
    blocks = batch * math.ceil(m_total / mc)
    fused = blocks * per_batch if per_batch > room else weights
    full = sum(1 for t in chain.between if tuple(t.shape) == tuple(first.tensor.shape))
    unfused = weights + 2 * 4 * batch * m_total * l_total * (1 + full)
    return fused, unfused, per_batch


def _matrix_chain(batch: int, rows1: int, columns: int, depth1: int, rows2: int) -> Any:
    """Chimera's chain of the matrix products a column chain's kernel computes:
    ``T[b, l, n] = sum_k W1[l, k] X[b, k, n]`` (``X`` the im2col columns the kernel packs) and
    ``E[b, m, n] = sum_l W2[m, l] T[b, l, n]``; loops named as ``T``'s and ``E``'s axes."""
    from tilecraft import te
    from tilecraft.fusion import chain_from_computes

    w1 = te.placeholder((rows1, depth1), name="W1")
    x = te.placeholder((batch, depth1, columns), name="X")
    w2 = te.placeholder((rows2, rows1), name="W2")
    k = te.reduce_axis(depth1, name="k")
    first = te.compute((batch, rows1, columns),
                       lambda b, l, n: te.sum(w1[l, k] * x[b, k, n], axis=k),  # noqa: E741
                       name="T")
    l_axis = te.reduce_axis(rows1, name="l")
    second = te.compute((batch, rows2, columns),
                        lambda b, m, n: te.sum(w2[m, l_axis] * first[b, l_axis, n], axis=l_axis),
                        name="E")
    return chain_from_computes([first, second])


def planned_column_tiles(chain: Any, tiles: Sequence[RegisterTile], spec: TargetSpec,
                         threads: int) -> tuple[dict[str, Any] | None, str]:
    """The fields of a ``ColumnBlocking`` for a column chain (a convolution chain: ``first``
    computes ``T[l, n]`` from the im2col columns, ``second`` ``E[m, n]`` from ``T``) from the
    solver, or ``None`` and why it does not fit. The solver sees the matrix products the kernel
    computes, with its constraints: ``L`` whole, the reduction ``K`` in the kernel's ``kc``
    slices, one batch per block, ``NC`` columns a multiple of both register tiles' columns and
    at most as many as keep a ``kc`` slice of packed columns plus the ``L x NC`` intermediate
    tile within half of L2; blocks of (batch, ``NC`` columns) spread over ``threads`` cores.
    ``kc`` is the GEMM template's: a ``kc x NR1`` panel of packed columns fills half of L1."""
    from tilecraft.fusion import FusionError, LoopConstraint, ParallelExecution

    batch, l_total, n_total, k_total = chain.first.extents()
    _, m_total, _, _ = chain.second.extents()
    mi1, nr1, ai1 = _best_tile(tiles, l_total, 0)
    # the second product's columns match the first's where that costs little
    mi2, nr2, ai2 = _best_tile([t for t in tiles if t[1] == nr1] or list(tiles), m_total, 0)
    step = math.lcm(nr1, nr2)
    l_padded = math.ceil(l_total / mi1) * mi1
    l1_bytes = spec.memory.level("L1").size_bytes
    kc = max(16, min(k_total, (l1_bytes // 2) // (4 * nr1) // 16 * 16 or 16))
    half_l2 = spec.memory.level("L2").size_bytes // 2
    per_column = 4 * (l_padded + kc)
    columns_in_half_l2 = half_l2 // per_column // step * step
    if columns_in_half_l2 < step:
        return None, (f"the smallest block (a slice of packed input rows and {l_total} "
                      f"intermediate rows of {step} columns) needs {per_column * step // 1024} "
                      f"KB, more than half of L2 ({half_l2 // 1024} KB)")
    try:
        core = _matrix_chain(batch, l_total, n_total, k_total, m_total)
    except FusionError as err:
        return None, f"the fusion planner cannot model the chain: {err}"
    constraints = {"n": LoopConstraint(multiple_of=step, maximum=columns_in_half_l2),
                   "l": LoopConstraint(minimum=l_total),
                   "k": LoopConstraint(minimum=kc, maximum=kc),
                   "b": LoopConstraint(maximum=1)}
    rates = _rates(spec, tiles, {"T": ((mi1, nr1, ai1), l_total, 0),
                                 "E": ((mi2, nr2, ai2), m_total, 0)})
    # the packing zero-pads the last block's columns: every block computes NC columns
    parallel = ParallelExecution(loops=("b", "n"), units=threads, flops_per_cycle=rates,
                                 whole_blocks=True)
    nc, reason = _block_tile(core, spec, constraints, "n", n_total, step, parallel)
    if nc is None:
        return None, reason
    return dict(mi1=mi1, nr1=nr1, mi2=mi2, nr2=nr2, nc=nc, kc=kc), ""


__all__ = ["chain_loops", "planned_chain_tiles", "planned_column_tiles"]
