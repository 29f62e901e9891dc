"""Element types in OpenCL C: the core's C-family rules (:mod:`tilecraft.codegen.c_dialect`)
with OpenCL's names.

Without ``cl_khr_fp16`` (PoCL's CPU device, many drivers) ``half`` is a storage type only:
float16 buffers are read with ``vload_half`` and written with ``vstore_half_rte`` (round to
nearest even, as numpy). bfloat16 is held in ``ushort`` (its top 16 bits of a float32); int8
is ``char`` (signed in OpenCL C); bool buffers are ``uchar`` (OpenCL kernels take no bool
pointers). OpenCL C has no overloading, so ``tc_max`` is ``tc_max_f`` or ``tc_max_i``.

>>> OPENCL.load_value("A[i]", DType.FLOAT16), OPENCL.store_statement("A[i]", "x", DType.FLOAT16)
('vload_half(0, &A[i])', 'vstore_half_rte(x, 0, &A[i]);')
>>> OPENCL.cast_value("x", DType.FLOAT32, DType.BFLOAT16), OPENCL.helper("max", DType.INT32)
('tc_round_bf16(x)', 'tc_max_i')
"""

from __future__ import annotations

from tilecraft.codegen.c_dialect import C_KEYWORDS, CDialect
from tilecraft.dtypes import DType
from tilecraft.te.expr import INVERSE_HYPERBOLIC_UNARY, TRIGONOMETRIC_UNARY, UnaryOp

__all__ = ["OPENCL", "OpenCLDialect"]


class OpenCLDialect(CDialect):
    """OpenCL C 1.2 (module docstring)."""

    language = "OpenCL C"
    storage = {
        DType.FLOAT32: "float", DType.FLOAT16: "half", DType.BFLOAT16: "ushort",
        DType.INT8: "char", DType.UINT8: "uchar", DType.INT32: "int", DType.BOOL: "uchar",
    }
    math = {UnaryOp.EXP: "exp", UnaryOp.LOG: "log", UnaryOp.SQRT: "sqrt", UnaryOp.TANH: "tanh",
            UnaryOp.ERF: "erf", UnaryOp.ABS: "fabs", UnaryOp.FLOOR: "floor",
            UnaryOp.CEIL: "ceil", UnaryOp.ROUND: "rint",
            **{op: op.value for op in TRIGONOMETRIC_UNARY | INVERSE_HYPERBOLIC_UNARY}}
    reserved = C_KEYWORDS | frozenset({
        "kernel", "global", "local", "constant", "private", "restrict", "uchar", "ushort",
        "uint", "ulong", "float2", "float4", "float8", "char4", "int4", "size_t", "barrier",
        "get_group_id", "get_local_id", "get_global_id", "vload4", "vstore4", "vload_half",
        "vstore_half", "vstore_half_rte", "clamp", "mad", "fma", "dot", "select", "all", "any",
        "read_only", "write_only", "image2d_t", "sampler_t", "event_t"})

    def helper(self, name: str, dtype: DType) -> str:
        return f"tc_{name}_{'f' if dtype.is_float else 'i'}"

    def load_value(self, access: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"vload_half(0, &{access})"
        if dtype is DType.BFLOAT16:
            return f"tc_bf16_to_float({access})"
        if dtype is DType.BOOL:
            return f"({access} != 0)"
        return access

    def store_value(self, value: str, dtype: DType) -> str:
        if dtype is DType.BFLOAT16:
            return f"tc_float_to_bf16({value})"
        if dtype is DType.BOOL:
            return f"((uchar)({value}))"
        return self.wrap_integer(value, dtype)

    def store_statement(self, target: str, value: str, dtype: DType) -> str:
        if dtype is DType.FLOAT16:
            return f"vstore_half_rte({value}, 0, &{target});"
        return super().store_statement(target, value, dtype)

    def round_value(self, value: str, dtype: DType) -> str:
        return f"tc_round_{'half' if dtype is DType.FLOAT16 else 'bf16'}({value})"


OPENCL = OpenCLDialect()
