"""Evaluate one compute with numpy: the definition of what a te compute means.

The iteration space of a compute has one array axis per IterVar: its spatial axes first (in
order), then its reduce axes. Every sub-expression evaluates to an array broadcast only over
the IterVars it depends on (size 1 along the others, or a 0-d array when it depends on none),
so ``A[i, k] * B[k, j]`` never materialises more than ``A`` and ``B`` themselves.

A load whose indices are affine in the IterVars (``A[i, k]``, ``X[n, c, 2*h + r, w + s]``)
is a strided view of the tensor, without copying; other loads gather through one flat index.
A ``sum`` whose body is a product of factors is contracted with ``np.einsum(optimize=True)``
over the factors, each squeezed to the axes it uses; other reductions evaluate the body and
reduce it. When the arrays would get large the space is cut into chunks along its spatial axes
(and, if that is not enough, along its reduce axes, combining the partial results).

Semantics (what every code generator must reproduce):

- values live in ``DType.compute_numpy``: float16/bfloat16 loads widen to float32, arithmetic
  runs in float32 and the result is rounded to the compute's dtype when it is stored;
- integer arithmetic wraps in its dtype; ``//`` and ``%`` floor; integer division by zero gives
  0 (it only happens in branches a guard discards);
- reductions accumulate in the compute dtype of their body (float32 for the half types); the
  identity is 0 for sum, -inf / the type's minimum for max, +inf / the maximum for min;
- ``sigmoid(x) = 1 / (1 + exp(-x))``; ``erf`` is computed in float64 and rounded;
- a load under a ``select`` may be out of range in the branch not taken: its indices are
  clamped into the tensor before gathering (the value is discarded).

>>> from tilecraft import te
>>> A = te.placeholder((2, 3), name="A")
>>> r = te.reduce_axis(3, name="r")
>>> S = te.compute((2,), lambda i: te.sum(A[i, r] * 2.0, axis=r), name="S")
>>> evaluate(S, {A: np.arange(6, dtype=np.float32).reshape(2, 3)})
array([ 6., 24.], dtype=float32)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import ExpressionError, InputError
from tilecraft.reference.bitwise import shift_left, shift_right
from tilecraft.reference.numerics import cast_values, const_array, erf
from tilecraft.te.bounds import Affine, affine, interval
from tilecraft.te.expr import (
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
    Reduce,
    ReduceOp,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import vars_in

#: largest number of elements one intermediate array may have before the space is chunked
CHUNK_ELEMENTS = 1 << 23

_HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)

_BINARY = {
    BinaryOp.ADD: np.add, BinaryOp.SUB: np.subtract, BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: np.divide, BinaryOp.FLOORDIV: np.floor_divide, BinaryOp.MOD: np.mod,
    BinaryOp.MAX: np.maximum, BinaryOp.MIN: np.minimum,
    BinaryOp.BITWISE_AND: np.bitwise_and, BinaryOp.BITWISE_OR: np.bitwise_or,
    BinaryOp.BITWISE_XOR: np.bitwise_xor,
    # ONNX BitShift: an amount outside [0, bits) gives 0 / the sign (tilecraft.reference.bitwise)
    BinaryOp.SHIFT_LEFT: shift_left, BinaryOp.SHIFT_RIGHT: shift_right,
}
_COMPARE = {
    CompareOp.LT: np.less, CompareOp.LE: np.less_equal, CompareOp.GT: np.greater,
    CompareOp.GE: np.greater_equal, CompareOp.EQ: np.equal, CompareOp.NE: np.not_equal,
}
_REDUCE = {ReduceOp.SUM: np.sum, ReduceOp.MAX: np.max, ReduceOp.MIN: np.min,
           ReduceOp.PROD: np.prod}
_COMBINE = {ReduceOp.SUM: np.add, ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum,
            ReduceOp.PROD: np.multiply}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = np.ones((), dtype=x.dtype)
    return one / (one + np.exp(-x))


def _erf(x: np.ndarray) -> np.ndarray:
    return erf(x).astype(x.dtype)


_UNARY = {
    UnaryOp.NEG: np.negative, UnaryOp.ABS: np.abs, UnaryOp.EXP: np.exp, UnaryOp.LOG: np.log,
    UnaryOp.SQRT: np.sqrt, UnaryOp.TANH: np.tanh, UnaryOp.ERF: _erf, UnaryOp.SIGMOID: _sigmoid,
    UnaryOp.FLOOR: np.floor, UnaryOp.CEIL: np.ceil, UnaryOp.ROUND: np.rint,
    UnaryOp.SIN: np.sin, UnaryOp.COS: np.cos, UnaryOp.TAN: np.tan, UnaryOp.ASIN: np.arcsin,
    UnaryOp.ACOS: np.arccos, UnaryOp.ATAN: np.arctan, UnaryOp.SINH: np.sinh,
    UnaryOp.COSH: np.cosh, UnaryOp.ASINH: np.arcsinh, UnaryOp.ACOSH: np.arccosh,
    UnaryOp.ATANH: np.arctanh, UnaryOp.BITWISE_NOT: np.invert,
}


def evaluate(tensor: Tensor, env: Mapping[Tensor, np.ndarray]) -> np.ndarray:
    """The value of the compute ``tensor``, given the arrays of the tensors it reads.

    ``env`` maps each tensor the body loads (placeholders and computes alike) to an array of
    that tensor's shape and storage dtype (``DType.numpy``). The result has ``tensor.shape`` and
    ``tensor.dtype.numpy``, and never aliases an input.
    """
    if not isinstance(tensor, Tensor) or not isinstance(tensor.op, ComputeOp):
        raise ExpressionError(f"evaluate needs a compute tensor, got {tensor!r}; placeholders "
                              "take their value from the inputs")
    arrays = _arrays_for(tensor, env)
    return _ComputeEvaluation(tensor, arrays).run()


def _arrays_for(tensor: Tensor, env: Mapping[Tensor, np.ndarray]) -> dict[Tensor, np.ndarray]:
    arrays: dict[Tensor, np.ndarray] = {}
    for producer in tensor.inputs:
        if producer not in env and producer.is_constant:  # a constant carries its value
            arrays[producer] = producer.constant_value
            continue
        if producer not in env:
            raise InputError(f"compute {tensor.name} reads {producer.name}, which has no array; "
                             f"add {producer.name} ({producer.dtype.value}"
                             f"{list(producer.shape)}) to the environment")
        array = np.asarray(env[producer])
        if array.shape != producer.shape or array.dtype != producer.dtype.numpy:
            raise InputError(f"the array for {producer.name} is {array.dtype}{list(array.shape)} "
                             f"but {tensor.name} reads it as {producer.dtype.numpy}"
                             f"{list(producer.shape)}; pass an array of that shape and dtype")
        arrays[producer] = np.ascontiguousarray(array)
    return arrays


def product_factors(expr: Expr) -> list[Expr]:
    """The factors of a product tree ``a * (b * c)`` -> ``[a, b, c]`` (one factor otherwise)."""
    if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
        return product_factors(expr.a) + product_factors(expr.b)
    return [expr]


class _ComputeEvaluation:
    """One compute: its iteration space, chunk plan and result assembly."""

    def __init__(self, tensor: Tensor, arrays: dict[Tensor, np.ndarray]):
        assert isinstance(tensor.op, ComputeOp)
        self.tensor = tensor
        self.arrays = arrays
        self.body = tensor.op.body
        self.spatial = tensor.op.axes
        self.reduce = self.body.axes if isinstance(self.body, Reduce) else ()
        self.axes = self.spatial + self.reduce
        self.load_plans: dict[int, _LoadPlan] = {}
        if isinstance(self.body, Reduce):
            inner = self.body.body
            self.factors = (product_factors(inner) if self.body.op is ReduceOp.SUM else [inner])
        else:
            self.factors = [self.body]
        self.einsum = isinstance(self.body, Reduce) and self.body.op is ReduceOp.SUM
        # the IterVars each materialised array depends on
        used = [frozenset(v for v in vars_in(f) if isinstance(v, IterVar)) for f in self.factors]
        if not self.einsum and isinstance(self.body, Reduce) and self.body.op is ReduceOp.SUM:
            used = [frozenset(used[0] | set(self.reduce))]
        self.footprints = used

    # chunk planning ---------------------------------------------------------------------------
    def _largest_array(self, extents: Mapping[IterVar, int]) -> int:
        return max(math.prod(extents[v] for v in used if v in extents)
                   for used in self.footprints)

    def _plan(self) -> dict[IterVar, int]:
        """Chunk extent per axis: spatial axes first, then reduce axes, halved until it fits."""
        chunk = {axis: axis.extent for axis in self.axes}
        for group in (self.spatial, self.reduce):
            while self._largest_array(chunk) > CHUNK_ELEMENTS:
                candidates = [a for a in group if chunk[a] > 1
                              and any(a in used for used in self.footprints)]
                if not candidates:
                    break
                widest = max(candidates, key=lambda a: chunk[a])
                chunk[widest] = (chunk[widest] + 1) // 2
        return chunk

    @staticmethod
    def _ranges(axes: Sequence[IterVar], chunk: Mapping[IterVar, int]
                ) -> Iterator[dict[IterVar, tuple[int, int]]]:
        per_axis = [[(lo, min(lo + chunk[a], a.extent)) for lo in range(0, a.extent, chunk[a])]
                    for a in axes]
        for combo in itertools.product(*per_axis):
            yield dict(zip(axes, combo))

    # evaluation -------------------------------------------------------------------------------
    def run(self) -> np.ndarray:
        with np.errstate(all="ignore"):  # rounding to a half type may overflow to inf
            return self._run()

    def _run(self) -> np.ndarray:
        storage = self.tensor.dtype.numpy
        chunk = self._plan()
        spatial_chunks = list(self._ranges(self.spatial, chunk))
        if len(spatial_chunks) == 1:
            value = self._spatial_chunk(spatial_chunks[0], chunk)
            return np.broadcast_to(value, self.tensor.shape).astype(storage)
        out = np.empty(self.tensor.shape, dtype=storage)
        for ranges in spatial_chunks:
            value = self._spatial_chunk(ranges, chunk)
            where = tuple(slice(*ranges[axis]) for axis in self.spatial)
            out[where] = np.broadcast_to(value, out[where].shape).astype(storage)
        return out

    def _spatial_chunk(self, spatial: dict[IterVar, tuple[int, int]],
                       chunk: Mapping[IterVar, int]) -> np.ndarray:
        """The body over one spatial chunk, shaped like it (size-1 where it does not vary)."""
        if not isinstance(self.body, Reduce):
            return _Scope(self, spatial).value(self.body)
        total: np.ndarray | None = None
        for reduce_ranges in self._ranges(self.reduce, chunk):
            scope = _Scope(self, {**spatial, **reduce_ranges})
            part = self._reduce(scope)
            total = part if total is None else _COMBINE[self.body.op](total, part)
        assert total is not None
        return total

    def _reduce(self, scope: _Scope) -> np.ndarray:
        """Reduce the body over the scope's reduce ranges; result has only the spatial axes."""
        body = self.body
        assert isinstance(body, Reduce)
        compute_dtype = body.body.dtype.compute_numpy
        n_spatial = len(self.spatial)
        with np.errstate(all="ignore"):
            if self.einsum:
                return self._contract(scope, compute_dtype)
            value = scope.value(body.body)
            value = value.reshape((1,) * (scope.ndim - value.ndim) + value.shape)
            reduce_positions = tuple(range(n_spatial, scope.ndim))
            if body.op in (ReduceOp.SUM, ReduceOp.PROD):
                # a body constant along a reduce axis still counts once per point of it
                full = tuple(value.shape[:n_spatial]) + scope.shape[n_spatial:]
                value = np.broadcast_to(value, full)
                result = _REDUCE[body.op](value, axis=reduce_positions, dtype=compute_dtype)
            else:
                result = _REDUCE[body.op](value, axis=reduce_positions)
        return np.asarray(result, dtype=compute_dtype)

    def _contract(self, scope: _Scope, compute_dtype: np.dtype) -> np.ndarray:
        """``sum(f1 * f2 * ...)`` as one einsum over the squeezed factors."""
        letters = {position: chr(ord("a") + position) if position < 26
                   else chr(ord("A") + position - 26) for position in range(scope.ndim)}
        operands: list[object] = []
        present: set[int] = set()
        for factor in self.factors:
            value = scope.value(factor)
            if value.ndim == 0:
                operands += [value, []]
                continue
            keep = [p for p in range(value.ndim) if value.shape[p] != 1]
            operands += [value.reshape([value.shape[p] for p in keep]), keep]
            present.update(keep)
        n_spatial = len(self.spatial)
        for position in range(n_spatial, scope.ndim):
            if position not in present and scope.shape[position] > 1:
                # the body does not vary along this reduce axis: sum it as many times
                operands += [np.ones(scope.shape[position], dtype=compute_dtype), [position]]
        output = sorted(p for p in present if p < n_spatial)
        subscripts = ",".join("".join(letters[p] for p in subs)
                              for subs in operands[1::2])  # type: ignore[union-attr]
        subscripts += "->" + "".join(letters[p] for p in output)
        arrays = [np.asarray(a, dtype=compute_dtype) for a in operands[0::2]]
        result = np.einsum(subscripts, *arrays, optimize=len(arrays) > 1)
        shape = [scope.shape[p] if p in output else 1 for p in range(n_spatial)]
        return np.asarray(result, dtype=compute_dtype).reshape(shape)


class _Scope:
    """Evaluates expressions over one chunk of the iteration space."""

    def __init__(self, evaluation: _ComputeEvaluation, ranges: dict[IterVar, tuple[int, int]]):
        self.evaluation = evaluation
        self.axes = evaluation.axes
        self.ndim = len(self.axes)
        self.position = {axis: p for p, axis in enumerate(self.axes)}
        self.ranges = ranges
        self.shape = tuple(ranges[a][1] - ranges[a][0] for a in self.axes)
        self.memo: dict[int, np.ndarray] = {}

    def value(self, expr: Expr) -> np.ndarray:
        key = id(expr)
        cached = self.memo.get(key)
        if cached is None:
            with np.errstate(all="ignore"):
                cached = np.asarray(self._evaluate(expr))
            self.memo[key] = cached
        return cached

    def _iota(self, var: IterVar) -> np.ndarray:
        lo, hi = self.ranges[var]
        shape = [1] * self.ndim
        shape[self.position[var]] = hi - lo
        return np.arange(lo, hi, dtype=np.int32).reshape(shape)

    def _evaluate(self, expr: Expr) -> np.ndarray:
        if isinstance(expr, Const):
            return const_array(expr.value, expr.dtype)
        if isinstance(expr, IterVar):
            if expr not in self.position:
                raise ExpressionError(f"compute {self.evaluation.tensor.name} uses the index "
                                      f"variable {expr.name}, which is not one of its axes")
            return self._iota(expr)
        if isinstance(expr, Var):
            raise ExpressionError(f"compute {self.evaluation.tensor.name} uses the free "
                                  f"variable {expr.name}, which has no value; substitute it "
                                  "before evaluating")
        if isinstance(expr, Binary):
            return _BINARY[expr.op](self.value(expr.a), self.value(expr.b))
        if isinstance(expr, Unary):
            return _UNARY[expr.op](self.value(expr.x))
        if isinstance(expr, Compare):
            return _COMPARE[expr.op](self.value(expr.a), self.value(expr.b))
        if isinstance(expr, Logical):
            op = np.logical_and if expr.op is LogicalOp.AND else np.logical_or
            return op(self.value(expr.a), self.value(expr.b))
        if isinstance(expr, Not):
            return np.logical_not(self.value(expr.x))
        if isinstance(expr, Select):
            return np.where(self.value(expr.cond), self.value(expr.true_value),
                            self.value(expr.false_value))
        if isinstance(expr, Cast):
            return cast_values(self.value(expr.x), expr.x.dtype, expr.to)
        if isinstance(expr, Load):
            return self._load(expr)
        if isinstance(expr, Reduce):
            raise ExpressionError(f"compute {self.evaluation.tensor.name}: a reduction must be "
                                  "the whole body of a compute")
        raise ExpressionError(f"the reference interpreter cannot evaluate {type(expr).__name__} "
                              f"nodes ({expr}) in compute {self.evaluation.tensor.name}")

    def _plan_load(self, load: Load) -> _LoadPlan:
        plans = self.evaluation.load_plans
        key = id(load)
        if key not in plans:
            plans[key] = _LoadPlan.of(load)
        return plans[key]

    def _load(self, load: Load) -> np.ndarray:
        array = self.evaluation.arrays[load.tensor]
        plan = self._plan_load(load)
        if plan.affine is not None:
            gathered = self._strided_view(array, plan.affine)
        else:
            # a general gather through one flat index (faster than n-d fancy indexing)
            flat_index: np.ndarray | int = 0
            for index, extent, clamp, stride in zip(load.indices, load.tensor.shape,
                                                    plan.clamps, _element_strides(array)):
                value = self.value(index).astype(np.intp)
                if clamp:
                    value = np.clip(value, 0, extent - 1)
                flat_index = flat_index + value * stride
            gathered = np.asarray(array.reshape(-1).take(flat_index))
        if load.tensor.dtype in _HALF_TYPES:
            return gathered.astype(np.float32)
        return gathered

    def _strided_view(self, array: np.ndarray, forms: tuple[Affine, ...]) -> np.ndarray:
        """A load whose indices are affine in the IterVars, as a view of ``array``."""
        element_strides = _element_strides(array)
        strides = [0] * self.ndim
        shape = [1] * self.ndim
        offset = 0
        for form, element_stride in zip(forms, element_strides):
            offset += form.constant * element_stride
            for var, coef in form.coefs:
                position = self.position[var]  # type: ignore[index]
                strides[position] += coef * element_stride
                shape[position] = self.shape[position]
                offset += coef * self.ranges[var][0] * element_stride  # type: ignore[index]
        flat = array.reshape(-1)[offset:]
        return np.lib.stride_tricks.as_strided(
            flat, shape=shape, strides=[s * array.itemsize for s in strides], writeable=False)


def _element_strides(array: np.ndarray) -> list[int]:
    """Row-major element strides of a C-contiguous array's shape."""
    strides = [1] * array.ndim
    for d in range(array.ndim - 2, -1, -1):
        strides[d] = strides[d + 1] * array.shape[d + 1]
    return strides


@dataclass(frozen=True)
class _LoadPlan:
    """How to read one Load: which indices need clamping, and its affine form if it has one
    (then the load is a strided view of the tensor, no gather at all)."""

    clamps: tuple[bool, ...]
    affine: tuple[Affine, ...] | None

    @staticmethod
    def of(load: Load) -> _LoadPlan:
        clamps = []
        for index, extent in zip(load.indices, load.tensor.shape):
            rng = interval(index)
            clamps.append(rng is None or rng[0] < 0 or rng[1] > extent - 1)
        forms = [affine(index) for index in load.indices]
        usable = (not any(clamps) and all(f is not None for f in forms)
                  and all(isinstance(v, IterVar) for f in forms if f for v, _ in f.coefs))
        return _LoadPlan(tuple(clamps), tuple(forms) if usable else None)  # type: ignore[arg-type]
