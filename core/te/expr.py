"""Scalar expression nodes of the tensor-expression IR (thesis §2.5.1, Def. 1).

Nodes are frozen dataclasses: immutable, hashable, compared by structure. Variables carry a
unique id, so two loops both named ``i`` are different variables. Python operators build
nodes; Python numbers are converted to constants of the other operand's dtype.

>>> from tilecraft.te import reduce_axis
>>> k = reduce_axis(8, name="k")
>>> str(k * 2 + 1)
'((k * 2) + 1)'
>>> (k * 2 + 1).dtype
<DType.INT32: 'int32'>
"""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

from tilecraft.dtypes import DType, as_dtype
from tilecraft.errors import DTypeError, ExpressionError

if TYPE_CHECKING:
    from tilecraft.te.tensor import Tensor

_uids = itertools.count()


def _next_uid() -> int:
    return next(_uids)


class BinaryOp(str, enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    FLOORDIV = "//"
    MOD = "%"
    MAX = "max"
    MIN = "min"
    # integers only; the shifts are total (ONNX BitShift): see tilecraft.te.bitwise
    BITWISE_AND = "&"
    BITWISE_OR = "|"
    BITWISE_XOR = "^"
    SHIFT_LEFT = "<<"
    SHIFT_RIGHT = ">>"


#: the bitwise binary ops (and, or, xor, the two shifts): integer operands only
BITWISE_BINARY = frozenset({BinaryOp.BITWISE_AND, BinaryOp.BITWISE_OR, BinaryOp.BITWISE_XOR,
                            BinaryOp.SHIFT_LEFT, BinaryOp.SHIFT_RIGHT})
#: the shifts: a shift amount outside ``[0, bits)`` gives 0 (left, and right of a non-negative
#: value) or -1 (right of a negative value), never undefined behaviour
SHIFT_BINARY = frozenset({BinaryOp.SHIFT_LEFT, BinaryOp.SHIFT_RIGHT})
#: binary ops defined only on integer operands
INT_ONLY_BINARY = BITWISE_BINARY | {BinaryOp.FLOORDIV, BinaryOp.MOD}


class UnaryOp(str, enum.Enum):
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    TANH = "tanh"
    ERF = "erf"
    SIGMOID = "sigmoid"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"   # to the nearest integer, halves to even (IEEE roundeven)
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    BITWISE_NOT = "bitwise_not"   # integers only: every bit flipped (~x)


#: unary ops defined only on floating-point operands
FLOAT_ONLY_UNARY = frozenset({UnaryOp.EXP, UnaryOp.LOG, UnaryOp.SQRT, UnaryOp.TANH,
                              UnaryOp.ERF, UnaryOp.SIGMOID, UnaryOp.FLOOR, UnaryOp.CEIL,
                              UnaryOp.ROUND, UnaryOp.SIN, UnaryOp.COS, UnaryOp.TAN,
                              UnaryOp.ASIN, UnaryOp.ACOS, UnaryOp.ATAN, UnaryOp.SINH,
                              UnaryOp.COSH, UnaryOp.ASINH, UnaryOp.ACOSH, UnaryOp.ATANH})
#: the trigonometric and hyperbolic unary ops (radians)
TRIGONOMETRIC_UNARY = frozenset({UnaryOp.SIN, UnaryOp.COS, UnaryOp.TAN, UnaryOp.ASIN,
                                 UnaryOp.ACOS, UnaryOp.ATAN, UnaryOp.SINH, UnaryOp.COSH})
#: the inverse hyperbolic unary ops (libm's asinhf, acoshf, atanhf; LLVM has no intrinsics)
INVERSE_HYPERBOLIC_UNARY = frozenset({UnaryOp.ASINH, UnaryOp.ACOSH, UnaryOp.ATANH})
#: unary ops defined only on integer operands
INT_ONLY_UNARY = frozenset({UnaryOp.BITWISE_NOT})
#: unary ops whose value is a whole number: piecewise constant, derivative 0
ROUNDING_UNARY = frozenset({UnaryOp.FLOOR, UnaryOp.CEIL, UnaryOp.ROUND})


class CompareOp(str, enum.Enum):
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="

    def negate(self) -> CompareOp:
        return {CompareOp.LT: CompareOp.GE, CompareOp.LE: CompareOp.GT,
                CompareOp.GT: CompareOp.LE, CompareOp.GE: CompareOp.LT,
                CompareOp.EQ: CompareOp.NE, CompareOp.NE: CompareOp.EQ}[self]


class LogicalOp(str, enum.Enum):
    AND = "&&"
    OR = "||"


class ReduceOp(str, enum.Enum):
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    PROD = "prod"


class AxisKind(str, enum.Enum):
    SPATIAL = "spatial"
    REDUCE = "reduce"


ExprLike = Union["Expr", int, float, bool]


class Expr:
    """Base of every scalar expression node. Subclasses are frozen dataclasses."""

    __slots__ = ()

    @property
    def dtype(self) -> DType:  # pragma: no cover - every subclass defines it
        raise NotImplementedError

    # arithmetic -----------------------------------------------------------------------------
    def __add__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.ADD, self, other)

    def __radd__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.ADD, other, self)

    def __sub__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.SUB, self, other)

    def __rsub__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.SUB, other, self)

    def __mul__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.MUL, self, other)

    def __rmul__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.MUL, other, self)

    def __truediv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.DIV, self, other)

    def __rtruediv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.DIV, other, self)

    def __floordiv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.FLOORDIV, self, other)

    def __rfloordiv__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.FLOORDIV, other, self)

    def __mod__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.MOD, self, other)

    def __rmod__(self, other: ExprLike) -> Expr:
        return binary(BinaryOp.MOD, other, self)

    def __neg__(self) -> Expr:
        return unary(UnaryOp.NEG, self)

    def __abs__(self) -> Expr:
        return unary(UnaryOp.ABS, self)

    # comparisons build expressions; structural equality stays with == (dataclass eq)
    def __lt__(self, other: ExprLike) -> Expr:
        return compare(CompareOp.LT, self, other)

    def __le__(self, other: ExprLike) -> Expr:
        return compare(CompareOp.LE, self, other)

    def __gt__(self, other: ExprLike) -> Expr:
        return compare(CompareOp.GT, self, other)

    def __ge__(self, other: ExprLike) -> Expr:
        return compare(CompareOp.GE, self, other)

    def __and__(self, other: ExprLike) -> Expr:
        return logical(LogicalOp.AND, self, other)

    def __or__(self, other: ExprLike) -> Expr:
        return logical(LogicalOp.OR, self, other)

    def __invert__(self) -> Expr:
        return Not(self)

    def __bool__(self) -> bool:
        raise ExpressionError(
            f"the truth value of the expression {self} is not known while building it; "
            "use te.select(cond, a, b) instead of if/and/or, and & | ~ for logic")

    def astype(self, dtype: DType | str) -> Expr:
        """Cast to ``dtype`` (a no-op when it already has that type)."""
        target = as_dtype(dtype)
        return self if target == self.dtype else Cast(target, self)

    def __str__(self) -> str:
        from tilecraft.te.printer import expr_to_str

        return expr_to_str(self)


@dataclass(frozen=True, eq=True)
class Const(Expr):
    """A constant of a given dtype."""

    value: int | float | bool
    const_dtype: DType

    @property
    def dtype(self) -> DType:
        return self.const_dtype


@dataclass(frozen=True, eq=True)
class Var(Expr):
    """A free integer variable (loop variables of Kernel IR, symbolic sizes)."""

    name: str
    var_dtype: DType = DType.INT32
    uid: int = field(default_factory=_next_uid)

    @property
    def dtype(self) -> DType:
        return self.var_dtype


@dataclass(frozen=True, eq=True)
class IterVar(Expr):
    """An iteration variable of a compute: spatial (one per output dimension) or reduce.

    It ranges over ``0 <= v < extent``.
    """

    name: str
    extent: int
    kind: AxisKind
    uid: int = field(default_factory=_next_uid)

    @property
    def dtype(self) -> DType:
        return DType.INT32

    def __repr__(self) -> str:
        return f"IterVar({self.name}, {self.extent}, {self.kind.value})"


@dataclass(frozen=True, eq=True)
class Binary(Expr):
    op: BinaryOp
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=True)
class Unary(Expr):
    op: UnaryOp
    x: Expr

    @property
    def dtype(self) -> DType:
        return self.x.dtype


@dataclass(frozen=True, eq=True)
class Compare(Expr):
    op: CompareOp
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return DType.BOOL


@dataclass(frozen=True, eq=True)
class Logical(Expr):
    op: LogicalOp
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return DType.BOOL


@dataclass(frozen=True, eq=True)
class Not(Expr):
    x: Expr

    def __post_init__(self) -> None:
        if self.x.dtype != DType.BOOL:
            raise DTypeError(f"~ needs a condition, got {self.x} of dtype {self.x.dtype}")

    @property
    def dtype(self) -> DType:
        return DType.BOOL


@dataclass(frozen=True, eq=True)
class Select(Expr):
    """``cond ? true_value : false_value``; a load in the branch not taken is never an error."""

    cond: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> DType:
        return self.true_value.dtype


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    to: DType
    x: Expr

    @property
    def dtype(self) -> DType:
        return self.to


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """``tensor[indices]``; built by indexing a :class:`~tilecraft.te.tensor.Tensor`."""

    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype


@dataclass(frozen=True, eq=True)
class Reduce(Expr):
    """A reduction of ``body`` over ``axes``; only allowed as the whole body of a compute."""

    op: ReduceOp
    body: Expr
    axes: tuple[IterVar, ...]

    @property
    def dtype(self) -> DType:
        return self.body.dtype

    def identity(self) -> int | float:
        """The value a reduction over nothing yields."""
        if self.op is ReduceOp.SUM:
            return 0.0 if self.dtype.is_float else 0
        if self.op is ReduceOp.PROD:
            return 1.0 if self.dtype.is_float else 1
        if self.dtype.is_float:
            return -math.inf if self.op is ReduceOp.MAX else math.inf
        lo, hi = int_range(self.dtype)
        return lo if self.op is ReduceOp.MAX else hi


def int_range(dtype: DType) -> tuple[int, int]:
    """Smallest and largest value of an integer dtype."""
    bits = dtype.bits
    if dtype.is_signed:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


# builders -----------------------------------------------------------------------------------


def const(value: int | float | bool, dtype: DType | str | None = None) -> Const:
    """A constant; without a dtype, ints are int32, floats float32, bools bool."""
    if dtype is None:
        if isinstance(value, bool):
            dtype = DType.BOOL
        elif isinstance(value, int):
            dtype = DType.INT32
        else:
            dtype = DType.FLOAT32
    dt = as_dtype(dtype)
    if dt.is_int:
        if isinstance(value, float) and not value.is_integer():
            raise DTypeError(f"constant {value} is not an integer but was given dtype {dt}")
        value = int(value)
    elif dt.is_float:
        value = float(value)
    else:
        value = bool(value)
    return Const(value, dt)


def python_scalar(value: object) -> object:
    """A numpy scalar (``np.float32(2.0)``, ``np.int64(3)``, ``np.bool_``) as the Python number
    it holds; anything else unchanged.

    >>> import numpy as np
    >>> python_scalar(np.float32(0.5)), python_scalar(np.int64(3)), python_scalar("x")
    (0.5, 3, 'x')
    """
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == () \
            and getattr(getattr(value, "dtype", None), "kind", "") in "biuf":
        return value.item()  # type: ignore[attr-defined]
    return value


def as_expr(value: ExprLike, like: DType | None = None) -> Expr:
    """Convert a Python number (or a numpy scalar) to a constant, taking ``like``'s dtype where
    it fits."""
    if isinstance(value, Expr):
        return value
    value = python_scalar(value)
    if isinstance(value, bool):
        return const(value, DType.BOOL)
    if isinstance(value, int):
        if like is not None and like != DType.BOOL:
            return const(value, like)
        return const(value, DType.INT32)
    if isinstance(value, float):
        if like is not None and like.is_float:
            return const(value, like)
        if like is not None and like.is_int:
            raise DTypeError(f"cannot combine the float {value} with an {like} expression; "
                             "cast the expression with .astype('float32') first")
        return const(value, DType.FLOAT32)
    raise ExpressionError(f"cannot use {value!r} ({type(value).__name__}) in a tensor expression")


def _coerce_pair(a: ExprLike, b: ExprLike, what: str) -> tuple[Expr, Expr]:
    if isinstance(a, Expr):
        b = as_expr(b, a.dtype)
    elif isinstance(b, Expr):
        a = as_expr(a, b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    assert isinstance(a, Expr) and isinstance(b, Expr)
    if a.dtype != b.dtype:
        raise DTypeError(f"{what}: operands have different dtypes ({a} is {a.dtype}, {b} is "
                         f"{b.dtype}); cast one side with .astype(...)")
    return a, b


def binary(op: BinaryOp, a: ExprLike, b: ExprLike) -> Expr:
    """Build ``a op b`` with dtype checking."""
    left, right = _coerce_pair(a, b, f"'{op.value}'")
    dt = left.dtype
    if dt == DType.BOOL:
        raise DTypeError(f"'{op.value}' on conditions ({left}, {right}); use & | ~ for logic")
    if op is BinaryOp.DIV and dt.is_int:
        raise DTypeError(f"'/' on integers ({left} / {right}); use // (floor division) for "
                         "integers or cast to a float type")
    if op in INT_ONLY_BINARY and not dt.is_int:
        raise DTypeError(f"'{op.value}' needs integer operands, got {dt} ({left}, {right}); "
                         "cast both with .astype('int32')")
    if op in (BinaryOp.FLOORDIV, BinaryOp.MOD) and isinstance(right, Const) and right.value == 0:
        raise ExpressionError(f"'{op.value}' by zero in {left} {op.value} {right}")
    return Binary(op, left, right)


def unary(op: UnaryOp, x: ExprLike) -> Expr:
    """Build ``op(x)``; transcendental ops need a floating-point operand."""
    value = as_expr(x)
    if op in FLOAT_ONLY_UNARY and not value.dtype.is_float:
        raise DTypeError(f"{op.value}({value}) needs a float operand, got {value.dtype}; "
                         "cast with .astype('float32')")
    if op in INT_ONLY_UNARY and not value.dtype.is_int:
        raise DTypeError(f"{op.value}({value}) needs an integer operand, got {value.dtype}; "
                         "cast with .astype('int32')")
    if value.dtype == DType.BOOL:
        raise DTypeError(f"{op.value} of a condition ({value})")
    if op is UnaryOp.NEG and value.dtype == DType.UINT8:
        raise DTypeError(f"negating the unsigned {value}; cast to int32 first")
    return Unary(op, value)


def compare(op: CompareOp, a: ExprLike, b: ExprLike) -> Expr:
    left, right = _coerce_pair(a, b, f"'{op.value}'")
    return Compare(op, left, right)


def logical(op: LogicalOp, a: ExprLike, b: ExprLike) -> Expr:
    left, right = as_expr(a), as_expr(b)
    for side in (left, right):
        if side.dtype != DType.BOOL:
            raise DTypeError(f"'{op.value}' needs conditions, got {side} of dtype {side.dtype}")
    return Logical(op, left, right)


def select(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> Expr:
    """``cond ? true_value : false_value``.

    >>> from tilecraft.te import placeholder
    >>> A = placeholder((4,), "float32", name="A")
    >>> from tilecraft.te import compute
    >>> B = compute((6,), lambda i: select(i < 4, A[select(i < 4, i, 0)], 0.0), name="B")
    """
    condition = as_expr(cond)
    if condition.dtype != DType.BOOL:
        raise DTypeError(f"select's condition {condition} must be a comparison, got "
                         f"{condition.dtype}")
    t, f = _coerce_pair(true_value, false_value, "select")
    return Select(condition, t, f)


def cast(dtype: DType | str, x: ExprLike) -> Expr:
    return as_expr(x).astype(dtype)

