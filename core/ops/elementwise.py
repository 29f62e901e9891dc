"""Elementwise arithmetic with numpy broadcasting, bias_add, scale and cast.

Operands are tensors or Python scalars (at least one tensor); two tensors must share a dtype.
Half-precision tensors are computed in float32 (scalars are not rounded to the half type) and
the result is rounded once to the tensor's dtype.

>>> from tilecraft import te
>>> x = te.placeholder((2, 3), name="x")
>>> b = te.placeholder((3,), name="b")
>>> print(add(x, b, name="y").statement())
y[i0, i1] = x[i0, i1] + b[i1]
>>> print(mul(x, 2, name="z").statement())
z[i0, i1] = x[i0, i1] * 2.0
"""

from __future__ import annotations

from collections.abc import Callable

from tilecraft import te
from tilecraft.dtypes import DType, as_dtype
from tilecraft.errors import DTypeError, ShapeError
from tilecraft.ops.building import (
    broadcast_index,
    broadcast_shape,
    check_tensor,
    compute_float,
    named_compute,
    normalize_axis,
    output_name,
)
from tilecraft.te.tensor import Tensor

Operand = Tensor | int | float


def axis_names(ndim: int) -> list[str]:
    """Default names of the output axes of an elementwise op: ``i0, i1, ...``."""
    return [f"i{d}" for d in range(ndim)]


def map_unary(x: Tensor, fn: Callable[[te.Expr], te.Expr], op: str,
              name: str | None = None) -> Tensor:
    """``out[idx] = fn(x[idx])``, computed in float32 for half types and cast back."""
    check_tensor(x, op, "x")
    return named_compute(x.shape, axis_names(x.ndim),
                         lambda *idx: fn(compute_float(x[idx])).astype(x.dtype),
                         output_name(name, op))


def _scalar(value: int | float, like: DType, op: str, other: Tensor) -> te.Expr:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DTypeError(f"{op}: operand {value!r} must be a Tensor or a Python number")
    if isinstance(value, float) and not like.is_float:
        if not value.is_integer():
            raise DTypeError(f"{op}: the float scalar {value} cannot combine with the "
                             f"{like.value} tensor {other.name}; cast it with ops.cast first")
        value = int(value)
    return te.const(value, like)


def _binary(a: Operand, b: Operand, fn: Callable[[te.Expr, te.Expr], te.Expr], op: str,
            name: str | None) -> Tensor:
    tensors = [t for t in (a, b) if isinstance(t, Tensor)]
    if not tensors:
        raise DTypeError(f"{op}: at least one operand must be a Tensor, got {a!r} and {b!r}")
    if len(tensors) == 2 and a.dtype != b.dtype:  # type: ignore[union-attr]
        raise DTypeError(f"{op}: {a.name} is {a.dtype.value} but {b.name} is "  # type: ignore
                         f"{b.dtype.value}; convert one of them with ops.cast")  # type: ignore
    dtype = tensors[0].dtype
    shape = tensors[0].shape if len(tensors) == 1 else broadcast_shape(a.shape, b.shape, op)
    compute_dtype = DType.FLOAT32 if dtype in (DType.FLOAT16, DType.BFLOAT16) else dtype

    def side(value: Operand, axes: tuple[te.Expr, ...]) -> te.Expr:
        if isinstance(value, Tensor):
            return compute_float(value[broadcast_index(value, axes)])
        return _scalar(value, compute_dtype, op, tensors[0])

    return named_compute(shape, axis_names(len(shape)),
                         lambda *axes: fn(side(a, axes), side(b, axes)).astype(dtype),
                         output_name(name, op))


def add(a: Operand, b: Operand, name: str | None = None) -> Tensor:
    """``a + b`` with broadcasting."""
    return _binary(a, b, lambda x, y: x + y, "add", name)


def sub(a: Operand, b: Operand, name: str | None = None) -> Tensor:
    """``a - b`` with broadcasting."""
    return _binary(a, b, lambda x, y: x - y, "sub", name)


def mul(a: Operand, b: Operand, name: str | None = None) -> Tensor:
    """``a * b`` with broadcasting."""
    return _binary(a, b, lambda x, y: x * y, "mul", name)


def div(a: Operand, b: Operand, name: str | None = None) -> Tensor:
    """``a / b`` with broadcasting, float tensors only."""
    for value in (a, b):
        if isinstance(value, Tensor) and not value.dtype.is_float:
            raise DTypeError(f"div: {value.name} has dtype {value.dtype.value}; true division "
                             "needs float tensors: convert with ops.cast(x, 'float32')")
    return _binary(a, b, lambda x, y: x / y, "div", name)


def maximum(a: Operand, b: Operand, name: str | None = None) -> Tensor:
    """Elementwise ``max(a, b)`` with broadcasting."""
    return _binary(a, b, te.maximum, "maximum", name)


def minimum(a: Operand, b: Operand, name: str | None = None) -> Tensor:
    """Elementwise ``min(a, b)`` with broadcasting."""
    return _binary(a, b, te.minimum, "minimum", name)


def bias_add(x: Tensor, bias: Tensor, axis: int = 1, name: str | None = None) -> Tensor:
    """``out = x + bias`` with the 1-d ``bias`` laid along ``axis`` (the channel axis)."""
    check_tensor(x, "bias_add", "x")
    check_tensor(bias, "bias_add", "bias", 1)
    dim = normalize_axis(axis, x.ndim, "bias_add")
    if bias.shape[0] != x.shape[dim]:
        raise ShapeError(f"bias_add: bias ({bias.name}) has {bias.shape[0]} elements but axis "
                         f"{dim} of x ({x.name}, shape {x.shape}) has {x.shape[dim]}; pass a bias "
                         "of that size or another axis=")
    if bias.dtype != x.dtype:
        raise DTypeError(f"bias_add: bias ({bias.name}) is {bias.dtype.value} but x ({x.name}) "
                         f"is {x.dtype.value}; convert one with ops.cast")
    return named_compute(
        x.shape, axis_names(x.ndim),
        lambda *idx: (compute_float(x[idx]) + compute_float(bias[idx[dim]])).astype(x.dtype),
        output_name(name, "bias_add"))


def scale(x: Tensor, factor: int | float, name: str | None = None) -> Tensor:
    """``out = x * factor`` for a Python number ``factor``."""
    check_tensor(x, "scale", "x")
    return _binary(x, factor, lambda a, b: a * b, "scale", name)


def cast(x: Tensor, dtype: DType | str, name: str | None = None) -> Tensor:
    """``x`` converted to ``dtype`` (te's cast rules: float to int truncates and saturates)."""
    check_tensor(x, "cast", "x")
    target = as_dtype(dtype)
    if target == DType.BOOL:
        raise DTypeError("cast: tensors cannot be bool; use a float or integer dtype")
    return named_compute(x.shape, axis_names(x.ndim), lambda *idx: x[idx].astype(target),
                         output_name(name, "cast"))
