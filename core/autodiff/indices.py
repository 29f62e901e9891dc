"""The index equations of one read (thesis Eq. 4.9), linearised.

Each index of a load ``In[f_1(x, r), ..., f_M(x, r)]`` becomes an integer linear form over
the compute's loop variables. Non-linear sub-expressions — ``e // c`` and ``e % c`` with a
constant ``c`` — are replaced by fresh unknowns, taken in pairs: ``q = e // c`` and
``m = e % c`` always enter together, tied by the linear equation ``e - c*q - m = 0`` and the
range ``0 <= m < c``. A pair whose two halves both occur in the indices is thereby recombined
as ``e = c*q + m`` (depth2space, reshape); a half that occurs alone leaves the other one free,
which the solver turns into a new reduce loop. Clamps ``max(min(e, hi), lo)`` (the guarded
loads of transposed convolutions) are stripped, to be proved by the guards of the read.

>>> from tilecraft import te
>>> X = te.placeholder((4, 6), name="X")
>>> Y = te.compute((24,), lambda i: X[i // 6, i % 6], name="Y")
>>> system = IndexSystem.of(Y, Y.body)
>>> len(system.unknowns), len(system.rows)   # i, q, m; two index rows, one pair row
(3, 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilecraft.autodiff.linexpr import LinExpr
from tilecraft.errors import AutodiffError
from tilecraft.te.bounds import Interval
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Unary,
    UnaryOp,
    Var,
)
from tilecraft.te.tensor import Tensor


@dataclass(frozen=True)
class Pair:
    """``quotient = argument // divisor`` and ``remainder = argument % divisor``."""

    argument: LinExpr
    divisor: int
    quotient: Var
    remainder: Var


@dataclass(frozen=True)
class Clamp:
    """A stripped ``max(min(value, high), low)``: exact only where ``low <= value <= high``."""

    value: Expr
    low: int
    high: int


@dataclass
class IndexSystem:
    """Unknowns (loop variables, then pair variables), their ranges, and the rows
    ``form == z_index`` (``index`` set) or ``form == 0`` (pair rows)."""

    compute: Tensor
    unknowns: list[IterVar | Var]
    ranges: dict[IterVar | Var, Interval]
    rows: list[tuple[LinExpr, int | None]] = field(default_factory=list)
    pairs: dict[tuple, Pair] = field(default_factory=dict)
    clamps: list[Clamp] = field(default_factory=list)

    @staticmethod
    def of(compute: Tensor, load: Load) -> IndexSystem:
        """The system of ``load`` (a read inside ``compute``'s body)."""
        loop_vars = list(compute.axes) + list(compute.reduce_axes)
        system = IndexSystem(compute, list(loop_vars),
                             {v: (0, v.extent - 1) for v in loop_vars})
        for position, index in enumerate(load.indices):
            form = system.linearize(index, load, position)
            system.rows.append((form, position))
        return system

    # linearisation -------------------------------------------------------------------------
    def _unsolvable(self, load: Load, position: int, index: Expr, why: str) -> AutodiffError:
        return AutodiffError(
            f"compute {self.compute.name}: index {position} of {load} ({index}) is outside the "
            f"solvable class ({why}); gradients need indices affine in the loop variables, "
            "with // and % by positive constants — compute the index another way or write the "
            "gradient of this read by hand")

    def linearize(self, expr: Expr, load: Load, position: int) -> LinExpr:
        expr = _normalise(expr)
        if isinstance(expr, Const) and expr.dtype.is_int:
            return LinExpr.of(int(expr.value))
        if isinstance(expr, IterVar):
            if expr not in self.ranges:
                raise self._unsolvable(load, position, expr, f"{expr.name} is not a loop "
                                       "variable of the compute")
            return LinExpr.of(expr)
        if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
            return self.linearize(expr.x, load, position)
        if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
            return -self.linearize(expr.x, load, position)
        if isinstance(expr, Binary):
            if expr.op in (BinaryOp.ADD, BinaryOp.SUB):
                a = self.linearize(expr.a, load, position)
                b = self.linearize(expr.b, load, position)
                return a + b if expr.op is BinaryOp.ADD else a - b
            if expr.op is BinaryOp.MUL:
                a = self.linearize(expr.a, load, position)
                b = self.linearize(expr.b, load, position)
                if a.is_constant:
                    return b * a.constant
                if b.is_constant:
                    return a * b.constant
                raise self._unsolvable(load, position, expr, "a product of loop variables")
            if expr.op in (BinaryOp.FLOORDIV, BinaryOp.MOD):
                if not (isinstance(expr.b, Const) and int(expr.b.value) > 0):
                    raise self._unsolvable(load, position, expr,
                                           f"'{expr.op.value}' by a non-constant or non-positive "
                                           "divisor")
                argument = self.linearize(expr.a, load, position)
                divisor = int(expr.b.value)
                if all(c % divisor == 0 for _, c in argument.terms) \
                        and argument.constant % divisor == 0:
                    exact = argument.floordiv(divisor)
                    return exact if expr.op is BinaryOp.FLOORDIV else LinExpr.of(0)
                pair = self.pair(argument, divisor)
                return LinExpr.of(pair.quotient if expr.op is BinaryOp.FLOORDIV
                                  else pair.remainder)
            clamp = _as_clamp(expr)
            if clamp is not None:
                self.clamps.append(clamp)
                return self.linearize(clamp.value, load, position)
        raise self._unsolvable(load, position, expr, "not affine")

    def pair(self, argument: LinExpr, divisor: int) -> Pair:
        key = (frozenset(argument.terms), argument.constant, divisor)
        if key in self.pairs:
            return self.pairs[key]
        quotient: Var | None = None
        if argument.constant == 0 and len(argument.terms) == 1:
            (term, coef), = argument.terms
            inner = next((p for p in self.pairs.values() if p.quotient is term), None)
            if inner is not None and coef == 1:  # (e // a) // b is e // (a*b): share it
                quotient = self.pair(inner.argument, inner.divisor * divisor).quotient
        low, high = self.interval(argument)
        if quotient is None:
            quotient = Var(f"q{len(self.pairs)}")
            self.unknowns.append(quotient)
            self.ranges[quotient] = (low // divisor, high // divisor)
        remainder = Var(f"m{len(self.pairs)}")
        self.unknowns.append(remainder)
        self.ranges[remainder] = (0, divisor - 1)
        pair = Pair(argument, divisor, quotient, remainder)
        self.pairs[key] = pair
        self.rows.append((argument - LinExpr.of(quotient) * divisor - LinExpr.of(remainder),
                          None))
        return pair

    def interval(self, form: LinExpr) -> Interval:
        lo = hi = form.constant
        for term, coef in form.terms:
            a, b = self.ranges[term]  # type: ignore[index]
            lo += min(coef * a, coef * b)
            hi += max(coef * a, coef * b)
        return lo, hi


def _as_clamp(expr: Binary) -> Clamp | None:
    """``max(min(v, hi), lo)`` or ``min(max(v, lo), hi)`` with constant bounds."""
    if expr.op not in (BinaryOp.MAX, BinaryOp.MIN) or not isinstance(expr.b, Const):
        return None
    inner = expr.a
    other = BinaryOp.MIN if expr.op is BinaryOp.MAX else BinaryOp.MAX
    if not (isinstance(inner, Binary) and inner.op is other and isinstance(inner.b, Const)):
        return None
    bounds = sorted((int(expr.b.value), int(inner.b.value)))
    low, high = (int(expr.b.value), int(inner.b.value)) if expr.op is BinaryOp.MAX \
        else (int(inner.b.value), int(expr.b.value))
    if [low, high] != bounds:
        return None
    return Clamp(inner.a, low, high)


def _normalise(expr: Expr) -> Expr:
    """Nested divisions by constants, folded: ``(e // a) // b -> e // (a*b)``,
    ``(e % (a*b)) % a -> e % a``, ``(e % (a*b)) // a -> (e // a) % b``."""
    if not (isinstance(expr, Binary) and expr.op in (BinaryOp.FLOORDIV, BinaryOp.MOD)
            and isinstance(expr.b, Const) and isinstance(expr.a, Binary)
            and isinstance(expr.a.b, Const)):
        return expr
    inner, outer = expr.a, int(expr.b.value)
    inner_div = int(inner.b.value)
    if outer <= 0 or inner_div <= 0:
        return expr
    if expr.op is BinaryOp.FLOORDIV and inner.op is BinaryOp.FLOORDIV:
        return _normalise(Binary(BinaryOp.FLOORDIV, inner.a, Const(inner_div * outer,
                                                                  expr.b.dtype)))
    if inner.op is BinaryOp.MOD and inner_div % outer == 0:
        if expr.op is BinaryOp.MOD:
            return _normalise(Binary(BinaryOp.MOD, inner.a, expr.b))
        quotient = _normalise(Binary(BinaryOp.FLOORDIV, inner.a, expr.b))
        return Binary(BinaryOp.MOD, quotient, Const(inner_div // outer, expr.b.dtype))
    return expr
