"""Traversal and rewriting of expression trees.

>>> from tilecraft import te
>>> A = te.placeholder((8,), name="A")
>>> i = te.reduce_axis(4, name="i")
>>> e = A[i * 2] + 1.0
>>> [load.tensor.name for load in loads_in(e)]
['A']
>>> str(substitute(e, {i: te.const(3)}))
'(A[(3 * 2)] + 1.0)'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from tilecraft.te.expr import (
    Binary,
    Cast,
    Compare,
    Const,
    Expr,
    IterVar,
    Load,
    Logical,
    Not,
    Reduce,
    Select,
    Unary,
    Var,
)


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct sub-expressions of ``expr``."""
    if isinstance(expr, (Binary, Compare, Logical)):
        return (expr.a, expr.b)
    if isinstance(expr, (Unary, Not, Cast)):
        return (expr.x,)
    if isinstance(expr, Select):
        return (expr.cond, expr.true_value, expr.false_value)
    if isinstance(expr, Load):
        return expr.indices
    if isinstance(expr, Reduce):
        return (expr.body,)
    extension = getattr(expr, "ir_children", None)
    if extension is not None:  # nodes of IRs built on te (e.g. Kernel IR's BufferLoad)
        return extension()
    return ()


def walk(expr: Expr) -> Iterator[Expr]:
    """Every node of ``expr``, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def loads_in(expr: Expr) -> list[Load]:
    return [node for node in walk(expr) if isinstance(node, Load)]


def vars_in(expr: Expr) -> list[IterVar | Var]:
    """Variables occurring in ``expr``, in order of first occurrence, without repeats."""
    seen: dict[IterVar | Var, None] = {}
    for node in walk(expr):
        if isinstance(node, (IterVar, Var)):
            seen.setdefault(node, None)
    return list(seen)


def rebuild(expr: Expr, new_children: tuple[Expr, ...]) -> Expr:
    """A copy of ``expr`` with its children replaced (no dtype re-checking)."""
    if isinstance(expr, Binary):
        return Binary(expr.op, *new_children)
    if isinstance(expr, Compare):
        return Compare(expr.op, *new_children)
    if isinstance(expr, Logical):
        return Logical(expr.op, *new_children)
    if isinstance(expr, Unary):
        return Unary(expr.op, new_children[0])
    if isinstance(expr, Not):
        return Not(new_children[0])
    if isinstance(expr, Cast):
        return Cast(expr.to, new_children[0])
    if isinstance(expr, Select):
        return Select(*new_children)
    if isinstance(expr, Load):
        return Load(expr.tensor, tuple(new_children))
    if isinstance(expr, Reduce):
        return Reduce(expr.op, new_children[0], expr.axes)
    extension = getattr(expr, "ir_rebuild", None)
    if extension is not None:
        return extension(tuple(new_children))
    return expr


def transform(expr: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rewrite bottom-up-after-top-down: ``fn`` may return a replacement (not visited further)
    or ``None`` to recurse into the children."""
    replaced = fn(expr)
    if replaced is not None:
        return replaced
    kids = children(expr)
    if not kids:
        return expr
    new_kids = tuple(transform(kid, fn) for kid in kids)
    if all(new is old for new, old in zip(new_kids, kids)):
        return expr
    return rebuild(expr, new_kids)


def substitute(expr: Expr, mapping: Mapping[IterVar | Var, Expr]) -> Expr:
    """Replace variables by expressions."""
    if not mapping:
        return expr

    def replace(node: Expr) -> Expr | None:
        if isinstance(node, (IterVar, Var)):
            return mapping.get(node, node)
        return None

    return transform(expr, replace)


def is_const(expr: Expr, value: int | float | None = None) -> bool:
    return isinstance(expr, Const) and (value is None or expr.value == value)
