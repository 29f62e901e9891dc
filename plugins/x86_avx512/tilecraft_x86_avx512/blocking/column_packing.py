"""Packing for fused column chains (:mod:`.column_chain`): the first product's weights by
reduction slices, and one block of its im2col columns.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> w = te.placeholder((10, 3, 3, 3), name="w")
>>> c = as_contraction(ops.conv2d(te.placeholder((1, 3, 8, 8), name="x"), w, padding=1))
>>> pack_slices("w_packed", c, 4, 14, 2, LoweringOptions(vector_lanes=4)).params[-1].shape
(1, 2, 3, 14, 4)
"""

from __future__ import annotations

from collections.abc import Mapping

from tilecraft.kernel_ir.nodes import (
    Buffer,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.guards import clamp_guarded_loads
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction
from tilecraft.te.expr import Expr, IterVar, Load, Select, Var, const, select
from tilecraft.te.functions import all_of, maximum, minimum
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, vars_in
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    kernel_expr,
    nest,
    parallel_kind,
    product_of,
    unflatten,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.register_tiles import (
    axis_groups_view,
)


def pack_slices(name: str, contraction: Contraction, width: int, kc: int, k_blocks: int,
                 options: LoweringOptions) -> Kernel:
    """A kernel packing the A operand of ``contraction`` into ``name[batch, k_blocks, strips,
    kc, width]``: strips of ``width`` rows of ``m``, ``k`` major, zero-padded — slice-major, so
    that the strips of one ``kc`` slice, which the fused kernel walks in turn, are one
    contiguous run of memory (strip-major, they lie a whole ``K`` apart and defeat the
    hardware prefetcher)."""
    load, tensor = contraction.a, contraction.tensor
    dtype = load.tensor.dtype
    m_total = product_of(contraction.m_axes)
    k_total = product_of(contraction.k_axes)
    strips = ceil_div(m_total, width)
    batched = any(a in {v for i in load.indices for v in vars_in(i)}
                  for a in contraction.batch_axes)
    batch = product_of(contraction.batch_axes) if batched else 1
    packed = Buffer(name, (batch, k_blocks, strips, kc, width), dtype, level=options.param_level)
    t, kq, r = Var("t"), Var("kq"), Var("r")
    pb = t // (k_blocks * strips) if batch > 1 else const(0)
    pc = (t // strips) % k_blocks
    ls = t % strips
    m_flat, k_flat = ls * width + r, pc * kc + kq
    m_index, k_index = minimum(m_flat, m_total - 1), minimum(k_flat, k_total - 1)
    source = Buffer(load.tensor.name, load.tensor.shape, dtype, level=options.param_level)
    view = axis_groups_view(load, [(contraction.batch_axes, pb), (contraction.m_axes, m_index),
                                   (contraction.k_axes, k_index)], options.param_level)
    if view is not None:  # W[k, c, r, s] read as W[k, (c, r, s)]: no div/mod per element
        source, value = view
    else:
        values = {**(unflatten(pb, contraction.batch_axes) if batched else {}),
                  **unflatten(m_index, contraction.m_axes),
                  **unflatten(k_index, contraction.k_axes)}
        unit = [a for a in (*tensor.axes, *tensor.reduce_axes) if a.extent == 1]
        value = kernel_expr(load, values, {load.tensor: source}, extra_zero=unit)
    store = Store(packed, (pb, pc, ls, kq, r),
                  select(all_of(m_flat < m_total, k_flat < k_total), value, const(0.0, dtype)))
    outer = batch * k_blocks * strips
    body = nest([(kq, kc, LoopKind.SERIAL, 0),
                 (r, width, vector_kind(options), max(1, options.lanes(dtype)))], store)
    role = f"pack A of {tensor.name} into {kc}-row slices of {width}-row strips"
    kernel = Kernel(f"{name}_pack", (source, packed), (name,),
                    For(t, const(outer), parallel_kind(options, outer), body),
                    attrs={"compute": tensor.name, "role": role,
                           "schedule": f"{role}: {k_blocks} x {strips} blocks"})
    verify_kernel(kernel, options.spec, check_bounds=False)  # selects guard the clamps
    return kernel


def pack_block_columns(xpack: Buffer, load: Load, padded: Tensor | None, first: Contraction,
                batch_values: Mapping[IterVar, Expr], n0: Expr, n_total: int, k0: Expr,
                k_rows: Expr, width: int, options: LoweringOptions, lanes: int,
                to_buffers) -> Stmt:
    """``xpack[jp, kk, jn] = B1(n = n0 + jp * width + jn, k = k0 + kk)`` for ``kk < k_rows``,
    zero past ``n_total``.

    With several pixel axes (a convolution's rows and columns) each panel walks the image rows
    it touches with a vector loop over the row's segment inside the panel (a dynamic extent),
    so loads stay contiguous (stride 1) instead of recovering row and column from the flat
    index lane by lane. A folded pad becomes a branch around the store, so the loads of its inside
    lanes stay unclamped (masked, contiguous); elsewhere its guarded loads are clamped."""
    jp, kk, jn = Var("jp"), Var("kk"), Var("jn")
    n_axes = first.n_axes
    panels = xpack.shape[0]
    start = n0 + jp * width
    zero = const(0.0)
    if len(n_axes) >= 2 and n_axes[-1].extent < n_total:
        inner = n_axes[-1]
        extent = inner.extent
        rows_total = n_total // extent
        touched = min(rows_total, ceil_div(width - 1, extent) + 1)
        hr, wv = Var("hr"), Var("wv")
        row = start // extent + hr
        # the row's segment inside the panel: columns [lo, hi) (empty past the last row)
        lo = maximum(start - row * extent, 0)
        hi = minimum(minimum(start + width - row * extent, extent), n_total - row * extent)
        column = lo + wv
        flat = row * extent + column
        values = {**batch_values, **unflatten(minimum(row, rows_total - 1), n_axes[:-1]),
                  inner: column, **unflatten(k0 + kk, first.k_axes)}
        where = (jp, kk, flat - start)
        if padded is None:
            store: Stmt = Store(xpack, where, to_buffers(load, values))
        else:
            body = padded.op.body
            assert isinstance(body, Select)
            axes = dict(zip(padded.axes, load.indices))
            cond, true_value, false_value = (
                to_buffers(substitute(e, axes), values)
                for e in (body.cond, body.true_value, body.false_value))
            store = IfThenElse(cond, Store(xpack, where, true_value),
                               Store(xpack, where, false_value))
        copy = For(kk, k_rows, LoopKind.SERIAL, For(
            hr, const(touched), LoopKind.SERIAL,
            For(wv, maximum(hi - lo, 0), vector_kind(options), store, lanes=lanes)))
        if n_total % (panels * width) == 0:   # no panel runs past the last pixel
            return For(jp, const(panels), LoopKind.SERIAL, copy)
        tail = IfThenElse(start + width > n_total, For(  # the last block's ragged panels
            kk, k_rows, LoopKind.SERIAL, For(
                jn, const(width), vector_kind(options),
                IfThenElse(start + jn >= n_total, Store(xpack, (jp, kk, jn), zero)),
                lanes=lanes)))
        return For(jp, const(panels), LoopKind.SERIAL, Seq((copy, tail)))
    flat = start + jn
    values = {**batch_values, **unflatten(minimum(flat, n_total - 1), n_axes),
              **unflatten(k0 + kk, first.k_axes)}
    source: Expr = load
    if padded is not None:
        source = clamp_guarded_loads(substitute(padded.op.body,
                                                dict(zip(padded.axes, load.indices))))
    value = select(flat < n_total, to_buffers(source, values), zero)
    return For(jp, const(panels), LoopKind.SERIAL, For(kk, k_rows, LoopKind.SERIAL, For(
        jn, const(width), vector_kind(options), Store(xpack, (jp, kk, jn), value), lanes=lanes)))


__all__ = ["pack_block_columns", "pack_slices"]
