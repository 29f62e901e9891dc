"""Recognise a col2im gather written as a te compute (the second half of a scatter-form gradient).

:mod:`tilecraft.autodiff` differentiates a strided convolution's input read in scatter form:
``cols[c, r..., n, i...] = sum_k dY[n, k, i...] * w[k, c, r...]`` (a contraction), then the
gradient of the gather, solved from the index equations:

``dX[n, c, Y...] = sum_t select(cond, cols[c, tap(Y, t)..., n, pos(Y, t)...], 0)``

with floordiv/mod index functions and exact-division and range conditions. That is the col2im
of a transposed convolution of stride ``s``, padding ``p`` and dilation ``d``: tap ``r`` lands
on ``Y`` from input position ``(Y + p - r*d) / s`` when the division is exact and in range.
:func:`as_col2im_gather` reads ``(s, p, d)`` off the compute and returns the
:class:`~tilecraft.passes.transposed_conv.TransposedConv` whose col2im it is, so a target can run
it phase by phase (contiguous loads) instead of a loop nest evaluating the div/mod conditions
per element. Nothing is assumed from the expressions' form: per spatial axis, the taps,
positions and conditions are evaluated over every output position and tap (the reference
interpreter evaluates them), and the compute is taken for a col2im only when they are exactly
the transposed convolution's, each (tap, position) once.

>>> from tilecraft import ops, te
>>> from tilecraft.autodiff import grad
>>> from tilecraft.graph import Graph
>>> x = te.placeholder((2, 3, 9, 9), name="x")
>>> y = ops.conv2d(x, te.placeholder((4, 3, 3, 3), name="w"), stride=2, padding=1, name="y")
>>> gather = next(c for c in Graph.from_outputs(grad(y, [x])).computes
...               if as_col2im_gather(c) is not None)
>>> found = as_col2im_gather(gather)
>>> found.cols.name, found.conv.stride, found.conv.padding, found.conv.dilation
('grad_y_pad_via_y_cols', (2, 2), (0, 0), (1, 1))
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.passes.transposed_conv import TransposedConv
from tilecraft.te.expr import (
    Const,
    Expr,
    IterVar,
    Load,
    Logical,
    LogicalOp,
    Reduce,
    ReduceOp,
    Select,
)
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import substitute, vars_in


@dataclass(frozen=True)
class Col2imGather:
    """``tensor`` is the col2im of ``cols`` under ``conv`` (whose ``x`` and ``w`` are
    placeholders of the shapes a col2im needs: ``(N, 1, *in)`` and ``(1, C, *kernel)``)."""

    tensor: Tensor
    cols: Tensor
    conv: TransposedConv


def _clauses(cond: Expr) -> list[Expr]:
    if isinstance(cond, Logical) and cond.op is LogicalOp.AND:
        return _clauses(cond.a) + _clauses(cond.b)
    return [cond]


def _on_grid(expr: Expr, y: IterVar, t: IterVar) -> np.ndarray:
    """``expr`` (of ``y`` and ``t`` only) at every ``(y, t)``, by the reference interpreter."""
    from tilecraft.reference import evaluate

    if expr.dtype is DType.BOOL:
        expr = te.select(expr, 1, 0)
    grid = te.compute((y.extent, t.extent), lambda a, b: substitute(expr, {y: a, t: b}),
                      name="col2im_probe")
    return np.asarray(evaluate(grid, {}), dtype=np.int64)


def _axis_parameters(tap: np.ndarray, pos: np.ndarray, ok: np.ndarray, kernel: int,
                     inputs: int) -> tuple[int, int, int] | None:
    """``(stride, padding, dilation)`` of one spatial axis whose tap and input position of
    ``(Y, t)`` are ``tap``/``pos`` where ``ok``; ``None`` unless exactly a col2im's."""
    ys, ts = np.nonzero(ok)
    taps, positions = tap[ys, ts], pos[ys, ts]
    if not len(ys) or taps.min() < 0 or taps.max() >= kernel or positions.min() < 0 \
            or positions.max() >= inputs:
        return None
    found = {(int(y), int(k), int(q)) for y, k, q in zip(ys, taps, positions)}
    if len(found) != len(ys):
        return None  # a (tap, position) summed twice
    entries = sorted(found)
    stride = dilation = None
    by_tap: dict[int, tuple[int, int]] = {}
    for y, k, q in entries:  # same tap, next position: Y moves by the stride
        if k in by_tap and q != by_tap[k][1]:
            y0, q0 = by_tap[k]
            if (y - y0) % (q - q0):
                return None
            stride = (y - y0) // (q - q0)
            break
        by_tap[k] = (y, q)
    stride = stride or 1
    y0, k0, q0 = entries[0]
    for y, k, q in entries:  # y + p - k*d = s*q: two taps give d
        if k != k0:
            numerator = (stride * q - y) - (stride * q0 - y0)
            if numerator % (k0 - k):
                return None
            dilation = numerator // (k0 - k)
            break
    dilation = dilation or 1
    if stride < 1 or dilation < 1:
        return None
    padding = stride * q0 - y0 + k0 * dilation
    expected = set()
    for y in range(tap.shape[0]):
        for k in range(kernel):
            shifted = y + padding - k * dilation
            if shifted % stride == 0 and 0 <= shifted // stride < inputs:
                expected.add((y, k, shifted // stride))
    return (stride, padding, dilation) if expected == found else None


def as_col2im_gather(tensor: Tensor) -> Col2imGather | None:
    """``tensor`` as the col2im of a transposed convolution (see the module docstring), or
    ``None``."""
    if tensor.is_placeholder or tensor.ndim < 3:
        return None
    body = tensor.op.body
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM:
        return None
    select = body.body
    if not (isinstance(select, Select) and isinstance(select.true_value, Load)
            and isinstance(select.false_value, Const) and select.false_value.value == 0):
        return None
    load = select.true_value
    cols, nd = load.tensor, tensor.ndim - 2
    if cols.is_placeholder or cols.ndim != 2 + 2 * nd or cols.dtype is not tensor.dtype \
            or len(body.axes) > nd:
        return None
    n_axis, c_axis, *out_axes = tensor.axes
    index = load.indices
    if index[0] is not c_axis or index[1 + nd] is not n_axis:
        return None
    batch, channels, kernel, inputs = tensor.shape[0], tensor.shape[1], \
        cols.shape[1:1 + nd], cols.shape[2 + nd:]
    if cols.shape[0] != channels or cols.shape[1 + nd] != batch:
        return None
    clauses = _clauses(select.cond)
    assigned: set[int] = set()
    params = []
    for d in range(nd):
        y = out_axes[d]
        taps = [v for v in vars_in(index[1 + d]) if v in body.axes]
        if len(taps) > 1:
            return None
        # no tap variable: a kernel no wider than the stride, one tap per output position
        t = taps[0] if taps else te.reduce_axis(1, name="one_tap")
        allowed = {y, t}
        if not set(vars_in(index[1 + d])) <= allowed or \
                not set(vars_in(index[2 + nd + d])) <= allowed:
            return None
        mine = [c for c in clauses if set(vars_in(c)) and set(vars_in(c)) <= allowed]
        assigned.update(id(c) for c in mine)
        ok = np.ones((y.extent, t.extent), dtype=bool)
        for clause in mine:
            ok &= _on_grid(clause, y, t).astype(bool)
        found = _axis_parameters(_on_grid(index[1 + d], y, t), _on_grid(index[2 + nd + d], y, t),
                                 ok, kernel[d], inputs[d])
        if found is None:
            return None
        params.append(found)
    taps_used = {a for d in range(nd) for a in vars_in(index[1 + d]) if a in body.axes}
    if any(id(c) not in assigned for c in clauses) or taps_used != set(body.axes):
        return None  # a condition of several axes at once, or a tap shared by two axes
    stride, padding, dilation = (tuple(p[i] for p in params) for i in range(3))
    x = te.placeholder((batch, 1, *inputs), tensor.dtype, name=f"{cols.name}_x")
    w = te.placeholder((1, channels, *kernel), tensor.dtype, name=f"{cols.name}_w")
    return Col2imGather(tensor, cols, TransposedConv(tensor, x, w, stride, padding, dilation, 1))


__all__ = ["Col2imGather", "as_col2im_gather"]
