"""Packing for the dot-product micro-kernels of :mod:`tilecraft.microkernel.grouped`.

- :class:`OperandReader` reads an operand inside a kernel, through a flat view of its ``k``
  axes when they are its trailing dimensions (then consecutive ``k`` are consecutive elements,
  which the code generators turn into wide loads);
- :func:`shifted` / :func:`packing_shift`: int8 <-> uint8 by a shift of 128 (the
  compensation is described in :mod:`~tilecraft.microkernel.grouped`);
- :func:`k_slices`: equal ``KC`` slices of ``k``, each a multiple of the group;
- :func:`im2col_kernel`: B as the matrix ``<C>_bcols[batch, K, N]`` (convolutions);
- :func:`pack_b_kernel`: B packed ``<C>_bpacked[batch, NB, KG, NR, G]`` plus the compensation
  ``<C>_bcomp[batch, NB, NR]`` when A is shifted.

>>> k_slices(k_total=9, kc=8, group=4)    # two slices of 8: k padded to 16
(2, 8)
>>> k_slices(k_total=9, kc=12, group=4)   # one slice of 12
(1, 12)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import (
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
from tilecraft.microkernel.contraction import Contraction
from tilecraft.microkernel.lowering import (
    _axes_in,
    _ceil_div,
    _kernel_expr,
    _nest,
    _parallel,
    _product_of,
    _unflatten,
    _unique_params,
    _unit_axes,
    _vector,
)
from tilecraft.te.expr import Expr, IterVar, Load, ReduceOp, Var, const, select
from tilecraft.te.functions import all_of, minimum
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, vars_in, walk

if TYPE_CHECKING:
    from tilecraft.microkernel.grouped import GroupedContraction

#: the dtypes a shift of 128 converts into each other
INT8_TYPES = (DType.INT8, DType.UINT8)
#: lanes of the small vector loops over a tile's columns (one zmm of 32-bit values)
COLUMN_LANES = 16


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
    shape = (*(extent for _, extent in prefix), _product_of(k_axes))
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
        k_total = _product_of(self.k_axes)
        if self._prefix is None or k_total % group or \
                list(self._prefix) != [axis for axis in row_axes if axis.extent > 1]:
            return None
        return Buffer(self.buffer.name, (_product_of(row_axes), k_total // group, group),
                      self.buffer.dtype, level=self.buffer.level)

    def value(self, values: dict[IterVar, Expr], k_flat: Expr) -> Expr:
        """The operand at the other axes' ``values`` and the fused ``k`` index ``k_flat``."""
        if self._prefix is not None:
            mapping = dict(values)
            for axis in _unit_axes(self.tensor):
                mapping.setdefault(axis, const(0))
            prefix = tuple(simplify(substitute(i, mapping)) for i in self._prefix)
            return BufferLoad(self.buffer, (*prefix, simplify(k_flat)))
        values = {**values, **_unflatten(k_flat, self.k_axes)}
        return _kernel_expr(self.load, values, {self.load.tensor: self.buffer},
                            extra_zero=_unit_axes(self.tensor))


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
        raise LoweringError(f"grouped micro-kernel lowering: an operand of dtype "
                            f"{source.value} cannot be packed as {packed.value}; only int8 and "
                            "uint8 convert into each other (by a shift of 128)")
    return 128 if packed is DType.UINT8 else -128


def k_slices(k_total: int, kc: int, group: int) -> tuple[int, int]:
    """(slices, KC): equal slices of ``k``, each a multiple of ``group``, covering ``k_total``."""
    kc = _ceil_div(min(kc, k_total), group) * group
    blocks = _ceil_div(k_total, kc)
    kc = _ceil_div(_ceil_div(k_total, blocks), group) * group
    return _ceil_div(k_total, kc), kc


# B as columns (convolutions), then packed ----------------------------------------------
def b_batch(c: Contraction) -> int:
    """The batch extent of packed B: 1 when B does not depend on the batch axes."""
    return _product_of(c.batch_axes) if any(a in _axes_in(c.b) for a in c.batch_axes) else 1


def im2col_kernel(gc: GroupedContraction, options: LoweringOptions) -> Kernel:
    """A kernel writing B as the matrix ``<C>_bcols[batch, K, N]``, one row of ``k`` at a time
    with the ``n`` axes as separate loops: a convolution's input is then read along its rows,
    where packing straight from the fused ``n`` index needs ``//`` and ``%`` per element
    (gathers). The loops stay serial: LLVM's loop vectoriser turns the innermost one into wide
    loads, strided ones (stride-2 convolutions) included, which measured 3x faster than
    explicit vector lanes (gathers) on ResNet-18's stride-2 layers."""
    c = gc.contraction
    tensor, dtype = c.tensor, gc.b_dtype
    _, _, n_total, k_total = c.extents()
    batch = b_batch(c)
    level = options.param_level
    source = Buffer(c.b.tensor.name, c.b.tensor.shape, dtype, level=level)
    cols = Buffer(f"{tensor.name}_bcols", (batch, k_total, n_total), dtype, level=level)
    t = Var("t")
    pb = t // k_total if batch > 1 else const(0)
    kk = t % k_total if batch > 1 else t
    n_vars = [Var(f"n{d}") for d in range(len(c.n_axes))]
    values: dict[IterVar, Expr] = dict(zip(c.n_axes, n_vars))
    values.update(_unflatten(kk, c.k_axes))
    if batch > 1:
        values.update(_unflatten(pb, c.batch_axes))
    value = _kernel_expr(c.b, values, {c.b.tensor: source}, extra_zero=_unit_axes(tensor))
    n_flat: Expr = const(0)
    stride = 1
    for var, axis in zip(reversed(n_vars), reversed(c.n_axes)):
        n_flat = var * stride + n_flat if stride > 1 else var + n_flat
        stride *= axis.extent
    loops = [(var, axis.extent, LoopKind.SERIAL, 0) for var, axis in zip(n_vars, c.n_axes)]
    body = _nest(loops, Store(cols, (pb, kk, simplify(n_flat)), value))
    outer = batch * k_total
    kernel = Kernel(f"{cols.name}_im2col", (source, cols), (cols.name,),
                    For(t, const(outer), _parallel(options, outer), body),
                    attrs={"compute": tensor.name, "role": f"B of {tensor.name} as columns",
                           "schedule": f"im2col of {c.b.tensor.name}: {k_total} rows of "
                                       f"{n_total}"})
    verify_kernel(kernel, options.spec)
    return kernel


def pack_b_kernel(gc: GroupedContraction, nr: int, kc: int, shift: int,
                  options: LoweringOptions, columns_of: Buffer | None = None) -> Kernel:
    """B packed into ``<C>_bpacked[batch, NB, KG, NR, G]``, read from the operand itself or
    from its columns ``columns_of`` (:func:`im2col_kernel`); with a ``shift`` of A, also the
    compensation ``<C>_bcomp[batch, NB, NR] = -shift * sum_k B[k, n]``.

    The loops are shaped for LLVM's loop vectoriser: ``n`` serial with the group unrolled
    inside reads ``G`` rows of B along ``n`` and writes them interleaved (wide loads and byte
    unpacks, ~6x faster than explicit lanes with a stride-``G`` scatter); when consecutive
    ``k`` are consecutive in memory, ``G``-wide vector copies."""
    c = gc.contraction
    tensor, group, dtype = c.tensor, gc.group, gc.b_dtype
    _, _, n_total, k_total = c.extents()
    k_blocks, kc = k_slices(k_total, kc, group)
    groups_total = k_blocks * kc // group
    full_groups = k_total // group
    panels = _ceil_div(n_total, nr)
    batch = b_batch(c)
    reader = OperandReader(c.b, tensor, c.k_axes, options)
    cols = None if columns_of is None else \
        Buffer(columns_of.name, columns_of.shape, dtype, level=options.param_level)
    source = reader.buffer if cols is None else cols
    name = f"{tensor.name}_bpacked"
    packed = Buffer(name, (batch, panels, groups_total, nr, group), dtype,
                    level=options.param_level)
    comp = Buffer(f"{tensor.name}_bcomp", (batch, panels, nr), DType.INT32,
                  level=options.param_level) if shift else None
    t, kg, g, jn = Var("t"), Var("kg"), Var("g"), Var("jn")
    pb = t // panels if batch > 1 else const(0)
    jb = t % panels
    w_flat = jb * nr + jn
    batch_values = _unflatten(pb, c.batch_axes) if batch > 1 else {}
    k_inner = cols is None and reader.contiguous_in_k   # consecutive k, consecutive in memory
    columns = _vector(options)

    def body(clamp_w: bool, first: int) -> Stmt:
        group_index = kg + first if first else kg
        k_flat = group_index * group + g
        clamp_k = first >= full_groups   # the last groups: partial, or padding only
        w_index = minimum(w_flat, n_total - 1) if clamp_w else w_flat
        k_index = minimum(k_flat, k_total - 1) if clamp_k else k_flat
        if cols is None:
            value = reader.value({**batch_values, **_unflatten(w_index, c.n_axes)}, k_index)
        else:
            value = BufferLoad(cols, (pb, k_index, w_index))
        valid = [w_flat < n_total] if clamp_w else []
        valid += [k_flat < k_total] if clamp_k else []
        if valid:
            value = select(all_of(*valid), value, const(0, dtype))
        stores: list[Stmt] = [Store(packed, (pb, jb, group_index, jn, g), value)]
        if comp is not None:
            stores.append(Store(comp, (pb, jb, jn), value.astype(DType.INT32),
                                accumulate=ReduceOp.SUM))
        inner = stores[0] if len(stores) == 1 else Seq(tuple(stores))
        if k_inner:   # read `group` consecutive k, write them consecutively
            return _nest([(jn, nr, LoopKind.SERIAL, 0), (g, group, columns, group)], inner)
        return _nest([(jn, nr, LoopKind.SERIAL, 0), (g, group, LoopKind.UNROLLED, 0)], inner)

    def groups(first: int, last: int, clamp_w: bool) -> Stmt | None:
        if last <= first:
            return None
        return For(kg, const(last - first), LoopKind.SERIAL, body(clamp_w, first))

    def panel(clamp_w: bool) -> Stmt:
        parts = [groups(0, full_groups, clamp_w), groups(full_groups, groups_total, clamp_w)]
        return Seq(tuple(p for p in parts if p is not None))

    ragged = n_total % nr != 0
    work: Stmt = panel(False) if not ragged else \
        IfThenElse(jb * nr + nr <= n_total, panel(False), panel(True))
    if comp is not None:
        column = _nest([(jn, nr, columns, COLUMN_LANES)], Store(comp, (pb, jb, jn), const(0)))
        scale = _nest([(jn, nr, columns, COLUMN_LANES)],
                      Store(comp, (pb, jb, jn), BufferLoad(comp, (pb, jb, jn)) * (-shift)))
        work = Seq((column, work, scale))
    outer = batch * panels
    outputs = (packed,) if comp is None else (packed, comp)
    kernel = Kernel(f"{name}_pack", tuple(_unique_params([source, *outputs])),
                    tuple(b.name for b in outputs),
                    For(t, const(outer), _parallel(options, outer), work),
                    attrs={"compute": tensor.name, "role": f"pack B of {tensor.name}",
                           "schedule": (f"pack B of {tensor.name}: {panels} panels of "
                                        f"{groups_total}x{nr}x{group}"
                                        + (f", compensation {-shift}*colsum" if shift else ""))})
    verify_kernel(kernel, options.spec, check_bounds=False)  # clamped and guarded: see body
    return kernel


__all__ = ["COLUMN_LANES", "INT8_TYPES", "OperandReader", "b_batch", "im2col_kernel",
           "k_slices", "pack_b_kernel", "packing_shift", "shifted"]
