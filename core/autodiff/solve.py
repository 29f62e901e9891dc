"""Solve the index equations of one read over the integers (thesis §4.6.1, Eq. 4.9).

With the gradient's own indices ``z`` as constants, ``A u = z`` is solved through the Smith
normal form ``U A V = D``: ``y_i = (U z)_i / d_i`` for the first ``rank`` entries (a
divisibility condition when ``d_i > 1``: strided reads), ``(U z)_i = 0`` for the rows past the
rank, and ``u = V y`` where the entries of ``y`` past the rank are free. The free directions
(the kernel of ``A``, put in column echelon form) become new reduce loops; each is bounded
by the range of one unknown it moves (the one giving the fewest iterations), starting at the
first value that range allows, and every unknown's range is kept as a condition (a select in
the gradient) unless interval analysis proves it.

>>> from tilecraft import te
>>> A = te.placeholder((5, 3), name="A")
>>> B = te.placeholder((3, 7), name="B")
>>> k = te.reduce_axis(3, name="k")
>>> C = te.compute((5, 7), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> from tilecraft.autodiff.indices import IndexSystem
>>> load_a = C.body.body.a
>>> z = te.compute((5, 3), lambda i, k: 0.0).axes
>>> solution = solve(IndexSystem.of(C, load_a), z)
>>> [axis.extent for axis in solution.reduce_axes], solution.conditions
([7], [])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft.autodiff.indices import IndexSystem
from tilecraft.autodiff.linexpr import LinExpr
from tilecraft.autodiff.smith import column_echelon, smith_normal_form
from tilecraft.te.expr import (
    AxisKind,
    Binary,
    BinaryOp,
    Compare,
    CompareOp,
    Expr,
    IterVar,
    Var,
    const,
)
from tilecraft.te.tensor import reduce_axis


@dataclass(frozen=True)
class Solution:
    """Every unknown as a linear form over ``z``, the new reduce axes and floor divisions;
    the conditions under which such a point is a real solution."""

    values: dict[IterVar | Var, LinExpr]
    reduce_axes: tuple[IterVar, ...]
    conditions: list[Expr]
    #: the part of ``conditions`` that keeps one unknown inside its range, by unknown
    range_conditions: dict[IterVar | Var, list[Expr]]
    #: the floor divisions of a dilated walk (see ``solve``): term -> (numerator, divisor,
    #: the condition that the division is exact)
    divisions: dict[Expr, tuple[LinExpr, int, Expr]]


def solve(system: IndexSystem, z: Sequence[IterVar], axis_prefix: str = "r_",
          dilate: bool = False) -> Solution:
    """The solutions of ``system`` at the gradient's point ``z``. With ``dilate``, a free
    direction that moves an unknown by ``|c| > 1`` per step walks that unknown itself (all of
    its range) and keeps the exact division as a condition, instead of walking ``1/|c|`` of
    it: more iterations, but affine in the loop (a strided conv's data gradient reads the
    output gradient dilated by the stride, a contraction like the forward's)."""
    unknowns = system.unknowns
    conditions: list[Expr] = []
    rows: list[tuple[LinExpr, LinExpr]] = []
    # an unknown a row sets to a point's index outright (a floordiv/mod pair of a reshape:
    # q = z0, m = z1) is known in the pair rows: i0*12 + i1*4 + i2 = 12*z0 + z1 is then a
    # mixed-radix number whose digits follow from z alone (no new loop)
    direct = {form.terms[0][0]: LinExpr.of(z[index]) - form.constant
              for form, index in system.rows
              if index is not None and len(form.terms) == 1 and form.terms[0][1] == 1}
    for form, index in system.rows:
        target = (LinExpr.of(z[index]) if index is not None else LinExpr.of(0)) - form.constant
        known = [(u, c) for u, c in form.terms if u in direct] if index is None else []
        if known and len(known) < len(form.terms):
            rest = LinExpr.build({u: c for u, c in form.terms if u not in direct}, 0)
            digits = _mixed_radix(system, rest)
            if digits is not None:
                for u, c in known:
                    target = target - direct[u] * c
                rows.extend(_split_digits(digits, target, conditions))
                continue
        digits = _mixed_radix(system, form)
        if digits is None:
            rows.append((form - form.constant, target))
            continue
        rows.extend(_split_digits(digits, target, conditions))
    matrix = [[form.as_dict().get(u, 0) for u in unknowns] for form, _ in rows]
    rhs = [target for _, target in rows]
    snf = smith_normal_form(matrix, columns=len(unknowns))
    rank = snf.rank
    transformed = []
    for row in snf.left:
        total = LinExpr.of(0)
        for coef, value in zip(row, rhs):
            if coef:
                total = total + value * coef
        transformed.append(total)
    y: list[LinExpr] = []
    for i in range(rank):
        divisor = snf.diagonal_matrix[i][i]
        value = transformed[i]
        quotient = value.floordiv(divisor)
        if divisor > 1 and not _exact(value, divisor):  # strided read: only multiples
            conditions.append(Compare(CompareOp.EQ, Binary(BinaryOp.MOD, value.to_expr(),
                                                            const(divisor)), const(0)))
        y.append(quotient)
    for value in transformed[rank:]:
        _require_zero(value, conditions)

    # particular solution, then the kernel in column echelon form (rows by range size)
    particular = []
    for k in range(len(unknowns)):
        total = LinExpr.of(0)
        for j in range(rank):
            if snf.right[k][j]:
                total = total + y[j] * snf.right[k][j]
        particular.append(total)
    order = sorted(range(len(unknowns)), key=lambda k: (_size(system, unknowns[k]), k))
    kernel_rows = [snf.right[k][rank:] for k in order]
    echelon = column_echelon(kernel_rows) if kernel_rows and kernel_rows[0] else []
    free = len(echelon[0]) if echelon and echelon[0] else 0
    kernel = [[0] * free for _ in unknowns]
    for position, k in enumerate(order):
        kernel[k] = list(echelon[position]) if free else []

    params: list[LinExpr] = []
    axes: list[tuple[int, IterVar]] = []  # (the unknown it walks, the axis)
    divisions: dict[Expr, tuple[LinExpr, int, Expr]] = {}
    walked_values: dict[int, LinExpr] = {}
    for col in range(free):
        best = None
        for k in range(len(unknowns)):
            coef = kernel[k][col]
            if coef == 0 or any(kernel[k][later] for later in range(col + 1, free)):
                continue
            low, high = system.ranges[unknowns[k]]
            iterations = -(-(high - low + 1) // abs(coef))
            if _walks(dilate, unknowns[k], coef):
                iterations = high - low + 1
            key = (iterations, not _walks(dilate, unknowns[k], coef), abs(coef))
            if best is None or key < best[0]:
                best = (key, k, coef)
        assert best is not None, "a kernel column always has a pivot row"
        (iterations, _, _), k, coef = best
        known = particular[k]
        for earlier in range(col):
            if kernel[k][earlier]:
                known = known + params[earlier] * kernel[k][earlier]
        low, high = system.ranges[unknowns[k]]
        if _walks(dilate, unknowns[k], coef):  # walk u: t = (u - known) / coef
            axis = reduce_axis(iterations, name=f"{axis_prefix}{unknowns[k].name}")
            axes.append((k, axis))
            walked = LinExpr.of(axis) + low
            numerator = walked - known if coef > 0 else known - walked
            step = numerator.floordiv(abs(coef))
            if numerator.interval() != (0, 0) and not _exact(numerator, abs(coef)):
                exact = Compare(CompareOp.EQ, Binary(BinaryOp.MOD, numerator.to_expr(),
                                                     const(abs(coef))), const(0))
                conditions.append(exact)
                divisions[step.terms[0][0]] = (numerator, abs(coef), exact)
            params.append(step)
            walked_values[k] = walked  # itself, not known + coef*t (equal when exact)
            continue
        if coef > 0:  # low <= known + coef*t  ->  t >= ceil((low - known) / coef)
            start = (LinExpr.of(low) - known + (coef - 1)).floordiv(coef)
        else:  # known + coef*t <= high  ->  t >= ceil((known - high) / |coef|)
            start = (known - high + (-coef - 1)).floordiv(-coef)
        if iterations == 1:  # one value: no loop (a reshape's split of a flat index)
            params.append(start)
            continue
        # named after the forward variable it walks: r_j walks the j of the forward compute
        axis = reduce_axis(iterations, name=f"{axis_prefix}{unknowns[k].name}")
        axes.append((k, axis))
        params.append(start + LinExpr.of(axis))

    values: dict[IterVar | Var, LinExpr] = {}
    range_conditions: dict[IterVar | Var, list[Expr]] = {}
    for k, unknown in enumerate(unknowns):
        total = particular[k]
        for col in range(free):
            if kernel[k][col]:
                total = total + params[col] * kernel[k][col]
        total = walked_values.get(k, total)
        values[unknown] = total
        low, high = system.ranges[unknown]
        rng = total.interval()
        checks = []
        if rng is None or rng[0] < low:
            checks.append(Compare(CompareOp.GE, total.to_expr(), const(low)))
        if rng is None or rng[1] > high:
            checks.append(Compare(CompareOp.LE, total.to_expr(), const(high)))
        if checks:
            range_conditions[unknown] = checks
            conditions.extend(checks)
    # the new reduce loops in the forward's loop order (a conv's data gradient sums over the
    # output channels, then the taps, as the forward sums over input channels then taps)
    ordered = tuple(axis for _, axis in sorted(axes, key=lambda pair: pair[0]))
    return Solution(values, ordered, conditions, range_conditions, divisions)


def _walks(dilate: bool, unknown: IterVar | Var, coef: int) -> bool:
    """A dilated walk is for the taps of the forward (its reduce axes): walking every tap
    makes the gradient a contraction; other unknowns keep the fewest iterations."""
    return dilate and abs(coef) > 1 and isinstance(unknown, IterVar) \
        and unknown.kind is AxisKind.REDUCE


def _mixed_radix(system: IndexSystem, form: LinExpr) -> list[tuple[Expr, int, int]] | None:
    """``[(unknown, coefficient, range size)]`` by increasing coefficient when ``form`` is a
    mixed-radix number of unknowns ranging from 0 (each coefficient the previous one times the
    previous range: ``4*c + 2*(h % 2) + (w % 2)``, depth2space's channel), else ``None``: its
    digits then follow from ``z`` alone, with no new loops."""
    if len(form.terms) < 2:
        return None
    digits = []
    for unknown, coef in form.terms:
        low, high = system.ranges.get(unknown, (None, None))  # type: ignore[arg-type]
        if low != 0 or coef <= 0:
            return None
        digits.append((unknown, coef, high - low + 1))
    digits.sort(key=lambda d: d[1])
    for (_, coef, size), (_, next_coef, _) in zip(digits, digits[1:]):
        if next_coef != coef * size:
            return None
    return digits


def _split_digits(digits: list[tuple[Expr, int, int]], target: LinExpr,
                  conditions: list[Expr]) -> list[tuple[LinExpr, LinExpr]]:
    """One row ``digit == (target // coefficient) % size`` per digit (the last one without
    ``% size``; its range stays a condition), and ``target % first == 0``."""
    first = digits[0][1]
    if first > 1 and not _exact(target, first):
        conditions.append(Compare(CompareOp.EQ, Binary(BinaryOp.MOD, target.to_expr(),
                                                        const(first)), const(0)))
    rows = []
    for position, (unknown, coef, size) in enumerate(digits):
        value = target.floordiv(coef)
        if position < len(digits) - 1:
            value = LinExpr.of(Binary(BinaryOp.MOD, value.to_expr(), const(size)))
        rows.append((LinExpr.of(unknown), value))
    return rows


def _exact(value: LinExpr, divisor: int) -> bool:
    return all(c % divisor == 0 for _, c in value.terms) and value.constant % divisor == 0


def _require_zero(value: LinExpr, conditions: list[Expr]) -> None:
    rng = value.interval()
    if rng == (0, 0):
        return
    conditions.append(Compare(CompareOp.EQ, value.to_expr(), const(0)))


def _size(system: IndexSystem, unknown: IterVar | Var) -> int:
    low, high = system.ranges[unknown]
    return high - low + 1
