"""Activation functions: relu, gelu (erf form), sigmoid, tanh, leaky_relu.

Half-precision inputs are computed in float32 and rounded once on store.

>>> from tilecraft import te
>>> x = te.placeholder((8,), name="x")
>>> print(relu(x, name="r").statement())
r[i0] = max(x[i0], 0.0)
>>> print(gelu(x, name="g").statement())
g[i0] = (0.5 * x[i0]) * (1.0 + erf((x[i0] * 0.7071067811865476)))
"""

from __future__ import annotations

import math

from tilecraft import te
from tilecraft.ops.building import check_float, check_tensor
from tilecraft.ops.elementwise import map_unary
from tilecraft.te.tensor import Tensor


def relu(x: Tensor, name: str | None = None) -> Tensor:
    """``max(x, 0)`` (any dtype)."""
    check_tensor(x, "relu", "x")
    zero = 0.0 if x.dtype.is_float else 0
    return map_unary(x, lambda v: te.maximum(v, zero), "relu", name)


def leaky_relu(x: Tensor, negative_slope: float = 0.01, name: str | None = None) -> Tensor:
    """``x if x >= 0 else negative_slope * x`` (float)."""
    check_tensor(x, "leaky_relu", "x")
    check_float(x, "leaky_relu", "x")
    return map_unary(x, lambda v: te.select(v >= 0.0, v, v * float(negative_slope)),
                     "leaky_relu", name)


def gelu(x: Tensor, name: str | None = None) -> Tensor:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` (PyTorch's default, exact form)."""
    check_tensor(x, "gelu", "x")
    check_float(x, "gelu", "x")
    return map_unary(x, lambda v: 0.5 * v * (1.0 + te.erf(v * math.sqrt(0.5))), "gelu", name)


def sigmoid(x: Tensor, name: str | None = None) -> Tensor:
    """``1 / (1 + exp(-x))``."""
    check_tensor(x, "sigmoid", "x")
    check_float(x, "sigmoid", "x")
    return map_unary(x, te.sigmoid, "sigmoid", name)


def tanh(x: Tensor, name: str | None = None) -> Tensor:
    """Hyperbolic tangent."""
    check_tensor(x, "tanh", "x")
    check_float(x, "tanh", "x")
    return map_unary(x, te.tanh, "tanh", name)
