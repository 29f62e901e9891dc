"""Bound inference: the region of a producer that a consumer's inner loops read.

When stage ``P`` is computed at loop ``L`` of stage ``C`` (``compute_at``, or a cache stage),
one iteration of ``L`` needs the elements of ``P`` that ``C``'s loops *inside* ``L`` load.
Each index of each load of ``P`` in ``C``'s body, written in ``C``'s loop variables, is split
into a linear part in the inner loop variables and the rest, fixed during the iteration
(outer loop variables, and sub-expressions of them such as ``f // 4``)::

    index = sum(c_v * v for inner v) + rest(outer) + constant

When every load of ``P`` has the same ``rest`` in a dimension, that dimension of the region
starts at ``rest + min(constant + inner part)`` and spans ``max - min + 1`` elements, a
constant; the consumer then reads element ``index - start`` of the local buffer. Otherwise
(an index not linear in the inner variables, or loads that disagree) the region covers the
whole dimension, as it does when the span would.

>>> from tilecraft.te import Var
>>> io, ii, r = Var("io"), Var("ii"), Var("r")
>>> ranges = {ii: (0, 3), r: (0, 2)}
>>> region = infer_region([(io * 4 + ii + r,)], (18,), ranges)
>>> print(region.dims[0].base, region.dims[0].extent)
(io * 4) 6
>>> print(region.local_index(0, io * 4 + ii + r))
(ii + r)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tilecraft.kernel_ir.nodes import BufferLoad
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.te.expr import Binary, BinaryOp, Cast, Const, Expr, Load, Unary, UnaryOp, Var, const
from tilecraft.te.visit import walk


@dataclass(frozen=True)
class LinearForm:
    """``sum(coef * inner var) + sum(mult * atom) + constant``; atoms hold no inner var."""

    coefs: tuple[tuple[Var, int], ...] = ()
    atoms: tuple[tuple[Expr, int], ...] = ()
    constant: int = 0

    @staticmethod
    def make(coefs: Mapping[Var, int], atoms: Mapping[Expr, int], constant: int) -> LinearForm:
        return LinearForm(tuple((v, c) for v, c in coefs.items() if c),
                          tuple((a, m) for a, m in atoms.items() if m), constant)

    @property
    def is_constant(self) -> bool:
        return not self.coefs and not self.atoms

    def plus(self, other: LinearForm, sign: int = 1) -> LinearForm:
        coefs, atoms = dict(self.coefs), dict(self.atoms)
        for var, coef in other.coefs:
            coefs[var] = coefs.get(var, 0) + sign * coef
        for atom, mult in other.atoms:
            atoms[atom] = atoms.get(atom, 0) + sign * mult
        return LinearForm.make(coefs, atoms, self.constant + sign * other.constant)

    def scale(self, factor: int) -> LinearForm:
        return LinearForm.make({v: c * factor for v, c in self.coefs},
                               {a: m * factor for a, m in self.atoms}, self.constant * factor)

    def span(self, ranges: Mapping[Var, tuple[int, int]]) -> tuple[int, int]:
        """Smallest and largest value of the inner part plus the constant."""
        lo = hi = self.constant
        for var, coef in self.coefs:
            a, b = ranges[var]
            lo += min(coef * a, coef * b)
            hi += max(coef * a, coef * b)
        return lo, hi


def linear_form(expr: Expr, inner: frozenset[Var] | set[Var]) -> LinearForm | None:
    """``expr`` as a :class:`LinearForm` in the ``inner`` variables, or None when it is not
    linear in them (or reads memory)."""
    if isinstance(expr, Const) and expr.dtype.is_int:
        return LinearForm(constant=int(expr.value))
    if isinstance(expr, Var) and expr in inner:
        return LinearForm(coefs=((expr, 1),))
    if isinstance(expr, Binary) and expr.op in (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL):
        a, b = linear_form(expr.a, inner), linear_form(expr.b, inner)
        if a is not None and b is not None:
            if expr.op is BinaryOp.ADD:
                return a.plus(b)
            if expr.op is BinaryOp.SUB:
                return a.plus(b, -1)
            if a.is_constant:
                return b.scale(a.constant)
            if b.is_constant:
                return a.scale(b.constant)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        inner_form = linear_form(expr.x, inner)
        return inner_form.scale(-1) if inner_form is not None else None
    if isinstance(expr, Cast) and expr.dtype.is_int and expr.x.dtype.is_int:
        return linear_form(expr.x, inner)
    if _fixed(expr, inner):
        return LinearForm(atoms=((expr, 1),))
    return None


def _fixed(expr: Expr, inner: frozenset[Var] | set[Var]) -> bool:
    """Whether ``expr`` is fixed during an iteration: no inner variable, no memory read."""
    for node in walk(expr):
        if isinstance(node, (Load, BufferLoad)):
            return False
        if isinstance(node, Var) and node in inner:
            return False
    return True


def _atoms_expr(atoms: Sequence[tuple[Expr, int]], constant: int) -> Expr:
    total: Expr = const(constant)
    for atom, mult in atoms:
        total = total + (atom if mult == 1 else atom * mult)
    return simplify(total)


@dataclass(frozen=True)
class RegionDim:
    """One dimension of a region: elements ``[base, base + extent)`` of the producer;
    ``full`` when it is the whole dimension (then ``base`` is 0 and indices are global)."""

    base: Expr
    extent: int
    full: bool
    atoms: tuple[tuple[Expr, int], ...] = ()
    minimum: int = 0


@dataclass(frozen=True)
class Region:
    """The part of a producer one iteration of the attach loop needs."""

    dims: tuple[RegionDim, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(dim.extent for dim in self.dims)

    @staticmethod
    def whole(shape: Sequence[int]) -> Region:
        return Region(tuple(RegionDim(const(0), extent, True) for extent in shape))

    def local_index(self, position: int, index: Expr) -> Expr:
        """The consumer's ``index`` (global) as an index into the local buffer."""
        dim = self.dims[position]
        if dim.full:
            return index
        # every variable but those of the region's start counts as inner here: the index of
        # a consumer computed at the same point is in its own loop variables
        fixed = {node for atom, _ in dim.atoms for node in walk(atom) if isinstance(node, Var)}
        inner = {node for node in walk(index) if isinstance(node, Var) and node not in fixed}
        form = linear_form(index, inner)
        if form is None or dict(form.atoms) != dict(dim.atoms):
            return simplify(index - dim.base)
        local: Expr = const(form.constant - dim.minimum)
        for var, coef in form.coefs:
            local = local + (var if coef == 1 else var * coef)
        return simplify(local)


def infer_region(indices: Sequence[Sequence[Expr]], shape: Sequence[int],
                 inner_ranges: Mapping[Var, tuple[int, int]]) -> Region:
    """The region of a producer of ``shape`` read at ``indices`` (one tuple per load, in the
    consumer's loop variables), ``inner_ranges`` giving the ranges of the loop variables
    inside the attach point."""
    inner = frozenset(inner_ranges)
    dims = []
    for position, extent in enumerate(shape):
        forms = [linear_form(index[position], inner) for index in indices]
        dims.append(_dim(forms, extent, inner_ranges))
    return Region(tuple(dims))


def _dim(forms: list[LinearForm | None], extent: int,
         ranges: Mapping[Var, tuple[int, int]]) -> RegionDim:
    whole = RegionDim(const(0), extent, True)
    known = [form for form in forms if form is not None]
    if not known or len(known) < len(forms):
        return whole
    atoms = dict(known[0].atoms)
    if any(dict(form.atoms) != atoms for form in known):
        return whole
    spans = [form.span(ranges) for form in known]
    lo = min(span[0] for span in spans)
    hi = max(span[1] for span in spans)
    if hi - lo + 1 >= extent:
        return whole
    base = _atoms_expr(tuple(atoms.items()), lo)
    return RegionDim(base, hi - lo + 1, False, tuple(atoms.items()), lo)


__all__ = ["LinearForm", "Region", "RegionDim", "infer_region", "linear_form"]
