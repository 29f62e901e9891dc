"""What an operator is built with: output names, argument checks that name the operator and
the argument, numpy-style broadcasting, and the dtype rules of products and statistics.

Every operator of :mod:`tilecraft.ops` is written with these, and so can a plugin's operator
(offered through the ``tilecraft_register_operators`` hook), so that its errors read like the
core's.

>>> normalize_tuple(2, 3, op="conv3d", arg="stride")
(2, 2, 2)
>>> normalize_axis(-1, 4, op="softmax")
3
>>> broadcast_shape((4, 1, 3), (5, 1), op="add")
(4, 5, 3)
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from tilecraft.dtypes import DType, as_dtype
from tilecraft.errors import DTypeError, ShapeError
from tilecraft.te.expr import Expr, ExprLike
from tilecraft.te.tensor import Tensor, compute

_counter = itertools.count()

_HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)


def fresh_name(op: str) -> str:
    """A readable, unique default name for an op's output: ``matmul_3``."""
    return f"{op}_{next(_counter)}"


def output_name(name: str | None, op: str) -> str:
    """The caller's ``name``, or a fresh one after ``op``.

    >>> output_name("C", "matmul")
    'C'
    """
    return name if name is not None else fresh_name(op)


def named_compute(shape: Sequence[int], axis_names: Sequence[str],
                  fcompute: Callable[..., ExprLike], name: str) -> Tensor:
    """``te.compute`` whose axes get ``axis_names`` even when ``fcompute`` takes ``*args``."""

    def body(*axes: Any) -> ExprLike:
        return fcompute(*axes)

    parameters = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in axis_names]
    body.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return compute(tuple(shape), body, name=name)


def check_tensor(value: Any, op: str, arg: str, ndim: int | Sequence[int] | None = None) -> Tensor:
    """Raise unless ``value`` is a Tensor (of one of the ranks ``ndim``)."""
    if not isinstance(value, Tensor):
        raise ShapeError(f"{op}: argument {arg} must be a te Tensor, got "
                         f"{type(value).__name__}; create inputs with te.placeholder")
    if ndim is not None:
        ranks = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if value.ndim not in ranks:
            wanted = " or ".join(str(r) for r in ranks)
            raise ShapeError(f"{op}: {arg} ({value.name}) must have {wanted} dimensions, got "
                             f"shape {value.shape}")
    return value


def check_float(tensor: Tensor, op: str, arg: str) -> None:
    """Raise a :class:`~tilecraft.errors.DTypeError` unless ``tensor`` has a float dtype."""
    if not tensor.dtype.is_float:
        raise DTypeError(f"{op}: {arg} ({tensor.name}) has dtype {tensor.dtype.value}, but {op} "
                         "needs a float tensor; convert it first with ops.cast(x, 'float32')")


def check_same_dtype(op: str, **tensors: Tensor) -> DType:
    """The dtype all ``tensors`` (by argument name) share; a DTypeError naming two that
    differ."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    first_name, first = next(iter(dtypes.items()))
    for name, dt in dtypes.items():
        if dt != first:
            raise DTypeError(f"{op}: {name} has dtype {dt.value} but {first_name} has "
                             f"{first.value}; convert one of them with ops.cast")
    return first


def normalize_tuple(value: int | Sequence[int], n: int, op: str, arg: str,
                    minimum: int = 1) -> tuple[int, ...]:
    """An int or a length-``n`` sequence of ints, each at least ``minimum``, as a tuple."""
    items = (value,) * n if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        result = tuple(items)  # type: ignore[arg-type]
    except TypeError:
        raise ShapeError(f"{op}: {arg}={value!r} must be an int or a tuple of {n} ints") from None
    if len(result) != n or not all(isinstance(v, int) and not isinstance(v, bool)
                                   for v in result):
        raise ShapeError(f"{op}: {arg}={value!r} must be an int or a tuple of {n} ints")
    for v in result:
        if v < minimum:
            raise ShapeError(f"{op}: {arg}={value!r} has the value {v}; each entry must be at "
                             f"least {minimum}")
    return result


def normalize_padding(value: int | Sequence[int] | Sequence[Sequence[int]], n: int,
                      op: str) -> tuple[tuple[int, int], ...]:
    """Padding as ``n`` (before, after) pairs from an int, ``n`` ints, or ``n`` pairs."""
    if isinstance(value, int) and not isinstance(value, bool):
        pairs: list[Any] = [(value, value)] * n
    else:
        try:
            items = list(value)  # type: ignore[arg-type]
        except TypeError:
            raise ShapeError(f"{op}: padding={value!r} must be an int, {n} ints or {n} "
                             "(before, after) pairs") from None
        if len(items) != n:
            raise ShapeError(f"{op}: padding={value!r} has {len(items)} entries, expected {n} "
                             f"(one per spatial dimension)")
        pairs = [(v, v) if isinstance(v, int) else tuple(v) for v in items]
    result = []
    for pair in pairs:
        if (len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                      for v in pair) or min(pair) < 0):
            raise ShapeError(f"{op}: padding={value!r} must hold non-negative ints (an int, "
                             f"{n} ints or {n} (before, after) pairs)")
        result.append((pair[0], pair[1]))
    return tuple(result)


def normalize_axis(axis: int, ndim: int, op: str, arg: str = "axis") -> int:
    """``axis`` of a tensor of ``ndim`` dimensions as a non-negative index (negative ones count
    from the end, as numpy's); a ShapeError when out of range."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ShapeError(f"{op}: {arg}={axis!r} must be an int")
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: {arg}={axis} is out of range for a tensor with {ndim} "
                         f"dimensions; use a value in [{-ndim}, {ndim - 1}]")
    return axis % ndim


def normalize_axes(axes: int | Sequence[int] | None, ndim: int, op: str,
                   arg: str = "axes") -> tuple[int, ...]:
    """Sorted, distinct, non-negative axes (``None`` means all)."""
    if axes is None:
        return tuple(range(ndim))
    items = [axes] if isinstance(axes, int) else list(axes)
    if not items:
        raise ShapeError(f"{op}: {arg} is empty; name at least one axis (or pass None for all)")
    result = [normalize_axis(a, ndim, op, arg) for a in items]
    if len(set(result)) != len(result):
        raise ShapeError(f"{op}: {arg}={axes!r} names the same axis twice")
    return tuple(sorted(result))


def broadcast_shape(a: Sequence[int], b: Sequence[int], op: str) -> tuple[int, ...]:
    """numpy's broadcasting of two shapes, with an error naming ``op``."""
    ndim = max(len(a), len(b))
    pa = (1,) * (ndim - len(a)) + tuple(a)
    pb = (1,) * (ndim - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"{op}: shapes {tuple(a)} and {tuple(b)} cannot be broadcast "
                             "(numpy rules: trailing dimensions must match or be 1)")
        out.append(max(x, y))
    return tuple(out)


def broadcast_index(tensor: Tensor, out_axes: Sequence[Expr]) -> tuple[Expr | int, ...]:
    """Indices reading ``tensor`` broadcast (right-aligned, numpy rules) to ``out_axes``."""
    offset = len(out_axes) - tensor.ndim
    return tuple(0 if extent == 1 else out_axes[offset + d]
                 for d, extent in enumerate(tensor.shape))


def compute_float(expr: Expr) -> Expr:
    """Widen a half-precision expression to float32, so constants and intermediates of an op's
    formula are float32; the op casts its result back to the tensor's dtype."""
    return expr.astype(DType.FLOAT32) if expr.dtype in _HALF_TYPES else expr


def accumulation_dtype(dtype: DType) -> DType:
    """The dtype intermediate statistics (means, variances) are kept in."""
    return DType.FLOAT32 if dtype in _HALF_TYPES else dtype


def product_dtype(op: str, a: Tensor, b: Tensor, out_dtype: DType | str | None) -> DType:
    """The dtype of a product-sum of ``a`` and ``b``: ``out_dtype`` if given, else the shared
    float dtype, else int32 for integer operands."""
    if out_dtype is not None:
        target = as_dtype(out_dtype)
        if target == DType.BOOL:
            raise DTypeError(f"{op}: out_dtype cannot be bool")
        if a.dtype.is_float != target.is_float or b.dtype.is_float != target.is_float:
            raise DTypeError(f"{op}: out_dtype={target.value} mixes float and integer with "
                             f"{a.name} ({a.dtype.value}) and {b.name} ({b.dtype.value}); cast "
                             "the inputs first with ops.cast")
        return target
    if a.dtype != b.dtype:
        raise DTypeError(f"{op}: {a.name} is {a.dtype.value} but {b.name} is {b.dtype.value}; "
                         "pass out_dtype= (e.g. 'int32' for uint8 x int8) or cast one input")
    return a.dtype if a.dtype.is_float else DType.INT32


def operand(expr: Expr, dtype: DType) -> Expr:
    """``expr`` cast to ``dtype`` where it differs (loads feeding a product-sum)."""
    return expr.astype(dtype)
