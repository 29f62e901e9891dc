"""Element types in the AscendC-style C++: the core's C-family rules
(:mod:`tilecraft.codegen.c_dialect`) with AscendC's names.

float16 is the emulation header's ``half`` (as AscendC's): a storage type whose conversion from
``float`` rounds to nearest even; a load widens it to ``float``, a store rounds. Elements of
local and global tensors are read and written through ``GetValue`` / ``SetValue``, so a store
is the stored value, not an assignment (:meth:`AscendDialect.store_value`).

>>> print(ASCEND.load_value("x.GetValue(3)", DType.FLOAT16))
((float)x.GetValue(3))
>>> print(ASCEND.store_value("v", DType.FLOAT16), ASCEND.storage_type(DType.INT8))
half(v) int8_t
>>> print(ASCEND.cast_value("v", DType.FLOAT32, DType.FLOAT16))
tc_round_half(v)
"""

from __future__ import annotations

from tilecraft.codegen.c_dialect import C_KEYWORDS, CDialect
from tilecraft.dtypes import DType

__all__ = ["ASCEND", "AscendDialect"]


class AscendDialect(CDialect):
    """AscendC C++ (module docstring)."""

    language = "AscendC"
    storage = {
        DType.FLOAT32: "float", DType.FLOAT16: "half", DType.INT8: "int8_t",
        DType.UINT8: "uint8_t", DType.INT32: "int32_t", DType.BOOL: "bool",
    }
    reserved = C_KEYWORDS | frozenset({
        "AscendC", "GM_ADDR", "TPipe", "TQue", "TBuf", "TPosition", "LocalTensor",
        "GlobalTensor", "DataCopy", "DataCopyPad", "LoadData", "Mmad", "Fixpipe", "Add", "Sub",
        "Mul", "Div", "Max", "Min", "Adds", "Muls", "Maxs", "Mins", "Exp", "Ln", "Abs", "Sqrt",
        "Relu", "Cast", "Duplicate", "ReduceSum", "ReduceMax", "ReduceMin", "GetBlockIdx",
        "GetBlockNum", "pipe", "Init", "Process", "int8_t", "uint8_t", "int32_t", "int64_t",
        "uint32_t", "tc_block"})

    def store_value(self, value: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"half({value})"
        return self.wrap_integer(value, dtype)

    def load_value(self, access: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"((float){access})"
        return access

    def round_value(self, value: str, dtype: DType) -> str:
        return f"tc_round_half({value})"


ASCEND = AscendDialect()
