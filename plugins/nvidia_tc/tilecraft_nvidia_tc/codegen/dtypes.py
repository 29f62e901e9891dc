"""Element types in CUDA C: storage types, the type arithmetic runs in, constants, and the
conversions on loads, stores and casts.

te's numeric conventions (:mod:`tilecraft.reference.numerics`) decide every rule here:
float16 and bfloat16 are storage types (``__half``, ``__nv_bfloat16``): a load widens to
``float``, arithmetic runs unrounded in ``float``, a store or a cast rounds to nearest-even
(``__float2half`` / ``__float2bfloat16``). int8 and uint8 values are held in ``int`` and
wrapped back to 8 bits after every operation (C promotes them to ``int``; numpy wraps);
float-to-integer casts truncate and saturate, NaN giving 0.

>>> storage_type(DType.FLOAT16), compute_type(DType.FLOAT16)
('__half', 'float')
>>> literal(0.1, DType.FLOAT32), literal(-3, DType.INT32), literal(0.1, DType.FLOAT16)
('0.10000000149011612f', '(-3)', '0.0999755859375f')
>>> load_value("A[i]", DType.BFLOAT16)
'__bfloat162float(A[i])'
"""

from __future__ import annotations

import math

import numpy as np

from tilecraft.dtypes import DType
from tilecraft.reference.numerics import const_array
from tilecraft.te.expr import int_range

__all__ = ["HALF_TYPES", "SUPPORTED", "cast_value", "compute_type", "literal", "load_value",
           "storage_type", "store_value", "wrap_integer"]

#: the C type a buffer of each dtype holds its elements in (no <stdint.h> under NVRTC)
_STORAGE = {
    DType.FLOAT32: "float", DType.FLOAT16: "__half", DType.BFLOAT16: "__nv_bfloat16",
    DType.INT8: "signed char", DType.UINT8: "unsigned char", DType.INT32: "int",
    DType.BOOL: "bool",
}
SUPPORTED = frozenset(_STORAGE)
HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)


def storage_type(dtype: DType) -> str:
    """The C element type of a buffer of ``dtype``."""
    return _STORAGE[dtype]


def compute_type(dtype: DType) -> str:
    """The C type a value of ``dtype`` is computed in: ``float`` for every float type, ``int``
    for every integer type, ``bool`` for conditions."""
    if dtype.is_float:
        return "float"
    if dtype is DType.BOOL:
        return "bool"
    return "int"


def wrap_integer(text: str, dtype: DType) -> str:
    """``text`` (an ``int`` expression) wrapped to the range of a narrow integer ``dtype``
    (two's complement, as numpy's int8 / uint8 arithmetic); int32 and others unchanged."""
    if dtype in (DType.INT8, DType.UINT8):
        return f"(({_STORAGE[dtype]})({text}))"
    return text


def literal(value: int | float | bool, dtype: DType) -> str:
    """A C literal of ``value`` as a value of ``dtype`` (a half constant rounded to its type;
    ``TC_INFINITY`` / ``TC_NAN`` for the non-finite ones)."""
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


def load_value(access: str, dtype: DType) -> str:
    """The computed value of an element access ``access`` of a ``dtype`` buffer."""
    if dtype is DType.FLOAT16:
        return f"__half2float({access})"
    if dtype is DType.BFLOAT16:
        return f"__bfloat162float({access})"
    return access


def store_value(value: str, dtype: DType) -> str:
    """The stored form of a computed ``value`` going into a ``dtype`` buffer."""
    if dtype is DType.FLOAT16:
        return f"__float2half({value})"
    if dtype is DType.BFLOAT16:
        return f"__float2bfloat16({value})"
    return wrap_integer(value, dtype)


def cast_value(value: str, source: DType, target: DType) -> str:
    """``Cast(target, x)`` where ``value`` computes ``x`` of dtype ``source`` (module doc).

    >>> cast_value("x", DType.FLOAT32, DType.INT8)
    '((signed char)tc_float_to_int(x, (-128), 127))'
    >>> cast_value("x", DType.FLOAT32, DType.FLOAT16)
    '__half2float(__float2half(x))'
    """
    if target is DType.BOOL:
        return f"({value} != 0)"
    if target.is_float:
        widened = value if source.is_float else f"((float)({value}))"
        if target is DType.FLOAT32:
            return widened
        return load_value(store_value(widened, target), target)
    if source.is_float:
        low, high = int_range(target)
        text = f"tc_float_to_int({value}, {literal(low, DType.INT32)}, {high})"
        return f"(({_STORAGE[target]}){text})" if target is not DType.INT32 else text
    if source is target:
        return value
    return f"(({_STORAGE[target]})({value}))"
