"""A contraction lowered with B packed inside the parallel loop, one block of columns at a time.

:func:`~.register_tiles.lower_contraction` packs all of B first, in a kernel of
its own, into a workspace the size of B (for a convolution, of its im2col matrix: 29 MB for the
second YOLO-v1 layer), which the main kernel then reads back from memory. Here, as in the
outer loops of BLIS/Goto GEMM, one kernel runs in parallel over (batch, blocks of ``NC``
panels of B); for each ``KC`` slice of the reduction it packs the block's ``KC x NC*NR`` slice
of B into a local buffer that stays in L2, then calls the micro-kernel for every ``MC`` block of
rows of A, every panel of the block and every ``MI``-row strip. A is read in place (the
micro-kernel with semantics ``C[m, n] += A[m, k] * B[k, n]``), so it must be a row-major
``[batch?, M, K]`` view of its tensor; otherwise :func:`lower_block_packed` returns ``None``.

With ``Blocking(pack_b=False)`` and B a row-major view of its tensor
(:func:`~.register_tiles.b_row_view`) nothing is packed: each block's panels are read from B's
rows in place, the blocks still splitting the columns among the threads.

Each column block re-reads A, so this pays where B is large next to A: a convolution's early
layers (many output pixels, few weights), wide GEMMs. The packing scales with the threads (each
packs its own blocks) and no workspace is written to memory and read back.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> A = te.placeholder((5, 3), name="A")
>>> B = te.placeholder((3, 40), name="B")
>>> c = as_contraction(ops.matmul(A, B, name="C"))
>>> kernels = lower_block_packed(c, "rows", Blocking(mi=2, nr=4, kc=3, mc=4), 3,
...                              LoweringOptions(vector_lanes=4))
>>> [k.name for k in kernels], [p.name for p in kernels[0].params]
(['C'], ['B', 'A', 'C'])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    IfThenElse,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Stmt,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction
from tilecraft.te.expr import Var, const
from tilecraft.te.functions import eq
from tilecraft_x86_avx512.blocking.building import (
    axes_in,
    ceil_div,
    contraction_kernel,
    nest,
    parallel_kind,
)
from tilecraft_x86_avx512.blocking.register_tiles import (
    Blocking,
    a_row_view,
    aligned_kc,
    b_row_view,
    edge_tiles,
    operand_source,
    panel_copy,
    with_block_epilogue,
)

if TYPE_CHECKING:
    from tilecraft_x86_avx512.blocking.epilogue import Epilogue


def lower_block_packed(contraction: Contraction, rows_micro_kernel: str, blocking: Blocking,
                       panels_per_block: int, options: LoweringOptions,
                       pack_level: str | None = None,
                       epilogue: Epilogue | None = None) -> list[Kernel] | None:
    """One kernel computing ``contraction`` with B packed per block of ``panels_per_block``
    panels inside the parallel loop (see the module docstring), or ``None`` when A is not a
    row-major view of its tensor. ``rows_micro_kernel`` has semantics
    ``C[m, n] += A[m, k] * B[k, n]`` and parameters ``MI``, ``NR``, ``KI`` (and ``MV``,
    ``NC`` on ragged edges). ``epilogue`` (:mod:`.epilogue`): an elementwise consumer computed
    on each tile after the last ``KC`` slice, the kernel computing the consumer instead."""
    c, bl = contraction, blocking
    tensor = c.tensor
    batch, m_total, n_total, k_total = c.extents()
    dtype = tensor.dtype
    param_level = options.param_level
    kc = min(bl.kc, k_total)
    k_blocks = ceil_div(k_total, kc)
    kc = ceil_div(k_total, k_blocks)                 # equal slices; the last one may be shorter
    aligned = aligned_kc(c, bl.kc)
    if aligned is not None:  # A's rows run in pieces (an outer k axis): slices inside them
        kc, k_blocks = aligned, k_total // aligned
    k_last = k_total - (k_blocks - 1) * kc
    panels = ceil_div(n_total, bl.nr)
    per_block = max(1, min(panels_per_block, panels))
    n_blocks = ceil_div(panels, per_block)
    mc = min(bl.mc, ceil_div(m_total, bl.mi) * bl.mi)
    m_blocks = ceil_div(m_total, mc)
    strips = mc // bl.mi
    t, pc, mb, jr, ir = Var("t"), Var("pc"), Var("mb"), Var("jr"), Var("is")
    b_index = t // n_blocks if batch > 1 else const(0)
    block = t % n_blocks if n_blocks > 1 else const(0)
    m0 = mb * mc + ir * bl.mi
    found = a_row_view(c, b_index, m0, pc * kc, param_level, kc)
    if found is None:
        return None
    a_view, a_base = found
    out = Buffer(tensor.name, (batch, m_total, n_total), dtype, level=param_level) \
        if epilogue is None else epilogue.out
    last = eq(pc, k_blocks - 1) if k_blocks > 1 else None
    if epilogue is not None:
        epilogue.check_slices(k_blocks)
    source = operand_source(c.b, c.batch_axes, c.n_axes, c.k_axes, options)
    local = Buffer(f"{tensor.name}_bblock", (per_block, kc, bl.nr), dtype,
                   level=pack_level or param_level)
    panel = block * per_block + jr
    batched = any(a in axes_in(c.b) for a in c.batch_axes)
    # B read in place (PACK_B=0): each panel's KC x NR slice straight from its rows
    b_rows = None if bl.pack_b else b_row_view(c, b_index, pc * kc, panel * bl.nr, param_level)

    def slice_body(ki: int) -> Stmt:
        pack = panel_copy(c.b, tensor, source, c.batch_axes, c.n_axes, c.k_axes, bl.nr,
                          options, b_index if batched else None, panel, pc * kc, ki, local,
                          (jr,))
        if panels % per_block:  # the last block has fewer panels
            pack = IfThenElse(panel < panels, pack)
        a_region = Region(a_view, a_base, (*(1,) * (len(a_base) - 2), bl.mi, ki))
        b_region = Region(local, (jr, const(0), const(0)), (1, ki, bl.nr)) if b_rows is None \
            else Region(b_rows[0], b_rows[1], (*(1,) * (len(b_rows[1]) - 2), ki, bl.nr))
        tiles = edge_tiles(rows_micro_kernel, a_region, b_region, out, b_index, m0,
                           panel * bl.nr, m_total, n_total, bl.mi, bl.nr,
                           (("MI", bl.mi), ("NR", bl.nr), ("KI", ki)), eq(pc, 0), options,
                           a_rows_dim=-2, epilogue=epilogue, last=last)
        panel_tiles = with_block_epilogue(nest([(ir, strips, LoopKind.SERIAL, 0)], tiles),
                                          epilogue, last, b_index, mb * mc, mc, m_total,
                                          panel * bl.nr, n_total, bl.nr, options)
        if panels % per_block:
            panel_tiles = IfThenElse(panel < panels, panel_tiles)
        compute = nest([(mb, m_blocks, LoopKind.SERIAL, 0), (jr, per_block, LoopKind.SERIAL, 0)],
                       panel_tiles)
        if b_rows is not None:
            return compute
        return Seq((nest([(jr, per_block, LoopKind.SERIAL, 0)], pack), compute))

    body = slice_body(kc) if k_last == kc else \
        IfThenElse(pc < k_blocks - 1, slice_body(kc), slice_body(k_last))
    outer = batch * n_blocks
    body = nest([(pc, k_blocks, LoopKind.SERIAL, 0)], body)
    if b_rows is None:
        body = Allocate(local, body, zeroed=False)   # every panel read is packed first
    body = nest([(t, outer, parallel_kind(options, outer), 0)], body)
    how = f"B packed per block of {per_block} panels" if b_rows is None else \
        f"B read in place by blocks of {per_block} panels"
    step = " > [pack B block]" if b_rows is None else ""
    schedule = (f"micro-kernel {rows_micro_kernel} MI={bl.mi} NR={bl.nr} KC={kc} MC={mc}, A "
                f"read in place, {how}: parallel({outer}) > k-slices({k_blocks}){step} > "
                f"row blocks({m_blocks}) > panels({per_block}) > strips({strips})")
    finish = contraction_kernel if epilogue is None else epilogue.kernel
    b_param = source if b_rows is None else b_rows[0]
    return [finish(tensor, [b_param, a_view, out], body, rows_micro_kernel, schedule, options)]


__all__ = ["lower_block_packed"]
