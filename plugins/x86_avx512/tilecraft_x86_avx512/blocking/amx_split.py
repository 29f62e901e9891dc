"""float32 contractions with constant B on AMX tiles, each operand split into bfloat16 parts.

An AMX tile multiply (``tdpbf16ps``) runs 16 x 16 x 32 bfloat16 products into float32 sums
in the time AVX-512 runs 2 x 16 float32 FMAs 16 times: 16x the products per cycle (measured
here: 2.95-3.15 TFLOP/s bfloat16 per core against 0.19 float32 FMA). bfloat16 keeps 8 bits of
a float32's 24, so each float32 operand is split into three bfloat16 parts, each the rounding
of what the ones before it left::

    x0 = bf16(x),  x1 = bf16(x - x0),  x2 = bf16(x - x0 - x1),   x = x0 + x1 + x2 exactly

(each difference is exact in float32). A product ``a * b`` is the nine part products; the six
with ``p + q <= 2`` (weights 1, 2^-8, 2^-16 of ``a0 * b0``) are kept — the three dropped weigh
2^-24 and less, float32's own rounding — and every part product is exact in float32. The
result is as accurate as a float32 FMA GEMM: the largest error against a float64 product is
the same size (tests/test_amx_split.py measures both), the summation order differs. This is
the split cuBLAS calls BF16x9 float32 emulation, with the three negligible terms left out.

Kernels of a contraction ``C[batch, M, N] = sum_k A[m, k] * B[k, n]`` (B a constant):

1. ``<C>_bsplit_pack`` (run once, at install: B is a constant) writes B's parts into
   ``<C>_bsplit[NB, KP/32, 3, 2, 16, 16, 2]``: panels of 32 columns, each step of 32 ``k``
   and part as two AMX B tiles of 1 KiB (16 pairs of rows x 16 columns x 2 ``k``), ``k``
   zero-padded to ``KP``, a multiple of 32;
2. ``<C>`` runs in parallel over (batch, blocks of ``MC`` rows) and, inside, over slices of
   ``KC`` (:func:`k_slices`: one up to K = 1344 at a 2 MiB L2); each block and slice first
   writes its rows of A's three parts as tiles ``[MC/32, KC/32, 3, 32, 32]`` (zero below
   ``M`` and past ``K``), then, for each group of panels that stays in L2, every strip of 32
   rows against each panel of the group: the micro-kernel ``amx_split_f32`` (a 2 x 2 tile of
   16 x 16 accumulators over the slice) writes the 32 x 32 tile of C (``amx_split_f32_acc``
   adds the later slices to it), through
   a local tile where it overhangs M or N.

An elementwise consumer fuses as in the other template paths (:mod:`.epilogue`): in place on
each finished panel of the block (after the last slice), or per tile through the local tile (a
re-indexing such as BERT's split into heads; one slice only: :func:`takes_epilogue`).

Where it applies (:func:`amx_split_applies`): the spec declares ``amx_split_f32`` (the CPU has
AMX-TILE and AMX-BF16, and the probe's tile rate makes the path pay, :func:`..amx.amx_split_pays`)
and Linux grants this process the tile state (:mod:`..amx`), the
contraction is float32 with a constant B shared by the batch and A a row-major matrix (a
strided gather would make its split slow), C has at least 32 rows and :data:`MIN_COLUMNS`
columns, K is at least :data:`MIN_K`, and ``TILECRAFT_X86_AMX`` is not ``0`` (the switch back
to the AVX-512 micro-kernels; ``1`` declares the path whatever the measured rates).

A value of magnitude above 3.39e38 (within 2^-9 of float32's largest) rounds to infinity as its
first part, so such operands give inf or nan where the float32 sum is finite; an inf in an
operand makes its row (column) of C nan where float32 gives inf (inf meets the other operand's
lower parts, which may be 0 or of the other sign); values below about 1e-33 lose their last
bits (their lower parts are subnormal, which the tile multiply flushes to zero). No network's
weights or activations come near these.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> import numpy as np
>>> A = te.placeholder((40, 50), name="A")
>>> B = te.constant(np.ones((50, 36), np.float32), name="B")   # too small for the default path
>>> c = as_contraction(ops.matmul(A, B, name="C"))
>>> kernels = lower_amx_split(c, LoweringOptions(vector_lanes=16), 1 << 21, 1)
>>> [k.name for k in kernels]
['C_bsplit_pack', 'C']
>>> kernels[-1].attrs["schedule"].split(": ")[1].split(" > ")
['parallel(1)', 'k-slices(1)', '[split A(64)]', 'groups(1)', 'strips(2)', 'panels(2)']
"""

from __future__ import annotations

import os

from tilecraft.dtypes import DType
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
from tilecraft.passes.contraction import Contraction
from tilecraft.te.expr import Expr, UnaryOp, Var, const, select, unary
from tilecraft.te.functions import all_of, eq, minimum
from tilecraft_x86_avx512.amx import SWITCH, amx_permitted
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    contraction_kernel,
    nest,
    parallel_kind,
    unflatten,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.dot_product_packing import OperandReader, b_batch
from tilecraft_x86_avx512.blocking.epilogue import Epilogue

#: the micro-kernels' names (microkernels.AMX_SPLIT_F32, AMX_SPLIT_F32_ACC): writing the tile
#: (the first slice of k) and adding to it (the others)
MICRO_KERNEL = "amx_split_f32"
MICRO_KERNEL_ACC = "amx_split_f32_acc"
#: rows and columns of C per micro-kernel call: 2 x 2 tiles of 16 x 16
TILE = 32
#: k per tile multiply (16 pairs of bfloat16)
K_STEP = 32
#: parts of each operand
PARTS = 3
#: the fewest columns of C and k where the path pays: splitting A costs ``O(M K)`` against the
#: products' ``O(M K N)``, and each call sets up its tiles. ResNet-50's 1x1 convolutions
#: channels-last (1 thread, each against the AVX-512 path): N = 64-256 0.43-0.97x, K = 256
#: N = 512 1.20x, K = 256-1024 N = 1024 / 256 at 196 pixels 0.83-1.04x; the transformer
#: layers' (K, N >= 768) 1.21-1.33x
MIN_COLUMNS = 512
MIN_K = 512
#: rows of A's parts a slice of k keeps in half of L2: with fewer, every strip would stream B's
#: parts from L3 again (512x3072x768 in one slice, 32 rows a block at a 2 MiB L2, measured
#: 0.97x the AVX-512 path; K = 768, 192 rows, 1.12-1.25x)
MIN_BLOCK_ROWS = 128
#: float32's largest finite value: a larger magnitude (inf, nan) keeps only its first part
FLOAT32_MAX = 3.4028234663852886e38


def amx_split_applies(contraction: Contraction, options: LoweringOptions) -> bool:
    """Whether :func:`lower_amx_split` takes ``contraction`` (see the module docstring)."""
    spec = options.spec
    if spec is None or os.environ.get(SWITCH, "1").strip() == "0":
        return False
    if MICRO_KERNEL not in {decl.name for decl in spec.micro_kernels} or not amx_permitted():
        return False
    c = contraction
    if {c.tensor.dtype, c.a.tensor.dtype, c.b.tensor.dtype} != {DType.FLOAT32}:
        return False
    _, m_total, n_total, k_total = c.extents()
    if not (c.b.tensor.is_constant and b_batch(c) == 1 and m_total >= TILE
            and n_total >= MIN_COLUMNS and k_total >= MIN_K):
        return False
    reader = OperandReader(c.a, c.tensor, c.k_axes, options)
    return reader.rows_view((*c.batch_axes, *c.m_axes), 1) is not None


def split_parts(value: Expr) -> tuple[Expr, Expr, Expr]:
    """``value`` (float32) as three bfloat16 parts summing to it exactly (module docstring);
    a non-finite value keeps only its first part (module docstring: inf gives nan)."""
    first = value.astype(DType.BFLOAT16)
    finite = unary(UnaryOp.ABS, value) <= const(FLOAT32_MAX, DType.FLOAT32)
    rest = select(finite, value - first.astype(DType.FLOAT32), const(0.0, DType.FLOAT32))
    second = rest.astype(DType.BFLOAT16)
    third = (rest - second.astype(DType.FLOAT32)).astype(DType.BFLOAT16)
    return first, second, third


def padded_k(k_total: int) -> int:
    """``K`` rounded up to whole tile multiplies."""
    return ceil_div(k_total, K_STEP) * K_STEP


def block_cap(k_total: int, l2_bytes: int) -> int:
    """The most rows (a multiple of 32) whose three parts of A (``6 * MC * KP`` bytes) take
    at most three quarters of L2: every block of rows streams all of B's parts from L3, so
    blocks as large as L2 allows (BERT's layer at 1 thread, 192 -> 256 rows a block, with B's
    groups in an eighth of L2 instead of a quarter: 0.99x -> 1.07x the AVX-512 path)."""
    return (l2_bytes * 3 // 4) // (2 * PARTS * padded_k(k_total)) // TILE * TILE


def block_rows(m_total: int, batch: int, k_total: int, l2_bytes: int, threads: int) -> int:
    """``MC``: a multiple of 32 within :func:`block_cap`, the (batch x blocks) split into a
    multiple of the threads where there are enough strips (3 blocks on 2 threads would leave
    one thread idle for a third of the time).

    >>> block_rows(512, 1, 768, 1 << 21, 1), block_rows(512, 1, 768, 1 << 21, 3)
    (256, 192)
    """
    cap = max(TILE, block_cap(k_total, l2_bytes))
    strips = ceil_div(m_total, TILE)
    blocks = ceil_div(m_total, cap)
    while (batch * blocks) % threads and blocks < strips:
        blocks += 1
    return ceil_div(strips, blocks) * TILE


def group_panels(panels: int, k_total: int, l2_bytes: int) -> int:
    """Panels of B's parts (``6 * KP * 32`` bytes each) that share an eighth of L2 (next to
    A's parts, :func:`block_cap`): each strip of A meets them one after the other while they
    stay there."""
    per_panel = 2 * PARTS * padded_k(k_total) * TILE
    return max(1, min(panels, (l2_bytes // 8) // per_panel))


def pack_b_parts(c: Contraction, options: LoweringOptions, k_padded: int) -> Kernel:
    """``<C>_bsplit[NB, KP/32, 3, 2, 16, 16, 2]``: B's three bfloat16 parts by panel (module
    docstring), zero past ``K`` (to ``k_padded``) and ``N``."""
    tensor = c.tensor
    _, _, n_total, k_total = c.extents()
    panels = ceil_div(n_total, TILE)
    reader = OperandReader(c.b, tensor, c.k_axes, options)
    steps = k_padded // K_STEP
    out = Buffer(f"{tensor.name}_bsplit", (panels, steps, PARTS, 2, 16, 16, 2), DType.BFLOAT16,
                 level=options.param_level)
    jr, step, pair, half, col, g = Var("jr"), Var("step"), Var("pair"), Var("half"), Var("col"), \
        Var("g")
    n, k = jr * TILE + half * 16 + col, step * K_STEP + pair * 2 + g
    value = reader.value(unflatten(minimum(n, n_total - 1), c.n_axes), minimum(k, k_total - 1))
    value = select(all_of(n < n_total, k < k_total), value, const(0.0, DType.FLOAT32))
    parts = split_parts(value)
    body = Seq(tuple(Store(out, (jr, step, const(p), half, pair, col, g), part)
                     for p, part in enumerate(parts)))
    loops = nest([(jr, panels, parallel_kind(options, panels), 0),
                  (step, steps, LoopKind.SERIAL, 0), (pair, 16, LoopKind.SERIAL, 0),
                  (half, 2, LoopKind.SERIAL, 0), (col, 16, LoopKind.SERIAL, 0),
                  (g, 2, LoopKind.UNROLLED, 0)], body)
    kernel = Kernel(f"{out.name}_pack", (reader.buffer, out), (out.name,), loops,
                    attrs={"compute": tensor.name, "statement": tensor.statement(),
                           "schedule": f"split B of {tensor.name} into 3 bfloat16 parts: "
                                       f"{panels} panels of {steps}x3x2x16x16x2"})
    verify_kernel(kernel, options.spec, check_bounds=False)
    return kernel


def k_slices(k_total: int, l2_bytes: int) -> tuple[int, int]:
    """``(slices, KC)``: ``K`` in the fewest equal slices of whole tile multiplies whose
    :data:`MIN_BLOCK_ROWS` rows of A's parts take at most half of L2 (one slice up to
    ``K`` = 1344 at 2 MiB; 3072 in 3 of 1024), so that blocks have at least that many rows.

    >>> k_slices(768, 1 << 21), k_slices(3072, 1 << 21), k_slices(3000, 1 << 21)
    ((1, 768), (3, 1024), (3, 1024))
    """
    widest = max(K_STEP, (l2_bytes // 2) // (2 * PARTS * MIN_BLOCK_ROWS) // K_STEP * K_STEP)
    steps = padded_k(k_total) // K_STEP
    slices = ceil_div(steps * K_STEP, widest)
    return slices, ceil_div(steps, slices) * K_STEP


def takes_epilogue(c: Contraction, epilogue: Epilogue, l2_bytes: int) -> bool:
    """Whether :func:`lower_amx_split` computes ``epilogue``: in place after the last slice,
    or through the local tile when the reduction is one slice."""
    return epilogue.local is None or k_slices(c.extents()[3], l2_bytes)[0] == 1


def lower_amx_split(c: Contraction, options: LoweringOptions, l2_bytes: int, threads: int,
                    epilogue: Epilogue | None = None) -> list[Kernel]:
    """The kernels of ``c`` on the ``amx_split_f32`` micro-kernels (module docstring), the
    last computing ``epilogue``'s consumer where one is given."""
    tensor = c.tensor
    batch, m_total, n_total, k_total = c.extents()
    if min(m_total, n_total) < TILE:
        raise LoweringError(f"compute {tensor.name}: the AMX path takes C of at least {TILE} "
                            f"rows and columns, not {m_total} x {n_total}")
    slices, kc = k_slices(k_total, l2_bytes)
    if epilogue is not None:
        epilogue.check_slices(slices)
    k_padded = slices * kc
    steps = kc // K_STEP
    panels = ceil_div(n_total, TILE)
    mc = block_rows(m_total, batch, kc, l2_bytes, threads)
    m_blocks = ceil_div(m_total, mc)
    strips = mc // TILE
    per_group = group_panels(panels, kc, l2_bytes)
    groups = ceil_div(panels, per_group)
    level = options.param_level
    lanes = max(1, options.lanes(DType.FLOAT32))
    pack = pack_b_parts(c, options, k_padded)
    parts_b = pack.params[-1]
    a_reader = OperandReader(c.a, tensor, c.k_axes, options)
    a_parts = Buffer(f"{tensor.name}_asplit", (strips, steps, PARTS, TILE, K_STEP), DType.BFLOAT16,
                     level=level)
    out = Buffer(tensor.name, (batch, m_total, n_total), tensor.dtype, level=level)
    local = Buffer(f"{tensor.name}_atile", (TILE, TILE), DType.FLOAT32,
                   level=options.register_level or level)

    t, row, step, kin, pc = Var("t"), Var("row"), Var("step"), Var("kin"), Var("pc")
    gr, jj, s = Var("gr"), Var("jj"), Var("s")
    b_index = t // m_blocks if batch > 1 else const(0)
    mb = t % m_blocks if batch > 1 else t

    # A's rows of the block in slice pc, split (zero below M and past K), tile by tile
    m_row = mb * mc + s * TILE + row
    kk = pc * kc + step * K_STEP + kin if slices > 1 else step * K_STEP + kin
    m_values = {**unflatten(b_index, c.batch_axes),
                **unflatten(minimum(m_row, m_total - 1), c.m_axes)}
    k_index = kk if k_padded == k_total else minimum(kk, k_total - 1)
    valid = m_row < m_total if k_padded == k_total else all_of(m_row < m_total, kk < k_total)
    a_value = select(valid, a_reader.value(m_values, k_index), const(0.0, DType.FLOAT32))
    split = nest([(s, strips, LoopKind.SERIAL, 0), (row, TILE, LoopKind.SERIAL, 0),
                  (step, steps, LoopKind.SERIAL, 0),
                  (kin, K_STEP, vector_kind(options), lanes)],
                 Seq(tuple(Store(a_parts, (s, step, const(p), row, kin), part)
                           for p, part in enumerate(split_parts(a_value)))))

    jr = gr * per_group + jj
    m0, n0 = mb * mc + s * TILE, jr * TILE
    params = (("KK", kc), ("KS", steps))
    a_region = Region(a_parts, (s, *(const(0),) * 4), (1, steps, PARTS, TILE, K_STEP))
    b_region = Region(parts_b, (jr, pc * steps if slices > 1 else const(0), *(const(0),) * 5),
                      (1, steps, PARTS, 2, 16, 16, 2))
    first = eq(pc, 0)

    def call(into: Region, accumulate: bool = False) -> Stmt:
        name = MICRO_KERNEL_ACC if accumulate else MICRO_KERNEL
        return MicroKernelCall(name, (a_region, b_region, into), params)

    def onto(into: Region, before: Stmt | None = None) -> Stmt:
        """The tile's products: written by the first slice, added by the others (after
        ``before``, which brings the tile's sum so far where the micro-kernel adds)."""
        if slices == 1:
            return call(into)
        added = call(into, True) if before is None else Seq((before, call(into, True)))
        return IfThenElse(first, call(into), added)

    rows_left, cols_left = m_total % TILE, n_total % TILE
    local_mode = epilogue is not None and epilogue.local is not None
    target = epilogue.out if epilogue is not None and not local_mode else out

    def copy(rows: int, cols: int, inwards: bool) -> Stmt:
        r, col = Var("r"), Var("c")
        at, there = (local, (r, col)), (target, (b_index, m0 + r, n0 + col))
        source, dest = (there, at) if inwards else (at, there)
        return nest([(r, rows, LoopKind.SERIAL, 0), (col, cols, vector_kind(options), lanes)],
                    Store(dest[0], dest[1], BufferLoad(source[0], source[1])))

    def by_edges(make) -> Stmt:
        """``make(rows, cols)`` for the tile's valid rows and columns (static per case)."""
        def of_rows(cols: int) -> Stmt:
            if not rows_left:
                return make(TILE, cols)
            return IfThenElse(m0 + TILE <= m_total, make(TILE, cols), make(rows_left, cols))
        if not cols_left:
            return of_rows(TILE)
        return IfThenElse(n0 + TILE <= n_total, of_rows(TILE), of_rows(cols_left))

    local_tile = Region(local, (const(0), const(0)), (TILE, TILE))
    if local_mode:
        assert epilogue is not None and epilogue.local is not None
        local_region = Region(epilogue.local, (const(0), const(0), const(0)), (1, TILE, TILE))
        tile = epilogue.wrap(Seq((call(local_region), by_edges(
            lambda rows, cols: epilogue.tile(b_index, m0, n0, rows, cols, options)))))
    else:
        whole = onto(Region(target, (b_index, m0, n0), (1, TILE, TILE)))
        edge = Allocate(local, by_edges(lambda rows, cols: Seq((
            onto(local_tile, copy(rows, cols, True)), copy(rows, cols, False)))))
        tile = IfThenElse(all_of(m0 + TILE <= m_total, n0 + TILE <= n_total), whole, edge) \
            if rows_left or cols_left else whole
    tile = IfThenElse(m0 < m_total, tile) if m_total % mc else tile
    if panels % per_group:
        tile = IfThenElse(jr < panels, tile)
    group_body: Stmt = nest([(s, strips, LoopKind.SERIAL, 0), (jj, per_group, LoopKind.SERIAL, 0)],
                            tile)
    finish = None
    if epilogue is not None and not local_mode:   # each panel once its last slice is added
        finish = epilogue.block(b_index, mb * mc, mc, m_total, n0, n_total, TILE, options)
        if panels % per_group:
            finish = IfThenElse(jr < panels, finish)
        if slices == 1:   # right after the group, while its panels are in L2
            group_body = Seq((group_body, nest([(jj, per_group, LoopKind.SERIAL, 0)], finish)))
    body: Stmt = Seq((split, nest([(gr, groups, LoopKind.SERIAL, 0)], group_body)))
    if slices > 1:
        body = For(pc, const(slices), LoopKind.SERIAL, body)
        if finish is not None:
            body = Seq((body, nest([(gr, groups, LoopKind.SERIAL, 0),
                                    (jj, per_group, LoopKind.SERIAL, 0)], finish)))
    body = Allocate(a_parts, body)
    outer = batch * m_blocks
    body = nest([(t, outer, parallel_kind(options, outer), 0)], body)
    schedule = (f"{MICRO_KERNEL} {TILE}x{TILE}, KC={kc}: parallel({outer}) > k-slices({slices}) "
                f"> [split A({mc})] > groups({groups}) > strips({strips}) > panels({per_group})")
    inputs = [a_reader.buffer, parts_b]
    if epilogue is not None:
        main = epilogue.kernel(tensor, [*inputs, epilogue.out], body, MICRO_KERNEL, schedule,
                               options)
    else:
        main = contraction_kernel(tensor, [*inputs, out], body, MICRO_KERNEL, schedule, options)
    return [pack, main]


__all__ = ["MICRO_KERNEL", "MICRO_KERNEL_ACC", "MIN_BLOCK_ROWS", "MIN_COLUMNS", "MIN_K", "SWITCH",
           "TILE", "amx_split_applies", "k_slices", "lower_amx_split", "split_parts",
           "takes_epilogue"]
