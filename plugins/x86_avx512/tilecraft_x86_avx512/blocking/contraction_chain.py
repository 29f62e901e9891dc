"""Fused contraction chains on micro-kernels (thesis §3.4, Chimera's fused code generation).

A chain ``T = A1 x B1`` → memory-bound computes on ``T`` (relu, scaling, a whole softmax) →
``E = Z x D`` (``Z`` the last of them, or ``T``) becomes one kernel: in parallel over (batch,
blocks of ``MC`` rows of ``m``), each block

1. computes the ``L x MC`` tile ``T^T`` of its rows with the outer-product micro-kernel —
   transposed, so that its columns are ``m`` and the second contraction can read it directly as
   its ``A[k = l, m]`` operand, without packing;
2. applies the memory-bound computes to the tile in place, vectorised along ``m``; row
   reductions over ``l`` (softmax's max and sum) keep one value per ``m``. Whole softmax rows
   are kept: the tile holds every ``l`` of the block's rows (the alternative, the online
   rescaling softmax, pays extra multiplications per element and is needed only when a row does
   not fit — at the G-chains' L <= 512 a row of an MC = 96 block is 192 KB, within L2);
3. multiplies the tile by the packed ``D`` into ``E``'s rows.

The intermediate never leaves the core's caches: the tile tree is
``[batch x M/MC] (parallel) > { T^T[L, MC] in L2; E[MC, N] }``. ``B1`` and ``D`` are packed once
by their own kernels, ``A1``'s block once per block.

>>> from tilecraft import ops, te
>>> A = te.placeholder((2, 40, 16), name="A")
>>> B = te.placeholder((2, 16, 30), name="B")
>>> D = te.placeholder((2, 30, 8), name="D")
>>> T = ops.batch_matmul(A, B, name="T")
>>> E = ops.batch_matmul(ops.softmax(T, name="S"), D, name="E")
>>> chain = as_chain(E)
>>> chain.first.tensor.name, [t.name for t in chain.between], chain.second.tensor.name
('T', ['S_max', 'S_sub', 'S_exp', 'S_sum', 'S'], 'E')
"""

from __future__ import annotations

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
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction, as_contraction
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Expr,
    IterVar,
    Load,
    Reduce,
    Var,
    const,
    select,
)
from tilecraft.te.functions import all_of, minimum
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import is_const, loads_in, transform
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    inline_loads,
    kernel_expr,
    nest,
    parallel_kind,
    topological_order,
    unflatten,
    unit_axes,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.register_tiles import (
    edge_tiles,
    pack_operand,
    written_tile,
)


@dataclass(frozen=True)
class ContractionChain:
    """``first`` (a contraction producing ``T``), the memory-bound computes ``between`` (in
    order), and ``second`` (a contraction whose A side reads the last of them, or ``T``): the
    x86 blocking's view of a GEMM chain, its operands sorted for the micro-kernels (Chimera's
    chain, which the fusion planner analyses, is :class:`tilecraft.fusion.chain.Chain`)."""

    first: Contraction
    between: tuple[Tensor, ...]
    second: Contraction

    @property
    def computes(self) -> tuple[Tensor, ...]:
        return (self.first.tensor, *self.between, self.second.tensor)

    @property
    def flops(self) -> int:
        return self.first.flops + self.second.flops


@dataclass(frozen=True)
class ChainBlocking:
    """Tiles: ``mi1 x nr1`` register tile of ``T^T`` (rows ``l``, columns ``m``), ``mi2 x nr2``
    of ``E``; ``mc`` rows of ``m`` per block (a multiple of ``nr1`` and of ``mi2``). With
    ``rows`` (:mod:`.chain_rows`) the tile of ``T`` is ``mi1 x nr1`` with rows ``m``, columns
    ``l``, and ``mc`` is a multiple of ``mi1`` and of ``mi2``."""

    mi1: int
    nr1: int
    mi2: int
    nr2: int
    mc: int
    rows: bool = False

    def __post_init__(self) -> None:
        step, name = (self.mi1, "mi1") if self.rows else (self.nr1, "nr1")
        if self.mc % step or self.mc % self.mi2:
            raise LoweringError(f"chain blocking: mc = {self.mc} must be a multiple of {name} = "
                                f"{step} and of mi2 = {self.mi2}")


def _row_layout(tensor: Tensor, ref: Tensor) -> str | None:
    """``full`` when ``tensor`` has ``ref``'s shape, ``row`` when it drops the last axis."""
    if tuple(tensor.shape) == tuple(ref.shape):
        return "full"
    if tuple(tensor.shape) == tuple(ref.shape[:-1]):
        return "row"
    return None


def _aligned(load: Load, axes: Sequence[IterVar]) -> bool:
    """Whether ``load`` reads element ``axes`` exactly (0 standing for an axis of extent 1)."""
    if len(load.indices) != len(axes):
        return False
    return all(index is axis or (axis.extent == 1 and is_const(index, 0))
               for index, axis in zip(load.indices, axes))


def as_chain(output: Tensor,
             consumers: Mapping[Tensor, Sequence[Tensor]] | None = None) -> ContractionChain | None:
    """The chain ending in ``output``, or ``None``. ``consumers`` (tensor → its consumers in the
    graph) lets the caller refuse chains whose intermediates are also read outside them."""
    second = as_contraction(output)
    if second is None or len(second.k_axes) != 1 or len(second.m_axes) != 1:
        return None
    z = second.a.tensor
    indices = second.a.indices
    if z.is_placeholder or len(indices) != len(z.shape) or len(z.shape) < 2:
        return None
    if indices[-2] is not second.m_axes[0] or indices[-1] is not second.k_axes[0]:
        return None
    # walk back from z to the first contraction through memory-bound computes
    first = as_contraction(z)
    between: list[Tensor] = []
    frontier = [] if first is not None else [z]
    seen: set[Tensor] = set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        contraction = as_contraction(t)
        if contraction is not None:
            if first is not None and first.tensor is not t:
                return None
            first = contraction
            continue
        between.append(t)
        frontier.extend(ld.tensor for ld in loads_in(t.op.body) if not ld.tensor.is_placeholder)
    if first is None:
        return None
    ref = first.tensor
    if len(first.m_axes) != 1 or len(first.n_axes) != 1 or len(first.k_axes) < 1:
        return None
    if ref.axes[-1] is not first.n_axes[0] or ref.axes[-2] is not first.m_axes[0]:
        return None
    order = topological_order([*between], ref)
    if order is None:
        return None
    for t in order:
        layout = _row_layout(t, ref)
        if layout is None or t.dtype is not DType.FLOAT32:
            return None
        body = t.op.body
        if isinstance(body, Reduce) and (layout != "row" or len(body.axes) != 1
                                         or body.axes[0].extent != ref.shape[-1]):
            return None
        if not isinstance(body, Reduce) and layout != "full":
            return None
        for load in loads_in(body):
            source = load.tensor
            if source.is_placeholder:
                continue
            if source is not ref and source not in order:
                return None
            src_layout = _row_layout(source, ref)
            own = t.axes + (tuple(body.axes) if isinstance(body, Reduce) else ())
            want = own if src_layout == "full" else t.axes[:len(ref.shape) - 1]
            if isinstance(body, Reduce) and src_layout == "row":
                return None
            if not _aligned(load, want):
                return None
    if consumers is not None:
        inside = {ref, *order, output}
        for t in (ref, *order):
            if any(c not in inside for c in consumers.get(t, ())):
                return None
    if z is not ref and (not order or order[-1] is not z):
        return None
    if z is not ref and _row_layout(z, ref) != "full":
        return None
    if tuple(z.shape[-2:]) != (second.m_axes[0].extent, second.k_axes[0].extent):
        return None
    return ContractionChain(first, tuple(order), second)


def lower_chain(chain: ContractionChain, micro_kernel: str, blocking: ChainBlocking,
                options: LoweringOptions) -> list[Kernel]:
    """Pack kernels for ``B1`` and ``D``, and the fused kernel (see the module docstring)."""
    bl = blocking
    first, second = chain.first, chain.second
    ref = first.tensor
    out = second.tensor
    batch, m_total, l_total, k_total = first.extents()
    _, _, n_total, l2 = second.extents()
    if l2 != l_total:
        raise LoweringError(f"chain {ref.name} -> {out.name}: the second contraction reduces "
                            f"over {l2} values but the first produces {l_total} columns")
    dtype = DType.FLOAT32
    lanes = max(1, options.lanes(dtype))
    level = options.param_level
    # packed B1 as the A operand of T^T = B1^T A1^T: strips of mi1 values of l, k major
    b1_pack = pack_operand(f"{ref.name}_b1packed", first.b, ref, first.batch_axes,
                           first.n_axes, first.k_axes, bl.mi1, k_total, options,
                           role=f"pack B of {ref.name} into l-strips")
    l_padded = b1_pack.params[-1].shape[1] * bl.mi1
    k_padded = b1_pack.params[-1].shape[2]
    d_pack = pack_operand(f"{out.name}_dpacked", second.b, out, second.batch_axes,
                          second.n_axes, second.k_axes, bl.nr2, l_total, options,
                          role=f"pack B of {out.name}")
    d_packed = d_pack.params[-1]
    if d_packed.shape[2] != l_total:
        raise LoweringError("internal: D packed with padded k")  # pragma: no cover
    b1p = Buffer(b1_pack.params[-1].name, b1_pack.params[-1].shape, dtype, level=level)
    dp = Buffer(d_packed.name, d_packed.shape, dtype, level=level)
    a1 = first.a.tensor
    a1_buffer = Buffer(a1.name, a1.shape, a1.dtype, level=level)
    e_view = Buffer(out.name, (batch, m_total, n_total), dtype, level=level)
    mc = min(bl.mc, ceil_div(m_total, bl.mc) * bl.mc)
    m_blocks = ceil_div(m_total, mc)
    m_panels = mc // bl.nr1
    l_strips = l_padded // bl.mi1
    tile = Buffer(f"{ref.name}_tile", (l_padded, mc), dtype, level=level)
    a1_pack = Buffer(f"{ref.name}_a1packed", (m_panels, k_padded, bl.nr1), dtype, level=level)
    t = Var("t")
    b_index = t // m_blocks if batch > 1 else const(0)
    mb = t % m_blocks
    m0 = mb * mc

    # pack A1^T: panels of nr1 values of m, k major
    mp, kq, jn = Var("mp"), Var("kq"), Var("jn")
    m_flat = m0 + mp * bl.nr1 + jn
    values = {**unflatten(b_index, first.batch_axes),
              **unflatten(minimum(m_flat, m_total - 1), first.m_axes),
              **unflatten(minimum(kq, k_total - 1), first.k_axes)}
    load = kernel_expr(first.a, values, {a1: a1_buffer}, extra_zero=unit_axes(ref))
    pack_a = nest([(mp, m_panels, LoopKind.SERIAL, 0), (kq, k_padded, LoopKind.SERIAL, 0),
                   (jn, bl.nr1, vector_kind(options), lanes)],
                   Store(a1_pack, (mp, kq, jn),
                         select(all_of(m_flat < m_total, kq < k_total), load, const(0.0))))

    # T^T tile: micro-kernel with A = B1 strip (l rows), B = A1^T panel (m columns)
    ls, row, col = Var("ls"), Var("row"), Var("col")
    b1_batch = b_index if b1p.shape[0] > 1 else const(0)
    zero = nest([(row, bl.mi1, LoopKind.SERIAL, 0), (col, bl.nr1, vector_kind(options), lanes)],
                Store(tile, (ls * bl.mi1 + row, mp * bl.nr1 + col), const(0.0)))
    tile1 = written_tile(micro_kernel, (
        Region(b1p, (b1_batch, ls, const(0), const(0)), (1, 1, k_padded, bl.mi1)),
        Region(a1_pack, (mp, const(0), const(0)), (1, k_padded, bl.nr1)),
        Region(tile, (ls * bl.mi1, mp * bl.nr1), (bl.mi1, bl.nr1))),
        (("MI", bl.mi1), ("NR", bl.nr1), ("KI", k_padded), ("MV", bl.mi1), ("NC", bl.nr1)),
        zero)
    first_gemm = nest([(ls, l_strips, LoopKind.SERIAL, 0), (mp, m_panels, LoopKind.SERIAL, 0)],
                      tile1)

    # memory-bound computes on the tile, in place where a buffer dies
    placeholders = between_inputs(chain, options)
    stmts, allocs, z_buffer, deferred = between_passes(chain, tile, b_index, m0, mc, l_total,
                                                       options, lanes, placeholders)
    if l_padded > l_total:  # padded k rows of the second contraction must be zero
        lz, cz = Var("lz"), Var("cz")
        stmts.append(nest([(lz, l_padded - l_total, LoopKind.SERIAL, 0),
                           (cz, mc, vector_kind(options), lanes)],
                           Store(z_buffer, (lz + l_total, cz), const(0.0))))

    # E rows of the block: A = Z^T strip (columns m), B = packed D panel
    jr, ms = Var("jr"), Var("ms")
    e_m0 = m0 + ms * bl.mi2
    e_n0 = jr * bl.nr2
    d_batch = b_index if dp.shape[0] > 1 else const(0)
    b_region = Region(dp, (d_batch, jr, const(0), const(0)), (1, 1, l_total, bl.nr2))
    params2 = (("MI", bl.mi2), ("NR", bl.nr2), ("KI", l_total))
    # the A region spans l_padded rows; the micro-kernel reads KI = l_total of them
    a_region = Region(z_buffer, (const(0), ms * bl.mi2), (l_total, bl.mi2))
    tiles = edge_tiles(micro_kernel, a_region, b_region, e_view, b_index, e_m0, e_n0, m_total,
                       n_total, bl.mi2, bl.nr2, params2, const(True), options)
    second_gemm: Stmt = nest([(jr, ceil_div(n_total, bl.nr2), LoopKind.SERIAL, 0),
                              (ms, mc // bl.mi2, LoopKind.SERIAL, 0)], tiles)
    if deferred is not None:  # the rows of E scaled instead of the tile's columns
        second_gemm = Seq((second_gemm, scale_rows(deferred, e_view, b_index, m0, mc, m_total,
                                                   n_total, options, lanes)))

    outer = batch * m_blocks
    kernel = fused_chain_kernel(
        chain, Seq((pack_a, first_gemm, *stmts, second_gemm)), (*allocs, tile, a1_pack), t,
        outer, [a1_buffer, b1p, dp], e_view, micro_kernel,
        f"parallel({outer} = batch x M/{mc}) > T^T[{l_padded}x{mc}] local (tile {bl.mi1}x"
        f"{bl.nr1}) > memory-bound ops in place > E rows (tile {bl.mi2}x{bl.nr2})", options,
        placeholders, written=(tile, a1_pack))   # every strip x panel, zeros past m and k
    return [b1_pack, d_pack, kernel]


def scale_rows(deferred: tuple[BinaryOp, Buffer], e_view: Buffer, b_index: Expr, m0: Expr,
               mc: int, m_total: int, n_total: int, options: LoweringOptions,
               lanes: int) -> Stmt:
    """``E[b, m0 + mm, :] = E[b, m0 + mm, :] op factor[mm]`` for the block's rows: a row
    scaling of the intermediate (see :func:`between_passes`) applied to the product instead."""
    op, factor = deferred
    mm, nv = Var("mm"), Var("nv")
    where = (b_index, m0 + mm, nv)
    scaled = Store(e_view, where, Binary(op, BufferLoad(e_view, where),
                                         BufferLoad(factor, (mm,))))
    return For(mm, const(mc), LoopKind.SERIAL, IfThenElse(
        m0 + mm < m_total, For(nv, const(n_total), vector_kind(options), scaled, lanes=lanes)))


def fused_chain_kernel(chain: ContractionChain, body: Stmt, local: Sequence[Buffer], t: Var,
                       outer: int, inputs: list[Buffer], e_view: Buffer, micro_kernel: str,
                       schedule: str, options: LoweringOptions,
                       placeholders: Mapping[Tensor, Buffer],
                       written: Sequence[Buffer] = ()) -> Kernel:
    """The fused kernel of ``chain``: ``body`` with its ``local`` buffers, in parallel over
    ``t < outer``; parameters ``inputs``, ``placeholders`` (:func:`between_inputs`, the
    placeholders the memory-bound computes read) and ``e_view``. ``written``: those of
    ``local`` the body writes before it reads them (not zero-filled per block: the 528 KB
    tile of a 512-token attention block was)."""
    unzeroed = {buffer.name for buffer in written}
    for buffer in local:
        body = Allocate(buffer, body, zeroed=buffer.name not in unzeroed)
    main = For(t, const(outer), parallel_kind(options, outer), body)
    names = {b.name for b in inputs}
    for buffer in placeholders.values():
        if buffer.name not in names:
            names.add(buffer.name)
            inputs.append(buffer)
    out = chain.second.tensor
    label = " -> ".join(c.name for c in chain.computes)
    kernel = Kernel(out.name, (*inputs, e_view), (out.name,), main, attrs={
        "compute": out.name, "statement": out.statement(), "micro_kernel": micro_kernel,
        "fused": [c.name for c in chain.computes],
        "schedule": f"fused chain {label}: {schedule}"})
    verify_kernel(kernel, options.spec, check_bounds=False)
    return kernel


def between_inputs(chain: ContractionChain, options: LoweringOptions) -> dict[Tensor, Buffer]:
    """The parameter buffers of the placeholders the memory-bound computes read (a bias, a
    mask): made once per fused kernel and given to both :func:`between_passes` (its loads) and
    :func:`fused_chain_kernel` (its parameters), which must be the same buffers."""
    buffers: dict[Tensor, Buffer] = {}
    for between in chain.between:
        for ld in loads_in(between.op.body):
            if ld.tensor.is_placeholder and ld.tensor not in buffers:
                buffers[ld.tensor] = Buffer(ld.tensor.name, ld.tensor.shape, ld.tensor.dtype,
                                            level=options.param_level)
    return buffers


def between_passes(chain: ContractionChain, tile: Buffer, b_index: Expr, m0: Expr, mc: int,
                   l_total: int, options: LoweringOptions, lanes: int,
                   placeholders: Mapping[Tensor, Buffer], rows: bool = False
                   ) -> tuple[list[Stmt], list[Buffer], Buffer, tuple[BinaryOp, Buffer] | None]:
    """Loop nests applying the memory-bound computes to the local tile (``[l, m]``, vectorised
    along ``m``; ``rows``: ``[m, l]``, vectorised along ``l``, row reductions across lanes) and
    to per-row buffers (``[m]``), in as few passes over the tile as the computes allow:

    - an elementwise compute read once, by one later compute, is inlined into it (softmax's
      ``x - max`` into its ``exp``);
    - a row reduction whose only full-size input is the compute of the pass just before it is
      accumulated in that pass (softmax's sum, in the pass computing ``exp``);
    - a last compute that scales rows (``Y / r[m]`` or ``Y * r[m]``) is not applied to the
      ``L x MC`` tile at all: the second product is linear in its rows, so the ``MC x N`` rows of
      ``E`` are scaled instead (softmax's division; ``N`` is 4-8x smaller than ``L`` in the
      Table 3.5 chains).

    A full-size compute reuses the buffer of a full-size operand no later compute reads.
    Returns the statements, the extra buffers, the buffer the second product reads and the
    deferred row scaling (operator, per-row buffer) or ``None``."""
    ref = chain.first.tensor
    order = list(chain.between)
    z = order[-1] if order else ref

    def full(t: Tensor) -> bool:
        return tuple(t.shape) == tuple(ref.shape)

    reads: dict[Tensor, list[Tensor]] = {}
    for t in order:
        for ld in loads_in(t.op.body):
            reads.setdefault(ld.tensor, []).append(t)
    inlined = {t for t in order if t is not z and full(t) and not isinstance(t.op.body, Reduce)
               and len(reads.get(t, ())) == 1}

    def expand(expr: Expr) -> Expr:
        return inline_loads(expr, inlined)

    scale: tuple[BinaryOp, Tensor] | None = None
    z_source = z
    body = z.op.body
    if z is not ref and full(z) and isinstance(body, Binary) and \
            body.op in (BinaryOp.DIV, BinaryOp.MUL):
        sides = [(body.a, body.b)] + ([(body.b, body.a)] if body.op is BinaryOp.MUL else [])
        for value, factor in sides:
            if isinstance(value, Load) and isinstance(factor, Load) and full(value.tensor) \
                    and value.tensor not in inlined and factor.tensor in order \
                    and not full(factor.tensor) and not factor.tensor.is_placeholder:
                scale, z_source = (body.op, factor.tensor), value.tensor
                break
    emitted = [t for t in order if t not in inlined and not (scale and t is z)]
    expanded = {t: expand(t.op.body) for t in emitted}
    last_reader: dict[Tensor, int] = {}
    for position, t in enumerate(emitted):
        for ld in loads_in(expanded[t]):
            last_reader[ld.tensor] = position
    if scale is not None:
        last_reader[scale[1]] = len(emitted)
        last_reader[z_source] = len(emitted)

    local: dict[Tensor, Buffer] = {ref: tile}
    allocs: list[Buffer] = []
    stmts: list[Stmt] = []
    lv, m, r = Var("l"), Var("m"), Var("r")
    open_pass: tuple[Tensor, list[Stmt], int] | None = None   # (its compute, body, index)
    for position, t in enumerate(emitted):
        body = t.op.body
        expr_t = expanded[t]
        reduce_axis = body.axes[0] if isinstance(body, Reduce) else None
        if full(t):
            reusable = [ld.tensor for ld in loads_in(expr_t)
                        if ld.tensor in local and full(ld.tensor)
                        and last_reader.get(ld.tensor, -1) <= position]
            buffer = local[reusable[0]] if reusable else None
            if buffer is None:
                buffer = Buffer(f"{t.name}_local", tile.shape, DType.FLOAT32, level=tile.level)
                allocs.append(buffer)
        else:
            buffer = Buffer(f"{t.name}_local", (mc,), DType.FLOAT32,
                            level=options.register_level or tile.level)
            allocs.append(buffer)
        batch_values = unflatten(b_index, [a for a in t.axes[:len(ref.shape) - 2]
                                           if a.extent > 1])
        values: dict[IterVar, Expr] = {**batch_values, t.axes[len(ref.shape) - 2]: m0 + m}
        full_reads = {ld.tensor for ld in loads_in(expr_t) if full(ld.tensor)}
        # a row reduction over the tensor the open pass has just computed joins that pass
        joins = reduce_axis is not None and open_pass is not None and \
            full_reads == {open_pass[0]} and open_pass[2] == position - 1
        inner = lv if (reduce_axis is None or joins) else r
        if full(t):
            values[t.axes[-1]] = lv
        if reduce_axis is not None:
            values[reduce_axis] = inner

        def to_local(node: Expr, inner: Var = inner) -> Expr | None:
            if isinstance(node, Load) and node.tensor in local:
                source = local[node.tensor]
                if full(node.tensor):
                    return BufferLoad(source, (m, inner) if rows else (inner, m))
                return BufferLoad(source, (m,))
            return None

        expr = expr_t.body if isinstance(expr_t, Reduce) else expr_t
        expr = kernel_expr(transform(expr, to_local), values, placeholders,
                           extra_zero=unit_axes(t))
        local[t] = buffer
        if isinstance(body, Reduce):
            identity = Reduce(body.op, body.body, body.axes).identity()
            init = For(m, const(mc), vector_kind(options),
                       Store(buffer, (m,), const(identity, DType.FLOAT32)), lanes=lanes)
            update = Store(buffer, (m,), expr, accumulate=body.op)
            if joins:
                assert open_pass is not None
                open_pass[1].append(update)
                stmts.insert(len(stmts) - 1, init)   # before the open pass
                stmts[-1] = _pass(open_pass[1], lv, m, l_total, mc, options, lanes, rows)
                open_pass = (open_pass[0], open_pass[1], position)
                continue
            vector = vector_kind(options)
            loops = [(m, mc, LoopKind.SERIAL, 0), (r, l_total, vector, lanes)] if rows \
                else [(r, l_total, LoopKind.SERIAL, 0), (m, mc, vector, lanes)]
            stmts.extend((init, nest(loops, update)))
            open_pass = None
        else:
            pass_body: list[Stmt] = [Store(buffer, (m, lv) if rows else (lv, m), simplify(expr))]
            stmts.append(_pass(pass_body, lv, m, l_total, mc, options, lanes, rows))
            open_pass = (t, pass_body, position)
    deferred = None if scale is None else (scale[0], local[scale[1]])
    return stmts, allocs, local[z_source], deferred


def _pass(body: list[Stmt], lv: Var, m: Var, l_total: int, mc: int, options: LoweringOptions,
          lanes: int, rows: bool) -> Stmt:
    """One pass over the tile, vectorised along its contiguous axis."""
    inner: Stmt = body[0] if len(body) == 1 else Seq(tuple(body))
    if rows:
        return nest([(m, mc, LoopKind.SERIAL, 0), (lv, l_total, vector_kind(options), lanes)],
                    inner)
    return nest([(lv, l_total, LoopKind.SERIAL, 0), (m, mc, vector_kind(options), lanes)], inner)


__all__ = ["ChainBlocking", "ContractionChain", "as_chain", "between_inputs", "between_passes",
           "fused_chain_kernel", "lower_chain", "scale_rows"]
