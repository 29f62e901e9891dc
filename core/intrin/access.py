"""Access structure of both sides of a mapping: which loops index which dimension of which
tensor (software) or operand (intrinsic), read from the index expressions.

The software side must be a sum of products, ``out[axes] = sum(f1 * f2 * ..., axis=...)``,
each factor a load of a tensor, possibly cast and possibly guarded by ``select(cond, load, 0)``
(the factor then is the zero-padded view the guard describes); the loaded tensor may itself be
a ``pad`` compute, whose placeholder is reported as the factor's ``origin``. Index expressions
are split into affine terms (``tilecraft.te.bounds.affine``) and non-affine terms; a loop used
in a non-affine term (``k // 4``) is *opaque* there.

>>> from tilecraft import te
>>> x = te.placeholder((1, 3, 8, 8), "float16", name="x")
>>> w = te.placeholder((4, 3, 3, 3), "float16", name="w")
>>> from tilecraft import ops
>>> y = ops.conv2d(x, w, stride=2, out_dtype="float32", name="y")
>>> product = analyse_compute(y)
>>> [factor.tensor.name for factor in product.factors]
['x', 'w']
>>> dim = product.factors[0].dims[2]
>>> sorted((loop.name, coef) for loop, coef in dim.coefs)
[('h', 2), ('rh', 1)]
>>> sorted(product.factors[0].dims_of(product.loop("rh")))
[2]
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.intrin.mapping import MappingError, Reason, ReasonKind
from tilecraft.reference.evaluator import product_factors
from tilecraft.target.intrinsic import IntrinsicDecl
from tilecraft.target.semantics import IntrinsicProgram
from tilecraft.te.bounds import affine
from tilecraft.te.expr import (
    AxisKind,
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
)
from tilecraft.te.functions import all_of
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import vars_in

_HALF = (DType.FLOAT16, DType.BFLOAT16)


@dataclass(frozen=True)
class DimAccess:
    """One index expression: affine coefficients of its loops, and the loops it uses in
    non-affine terms (``opaque``)."""

    index: Expr
    coefs: tuple[tuple[IterVar, int], ...]
    opaque: frozenset[IterVar]

    @property
    def loops(self) -> frozenset[IterVar]:
        return frozenset(loop for loop, _ in self.coefs) | self.opaque

    def coef(self, loop: IterVar) -> int:
        return dict(self.coefs).get(loop, 0)


def _additive_terms(expr: Expr, sign: int) -> list[tuple[int, Expr]]:
    if isinstance(expr, Binary) and expr.op in (BinaryOp.ADD, BinaryOp.SUB):
        right = sign if expr.op is BinaryOp.ADD else -sign
        return _additive_terms(expr.a, sign) + _additive_terms(expr.b, right)
    if isinstance(expr, Unary) and expr.op is UnaryOp.NEG:
        return _additive_terms(expr.x, -sign)
    return [(sign, expr)]


def dim_access(index: Expr) -> DimAccess:
    """Split ``index`` into affine and non-affine terms.

    >>> from tilecraft import te
    >>> k, c = te.reduce_axis(8, "k"), te.reduce_axis(3, "c")
    >>> access = dim_access((k // 4) * 3 + c)
    >>> [(loop.name, coef) for loop, coef in access.coefs], [loop.name for loop in access.opaque]
    ([('c', 1)], ['k'])
    """
    coefs: dict[IterVar, int] = {}
    opaque: set[IterVar] = set()
    for sign, term in _additive_terms(index, 1):
        form = affine(term)
        if form is None:
            opaque.update(v for v in vars_in(term) if isinstance(v, IterVar))
            continue
        for var, coef in form.coefs:
            if isinstance(var, IterVar):
                coefs[var] = coefs.get(var, 0) + sign * coef
    kept = tuple((loop, coef) for loop, coef in coefs.items() if coef and loop not in opaque)
    return DimAccess(index, kept, frozenset(opaque))


@dataclass(frozen=True)
class SoftwareOperand:
    """One factor of the product: ``select(all guards, load, 0)`` cast to the product dtype."""

    position: int
    load: Load
    guards: tuple[Expr, ...]
    dims: tuple[DimAccess, ...]

    @property
    def tensor(self) -> Tensor:
        return self.load.tensor

    @property
    def origin(self) -> Tensor:
        """The tensor behind zero-padding computes (``pad``) the factor reads through."""
        tensor = self.tensor
        while isinstance(tensor.op, ComputeOp):
            inner = _padding_source(tensor)
            if inner is None:
                break
            tensor = inner
        return tensor

    @property
    def loops(self) -> frozenset[IterVar]:
        result: frozenset[IterVar] = frozenset()
        for dim in self.dims:
            result |= dim.loops
        return result

    def dims_of(self, loop: IterVar) -> frozenset[int]:
        """The dimensions of the tensor whose index uses ``loop``."""
        return frozenset(d for d, dim in enumerate(self.dims) if loop in dim.loops)

    def value(self) -> Expr:
        """The factor's value in the tensor's own dtype (guards kept, casts dropped)."""
        if not self.guards:
            return self.load
        zero = Const(0, self.load.dtype) if self.load.dtype.is_int else Const(0.0,
                                                                             self.load.dtype)
        return Select(all_of(*self.guards), self.load, zero)


def _padding_source(tensor: Tensor) -> Tensor | None:
    body = tensor.body
    if isinstance(body, Select) and _is_zero(body.false_value):
        body = body.true_value
    if isinstance(body, Load) and body.tensor.ndim == tensor.ndim:
        return body.tensor
    return None


def _is_zero(expr: Expr) -> bool:
    while isinstance(expr, Cast):
        expr = expr.x
    return isinstance(expr, Const) and expr.value == 0


def _parse_factor(expr: Expr, position: int) -> SoftwareOperand | None:
    guards: list[Expr] = []
    node = expr
    while not isinstance(node, Load):
        if isinstance(node, Cast):
            node = node.x
        elif isinstance(node, Select) and _is_zero(node.false_value):
            guards.append(node.cond)
            node = node.true_value
        else:
            return None
    return SoftwareOperand(position, node, tuple(guards),
                           tuple(dim_access(index) for index in node.indices))


@dataclass(frozen=True)
class ProductSum:
    """A compute analysed as ``out[axes] = sum(factor_0 * factor_1 * ..., axis=reduce)``."""

    compute: Tensor
    factors: tuple[SoftwareOperand, ...]

    @property
    def axes(self) -> tuple[IterVar, ...]:
        return self.compute.axes

    @property
    def loops(self) -> tuple[IterVar, ...]:
        """Spatial axes, then reduce axes: the software loop iteration of Fig. 5.2 b."""
        return self.compute.axes + self.compute.reduce_axes

    @property
    def product_dtype(self) -> DType:
        body = self.compute.body
        return body.body.dtype if isinstance(body, Reduce) else body.dtype

    def loop(self, name: str) -> IterVar:
        found = [loop for loop in self.loops if loop.name == name]
        if len(found) != 1:
            names = ", ".join(loop.name for loop in self.loops)
            problem = "has no loop" if not found else "has several loops"
            raise MappingError(f"compute {self.compute.name} {problem} named {name!r}; its "
                               f"loops are {names}",
                               [Reason(ReasonKind.UNKNOWN_NAME, f"no single software loop "
                                       f"{name!r} in {self.compute.name} ({names})",
                                       software_loop=name)])
        return found[0]


def analyse_compute(compute: Tensor) -> ProductSum:
    """``compute`` as a sum of products, or a :class:`MappingError` saying why it is not."""

    def refuse(why: str) -> MappingError:
        message = (f"compute {compute.name} is not a sum of products of loads ({why}); only "
                   "such computes map onto a multiply-accumulate intrinsic")
        return MappingError(message, [Reason(ReasonKind.NOT_PRODUCT_SUM, message,
                                             tensor=compute.name)])

    if not isinstance(compute, Tensor) or not isinstance(compute.op, ComputeOp):
        name = getattr(compute, "name", type(compute).__name__)
        raise MappingError(f"{name} is not a compute tensor; pass the output of te.compute or "
                           "an ops function",
                           [Reason(ReasonKind.NOT_PRODUCT_SUM, f"{name} is not a compute",
                                   tensor=str(name))])
    body = compute.body
    if isinstance(body, Reduce):
        if body.op is not ReduceOp.SUM:
            raise refuse(f"it reduces with {body.op.value}, not sum")
        body = body.body
    factors = []
    for position, factor in enumerate(product_factors(body)):
        parsed = _parse_factor(factor, position)
        if parsed is None:
            raise refuse(f"factor {factor} is not a load, a cast load or select(cond, load, 0)")
        factors.append(parsed)
    return ProductSum(compute, tuple(factors))


# --- the intrinsic side ----------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class IntrinsicAccess:
    """The intrinsic's loops and operands, their access matrix ``Z`` and the loops indexing
    each operand dimension (parsed from the declared index strings)."""

    decl: IntrinsicDecl
    loops: tuple[str, ...]
    kinds: tuple[AxisKind, ...]
    extents: tuple[int, ...]
    operands: tuple[str, ...]
    sources: tuple[str, ...]
    destination: str
    dim_loops: tuple[tuple[frozenset[str], ...], ...]
    matrix: np.ndarray

    def loop_index(self, name: str) -> int:
        return self.loops.index(name)

    def operand_index(self, name: str) -> int:
        return self.operands.index(name)

    def row(self, loop: str) -> frozenset[str]:
        """The operands whose index uses intrinsic loop ``loop``."""
        column = self.matrix[:, self.loops.index(loop)]
        return frozenset(name for name, used in zip(self.operands, column) if used)

    def loops_of(self, operand: str) -> frozenset[str]:
        row = self.matrix[self.operands.index(operand)]
        return frozenset(name for name, used in zip(self.loops, row) if used)

    def dtype(self, operand: str) -> DType:
        return self.decl.compute.operand(operand).dtype


def _names_in(index: str, loops: tuple[str, ...]) -> frozenset[str]:
    tree = ast.parse(index.strip(), mode="eval")
    return frozenset(node.id for node in ast.walk(tree)
                     if isinstance(node, ast.Name) and node.id in loops)


@functools.lru_cache(maxsize=256)
def _program(decl: IntrinsicDecl) -> IntrinsicProgram:
    return decl.compute.to_te()


@functools.lru_cache(maxsize=256)
def intrinsic_access(decl: IntrinsicDecl) -> IntrinsicAccess:
    """Analyse ``decl`` (cached: declarations are immutable); a :class:`MappingError` if it
    is not a multiply-accumulate (a sum, over its reduce loops, of a product of its source
    operands, each read once)."""
    compute = decl.compute
    loops = tuple(loop.name for loop in compute.loops)
    operands, loop_names, matrix = compute.access_matrix()
    assert loop_names == loops
    program = _program(decl)
    body = program.compute.body
    if isinstance(body, Reduce):
        product = body.body if body.op is ReduceOp.SUM else None
    elif (isinstance(body, Binary) and body.op is BinaryOp.ADD and program.accumulator
          is not None and isinstance(body.a, Load) and body.a.tensor is program.accumulator):
        product = body.b
    else:
        product = body
    factors = [_parse_factor(f, p) for p, f in enumerate(product_factors(product))] \
        if product is not None else [None]
    sources = tuple(op.name for op in compute.sources)
    read = [f.tensor.name for f in factors if f is not None]
    if None in factors or sorted(read) != sorted(sources):
        message = (f"intrinsic {decl.name}: its semantics {compute.semantics!r} is not a sum "
                   "of products of its source operands (each read once); only "
                   "multiply-accumulate intrinsics are matched")
        raise MappingError(message, [Reason(ReasonKind.NOT_PRODUCT_SUM, message)])
    dim_loops = tuple(tuple(_names_in(index, loops) for index in op.index)
                      for op in compute.operands)
    return IntrinsicAccess(decl, loops, tuple(loop.kind for loop in compute.loops),
                           tuple(loop.extent for loop in compute.loops), operands, sources,
                           compute.destination.name, dim_loops, matrix)


def accumulation_compatible(product_dtype: DType, destination: DType) -> bool:
    """Whether software products of ``product_dtype`` may be summed in an intrinsic
    destination of ``destination``: the same dtype, or a half type (computed in float32 and
    rounded on store, like everywhere in tilecraft) summed in float32."""
    return product_dtype == destination or (product_dtype in _HALF
                                            and destination is DType.FLOAT32)
