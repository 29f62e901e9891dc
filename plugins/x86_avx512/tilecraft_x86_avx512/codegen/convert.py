"""Conversions between storage and compute types, and te ``Cast`` semantics, in LLVM IR.

The numeric conventions are those of :mod:`tilecraft.reference.numerics`:

- float16 loads widen exactly (``fpext half``); stores round to nearest-even (``fptrunc``);
- bfloat16 is converted with integer operations: widening is a 16-bit shift; narrowing rounds
  to nearest-even by adding ``0x7FFF + lsb`` and keeps NaNs quiet. (LLVM would lower a
  ``fptrunc`` to ``bfloat`` to ``vcvtneps2bf16`` on this CPU, which flushes subnormals.)
- float to integer truncates toward zero and saturates, NaN giving 0 (``fptosi.sat``);
- integer to integer wraps; integer to float rounds to nearest-even;
- anything to bool is ``!= 0``.
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft_x86_avx512.codegen.builder import FunctionBuilder, Value
from tilecraft_x86_avx512.codegen.types import compute_type, mangle


def _int(fb: FunctionBuilder, value: int, elem: str, lanes: int) -> Value:
    return fb.broadcast(Value(str(value), elem), lanes)


def widen_bfloat16(fb: FunctionBuilder, bits: Value) -> Value:
    """i16 bfloat16 bits to the float they denote (exact)."""
    wide = fb.convert("zext", bits, "i32")
    shifted = fb.binop("shl", wide, _int(fb, 16, "i32", bits.lanes))
    return fb.convert("bitcast", shifted, "float")


def narrow_bfloat16(fb: FunctionBuilder, value: Value) -> Value:
    """A float rounded to nearest-even bfloat16, as i16 bits (NaNs stay quiet NaNs)."""
    lanes = value.lanes
    bits = fb.convert("bitcast", value, "i32")
    high = fb.binop("lshr", bits, _int(fb, 16, "i32", lanes))
    lsb = fb.binop("and", high, _int(fb, 1, "i32", lanes))
    bias = fb.binop("add", lsb, _int(fb, 0x7FFF, "i32", lanes))
    rounded = fb.binop("lshr", fb.binop("add", bits, bias), _int(fb, 16, "i32", lanes))
    quiet = fb.binop("or", high, _int(fb, 0x40, "i32", lanes))
    is_nan = fb.compare("fcmp", "uno", value, value)
    return fb.convert("trunc", fb.select(is_nan, quiet, rounded), "i16")


def to_compute(fb: FunctionBuilder, stored: Value, dtype: DType) -> Value:
    """A value loaded from a buffer of ``dtype`` in its compute type."""
    if dtype is DType.FLOAT16:
        return fb.convert("fpext", stored, "float")
    if dtype is DType.BFLOAT16:
        return widen_bfloat16(fb, stored)
    if dtype is DType.BOOL:
        return fb.compare("icmp", "ne", stored, _int(fb, 0, "i8", stored.lanes))
    return stored


def to_storage(fb: FunctionBuilder, value: Value, dtype: DType) -> Value:
    """A compute-type value converted to what a buffer of ``dtype`` holds (rounding halves)."""
    if dtype is DType.FLOAT16:
        return fb.convert("fptrunc", value, "half")
    if dtype is DType.BFLOAT16:
        return narrow_bfloat16(fb, value)
    if dtype is DType.BOOL:
        return fb.convert("zext", value, "i8")
    return value


def round_to(fb: FunctionBuilder, value: Value, dtype: DType) -> Value:
    """A float value rounded to ``dtype`` (a half type) and held as float again.

    The float16 rounding is fenced (``llvm.arithmetic.fence``): on a CPU with AVX512-FP16
    LLVM narrows ``fpext(fptrunc(a * b)) + c`` to half arithmetic and contracts it into one
    ``vfmadd…ph``, dropping the rounding the program asks for (1 ulp off on a Xeon)."""
    if dtype is DType.FLOAT16:
        widened = fb.convert("fpext", fb.convert("fptrunc", value, "half"), "float")
        return fb.call(f"llvm.arithmetic.fence.{mangle('float', widened.lanes)}", "float",
                       [widened], lanes=widened.lanes)
    if dtype is DType.BFLOAT16:
        return widen_bfloat16(fb, narrow_bfloat16(fb, value))
    return value


def cast(fb: FunctionBuilder, value: Value, source: DType, target: DType) -> Value:
    """te ``Cast(target, x)`` where ``x`` of dtype ``source`` evaluated to ``value``. A half
    type's arithmetic runs unrounded in float, so a cast to it rounds even from the same half
    type (the reference's meaning: an inlined float16 compute is rounded where it was stored)."""
    if source == target and target not in (DType.FLOAT16, DType.BFLOAT16):
        return value
    lanes = value.lanes
    if target is DType.BOOL:
        if source.is_float:
            return fb.compare("fcmp", "une", value, fb.broadcast(Value("0.0", "float"), lanes))
        return fb.compare("icmp", "ne", value, _int(fb, 0, value.elem, lanes))
    if target.is_float:
        if source.is_float:
            as_float = value
        elif source is DType.BOOL or not source.is_signed:
            as_float = fb.convert("uitofp", value, "float")
        else:
            as_float = fb.convert("sitofp", value, "float")
        return round_to(fb, as_float, target)
    to_elem = compute_type(target)
    if source.is_float:
        kind = "fptosi" if target.is_signed else "fptoui"
        name = f"llvm.{kind}.sat.{mangle(to_elem, lanes)}.{mangle('float', lanes)}"
        return fb.call(name, to_elem, [value], lanes)
    if source is DType.BOOL:
        return fb.convert("zext", value, to_elem)
    source_bits, target_bits = source.bits, target.bits
    if target_bits < source_bits:
        return fb.convert("trunc", value, to_elem)
    if target_bits > source_bits:
        return fb.convert("sext" if source.is_signed else "zext", value, to_elem)
    return value
