"""Contractions of narrow types on dot-product micro-kernels (int8 VNNI, bfloat16 pairs).

Dot-product instructions (x86 ``vpdpbusd`` / ``vdpbf16ps``, Arm ``sdot``, Mali ``arm_dot``) let
each 32-bit lane consume a *group* of consecutive ``k`` values per step: 4 bytes, or 2
bfloat16. A register-tile micro-kernel built on them (thesis §3.4.1.2, Algorithm 2) wants its
operands packed with the group innermost:

- ``A`` (the m side, one 32-bit group broadcast to every lane) as ``[MI, KG, G]``: row by
  row, so that packing it is a contiguous copy (A's own layout when ``k`` is its last axis);
- ``B`` (the n side, 16 columns x G values per vector) as ``[KG, NR, G]``;
- ``C[MI, NR]`` in the accumulator type: int32 for int8, float32 for bfloat16.

:func:`~tilecraft.passes.contraction.as_dot_product_contraction` (the core's) recognises
``C = sum_k cast(A) * cast(B)`` with uint8/int8 operands and an int32 result
(``ops.matmul(A, B, out_dtype="int32")``, ``ops.conv2d``), or bfloat16 operands with a float32
or bfloat16 result. :func:`lower_dot_product_contraction` gives the kernels:

1. ``<C>_bpacked_pack`` packs B once into the workspace ``<C>_bpacked[batch, NB, KG, NR, G]``,
   zero-padded to whole panels and to ``KG * G`` rows of ``k``. The loops are written so that
   LLVM's vectoriser turns them into wide loads and byte interleaves (``n`` innermost, the
   group unrolled), or plain copies when ``k`` is B's contiguous axis (``dense`` weights).
   When ``n`` fuses several axes (a convolution's output pixels), the packing reads B's
   im2col matrix, row by row: it writes each block's rows itself into a small buffer (or,
   when it also sums columns, ``<C>_bcols_im2col`` first writes the whole matrix
   ``<C>_bcols[batch, K, N]``);
2. ``<C>`` runs, in parallel over (batch, blocks of ``MC`` rows), for each ``KC`` slice: pack
   the A block into ``[MC/MI, MI, KC/G, G]`` and call the micro-kernel per tile, as the
   float32 lowering (:mod:`~.register_tiles`) does, edge tiles through a local
   tile. (The packing kernels are built in :mod:`~.dot_product_packing`.)

With ``panels_per_block`` (a GEMM whose A is read in place) the two are one kernel, in
parallel over (batch, blocks of panels of B): each iteration packs its block's panels into a
local ``<C>_bblock`` and computes every row block against them — the packing split over the
threads with no workspace, no second parallel region and no second call.

Zero padding: ``k`` is padded to the group (and to whole ``KC`` slices) with zeros in both
packed operands, so padded products add nothing — also for uint8 data, whose padding value 0
is a real value but is multiplied by a zero. Quantisation zero points are not part of the
contraction: ``sum (a - za)(b - zb) = sum ab - zb*sum_k a - za*sum_k b + K*za*zb`` is built in
the graph around the plain product-sum this module lowers (a convolution's input must then be
padded with its zero point, not 0). A factor that is not a bare (cast) load, such as
``cast(a) - za``, is not recognised and takes the default loop nest.

Sign compensation: ``vpdpbusd`` multiplies *unsigned* by *signed* bytes. The target chooses the
dtype A is packed in (``packed_a``); when it differs from A's, A is shifted while packing —
``int8 -> uint8`` adds 128, ``uint8 -> int8`` subtracts 128 — and the shift is taken back with
``sum (a + s) b = sum ab + s * colsum(b)``: the pack-B kernel also writes the compensation
``<C>_bcomp[batch, NB, NR] = -s * sum_k B[k, n]``, and every output tile starts from it instead
of zero. All of it is exact in wrapping int32 arithmetic, so int8 x int8 (what
``torch._int_mm`` computes) runs as uint8 x int8 with the same result bit for bit.

The shift can be B's instead (``packed_b``): ``sum a (b + s) = sum ab + s * rowsum(a)``. B is
packed anyway, so shifting it costs nothing, and an A that is read in place (row-major, ``G``
divides ``K``: :func:`reads_a_in_place`) then needs no packing pass at all — the target picks
this for int8 x int8 where it can. The row sums come from the target's row-sum micro-kernel
(``S[m] += cast(int32, A[m, kg, g])``), called for a strip of rows right after the strip's
first tile has brought those rows into cache, and are added as each tile is stored; without one,
the kernel ``<C>_arowcomp_sum`` writes ``<C>_arowcomp[batch * M]`` before the main kernel.

Whole tiles of a single ``k`` slice are computed in a local tile of their own, which a code
generator keeps in registers: it starts at the column compensation (or 0), the micro-kernel
accumulates onto it, and it is stored into C once.

bfloat16 products are exact in float32; the micro-kernel accumulates in float32. A bfloat16
result (``ops.matmul`` of two bfloat16 tensors) is accumulated in the float32 workspace
``<C>_acc`` and rounded once into C after the last slice, as the reference rounds on store.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> A = te.placeholder((5, 7), "int8", name="A")
>>> B = te.placeholder((7, 20), "int8", name="B")
>>> dot = as_dot_product_contraction(ops.matmul(A, B, name="C"))
>>> dot.group, dot.accumulator.value, dot.contraction.extents()
(4, 'int32', (1, 5, 20, 7))
>>> kernels = lower_dot_product_contraction(dot, "dot4", Blocking(mi=2, nr=16, kc=8, mc=4),
...                                         LoweringOptions(vector_lanes=16), packed_a="uint8")
>>> [k.name for k in kernels], kernels[0].outputs
(['C_bpacked_pack', 'C'], ('C_bpacked', 'C_bcomp'))
"""

from __future__ import annotations

from tilecraft.dtypes import DType, as_dtype
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import (
    DotProductContraction,
    as_dot_product_contraction,
)
from tilecraft.te.expr import (
    Expr,
    Var,
    const,
    select,
)
from tilecraft.te.functions import all_of, eq, minimum
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    nest,
    parallel_kind,
    unflatten,
    unique_params,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.dot_product_packing import (
    COLUMN_LANES,
    OperandReader,
    a_row_sums_kernel,
    b_batch,
    im2col_kernel,
    k_slices,
    pack_b_kernel,
    pack_b_panel,
    packing_shift,
    shifted,
)
from tilecraft_x86_avx512.blocking.register_tiles import (
    Blocking,
)


def reads_a_in_place(dot: DotProductContraction, kc: int, options: LoweringOptions) -> bool:
    """Whether A, unshifted, is read by the micro-kernel where it lies (as ``[rows, KG, G]``):
    ``k`` is its contiguous trailing axis, ``G`` divides ``K`` and the ``KC`` slices cover
    ``K`` without padding. Then shifting B instead of A (int8 x int8, uint8 x uint8) saves
    packing A at all: B is packed anyway.

    >>> from tilecraft import ops, te
    >>> A = te.placeholder((5, 12), "int8", name="A")
    >>> B = te.placeholder((12, 20), "int8", name="B")
    >>> dot = as_dot_product_contraction(ops.matmul(A, B))
    >>> reads_a_in_place(dot, 12, LoweringOptions()), reads_a_in_place(dot, 8, LoweringOptions())
    (True, False)
    """
    c = dot.contraction
    k_total = c.extents()[3]
    k_blocks, kc = k_slices(k_total, kc, dot.group)
    if k_blocks * kc != k_total:
        return False
    reader = OperandReader(c.a, c.tensor, c.k_axes, options)
    return reader.rows_view((*c.batch_axes, *c.m_axes), dot.group) is not None


# lowering ------------------------------------------------------------------------------------
def lower_dot_product_contraction(dot: DotProductContraction, micro_kernel: str, blocking: Blocking,
                                  options: LoweringOptions,
                                  packed_a: DType | str | None = None,
                                  packed_b: DType | str | None = None,
                                  row_sums_micro_kernel: str | None = None,
                                  panels_per_block: int = 0) -> list[Kernel]:
    """The kernels of ``dot``: [im2col,] pack B, and the main kernel (see the module docstring).

    ``micro_kernel`` names the target's micro-kernel with semantics
    ``C[m, n] += cast(acc, A[m, kg, g]) * cast(acc, B[kg, n, g])`` and parameters ``MI``, ``NR``
    and ``KG`` (groups per call); ``packed_a`` / ``packed_b`` are the dtypes it takes A / B in
    (default: their own), int8 and uint8 converting into each other with the compensation
    described above — of one operand at most. A shifted B is compensated with A's row sums:
    by ``row_sums_micro_kernel`` (semantics ``S[m] += cast(int32, A[m, kg, g])``, parameters
    ``MI`` and ``KG``) for each strip of rows at its first tile when A is read in place, else
    by the kernel ``<C>_arowcomp_sum`` before the main kernel.

    ``panels_per_block`` > 0 packs B inside the main kernel: it runs in parallel over (batch,
    blocks of that many panels), each iteration packing its block's panels into a local
    ``<C>_bblock[panels, KG, NR, G]`` and computing every row of A against them — one kernel,
    the packing split over the threads. It applies where A is read in place, unshifted, and
    ``n`` is one axis with no bfloat16 rounding pass (else the separate pack kernel is used).
    """
    c, bl = dot.contraction, blocking
    tensor, group, acc_dtype = c.tensor, dot.group, dot.accumulator
    a_packed = as_dtype(packed_a) if packed_a is not None else dot.a_dtype
    b_packed = as_dtype(packed_b) if packed_b is not None else dot.b_dtype
    shift = packing_shift(dot.a_dtype, a_packed)
    shift_b = packing_shift(dot.b_dtype, b_packed)
    if shift and shift_b:
        raise LoweringError(f"compute {tensor.name}: both operands would be shifted (A "
                            f"{dot.a_dtype.value} packed as {a_packed.value}, B "
                            f"{dot.b_dtype.value} as {b_packed.value}); shift one of them only")
    batch, m_total, n_total, k_total = c.extents()
    k_blocks, kc = k_slices(k_total, bl.kc, group)
    kg_slice = kc // group
    nb = ceil_div(n_total, bl.nr)
    mc = min(bl.mc, ceil_div(m_total, bl.mi) * bl.mi)
    m_blocks = ceil_div(m_total, mc)
    strips = mc // bl.mi
    level = options.param_level
    col_lanes = min(COLUMN_LANES, max(1, options.lanes(acc_dtype)))

    # several n axes (a convolution's output pixels): through im2col rows, written by the
    # packing itself block by block, or (when it sums columns) as a matrix by a kernel first
    a_reader = OperandReader(c.a, tensor, c.k_axes, options)
    # A read in place when it already is [rows, KG, G] (no shift, no k padding), a ragged
    # last strip too (the micro-kernel on its rows inside M)
    a_rows = a_reader.rows_view((*c.batch_axes, *c.m_axes), group) \
        if not shift and k_blocks * kc == k_total else None
    # B packed per block of panels inside the main kernel (see the docstring)
    per_block = min(panels_per_block, nb) if panels_per_block > 0 and a_rows is not None \
        and len(c.n_axes) == 1 and tensor.dtype is acc_dtype else 0
    n_blocks = ceil_div(nb, per_block) if per_block else 1
    fused_im2col = len(c.n_axes) > 1 and not shift
    im2col = [im2col_kernel(dot, options)] if len(c.n_axes) > 1 and shift else []
    pack_kernels: list[Kernel] = []
    comp = None
    if per_block:
        packed = Buffer(f"{tensor.name}_bblock", (per_block, k_blocks * kg_slice, bl.nr, group),
                        b_packed, level=level)
    else:
        pack_kernel = pack_b_kernel(dot, bl.nr, bl.kc, shift, options,
                                    im2col[0].params[-1] if im2col else None, b_packed,
                                    im2col=fused_im2col)
        pack_kernels = [pack_kernel]
        packed_out = pack_kernel.param(f"{tensor.name}_bpacked")
        packed = Buffer(packed_out.name, packed_out.shape, packed_out.dtype, level=level)
        if shift:
            comp_out = pack_kernel.param(f"{tensor.name}_bcomp")
            comp = Buffer(comp_out.name, comp_out.shape, DType.INT32, level=level)
    b_batched = not per_block and packed.shape[0] > 1
    partial = m_total % bl.mi
    # B shifted: each row of C gets -shift_b * sum_k A[m, k]. Where A is read in place the
    # row-sum micro-kernel sums a strip's rows right after the strip's first tile has brought
    # them into cache (summed ahead of the tiles, the block's rows came from memory with no
    # work to hide it: 2% of a 1024^3 GEMM); else a kernel sums them first
    row_kernel: list[Kernel] = []
    row_comp: Buffer | None = None
    block_sums = bool(shift_b and a_rows is not None and row_sums_micro_kernel)
    if block_sums:
        row_comp = Buffer(f"{tensor.name}_arowcomp", (mc,), DType.INT32, level=level)
    elif shift_b:
        row_kernel = [a_row_sums_kernel(dot, -shift_b, options)]
        row_comp = row_kernel[0].params[-1]
    # C viewed as [batch, M, N] (its axes are [batch..., m..., n...] plus extent-1 axes)
    out = Buffer(tensor.name, (batch, m_total, n_total), tensor.dtype, level=level)
    acc = out if tensor.dtype is acc_dtype else \
        Buffer(f"{tensor.name}_acc", (batch, m_total, n_total), acc_dtype, level=level)
    a_pack = Buffer(f"{tensor.name}_apacked", (strips, bl.mi, kg_slice, group), a_packed,
                    level=level)
    tile = Buffer(f"{tensor.name}_tile", (bl.mi, bl.nr), acc_dtype,
                  level=options.register_level or level)

    t, pc, ir, kg, r, g = Var("t"), Var("pc"), Var("ir"), Var("kg"), Var("r"), Var("g")
    jl, ir2, row, col = Var("jr"), Var("is"), Var("row"), Var("col")
    outer_per_batch = n_blocks if per_block else m_blocks
    b_index = t // outer_per_batch if batch > 1 else const(0)
    # the row block, and the panel: of the parallel loop and the panel loop `jl`, or (B packed
    # per block) of a serial loop over row blocks and the block's panels
    mb: Expr = Var("mb") if per_block else t % outer_per_batch
    jr: Expr = (t % n_blocks) * per_block + jl if per_block and n_blocks > 1 else jl
    columns = vector_kind(options)

    def pack_a(first_row: Expr, count: int, clamp_k: bool) -> Stmt:
        """Ap[ir, r, kg, g] = A(m = first_row + ir*mi + r, k = pc*kc + kg*G + g), 0 outside."""
        m_flat = first_row + ir * bl.mi + r
        k_flat = pc * kc + kg * group + g
        m_values = {**unflatten(b_index, c.batch_axes),
                    **unflatten(minimum(m_flat, m_total - 1), c.m_axes)}
        k_index = minimum(k_flat, k_total - 1) if clamp_k else k_flat
        value = shifted(a_reader.value(m_values, k_index), dot.a_dtype, a_packed)
        valid = all_of(m_flat < m_total, k_flat < k_total) if clamp_k else m_flat < m_total
        return nest([(ir, count, LoopKind.SERIAL, 0), (r, bl.mi, LoopKind.SERIAL, 0),
                     (kg, kg_slice, LoopKind.SERIAL, 0), (g, group, LoopKind.UNROLLED, 0)],
                     Store(a_pack, (ir, r, kg, g), select(valid, value, const(0, a_packed))))

    packing: Stmt | None
    if a_rows is None:
        # k stays unclamped (contiguous in g) in the slices that lie wholly inside K
        packing = pack_a(mb * mc, strips, False) if k_blocks * kc == k_total else \
            IfThenElse(pc * kc + kc <= k_total, pack_a(mb * mc, strips, False),
                       pack_a(mb * mc, strips, True))
    else:   # read in place, a ragged last strip too (by a micro-kernel of fewer rows)
        packing = None

    # output element (row, col) of the tile at strip `is`, panel `jr`
    m0 = mb * mc + ir2 * bl.mi
    n0 = jr * bl.nr
    out_index = (b_index, m0 + row, n0 + col)
    bp_batch = b_index if b_batched else const(0)
    if comp is not None:
        initial: Expr = BufferLoad(comp, (bp_batch, jr, col))
    elif row_comp is not None and block_sums:
        initial = BufferLoad(row_comp, (ir2 * bl.mi + row,)) * (-shift_b)
    elif row_comp is not None:   # clamped: the rows of a ragged strip below M are not stored
        row_index = minimum(m0 + row, m_total - 1)
        initial = BufferLoad(row_comp, (b_index * m_total + row_index if batch > 1
                                        else row_index,))
    else:
        initial = const(0, acc_dtype)
    packed_a_region = Region(a_pack, (ir2, const(0), const(0), const(0)),
                             (1, bl.mi, kg_slice, group))
    in_place = None if a_rows is None else Region(
        a_rows, (b_index * m_total + m0 if batch > 1 else m0, pc * kg_slice, const(0)),
        (bl.mi, kg_slice, group))

    def call(c_region: Region, rows_used: int = bl.mi, columns_used: int = bl.nr) -> Stmt:
        """The micro-kernel on the strip's first ``rows_used`` rows (a ragged last strip: no
        products for rows below M) and ``columns_used`` (a multiple of 16) of the panel's
        columns (a ragged last panel)."""
        a_region = in_place if in_place is not None else packed_a_region
        if rows_used != bl.mi:
            a_region = Region(a_region.buffer, a_region.base,
                              (*a_region.extents[:-3], rows_used, *a_region.extents[-2:]))
        b_region = Region(packed, (jl, pc * kg_slice, const(0), const(0)),
                          (1, kg_slice, columns_used, group)) if per_block else \
            Region(packed, (bp_batch, jr, pc * kg_slice, const(0), const(0)),
                   (1, 1, kg_slice, columns_used, group))
        if (rows_used, columns_used) != (bl.mi, bl.nr):
            c_region = Region(c_region.buffer, c_region.base,
                              (*c_region.extents[:-2], rows_used, columns_used))
        params = (("MI", rows_used), ("NR", columns_used), ("KG", kg_slice))
        return MicroKernelCall(micro_kernel, (a_region, b_region, c_region), params)

    def tile_rows(store: Stmt) -> Stmt:
        return nest([(row, bl.mi, LoopKind.SERIAL, 0), (col, bl.nr, columns, col_lanes)], store)

    def strip_sums(rows: int) -> Stmt:
        """row_comp[strip rows] = sum_k A (the strip's rows inside M; 0 below)."""
        assert row_comp is not None and a_rows is not None and row_sums_micro_kernel
        r = Var("r")
        base = b_index * m_total + m0 if batch > 1 else m0
        return Seq((For(r, const(bl.mi), LoopKind.SERIAL,
                        Store(row_comp, (ir2 * bl.mi + r,), const(0, DType.INT32))),
                    MicroKernelCall(row_sums_micro_kernel, (
                        Region(a_rows, (base, const(0), const(0)),
                               (rows, a_rows.shape[1], group)),
                        Region(row_comp, (ir2 * bl.mi,), (rows,))),
                        (("MI", rows), ("KG", a_rows.shape[1])))))

    first_use: Stmt | None = None   # the row sums, where the strip's tile of panel 0 needs them
    if block_sums:
        first_use = IfThenElse(all_of(eq(jl, 0), eq(pc, 0)), strip_sums(bl.mi) if not partial
                               else IfThenElse(m0 + bl.mi <= m_total, strip_sums(bl.mi),
                                               strip_sums(partial)))

    def then(*stmts: Stmt | None) -> Stmt:
        return Seq(tuple(stmt for stmt in stmts if stmt is not None))

    tile_region = Region(tile, (const(0), const(0)), (bl.mi, bl.nr))
    direct: Stmt
    if k_blocks == 1:
        # whole tiles of one k slice: a tile of their own (only ever accessed whole, so that a
        # code generator can keep it in registers: LLVM promotes it) starts at the
        # compensation (or 0), the micro-kernel accumulates onto it, it is stored once. (A
        # start stored into C and reloaded by the micro-kernel cost 1-3% of a 1024^3 GEMM:
        # LLVM did not forward a zero start into the accumulators.)
        whole_tile = Buffer(f"{tensor.name}_wtile", (bl.mi, bl.nr), acc_dtype,
                            level=options.register_level or level)
        result = BufferLoad(whole_tile, (row, col))   # row sums added last: see first_use
        direct = Allocate(whole_tile, then(
            tile_rows(Store(whole_tile, (row, col), const(0, acc_dtype) if block_sums
                            else initial)),
            call(Region(whole_tile, (const(0), const(0)), (bl.mi, bl.nr))),
            first_use,
            tile_rows(Store(acc, out_index, result + initial if block_sums else result))))
    else:   # straight into the accumulator, which starts at the compensation (or 0)
        start = tile_rows(Store(acc, out_index, initial))
        direct = Seq((IfThenElse(eq(pc, 0), then(first_use, start)),
                      call(Region(acc, (b_index, m0, n0), (1, bl.mi, bl.nr)))))
    # edge tiles: through the local tile
    in_range = all_of(m0 + row < m_total, n0 + col < n_total)
    safe_index = (b_index, minimum(m0 + row, m_total - 1), minimum(n0 + col, n_total - 1))
    load_tile = tile_rows(Store(tile, (row, col), select(all_of(in_range, pc > 0),
                                                         BufferLoad(acc, safe_index), initial)))
    # masked vector stores: the condition varies across the lanes of a row
    store_tile = tile_rows(IfThenElse(in_range, Store(acc, out_index,
                                                      BufferLoad(tile, (row, col)))))

    # a ragged last panel: the micro-kernel on the 16-column vectors holding its columns only
    # (N = 196 in panels of 80: 48 columns computed of the last panel's 80)
    last_columns = bl.nr if bl.nr % COLUMN_LANES else \
        ceil_div(n_total - (nb - 1) * bl.nr, COLUMN_LANES) * COLUMN_LANES

    def edge(rows_used: int, columns_used: int = bl.nr) -> Stmt:
        return then(first_use, load_tile, call(tile_region, rows_used, columns_used),
                    store_tile)

    def edge_of_strip(columns_used: int = bl.nr) -> Stmt:
        return edge(bl.mi, columns_used) if not partial else \
            IfThenElse(m0 + bl.mi <= m_total, edge(bl.mi, columns_used),
                       edge(partial, columns_used))

    edges = Allocate(tile, edge_of_strip() if last_columns == bl.nr else IfThenElse(
        eq(jr, nb - 1), edge_of_strip(last_columns), edge_of_strip()))
    whole = all_of(m0 + bl.mi <= m_total, n0 + bl.nr <= n_total)
    tiles = IfThenElse(whole, direct, IfThenElse(m0 < m_total, edges))
    b_source: Buffer | None = None
    if per_block and nb % per_block:   # the last block has fewer panels
        tiles = IfThenElse(jr < nb, tiles)
    tile_loops = nest([(jl, per_block or nb, LoopKind.SERIAL, 0),
                       (ir2, strips, LoopKind.SERIAL, 0)], tiles)
    loops = tile_loops if packing is None else Seq((packing, tile_loops))
    body: Stmt = For(pc, const(k_blocks), LoopKind.SERIAL, loops)
    if per_block:   # pack the block's panels, then every block of rows against them
        assert isinstance(mb, Var)
        pack, b_source = pack_b_panel(dot, bl.nr, bl.kc, options, b_packed, packed, jl, jr,
                                      b_index if batch > 1 and b_batch(c) > 1 else None)
        if nb % per_block:
            pack = IfThenElse(jr < nb, pack)
        body = Allocate(packed, Seq((For(jl, const(per_block), LoopKind.SERIAL, pack),
                                     For(mb, const(m_blocks), LoopKind.SERIAL, body))))
    if block_sums:
        assert row_comp is not None
        body = Allocate(row_comp, body)
    if a_rows is None:
        body = Allocate(a_pack, body)
    if acc is not out:   # round the block's float32 sums once into the bfloat16 result
        m_row = mb * mc + row
        convert = For(row, const(mc), LoopKind.SERIAL, IfThenElse(
            m_row < m_total,
            For(col, const(n_total), columns, Store(out, (b_index, m_row, col), BufferLoad(
                acc, (b_index, m_row, col)).astype(out.dtype)), lanes=col_lanes)))
        body = Seq((body, convert))
    outer = batch * outer_per_batch
    body = For(t, const(outer), parallel_kind(options, outer), body)
    inputs = [a_reader.buffer if a_rows is None else a_rows] + \
        ([b_source] if per_block else [packed]) + \
        ([comp] if comp is not None else []) + \
        ([row_comp] if row_comp is not None and not block_sums else [])
    outputs = [out] if acc is out else [out, acc]
    kernel = Kernel(tensor.name, tuple(unique_params([*inputs, *outputs])),
                    tuple(b.name for b in outputs), body,
                    attrs={"compute": tensor.name, "statement": tensor.statement(),
                           "schedule": (f"micro-kernel {micro_kernel} MI={bl.mi} NR={bl.nr} "
                                        f"KC={kc} (KG={kg_slice}x{group}) MC={mc}: "
                                        + (f"parallel({outer}) > [pack B block of "
                                           f"{per_block} panels] > row blocks({m_blocks}) > "
                                           f"k-slices({k_blocks}) > panels({per_block}) > "
                                           f"strips({strips})" if per_block else
                                           f"parallel({outer}) > k-slices({k_blocks}) > "
                                           f"panels({nb}) > strips({strips})")
                                        + (f"; A packed as {a_packed.value} (shift {shift:+d},"
                                           " compensated)" if shift else "")
                                        + (f"; B packed as {b_packed.value} (shift "
                                           f"{shift_b:+d}, compensated by A's row sums)"
                                           if shift_b else "")),
                           "micro_kernel": micro_kernel})
    # tiles are kept in bounds by the whole-tile / edge conditions around them, which the
    # verifier's interval analysis does not use; the interpreter checks every access instead
    verify_kernel(kernel, options.spec, check_bounds=False)
    return [*im2col, *pack_kernels, *row_kernel, kernel]


__all__ = ["Blocking", "DotProductContraction", "as_dot_product_contraction",
           "lower_dot_product_contraction", "reads_a_in_place"]
