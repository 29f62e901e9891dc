"""Elementwise functions and reductions of the te DSL.

``te.max`` / ``te.min`` reduce when given ``axis=`` and compare two values otherwise.

>>> from tilecraft import te
>>> A = te.placeholder((4, 8), name="A")
>>> r = te.reduce_axis(8, name="r")
>>> M = te.compute((4,), lambda i: te.max(A[i, r], axis=r), name="M")
>>> print(M.statement())
M[i] = max(A[i, r], axis=[r])
>>> print(te.compute((4, 8), lambda i, j: te.max(A[i, j], 0.0), name="R").statement())
R[i, j] = max(A[i, j], 0.0)
"""

from __future__ import annotations

from collections.abc import Sequence

from tilecraft.dtypes import DType
from tilecraft.errors import ExpressionError, ReduceAxisError
from tilecraft.te.expr import (
    AxisKind,
    BinaryOp,
    CompareOp,
    Expr,
    ExprLike,
    IterVar,
    Reduce,
    ReduceOp,
    UnaryOp,
    as_expr,
    binary,
    compare,
    unary,
)


def _reduce(op: ReduceOp, expr: ExprLike, axis: IterVar | Sequence[IterVar]) -> Expr:
    body = as_expr(expr)
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes:
        raise ReduceAxisError(f"te.{op.value} needs at least one reduce axis")
    for ax in axes:
        if not isinstance(ax, IterVar) or ax.kind is not AxisKind.REDUCE:
            kind = "a spatial axis" if isinstance(ax, IterVar) else "not an axis"
            raise ReduceAxisError(f"te.{op.value}: {ax} is {kind}, not a reduce axis; create "
                                  "reduce axes with te.reduce_axis(extent, name=...)")
    if body.dtype == DType.BOOL:
        raise ExpressionError(f"te.{op.value} of a condition ({body})")
    return Reduce(op, body, axes)


def sum(expr: ExprLike, axis: IterVar | Sequence[IterVar]) -> Expr:  # noqa: A001
    """Sum of ``expr`` over the reduce axes ``axis``."""
    return _reduce(ReduceOp.SUM, expr, axis)


def prod(expr: ExprLike, axis: IterVar | Sequence[IterVar]) -> Expr:
    """Product of ``expr`` over the reduce axes ``axis`` (1 over an empty range).

    >>> from tilecraft import te
    >>> A = te.placeholder((4, 8), name="A")
    >>> r = te.reduce_axis(8, name="r")
    >>> print(te.compute((4,), lambda i: te.prod(A[i, r], axis=r), name="P").statement())
    P[i] = prod(A[i, r], axis=[r])
    """
    return _reduce(ReduceOp.PROD, expr, axis)


def max(a: ExprLike, b: ExprLike | None = None, *,  # noqa: A001
        axis: IterVar | Sequence[IterVar] | None = None) -> Expr:
    """``max(a, axis=r)`` reduces; ``max(a, b)`` is the elementwise maximum."""
    if axis is not None:
        return _reduce(ReduceOp.MAX, a, axis)
    if b is None:
        raise ExpressionError("te.max needs a second operand or axis=")
    return binary(BinaryOp.MAX, a, b)


def min(a: ExprLike, b: ExprLike | None = None, *,  # noqa: A001
        axis: IterVar | Sequence[IterVar] | None = None) -> Expr:
    """``min(a, axis=r)`` reduces; ``min(a, b)`` is the elementwise minimum."""
    if axis is not None:
        return _reduce(ReduceOp.MIN, a, axis)
    if b is None:
        raise ExpressionError("te.min needs a second operand or axis=")
    return binary(BinaryOp.MIN, a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.MAX, a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binary(BinaryOp.MIN, a, b)


def exp(x: ExprLike) -> Expr:
    return unary(UnaryOp.EXP, x)


def log(x: ExprLike) -> Expr:
    return unary(UnaryOp.LOG, x)


def sqrt(x: ExprLike) -> Expr:
    return unary(UnaryOp.SQRT, x)


def tanh(x: ExprLike) -> Expr:
    return unary(UnaryOp.TANH, x)


def erf(x: ExprLike) -> Expr:
    return unary(UnaryOp.ERF, x)


def sigmoid(x: ExprLike) -> Expr:
    return unary(UnaryOp.SIGMOID, x)


def floor(x: ExprLike) -> Expr:
    """The largest whole number not above ``x`` (floating-point ``x``)."""
    return unary(UnaryOp.FLOOR, x)


def ceil(x: ExprLike) -> Expr:
    """The smallest whole number not below ``x`` (floating-point ``x``)."""
    return unary(UnaryOp.CEIL, x)


def round_even(x: ExprLike) -> Expr:
    """``x`` rounded to the nearest whole number, halves to the even one (``2.5 -> 2``,
    ``-1.5 -> -2``): numpy's ``rint`` and ONNX's Round."""
    return unary(UnaryOp.ROUND, x)


def sin(x: ExprLike) -> Expr:
    """The sine of ``x`` (radians)."""
    return unary(UnaryOp.SIN, x)

def cos(x: ExprLike) -> Expr:
    """The cosine of ``x`` (radians)."""
    return unary(UnaryOp.COS, x)

def tan(x: ExprLike) -> Expr:
    """The tangent of ``x`` (radians)."""
    return unary(UnaryOp.TAN, x)

def asin(x: ExprLike) -> Expr:
    """The arcsine of ``x`` in ``[-pi/2, pi/2]`` (nan outside ``[-1, 1]``)."""
    return unary(UnaryOp.ASIN, x)

def acos(x: ExprLike) -> Expr:
    """The arccosine of ``x`` in ``[0, pi]`` (nan outside ``[-1, 1]``)."""
    return unary(UnaryOp.ACOS, x)

def atan(x: ExprLike) -> Expr:
    """The arctangent of ``x`` in ``(-pi/2, pi/2)``."""
    return unary(UnaryOp.ATAN, x)

def sinh(x: ExprLike) -> Expr:
    """The hyperbolic sine of ``x``."""
    return unary(UnaryOp.SINH, x)

def cosh(x: ExprLike) -> Expr:
    """The hyperbolic cosine of ``x``."""
    return unary(UnaryOp.COSH, x)

def asinh(x: ExprLike) -> Expr:
    """The inverse hyperbolic sine of ``x``."""
    return unary(UnaryOp.ASINH, x)

def acosh(x: ExprLike) -> Expr:
    """The inverse hyperbolic cosine of ``x``, in ``[0, inf)`` (nan below 1)."""
    return unary(UnaryOp.ACOSH, x)

def atanh(x: ExprLike) -> Expr:
    """The inverse hyperbolic tangent of ``x`` (``+-inf`` at ``+-1``, nan outside
    ``[-1, 1]``)."""
    return unary(UnaryOp.ATANH, x)


def neg(x: ExprLike) -> Expr:
    return unary(UnaryOp.NEG, x)


def abs(x: ExprLike) -> Expr:  # noqa: A001
    return unary(UnaryOp.ABS, x)


def eq(a: ExprLike, b: ExprLike) -> Expr:
    """``a == b`` as a condition (``==`` on expressions compares structure)."""
    return compare(CompareOp.EQ, a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    return compare(CompareOp.NE, a, b)


def all_of(*conditions: ExprLike) -> Expr:
    """The conjunction of ``conditions``."""
    if not conditions:
        raise ExpressionError("all_of needs at least one condition")
    result = as_expr(conditions[0])
    for cond in conditions[1:]:
        result = result & cond
    return result


