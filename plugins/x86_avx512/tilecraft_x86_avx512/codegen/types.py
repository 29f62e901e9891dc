"""How te dtypes map onto LLVM types, and how constants are spelled in LLVM IR text.

Every dtype has a *storage* type (what a buffer element is in memory) and a *compute* type
(what arithmetic runs in): float16 and bfloat16 are storage types whose arithmetic happens in
``float``; ``bool`` is one byte in memory and ``i1`` in registers. bfloat16 is stored as its raw
``i16`` bits and converted with integer operations (see :mod:`.convert`), so the rounding is
exactly ml_dtypes' round-to-nearest-even on every CPU. Index arithmetic runs in ``i64``.

Float constants in LLVM IR must be exactly representable in their type, so they are written
as the hex bit pattern of the double holding the float32 value:

>>> float_literal(0.1)
'0x3FB99999A0000000'
>>> float_literal(float("-inf")), float_literal(1.0)
('0xFFF0000000000000', '0x3FF0000000000000')
>>> compute_type(DType.BFLOAT16), storage_type(DType.BFLOAT16), storage_type(DType.BOOL)
('float', 'i16', 'i8')
>>> vector_type("float", 16), mangle("float", 16), mangle("i64", 0)
('<16 x float>', 'v16f32', 'i64')
"""

from __future__ import annotations

import math
import struct

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.te.expr import ReduceOp, int_range

INDEX = "i64"

_COMPUTE = {
    DType.FLOAT32: "float", DType.FLOAT16: "float", DType.BFLOAT16: "float",
    DType.INT8: "i8", DType.UINT8: "i8", DType.INT32: "i32", DType.BOOL: "i1",
}
_STORAGE = {
    DType.FLOAT32: "float", DType.FLOAT16: "half", DType.BFLOAT16: "i16",
    DType.INT8: "i8", DType.UINT8: "i8", DType.INT32: "i32", DType.BOOL: "i8",
}
_MANGLE = {"float": "f32", "half": "f16", "bfloat": "bf16", "double": "f64",
           "i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "ptr": "p0"}
_BITS = {"float": 32, "half": 16, "i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}


def compute_type(dtype: DType) -> str:
    """The LLVM type values of ``dtype`` have in registers."""
    return _COMPUTE[dtype]


def storage_type(dtype: DType) -> str:
    """The LLVM type of one element of a buffer of ``dtype``."""
    return _STORAGE[dtype]


def vector_type(scalar: str, lanes: int) -> str:
    """``<lanes x scalar>``, or ``scalar`` itself when ``lanes`` is 0."""
    return f"<{lanes} x {scalar}>" if lanes else scalar


def mangle(scalar: str, lanes: int) -> str:
    """The overload suffix LLVM intrinsics use for a (vector) type, e.g. ``v16f32``."""
    base = _MANGLE[scalar]
    return f"v{lanes}{base}" if lanes else base


def float_literal(value: float) -> str:
    """``value`` rounded to float32, spelled as the hex pattern of the equal double."""
    if math.isnan(value):
        return "0x7FF8000000000000"
    rounded = float(np.float32(value)) if math.isfinite(value) else value
    with np.errstate(over="ignore"):
        if math.isfinite(value) and not math.isfinite(float(np.float32(value))):
            rounded = math.copysign(math.inf, value)
    bits = struct.unpack(">Q", struct.pack(">d", rounded))[0]
    return f"0x{bits:016X}"


def int_literal(value: int, scalar: str) -> str:
    """``value`` wrapped into the two's-complement range of ``scalar`` (i1 is true/false)."""
    if scalar == "i1":
        return "true" if value else "false"
    bits = _BITS[scalar]
    wrapped = value & ((1 << bits) - 1)
    if wrapped >= 1 << (bits - 1):
        wrapped -= 1 << bits
    return str(wrapped)


def literal(value: int | float | bool, dtype: DType) -> str:
    """A constant of ``dtype`` in its compute type; half types are rounded to their type first
    (a constant of a half type *is* a value of that type)."""
    if dtype is DType.BOOL:
        return "true" if value else "false"
    if dtype.is_float:
        number = float(value)
        if dtype is not DType.FLOAT32 and math.isfinite(number):
            with np.errstate(over="ignore"):
                number = float(np.array(number).astype(dtype.numpy).astype(np.float64))
        return float_literal(number)
    if isinstance(value, float) and not value.is_integer():
        raise CodegenError(f"integer constant {value} of dtype {dtype} is not an integer; "
                           "build it with te.const(int(...))")
    return int_literal(int(value), compute_type(dtype))


def identity(op: ReduceOp, dtype: DType) -> str:
    """The literal a reduction with ``op`` over nothing yields, in the compute type."""
    if op is ReduceOp.SUM:
        # -0.0 is the exact identity of fadd (-0.0 + x == x for every x, x = -0.0 included)
        return float_literal(-0.0) if dtype.is_float else "0"
    if op is ReduceOp.PROD:
        return float_literal(1.0) if dtype.is_float else "1"
    if dtype.is_float:
        return float_literal(-math.inf if op is ReduceOp.MAX else math.inf)
    lo, hi = int_range(dtype)
    return int_literal(lo if op is ReduceOp.MAX else hi, compute_type(dtype))


def is_literal(ref: str) -> bool:
    """Whether an operand is a constant (anything but an SSA register)."""
    return not ref.startswith("%")
