"""ONNX linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, to and
from uint8 / int8 (and int32 for DequantizeLinear), per tensor or per axis.

``QuantizeLinear``: ``y = saturate(round(x / scale) + zero_point)``, rounding halves to even
(te's ``round_even``), saturating to the output type's range; the output type is the zero
point's, else the ``output_dtype`` attribute's, else uint8. ``DequantizeLinear``:
``y = (x - zero_point) * scale`` in float32. ``DynamicQuantizeLinear`` computes the uint8
scale and zero point from the tensor's range (extended to include 0) and quantizes with them.
A scale (and zero point) is a scalar, a 1-d tensor along ``axis``, or (``block_size`` > 0)
one value per block of that many indices along ``axis``.

>>> # QuantizeLinear(x, 0.5, uint8 3): x = 1.25 -> round(2.5) + 3 = 2 + 3 = 5
"""

from __future__ import annotations

from collections.abc import Callable

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

#: the saturation range of each quantized type
RANGES = {DType.UINT8: (0.0, 255.0), DType.INT8: (-128.0, 127.0)}
#: ONNX's TensorProto element types for output_dtype
_ONNX_TYPES = {2: DType.UINT8, 3: DType.INT8}


def _along(ctx: NodeContext, x: Tensor, param: Tensor, what: str
           ) -> Callable[[tuple[te.Expr, ...]], te.Expr]:
    """``param`` at element ``idx`` of ``x``: one value (per tensor), one per index along the
    node's ``axis`` (per axis), or one per block of ``block_size`` indices along it (blocked:
    ``param`` has ``x``'s shape with that axis divided into blocks)."""
    block = int(ctx.attr("block_size", 0) or 0)
    axis = int(ctx.attr("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if block > 0:
        blocks = list(x.shape)
        if 0 <= axis < x.ndim:
            blocks[axis] = -(-x.shape[axis] // block)
        if tuple(param.shape) != tuple(blocks):
            raise ctx.unsupported(f"a blocked {what} of shape {param.shape} for input "
                                  f"{x.shape}, axis {axis}, blocks of {block}: expected "
                                  f"{tuple(blocks)}")
        return lambda idx: param[(*idx[:axis], idx[axis] // block, *idx[axis + 1:])]
    if param.size == 1:
        origin = (0,) * param.ndim
        return lambda idx: param[origin]
    if param.ndim != 1 or not 0 <= axis < x.ndim or param.shape[0] != x.shape[axis]:
        raise ctx.unsupported(f"a {what} of shape {param.shape} for input {x.shape} along "
                              f"axis {axis}: a scalar or one value per index of that axis")
    return lambda idx: param[(idx[axis],)]


def quantized(value: te.Expr, dtype: DType) -> te.Expr:
    """``value`` (float32, already rounded and shifted) saturated to ``dtype``'s range."""
    low, high = RANGES[dtype]
    return te.minimum(te.maximum(value, low), high).astype(dtype)


@converter("QuantizeLinear")
def convert_quantize(ctx: NodeContext) -> list[Value]:
    x, scale = ctx.tensor(0), ctx.tensor(1)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"input of dtype {x.dtype.value} (float only)")
    zero = ctx.tensor(2) if ctx.has(2) else None
    dtype = zero.dtype if zero is not None else _ONNX_TYPES.get(int(ctx.attr("output_dtype", 2)
                                                                    or 2))
    if dtype not in RANGES:
        raise ctx.unsupported(f"quantizing to {dtype.value if dtype else 'that type'} "
                              "(uint8 and int8 are)")
    scale_at = _along(ctx, x, scale, "scale")
    zero_at = _along(ctx, x, zero, "zero point") if zero is not None else None

    def body(*idx: te.Expr) -> te.Expr:
        step = te.round_even(x[idx].astype(DType.FLOAT32) / scale_at(idx).astype(DType.FLOAT32))
        if zero_at is not None:
            step = step + zero_at(idx).astype(DType.FLOAT32)
        return quantized(step, dtype)

    return [named_compute(x.shape, axis_names(x.ndim), body, ctx.out())]


@converter("DequantizeLinear")
def convert_dequantize(ctx: NodeContext) -> list[Value]:
    x, scale = ctx.tensor(0), ctx.tensor(1)
    if x.dtype not in (*RANGES, DType.INT32):
        raise ctx.unsupported(f"input of dtype {x.dtype.value} (uint8, int8 or int32)")
    zero = ctx.tensor(2) if ctx.has(2) else None
    scale_at = _along(ctx, x, scale, "scale")
    zero_at = _along(ctx, x, zero, "zero point") if zero is not None else None

    def body(*idx: te.Expr) -> te.Expr:
        value = x[idx].astype(DType.FLOAT32)
        if zero_at is not None:
            value = value - zero_at(idx).astype(DType.FLOAT32)
        return (value * scale_at(idx).astype(DType.FLOAT32)).astype(scale.dtype)

    return [named_compute(x.shape, axis_names(x.ndim), body, ctx.out())]


@converter("DynamicQuantizeLinear")
def convert_dynamic_quantize(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    if x.dtype is not DType.FLOAT32:
        raise ctx.unsupported(f"input of dtype {x.dtype.value} (float32 only)")
    names = [ctx.out(i) for i in range(3)]
    low = ops.reduce_min(x, keepdims=False, name=f"{names[0]}_min")
    high = ops.reduce_max(x, keepdims=False, name=f"{names[0]}_max")
    scalar = axis_names(low.ndim)
    origin = (0,) * low.ndim
    scale = named_compute(low.shape, scalar, lambda *i: (
        te.maximum(high[i], 0.0) - te.minimum(low[i], 0.0)) / 255.0, names[1])
    zero = named_compute(low.shape, scalar, lambda *i: quantized(
        te.round_even(0.0 - te.minimum(low[i], 0.0) / scale[i]), DType.UINT8), names[2])
    y = named_compute(x.shape, axis_names(x.ndim), lambda *idx: quantized(
        te.round_even(x[idx] / scale[origin]) + zero[origin].astype(DType.FLOAT32),
        DType.UINT8), names[0])
    return [y, scale, zero]
