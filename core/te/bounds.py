"""Integer range analysis of index expressions: intervals, affine forms, guard facts.

Used to prove that every load stays inside its tensor (or is guarded by a select), and by
lowering to know which loads need clamping because only a guard keeps them in bounds.

>>> from tilecraft import te
>>> h = te.reduce_axis(10, name="h")
>>> interval(h * 2 + 1)
(1, 19)
>>> interval(h // 3), interval(h % 4)
((0, 3), (0, 3))
>>> from tilecraft.te import select
>>> interval(select(h + 1 < 10, h + 1, 0))
(0, 9)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tilecraft.te.bitwise import bitwise_interval, bitwise_not_interval
from tilecraft.te.expr import (
    BITWISE_BINARY,
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
    int_range,
)

Interval = tuple[int, int]
Ranges = Mapping[IterVar | Var, Interval]


def interval(expr: Expr, ranges: Ranges | None = None) -> Interval | None:
    """The smallest and largest value an integer ``expr`` can take, or ``None`` if unknown.

    IterVars range over ``[0, extent)`` unless ``ranges`` says otherwise.
    """
    ranges = ranges or {}
    if isinstance(expr, Const):
        value = int(expr.value)
        return value, value
    if isinstance(expr, (IterVar, Var)):
        if expr in ranges:
            return ranges[expr]
        if isinstance(expr, IterVar):
            return 0, expr.extent - 1
        return None
    if isinstance(expr, Binary):
        if expr.op in _ATOM_OPS and expr in ranges:  # an atom a guard narrowed (see tighten)
            return ranges[expr]
        a = interval(expr.a, ranges)
        b = interval(expr.b, ranges)
        if a is None or b is None:
            return None
        if expr.op in BITWISE_BINARY:
            return bitwise_interval(expr.op, a, b, expr.dtype)
        return _binary_interval(expr.op, a, b)
    if isinstance(expr, Unary):
        x = interval(expr.x, ranges)
        if x is None:
            return None
        if expr.op is UnaryOp.NEG:
            return -x[1], -x[0]
        if expr.op is UnaryOp.ABS:
            if x[0] >= 0:
                return x
            if x[1] <= 0:
                return -x[1], -x[0]
            return 0, max(-x[0], x[1])
        if expr.op is UnaryOp.FLOOR:
            return math.floor(x[0]), math.floor(x[1])
        if expr.op is UnaryOp.CEIL:
            return math.ceil(x[0]), math.ceil(x[1])
        if expr.op is UnaryOp.BITWISE_NOT:
            return bitwise_not_interval(x, expr.dtype)
        return None
    if isinstance(expr, Select):
        # each branch is only taken where the condition (or its negation) holds
        t = interval(expr.true_value, tighten(ranges, facts_from_condition(expr.cond, True)))
        f = interval(expr.false_value, tighten(ranges, facts_from_condition(expr.cond, False)))
        if t is None or f is None:
            return None
        return min(t[0], f[0]), max(t[1], f[1])
    if isinstance(expr, Cast) and expr.x.dtype.is_int:
        return interval(expr.x, ranges)
    if isinstance(expr, Load) and expr.dtype.is_int:
        return int_range(expr.dtype)
    return None


#: integer operations that are not affine: guards over them constrain the whole operation,
#: which facts treat as one variable (an "atom", e.g. ``h // 2`` after loop fusion)
_ATOM_OPS = frozenset({BinaryOp.FLOORDIV, BinaryOp.MOD, BinaryOp.MIN, BinaryOp.MAX,
                       BinaryOp.MUL})


def _floordiv(a: int, b: int) -> int:
    return a // b


def _binary_interval(op: BinaryOp, a: Interval, b: Interval) -> Interval | None:
    if op is BinaryOp.ADD:
        return a[0] + b[0], a[1] + b[1]
    if op is BinaryOp.SUB:
        return a[0] - b[1], a[1] - b[0]
    if op is BinaryOp.MUL:
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if op is BinaryOp.MAX:
        return max(a[0], b[0]), max(a[1], b[1])
    if op is BinaryOp.MIN:
        return min(a[0], b[0]), min(a[1], b[1])
    if op is BinaryOp.FLOORDIV:
        if b[0] <= 0 <= b[1]:
            return None
        quotients = [_floordiv(x, y) for x in a for y in b]
        return min(quotients), max(quotients)
    if op is BinaryOp.MOD:
        if b[0] != b[1] or b[0] == 0:
            return None
        divisor = b[0]
        if divisor > 0:
            if a[0] // divisor == a[1] // divisor:
                return a[0] % divisor, a[1] % divisor
            return 0, divisor - 1
        return divisor + 1, 0
    return None


@dataclass(frozen=True)
class Affine:
    """``sum(coef * var) + constant`` with integer coefficients."""

    coefs: tuple[tuple[IterVar | Var, int], ...]
    constant: int

    @staticmethod
    def of(terms: Mapping[IterVar | Var, int], constant: int) -> Affine:
        return Affine(tuple((v, c) for v, c in terms.items() if c != 0), constant)

    def terms(self) -> dict[IterVar | Var, int]:
        return dict(self.coefs)

    def __add__(self, other: Affine) -> Affine:
        terms = self.terms()
        for var, coef in other.coefs:
            terms[var] = terms.get(var, 0) + coef
        return Affine.of(terms, self.constant + other.constant)

    def scale(self, factor: int) -> Affine:
        return Affine.of({v: c * factor for v, c in self.coefs}, self.constant * factor)

    def __sub__(self, other: Affine) -> Affine:
        return self + other.scale(-1)

    def interval(self, ranges: Ranges | None = None) -> Interval | None:
        lo = hi = self.constant
        for var, coef in self.coefs:
            rng = interval(var, ranges)
            if rng is None:
                return None
            ends = (coef * rng[0], coef * rng[1])
            lo += min(ends)
            hi += max(ends)
        return lo, hi


def affine(expr: Expr) -> Affine | None:
    """``expr`` as an affine form, or ``None`` when it is not affine."""
    if isinstance(expr, Const) and expr.dtype.is_int:
        return Affine((), int(expr.value))
    if isinstance(expr, (IterVar, Var)):
        return Affine(((expr, 1),), 0)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        inner = affine(expr.x)
        return inner.scale(-1) if inner else None
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
        return affine(expr.x)
    if isinstance(expr, Binary) and expr.op in (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL):
        a, b = affine(expr.a), affine(expr.b)
        if a is None or b is None:
            return None
        if expr.op is BinaryOp.ADD:
            return a + b
        if expr.op is BinaryOp.SUB:
            return a - b
        if not a.coefs:
            return b.scale(a.constant)
        if not b.coefs:
            return a.scale(b.constant)
    return None


def affine_over_atoms(expr: Expr) -> Affine | None:
    """``expr`` as an affine form whose variables may also be non-affine integer operations
    taken whole (``(h // 2) + 2`` is ``1 * atom + 2`` with ``atom = h // 2``), or ``None``.
    For reasoning about guards only: an atom is a value, not a loop variable.

    >>> from tilecraft import te
    >>> h = te.reduce_axis(10, name="h")
    >>> form = affine_over_atoms(h // 2 + 2)
    >>> form.constant, [str(atom) for atom, _ in form.coefs]
    (2, ['(h // 2)'])
    """
    if not expr.dtype.is_int:
        return None
    if isinstance(expr, Const):
        return Affine((), int(expr.value))
    if isinstance(expr, (IterVar, Var)):
        return Affine(((expr, 1),), 0)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        inner = affine_over_atoms(expr.x)
        return inner.scale(-1) if inner else None
    if isinstance(expr, Cast) and expr.x.dtype.is_int:
        return affine_over_atoms(expr.x)
    if isinstance(expr, Binary) and expr.op in (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL):
        a, b = affine_over_atoms(expr.a), affine_over_atoms(expr.b)
        if a is not None and b is not None:
            if expr.op is BinaryOp.ADD:
                return a + b
            if expr.op is BinaryOp.SUB:
                return a - b
            if not a.coefs:
                return b.scale(a.constant)
            if not b.coefs:
                return a.scale(b.constant)
    if isinstance(expr, Binary) and expr.op in _ATOM_OPS:
        return Affine(((expr, 1),), 0)  # type: ignore[arg-type]
    return None


def facts_from_condition(cond: Expr, holds: bool = True) -> list[Affine]:
    """Affine facts ``f >= 0`` implied by ``cond`` being ``holds`` (over atoms: see
    :func:`affine_over_atoms`)."""
    if isinstance(cond, Not):
        return facts_from_condition(cond.x, not holds)
    if isinstance(cond, Logical):
        both = (cond.op is LogicalOp.AND) == holds
        if both:
            return facts_from_condition(cond.a, holds) + facts_from_condition(cond.b, holds)
        return []
    if isinstance(cond, Compare) and cond.a.dtype.is_int:
        op = cond.op if holds else cond.op.negate()
        a, b = affine_over_atoms(cond.a), affine_over_atoms(cond.b)
        if a is None or b is None:
            return []
        one = Affine((), 1)
        if op is CompareOp.LT:
            return [b - a - one]
        if op is CompareOp.LE:
            return [b - a]
        if op is CompareOp.GT:
            return [a - b - one]
        if op is CompareOp.GE:
            return [a - b]
        if op is CompareOp.EQ:
            return [a - b, b - a]
    return []


def tighten(ranges: Ranges, facts: list[Affine]) -> dict[IterVar | Var, Interval]:
    """Narrow variable ranges with single-variable facts such as ``i - 2 >= 0``."""
    result = dict(ranges)
    for fact in facts:
        if len(fact.coefs) != 1:
            continue
        ((var, coef),) = fact.coefs
        current = interval(var, result)
        if current is None:
            continue
        lo, hi = current
        # coef * v + c >= 0
        if coef > 0:
            lo = max(lo, -(fact.constant // coef))
        else:
            hi = min(hi, fact.constant // -coef)
        result[var] = (lo, hi)
    return result


def prove_nonnegative(expr: Expr, ranges: Ranges | None = None,
                      facts: list[Affine] | None = None) -> bool:
    """True when ``expr >= 0`` holds for every value of its variables under ``facts``."""
    facts = facts or []
    narrowed = tighten(ranges or {}, facts)
    rng = interval(expr, narrowed)
    if rng is not None and rng[0] >= 0:
        return True
    form = affine_over_atoms(expr) if facts else None
    if form is None:
        return False
    for fact in facts:
        rest = (form - fact).interval(narrowed)
        if rest is not None and rest[0] >= 0:
            return True
    return False


def index_in_bounds(index: Expr, extent: int, ranges: Ranges | None = None,
                    facts: list[Affine] | None = None) -> bool:
    """True when ``0 <= index < extent`` is provable."""
    upper = Binary(BinaryOp.SUB, Const(extent - 1, index.dtype), index)
    return prove_nonnegative(index, ranges, facts) and prove_nonnegative(upper, ranges, facts)
