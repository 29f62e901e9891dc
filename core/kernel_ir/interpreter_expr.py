"""Compiling Kernel IR expressions into Python closures for the interpreter.

A compiled expression is a function of an *environment*: a list holding the current value of
every loop variable and the array of every buffer, each at a slot fixed at compile time.

Two flavours exist. *Scalar* closures evaluate one iteration on numpy scalars (selects and
logical operators short-circuit, so a guarded load is never evaluated out of its guard).
*Vector* closures evaluate with one loop variable bound to ``arange(extent)``, giving arrays;
they evaluate both sides of selects, so a load that would leave its buffer raises
:class:`VectorFallback` and the caller reruns the loop with scalar closures.

>>> from tilecraft.te import Var, const
>>> compiler = ExprCompiler("demo")
>>> i = Var("i")
>>> slot = compiler.bind_var(i)
>>> fn = compiler.compile((i * 3 + 1) // 2)
>>> env = [None] * compiler.slot_count
>>> env[slot] = 5
>>> int(fn(env))
8
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import IndexBoundsError, LoweringError
from tilecraft.kernel_ir.concurrency import LaneReduce
from tilecraft.kernel_ir.nodes import Allocate, Buffer, BufferLoad
from tilecraft.reference.bitwise import bitwise_not, shift_left, shift_right
from tilecraft.reference.numerics import cast_values, const_array
from tilecraft.reference.numerics import erf as reference_erf
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

Env = list[Any]
ExprFn = Callable[[Env], Any]
StmtFn = Callable[[Env], None]

_HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)


class VectorFallback(Exception):  # noqa: N818 - a control-flow signal, not an error
    """A vector evaluation would read or write outside a buffer: rerun the loop scalar."""


@lru_cache(maxsize=256)
def lane_indices(count: int) -> np.ndarray:
    """``arange(count)`` as int32, shared and read-only."""
    values = np.arange(count, dtype=np.int32)
    values.setflags(write=False)
    return values


def is_half(dtype: DType) -> bool:
    return dtype in _HALF_TYPES


def const_value(const: Const) -> Any:
    """The value of a constant as the interpreter holds it (compute dtype, rounded for halves;
    the conventions of :mod:`tilecraft.reference.numerics`)."""
    value = const_array(const.value, const.dtype)[()]
    return bool(value) if const.dtype is DType.BOOL else value


def _erf(x: Any) -> Any:
    return reference_erf(np.asarray(x)).astype(np.float32)[()]


_ONE = np.float32(1.0)


def _sigmoid(x: Any) -> Any:
    return _ONE / (_ONE + np.exp(-x))


_UNARY: dict[UnaryOp, Callable[[Any], Any]] = {
    UnaryOp.NEG: operator.neg,
    UnaryOp.ABS: abs,
    UnaryOp.EXP: np.exp,
    UnaryOp.LOG: np.log,
    UnaryOp.SQRT: np.sqrt,
    UnaryOp.TANH: np.tanh,
    UnaryOp.ERF: _erf,
    UnaryOp.SIGMOID: _sigmoid,
    UnaryOp.FLOOR: np.floor,
    UnaryOp.CEIL: np.ceil,
    UnaryOp.ROUND: np.rint,
    UnaryOp.SIN: np.sin,
    UnaryOp.COS: np.cos,
    UnaryOp.TAN: np.tan,
    UnaryOp.ASIN: np.arcsin,
    UnaryOp.ACOS: np.arccos,
    UnaryOp.ATAN: np.arctan,
    UnaryOp.SINH: np.sinh,
    UnaryOp.COSH: np.cosh,
    UnaryOp.ASINH: np.arcsinh,
    UnaryOp.ACOSH: np.arccosh,
    UnaryOp.ATANH: np.arctanh,
}

_COMPARE: dict[CompareOp, Callable[[Any, Any], Any]] = {
    CompareOp.LT: operator.lt,
    CompareOp.LE: operator.le,
    CompareOp.GT: operator.gt,
    CompareOp.GE: operator.ge,
    CompareOp.EQ: operator.eq,
    CompareOp.NE: operator.ne,
}


def _int_floordiv(a: Any, b: Any) -> Any:
    # numpy's integer division by zero yields 0; plain Python ints would raise
    return a // b if b else 0 * a


def _int_mod(a: Any, b: Any) -> Any:
    return a % b if b else 0 * a


def _binary_fn(op: BinaryOp, dtype: DType, vector: bool) -> Callable[[Any, Any], Any]:
    if op is BinaryOp.ADD:
        return operator.add
    if op is BinaryOp.SUB:
        return operator.sub
    if op is BinaryOp.MUL:
        return operator.mul
    if op is BinaryOp.DIV:
        return operator.truediv
    if op is BinaryOp.FLOORDIV:
        return operator.floordiv if vector else _int_floordiv
    if op is BinaryOp.MOD:
        return operator.mod if vector else _int_mod
    if op is BinaryOp.MAX:
        return max if dtype.is_int and not vector else np.maximum
    if op is BinaryOp.MIN:
        return min if dtype.is_int and not vector else np.minimum
    if op in _BITWISE:
        return _BITWISE[op]
    if op is BinaryOp.SHIFT_LEFT:   # total: an amount outside [0, bits) is defined (ONNX's)
        return lambda a, b: shift_left(a, b, dtype)
    if op is BinaryOp.SHIFT_RIGHT:
        return lambda a, b: shift_right(a, b, dtype)
    raise LoweringError(f"the interpreter does not know the binary operator '{op.value}'")


_BITWISE: dict[BinaryOp, Callable[[Any, Any], Any]] = {
    BinaryOp.BITWISE_AND: operator.and_, BinaryOp.BITWISE_OR: operator.or_,
    BinaryOp.BITWISE_XOR: operator.xor,
}


def allocation_fill(alloc: Allocate) -> Any:
    """The value an interpreted ``alloc`` starts at: zero, or — where it is not ``zeroed`` —
    NaN (the largest value for integers and booleans' ``True``), so reading an element before
    writing it poisons the result.

    >>> from tilecraft.kernel_ir.nodes import Buffer, Seq
    >>> allocation_fill(Allocate(Buffer("t", (2,), DType.FLOAT32), Seq(()), zeroed=False))
    nan
    """
    if alloc.zeroed:
        return 0
    dtype = np.dtype(alloc.buffer.dtype.numpy)
    if dtype.kind == "f":
        return np.nan
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def combine_fn(op: ReduceOp, dtype: DType, vector: bool = False) -> Callable[[Any, Any], Any]:
    """How an accumulating store combines the old value with the new one."""
    if op is ReduceOp.SUM:
        return operator.add
    if op is ReduceOp.PROD:
        return np.multiply if vector else operator.mul
    return _binary_fn(BinaryOp.MAX if op is ReduceOp.MAX else BinaryOp.MIN, dtype, vector)


def accumulate_scalar(op: ReduceOp, dtype: DType) -> Callable[[Any, Any], Any]:
    """``combine(stored, value)`` for a scalar accumulating store into a ``dtype`` buffer
    (the stored value widened to float32 first for half types)."""
    combine = combine_fn(op, dtype)
    if is_half(dtype):
        return lambda stored, value: combine(np.float32(stored), value)
    return combine


def check_index(values: Sequence[Any], shape: Sequence[int]) -> bool:
    """True when every scalar index lies inside ``shape``."""
    return all(0 <= v < n for v, n in zip(values, shape))


class ExprCompiler:
    """Assigns environment slots to variables and buffers and compiles expressions."""

    def __init__(self, kernel_name: str):
        self.kernel_name = kernel_name
        self.slot_count = 0
        self._slots: dict[Any, int] = {}
        self._names: dict[int, str] = {}
        #: buffer id -> slot of its "copy in flight" mask (destinations of asynchronous copies)
        self.load_guards: dict[int, int] = {}

    def var_slots(self) -> list[int]:
        """The slots of every loop variable bound so far."""
        return [slot for key, slot in self._slots.items() if isinstance(key, Var)]

    def new_slot(self) -> int:
        self.slot_count += 1
        return self.slot_count - 1

    def bind_var(self, var: Var) -> int:
        if var not in self._slots:
            self._slots[var] = self.new_slot()
            self._names[self._slots[var]] = var.name
        return self._slots[var]

    def bind_buffer(self, buffer: Buffer) -> int:
        key = ("buffer", id(buffer))
        if key not in self._slots:
            self._slots[key] = self.new_slot()
        return self._slots[key]

    def buffer_slot(self, buffer: Buffer, where: Any) -> int:
        slot = self._slots.get(("buffer", id(buffer)))
        if slot is None:
            raise LoweringError(f"kernel {self.kernel_name}: {where} uses buffer {buffer.name}, "
                                "which is neither a parameter nor allocated around it")
        return slot

    # expressions --------------------------------------------------------------------------
    def compile(self, expr: Expr, vector: bool = False) -> ExprFn:
        """A closure computing ``expr``; ``vector`` makes it array-safe (see module doc)."""
        if isinstance(expr, Const):
            value = const_value(expr)
            return lambda env: value
        if isinstance(expr, Var):
            slot = self._slots.get(expr)
            if slot is None:
                raise LoweringError(f"kernel {self.kernel_name}: variable {expr.name} is used "
                                    "outside a loop that binds it")
            return operator.itemgetter(slot)
        if isinstance(expr, BufferLoad):
            return self._load(expr, vector)
        if isinstance(expr, LaneReduce):
            return self._lane_reduce(expr, vector)
        if isinstance(expr, Binary):
            fn = _binary_fn(expr.op, expr.a.dtype, vector)
            a, b = self.compile(expr.a, vector), self.compile(expr.b, vector)
            return lambda env: fn(a(env), b(env))
        if isinstance(expr, Unary):
            x = self.compile(expr.x, vector)
            if expr.op is UnaryOp.BITWISE_NOT:   # in the operand's width (a loop variable is
                dtype = expr.dtype                # a Python int)
                return lambda env: bitwise_not(x(env), dtype)
            ufn = _UNARY[expr.op]
            return lambda env: ufn(x(env))
        if isinstance(expr, Compare):
            cfn = _COMPARE[expr.op]
            a, b = self.compile(expr.a, vector), self.compile(expr.b, vector)
            return lambda env: cfn(a(env), b(env))
        if isinstance(expr, Logical):
            return self._logical(expr, vector)
        if isinstance(expr, Not):
            x = self.compile(expr.x, vector)
            if vector:
                return lambda env: np.logical_not(x(env))
            return lambda env: not x(env)
        if isinstance(expr, Select):
            return self._select(expr, vector)
        if isinstance(expr, Cast):
            return self._cast(expr, vector)
        if isinstance(expr, (IterVar, Load, Reduce)):
            raise LoweringError(
                f"kernel {self.kernel_name}: the te node {expr} ({type(expr).__name__}) is not "
                "Kernel IR; lower the compute with tilecraft.lower.lower_compute")
        raise LoweringError(f"kernel {self.kernel_name}: the interpreter does not know the "
                            f"expression {type(expr).__name__} ({expr})")

    def _logical(self, expr: Logical, vector: bool) -> ExprFn:
        a, b = self.compile(expr.a, vector), self.compile(expr.b, vector)
        if vector:
            lfn = np.logical_and if expr.op is LogicalOp.AND else np.logical_or
            return lambda env: lfn(a(env), b(env))
        if expr.op is LogicalOp.AND:
            return lambda env: bool(a(env)) and bool(b(env))
        return lambda env: bool(a(env)) or bool(b(env))

    def _select(self, expr: Select, vector: bool) -> ExprFn:
        cond = self.compile(expr.cond, vector)
        when_true = self.compile(expr.true_value, vector)
        when_false = self.compile(expr.false_value, vector)
        if not vector:
            return lambda env: when_true(env) if cond(env) else when_false(env)
        dtype = expr.dtype.compute_numpy

        def select(env: Env) -> Any:
            taken = cond(env)
            if isinstance(taken, np.ndarray):
                return np.where(taken, when_true(env), when_false(env)).astype(dtype, copy=False)
            return when_true(env) if taken else when_false(env)

        return select

    def _cast(self, expr: Cast, vector: bool) -> ExprFn:
        # truncation with saturation for float -> int, wrap-around between integers, rounding
        # to nearest-even for half types: the reference's conventions, shared with it
        x = self.compile(expr.x, vector)
        source, target = expr.x.dtype, expr.to
        return lambda env: cast_values(np.asarray(x(env)), source, target)[()]

    def index(self, buffer: Buffer, indices: Sequence[Expr], what: str,
              vector: bool = False) -> ExprFn:
        """A closure computing the (bounds-checked) numpy index of ``buffer[indices]``."""
        fns = [self.compile(i, vector) for i in indices]
        shape = buffer.shape
        if vector:

            def vector_index(env: Env) -> tuple[Any, ...]:
                where = tuple(fn(env) for fn in fns)
                for value, size in zip(where, shape):
                    if isinstance(value, np.ndarray):
                        if value.size and (value.min() < 0 or value.max() >= size):
                            raise VectorFallback
                    elif not 0 <= value < size:
                        raise VectorFallback
                return where

            return vector_index
        fail = self._out_of_bounds(buffer, indices, what)
        if len(fns) == 1:
            (first,), (size,) = fns, shape

            def index_1d(env: Env) -> Any:
                value = first(env)
                if 0 <= value < size:
                    return value
                fail(env, (value,))

            return index_1d
        if len(fns) == 2:
            (first, second), (rows, cols) = fns, shape

            def index_2d(env: Env) -> tuple[Any, Any]:
                row, col = first(env), second(env)
                if 0 <= row < rows and 0 <= col < cols:
                    return row, col
                fail(env, (row, col))

            return index_2d

        def index_nd(env: Env) -> tuple[Any, ...]:
            where = tuple(fn(env) for fn in fns)
            if check_index(where, shape):
                return where
            fail(env, where)

        return index_nd

    def _out_of_bounds(self, buffer: Buffer, indices: Sequence[Expr],
                       what: str) -> Callable[[Env, tuple[Any, ...]], None]:
        from tilecraft.kernel_ir.nodes import walk_expr

        used = {node: self._slots[node] for index in indices for node in walk_expr(index)
                if isinstance(node, Var) and node in self._slots}
        kernel = self.kernel_name

        def fail(env: Env, where: tuple[Any, ...]) -> None:
            values = ", ".join(f"{var.name}={env[slot]}" for var, slot in used.items())
            dims = ", ".join(str(int(v)) for v in where)
            raise IndexBoundsError(
                f"kernel {kernel}: {what}: index ({dims}) is outside {buffer.name} of shape "
                f"{list(buffer.shape)}" + (f" (with {values})" if values else "") +
                "; clamp or guard the index, or fix the loop extents")

        return fail

    def _load(self, load: BufferLoad, vector: bool) -> ExprFn:
        buffer = load.buffer
        slot = self.buffer_slot(buffer, f"a load of {buffer.name}")
        index = self.index(buffer, load.indices, f"load {load}", vector)
        guard = self.load_guards.get(id(buffer))
        if guard is not None:
            index = self._guarded(index, guard, load)
        if is_half(buffer.dtype):
            if vector or buffer.lanes > 1:
                return lambda env: np.asarray(env[slot][index(env)], dtype=np.float32)
            return lambda env: np.float32(env[slot][index(env)])
        if buffer.lanes > 1:
            return lambda env: env[slot][index(env)].copy()
        return lambda env: env[slot][index(env)]

    def _guarded(self, index: ExprFn, mask_slot: int, load: BufferLoad) -> ExprFn:
        kernel = self.kernel_name

        def checked(env: Env) -> Any:
            where = index(env)
            mask = env[mask_slot]
            if mask is not None and np.any(mask[where]):
                raise LoweringError(
                    f"kernel {kernel}: {load} reads {load.buffer.name} while an asynchronous "
                    "copy into that element is still in flight; commit the copy and wait_group "
                    "for it before the read")
            return where

        return checked

    def _lane_reduce(self, expr: LaneReduce, vector: bool) -> ExprFn:
        x = self.compile(expr.x, vector)
        reduce = {ReduceOp.SUM: np.add.reduce, ReduceOp.MAX: np.maximum.reduce,
                  ReduceOp.MIN: np.minimum.reduce, ReduceOp.PROD: np.multiply.reduce}[expr.op]
        dtype = expr.dtype.compute_numpy
        return lambda env: dtype.type(reduce(np.asarray(x(env), dtype=dtype), axis=-1))


__all__ = ["Env", "ExprCompiler", "ExprFn", "StmtFn", "VectorFallback", "accumulate_scalar",
           "check_index", "combine_fn", "const_value", "is_half", "lane_indices"]
