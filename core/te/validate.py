"""Checks a compute at construction: variable scoping, reduction placement, index bounds."""

from __future__ import annotations

from tilecraft.errors import IndexBoundsError, ReduceAxisError, ShapeError
from tilecraft.te.bounds import Affine, facts_from_condition, index_in_bounds, interval
from tilecraft.te.expr import AxisKind, Expr, IterVar, Load, Reduce, Select
from tilecraft.te.visit import children


def check_compute(name: str, axes: tuple[IterVar, ...], body: Expr) -> None:
    """Raise a :class:`~tilecraft.errors.ExpressionError` naming ``name`` if ``body`` is invalid."""
    allowed = set(axes)
    if isinstance(body, Reduce):
        seen: set[IterVar] = set()
        for axis in body.axes:
            if axis.kind is not AxisKind.REDUCE:
                raise ReduceAxisError(f"compute {name}: {axis.name} is a spatial axis and cannot "
                                      "be reduced over; create reduce axes with te.reduce_axis")
            if axis in seen:
                raise ReduceAxisError(f"compute {name}: reduce axis {axis.name} appears twice "
                                      "in the same reduction")
            seen.add(axis)
        allowed |= seen
        _check(name, body.body, allowed, [])
    else:
        _check(name, body, allowed, [])


def _check(name: str, expr: Expr, allowed: set[IterVar], facts: list[Affine]) -> None:
    if isinstance(expr, IterVar):
        if expr not in allowed:
            if expr.kind is AxisKind.REDUCE:
                raise ReduceAxisError(
                    f"compute {name}: reduce axis {expr.name} is used outside a reduction over "
                    f"it; wrap the expression in te.sum/te.max/te.min(..., axis={expr.name})")
            raise ReduceAxisError(
                f"compute {name}: index variable {expr.name} belongs to another compute; use "
                "the variables the lambda receives")
        return
    if isinstance(expr, Reduce):
        raise ReduceAxisError(
            f"compute {name}: a reduction ({expr.op.value} over "
            f"{', '.join(a.name for a in expr.axes)}) must be the whole body of a compute, "
            "not part of a larger expression; compute it as its own tensor first")
    if isinstance(expr, Select):
        _check(name, expr.cond, allowed, facts)
        _check(name, expr.true_value, allowed, facts + facts_from_condition(expr.cond, True))
        _check(name, expr.false_value, allowed, facts + facts_from_condition(expr.cond, False))
        return
    for child in children(expr):
        _check(name, child, allowed, facts)
    if isinstance(expr, Load):
        _check_load(name, expr, facts)


def _check_load(name: str, load: Load, facts: list[Affine]) -> None:
    tensor = load.tensor
    if len(load.indices) != tensor.ndim:
        raise ShapeError(f"compute {name}: {tensor.name} has {tensor.ndim} dimensions but is "
                         f"indexed with {len(load.indices)}")
    for position, (index, extent) in enumerate(zip(load.indices, tensor.shape)):
        if index_in_bounds(index, extent, None, facts):
            continue
        rng = interval(index)
        where = f"ranges over [{rng[0]}, {rng[1]}]" if rng else "has a range that cannot be bounded"
        raise IndexBoundsError(
            f"compute {name}: index {position} of {load} ({index}) {where}, but dimension "
            f"{position} of {tensor.name} has extent {extent}; guard the load with "
            f"te.select((idx >= 0) & (idx < {extent}), ..., 0) or pad {tensor.name} (ops.pad)")
