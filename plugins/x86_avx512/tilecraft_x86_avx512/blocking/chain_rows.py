"""Fused contraction chains with the intermediate in row layout, on a micro-kernel that reads A
rows in place (thesis §3.4; the alternative to :func:`~.contraction_chain.lower_chain`).

:func:`~.contraction_chain.lower_chain` keeps the intermediate transposed (``T^T[L,
MC]``) so that the outer-product micro-kernel (``C[m, n] += A[k, m] * B[k, n]``) can read it
as the second product's A operand — at the price of packing ``A1^T`` for every block, a
gather along ``k`` that measured ~6% of a G-chain. With a micro-kernel reading A as rows
(``C[m, n] += A[m, k] * B[k, n]``, each row of A a contiguous stream), neither product packs
A: in parallel over (batch, blocks of ``MC`` rows of ``m``), each block

1. computes ``T[MC, L]`` row by row: A = ``A1``'s rows read in place, B = ``B1`` packed once
   into ``NR1``-column panels by its own kernel;
2. applies the memory-bound computes in place, vectorised along ``l`` (a row reduction such as
   softmax's max and sum reduces across the lanes; see
   :func:`~.contraction_chain.between_passes` for the fewer-passes rules);
3. multiplies the tile's rows, read in place, by the packed ``D`` into ``E``'s rows.

The tile tree is ``[batch x M/MC] (parallel) > { T[MC, L] in L2; E[MC, N] }``. It applies when
``A1`` is a row-major ``[batch?, M, K]`` view of its tensor (:func:`.a_row_view`).

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft_x86_avx512.blocking.contraction_chain import ChainBlocking, as_chain
>>> A = te.placeholder((40, 16), name="A")
>>> B = te.placeholder((16, 30), name="B")
>>> D = te.placeholder((30, 8), name="D")
>>> chain = as_chain(ops.matmul(ops.relu(ops.matmul(A, B, name="T")), D, name="E"))
>>> kernels = lower_chain_rows(chain, "rows", ChainBlocking(2, 4, 2, 4, 8, rows=True),
...                            LoweringOptions(vector_lanes=4))
>>> [k.name for k in kernels]
['T_b1packed_pack', 'E_dpacked_pack', 'E']
"""

from __future__ import annotations

import math

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import (
    Buffer,
    IfThenElse,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.expr import Var, const
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    nest,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.contraction_chain import (
    ChainBlocking,
    ContractionChain,
    between_inputs,
    between_passes,
    fused_chain_kernel,
    scale_rows,
)
from tilecraft_x86_avx512.blocking.register_tiles import (
    a_row_view,
    edge_tiles,
    pack_operand,
    written_tile,
)


def rows_applicable(chain: ContractionChain, level: str) -> bool:
    """Whether ``A1`` can be read as rows in place (a row-major ``[batch?, M, K]`` view)."""
    probe = Var("probe")
    return a_row_view(chain.first, probe, probe, probe, level) is not None


def lower_chain_rows(chain: ContractionChain, rows_micro_kernel: str, blocking: ChainBlocking,
                     options: LoweringOptions) -> list[Kernel]:
    """Pack kernels for ``B1`` and ``D``, and the fused kernel (see the module docstring).
    ``rows_micro_kernel`` has the semantics ``C[m, n] += A[m, k] * B[k, n]`` with parameters
    ``MI``, ``NR``, ``KI``, ``MV``, ``NC`` (A read as ``[MV, KI]`` rows)."""
    bl = blocking
    if not bl.rows:
        raise LoweringError("lower_chain_rows needs a ChainBlocking with rows=True")
    first, second = chain.first, chain.second
    ref, out = first.tensor, second.tensor
    batch, m_total, l_total, k_total = first.extents()
    _, _, n_total, l2 = second.extents()
    if l2 != l_total:
        raise LoweringError(f"chain {ref.name} -> {out.name}: the second contraction reduces "
                            f"over {l2} values but the first produces {l_total} columns")
    dtype = DType.FLOAT32
    lanes = max(1, options.lanes(dtype))
    level = options.param_level
    b1_pack = pack_operand(f"{ref.name}_b1packed", first.b, ref, first.batch_axes,
                           first.n_axes, first.k_axes, bl.nr1, k_total, options,
                           role=f"pack B of {ref.name} into l-panels")
    d_pack = pack_operand(f"{out.name}_dpacked", second.b, out, second.batch_axes,
                          second.n_axes, second.k_axes, bl.nr2, l_total, options,
                          role=f"pack B of {out.name}")
    b1p = Buffer(b1_pack.params[-1].name, b1_pack.params[-1].shape, dtype, level=level)
    dp = Buffer(d_pack.params[-1].name, d_pack.params[-1].shape, dtype, level=level)
    if b1p.shape[2] != k_total or dp.shape[2] != l_total:
        raise LoweringError("internal: B1 or D packed with padded k")  # pragma: no cover
    l_panels = b1p.shape[1]
    l_padded = l_panels * bl.nr1
    step = math.lcm(bl.mi1, bl.mi2)
    mc = min(bl.mc, ceil_div(m_total, step) * step)
    m_blocks = ceil_div(m_total, mc)
    tile = Buffer(f"{ref.name}_tile", (mc, l_padded), dtype, level=level)
    e_view = Buffer(out.name, (batch, m_total, n_total), dtype, level=level)
    t, jl, ms, row, col = Var("t"), Var("jl"), Var("ms"), Var("row"), Var("col")
    b_index = t // m_blocks if batch > 1 else const(0)
    m0 = (t % m_blocks) * mc
    found = a_row_view(first, b_index, m0 + ms * bl.mi1, const(0), level)
    if found is None:
        raise LoweringError(f"chain {ref.name} -> {out.name}: {first.a.tensor.name} is not a "
                            "row-major [batch?, M, K] view; lower it with lower_chain")
    a1_view, a1_base = found
    lead = (1,) * (len(a1_base) - 2)

    # T rows of the block: A = A1's rows in place, B = packed B1 panel, C = tile
    b1_batch = b_index if b1p.shape[0] > 1 else const(0)

    def strip(rows: int) -> Stmt:
        zero = nest([(row, rows, LoopKind.SERIAL, 0), (col, bl.nr1, vector_kind(options), lanes)],
                    Store(tile, (ms * bl.mi1 + row, jl * bl.nr1 + col), const(0.0)))
        return written_tile(rows_micro_kernel, (
            Region(a1_view, a1_base, (*lead, rows, k_total)),
            Region(b1p, (b1_batch, jl, const(0), const(0)), (1, 1, k_total, bl.nr1)),
            Region(tile, (ms * bl.mi1, jl * bl.nr1), (rows, bl.nr1))),
            (("MI", bl.mi1), ("NR", bl.nr1), ("KI", k_total), ("MV", rows), ("NC", bl.nr1)),
            zero)

    row0 = m0 + ms * bl.mi1
    rest = m_total % bl.mi1
    strips: Stmt = IfThenElse(row0 < m_total, strip(bl.mi1)) if not rest else IfThenElse(
        row0 + bl.mi1 <= m_total, strip(bl.mi1), IfThenElse(row0 < m_total, strip(rest)))
    first_gemm = nest([(jl, l_panels, LoopKind.SERIAL, 0),
                       (ms, mc // bl.mi1, LoopKind.SERIAL, 0)], strips)

    placeholders = between_inputs(chain, options)
    stmts, allocs, z_buffer, deferred = between_passes(chain, tile, b_index, m0, mc, l_total,
                                                       options, lanes, placeholders, rows=True)

    # E rows of the block: A = the tile's rows in place, B = packed D panel
    jr, ms2 = Var("jr"), Var("ms2")
    d_batch = b_index if dp.shape[0] > 1 else const(0)
    a_region = Region(z_buffer, (ms2 * bl.mi2, const(0)), (bl.mi2, l_total))
    b_region = Region(dp, (d_batch, jr, const(0), const(0)), (1, 1, l_total, bl.nr2))
    tiles = edge_tiles(rows_micro_kernel, a_region, b_region, e_view, b_index,
                       m0 + ms2 * bl.mi2, jr * bl.nr2, m_total, n_total, bl.mi2, bl.nr2,
                       (("MI", bl.mi2), ("NR", bl.nr2), ("KI", l_total)), const(True), options,
                       a_rows_dim=-2)
    second_gemm: Stmt = nest([(jr, ceil_div(n_total, bl.nr2), LoopKind.SERIAL, 0),
                              (ms2, mc // bl.mi2, LoopKind.SERIAL, 0)], tiles)
    if deferred is not None:  # the rows of E scaled instead of the tile
        second_gemm = Seq((second_gemm, scale_rows(deferred, e_view, b_index, m0, mc, m_total,
                                                   n_total, options, lanes)))

    outer = batch * m_blocks
    kernel = fused_chain_kernel(
        chain, Seq((first_gemm, *stmts, second_gemm)), (*allocs, tile), t, outer,
        [a1_view, b1p, dp], e_view, rows_micro_kernel,
        f"parallel({outer} = batch x M/{mc}) > T[{mc}x{l_padded}] local (tile {bl.mi1}x"
        f"{bl.nr1}, A1 read in place) > memory-bound ops in place > E rows (tile {bl.mi2}x"
        f"{bl.nr2})", options, placeholders,
        # rows past M stay unwritten: only E's rows past M read them, and are not stored
        written=(tile,))
    return [b1_pack, d_pack, kernel]


__all__ = ["lower_chain_rows", "rows_applicable"]
