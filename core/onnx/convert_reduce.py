"""ONNX reductions: ReduceMean / Sum / Prod / Max / Min, the norms and logs (ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum, ReduceLogSumExp), the arg reductions (ArgMax, ArgMin,
Hardmax) and the running sums and products (CumSum, CumProd), through
:func:`tilecraft.ops.reduction.reduce_compute`.

An arg reduction is two reductions: the extreme value over the axis, then the smallest (or,
with ``select_last_index``, the largest) position holding it. ReduceLogSumExp subtracts the
maximum first, so that ``exp`` cannot overflow.

>>> # ReduceL2(x[2, 3], axes=[1], keepdims=0) becomes sqrt(sum over r of x[i, r] * x[i, r])
"""

from __future__ import annotations

from collections.abc import Callable

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_shape import axes_input
from tilecraft.onnx.values import Value
from tilecraft.ops.building import compute_float, named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.ops.reduction import reduce_compute
from tilecraft.te.expr import ReduceOp
from tilecraft.te.tensor import Tensor

_REDUCE = {"ReduceMean": ops.mean, "ReduceSum": ops.reduce_sum, "ReduceMax": ops.reduce_max,
           "ReduceMin": ops.reduce_min, "ReduceProd": ops.reduce_prod}

#: reductions that are a sum of a function of each element, then a function of the sum:
#: (element, result, float inputs only)
_SUMS: dict[str, tuple[Callable[[te.Expr], te.Expr], Callable[[te.Expr], te.Expr], bool]] = {
    "ReduceL1": (te.abs, lambda s: s, False),
    "ReduceSumSquare": (lambda v: v * v, lambda s: s, False),
    "ReduceL2": (lambda v: v * v, te.sqrt, True),
    "ReduceLogSum": (lambda v: v, te.log, True),
}


def _reduced_axes(ctx: NodeContext, x: Tensor) -> tuple[int, ...] | None:
    """The axes to reduce (input 1 or the ``axes`` attribute; all when absent or empty), or
    ``None`` where ``noop_with_empty_axes`` makes an absent list mean no reduction."""
    axes = axes_input(ctx, 1, x.ndim)
    if not axes:
        if int(ctx.attr("noop_with_empty_axes", 0)):
            return None
        axes = list(range(x.ndim))
    return tuple(sorted(set(axes)))


def _keepdims(ctx: NodeContext) -> bool:
    return bool(int(ctx.attr("keepdims", 1)))


@converter(*_REDUCE)
def convert_reduce(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axes = _reduced_axes(ctx, x)
    if axes is None:
        return [ops.reshape(x, x.shape, name=ctx.out())]
    if ctx.op_type == "ReduceMean" and not x.dtype.is_float:
        raise ctx.unsupported("ReduceMean of an integer tensor")
    kwargs = {"out_dtype": x.dtype} if ctx.op_type in ("ReduceSum", "ReduceProd") else {}
    return [_REDUCE[ctx.op_type](x, axes=axes, keepdims=_keepdims(ctx), name=ctx.out(),
                                 **kwargs)]


@converter(*_SUMS, "ReduceLogSumExp")
def convert_reduce_sum_of(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    op = ctx.op_type
    element, finish, float_only = _SUMS.get(op, (te.exp, te.log, True))
    if float_only and not x.dtype.is_float:
        raise ctx.unsupported(f"{op} of a {x.dtype.value} tensor (float only)")
    axes = _reduced_axes(ctx, x)
    if axes is None:
        axes = ()  # each element reduced alone: the functions still apply
    keep = _keepdims(ctx)
    name = ctx.out()
    acc = DType.FLOAT32 if x.dtype.is_float else x.dtype
    shift: Tensor | None = None
    if op == "ReduceLogSumExp":  # log(sum(exp(x - max))) + max: exp cannot overflow
        shift = ops.reduce_max(x, axes=axes, keepdims=True, name=f"{name}_max") if axes \
            else x

    def stat(source: tuple[te.Expr, ...]) -> tuple[te.Expr | int, ...]:
        return tuple(0 if d in axes else source[d] for d in range(x.ndim))

    def body(source: tuple[te.Expr, ...]) -> te.Expr:
        value = x[source].astype(acc)
        if shift is not None:
            value = value - compute_float(shift[stat(source)])
        return element(value)

    total = reduce_compute(x, axes, True, ReduceOp.SUM, acc, f"{name}_sum", body=body) \
        if axes else named_compute(x.shape, axis_names(x.ndim),
                                   lambda *idx: body(tuple(idx)), f"{name}_sum")
    kept = [d for d in range(x.ndim) if d not in axes]
    shape = tuple(1 if d in axes else e for d, e in enumerate(x.shape)) if keep \
        else tuple(x.shape[d] for d in kept)

    def result(*idx: te.Expr) -> te.Expr:
        full = list(idx) if keep else [0] * x.ndim
        if not keep:
            for d, i in zip(kept, idx):
                full[d] = i
        where = tuple(0 if d in axes else full[d] for d in range(x.ndim))
        value = finish(total[where])
        if shift is not None:
            value = value + compute_float(shift[where])
        return te.as_expr(value).astype(x.dtype)

    return [named_compute(shape or (1,), axis_names(len(shape) or 1),
                          result if shape else (lambda _: result()), name)]


def arg_extreme(x: Tensor, axis: int, largest: bool, last: bool, name: str) -> Tensor:
    """The position along ``axis`` of the largest (``largest``) or smallest value of ``x``,
    kept as an extent-1 axis, int32: the first such position, or the last one (``last``).

    >>> import numpy as np
    >>> from tilecraft.reference import run
    >>> x = te.placeholder((2, 4), name="x")
    >>> data = np.array([[1, 5, 5, 2], [7, 0, 7, 7]], np.float32)
    >>> run(arg_extreme(x, 1, True, False, "a"), {"x": data}).ravel().tolist()
    [1, 0]
    >>> run(arg_extreme(x, 1, True, True, "b"), {"x": data}).ravel().tolist()
    [2, 3]
    """
    reducer = ops.reduce_max if largest else ops.reduce_min
    extreme = reducer(x, axes=(axis,), keepdims=True, name=f"{name}_value")
    extent = x.shape[axis]

    def position(source: tuple[te.Expr, ...]) -> te.Expr:
        where = tuple(0 if d == axis else source[d] for d in range(x.ndim))
        miss = -1 if last else extent
        return te.select(te.eq(x[source], extreme[where]), source[axis], miss)

    return reduce_compute(x, (axis,), True, ReduceOp.MAX if last else ReduceOp.MIN,
                          DType.INT32, name, body=position)


@converter("ArgMax", "ArgMin")
def convert_arg(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", 0)) % x.ndim
    last = bool(int(ctx.attr("select_last_index", 0)))
    name = ctx.out()
    if _keepdims(ctx):
        return [arg_extreme(x, axis, ctx.op_type == "ArgMax", last, name)]
    found = arg_extreme(x, axis, ctx.op_type == "ArgMax", last, f"{name}_kept")
    shape = tuple(e for d, e in enumerate(x.shape) if d != axis)
    return [ops.reshape(found, shape or (1,), name=name)]


@converter("Hardmax")
def convert_hardmax(ctx: NodeContext) -> list[Value]:
    """1 at the first largest value along ``axis`` (opset 13: one axis), 0 elsewhere."""
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", -1)) % x.ndim
    name = ctx.out()
    found = arg_extreme(x, axis, True, False, f"{name}_position")

    def body(*idx: te.Expr) -> te.Expr:
        where = tuple(0 if d == axis else idx[d] for d in range(x.ndim))
        return te.select(te.eq(found[where], idx[axis]), 1.0, 0.0).astype(x.dtype)

    return [named_compute(x.shape, axis_names(x.ndim), body, name)]


@converter("CumSum", "CumProd")
def convert_cumulative(ctx: NodeContext) -> list[Value]:
    """Running sums (CumSum) or products (CumProd, opset 26) along ``axis`` (input 1, known
    at import time): ``out[i]`` combines the positions ``r <= i`` (``r < i`` with
    ``exclusive``; from the other end with ``reverse``)."""
    x = ctx.tensor(0)
    axis = int(ctx.const(1, "axis").reshape(-1)[0]) % x.ndim
    exclusive = bool(int(ctx.attr("exclusive", 0)))
    reverse = bool(int(ctx.attr("reverse", 0)))
    op = ReduceOp.SUM if ctx.op_type == "CumSum" else ReduceOp.PROD
    return [cumulative(x, axis, op, exclusive, reverse, ctx.out())]


def cumulative(x: Tensor, axis: int, op: ReduceOp, exclusive: bool, reverse: bool,
               name: str) -> Tensor:
    """The running ``op`` (a sum or a product) of ``x`` along ``axis``. Each output is its own
    reduction over the whole axis, with the positions outside its prefix (suffix with
    ``reverse``) replaced by the reduction's neutral element (te has no scan): ``n^2``
    operations along an axis of ``n``, for the short axes models cumulate over (positions,
    masks). The empty prefix of an exclusive scan gives the neutral element (0 or 1).

    >>> # CumProd(x[5], exclusive=1) becomes out[i] = prod over r < 5 of select(r < i, x[r], 1)
    """
    pick = {ReduceOp.SUM: te.sum, ReduceOp.PROD: te.prod}[op]
    floating = x.dtype.is_float
    if op is ReduceOp.PROD:
        neutral: float | int = 1.0 if floating else 1
    else:
        neutral = 0.0 if floating else 0
    r = te.reduce_axis(x.shape[axis], "r")

    def body(*idx: te.Expr) -> te.Expr:
        i = idx[axis]
        if reverse:
            wanted = r > i if exclusive else r >= i
        else:
            wanted = r < i if exclusive else r <= i
        source = tuple(r if d == axis else e for d, e in enumerate(idx))
        return pick(te.select(wanted, x[source], neutral), axis=[r])

    return named_compute(x.shape, axis_names(x.ndim), body, name)
