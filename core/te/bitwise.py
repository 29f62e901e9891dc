"""Bitwise functions of the te DSL: and, or, xor, not and the two shifts, on integers only.

Python's ``&``, ``|`` and ``~`` on te expressions are the logical operators on conditions, so
the bitwise ones are functions. Semantics (:mod:`tilecraft.reference.bitwise` computes them)
are ONNX's: the operators act on the two's-complement bits of the operands' width; a shift
amount outside ``[0, bits)`` (negative, or the width or more) is defined — a left shift gives
0, a right shift the sign (-1 for a negative signed value, else 0); a right shift is arithmetic
for int8 / int32 and logical for uint8. Every code generator produces these values; none
relies on C's or LLVM's undefined shifts.

>>> from tilecraft import te
>>> A = te.placeholder((4,), "int32", name="A")
>>> print(te.compute((4,), lambda i: te.bitwise_and(A[i], 0xFF), name="B").statement())
B[i] = A[i] & 255
>>> print(te.compute((4,), lambda i: te.right_shift(A[i], 3), name="C").statement())
C[i] = A[i] >> 3
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.te.expr import BinaryOp, Expr, ExprLike, UnaryOp, binary, int_range, unary

__all__ = ["bitwise_and", "bitwise_interval", "bitwise_not", "bitwise_not_interval",
           "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]

Interval = tuple[int, int]


def bitwise_and(a: ExprLike, b: ExprLike) -> Expr:
    """The bits set in both ``a`` and ``b`` (integers of one dtype)."""
    return binary(BinaryOp.BITWISE_AND, a, b)


def bitwise_or(a: ExprLike, b: ExprLike) -> Expr:
    """The bits set in ``a`` or ``b``."""
    return binary(BinaryOp.BITWISE_OR, a, b)


def bitwise_xor(a: ExprLike, b: ExprLike) -> Expr:
    """The bits set in exactly one of ``a`` and ``b``."""
    return binary(BinaryOp.BITWISE_XOR, a, b)


def bitwise_not(x: ExprLike) -> Expr:
    """``x`` with every bit flipped (``-x - 1`` for signed types, ``255 - x`` for uint8)."""
    return unary(UnaryOp.BITWISE_NOT, x)


def left_shift(a: ExprLike, amount: ExprLike) -> Expr:
    """``a`` shifted left by ``amount`` bits (``amount`` of ``a``'s dtype); the bits shifted
    out drop (a signed value wraps), an amount outside ``[0, bits)`` gives 0."""
    return binary(BinaryOp.SHIFT_LEFT, a, amount)


def right_shift(a: ExprLike, amount: ExprLike) -> Expr:
    """``a`` shifted right by ``amount`` bits: arithmetic for a signed dtype (the sign fills),
    logical for an unsigned one; an amount outside ``[0, bits)`` gives -1 for a negative
    value, else 0."""
    return binary(BinaryOp.SHIFT_RIGHT, a, amount)


# value ranges (for tilecraft.te.bounds: an index such as ``i >> 1`` or ``i & 7``) -----------
def bitwise_interval(op: BinaryOp, a: Interval, b: Interval, dtype: DType) -> Interval | None:
    """Bounds of ``a op b`` for the bitwise ``op`` on ``dtype`` values in the intervals ``a``
    and ``b``, or None when not known (operands that may leave the dtype's range, a left
    shift that may wrap, and / or / xor of negative values).

    >>> bitwise_interval(BinaryOp.SHIFT_RIGHT, (0, 75), (1, 1), DType.INT32)
    (0, 37)
    >>> bitwise_interval(BinaryOp.BITWISE_AND, (-50, 75), (0, 7), DType.INT32)
    (0, 7)
    >>> bitwise_interval(BinaryOp.BITWISE_XOR, (0, 37), (1, 1), DType.INT32)
    (0, 63)
    """
    low, high = int_range(dtype)
    if min(a[0], b[0]) < low or max(a[1], b[1]) > high:
        return None
    if op is BinaryOp.BITWISE_AND:   # x & m lies in [0, m] for m >= 0, whatever x is
        tops = [side[1] for side in (a, b) if side[0] >= 0]
        return (0, min(tops)) if tops else None
    if op in (BinaryOp.BITWISE_OR, BinaryOp.BITWISE_XOR):
        if a[0] < 0 or b[0] < 0:
            return None
        top = (1 << max(a[1], b[1]).bit_length()) - 1
        return (max(a[0], b[0]) if op is BinaryOp.BITWISE_OR else 0), top
    bits = dtype.bits
    # x >> s and x << s are monotonic in x and in s: the extremes lie at the corners
    if op is BinaryOp.SHIFT_RIGHT:
        if 0 <= b[0] and b[1] < bits:
            amounts = b
        else:   # an amount out of range acts as bits - 1 (signed) or bits (unsigned: 0)
            amounts = (max(0, min(b[0], bits - 1)), bits - 1 if dtype.is_signed else bits)
        corners = [x >> s for x in a for s in amounts]
        return min(corners), max(corners)
    if op is BinaryOp.SHIFT_LEFT and 0 <= b[0] and b[1] < bits:
        corners = [x << s for x in a for s in b]
        if min(corners) >= low and max(corners) <= high:
            return min(corners), max(corners)
    return None


def bitwise_not_interval(x: Interval, dtype: DType) -> Interval | None:
    """Bounds of ``~x`` for ``x`` in the interval ``x`` of ``dtype`` values: ``-x - 1``
    wrapped (``255 - x`` for uint8).

    >>> bitwise_not_interval((0, 9), DType.INT32), bitwise_not_interval((0, 9), DType.UINT8)
    ((-10, -1), (246, 255))
    """
    low, high = int_range(dtype)
    if x[0] < low or x[1] > high:
        return None
    if dtype.is_signed:
        return -x[1] - 1, -x[0] - 1
    return high - x[1], high - x[0]
