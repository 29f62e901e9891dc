"""A small algebraic simplifier for the integer index expressions lowering produces.

It folds integer constants (with the wrap-around and floor semantics of the IR), drops
identities (``x + 0``, ``x * 1``, ``x // 1``), merges constant offsets (``(x + 1) - 1``) and
resolves selects and comparisons on constants. Floating-point arithmetic is left untouched:
folding it in Python would change its rounding. Works on te expressions and on Kernel IR
expressions (with :class:`~tilecraft.kernel_ir.nodes.BufferLoad`) alike.

>>> from tilecraft.te import Var, const
>>> i = Var("i")
>>> str(simplify((i + 0) * 1 + const(2) * 3))
'(i + 6)'
>>> str(simplify((i + 1) - 1))
'i'
>>> str(simplify(const(-7) // 2)), str(simplify(const(-7) % 2))
('-4', '1')

:func:`simplify_stmt` simplifies every expression of a statement tree (a
:class:`~tilecraft.kernel_ir.visitor.KernelTransformer`), returning the very same tree when
nothing changes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import BufferLoad, Stmt
from tilecraft.kernel_ir.visitor import KernelTransformer
from tilecraft.reference.bitwise import fold_shift_left, fold_shift_right
from tilecraft.te.expr import (
    SHIFT_BINARY,
    Binary,
    BinaryOp,
    Cast,
    Compare,
    CompareOp,
    Const,
    Expr,
    Logical,
    LogicalOp,
    Not,
    Select,
    Unary,
    UnaryOp,
    int_range,
)
from tilecraft.te.visit import children, rebuild

_INT_FOLD: dict[BinaryOp, Callable[[int, int], int]] = {
    BinaryOp.ADD: operator.add,
    BinaryOp.SUB: operator.sub,
    BinaryOp.MUL: operator.mul,
    BinaryOp.FLOORDIV: operator.floordiv,
    BinaryOp.MOD: operator.mod,
    BinaryOp.MAX: max,
    BinaryOp.MIN: min,
    # Python's & | ^ on in-range values are the two's-complement ones of any width
    BinaryOp.BITWISE_AND: operator.and_,
    BinaryOp.BITWISE_OR: operator.or_,
    BinaryOp.BITWISE_XOR: operator.xor,
}

_COMPARE_FOLD: dict[CompareOp, Callable[[object, object], bool]] = {
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
    CompareOp.EQ: operator.eq,
    CompareOp.NE: operator.ne,
}


def wrap_int(value: int, dtype: DType) -> int:
    """``value`` wrapped into the range of the integer ``dtype`` (two's complement).

    >>> wrap_int(300, DType.INT8), wrap_int(-1, DType.UINT8)
    (44, 255)
    """
    lo, hi = int_range(dtype)
    span = hi - lo + 1
    return (value - lo) % span + lo


def simplify(expr: Expr) -> Expr:
    """``expr`` with integer constants folded and trivial identities removed."""
    kids = _children(expr)
    if kids:
        new_kids = tuple(simplify(kid) for kid in kids)
        if any(new is not old for new, old in zip(new_kids, kids)):
            expr = _rebuild(expr, new_kids)
    return _simplify_node(expr)


def _children(expr: Expr) -> tuple[Expr, ...]:
    if isinstance(expr, BufferLoad):
        return expr.indices
    return children(expr)


def _rebuild(expr: Expr, kids: tuple[Expr, ...]) -> Expr:
    if isinstance(expr, BufferLoad):
        return BufferLoad(expr.buffer, kids)
    return rebuild(expr, kids)


def _int_const(expr: Expr) -> int | None:
    if isinstance(expr, Const) and expr.dtype.is_int:
        return int(expr.value)
    return None


def _simplify_node(expr: Expr) -> Expr:
    if isinstance(expr, Binary) and expr.dtype.is_int:
        return _simplify_int_binary(expr)
    if isinstance(expr, Unary) and expr.op in (UnaryOp.NEG, UnaryOp.BITWISE_NOT):
        value = _int_const(expr.x)
        if value is not None:
            folded = -value if expr.op is UnaryOp.NEG else ~value
            return Const(wrap_int(folded, expr.dtype), expr.dtype)
    if isinstance(expr, Cast):
        value = _int_const(expr.x)
        if value is not None and expr.to.is_int:
            return Const(wrap_int(value, expr.to), expr.to)
        if value is not None and expr.to is DType.FLOAT32:
            return Const(float(value), expr.to)
    if isinstance(expr, Compare):
        a, b = expr.a, expr.b
        if isinstance(a, Const) and isinstance(b, Const) and a.dtype.is_int:
            return Const(bool(_COMPARE_FOLD[expr.op](a.value, b.value)), DType.BOOL)
    if isinstance(expr, Logical):
        return _simplify_logical(expr)
    if isinstance(expr, Not) and isinstance(expr.x, Const):
        return Const(not expr.x.value, DType.BOOL)
    if isinstance(expr, Select) and isinstance(expr.cond, Const):
        return expr.true_value if expr.cond.value else expr.false_value
    return expr


def _simplify_logical(expr: Logical) -> Expr:
    for const_side, other in ((expr.a, expr.b), (expr.b, expr.a)):
        if isinstance(const_side, Const):
            if expr.op is LogicalOp.AND:
                return other if const_side.value else Const(False, DType.BOOL)
            return Const(True, DType.BOOL) if const_side.value else other
    return expr


def _simplify_int_binary(expr: Binary) -> Expr:
    op, a, b, dtype = expr.op, expr.a, expr.b, expr.dtype
    ca, cb = _int_const(a), _int_const(b)
    if ca is not None and cb is not None:
        if op in (BinaryOp.FLOORDIV, BinaryOp.MOD) and cb == 0:
            return expr
        if op in SHIFT_BINARY:   # ONNX's total shifts (tilecraft.reference.bitwise)
            shift = fold_shift_left if op is BinaryOp.SHIFT_LEFT else fold_shift_right
            return Const(shift(wrap_int(ca, dtype), wrap_int(cb, dtype), dtype), dtype)
        return Const(wrap_int(_INT_FOLD[op](ca, cb), dtype), dtype)
    if op is BinaryOp.ADD:
        if ca == 0:
            return b
        if cb == 0:
            return a
        if cb is not None:
            return _or(_merge_offset(a, cb, dtype), expr)
        if ca is not None:
            return _or(_merge_offset(b, ca, dtype), Binary(BinaryOp.ADD, b, a))
    if op is BinaryOp.SUB:
        if cb == 0:
            return a
        if cb is not None:
            return _or(_merge_offset(a, -cb, dtype), expr)
    if op is BinaryOp.MUL:
        if ca == 1:
            return b
        if cb == 1:
            return a
        if ca == 0 or cb == 0:
            return Const(0, dtype)
    if op is BinaryOp.FLOORDIV and cb == 1:
        return a
    if op is BinaryOp.MOD and cb == 1:
        return Const(0, dtype)
    return expr


def _or(first: Expr | None, second: Expr) -> Expr:
    return second if first is None else first


def _merge_offset(base: Expr, offset: int, dtype: DType) -> Expr | None:
    """``base + offset`` with ``base``'s own constant offset folded in, or None if none."""
    if isinstance(base, Binary) and base.op in (BinaryOp.ADD, BinaryOp.SUB):
        inner = _int_const(base.b)
        if inner is not None:
            total = (inner if base.op is BinaryOp.ADD else -inner) + offset
            return _with_offset(base.a, total, dtype)
    if offset < 0:
        return _with_offset(base, offset, dtype)
    return None


def _with_offset(base: Expr, offset: int, dtype: DType) -> Expr:
    if offset == 0:
        return base
    if offset < 0:
        return Binary(BinaryOp.SUB, base, Const(wrap_int(-offset, dtype), dtype))
    return Binary(BinaryOp.ADD, base, Const(wrap_int(offset, dtype), dtype))


class _Simplifier(KernelTransformer):
    def visit_expr(self, expr: Expr) -> Expr:
        return simplify(expr)


def simplify_stmt(stmt: Stmt) -> Stmt:
    """``stmt`` with every index, value, condition, extent and region base simplified.

    >>> from tilecraft.dtypes import DType
    >>> from tilecraft.kernel_ir.nodes import Buffer, For, LoopKind, Store
    >>> from tilecraft.te import Var, const
    >>> A = Buffer("A", (4,), DType.FLOAT32)
    >>> i = Var("i")
    >>> print(simplify_stmt(For(i, const(2) * 2, LoopKind.SERIAL,
    ...                         Store(A, ((i + 1) - 1,), const(0.0)))))
    for i in serial(4):
      A[i] = 0.0
    """
    return _Simplifier().visit(stmt)


__all__ = ["simplify", "simplify_stmt", "wrap_int"]
