"""Tensors and the operations that produce them: placeholders and computes (thesis Def. 1).

>>> from tilecraft import te
>>> A = te.placeholder((64, 128), "float32", name="A")
>>> B = te.placeholder((128, 32), "float32", name="B")
>>> k = te.reduce_axis(128, name="k")
>>> C = te.compute((64, 32), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> C.shape, C.dtype.value, [t.name for t in C.inputs]
((64, 32), 'float32', ['A', 'B'])
>>> print(C.statement())
C[i, j] = sum(A[i, k] * B[k, j], axis=[k])
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilecraft.dtypes import DType, as_dtype
from tilecraft.errors import ExpressionError, ShapeError
from tilecraft.te.expr import (
    AxisKind,
    Expr,
    ExprLike,
    IterVar,
    Load,
    Reduce,
    as_expr,
    python_scalar,
)

_names = itertools.count()


def _fresh_name(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


@dataclass(frozen=True, eq=True)
class PlaceholderOp:
    """An input of the program: its data comes from the caller."""


class ConstantOp(PlaceholderOp):
    """A placeholder whose value is bound at build time (a weight, an ONNX initializer, a folded
    compute): the graph carries it (:attr:`tilecraft.graph.Graph.constants`), the caller never
    passes it, and the runtime hands it to the kernels that read it as an argument like any
    input. ``value`` is a read-only, C-contiguous copy; compared and hashed by identity."""

    __slots__ = ("value",)

    def __init__(self, value: np.ndarray):
        object.__setattr__(self, "value", value)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"ConstantOp({self.value.dtype}{list(self.value.shape)})"


@dataclass(frozen=True, eq=True)
class ComputeOp:
    """``out[axes] = body``: one tensor expression."""

    axes: tuple[IterVar, ...]
    body: Expr

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()


Operation = PlaceholderOp | ComputeOp


@dataclass(frozen=True, eq=False)
class Tensor:
    """A named, typed n-d array value; compared and hashed by identity."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    op: Operation

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        total = 1
        for extent in self.shape:
            total *= extent
        return total

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def is_constant(self) -> bool:
        """A placeholder with a bound value (:func:`constant`)."""
        return isinstance(self.op, ConstantOp)

    @property
    def constant_value(self) -> np.ndarray:
        """The bound value of a constant (read-only); an ExpressionError for anything else."""
        if not isinstance(self.op, ConstantOp):
            raise ExpressionError(f"{self.name} is not a constant; only te.constant(...) "
                                  "tensors carry a value")
        return self.op.value

    @property
    def axes(self) -> tuple[IterVar, ...]:
        return self.op.axes if isinstance(self.op, ComputeOp) else ()

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.op.reduce_axes if isinstance(self.op, ComputeOp) else ()

    @property
    def body(self) -> Expr:
        if not isinstance(self.op, ComputeOp):
            raise ExpressionError(f"placeholder {self.name} has no body")
        return self.op.body

    @property
    def inputs(self) -> list[Tensor]:
        """Tensors this compute reads, in order of first use."""
        if not isinstance(self.op, ComputeOp):
            return []
        from tilecraft.te.visit import loads_in

        seen: dict[int, Tensor] = {}
        for load in loads_in(self.op.body):
            seen.setdefault(id(load.tensor), load.tensor)
        return list(seen.values())

    def __getitem__(self, indices: Any) -> Load:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise ShapeError(f"{self.name} has {self.ndim} dimensions {self.shape} but was "
                             f"indexed with {len(indices)} indices; index every dimension")
        exprs = []
        for position, index in enumerate(indices):
            if isinstance(index, slice):
                raise ShapeError(f"{self.name}[...] index {position} is a slice; tensor "
                                 "expressions index one element at a time")
            expr = as_expr(index)
            if not expr.dtype.is_int:
                raise ShapeError(f"{self.name}[...] index {position} ({expr}) has dtype "
                                 f"{expr.dtype}; indices must be integers")
            exprs.append(expr)
        return Load(self, tuple(exprs))

    def statement(self) -> str:
        """This compute as one line: ``C[i, j] = sum(A[i, k] * B[k, j], axis=[k])``."""
        from tilecraft.te.printer import expr_to_str

        if isinstance(self.op, ConstantOp):
            return f"{self.name}: constant{list(self.shape)} {self.dtype.value}"
        if not isinstance(self.op, ComputeOp):
            return f"{self.name}: placeholder{list(self.shape)} {self.dtype.value}"
        lhs = f"{self.name}[{', '.join(axis.name for axis in self.op.axes)}]"
        return f"{lhs} = {expr_to_str(self.op.body, top=True)}"

    def __repr__(self) -> str:
        kind = ("constant" if self.is_constant else
                "placeholder" if self.is_placeholder else "compute")
        return f"Tensor({self.name!r}, {self.shape}, {self.dtype.value}, {kind})"


#: the most elements a tensor may have: at up to 8 bytes an element, every byte offset of
#: every tensor fits in the signed 64-bit indices kernels compute with
MAX_ELEMENTS = 2**60


def _check_shape(shape: Sequence[int] | int, what: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    result = []
    for extent in shape:
        scalar = python_scalar(extent)  # np.int64(4), e.g. from np.prod, is the int 4
        extent = scalar if isinstance(scalar, int) else extent
        if isinstance(extent, bool) or not isinstance(extent, int):
            raise ShapeError(f"{what}: extent {extent!r} is not an int; shapes are static "
                             "positive integers")
        if extent < 1:
            raise ShapeError(f"{what}: extent {extent} must be at least 1")
        result.append(extent)
    elements = 1
    for extent in result:
        elements *= extent
    if elements > MAX_ELEMENTS:
        raise ShapeError(f"{what}: shape {tuple(result)} has {elements} elements, more than the "
                         f"2**60 a tensor may have (every byte offset must fit in a signed "
                         "64-bit index); use smaller shapes")
    return tuple(result)


def placeholder(shape: Sequence[int] | int, dtype: DType | str = "float32",
                name: str | None = None) -> Tensor:
    """An input tensor of the program."""
    name = name or _fresh_name("input")
    return Tensor(name, _check_shape(shape, f"placeholder {name}"), as_dtype(dtype),
                  PlaceholderOp())


def constant(value: Any, dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """A placeholder bound to ``value`` (a numpy array, or anything ``np.asarray`` takes): an
    input of the kernels that the caller never passes. ``dtype`` defaults to the value's; a
    value of another dtype is converted (``astype``). The tensor keeps a read-only copy.

    >>> import numpy as np
    >>> W = constant(np.eye(2, dtype=np.float32), name="W")
    >>> W.is_placeholder, W.is_constant, W.constant_value.flags.writeable
    (True, True, False)
    >>> W.statement()
    'W: constant[2, 2] float32'
    """
    name = name or _fresh_name("constant")
    array = np.asarray(value)
    if array.ndim == 0:
        raise ShapeError(f"constant {name}: a 0-d value; tensors have at least one dimension "
                         "(pass np.array([value]))")
    if dtype is None:
        try:
            dt = as_dtype(array.dtype)
        except Exception as err:
            raise ShapeError(f"constant {name}: value of dtype {array.dtype} has no tensor "
                             "dtype; give dtype= (float32, float16, bfloat16, int8, uint8, "
                             f"int32): {err}") from None
    else:
        dt = as_dtype(dtype)
    if dt == DType.BOOL:
        raise ShapeError(f"constant {name}: tensors cannot be bool; use a float or integer "
                         "dtype")
    shape = _check_shape(array.shape, f"constant {name}")
    bound = np.array(array, dtype=dt.numpy, order="C", copy=True)
    bound.flags.writeable = False
    return Tensor(name, shape, dt, ConstantOp(bound))


def reduce_axis(extent: int, name: str = "r") -> IterVar:
    """A reduction variable ranging over ``0 <= r < extent``."""
    (checked,) = _check_shape((extent,), f"reduce_axis {name}")
    return IterVar(name, checked, AxisKind.REDUCE)


def _axis_names(fcompute: Callable[..., Any], count: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == count and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                     for p in params):
        return [p.name for p in params]
    names = ["i", "j", "k", "l", "m", "n"]
    return names[:count] if count <= len(names) else [f"i{d}" for d in range(count)]


def compute(shape: Sequence[int] | int, fcompute: Callable[..., ExprLike],
            name: str | None = None) -> Tensor:
    """A tensor whose element at each index is ``fcompute(*index)``.

    The body may be a reduction (``te.sum`` / ``te.max`` / ``te.min``) as its outermost node.
    Shapes, dtypes, reduce-axis scoping and index bounds are checked here.
    """
    from tilecraft.te.validate import check_compute

    name = name or _fresh_name("compute")
    checked = _check_shape(shape, f"compute {name}")
    axes = tuple(IterVar(axis_name, extent, AxisKind.SPATIAL)
                 for axis_name, extent in zip(_axis_names(fcompute, len(checked)), checked))
    try:
        body = as_expr(fcompute(*axes))
    except TypeError as err:
        if "positional argument" in str(err):
            raise ShapeError(f"compute {name}: shape {checked} has {len(checked)} dimensions; "
                             f"the lambda must take one index per dimension ({err})") from None
        raise
    if body.dtype == DType.BOOL:
        raise ExpressionError(f"compute {name}: the body {body} is a condition; turn it into a "
                              "number with te.select(cond, 1, 0)")
    check_compute(name, axes, body)
    return Tensor(name, checked, body.dtype, ComputeOp(axes, body))
