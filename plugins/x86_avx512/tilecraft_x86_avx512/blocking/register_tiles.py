"""Lower a contraction onto a register-tile micro-kernel: packing plus blocked loops (§3.4).

The result is two Kernel IR kernels, in the style of BLIS/Goto GEMM:

1. ``<C>_bpacked_pack`` packs the B operand (whatever its index expressions: a transposed weight, a
   convolution input read through its pad compute) into the workspace ``<C>_bpacked[batch, NB,
   Kp, NR]``: panels of ``NR`` columns, ``k`` major, zero-padded to ``NB * NR`` columns and
   ``Kp`` (a multiple of ``KC``) rows. The workspace is a kernel output the runtime allocates.
   Its parallel loop runs over the panels, and over pieces of their rows too where there are
   few panels (:func:`pack_row_chunks`: a late convolution's im2col is one panel).
2. ``<C>`` runs, in parallel over (batch, blocks of ``MC`` rows): for each ``KC`` slice of the
   reduction, pack the ``MC x KC`` block of A into a local buffer ``[MC/MI, KC, MI]``
   (zero-padded), then for every ``NR``-column panel and every ``MI``-row strip call the
   micro-kernel ``C[MI, NR] += Ap[KC, MI]^T x Bp[KC, NR]``. Tiles on the ragged bottom or right
   edge of C go through a local ``MI x NR`` tile and guarded copies, so the micro-kernel always
   sees whole tiles. A tile is zeroed before its first ``KC`` slice.

   With ``Blocking(pack_a=False)`` and a ``rows_micro_kernel`` (semantics
   ``C[m, n] += A[m, k] * B[k, n]``), A is not packed: when it is a row-major ``[batch?, M, K]``
   view of its tensor (a matmul's A, a convolution's weights ``W[k, c, r, s]``), the
   micro-kernel reads its rows in place. Packing A pays only when each packed value is used by
   many panels of B; a contraction with few columns (a late convolution layer: 49 pixels, 4608
   reductions per output channel) spends more time packing A than computing. The last ``KC``
   slice is then exactly as long as what is left of ``K`` (no padded rows to read). A whose
   rows run in pieces — ``[batch?, k_outer, M, k_inner]``, a convolution's weight gradient
   ``sum_{n,h,w} dY[n, k, h, w] * ...`` — is read in place too, with ``KC`` a divisor of
   ``k_inner`` (:func:`aligned_kc`), instead of packed through a gather along ``M``.

   With ``Blocking(pack_b=False)`` as well, B is read in place where it is a row-major
   ``[batch?, K, N]`` view of its tensor (:func:`b_row_view`: a channels-first 1x1
   convolution's activation, a matmul's B): no pack-B kernel, the micro-kernel reads each
   panel's ``KC x NR`` slice straight from B's rows (row stride ``N``); the ragged last
   panel's partial vectors are masked loads, so nothing past B's end is read. Packing B pays
   where each packed value serves many rows of C; with few rows (MobileNet-V2's
   projections: 24-320) it costs more than the products
   (:func:`~tilecraft_x86_avx512.gemm_template.reads_b_in_place`).

The micro-kernel's declaration (its semantics, ``C[m, n] += A[k, m] * B[k, n]`` with parameters
``MI``, ``NR``, ``KI``) is all the core knows; the target renders its implementation.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> A = te.placeholder((5, 3), name="A")
>>> B = te.placeholder((3, 4), name="B")
>>> c = as_contraction(ops.matmul(A, B, name="C"))
>>> kernels = lower_contraction(c, "gemm", Blocking(mi=2, nr=4, kc=3, mc=4),
...                             LoweringOptions(vector_lanes=4))
>>> [k.name for k in kernels], kernels[0].outputs
(['C_bpacked_pack', 'C'], ('C_bpacked',))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
from tilecraft.te.expr import Const, Expr, IterVar, Load, Var, const, select
from tilecraft.te.functions import all_of, eq, maximum, minimum
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512.blocking.building import (
    axes_in,
    ceil_div,
    contraction_kernel,
    kernel_expr,
    nest,
    parallel_kind,
    product_of,
    unflatten,
    unit_axes,
    vector_kind,
    without_unit_taps,
)
from tilecraft_x86_avx512.microkernels import SETTING_VARIANTS

if TYPE_CHECKING:
    from tilecraft_x86_avx512.blocking.epilogue import Epilogue


@dataclass(frozen=True)
class Blocking:
    """Tile sizes: the micro-kernel's ``mi`` x ``nr`` register tile, the ``kc`` reduction
    slice (the micro-kernel's ``KI``) and the ``mc`` rows of A packed at once (a multiple of
    ``mi``). ``pack_a=False`` reads A in place where it can, ``pack_b=False`` B (see the
    module docstring)."""

    mi: int
    nr: int
    kc: int
    mc: int
    pack_a: bool = True
    pack_b: bool = True

    def __post_init__(self) -> None:
        for name in ("mi", "nr", "kc", "mc"):  # pack_a is a flag
            if getattr(self, name) < 1:
                raise LoweringError(f"micro-kernel blocking: {name} = {getattr(self, name)} "
                                    "must be >= 1")
        if self.mc % self.mi:
            rounded = self.mc // self.mi * self.mi or self.mi
            raise LoweringError(f"micro-kernel blocking: mc = {self.mc} must be a multiple of "
                                f"mi = {self.mi}; round it to {rounded}")

    @classmethod
    def from_config(cls, config: Mapping[str, int]) -> Blocking:
        """The blocking of a template config (``MI``, ``NR``, ``KC``, ``MC``, ``PACK_A``,
        ``PACK_B``), its ``MC`` rounded down to whole strips of ``MI`` (at least one).

        >>> Blocking.from_config({"MI": 6, "NR": 64, "KC": 256, "MC": 100, "PACK_A": 0})
        Blocking(mi=6, nr=64, kc=256, mc=96, pack_a=False, pack_b=True)
        """
        mi = config["MI"]
        return cls(mi=mi, nr=config["NR"], kc=config["KC"], mc=max(mi, config["MC"] // mi * mi),
                   pack_a=bool(config.get("PACK_A", 1)), pack_b=bool(config.get("PACK_B", 1)))


def axis_groups_view(load: Load, groups: Sequence[tuple[Sequence[IterVar], Expr]],
                     level: str) -> tuple[Buffer, Expr] | None:
    """``load`` as a load from a lower-rank view of its tensor, one dimension per axis group,
    indexed by the groups' flat values — when the tensor's dimensions are exactly the groups'
    axes, run after run, in row-major order (``W[k, c, r, s]`` read as ``W2[k, (c, r, s)]``).
    This spares the div/mod that recover each axis from a flat index. A group none of whose
    axes the load reads is left out (a convolution's weights, shared by a batch of images, have
    no batch dimension). ``None`` otherwise."""
    tensor = load.tensor
    kept = [(index, extent) for index, extent in zip(load.indices, tensor.shape) if extent > 1]
    read = axes_in(load)
    live = [([a for a in axes if a.extent > 1], flat) for axes, flat in groups]
    live = [(axes, flat) for axes, flat in live if axes and not read.isdisjoint(axes)]
    shape, indices, position = [], [], 0
    while position < len(kept):
        index = kept[position][0]
        group = next(((axes, flat) for axes, flat in live if axes and axes[0] is index), None)
        if group is None:
            return None
        axes, flat = group
        run = kept[position:position + len(axes)]
        if len(run) != len(axes) or any(i is not a or e != a.extent
                                         for (i, e), a in zip(run, axes)):
            return None
        shape.append(product_of(axes))
        indices.append(flat)
        position += len(axes)
    if len(indices) != len(live) or not shape:
        return None
    view = Buffer(tensor.name, tuple(shape), tensor.dtype, level=level)
    return view, BufferLoad(view, tuple(indices))


def lower_contraction(contraction: Contraction, micro_kernel: str, blocking: Blocking,
                      options: LoweringOptions, workspace_level: str | None = None,
                      pack_level: str | None = None,
                      rows_micro_kernel: str | None = None,
                      epilogue: Epilogue | None = None) -> list[Kernel]:
    """The pack-B kernel and the main kernel of ``contraction`` (see the module docstring).

    ``micro_kernel`` names the target's micro-kernel with semantics
    ``C[m, n] += A[k, m] * B[k, n]`` and parameters ``MI``, ``NR``, ``KI``;
    ``rows_micro_kernel`` the one with ``C[m, n] += A[m, k] * B[k, n]`` that reads A in place
    (used when ``blocking.pack_a`` is false and A is a row-major view). ``epilogue``
    (:mod:`.epilogue`): an elementwise consumer computed on each tile after its last ``KC``
    slice, written where C would be (the main kernel then computes the consumer).
    """
    c, bl = contraction, blocking
    tensor = c.tensor
    batch, m_total, n_total, k_total = c.extents()
    dtype = tensor.dtype
    kc = min(bl.kc, k_total)
    k_blocks = ceil_div(k_total, kc)
    kc = ceil_div(k_total, k_blocks)                 # equal slices: padding < k_blocks rows
    aligned = aligned_kc(c, bl.kc) if not bl.pack_a and rows_micro_kernel is not None else None
    if aligned is not None:  # A read in place slice by slice: slices inside its row runs
        kc, k_blocks = aligned, k_total // aligned
    nb = ceil_div(n_total, bl.nr)
    mc = min(bl.mc, ceil_div(m_total, bl.mi) * bl.mi)
    m_blocks = ceil_div(m_total, mc)
    strips = mc // bl.mi
    param_level = options.param_level
    a_tensor = c.a.tensor

    # ---- kernel 1: pack B ---------------------------------------------------------------
    pack_kernel = pack_operand(f"{tensor.name}_bpacked", c.b, tensor, c.batch_axes, c.n_axes,
                               c.k_axes, bl.nr, kc, options, workspace_level,
                               role=f"pack B of {tensor.name}")
    packed = pack_kernel.params[-1]
    # ---- kernel 2: blocked micro-kernel calls ---------------------------------------------
    a_buffer = Buffer(a_tensor.name, a_tensor.shape, a_tensor.dtype, level=param_level)
    # C viewed as [batch, M, N]: its axes are [batch..., m..., n...] (plus extent-1 axes), so
    # the view is the same row-major memory (the runtime reshapes the array to the parameter)
    out = Buffer(tensor.name, (batch, m_total, n_total), dtype, level=param_level) \
        if epilogue is None else epilogue.out
    finish = contraction_kernel if epilogue is None else epilogue.kernel
    packed_in = Buffer(packed.name, packed.shape, dtype, level=packed.level)
    b_batched = packed.shape[0] > 1
    a_pack = Buffer(f"{tensor.name}_apacked", (strips, kc, bl.mi), dtype,
                    level=pack_level or param_level)
    t, pc, ir, kq, r = Var("t"), Var("pc"), Var("ir"), Var("kq"), Var("r")
    jr, ir2 = Var("jr"), Var("is")
    last = eq(pc, k_blocks - 1) if k_blocks > 1 else None
    if epilogue is not None:
        epilogue.check_slices(k_blocks)
    b_index = t // m_blocks if batch > 1 else const(0)
    mb = t % m_blocks
    m0 = mb * mc + ir2 * bl.mi
    n0 = jr * bl.nr
    bp_batch = b_index if b_batched else const(0)
    outer = batch * m_blocks
    a_rows = None
    if not bl.pack_a and rows_micro_kernel is not None:
        a_rows = a_row_view(c, b_index, m0, pc * kc, param_level, kc)
    if epilogue is not None:   # whole rows: per block, A in place, one reduction slice
        epilogue.whole_rows &= not epilogue.per_tile and k_blocks == 1 and a_rows is not None
    b_rows = None
    if a_rows is not None and not bl.pack_b:
        b_rows = b_row_view(c, b_index, pc * kc, n0, param_level)
    if a_rows is not None:  # A read in place: no local buffer, no packing loop
        a_view, a_base = a_rows
        k_last = k_total - (k_blocks - 1) * kc

        def slice_tiles(ki: int) -> Stmt:
            a_region = Region(a_view, a_base, (*(1,) * (len(a_base) - 2), bl.mi, ki))
            b_region = Region(packed_in, (bp_batch, jr, pc * kc, const(0)), (1, 1, ki, bl.nr)) \
                if b_rows is None else \
                Region(b_rows[0], b_rows[1], (*(1,) * (len(b_rows[1]) - 2), ki, bl.nr))
            return edge_tiles(rows_micro_kernel, a_region, b_region, out, b_index, m0, n0,
                              m_total, n_total, bl.mi, bl.nr,
                              (("MI", bl.mi), ("NR", bl.nr), ("KI", ki)), eq(pc, 0), options,
                              a_rows_dim=-2, epilogue=epilogue, last=last)

        tiles = slice_tiles(kc) if k_last == kc else \
            IfThenElse(pc < k_blocks - 1, slice_tiles(kc), slice_tiles(k_last))
        strip_loop = nest([(ir2, strips, LoopKind.SERIAL, 0)], tiles)
        if epilogue is not None and epilogue.whole_rows:
            # every panel of the block, then the epilogue once over its whole rows
            block = Seq((nest([(jr, nb, LoopKind.SERIAL, 0)], strip_loop),
                         epilogue.block(b_index, mb * mc, mc, m_total, const(0), n_total,
                                        n_total, options)))
            body = nest([(t, outer, parallel_kind(options, outer), 0),
                         (pc, k_blocks, LoopKind.SERIAL, 0)], block)
        else:
            panel = with_block_epilogue(strip_loop, epilogue, last, b_index, mb * mc, mc,
                                        m_total, n0, n_total, bl.nr, options)
            body = nest([(t, outer, parallel_kind(options, outer), 0),
                         (pc, k_blocks, LoopKind.SERIAL, 0), (jr, nb, LoopKind.SERIAL, 0)],
                        panel)
        in_place = "A read in place" if b_rows is None else "A read in place, B read in place"
        main = finish(
            tensor, [a_view, packed_in if b_rows is None else b_rows[0], out], body,
            rows_micro_kernel,
            f"micro-kernel {rows_micro_kernel} MI={bl.mi} NR={bl.nr} KC={kc} MC={mc}, "
            f"{in_place}: parallel({outer}) > k-slices({k_blocks}) > panels({nb}) > "
            f"strips({strips})", options)
        return [main] if b_rows is not None else [pack_kernel, main]
    # pack A: Ap[ir, kq, r] = A(m = mb*mc + ir*mi + r, k = pc*kc + kq), zero outside
    m_flat = mb * mc + ir * bl.mi + r
    k_flat = pc * kc + kq
    a_values = {}
    a_values.update(unflatten(b_index, c.batch_axes))
    a_values.update(unflatten(minimum(m_flat, m_total - 1), c.m_axes))
    a_values.update(unflatten(minimum(k_flat, k_total - 1), c.k_axes))
    viewed = axis_groups_view(c.a, [(c.batch_axes, b_index),
                                    (c.m_axes, minimum(m_flat, m_total - 1)),
                                    (c.k_axes, minimum(k_flat, k_total - 1))], param_level)
    if viewed is not None:
        a_buffer, load_a = viewed
    else:
        load_a = kernel_expr(c.a, a_values, {a_tensor: a_buffer},
                             extra_zero=unit_axes(tensor))
    a_valid = all_of(m_flat < m_total, k_flat < k_total)
    pack_a = nest([(ir, strips, LoopKind.SERIAL, 0), (kq, kc, LoopKind.SERIAL, 0),
                   (r, bl.mi, vector_kind(options), max(1, options.lanes(dtype)))],
                   Store(a_pack, (ir, kq, r), select(a_valid, load_a, const(0.0, dtype))))

    # output element (row, col) of the tile at strip `is`, panel `jr`
    a_region = Region(a_pack, (ir2, const(0), const(0)), (1, kc, bl.mi))
    b_region = Region(packed_in, (bp_batch, jr, pc * kc, const(0)), (1, 1, kc, bl.nr))
    params = (("MI", bl.mi), ("NR", bl.nr), ("KI", kc))
    tiles = edge_tiles(micro_kernel, a_region, b_region, out, b_index, m0, n0, m_total,
                       n_total, bl.mi, bl.nr, params, eq(pc, 0), options, epilogue=epilogue,
                       last=last)
    panel = with_block_epilogue(nest([(ir2, strips, LoopKind.SERIAL, 0)], tiles), epilogue,
                                last, b_index, mb * mc, mc, m_total, n0, n_total, bl.nr,
                                options)
    loops = Seq((pack_a, nest([(jr, nb, LoopKind.SERIAL, 0)], panel)))
    body = Allocate(a_pack, For(pc, const(k_blocks), LoopKind.SERIAL, loops),
                    zeroed=False)   # pack_a writes every element, zeros past M and K
    body = For(t, const(outer), parallel_kind(options, outer), body)
    return [pack_kernel, finish(
        tensor, [a_buffer, packed_in, out], body, micro_kernel,
        f"micro-kernel {micro_kernel} MI={bl.mi} NR={bl.nr} KC={kc} MC={mc}: parallel({outer})"
        f" > k-slices({k_blocks}) > panels({nb}) > strips({strips})", options)]


def a_row_view(contraction: Contraction, b_index: Expr, m0: Expr, k0: Expr,
               level: str, k_slice: int | None = None) -> tuple[Buffer, tuple[Expr, ...]] | None:
    """A as a row-major ``[batch?, M, K]`` view of its tensor and the view's index of element
    ``(m0, k0)`` in batch ``b_index``: ``None`` unless the tensor's dimensions are the batch,
    m and k axes in that order (k innermost, so each row of A is contiguous) — or the batch,
    outer k, m and inner k axes (:func:`split_k_inner`) and the caller's slices of ``k_slice``
    stay inside one ``K_inner`` run (``k_slice`` divides ``K_inner``): a
    ``[batch?, K_outer, M, K_inner]`` view indexed ``(k0 // K_inner, m0, k0 % K_inner)``."""
    c = contraction
    if not c.m_axes or not c.k_axes:
        return None
    groups = [(c.batch_axes, b_index), (c.m_axes, m0), (c.k_axes, k0)]
    inner = split_k_inner(c) if k_slice is not None else None
    if inner is not None and product_of(c.k_axes[-inner:]) % k_slice == 0:
        k_inner = product_of(c.k_axes[-inner:])
        k0 = k0 % k_inner
        groups = [(c.batch_axes, b_index), (c.k_axes[:-inner], groups[2][1] // k_inner),
                  (c.m_axes, m0), (c.k_axes[-inner:], k0)]
    # a channels-last 1x1 convolution's x[n, h + rh, w + rw, c] is the plain x[n, h, w, c]
    return _rows_view(c.a, (*c.batch_axes, *c.m_axes, *c.k_axes), groups, m0, k0, level)


def _rows_view(load: Load, kept: Sequence[IterVar],
               groups: Sequence[tuple[Sequence[IterVar], Expr]], row: Expr, col: Expr,
               level: str) -> tuple[Buffer, tuple[Expr, ...]] | None:
    """``load`` (its extent-1 axes outside ``kept`` read as 0) as a view by axis ``groups``
    (:func:`axis_groups_view`) whose last two indices are ``row`` and ``col``, and that index;
    ``None`` otherwise."""
    found = axis_groups_view(without_unit_taps(load, kept), groups, level)
    if found is None:
        return None
    view, viewed = found
    assert isinstance(viewed, BufferLoad)
    if len(viewed.indices) < 2 or viewed.indices[-2] is not row or viewed.indices[-1] is not col:
        return None
    return view, tuple(viewed.indices)


def b_row_view(contraction: Contraction, b_index: Expr, k0: Expr, n0: Expr,
               level: str) -> tuple[Buffer, tuple[Expr, ...]] | None:
    """B as a row-major ``[batch?, K, N]`` view of its tensor and the view's index of element
    ``(k0, n0)`` in batch ``b_index``: ``None`` unless the tensor's dimensions are the batch, k
    and n axes in that order (n innermost: each row of B contiguous), as a channels-first 1x1
    convolution's activation ``x[n, c, h, w]`` is (``[C, H*W]``) or a matmul's ``B[k, n]``.

    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> x = te.placeholder((1, 40, 7, 5), name="x")
    >>> w = te.placeholder((24, 40, 1, 1), name="w")
    >>> c = as_contraction(ops.conv2d(x, w), broadcast_batch=True)
    >>> view, index = b_row_view(c, const(0), Var("k0"), Var("n0"), "param")
    >>> view.shape, [str(i) for i in index]
    ((40, 35), ['k0', 'n0'])
    >>> b_row_view(as_contraction(ops.conv2d(x, w, stride=2)), const(0), Var("k0"),
    ...            Var("n0"), "param") is None
    True
    """
    c = contraction
    if not c.k_axes or not c.n_axes:
        return None
    return _rows_view(c.b, (*c.batch_axes, *c.k_axes, *c.n_axes),
                      [(c.batch_axes, b_index), (c.k_axes, k0), (c.n_axes, n0)], k0, n0, level)


def split_k_inner(contraction: Contraction) -> int | None:
    """How many trailing k axes follow the m axes in A's dimensions when A is laid out
    ``[batch?, k_outer..., m..., k_inner...]`` (both k parts non-empty): a convolution's weight
    gradient ``sum_{n,h,w} dY[n, k, h, w] * X(...)`` reduces over the batch outside the rows
    ``k``. ``None`` for any other layout."""
    c = contraction
    dims = [index for index, extent in zip(c.a.indices, c.a.tensor.shape) if extent > 1]
    ks = [a for a in c.k_axes if a.extent > 1]
    ms = [a for a in c.m_axes if a.extent > 1]
    batch = [a for a in c.batch_axes if a.extent > 1 and a in dims]
    if len(ks) != len(c.k_axes) or not ms:
        return None
    for split in range(1, len(ks)):
        if dims == [*batch, *ks[:split], *ms, *ks[split:]]:
            return len(ks) - split
    return None


#: the shortest reduction slice worth reading A in place for (:func:`aligned_kc`)
MIN_ALIGNED_KC = 16


def aligned_kc(contraction: Contraction, kc: int) -> int | None:
    """For A laid out with an outer k part (:func:`split_k_inner`): the largest ``KC`` at most
    ``kc`` that divides the inner k extent, so no slice straddles two of A's row runs; ``None``
    when A has no such layout or that ``KC`` would be shorter than :data:`MIN_ALIGNED_KC`.

    >>> from tilecraft import te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> gy = te.placeholder((8, 16, 12, 12), name="gy")
    >>> x = te.placeholder((8, 4, 14, 14), name="x")
    >>> n, h, w = te.reduce_axis(8, "n"), te.reduce_axis(12, "h"), te.reduce_axis(12, "w")
    >>> gw = te.compute((16, 4, 3, 3), lambda k, c, r, s: te.sum(
    ...     gy[n, k, h, w] * x[n, c, h + r, w + s], axis=[n, h, w]), name="gw")
    >>> aligned_kc(as_contraction(gw), 64)   # 144 = 12 x 12 per image: 48 divides it
    48
    """
    inner = split_k_inner(contraction)
    if inner is None:
        return None
    k_inner = product_of(contraction.k_axes[-inner:])
    best = max(d for d in range(1, min(kc, k_inner) + 1) if k_inner % d == 0)
    return best if best >= min(MIN_ALIGNED_KC, k_inner) else None


def with_block_epilogue(strips: Stmt, epilogue: Epilogue | None, last: Expr | None,
                        b_index: Expr, m_start: Expr, mc: int, m_total: int, n0: Expr,
                        n_total: int, nr: int, options: LoweringOptions) -> Stmt:
    """``strips`` (the tiles of one panel of a block of ``mc`` rows), then — for an epilogue
    run per block (:class:`~.epilogue.Epilogue`, same-index mode) — the epilogue over the
    block's rows and the panel's columns where ``last`` holds (the last reduction slice)."""
    if epilogue is None or epilogue.per_tile:
        return strips
    tail = epilogue.block(b_index, m_start, mc, m_total, n0, n_total, nr, options)
    return Seq((strips, tail if last is None else IfThenElse(last, tail)))


def written_tile(micro_kernel: str, operands: tuple[Region, Region, Region],
                 params: tuple[tuple[str, int], ...], zero: Stmt) -> Stmt:
    """A tile computed by one call over the whole reduction: the micro-kernel's setting variant
    (:data:`~tilecraft_x86_avx512.microkernels.SETTING_VARIANTS`, ``C = sum``: no zero-fill,
    no loads of C) where it has one, else ``zero`` then the accumulating call."""
    setting = SETTING_VARIANTS.get(micro_kernel)
    if setting is not None:
        return MicroKernelCall(setting, operands, params)
    return Seq((zero, MicroKernelCall(micro_kernel, operands, params)))


def edge_tiles(micro_kernel: str, a_region: Region, b_region: Region, out: Buffer,
               b_index: Expr, m0: Expr, n0: Expr, m_total: int, n_total: int, mi: int, nr: int,
               params: tuple[tuple[str, int], ...], first: Expr | None,
               options: LoweringOptions, a_rows_dim: int = -1,
               epilogue: Epilogue | None = None, last: Expr | None = None) -> Stmt:
    """The micro-kernel call for the ``mi x nr`` tile of ``out[b_index]`` at ``(m0, n0)``
    (``m0`` a multiple of ``mi``, ``n0`` of ``nr``): a whole tile, or — on the ragged bottom or
    right edge of C — the same kernel told to write only its ``MV`` valid rows and ``NC``
    valid columns (static: ``m_total % mi`` and ``n_total % nr``), so no tile is copied.
    ``first``: when true (the first reduction slice), the micro-kernel's setting variant
    (:data:`~tilecraft_x86_avx512.microkernels.SETTING_VARIANTS`: ``C = sum`` instead of
    ``C += sum``) writes the tile, or the tile is zeroed before the call where it has none.
    ``a_rows_dim``: which dimension of ``a_region`` holds the tile's rows (the last for A packed
    ``[KI, MI]``, the one before for A read as rows ``[MI, KI]``). ``epilogue``: computed on
    the tile's valid rows and columns after the call where ``last`` holds (the last reduction
    slice; ``None``: always), while the tile is in L1."""
    row, col = Var("row"), Var("col")
    lanes = max(1, options.lanes(out.dtype))

    # where the micro-kernel accumulates: C's tile, or an epilogue's (its own tile, or a local
    # one when the epilogue re-indexes or casts C)
    acc, (b0, r0, c0) = (out, (b_index, m0, n0)) if epilogue is None else \
        epilogue.accumulator(b_index, m0, n0)

    def variant(rows: int, cols: int) -> Stmt:
        zero = nest([(row, rows, LoopKind.SERIAL, 0), (col, cols, vector_kind(options), lanes)],
                    Store(acc, (b0, r0 + row, c0 + col), const(0, acc.dtype)))
        # the operands' strides come from their buffers: narrowing the regions to the written
        # rows and columns changes no address, only what the declared semantics covers
        a_extents = list(a_region.extents)
        a_extents[a_rows_dim] = rows
        a_part = Region(a_region.buffer, a_region.base, tuple(a_extents))
        b_part = Region(b_region.buffer, b_region.base, (*b_region.extents[:-1], cols))
        operands = (a_part, b_part, Region(acc, (b0, r0, c0), (1, rows, cols)))
        call = MicroKernelCall(micro_kernel, operands, (*params, ("MV", rows), ("NC", cols)))
        setting = SETTING_VARIANTS.get(micro_kernel)
        stmts: list[Stmt]
        if first is None:
            stmts = [call]
        elif setting is not None:  # the first slice writes the tile: no zero-fill, no C loads
            stmts = [IfThenElse(first, MicroKernelCall(setting, operands, call.params), call)]
        else:
            stmts = [IfThenElse(first, zero), call]
        if epilogue is not None and epilogue.per_tile:
            tail = epilogue.tile(b_index, m0, n0, rows, cols, options)
            stmts.append(tail if last is None else IfThenElse(last, tail))
        return stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))

    mv, nc = m_total % mi, n_total % nr
    by_cols = variant(mi, nr) if not nc else IfThenElse(n0 + nr <= n_total, variant(mi, nr),
                                                        variant(mi, nc))
    tiles: Stmt
    if not mv:  # strips past M exist when the last block of rows is partial
        tiles = IfThenElse(m0 < m_total, by_cols)
        return tiles if epilogue is None else epilogue.wrap(tiles)
    last_rows = variant(mv, nr) if not nc else IfThenElse(n0 + nr <= n_total, variant(mv, nr),
                                                          variant(mv, nc))
    tiles = IfThenElse(m0 + mi <= m_total, by_cols, IfThenElse(m0 < m_total, last_rows))
    return tiles if epilogue is None else epilogue.wrap(tiles)


def pack_operand(name: str, load: Load, tensor: Tensor, batch_axes: Sequence[IterVar],
                 width_axes: Sequence[IterVar], k_axes: Sequence[IterVar], width: int, kc: int,
                 options: LoweringOptions, level: str | None = None,
                 role: str = "pack") -> Kernel:
    """A kernel packing the operand read by ``load`` into the workspace
    ``name[batch, ceil(W / width), Kp, width]``: panels of ``width`` consecutive values of the
    fused ``width_axes`` (extent W), ``k`` major, zero-padded to whole panels and to ``Kp``, the
    fused ``k_axes`` extent rounded up to slices of ``kc`` (as in :func:`lower_contraction`).
    The batch dimension has extent 1 when the operand does not depend on ``batch_axes``.
    ``tensor`` is the compute the load belongs to (its extent-1 axes read index 0)."""
    dtype = load.tensor.dtype
    lanes = max(1, options.lanes(dtype))
    w_total = product_of(width_axes)
    k_total = product_of(k_axes)
    kc = min(kc, k_total)
    k_blocks = ceil_div(k_total, kc)
    k_padded = ceil_div(k_total, k_blocks) * k_blocks
    panels = ceil_div(w_total, width)
    batched = any(a in axes_in(load) for a in batch_axes)
    batch = product_of(batch_axes) if batched else 1
    source = operand_source(load, batch_axes, width_axes, k_axes, options)
    packed = Buffer(name, (batch, panels, k_padded, width), dtype,
                    level=level or options.param_level)
    t, jn, kz = Var("t"), Var("jn"), Var("kz")
    outer = batch * panels
    chunks, rows = pack_row_chunks(outer, k_total)
    piece = t // chunks if chunks > 1 else t
    chunk = t % chunks if chunks > 1 else const(0)
    pb = piece // panels if batch > 1 else const(0)
    jb = piece % panels

    def copy(count: int) -> Stmt:
        k0 = chunk * rows if chunks > 1 else const(0)
        return panel_copy(load, tensor, source, batch_axes, width_axes, k_axes, width, options,
                          pb if batched else None, jb, k0, count, packed, (pb, jb),
                          k0 if chunks > 1 else None)

    last_rows = k_total - (chunks - 1) * rows
    panel = copy(rows) if last_rows == rows else \
        IfThenElse(chunk < chunks - 1, copy(rows), copy(last_rows))
    if k_padded > k_total:
        zero_rows: Stmt = nest([(kz, k_padded - k_total, LoopKind.SERIAL, 0),
                                (jn, width, vector_kind(options), lanes)],
                               Store(packed, (pb, jb, kz + k_total, jn), const(0.0, dtype)))
        if chunks > 1:
            zero_rows = IfThenElse(eq(chunk, chunks - 1), zero_rows)
        panel = Seq((panel, zero_rows))
    split = f", {chunks} pieces of {rows} rows each" if chunks > 1 else ""
    kernel = Kernel(f"{name}_pack", (source, packed), (packed.name,),
                    For(t, const(outer * chunks), parallel_kind(options, outer * chunks), panel),
                    attrs={"compute": tensor.name, "role": role,
                           "schedule": f"{role}: {panels} panels of {k_padded}x{width}{split}"})
    verify_kernel(kernel, options.spec, check_bounds=False)  # guarded: see panel_copy
    return kernel


#: a pack with fewer (batch x panel) pieces than this splits each panel's rows too, so that
#: its parallel loop has work for every thread: a late convolution's im2col is one panel
#: (ResNet-18's stage 4, 4608 x 49 pixels), which one thread packed while the other waited —
#: 2 threads, Xeon family 6 model 167, in the network: 0.08 ms, against 0.045 on 1 thread
PACK_MIN_PIECES = 8
#: the fewest rows a split piece copies
PACK_MIN_ROWS = 64


def pack_row_chunks(pieces: int, k_total: int) -> tuple[int, int]:
    """``(chunks, rows)``: each of ``pieces`` panels copied as ``chunks`` runs of ``rows``
    rows (the last one shorter), enough for :data:`PACK_MIN_PIECES` pieces in all where
    ``k_total`` allows runs of :data:`PACK_MIN_ROWS`.

    >>> pack_row_chunks(1, 4608), pack_row_chunks(1, 100), pack_row_chunks(12, 512)
    ((8, 576), (1, 100), (1, 512))
    """
    if pieces >= PACK_MIN_PIECES:
        return 1, k_total
    chunks = max(1, min(ceil_div(PACK_MIN_PIECES, pieces), k_total // PACK_MIN_ROWS))
    rows = ceil_div(k_total, chunks)
    return ceil_div(k_total, rows), rows


def operand_source(load: Load, batch_axes: Sequence[IterVar], width_axes: Sequence[IterVar],
                   k_axes: Sequence[IterVar], options: LoweringOptions) -> Buffer:
    """The parameter buffer :func:`panel_copy` reads ``load``'s tensor through: a flat
    ``[batch?, W, K]`` view when its dimensions are the groups in that order (no div/mod per
    element), the tensor itself otherwise."""
    source = Buffer(load.tensor.name, load.tensor.shape, load.tensor.dtype,
                    level=options.param_level)
    # a 1x1 convolution's x[n, c, h + rh, w + rw] is the plain x[n, c, h, w]: viewed [C, H*W]
    plain = without_unit_taps(load, (*batch_axes, *width_axes, *k_axes))
    view = axis_groups_view(plain, [(batch_axes, const(0)), (width_axes, const(0)),
                                    (k_axes, const(0))], options.param_level)
    return view[0] if view is not None else source


#: the shortest innermost width axis :func:`panel_copy` walks row by row; rows of a 3x3
#: convolution weight gradient's taps (3 of 16 lanes) take the flat copy instead: its B pack
#: 2.1-14 ms by rows vs 0.9-1.3 ms flat (32->64, 16x16/2, batch 32, 1 thread, loaded Xeon);
#: rows of 7 stay rows (a 7x7 output's im2col: 0.05 ms by rows, 0.07 flat)
MIN_ROW_EXTENT = 4


def panel_copy(load: Load, tensor: Tensor, source: Buffer, batch_axes: Sequence[IterVar],
               width_axes: Sequence[IterVar], k_axes: Sequence[IterVar], width: int,
               options: LoweringOptions, pb: Expr | None, jb: Expr, k0: Expr, k_rows: int,
               dest: Buffer, dest_prefix: Sequence[Expr], dest_row0: Expr | None = None
               ) -> Stmt:
    """Copy panel ``jb`` of the operand read by ``load`` — ``width`` consecutive values of the
    fused ``width_axes`` (zeros past their extent W), rows ``k0 .. k0 + k_rows - 1`` of the
    fused ``k_axes`` (all inside K) — into ``dest[*dest_prefix, dest_row0 + kk, col]``
    (``dest_row0`` 0 by default). ``pb``: the flat batch index (``None`` when the operand has
    no batch axes); ``source`` from :func:`operand_source`."""
    dtype = load.tensor.dtype
    lanes = max(1, options.lanes(dtype))
    w_total = product_of(width_axes)
    viewed = source.shape != load.tensor.shape or source.name != load.tensor.name
    kk, jn = Var("kk"), Var("jn")
    w_flat = jb * width + jn
    batch_values = unflatten(pb, batch_axes) if pb is not None else {}
    k_flat = k0 + kk if not (isinstance(k0, Const) and k0.value == 0) else kk
    prefix = tuple(dest_prefix)
    dest_row = kk if dest_row0 is None else dest_row0 + kk

    def store(clamp: bool) -> Stmt:
        # clamped indices (and a select) only where the panel runs past W: elsewhere the load
        # stays affine in jn (a contiguous vector load when the operand is contiguous there)
        w_index = minimum(w_flat, w_total - 1) if clamp else w_flat
        values = {**batch_values, **unflatten(w_index, width_axes),
                  **unflatten(k_flat, k_axes)}
        value = kernel_expr(load, values, {load.tensor: source}, extra_zero=unit_axes(tensor))
        if viewed:
            plain = without_unit_taps(load, (*batch_axes, *width_axes, *k_axes))
            found = axis_groups_view(plain, [(batch_axes, pb if pb is not None else const(0)),
                                             (width_axes, w_index), (k_axes, k_flat)],
                                     options.param_level)
            assert found is not None and isinstance(found[1], BufferLoad)
            value = BufferLoad(source, found[1].indices)
        if clamp:
            value = select(w_flat < w_total, value, const(0.0, dtype))
        return nest([(kk, k_rows, LoopKind.SERIAL, 0), (jn, width, vector_kind(options), lanes)],
                    Store(dest, (*prefix, dest_row, jn), value))

    def by_rows() -> Stmt:
        # several width axes (a convolution's h, w): walk the rows the panel touches with a
        # vector loop along the innermost axis, so loads and stores stay contiguous instead of
        # gathering the flat index's div/mod; lanes outside the panel are masked off
        inner = width_axes[-1]
        extent = inner.extent
        rows_total = w_total // extent
        touched = min(rows_total, ceil_div(width - 1, extent) + 1)
        hr, wv = Var("hr"), Var("wv")
        start = jb * width
        row = start // extent + hr
        row_vectors = ceil_div(extent, lanes)
        window = ceil_div(width, lanes) + 1  # vectors a panel's part of one row can touch
        if window < row_vectors:
            # rows much wider than the panel (ResNet's 112-wide stem under 64-column panels):
            # visit only the vectors of each row that hold panel columns (stem 2.37 -> 2.15 ms;
            # where a row is no wider than that, the branches cost more than the masked
            # vectors they skip: 56-wide rows 1.82 -> 2.03 ms)
            vb = Var("vb")
            lo = maximum(start - row * extent, 0)
            hi = minimum(start + width - row * extent, extent)
            first = lo // lanes * lanes
            lane_vector = Var("wl")
            wv_expr = first + vb * lanes + lane_vector
        else:
            wv_expr = wv
        flat = row * extent + wv_expr
        values = {**batch_values, **unflatten(minimum(row, rows_total - 1), width_axes[:-1]),
                  inner: wv_expr, **unflatten(k_flat, k_axes)}
        value = kernel_expr(load, values, {load.tensor: source}, extra_zero=unit_axes(tensor))
        if window < row_vectors:
            inside = all_of(wv_expr >= lo, wv_expr < hi, flat < w_total)
            lane_loop = nest([(lane_vector, lanes, vector_kind(options), lanes)],
                             IfThenElse(inside,
                                        Store(dest, (*prefix, dest_row, flat - start), value)))
            copy = nest([(kk, k_rows, LoopKind.SERIAL, 0), (hr, touched, LoopKind.SERIAL, 0),
                         (vb, window, LoopKind.SERIAL, 0)],
                        IfThenElse(first + vb * lanes < hi, lane_loop))
        else:
            inside = all_of(flat >= start, flat < start + width, flat < w_total)
            copy = nest([(kk, k_rows, LoopKind.SERIAL, 0), (hr, touched, LoopKind.SERIAL, 0),
                         (wv, extent, vector_kind(options), lanes)],
                        IfThenElse(inside, Store(dest, (*prefix, dest_row, flat - start), value)))
        if w_total % width == 0:
            return copy
        zero_tail = nest([(kk, k_rows, LoopKind.SERIAL, 0),
                          (jn, width, vector_kind(options), lanes)],
                          IfThenElse(w_flat >= w_total,
                                     Store(dest, (*prefix, dest_row, jn), const(0.0, dtype))))
        return Seq((copy, zero_tail))

    if len(width_axes) >= 2 and MIN_ROW_EXTENT <= width_axes[-1].extent < w_total \
            and not viewed:
        return by_rows()  # a flat view is contiguous along its width already: no rows walk
    return store(False) if w_total % width == 0 else \
        IfThenElse(jb * width + width <= w_total, store(False), store(True))


__all__ = ["Blocking", "a_row_view", "aligned_kc", "axis_groups_view", "b_row_view",
           "edge_tiles", "lower_contraction", "operand_source", "pack_operand", "pack_row_chunks",
           "panel_copy", "split_k_inner", "with_block_epilogue"]
