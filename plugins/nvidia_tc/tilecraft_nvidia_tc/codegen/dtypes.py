"""Element types in CUDA C: the core's C-family rules (:mod:`tilecraft.codegen.c_dialect`)
with CUDA's half types and math functions.

float16 and bfloat16 are storage types (``__half``, ``__nv_bfloat16``): a load widens to
``float``, arithmetic runs unrounded in ``float``, a store or a cast rounds to nearest-even
(``__float2half`` / ``__float2bfloat16``). int8 is ``signed char`` (no <stdint.h> under NVRTC).

>>> storage_type(DType.FLOAT16), compute_type(DType.FLOAT16)
('__half', 'float')
>>> literal(0.1, DType.FLOAT32), literal(-3, DType.INT32), literal(0.1, DType.FLOAT16)
('0.10000000149011612f', '(-3)', '0.0999755859375f')
>>> load_value("A[i]", DType.BFLOAT16)
'__bfloat162float(A[i])'
>>> cast_value("x", DType.FLOAT32, DType.FLOAT16)
'__half2float(__float2half(x))'
"""

from __future__ import annotations

from tilecraft.codegen.c_dialect import C_KEYWORDS, CDialect
from tilecraft.dtypes import DType

__all__ = ["CUDA", "HALF_TYPES", "SUPPORTED", "CudaDialect", "cast_value", "compute_type",
           "literal", "load_value", "storage_type", "store_value", "wrap_integer"]


class CudaDialect(CDialect):
    """CUDA C: ``__half`` / ``__nv_bfloat16`` storage with cuda_fp16.h's conversions."""

    language = "CUDA"
    storage = {**CDialect.storage, DType.FLOAT16: "__half", DType.BFLOAT16: "__nv_bfloat16"}
    reserved = C_KEYWORDS | frozenset({"threadIdx", "blockIdx", "blockDim", "gridDim",
                                       "warpSize", "nvcuda", "std"})

    def load_value(self, access: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"__half2float({access})"
        if dtype is DType.BFLOAT16:
            return f"__bfloat162float({access})"
        return access

    def store_value(self, value: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"__float2half({value})"
        if dtype is DType.BFLOAT16:
            return f"__float2bfloat16({value})"
        return self.wrap_integer(value, dtype)


CUDA = CudaDialect()
SUPPORTED = CUDA.supported
HALF_TYPES = (DType.FLOAT16, DType.BFLOAT16)

storage_type = CUDA.storage_type
compute_type = CUDA.compute_type
wrap_integer = CUDA.wrap_integer
literal = CUDA.literal
load_value = CUDA.load_value
store_value = CUDA.store_value
cast_value = CUDA.cast_value
