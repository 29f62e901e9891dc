"""Reductions over axes: sum, product, max, min, mean, variance (population).

A reduction is only allowed as the whole body of a compute, so ``mean`` is a sum compute
followed by a division compute, and ``variance`` is sum, mean, sum of squared deviations and
division. Statistics of half-precision tensors are kept in float32; only the final result is
rounded to the input's dtype.

>>> from tilecraft import te
>>> x = te.placeholder((4, 6), name="x")
>>> m = mean(x, axes=1, name="m")
>>> from tilecraft.graph import Graph
>>> print(Graph.from_outputs([m]))
graph(x: float32[4, 6]) -> (m):
  m_sum[i0] = sum(x[i0, r1], axis=[r1])
  m[i0] = m_sum[i0] / 6.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tilecraft import te
from tilecraft.dtypes import DType, as_dtype
from tilecraft.ops.building import (
    accumulation_dtype,
    check_float,
    check_tensor,
    named_compute,
    normalize_axes,
    output_name,
)
from tilecraft.te.expr import ReduceOp
from tilecraft.te.tensor import Tensor

Axes = int | Sequence[int] | None

_REDUCERS = {ReduceOp.SUM: te.sum, ReduceOp.MAX: te.max, ReduceOp.MIN: te.min,
             ReduceOp.PROD: te.prod}


def reduced_shape(shape: Sequence[int], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else e for d, e in enumerate(shape))
    return tuple(e for d, e in enumerate(shape) if d not in axes)


def reduce_compute(x: Tensor, axes: tuple[int, ...], keepdims: bool, op: ReduceOp,
                   dtype: DType, name: str,
                   body: Callable[[tuple[te.Expr, ...]], te.Expr] | None = None) -> Tensor:
    """``out = op over axes of body(source_index)`` (body defaults to the load of ``x``),
    with the loads cast to ``dtype``. Output axes are named after the input dimensions."""
    reduce_axes = {d: te.reduce_axis(x.shape[d], f"r{d}") for d in axes}
    kept = [d for d in range(x.ndim) if d not in axes]
    shape = reduced_shape(x.shape, axes, keepdims)
    names = [f"i{d}" for d in range(x.ndim)] if keepdims else [f"i{d}" for d in kept]

    def fcompute(*idx: te.Expr) -> te.Expr:
        out_axes = dict(zip(range(x.ndim), idx)) if keepdims else dict(zip(kept, idx))
        source = tuple(reduce_axes[d] if d in reduce_axes else out_axes[d]
                       for d in range(x.ndim))
        value = body(source) if body is not None else x[source].astype(dtype)
        return _REDUCERS[op](value, axis=[reduce_axes[d] for d in axes])

    return named_compute(shape, names, fcompute, name)


def divide_by_count(s: Tensor, count: int, dtype: DType, name: str) -> Tensor:
    """``out = s / count``, cast to ``dtype``."""
    return named_compute(s.shape, [f"i{d}" for d in range(s.ndim)],
                         lambda *idx: (s[idx] / float(count)).astype(dtype), name)


def _default_sum_dtype(x: Tensor, out_dtype: DType | str | None) -> DType:
    if out_dtype is not None:
        return as_dtype(out_dtype)
    return x.dtype if x.dtype.is_float else DType.INT32


def reduce_sum(x: Tensor, axes: Axes = None, keepdims: bool = False,
               out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """Sum over ``axes`` (all when None). Integers accumulate in int32 unless ``out_dtype``."""
    check_tensor(x, "reduce_sum", "x")
    dims = normalize_axes(axes, x.ndim, "reduce_sum")
    return reduce_compute(x, dims, keepdims, ReduceOp.SUM, _default_sum_dtype(x, out_dtype),
                          output_name(name, "reduce_sum"))


def reduce_prod(x: Tensor, axes: Axes = None, keepdims: bool = False,
                out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """Product over ``axes`` (all when None; 1 over an empty range). Integers multiply in
    int32 (wrapping) unless ``out_dtype``.

    >>> x = te.placeholder((4, 6), name="x")
    >>> print(reduce_prod(x, axes=1, name="p").op.body)
    prod(x[i0, r1], axis=[r1])
    """
    check_tensor(x, "reduce_prod", "x")
    dims = normalize_axes(axes, x.ndim, "reduce_prod")
    return reduce_compute(x, dims, keepdims, ReduceOp.PROD, _default_sum_dtype(x, out_dtype),
                          output_name(name, "reduce_prod"))


def reduce_max(x: Tensor, axes: Axes = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """Maximum over ``axes`` (all when None)."""
    check_tensor(x, "reduce_max", "x")
    dims = normalize_axes(axes, x.ndim, "reduce_max")
    return reduce_compute(x, dims, keepdims, ReduceOp.MAX, x.dtype,
                          output_name(name, "reduce_max"))


def reduce_min(x: Tensor, axes: Axes = None, keepdims: bool = False,
               name: str | None = None) -> Tensor:
    """Minimum over ``axes`` (all when None)."""
    check_tensor(x, "reduce_min", "x")
    dims = normalize_axes(axes, x.ndim, "reduce_min")
    return reduce_compute(x, dims, keepdims, ReduceOp.MIN, x.dtype,
                          output_name(name, "reduce_min"))


def mean(x: Tensor, axes: Axes = None, keepdims: bool = False, name: str | None = None) -> Tensor:
    """Arithmetic mean over ``axes``: a sum compute, then a division compute."""
    check_tensor(x, "mean", "x")
    check_float(x, "mean", "x")
    dims = normalize_axes(axes, x.ndim, "mean")
    final = output_name(name, "mean")
    acc = accumulation_dtype(x.dtype)
    total = reduce_compute(x, dims, keepdims, ReduceOp.SUM, acc, f"{final}_sum")
    return divide_by_count(total, math.prod(x.shape[d] for d in dims), x.dtype, final)


def variance(x: Tensor, axes: Axes = None, keepdims: bool = False,
             name: str | None = None) -> Tensor:
    """Population variance ``mean((x - mean(x))**2)`` over ``axes`` (numpy's ``var``, ddof=0)."""
    check_tensor(x, "variance", "x")
    check_float(x, "variance", "x")
    dims = normalize_axes(axes, x.ndim, "variance")
    final = output_name(name, "variance")
    acc = accumulation_dtype(x.dtype)
    count = math.prod(x.shape[d] for d in dims)
    total = reduce_compute(x, dims, True, ReduceOp.SUM, acc, f"{final}_sum")
    average = divide_by_count(total, count, acc, f"{final}_mean")

    def squared_deviation(source: tuple[te.Expr, ...]) -> te.Expr:
        mean_index = tuple(0 if d in dims else source[d] for d in range(x.ndim))
        deviation = x[source].astype(acc) - average[mean_index]
        return deviation * deviation

    squares = reduce_compute(x, dims, keepdims, ReduceOp.SUM, acc, f"{final}_squares",
                             body=squared_deviation)
    return divide_by_count(squares, count, x.dtype, final)
