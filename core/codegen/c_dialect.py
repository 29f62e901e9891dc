"""Element types, constants and conversions of a C-family language (CUDA C, OpenCL C, C++):
what every C code generator prints the same way, with hooks for what differs.

te's numeric conventions (:mod:`tilecraft.reference.numerics`) decide every rule here:
float16 and bfloat16 are storage types: a load widens to ``float``, arithmetic runs unrounded
in ``float``, a store or a cast rounds to nearest-even. int8 and uint8 values are held in
``int`` and wrapped back to 8 bits after every operation (C promotes them to ``int``; numpy
wraps); float-to-integer casts truncate and saturate, NaN giving 0 (``tc_float_to_int``).

A dialect subclass names its element types (``storage``), its math functions (``math``: the
``float`` forms, ``expf`` in CUDA and ``exp`` in OpenCL C), the identifiers generated code must
not take (``reserved``), and how a half value is loaded, stored and rounded (the hooks
:meth:`CDialect.load_value`, :meth:`CDialect.store_value`, :meth:`CDialect.round_value`).

>>> dialect = CDialect()
>>> dialect.literal(0.1, DType.FLOAT32), dialect.literal(-3, DType.INT32)
('0.10000000149011612f', '(-3)')
>>> dialect.cast_value("x", DType.FLOAT32, DType.INT8)
'((signed char)tc_float_to_int(x, (-128), 127))'
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Mapping

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.reference.numerics import const_array
from tilecraft.te.expr import INVERSE_HYPERBOLIC_UNARY, TRIGONOMETRIC_UNARY, UnaryOp, int_range

__all__ = ["C_KEYWORDS", "CDialect"]

#: C and C++ keywords and the math names a generated identifier must never shadow
C_KEYWORDS = frozenset({
    "auto", "bool", "break", "case", "char", "class", "const", "continue", "default", "delete",
    "do", "double", "else", "enum", "extern", "float", "for", "goto", "if", "inline", "int",
    "long", "new", "operator", "private", "public", "register", "return", "short", "signed",
    "sizeof", "static", "struct", "switch", "template", "this", "typedef", "union", "unsigned",
    "void", "volatile", "while", "half", "min", "max", "abs", "exp", "log", "sqrt", "tanh",
    "erf",
}) | frozenset(keyword.kwlist)


class CDialect:
    """Plain C (C99 / C++): the defaults every hook of a dialect starts from (module doc)."""

    #: the language's name in error messages ("the CUDA code generator cannot express ...")
    language = "C"
    #: the C element type of a buffer of each dtype
    storage: Mapping[DType, str] = {
        DType.FLOAT32: "float", DType.INT8: "signed char", DType.UINT8: "unsigned char",
        DType.INT32: "int", DType.BOOL: "bool",
    }
    #: the float32 function computing each unary math operator
    math: Mapping[UnaryOp, str] = {
        UnaryOp.EXP: "expf", UnaryOp.LOG: "logf", UnaryOp.SQRT: "sqrtf", UnaryOp.TANH: "tanhf",
        UnaryOp.ERF: "erff", UnaryOp.ABS: "fabsf", UnaryOp.FLOOR: "floorf",
        UnaryOp.CEIL: "ceilf", UnaryOp.ROUND: "rintf",   # rint: to nearest, halves to even
        # sinf, ..., coshf, asinhf, acoshf, atanhf
        **{op: f"{op.value}f" for op in TRIGONOMETRIC_UNARY | INVERSE_HYPERBOLIC_UNARY},
    }
    #: identifiers generated code must not declare
    reserved: frozenset[str] = C_KEYWORDS

    @property
    def supported(self) -> frozenset[DType]:
        """The dtypes this dialect has a storage type for."""
        return frozenset(self.storage)

    def storage_type(self, dtype: DType) -> str:
        """The C element type of a buffer of ``dtype``."""
        return self.storage[dtype]

    def compute_type(self, dtype: DType) -> str:
        """The C type a value of ``dtype`` is computed in: ``float`` for every float type,
        ``int`` for every integer type, ``bool`` for conditions."""
        if dtype.is_float:
            return "float"
        if dtype is DType.BOOL:
            return "bool"
        return "int"

    def helper(self, name: str, dtype: DType) -> str:
        """The name of the generated code's helper ``tc_<name>`` (max, min) for values of
        ``dtype``; C++ overloads one name (OpenCL C, without overloading, names each)."""
        return f"tc_{name}"

    def wrap_integer(self, text: str, dtype: DType) -> str:
        """``text`` (an ``int`` expression) wrapped to the range of a narrow integer ``dtype``
        (two's complement, as numpy's int8 / uint8 arithmetic); int32 and others unchanged."""
        if dtype in (DType.INT8, DType.UINT8):
            return f"(({self.storage[dtype]})({text}))"
        return text

    def literal(self, value: int | float | bool, dtype: DType) -> str:
        """A C literal of ``value`` as a value of ``dtype`` (a half constant rounded to its
        type; ``TC_INFINITY`` / ``TC_NAN`` for the non-finite ones)."""
        if dtype is DType.BOOL:
            return "true" if value else "false"
        held = const_array(value, dtype)[()]
        if dtype.is_int:
            number = int(held)
            if number == -(1 << 31):
                return "(-2147483647 - 1)"
            return f"({number})" if number < 0 else str(number)
        number = float(np.float32(held))
        if math.isnan(number):
            return "TC_NAN"
        if math.isinf(number):
            return "TC_INFINITY" if number > 0 else "(-TC_INFINITY)"
        # the shortest repr of the float32 value read back as a float literal is that value
        text = f"{number!r}f"
        return f"({text})" if number < 0 or text.startswith("-") else text

    # hooks: half types ---------------------------------------------------------------------
    def load_value(self, access: str, dtype: DType) -> str:
        """The computed value of an element access ``access`` (an lvalue) of a ``dtype``
        buffer."""
        return access

    def store_value(self, value: str, dtype: DType) -> str:
        """The stored form of a computed ``value`` going into a ``dtype`` buffer."""
        return self.wrap_integer(value, dtype)

    def store_statement(self, target: str, value: str, dtype: DType) -> str:
        """The statement storing the computed ``value`` into the element ``target``."""
        return f"{target} = {self.store_value(value, dtype)};"

    def round_value(self, value: str, dtype: DType) -> str:
        """A ``float`` value rounded to the half type ``dtype`` and widened back."""
        return self.load_value(self.store_value(value, dtype), dtype)

    def cast_value(self, value: str, source: DType, target: DType) -> str:
        """``Cast(target, x)`` where ``value`` computes ``x`` of dtype ``source``."""
        if target is DType.BOOL:
            return f"({value} != 0)"
        if target.is_float:
            widened = value if source.is_float else f"((float)({value}))"
            if target is DType.FLOAT32:
                return widened
            return self.round_value(widened, target)
        if source.is_float:
            low, high = int_range(target)
            text = f"tc_float_to_int({value}, {self.literal(low, DType.INT32)}, {high})"
            return f"(({self.storage[target]}){text})" if target is not DType.INT32 else text
        if source is target:
            return value
        return f"(({self.storage[target]})({value}))"

    # bitwise shifts ------------------------------------------------------------------------
    def shift_left(self, value: str, amount: str, dtype: DType) -> str:
        """``value << amount`` of an integer ``dtype`` held in ``int``, as te defines it
        (:mod:`tilecraft.reference.bitwise`): shifted as ``unsigned`` (a negative value's
        shift is undefined in C) and 0 for an amount outside ``[0, bits)`` (C leaves those
        undefined); a narrow result still needs :meth:`wrap_integer`.

        >>> CDialect().shift_left("a", "b", DType.INT8)
        '(((unsigned)b < 8u) ? ((int)((unsigned)a << b)) : 0)'
        """
        return (f"(((unsigned){amount} < {dtype.bits}u) ? "
                f"((int)((unsigned){value} << {amount})) : 0)")

    def shift_right(self, value: str, amount: str, dtype: DType) -> str:
        """``value >> amount`` as te defines it: arithmetic for a signed ``dtype`` (an amount
        outside ``[0, bits)`` shifts by ``bits - 1``: the sign fills), logical for an unsigned
        one (0 for an amount outside the range). The ``int`` holding an 8-bit value is
        sign- or zero-extended, so its own ``>>`` is the narrow type's.

        >>> CDialect().shift_right("a", "b", DType.INT32)
        '(a >> (((unsigned)b < 32u) ? b : 31))'
        >>> CDialect().shift_right("a", "b", DType.UINT8)
        '(((unsigned)b < 8u) ? (a >> b) : 0)'
        """
        in_range = f"((unsigned){amount} < {dtype.bits}u)"
        if dtype.is_signed:
            return f"({value} >> ({in_range} ? {amount} : {dtype.bits - 1}))"
        return f"({in_range} ? ({value} >> {amount}) : 0)"
