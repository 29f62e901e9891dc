"""softmax and log_softmax as their primitive computes (thesis Eq. 2.5).

``softmax`` is five computes: max-reduce, subtract, exp, sum-reduce, divide. Intermediates of
half-precision inputs are float32; only the result is rounded to the input's dtype.

>>> from tilecraft import te
>>> from tilecraft.graph import Graph
>>> x = te.placeholder((2, 5), name="x")
>>> print(Graph.from_outputs([softmax(x, name="y")]))
graph(x: float32[2, 5]) -> (y):
  y_max[i0] = max(x[i0, r1], axis=[r1])
  y_sub[i0, i1] = x[i0, i1] - y_max[i0]
  y_exp[i0, i1] = exp(y_sub[i0, i1])
  y_sum[i0] = sum(y_exp[i0, r1], axis=[r1])
  y[i0, i1] = y_exp[i0, i1] / y_sum[i0]
"""

from __future__ import annotations

from tilecraft import te
from tilecraft.ops.building import (
    accumulation_dtype,
    check_float,
    check_tensor,
    named_compute,
    normalize_axis,
    output_name,
)
from tilecraft.ops.elementwise import axis_names
from tilecraft.ops.reduction import reduce_compute
from tilecraft.te.expr import ReduceOp
from tilecraft.te.tensor import Tensor


def _max_sub_exp_sum(x: Tensor, dim: int, final: str) -> tuple[Tensor, Tensor, Tensor]:
    acc = accumulation_dtype(x.dtype)
    names = axis_names(x.ndim)

    def reduced(idx: tuple[te.Expr, ...]) -> tuple[te.Expr, ...]:
        return idx[:dim] + idx[dim + 1:]

    row_max = reduce_compute(x, (dim,), False, ReduceOp.MAX, acc, f"{final}_max")
    shifted = named_compute(x.shape, names,
                            lambda *idx: x[idx].astype(acc) - row_max[reduced(idx)],
                            f"{final}_sub")
    exps = named_compute(x.shape, names, lambda *idx: te.exp(shifted[idx]), f"{final}_exp")
    total = reduce_compute(exps, (dim,), False, ReduceOp.SUM, acc, f"{final}_sum")
    return shifted, exps, total


def softmax(x: Tensor, axis: int = -1, name: str | None = None) -> Tensor:
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` along ``axis``."""
    check_tensor(x, "softmax", "x")
    check_float(x, "softmax", "x")
    dim = normalize_axis(axis, x.ndim, "softmax")
    final = output_name(name, "softmax")
    _, exps, total = _max_sub_exp_sum(x, dim, final)
    return named_compute(
        x.shape, axis_names(x.ndim),
        lambda *idx: (exps[idx] / total[idx[:dim] + idx[dim + 1:]]).astype(x.dtype), final)


def log_softmax(x: Tensor, axis: int = -1, name: str | None = None) -> Tensor:
    """``(x - max(x)) - log(sum(exp(x - max(x))))`` along ``axis``."""
    check_tensor(x, "log_softmax", "x")
    check_float(x, "log_softmax", "x")
    dim = normalize_axis(axis, x.ndim, "log_softmax")
    final = output_name(name, "log_softmax")
    shifted, _, total = _max_sub_exp_sum(x, dim, final)
    return named_compute(
        x.shape, axis_names(x.ndim),
        lambda *idx: (shifted[idx] - te.log(total[idx[:dim] + idx[dim + 1:]])).astype(x.dtype),
        final)
