"""The chain rule through a compute's scalar body (the function H of thesis Eq. 4.8).

``derivative(body, load)`` is the partial derivative of ``body`` with respect to the value
read by ``load`` (every occurrence of that same read counts), as a te expression over the
forward compute's loop variables, or ``None`` when it is zero. Selects stay selects (the
derivative of ``max``/``min`` picks the branch the forward took); ``hoist_guards`` moves the
conditions of ``select(c, v, 0)`` factors out, so the gradient can test them once.

>>> from tilecraft import te
>>> X = te.placeholder((4,), name="X")
>>> Y = te.compute((4,), lambda i: te.exp(X[i]) * X[i], name="Y")
>>> str(derivative(Y.body, Y.body.b))
'((exp(X[i]) * X[i]) + exp(X[i]))'
"""

from __future__ import annotations

import math

from tilecraft.errors import AutodiffError
from tilecraft.te.expr import (
    BITWISE_BINARY,
    ROUNDING_UNARY,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    IterVar,
    Load,
    Logical,
    LogicalOp,
    Not,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from tilecraft.te.visit import walk


def _const(value: float, like: Expr) -> Const:
    return Const(float(value), like.dtype)


def _mul(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and a.value == 1:
        return b
    if isinstance(b, Const) and b.value == 1:
        return a
    return Binary(BinaryOp.MUL, a, b)


def _add(a: Expr | None, b: Expr | None) -> Expr | None:
    if a is None:
        return b
    if b is None:
        return a
    return Binary(BinaryOp.ADD, a, b)


def _neg(a: Expr | None) -> Expr | None:
    return None if a is None else Unary(UnaryOp.NEG, a)


def _refuse_bitwise(expr: Expr, load: Load, compute: str) -> None:
    """Raise AutodiffError naming the bitwise operation of ``expr`` that reads ``load``, if
    any (and, or, xor, not, shifts: integer bit patterns have no derivative)."""
    for node in walk(expr):
        bitwise = (isinstance(node, Binary) and node.op in BITWISE_BINARY) or \
            (isinstance(node, Unary) and node.op is UnaryOp.BITWISE_NOT)
        if bitwise and any(inner == load for inner in walk(node)):
            raise AutodiffError(
                f"compute {compute}: the bitwise operation '{node.op.value}' in {node} reads "
                f"{load}; bitwise operations are not differentiable (integer bit patterns), "
                "stop the gradient before this compute")


def derivative(expr: Expr, load: Load, compute: str = "?") -> Expr | None:
    """d expr / d load, or ``None`` for zero."""
    if expr == load:
        return _const(1.0, expr)
    if isinstance(expr, (Const, IterVar, Var, Load, Compare, Logical, Not)):
        return None
    if not expr.dtype.is_float:
        if any(node == load for node in walk(expr)):
            _refuse_bitwise(expr, load, compute)
            raise AutodiffError(
                f"compute {compute}: {expr} turns {load} into the integer type "
                f"{expr.dtype.value}, which has no derivative; keep the path to the output "
                "in floating point or stop the gradient before this compute")
        return None
    if isinstance(expr, Select):
        dt = derivative(expr.true_value, load, compute)
        df = derivative(expr.false_value, load, compute)
        if dt is None and df is None:
            return None
        zero = _const(0.0, expr)
        return Select(expr.cond, dt if dt is not None else zero, df if df is not None else zero)
    if isinstance(expr, Cast):
        inner = derivative(expr.x, load, compute)
        return None if inner is None else Cast(expr.to, inner)
    if isinstance(expr, Unary):
        return _unary(expr, derivative(expr.x, load, compute))
    if isinstance(expr, Binary):
        da = derivative(expr.a, load, compute)
        db = derivative(expr.b, load, compute)
        if da is None and db is None:
            return None
        return _binary(expr, da, db)
    raise AutodiffError(f"compute {compute}: no derivative rule for {expr} "
                        f"({type(expr).__name__}); it is not differentiable")


def _unary(expr: Unary, dx: Expr | None) -> Expr | None:
    if dx is None:
        return None
    x, op = expr.x, expr.op
    if op is UnaryOp.NEG:
        return _neg(dx)
    if op is UnaryOp.ABS:
        return Select(Compare(CompareOp.GE, x, _const(0.0, x)), dx, Unary(UnaryOp.NEG, dx))
    if op is UnaryOp.EXP:
        return _mul(dx, expr)
    if op is UnaryOp.LOG:
        return Binary(BinaryOp.DIV, dx, x)
    if op is UnaryOp.SQRT:
        return Binary(BinaryOp.DIV, _mul(dx, _const(0.5, x)), expr)
    if op is UnaryOp.TANH:
        return _mul(dx, Binary(BinaryOp.SUB, _const(1.0, x), Binary(BinaryOp.MUL, expr, expr)))
    if op is UnaryOp.ERF:  # 2/sqrt(pi) * exp(-x^2)
        gauss = Unary(UnaryOp.EXP, Unary(UnaryOp.NEG, Binary(BinaryOp.MUL, x, x)))
        return _mul(dx, Binary(BinaryOp.MUL, _const(2.0 / math.sqrt(math.pi), x), gauss))
    if op is UnaryOp.SIGMOID:
        return _mul(dx, Binary(BinaryOp.MUL, expr,
                               Binary(BinaryOp.SUB, _const(1.0, x), expr)))
    if op in ROUNDING_UNARY:   # piecewise constant: 0 (as PyTorch's floor / ceil / round)
        return _const(0.0, x)
    one = _const(1.0, x)
    if op is UnaryOp.SIN:
        return _mul(dx, Unary(UnaryOp.COS, x))
    if op is UnaryOp.COS:
        return _neg(_mul(dx, Unary(UnaryOp.SIN, x)))
    if op is UnaryOp.TAN:
        return _mul(dx, Binary(BinaryOp.ADD, one, Binary(BinaryOp.MUL, expr, expr)))
    if op in (UnaryOp.ASIN, UnaryOp.ACOS):
        root = Unary(UnaryOp.SQRT, Binary(BinaryOp.SUB, one, Binary(BinaryOp.MUL, x, x)))
        slope = Binary(BinaryOp.DIV, dx, root)
        return slope if op is UnaryOp.ASIN else _neg(slope)
    if op is UnaryOp.ATAN:
        return Binary(BinaryOp.DIV, dx, Binary(BinaryOp.ADD, one, Binary(BinaryOp.MUL, x, x)))
    if op is UnaryOp.SINH:
        return _mul(dx, Unary(UnaryOp.COSH, x))
    if op is UnaryOp.COSH:
        return _mul(dx, Unary(UnaryOp.SINH, x))
    if op in (UnaryOp.ASINH, UnaryOp.ACOSH):   # dx / sqrt(x^2 + 1), dx / sqrt(x^2 - 1)
        square = Binary(BinaryOp.MUL, x, x)
        shifted = Binary(BinaryOp.ADD if op is UnaryOp.ASINH else BinaryOp.SUB, square, one)
        return Binary(BinaryOp.DIV, dx, Unary(UnaryOp.SQRT, shifted))
    if op is UnaryOp.ATANH:
        return Binary(BinaryOp.DIV, dx, Binary(BinaryOp.SUB, one, Binary(BinaryOp.MUL, x, x)))
    raise AutodiffError(f"no derivative rule for {op.value}")  # pragma: no cover


def _binary(expr: Binary, da: Expr | None, db: Expr | None) -> Expr | None:
    a, b, op = expr.a, expr.b, expr.op
    zero = _const(0.0, expr)
    if op is BinaryOp.ADD:
        return _add(da, db)
    if op is BinaryOp.SUB:
        return _add(da, _neg(db))
    if op is BinaryOp.MUL:
        return _add(None if da is None else _mul(da, b), None if db is None else _mul(a, db))
    if op is BinaryOp.DIV:  # (da*b - a*db) / b^2, written as da/b - (a/b)*db/b
        first = None if da is None else Binary(BinaryOp.DIV, da, b)
        second = None if db is None else Binary(
            BinaryOp.DIV, _mul(Binary(BinaryOp.DIV, a, b), db), b)
        return _add(first, _neg(second))
    if op in (BinaryOp.MAX, BinaryOp.MIN):  # the branch the forward took
        cmp = CompareOp.GE if op is BinaryOp.MAX else CompareOp.LE
        return Select(Compare(cmp, a, b), da if da is not None else zero,
                      db if db is not None else zero)
    raise AutodiffError(f"no derivative rule for '{op.value}' in {expr}")


def hoist_guards(expr: Expr) -> tuple[list[Expr], Expr]:
    """``(conditions, value)`` with ``expr == select(all(conditions), value, 0)``, taking the
    conditions of ``select(c, v, 0)`` factors out of products and quotients."""
    if isinstance(expr, Select) and isinstance(expr.false_value, Const) \
            and expr.false_value.value == 0:
        conds, value = hoist_guards(expr.true_value)
        return _split(expr.cond) + conds, value
    if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
        ca, va = hoist_guards(expr.a)
        cb, vb = hoist_guards(expr.b)
        return ca + cb, _mul(va, vb)
    if isinstance(expr, Binary) and expr.op is BinaryOp.DIV:
        ca, va = hoist_guards(expr.a)
        return ca, Binary(BinaryOp.DIV, va, expr.b)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        cx, vx = hoist_guards(expr.x)
        return cx, Unary(UnaryOp.NEG, vx)
    return [], expr


def _split(cond: Expr) -> list[Expr]:
    if isinstance(cond, Logical) and cond.op is LogicalOp.AND:
        return _split(cond.a) + _split(cond.b)
    return [cond]
