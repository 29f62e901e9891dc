"""Integer linear combinations of index terms, turned back into clean te expressions.

A term is any integer te expression (an axis, a ``floordiv``); ``LinExpr`` keeps the
coefficients so that solutions of index equations print as ``z2 - 2*r`` rather than nests
of ``+ 0`` and ``* 1``.

>>> from tilecraft import te
>>> i, j = te.reduce_axis(4, name="i"), te.reduce_axis(3, name="j")
>>> str((LinExpr.of(i) * 2 - LinExpr.of(j) + 1).to_expr())
'(((i * 2) - j) + 1)'
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.te.bounds import Interval, affine_over_atoms, interval
from tilecraft.te.expr import Binary, BinaryOp, Const, Expr
from tilecraft.te.expr import const as make_const


@dataclass(frozen=True)
class LinExpr:
    terms: tuple[tuple[Expr, int], ...]
    constant: int = 0

    @staticmethod
    def of(term: Expr | int) -> LinExpr:
        if isinstance(term, int):
            return LinExpr((), term)
        if isinstance(term, Const):
            return LinExpr((), int(term.value))
        return LinExpr(((term, 1),), 0)

    @staticmethod
    def build(terms: dict[Expr, int], constant: int) -> LinExpr:
        return LinExpr(tuple((t, c) for t, c in terms.items() if c != 0), constant)

    def as_dict(self) -> dict[Expr, int]:
        return dict(self.terms)

    def __add__(self, other: LinExpr | int) -> LinExpr:
        other = other if isinstance(other, LinExpr) else LinExpr.of(other)
        terms = self.as_dict()
        for term, coef in other.terms:
            terms[term] = terms.get(term, 0) + coef
        return LinExpr.build(terms, self.constant + other.constant)

    def __mul__(self, factor: int) -> LinExpr:
        return LinExpr.build({t: c * factor for t, c in self.terms}, self.constant * factor)

    def __neg__(self) -> LinExpr:
        return self * -1

    def __sub__(self, other: LinExpr | int) -> LinExpr:
        other = other if isinstance(other, LinExpr) else LinExpr.of(other)
        return self + (-other)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def folded(self) -> LinExpr:
        """``a - c*(a // c)`` written as ``a % c`` (the remainder a solution recombines),
        so that its range is known to be ``[0, c)``."""
        terms = self.as_dict()
        for term, coef in self.terms:
            if not (isinstance(term, Binary) and term.op is BinaryOp.FLOORDIV
                    and isinstance(term.b, Const)):
                continue
            divisor = int(term.b.value)
            if coef % divisor or coef >= 0 or terms.get(term) != coef:
                continue
            times = -coef // divisor
            form = affine_over_atoms(term.a)
            if form is None:
                continue
            inner = {var: c * times for var, c in form.coefs}
            if any(terms.get(var, 0) != c for var, c in inner.items()):
                continue
            for var in inner:
                del terms[var]
            del terms[term]
            remainder = Binary(BinaryOp.MOD, term.a, term.b)
            terms[remainder] = terms.get(remainder, 0) + times
            constant = self.constant - form.constant * times
            return LinExpr.build(terms, constant).folded()
        return self

    def interval(self) -> Interval | None:
        folded = self.folded()
        if folded is not self:
            return folded.interval()
        lo = hi = self.constant
        for term, coef in self.terms:
            rng = interval(term)
            if rng is None:
                return None
            ends = (coef * rng[0], coef * rng[1])
            lo, hi = lo + min(ends), hi + max(ends)
        return lo, hi

    def floordiv(self, divisor: int) -> LinExpr:
        """``self // divisor`` (``divisor > 0``) as a new term, or exactly when it divides
        every coefficient and the constant."""
        if divisor == 1:
            return self
        if all(c % divisor == 0 for _, c in self.terms) and self.constant % divisor == 0:
            return LinExpr.build({t: c // divisor for t, c in self.terms},
                                 self.constant // divisor)
        return LinExpr.of(Binary(BinaryOp.FLOORDIV, self.to_expr(), make_const(divisor)))

    def to_expr(self) -> Expr:
        folded = self.folded()
        if folded is not self:
            return folded.to_expr()
        result: Expr | None = None
        for term, coef in sorted(self.terms, key=lambda tc: tc[1] < 0):
            magnitude = abs(coef)
            piece = term if magnitude == 1 else Binary(BinaryOp.MUL, term, make_const(magnitude))
            if result is None:
                result = piece if coef > 0 else Binary(BinaryOp.SUB, make_const(0), piece)
            else:
                result = Binary(BinaryOp.ADD if coef > 0 else BinaryOp.SUB, result, piece)
        if result is None:
            return make_const(self.constant)
        if self.constant > 0:
            return Binary(BinaryOp.ADD, result, make_const(self.constant))
        if self.constant < 0:
            return Binary(BinaryOp.SUB, result, make_const(-self.constant))
        return result
