"""Fused chains that share their columns: a convolution chain (thesis Table 3.6) on micro-kernels.

In NCHW a batch-1 convolution is the contraction ``T[l, n] = sum_k W1[l, k] X(k, n)`` with
``l`` the output channels, ``n`` the output pixels and ``k`` = (input channel, kernel row,
kernel column) — its B operand is the im2col view of the input. A 1x1 convolution (or any
contraction) reading ``T`` — after elementwise computes such as a bias and a ReLU — as its B
operand, ``E[m, n] = sum_l W2[m, l] Z[l, n]``, shares the pixel loops with the first. The chain
becomes one kernel, in parallel over (batch, blocks of ``NC`` pixels):

1. for each ``KC`` slice of the reduction, pack the block's slice of the im2col columns
   ``Xp[NC / NR1, KC, NR1]`` (zero past the last pixel; it stays in L2 while every strip of
   ``W1`` passes over it, and the next slice is packed just before it is used); a
   ``pad`` compute feeding the convolution (``select(inside, x[...], 0)``) is folded into this
   packing as a branch — the loads stay unclamped, so a stride-1 row is one contiguous masked
   load — and the padded input is never written;
2. accumulate the slice's product into the ``L x NC`` tile of ``T`` with the micro-kernel
   (``W1`` packed into ``MI1``-row strips by its own kernel, or read in place);
3. apply the elementwise computes to the tile in place, vectorised along the pixels;
4. multiply ``W2`` (packed into ``MI2``-row strips) by the tile, read directly as the
   micro-kernel's B operand, into ``E``'s columns.

The tile tree is ``[batch x N/NC] (parallel) > { [K/KC] > Xp[KC, NC]; T[L, NC] in L2;
E[M, NC] }``: the
intermediate never leaves the core's caches. A second convolution with a window (3x3) reads a
halo of ``T`` that neighbouring blocks compute as well; such chains are not recognised here
(the thesis, §3.6, finds fusing a compute-bound second convolution does not pay).

>>> from tilecraft import ops, te
>>> x = te.placeholder((1, 8, 10, 10), name="x")
>>> w1 = te.placeholder((16, 8, 3, 3), name="w1")
>>> w2 = te.placeholder((4, 16, 1, 1), name="w2")
>>> t = ops.conv2d(x, w1, padding=1, name="conv1")
>>> e = ops.conv2d(ops.relu(t, name="act"), w2, name="conv2")
>>> from tilecraft.graph import Graph
>>> graph = Graph.from_outputs([e])
>>> chain = as_column_chain(e, {c: list(graph.consumers(c)) for c in graph.computes})
>>> [t.name for t in chain.computes]
['conv1_pad', 'conv1', 'act', 'conv2']
>>> chain.first.extents(), chain.second.extents()
((1, 16, 100, 72), (1, 4, 100, 16))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction, as_contraction
from tilecraft.te.expr import Expr, IterVar, Load, Reduce, Select, Var, const
from tilecraft.te.functions import eq, minimum
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import is_const, loads_in, substitute, transform, vars_in
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    kernel_expr,
    nest,
    parallel_kind,
    product_of,
    topological_order,
    unflatten,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.column_packing import pack_block_columns, pack_slices
from tilecraft_x86_avx512.blocking.register_tiles import (
    a_row_view,
    edge_tiles,
    pack_operand,
)


@dataclass(frozen=True)
class ColumnChain:
    """``first`` (``T[batch, l, n...]``), the elementwise computes ``between`` (in order) and
    ``second`` (``E[batch, m, n...]`` reading the last of them, or ``T``, as its B operand);
    ``padded``: a pad compute (``select(cond, inputs..., value)``) read only by ``first``'s B
    operand, folded into its packing."""

    first: Contraction
    between: tuple[Tensor, ...]
    second: Contraction
    padded: Tensor | None = None

    @property
    def computes(self) -> tuple[Tensor, ...]:
        pad = (self.padded,) if self.padded is not None else ()
        return (*pad, self.first.tensor, *self.between, self.second.tensor)

    @property
    def flops(self) -> int:
        return self.first.flops + self.second.flops


@dataclass(frozen=True)
class ColumnBlocking:
    """Register tiles ``mi1 x nr1`` of ``T`` (rows ``l``, columns ``n``) and ``mi2 x nr2`` of
    ``E``; ``nc`` columns of ``n`` per block (a multiple of ``nr1`` and of ``nr2``); the first
    product's reduction in slices of ``kc`` (0: whole), so that a ``kc x nr1`` panel of the
    packed input stays in L1 while every strip of ``W1`` passes over it."""

    mi1: int
    nr1: int
    mi2: int
    nr2: int
    nc: int
    kc: int = 0

    def __post_init__(self) -> None:
        if self.nc < 1 or self.nc % self.nr1 or self.nc % self.nr2:
            raise LoweringError(f"column chain blocking: nc = {self.nc} must be a positive "
                                f"multiple of nr1 = {self.nr1} and of nr2 = {self.nr2}")


def _reads_exactly(load: Load, axes: Sequence[IterVar]) -> bool:
    """Whether ``load`` reads element ``axes`` of its tensor: the dimensions of extent > 1 are
    indexed by ``axes`` in order, the others by 0 (or an axis of extent 1)."""
    kept = []
    units: dict[IterVar, Expr] = {}
    for index in load.indices:
        units.update({v: const(0) for v in vars_in(index)
                      if isinstance(v, IterVar) and v.extent == 1})
    for index, extent in zip(load.indices, load.tensor.shape):
        index = simplify(substitute(index, units)) if units else index
        if extent > 1:
            kept.append(index)
        elif not (is_const(index, 0) or (isinstance(index, IterVar) and index.extent == 1)):
            return False
    return len(kept) == len(axes) and all(i is a for i, a in zip(kept, axes))


def _live(axes: Sequence[IterVar]) -> list[IterVar]:
    return [a for a in axes if a.extent > 1]


def as_column_chain(output: Tensor, consumers: Mapping[Tensor, Sequence[Tensor]] | None = None
                    ) -> ColumnChain | None:
    """The column chain ending in ``output``, or ``None``. ``consumers`` (tensor → its
    consumers in the graph) refuses chains whose intermediates are read elsewhere, and allows
    folding a pad that only the first contraction reads."""
    second = as_contraction(output)
    if second is None or len(second.k_axes) != 1:
        return None
    z = second.b.tensor
    if z.is_placeholder or not _reads_exactly(second.b, [*second.batch_axes, second.k_axes[0],
                                                         *second.n_axes]):
        return None
    first: Contraction | None = None
    between: list[Tensor] = []
    frontier, seen = [z], set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        contraction = as_contraction(t)
        if contraction is not None:
            if first is not None:
                return None
            first = contraction
            continue
        if isinstance(t.op.body, Reduce) or tuple(t.shape) != tuple(z.shape) \
                or t.dtype is not DType.FLOAT32:
            return None
        for load in loads_in(t.op.body):
            if load.tensor.is_placeholder:
                continue
            if not _reads_exactly(load, _live(t.axes)):
                return None
            frontier.append(load.tensor)
        between.append(t)
    if first is None or tuple(first.tensor.shape) != tuple(z.shape):
        return None
    ref = first.tensor
    if len(first.m_axes) != 1 or _live(ref.axes) != [*first.batch_axes, first.m_axes[0],
                                                     *first.n_axes]:
        return None
    if [a.extent for a in first.n_axes] != [a.extent for a in second.n_axes] or \
            [a.extent for a in first.batch_axes] != [a.extent for a in second.batch_axes] or \
            first.m_axes[0].extent != second.k_axes[0].extent:
        return None
    order = topological_order(between, ref)
    if order is None or (z is not ref and order[-1] is not z):
        return None
    inside = {ref, *order, output}
    if consumers is not None and any(c not in inside for t in (ref, *order)
                                     for c in consumers.get(t, ())):
        return None
    source = first.b.tensor
    padded = None
    if consumers is not None and not source.is_placeholder and \
            isinstance(source.op.body, Select) and \
            all(ld.tensor.is_placeholder for ld in loads_in(source.op.body)) and \
            set(consumers.get(source, ())) == {ref}:
        padded = source
    return ColumnChain(first, tuple(order), second, padded)


def lower_column_chain(chain: ColumnChain, micro_kernel: str, blocking: ColumnBlocking,
                       options: LoweringOptions,
                       rows_micro_kernel: str | None = None) -> list[Kernel]:
    """Pack kernels for ``W1`` and ``W2``, and the fused kernel (see the module docstring).
    ``micro_kernel`` has the semantics ``C[m, n] += A[k, m] * B[k, n]`` with parameters
    ``MI``, ``NR``, ``KI``, ``MV``, ``NC``. With ``rows_micro_kernel`` (``C[m, n] += A[m, k] *
    B[k, n]``, A read as rows in place), a weight that is a row-major ``[M, K]`` view of its
    tensor (a convolution's ``W[k, c, r, s]``) is not packed at all."""
    bl = blocking
    first, second = chain.first, chain.second
    ref, out = first.tensor, second.tensor
    batch, l_total, n_total, k_total = first.extents()
    _, m_total, _, _ = second.extents()
    dtype = DType.FLOAT32
    lanes = max(1, options.lanes(dtype))
    level = options.param_level
    kc = min(bl.kc or k_total, k_total)
    k_blocks = ceil_div(k_total, kc)
    kc = ceil_div(k_total, k_blocks)                 # equal slices: padding < k_blocks rows
    step = bl.nr1 * bl.nr2 // math.gcd(bl.nr1, bl.nr2)
    nc = min(bl.nc, ceil_div(n_total, step) * step)
    n_blocks = ceil_div(n_total, nc)
    t, pc, ls, ms = Var("t"), Var("pc"), Var("ls"), Var("ms")
    b_index = t // n_blocks if batch > 1 else const(0)
    w1_rows = a_row_view(first, b_index, ls * bl.mi1, pc * kc, level) \
        if rows_micro_kernel else None
    w2_rows = a_row_view(second, b_index, ms * bl.mi2, const(0), level) \
        if rows_micro_kernel else None
    packs: list[Kernel] = []
    if w1_rows is None:
        packs.append(pack_slices(f"{ref.name}_apacked", first, bl.mi1, kc, k_blocks, options))
        w1p = Buffer(packs[-1].params[-1].name, packs[-1].params[-1].shape, dtype, level=level)
    if w2_rows is None:
        packs.append(pack_operand(f"{out.name}_apacked", second.a, out, second.batch_axes,
                                  second.m_axes, second.k_axes, bl.mi2, l_total, options,
                                  role=f"pack A of {out.name} into m-strips"))
        w2p = Buffer(packs[-1].params[-1].name, packs[-1].params[-1].shape, dtype, level=level)
    l_strips = ceil_div(l_total, bl.mi1)
    l_padded = l_strips * bl.mi1
    panels = nc // bl.nr1
    xpack = Buffer(f"{ref.name}_bpacked", (panels, kc, bl.nr1), dtype, level=level)
    tile = Buffer(f"{ref.name}_tile", (l_padded, nc), dtype, level=level)
    e_view = Buffer(out.name, (batch, m_total, n_total), dtype, level=level)
    n0 = (t % n_blocks) * nc if n_blocks > 1 else const(0)

    params: dict[str, Buffer] = {}

    def to_buffers(expr: Expr, values: Mapping[IterVar, Expr], unit: Sequence[IterVar]) -> Expr:
        for load in loads_in(expr):
            tensor = load.tensor
            params.setdefault(tensor.name, Buffer(tensor.name, tensor.shape, tensor.dtype,
                                                  level=level))
        buffers = {ld.tensor: params[ld.tensor.name] for ld in loads_in(expr)}
        return kernel_expr(expr, values, buffers, extra_zero=unit)

    batch_values = unflatten(b_index, first.batch_axes)
    unit = [a for a in (*ref.axes, *ref.reduce_axes) if a.extent == 1]
    k_last = k_total - (k_blocks - 1) * kc
    slice_rows = const(kc) if k_last == kc else minimum(k_total - pc * kc, kc)
    pack = pack_block_columns(xpack, first.b, chain.padded, first, batch_values, n0, n_total,
                       pc * kc, slice_rows, bl.nr1, options, lanes,
                       lambda e, v: to_buffers(e, v, unit))
    if w1_rows is None and k_last < kc:  # the last slice's rows past K are zero, as W1's are
        jz, kz, cz = Var("jz"), Var("kz"), Var("cz")
        pack = Seq((pack, IfThenElse(eq(pc, k_blocks - 1), nest(
            [(jz, panels, LoopKind.SERIAL, 0), (kz, kc - k_last, LoopKind.SERIAL, 0),
             (cz, bl.nr1, vector_kind(options), lanes)],
            Store(xpack, (jz, kz + k_last, cz), const(0.0))))))

    # T tile: A = W1 strip (l rows), B = packed im2col panel (n columns), by k slices
    jp, row, col = Var("jp"), Var("row"), Var("col")
    zero = nest([(row, bl.mi1, LoopKind.SERIAL, 0), (col, bl.nr1, vector_kind(options), lanes)],
                Store(tile, (ls * bl.mi1 + row, jp * bl.nr1 + col), const(0.0)))
    b_part = Region(xpack, (jp, const(0), const(0)), (1, kc, bl.nr1))
    if w1_rows is None:
        w1_batch = b_index if w1p.shape[0] > 1 else const(0)
        call: Stmt = MicroKernelCall(micro_kernel, (
            Region(w1p, (w1_batch, pc, ls, const(0), const(0)), (1, 1, 1, kc, bl.mi1)),
            b_part, Region(tile, (ls * bl.mi1, jp * bl.nr1), (bl.mi1, bl.nr1))),
            (("MI", bl.mi1), ("NR", bl.nr1), ("KI", kc), ("MV", bl.mi1), ("NC", bl.nr1)))
    else:
        call = _rows_calls(rows_micro_kernel, w1_rows, xpack, tile, ls, jp, pc, bl, kc,
                           k_blocks, k_total, l_total)
    step_body: Stmt = Seq((IfThenElse(eq(pc, 0), zero), call)) if k_blocks > 1 else \
        Seq((zero, call))
    first_gemm = For(pc, const(k_blocks), LoopKind.SERIAL, Seq((pack, nest(
        [(jp, panels, LoopKind.SERIAL, 0), (ls, l_strips, LoopKind.SERIAL, 0)], step_body))))

    stmts, allocs, z_buffer = _between(chain, tile, batch_values, n0, nc, l_total, options,
                                       lanes, to_buffers)

    # E columns of the block: A = W2 strip (m rows), B = the tile (l rows, n columns)
    jq = Var("jq")
    b_region = Region(z_buffer, (const(0), jq * bl.nr2), (l_total, bl.nr2))
    second_params = (("MI", bl.mi2), ("NR", bl.nr2), ("KI", l_total))
    if w2_rows is None:
        w2_batch = b_index if w2p.shape[0] > 1 else const(0)
        a_region = Region(w2p, (w2_batch, ms, const(0), const(0)), (1, 1, l_total, bl.mi2))
        tiles = edge_tiles(micro_kernel, a_region, b_region, e_view, b_index, ms * bl.mi2,
                           n0 + jq * bl.nr2, m_total, n_total, bl.mi2, bl.nr2, second_params,
                           const(True), options)
    else:
        view, base = w2_rows
        a_region = Region(view, base, (*(1,) * (len(base) - 2), bl.mi2, l_total))
        tiles = edge_tiles(rows_micro_kernel, a_region, b_region, e_view, b_index,
                           ms * bl.mi2, n0 + jq * bl.nr2, m_total, n_total, bl.mi2, bl.nr2,
                           second_params, const(True), options, a_rows_dim=-2)
    if n_total % nc:  # panels of the last block past the last column write nothing
        tiles = IfThenElse(n0 + jq * bl.nr2 < n_total, tiles)
    second_gemm = nest([(ms, ceil_div(m_total, bl.mi2), LoopKind.SERIAL, 0),
                        (jq, nc // bl.nr2, LoopKind.SERIAL, 0)], tiles)

    body: Stmt = Seq((first_gemm, *stmts, second_gemm))
    for buffer in (*allocs, tile, xpack):
        body = Allocate(buffer, body)
    outer = batch * n_blocks
    main = For(t, const(outer), parallel_kind(options, outer), body)
    inputs = [w1p if w1_rows is None else w1_rows[0], w2p if w2_rows is None else w2_rows[0],
              *params.values()]
    kernel = Kernel(out.name, (*inputs, e_view), (out.name,), main, attrs={
        "compute": out.name, "statement": out.statement(),
        "micro_kernel": micro_kernel if w1_rows is None else rows_micro_kernel,
        "fused": [t_.name for t_ in chain.computes],
        "schedule": (f"fused column chain {' -> '.join(t_.name for t_ in chain.computes)}: "
                     f"parallel({outer} = batch x N/{nc}) > k-slices({k_blocks} x {kc}) > "
                     f"B1 panels[{kc}x{nc}] local > "
                     f"T[{l_padded}x{nc}] local (tile {bl.mi1}x{bl.nr1}) > elementwise in "
                     f"place > E columns (tile {bl.mi2}x{bl.nr2})"
                     f"{'; weights read in place' if w1_rows and w2_rows else ''}")})
    verify_kernel(kernel, options.spec, check_bounds=False)
    return [*packs, kernel]


def _rows_calls(micro_kernel: str, w1: tuple[Buffer, tuple[Expr, ...]], xpack: Buffer,
                tile: Buffer, ls: Var, jp: Var, pc: Var, bl: ColumnBlocking, kc: int,
                k_blocks: int, k_total: int, l_total: int) -> Stmt:
    """The micro-kernel calls of one (slice, panel, strip) with ``W1``'s rows read in place:
    the last strip takes only the ``MV`` rows ``W1`` has, the last slice only the ``k`` left,
    so nothing past either end of ``W1`` is read."""
    view, base = w1
    lead = (1,) * (len(base) - 2)
    l_strips = ceil_div(l_total, bl.mi1)
    k_last = k_total - (k_blocks - 1) * kc

    def call(rows: int, ki: int) -> Stmt:
        return MicroKernelCall(micro_kernel, (
            Region(view, base, (*lead, rows, ki)),
            Region(xpack, (jp, const(0), const(0)), (1, ki, bl.nr1)),
            Region(tile, (ls * bl.mi1, jp * bl.nr1), (rows, bl.nr1))),
            (("MI", bl.mi1), ("NR", bl.nr1), ("KI", ki), ("MV", rows), ("NC", bl.nr1)))

    def by_rows(ki: int) -> Stmt:
        rest = l_total - (l_strips - 1) * bl.mi1
        if rest == bl.mi1:
            return call(bl.mi1, ki)
        return IfThenElse(ls < l_strips - 1, call(bl.mi1, ki), call(rest, ki))

    if k_last == kc:
        return by_rows(kc)
    return IfThenElse(pc < k_blocks - 1, by_rows(kc), by_rows(k_last))


def _between(chain: ColumnChain, tile: Buffer, batch_values: Mapping[IterVar, Expr], n0: Expr,
             nc: int, l_total: int, options: LoweringOptions, lanes: int, to_buffers
             ) -> tuple[list[Stmt], list[Buffer], Buffer]:
    """Loop nests applying the elementwise computes to the ``[l, n]`` tile: in place where the
    buffer read dies, otherwise into a new local tile. Returns them, the extra buffers and the
    buffer holding the last one."""
    ref = chain.first.tensor
    local: dict[Tensor, Buffer] = {ref: tile}
    last_reader: dict[Tensor, int] = {}
    for position, t in enumerate(chain.between):
        for ld in loads_in(t.op.body):
            last_reader[ld.tensor] = position
    stmts: list[Stmt] = []
    allocs: list[Buffer] = []
    lv, c = Var("l"), Var("c")
    first = chain.first
    for position, t in enumerate(chain.between):
        reusable = [ld.tensor for ld in loads_in(t.op.body)
                    if ld.tensor in local and last_reader.get(ld.tensor, -1) <= position]
        if reusable:
            buffer = local[reusable[0]]
        else:
            buffer = Buffer(f"{t.name}_local", tile.shape, DType.FLOAT32, level=tile.level)
            allocs.append(buffer)

        def to_local(node: Expr) -> Expr | None:
            if isinstance(node, Load) and node.tensor in local:
                return BufferLoad(local[node.tensor], (lv, c))
            return None

        # t's axes run like T's: [batch..., l, n...] (plus extent-1 axes)
        live = _live(t.axes)
        nb = len(first.batch_axes)
        values: dict[IterVar, Expr] = {}
        values.update({a: batch_values[b] for a, b in zip(live[:nb], first.batch_axes)})
        values[live[nb]] = lv
        values.update(unflatten(minimum(n0 + c, product_of(first.n_axes) - 1), live[nb + 1:]))
        expr = transform(t.op.body, to_local)
        expr = to_buffers(expr, values, [a for a in t.axes if a.extent == 1])
        stmts.append(nest([(lv, l_total, LoopKind.SERIAL, 0), (c, nc, vector_kind(options), lanes)],
                          Store(buffer, (lv, c), simplify(expr))))
        local[t] = buffer
    z = chain.between[-1] if chain.between else ref
    return stmts, allocs, local[z]


__all__ = ["ColumnBlocking", "ColumnChain", "as_column_chain", "lower_column_chain"]
