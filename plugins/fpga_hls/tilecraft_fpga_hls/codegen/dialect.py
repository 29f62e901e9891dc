"""Element types of Vitis-HLS C++: ``float``, ``half`` (``hls_half.h``), ``ap_int<8>`` /
``ap_uint<8>`` / ``ap_int<32>`` (``ap_int.h``) and ``bool``; everything else about printing C
expressions is the core's (:mod:`tilecraft.codegen`).

Arithmetic follows te's numeric conventions as every C dialect does: a half loads widened to
``float`` and rounds to nearest-even when stored; integer values are computed in ``int`` — a
load reads an ``ap_int`` as ``int`` and a narrow result wraps to its width through the
``ap_int`` type (``((int)(ap_int<8>)(x))``), so no expression mixes a class type with ``int``.
bfloat16 has no HLS arithmetic type and is refused.

>>> dialect = HlsDialect()
>>> dialect.storage_type(DType.INT8), dialect.storage_type(DType.FLOAT16)
('ap_int<8>', 'half')
>>> dialect.load_value("A[i]", DType.INT8), dialect.store_value("x", DType.FLOAT16)
('((int)(A[i]))', '((half)(x))')
>>> dialect.wrap_integer("(a + b)", DType.UINT8)
'((int)(ap_uint<8>)((a + b)))'
>>> dialect.cast_value("x", DType.FLOAT32, DType.INT8)
'((int)(ap_int<8>)(tc_float_to_int(x, (-128), 127)))'
"""

from __future__ import annotations

from collections.abc import Mapping

from tilecraft.codegen import C_KEYWORDS, CDialect
from tilecraft.dtypes import DType
from tilecraft.te.expr import int_range

__all__ = ["HlsDialect"]

_NARROW = (DType.INT8, DType.UINT8)


class HlsDialect(CDialect):
    """Vitis-HLS C++ (module docstring)."""

    language = "HLS C++"
    storage: Mapping[DType, str] = {
        DType.FLOAT32: "float", DType.FLOAT16: "half", DType.INT8: "ap_int<8>",
        DType.UINT8: "ap_uint<8>", DType.INT32: "ap_int<32>", DType.BOOL: "bool",
    }
    reserved = C_KEYWORDS | frozenset({"hls", "ap_int", "ap_uint", "half", "main", "std"})

    def wrap_integer(self, text: str, dtype: DType) -> str:
        if dtype in _NARROW:
            return f"((int)({self.storage[dtype]})({text}))"
        return text

    def load_value(self, access: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"((float)({access}))"
        if dtype.is_int:
            return f"((int)({access}))"
        return access

    def store_value(self, value: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"((half)({value}))"
        return self.wrap_integer(value, dtype)

    def cast_value(self, value: str, source: DType, target: DType) -> str:
        if target is DType.BOOL or target.is_float:
            return super().cast_value(value, source, target)
        if source.is_float:
            low, high = int_range(target)
            value = f"tc_float_to_int({value}, {self.literal(low, DType.INT32)}, {high})"
            return self.wrap_integer(value, target) if target in _NARROW else value
        if source is target or target is DType.INT32:
            return value
        return self.wrap_integer(value, target)
