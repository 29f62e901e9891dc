"""Clamping loads that only a select guard keeps inside their tensor.

te accepts ``select(h >= 1, A[h - 1], 0.0)`` because the guard proves ``h - 1 >= 0`` where the
load is taken. Code generators that evaluate both sides of a select (vector blends, predicated
GPU code) would still read ``A[-1]``, so lowering clamps such indices into the tensor:
``A[max(h - 1, 0)]``. The clamp never changes a value that is used: where the guard holds, the
index was in bounds already. Indices that plain interval analysis proves in bounds are left
alone, and only the side that can be violated is clamped.

>>> from tilecraft import te
>>> A = te.placeholder((8,), name="A")
>>> B = te.compute((8,), lambda h: te.select(h >= 1, A[h - 1], 0.0) + A[h], name="B")
>>> print(clamp_guarded_loads(B.body))
(select((h >= 1), A[max((h - 1), 0)], 0.0) + A[h])
"""

from __future__ import annotations

from tilecraft.te.bounds import prove_nonnegative
from tilecraft.te.expr import Binary, BinaryOp, Const, Expr, Load
from tilecraft.te.visit import children, rebuild


def clamp_sides(index: Expr, extent: int) -> tuple[bool, bool]:
    """Whether ``index`` needs clamping from below (to 0) and from above (to ``extent - 1``),
    judged by interval analysis without any guard facts."""
    below = not prove_nonnegative(index)
    above = not prove_nonnegative(Binary(BinaryOp.SUB, Const(extent - 1, index.dtype), index))
    return below, above


def clamp_index(index: Expr, extent: int) -> Expr:
    """``index`` clamped into ``[0, extent - 1]`` on the sides that need it."""
    below, above = clamp_sides(index, extent)
    if above:
        index = Binary(BinaryOp.MIN, index, Const(extent - 1, index.dtype))
    if below:
        index = Binary(BinaryOp.MAX, index, Const(0, index.dtype))
    return index


def clamp_guarded_loads(expr: Expr) -> Expr:
    """``expr`` with the index of every load clamped where only a guard keeps it in bounds."""
    kids = children(expr)
    new_kids = tuple(clamp_guarded_loads(kid) for kid in kids)
    if isinstance(expr, Load):
        shape = expr.tensor.shape
        clamped = tuple(clamp_index(index, extent) for index, extent in zip(new_kids, shape))
        if any(new is not old for new, old in zip(clamped, kids)):
            return Load(expr.tensor, clamped)
        return expr
    if any(new is not old for new, old in zip(new_kids, kids)):
        return rebuild(expr, new_kids)
    return expr


__all__ = ["clamp_guarded_loads", "clamp_index", "clamp_sides"]
