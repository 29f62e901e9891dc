"""Normalisation: layer_norm and (inference) batch_norm.

``layer_norm`` is five computes (sum, mean, sum of squared deviations, reciprocal standard
deviation, normalise-and-scale); ``batch_norm`` uses precomputed statistics and is one compute.

>>> from tilecraft import te
>>> x = te.placeholder((2, 3, 4, 4), name="x")
>>> mu, var, g, b = (te.placeholder((3,), name=n) for n in ("mu", "var", "g", "b"))
>>> print(batch_norm(x, mu, var, g, b, name="bn").statement())
bn[n, c, i2, i3] = (((x[n, c, i2, i3] - mu[c]) / sqrt((var[c] + 1e-05))) * g[c]) + b[c]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tilecraft import te
from tilecraft.errors import DTypeError, ShapeError
from tilecraft.ops.building import (
    accumulation_dtype,
    check_float,
    check_tensor,
    compute_float,
    named_compute,
    normalize_axes,
    normalize_axis,
    output_name,
)
from tilecraft.ops.elementwise import axis_names
from tilecraft.ops.reduction import divide_by_count, reduce_compute
from tilecraft.te.expr import ReduceOp
from tilecraft.te.tensor import Tensor


def _check_param(param: Tensor | None, shape: tuple[int, ...], x: Tensor, op: str,
                 arg: str) -> None:
    if param is None:
        return
    check_tensor(param, op, arg)
    if param.shape != shape:
        raise ShapeError(f"{op}: {arg} ({param.name}) has shape {param.shape} but must have "
                         f"shape {shape} to match {x.name} {x.shape}")
    if param.dtype != x.dtype:
        raise DTypeError(f"{op}: {arg} ({param.name}) is {param.dtype.value} but {x.name} is "
                         f"{x.dtype.value}; convert one with ops.cast")


def layer_norm(x: Tensor, gamma: Tensor | None = None, beta: Tensor | None = None,
               axes: int | Sequence[int] = -1, eps: float = 1e-5,
               name: str | None = None) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` with statistics over ``axes``.

    ``gamma``/``beta`` (optional) have the shape of the normalised dimensions, as PyTorch's
    ``normalized_shape`` when ``axes`` are the trailing dimensions.
    """
    check_tensor(x, "layer_norm", "x")
    check_float(x, "layer_norm", "x")
    dims = normalize_axes(axes, x.ndim, "layer_norm")
    param_shape = tuple(x.shape[d] for d in dims)
    _check_param(gamma, param_shape, x, "layer_norm", "gamma")
    _check_param(beta, param_shape, x, "layer_norm", "beta")
    final = output_name(name, "layer_norm")
    acc = accumulation_dtype(x.dtype)
    count = math.prod(param_shape)
    names = axis_names(x.ndim)

    def stat_index(idx: tuple[te.Expr, ...]) -> tuple[te.Expr | int, ...]:
        return tuple(0 if d in dims else idx[d] for d in range(x.ndim))

    total = reduce_compute(x, dims, True, ReduceOp.SUM, acc, f"{final}_sum")
    average = divide_by_count(total, count, acc, f"{final}_mean")

    def squared_deviation(source: tuple[te.Expr, ...]) -> te.Expr:
        deviation = x[source].astype(acc) - average[stat_index(source)]
        return deviation * deviation

    squares = reduce_compute(x, dims, True, ReduceOp.SUM, acc, f"{final}_squares",
                             body=squared_deviation)
    rstd = named_compute(squares.shape, names,
                         lambda *idx: 1.0 / te.sqrt(squares[idx] / float(count) + float(eps)),
                         f"{final}_rstd")

    def normalise(*idx: te.Expr) -> te.Expr:
        value = (x[idx].astype(acc) - average[stat_index(idx)]) * rstd[stat_index(idx)]
        param_index = tuple(idx[d] for d in dims)
        if gamma is not None:
            value = value * compute_float(gamma[param_index])
        if beta is not None:
            value = value + compute_float(beta[param_index])
        return value.astype(x.dtype)

    return named_compute(x.shape, names, normalise, final)


def batch_norm(x: Tensor, mean: Tensor, var: Tensor, gamma: Tensor | None = None,
               beta: Tensor | None = None, eps: float = 1e-5, axis: int = 1,
               name: str | None = None) -> Tensor:
    """Inference batch norm: ``(x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c]``,
    ``c`` running along ``axis`` (the channel axis of NCHW by default)."""
    check_tensor(x, "batch_norm", "x")
    check_float(x, "batch_norm", "x")
    dim = normalize_axis(axis, x.ndim, "batch_norm")
    channels = (x.shape[dim],)
    for arg, param in (("mean", mean), ("var", var), ("gamma", gamma), ("beta", beta)):
        _check_param(param, channels, x, "batch_norm", arg)
    names = axis_names(x.ndim)
    names[dim] = "c"
    if dim == 1:
        names[0] = "n"

    def body(*idx: te.Expr) -> te.Expr:
        c = idx[dim]
        value = ((compute_float(x[idx]) - compute_float(mean[c]))
                 / te.sqrt(compute_float(var[c]) + float(eps)))
        if gamma is not None:
            value = value * compute_float(gamma[c])
        if beta is not None:
            value = value + compute_float(beta[c])
        return value.astype(x.dtype)

    return named_compute(x.shape, names, body, output_name(name, "batch_norm"))
