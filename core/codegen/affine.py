"""Affine forms of index expressions: what a C-family code generator proves about an access
before it widens it (``float4`` in CUDA, ``vload4`` in OpenCL C) or copies it in 16-byte
chunks.

:func:`linear_form` writes an integer expression as ``sum(coefficient * term) + constant``
where a term is a variable or an opaque sub-expression (a floor division, a load); None when
the chosen variable appears other than linearly.

>>> from tilecraft.te import Var
>>> i, j = Var("i"), Var("j")
>>> form = linear_form(i * 8 + j + 4, j)
>>> form.coefficient(j), form.constant, form.multiple_of(4, but=j)
(1, 4, True)
>>> linear_form((i + j) // 2, j) is None
True
"""

from __future__ import annotations

from dataclasses import dataclass

from tilecraft.kernel_ir.nodes import walk_expr
from tilecraft.te.expr import Binary, BinaryOp, Const, Expr, Var

__all__ = ["LinearForm", "linear_form"]


@dataclass(frozen=True)
class LinearForm:
    """``sum(coefficients[term] * term) + constant``."""

    coefficients: dict[Expr, int]
    constant: int

    def coefficient(self, term: Expr) -> int:
        return self.coefficients.get(term, 0)

    def multiple_of(self, factor: int, but: Expr | None = None) -> bool:
        """Whether every coefficient (except ``but``'s) and the constant divide by ``factor``,
        so the value is a multiple of it whatever the terms are."""
        return self.constant % factor == 0 and all(
            value % factor == 0 for term, value in self.coefficients.items() if term != but)


def _combine(a: LinearForm, b: LinearForm, sign: int) -> LinearForm:
    coefficients = dict(a.coefficients)
    for term, value in b.coefficients.items():
        coefficients[term] = coefficients.get(term, 0) + sign * value
    return LinearForm({t: v for t, v in coefficients.items() if v}, a.constant + sign * b.constant)


def _scale(form: LinearForm, factor: int) -> LinearForm:
    return LinearForm({t: v * factor for t, v in form.coefficients.items() if v * factor},
                      form.constant * factor)


def linear_form(expr: Expr, var: Var) -> LinearForm | None:
    """The affine form of ``expr`` in which ``var`` must appear only linearly (module doc)."""
    if isinstance(expr, Const) and expr.dtype.is_int:
        return LinearForm({}, int(expr.value))
    if isinstance(expr, Var):
        return LinearForm({expr: 1}, 0)
    if isinstance(expr, Binary) and expr.op in (BinaryOp.ADD, BinaryOp.SUB):
        a, b = linear_form(expr.a, var), linear_form(expr.b, var)
        if a is None or b is None:
            return None
        return _combine(a, b, 1 if expr.op is BinaryOp.ADD else -1)
    if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
        for constant, other in ((expr.a, expr.b), (expr.b, expr.a)):
            if isinstance(constant, Const):
                form = linear_form(other, var)
                return None if form is None else _scale(form, int(constant.value))
    if any(node == var for node in walk_expr(expr)):
        return None
    return LinearForm({expr: 1}, 0)
