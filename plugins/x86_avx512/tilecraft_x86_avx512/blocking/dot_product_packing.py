"""Packing for the dot-product micro-kernels of :mod:`.dot_product`.

- :class:`OperandReader` reads an operand inside a kernel, through a flat view of its ``k``
  axes when they are its trailing dimensions (then consecutive ``k`` are consecutive elements,
  which the code generators turn into wide loads);
- :func:`shifted` / :func:`packing_shift`: int8 <-> uint8 by a shift of 128 (the
  compensation is described in :mod:`~.dot_product`);
- :func:`k_slices`: equal ``KC`` slices of ``k``, each a multiple of the group;
- :func:`im2col_kernel`: B as the matrix ``<C>_bcols[batch, K, N]`` (convolutions);
- :func:`pack_b_kernel`: B packed ``<C>_bpacked[batch, NB, KG, NR, G]`` (shifted itself when
  it is B that changes signedness) plus the compensation ``<C>_bcomp[batch, NB, NR]`` when A
  is shifted;
- :func:`a_row_sums_kernel`: ``<C>_arowcomp[batch * M]``, the compensation of a shifted B,
  where the main kernel cannot sum A's rows itself.

>>> k_slices(k_total=9, kc=8, group=4)    # two slices of 8: k padded to 16
(2, 8)
>>> k_slices(k_total=9, kc=12, group=4)   # one slice of 12
(1, 12)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import INT8_TYPES, Contraction, DotProductContraction
from tilecraft.te.expr import Expr, IterVar, Load, ReduceOp, Var, const, select
from tilecraft.te.functions import eq, minimum
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, vars_in, walk
from tilecraft_x86_avx512.blocking.building import (
    axes_in,
    ceil_div,
    kernel_expr,
    nest,
    parallel_kind,
    product_of,
    unflatten,
    unique_params,
    unit_axes,
    vector_kind,
)

#: lanes of the small vector loops over a tile's columns (one zmm of 32-bit values)
COLUMN_LANES = 16
#: groups of k packed per iteration of the group-major packing loop (2: measured 1.4x faster
#: than panel by panel on a 1024^2 int8 B, 1.15x faster than 1 or 4, 1.3x than 16)
GROUP_BLOCK = 2


# operand access ------------------------------------------------------------------------------
def _flat_k_view(load: Load, k_axes: Sequence[IterVar], param_level: str
                 ) -> tuple[Buffer, tuple[Expr, ...]] | None:
    """When the operand holds the fused ``k`` axes as its trailing dimensions (extent-1
    dimensions aside) — ``A[i, k]``, a convolution weight ``W[o, c, r, s]`` — the buffer viewed
    as ``[prefix..., K]`` and the prefix indices, so that consecutive ``k`` are consecutive
    elements to the code generator (an unflattened ``k`` needs ``//`` and ``%``)."""
    kept = [(index, extent) for index, extent in zip(load.indices, load.tensor.shape)
            if extent > 1]
    n = len(k_axes)
    if n == 0 or len(kept) < n or any(index != axis
                                      for (index, _), axis in zip(kept[-n:], k_axes)):
        return None
    prefix = kept[:-n]
    if any(set(vars_in(index)) & set(k_axes) or _has_load(index) for index, _ in prefix):
        return None
    shape = (*(extent for _, extent in prefix), product_of(k_axes))
    view = Buffer(load.tensor.name, shape, load.tensor.dtype, level=param_level)
    return view, tuple(index for index, _ in prefix)


def _has_load(expr: Expr) -> bool:
    return any(isinstance(node, Load) for node in walk(expr))


@dataclass
class OperandReader:
    """Reads one operand inside a kernel: through a flat-``k`` view when possible."""

    load: Load
    tensor: Tensor
    k_axes: Sequence[IterVar]
    options: LoweringOptions

    def __post_init__(self) -> None:
        flat = _flat_k_view(self.load, self.k_axes, self.options.param_level)
        source = self.load.tensor
        self.buffer = flat[0] if flat else Buffer(source.name, source.shape, source.dtype,
                                                  level=self.options.param_level)
        self._prefix = flat[1] if flat else None

    @property
    def contiguous_in_k(self) -> bool:
        return self._prefix is not None

    def rows_view(self, row_axes: Sequence[IterVar], group: int) -> Buffer | None:
        """The operand as ``[rows, K / group, group]`` when it already is that, row-major: its
        non-``k`` indices are exactly ``row_axes`` in order (``A[i, k]``, a weight ``W[o, c, r,
        s]``) and ``group`` divides ``K``; a micro-kernel can then read its rows in place."""
        k_total = product_of(self.k_axes)
        if self._prefix is None or k_total % group or \
                list(self._prefix) != [axis for axis in row_axes if axis.extent > 1]:
            return None
        return Buffer(self.buffer.name, (product_of(row_axes), k_total // group, group),
                      self.buffer.dtype, level=self.buffer.level)

    def value(self, values: dict[IterVar, Expr], k_flat: Expr) -> Expr:
        """The operand at the other axes' ``values`` and the fused ``k`` index ``k_flat``."""
        if self._prefix is not None:
            mapping = dict(values)
            for axis in unit_axes(self.tensor):
                mapping.setdefault(axis, const(0))
            prefix = tuple(simplify(substitute(i, mapping)) for i in self._prefix)
            return BufferLoad(self.buffer, (*prefix, simplify(k_flat)))
        values = {**values, **unflatten(k_flat, self.k_axes)}
        return kernel_expr(self.load, values, {self.load.tensor: self.buffer},
                           extra_zero=unit_axes(self.tensor))


def shifted(value: Expr, source: DType, packed: DType) -> Expr:
    """``value`` moved from int8 to uint8 (+128) or back (-128); unchanged otherwise."""
    if source is packed:
        return value
    return (value.astype(DType.INT32) + packing_shift(source, packed)).astype(packed)


def packing_shift(source: DType, packed: DType) -> int:
    """What packing adds to an operand of dtype ``source`` to hold it as ``packed``."""
    if source is packed:
        return 0
    if {source, packed} != set(INT8_TYPES):
        raise LoweringError(f"dot-product micro-kernel lowering: an operand of dtype "
                            f"{source.value} cannot be packed as {packed.value}; only int8 and "
                            "uint8 convert into each other (by a shift of 128)")
    return 128 if packed is DType.UINT8 else -128


def k_slices(k_total: int, kc: int, group: int) -> tuple[int, int]:
    """(slices, KC): equal slices of ``k``, each a multiple of ``group``, covering ``k_total``."""
    kc = ceil_div(min(kc, k_total), group) * group
    blocks = ceil_div(k_total, kc)
    kc = ceil_div(ceil_div(k_total, blocks), group) * group
    return ceil_div(k_total, kc), kc


# B as columns (convolutions), then packed ----------------------------------------------
def b_batch(c: Contraction) -> int:
    """The batch extent of packed B: 1 when B does not depend on the batch axes."""
    return product_of(c.batch_axes) if any(a in axes_in(c.b) for a in c.batch_axes) else 1


def _columns_row(c: Contraction, source: Buffer, k_index: Expr, batch_index: Expr | None,
                 store: Callable[[Expr, Expr], Stmt]) -> Stmt:
    """Row ``k_index`` of B's im2col matrix, ``store(n_flat, value)`` for each ``n``, with the
    ``n`` axes as separate loops (see :func:`im2col_kernel`)."""
    n_vars = [Var(f"n{d}") for d in range(len(c.n_axes))]
    values: dict[IterVar, Expr] = dict(zip(c.n_axes, n_vars))
    values.update(unflatten(k_index, c.k_axes))
    if batch_index is not None:
        values.update(unflatten(batch_index, c.batch_axes))
    value = kernel_expr(c.b, values, {c.b.tensor: source}, extra_zero=unit_axes(c.tensor))
    n_flat: Expr = const(0)
    stride = 1
    for var, axis in zip(reversed(n_vars), reversed(c.n_axes)):
        n_flat = var * stride + n_flat if stride > 1 else var + n_flat
        stride *= axis.extent
    loops = [(var, axis.extent, LoopKind.SERIAL, 0) for var, axis in zip(n_vars, c.n_axes)]
    return nest(loops, store(simplify(n_flat), value))


def im2col_kernel(dot: DotProductContraction, options: LoweringOptions) -> Kernel:
    """A kernel writing B as the matrix ``<C>_bcols[batch, K, N]``, one row of ``k`` at a time
    with the ``n`` axes as separate loops: a convolution's input is then read along its rows,
    where packing straight from the fused ``n`` index needs ``//`` and ``%`` per element
    (gathers). The loops stay serial: LLVM's loop vectoriser turns the innermost one into wide
    loads, strided ones (stride-2 convolutions) included, which measured 3x faster than
    explicit vector lanes (gathers) on ResNet-18's stride-2 layers."""
    c = dot.contraction
    tensor, dtype = c.tensor, dot.b_dtype
    _, _, n_total, k_total = c.extents()
    batch = b_batch(c)
    level = options.param_level
    source = Buffer(c.b.tensor.name, c.b.tensor.shape, dtype, level=level)
    cols = Buffer(f"{tensor.name}_bcols", (batch, k_total, n_total), dtype, level=level)
    t = Var("t")
    pb = t // k_total if batch > 1 else const(0)
    kk = t % k_total if batch > 1 else t
    body = _columns_row(c, source, kk, pb if batch > 1 else None,
                        lambda n_flat, value: Store(cols, (pb, kk, n_flat), value))
    outer = batch * k_total
    kernel = Kernel(f"{cols.name}_im2col", (source, cols), (cols.name,),
                    For(t, const(outer), parallel_kind(options, outer), body),
                    attrs={"compute": tensor.name, "role": f"B of {tensor.name} as columns",
                           "schedule": f"im2col of {c.b.tensor.name}: {k_total} rows of "
                                       f"{n_total}"})
    verify_kernel(kernel, options.spec)
    return kernel


def pack_b_kernel(dot: DotProductContraction, nr: int, kc: int, shift: int,
                  options: LoweringOptions, columns_of: Buffer | None = None,
                  packed_b: DType | None = None, im2col: bool = False) -> Kernel:
    """B packed into ``<C>_bpacked[batch, NB, KG, NR, G]``, read from the operand itself or
    from its columns ``columns_of`` (:func:`im2col_kernel`); with a ``shift`` of A, also the
    compensation ``<C>_bcomp[batch, NB, NR] = -shift * sum_k B[k, n]``. ``packed_b`` is the
    dtype B is packed in (default: its own): int8 and uint8 convert into each other by a
    shift of 128 (the padding stays 0), compensated by the caller with A's row sums.

    The loops are shaped for LLVM's loop vectoriser: ``n`` serial with the group unrolled
    inside reads ``G`` rows of B along ``n`` and writes them interleaved (wide loads and byte
    unpacks, ~6x faster than explicit lanes with a stride-``G`` scatter); when consecutive
    ``k`` are consecutive in memory, ``G``-wide vector copies. The parallel loop runs over
    blocks of :data:`GROUP_BLOCK` groups with every panel inside (group-major: B's rows read
    along their length) unless column sums or a contiguous ``k`` want a panel per iteration.
    With ``im2col`` (group-major only) each block first writes its rows of B's im2col matrix
    into a small buffer ``<C>_bcols[GROUP_BLOCK * G, N]`` (as :func:`im2col_kernel` writes
    them, hot in cache) and packs from there: one pass over memory instead of a matrix
    written by one kernel and read back by the next (~1.5x faster on ResNet-18's layers).

    >>> from tilecraft import ops, te
    >>> from tilecraft_x86_avx512.blocking.dot_product import as_dot_product_contraction
    >>> A = te.placeholder((8, 10), "uint8", name="A")
    >>> B = te.placeholder((10, 40), "int8", name="B")
    >>> dot = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32", name="C"))
    >>> print(pack_b_kernel(dot, 16, 12, 0, LoweringOptions()).attrs["schedule"])
    pack B of C: 3 panels of 3x16x4, group-major
    """
    c = dot.contraction
    tensor, group, dtype = c.tensor, dot.group, dot.b_dtype
    packed_dtype = packed_b or dtype
    packing_shift(dtype, packed_dtype)   # int8 <-> uint8 only
    _, _, n_total, k_total = c.extents()
    k_blocks, kc = k_slices(k_total, kc, group)
    groups_total = k_blocks * kc // group
    full_groups = k_total // group
    panels = ceil_div(n_total, nr)
    batch = b_batch(c)
    reader = OperandReader(c.b, tensor, c.k_axes, options)
    cols = None if columns_of is None else \
        Buffer(columns_of.name, columns_of.shape, dtype, level=options.param_level)
    source = reader.buffer if cols is None else cols
    name = f"{tensor.name}_bpacked"
    packed = Buffer(name, (batch, panels, groups_total, nr, group), packed_dtype,
                    level=options.param_level)
    comp = Buffer(f"{tensor.name}_bcomp", (batch, panels, nr), DType.INT32,
                  level=options.param_level) if shift else None
    k_inner = cols is None and reader.contiguous_in_k   # consecutive k, consecutive in memory
    # group-major: blocks of GROUP_BLOCK groups in parallel, every panel inside (rows of B
    # read along their length, and parallel work however few the panels); panel-major where
    # a panel's column sums need all of its k in one iteration, or k is B's contiguous axis
    group_major = comp is None and not k_inner
    if im2col and not group_major:
        raise LoweringError(f"compute {tensor.name}: packing B through its im2col rows needs "
                            "the group-major packing (no column sums); write the im2col "
                            "matrix with im2col_kernel and pass it as columns_of instead")
    rows = Buffer(f"{tensor.name}_bcols", (GROUP_BLOCK * group, n_total), dtype,
                  level=options.param_level) if im2col else None
    if rows is not None:
        source = Buffer(c.b.tensor.name, c.b.tensor.shape, dtype, level=options.param_level)
    t, kg, g, jn, jv = Var("t"), Var("kg"), Var("g"), Var("jn"), Var("jb")
    outer_per_batch = ceil_div(groups_total, GROUP_BLOCK) if group_major else panels
    pb = t // outer_per_batch if batch > 1 else const(0)
    local = t % outer_per_batch if batch > 1 else t
    batch_values = unflatten(pb, c.batch_axes) if batch > 1 else {}
    columns = vector_kind(options)

    ragged = n_total % nr != 0
    last_panel = const(panels - 1)
    in_last = n_total - (panels - 1) * nr   # the columns of the last panel inside N

    def body(jb: Expr, group_index: Expr, ragged_panel: bool, clamp_k: bool) -> Stmt:
        """Groups ``group_index`` of panel ``jb``: ``n`` and the group as loops. In a ragged
        last panel the columns inside N are copied and the rest zeroed by a second loop (a
        clamped column index would make the copy's loads gathers)."""
        w_flat = jb * nr + jn
        k_flat = group_index * group + g
        k_index = minimum(k_flat, k_total - 1) if clamp_k else k_flat
        if rows is not None:   # the block's im2col rows (group_index = first + kg)
            value = BufferLoad(rows, (kg * group + g, w_flat))
        elif cols is None:
            value = reader.value({**batch_values, **unflatten(w_flat, c.n_axes)}, k_index)
        else:
            value = BufferLoad(cols, (pb, k_index, w_flat))
        if clamp_k:
            value = select(k_flat < k_total, value, const(0, dtype))
        # the compensation of A's shift sums B as it is; padding stays 0 when B is shifted
        packed_value = shifted(value, dtype, packed_dtype)
        if clamp_k and packed_dtype is not dtype:
            packed_value = select(k_flat < k_total, packed_value, const(0, packed_dtype))
        stores: list[Stmt] = [Store(packed, (pb, jb, group_index, jn, g), packed_value)]
        if comp is not None:
            stores.append(Store(comp, (pb, jb, jn), value.astype(DType.INT32),
                                accumulate=ReduceOp.SUM))
        inner = stores[0] if len(stores) == 1 else Seq(tuple(stores))
        group_kind = (columns, group) if k_inner else (LoopKind.UNROLLED, 0)
        copy = nest([(jn, in_last if ragged_panel else nr, LoopKind.SERIAL, 0),
                     (g, group, *group_kind)], inner)
        if not ragged_panel:
            return copy
        zero = nest([(jn, nr - in_last, LoopKind.SERIAL, 0), (g, group, *group_kind)],
                    Store(packed, (pb, jb, group_index, jn + in_last, g),
                           const(0, packed_dtype)))
        return Seq((copy, zero))

    work: Stmt
    if group_major:
        first = local * GROUP_BLOCK

        def block(clamp_k: bool) -> Stmt:
            """Every panel's groups first .. first + GROUP_BLOCK - 1 (those that exist)."""
            group_index = first + kg

            def groups_of(jb: Expr, ragged_panel: bool) -> Stmt:
                inner = body(jb, group_index, ragged_panel, clamp_k)
                if clamp_k and groups_total % GROUP_BLOCK:
                    inner = IfThenElse(group_index < groups_total, inner)
                return For(kg, const(GROUP_BLOCK), LoopKind.SERIAL, inner)
            whole = panels - 1 if ragged else panels
            parts = [For(jv, const(whole), LoopKind.SERIAL, groups_of(jv, False))
                     if whole else None, groups_of(last_panel, True) if ragged else None]
            return Seq(tuple(part for part in parts if part is not None))

        # k clamped (and blocks guarded) only in the blocks past K's whole groups
        exact = groups_total == full_groups and groups_total % GROUP_BLOCK == 0
        work = block(False) if exact else \
            IfThenElse(first + GROUP_BLOCK <= full_groups, block(False), block(True))
        if rows is not None:   # the block's rows of the im2col matrix first (rows past K: 0)
            rr = Var("rr")
            k_row = first * group + rr
            fill = _columns_row(c, source, k_row, pb if batch > 1 else None,
                                lambda n_flat, value: Store(rows, (rr, n_flat), value))
            work = Seq((For(rr, const(GROUP_BLOCK * group), LoopKind.SERIAL,
                            IfThenElse(k_row < k_total, fill)), work))
    else:
        jb = local

        def groups(first_group: int, last: int, ragged_panel: bool) -> Stmt | None:
            if last <= first_group:
                return None
            index = kg + first_group if first_group else kg
            return For(kg, const(last - first_group), LoopKind.SERIAL,
                       body(last_panel if ragged_panel else jb, index, ragged_panel,
                            first_group >= full_groups))

        def panel(ragged_panel: bool) -> Stmt:
            parts = [groups(0, full_groups, ragged_panel),
                     groups(full_groups, groups_total, ragged_panel)]
            return Seq(tuple(p for p in parts if p is not None))

        work = IfThenElse(eq(jb, panels - 1), panel(True), panel(False)) if ragged \
            else panel(False)
        if comp is not None:
            column = nest([(jn, nr, columns, COLUMN_LANES)],
                          Store(comp, (pb, jb, jn), const(0)))
            scale = nest([(jn, nr, columns, COLUMN_LANES)],
                         Store(comp, (pb, jb, jn), BufferLoad(comp, (pb, jb, jn)) * (-shift)))
            work = Seq((column, work, scale))
    outer = batch * outer_per_batch
    outputs = (packed,) if comp is None else (packed, comp)
    loop: Stmt = For(t, const(outer), parallel_kind(options, outer), work)
    if rows is not None:   # one per thread (and zeroed once: rows past K stay 0)
        loop = Allocate(rows, loop)
    kernel = Kernel(f"{name}_pack", tuple(unique_params([source, *outputs])),
                    tuple(b.name for b in outputs), loop,
                    attrs={"compute": tensor.name, "role": f"pack B of {tensor.name}",
                           "schedule": (f"pack B of {tensor.name}: {panels} panels of "
                                        f"{groups_total}x{nr}x{group}, "
                                        + ("group-major" if group_major else "panel-major")
                                        + (", through im2col rows" if im2col else "")
                                        + (f", compensation {-shift}*colsum" if shift else ""))})
    verify_kernel(kernel, options.spec, check_bounds=False)  # clamped and guarded: see body
    return kernel


def pack_b_panel(dot: DotProductContraction, nr: int, kc: int, options: LoweringOptions,
                 packed_b: DType, target: Buffer, slot: Expr, panel: Expr,
                 batch_index: Expr | None) -> tuple[Stmt, Buffer]:
    """Inside a kernel (the statement, and the buffer it reads B from: a parameter of the
    kernel): every group of B's panel ``panel`` packed into ``target[slot, KG, NR,
    G]`` (``G`` consecutive ``k`` per column, ``k`` zero-padded to whole ``KC`` slices, columns
    past N zeroed), B read from the operand itself (one ``n`` axis, no column sums) and shifted
    to ``packed_b``. The loops are those of :func:`pack_b_kernel`'s panel-major packing: ``n``
    serial with the group unrolled (wide loads and byte interleaves), or ``G``-wide copies when
    ``k`` is B's contiguous axis. Used where each thread packs the panels it computes with
    (:func:`~.dot_product.lower_dot_product_contraction` with
    column blocks)."""
    c = dot.contraction
    tensor, group, dtype = c.tensor, dot.group, dot.b_dtype
    packing_shift(dtype, packed_b)   # int8 <-> uint8 only
    if len(c.n_axes) != 1:
        raise LoweringError(f"compute {tensor.name}: B packed per panel inside the main kernel "
                            f"needs one n axis, not {len(c.n_axes)}; pack B by pack_b_kernel")
    _, _, n_total, k_total = c.extents()
    k_blocks, kc = k_slices(k_total, kc, group)
    groups_total = k_blocks * kc // group
    full_groups = k_total // group
    panels = ceil_div(n_total, nr)
    reader = OperandReader(c.b, tensor, c.k_axes, options)
    batch_values = unflatten(batch_index, c.batch_axes) if batch_index is not None else {}
    k_inner = reader.contiguous_in_k
    group_kind = (vector_kind(options), group) if k_inner else (LoopKind.UNROLLED, 0)
    kg, g, jn = Var("kg"), Var("g"), Var("jn")
    in_last = n_total - (panels - 1) * nr

    def copy(first: int, last: int, ragged: bool) -> Stmt | None:
        if last <= first:
            return None
        group_index = kg + first if first else kg
        k_flat = group_index * group + g
        clamp = first >= full_groups
        k_index = minimum(k_flat, k_total - 1) if clamp else k_flat
        value = shifted(reader.value({**batch_values, **unflatten(panel * nr + jn, c.n_axes)},
                                     k_index), dtype, packed_b)
        if clamp:
            value = select(k_flat < k_total, value, const(0, packed_b))
        store = Store(target, (slot, group_index, jn, g), value)
        inner = nest([(jn, in_last if ragged else nr, LoopKind.SERIAL, 0),
                      (g, group, *group_kind)], store)
        if ragged:
            zero = nest([(jn, nr - in_last, LoopKind.SERIAL, 0), (g, group, *group_kind)],
                        Store(target, (slot, group_index, jn + in_last, g),
                               const(0, packed_b)))
            inner = Seq((inner, zero))
        return For(kg, const(last - first), LoopKind.SERIAL, inner)

    def whole_panel(ragged: bool) -> Stmt:
        parts = [copy(0, full_groups, ragged), copy(full_groups, groups_total, ragged)]
        return Seq(tuple(part for part in parts if part is not None))

    if n_total % nr == 0:
        return whole_panel(False), reader.buffer
    return (IfThenElse(eq(panel, panels - 1), whole_panel(True), whole_panel(False)),
            reader.buffer)


def a_row_sums_kernel(dot: DotProductContraction, scale: int, options: LoweringOptions) -> Kernel:
    """``<C>_arowcomp[batch * M] = scale * sum_k A[m, k]``: the compensation of a shifted B
    (``scale = -shift``), one row per iteration of a parallel loop, ``k`` a vector reduction
    (contiguous loads when ``k`` is A's trailing axes)."""
    c = dot.contraction
    tensor = c.tensor
    batch, m_total, _, k_total = c.extents()
    reader = OperandReader(c.a, tensor, c.k_axes, options)
    rows = Buffer(f"{tensor.name}_arowcomp", (batch * m_total,), DType.INT32,
                  level=options.param_level)
    t, kk = Var("t"), Var("kk")
    values = {**(unflatten(t // m_total, c.batch_axes) if batch > 1 else {}),
              **unflatten(t % m_total if batch > 1 else t, c.m_axes)}
    total = Seq((Store(rows, (t,), const(0, DType.INT32)),
                 For(kk, const(k_total), vector_kind(options),
                     Store(rows, (t,), reader.value(values, kk).astype(DType.INT32),
                           accumulate=ReduceOp.SUM),
                     lanes=max(1, options.lanes(dot.a_dtype))),
                 Store(rows, (t,), BufferLoad(rows, (t,)) * scale)))
    outer = batch * m_total
    kernel = Kernel(f"{rows.name}_sum", tuple(unique_params([reader.buffer, rows])),
                    (rows.name,), For(t, const(outer), parallel_kind(options, outer), total),
                    attrs={"compute": tensor.name,
                           "role": f"row sums of A of {tensor.name} (compensation of B's shift)",
                           "schedule": f"{outer} rows of {k_total}, times {scale}"})
    verify_kernel(kernel, options.spec)
    return kernel


__all__ = ["COLUMN_LANES", "GROUP_BLOCK", "OperandReader", "a_row_sums_kernel",
           "b_batch", "im2col_kernel", "k_slices", "pack_b_kernel", "pack_b_panel",
           "packing_shift", "shifted"]
