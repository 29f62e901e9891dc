"""ONNX bitwise operators: BitwiseAnd, BitwiseOr, BitwiseXor (opset 18, numpy broadcasting),
BitwiseNot (opset 18) and BitShift (``direction`` LEFT or RIGHT), on int8, uint8 and int32
values (int64 ones are held as int32, see :mod:`tilecraft.onnx.values`).

The te operators carry ONNX's semantics (:mod:`tilecraft.te.bitwise`): BitShift by an amount
outside ``[0, bits)`` — negative, or the width or more — gives 0 for LEFT and the sign (-1 for a
negative value, else 0) for RIGHT, a signed RIGHT shift is arithmetic and a signed LEFT shift
wraps, as onnx's reference (``onnx/reference/ops/op_bitshift.py``).

An int64 model runs in int32: and, or, xor, not and RIGHT shifts of values inside int32's range
are exact (a right shift by 32 .. 63 gives the sign in either width), a LEFT shift is exact
while its int64 result fits in int32 (as Add and Mul of int64 values are).

>>> # BitShift(x, y, direction="RIGHT") with y a scalar initializer 2 becomes
>>> # out[i0, i1] = x[i0, i1] >> 2
"""

from __future__ import annotations

from collections.abc import Callable

from tilecraft import te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_math import Operand, broadcast, scalar_or_tensor
from tilecraft.onnx.values import Value
from tilecraft.ops.elementwise import map_unary
from tilecraft.te.tensor import Tensor

_BINARY: dict[str, Callable[[te.Expr, te.Expr], te.Expr]] = {
    "BitwiseAnd": te.bitwise_and, "BitwiseOr": te.bitwise_or, "BitwiseXor": te.bitwise_xor,
}
_SHIFTS: dict[str, Callable[[te.Expr, te.Expr], te.Expr]] = {
    "LEFT": te.left_shift, "RIGHT": te.right_shift,
}


def _integer_inputs(ctx: NodeContext) -> tuple[Operand, Operand]:
    """Both inputs, a known single value as a Python int folded into the expression; refuses
    operands that are not integers (ONNX allows none, but a hand-made model may)."""
    a, b = ctx.value(0), ctx.value(1)
    for value in (a, b):
        if isinstance(value, Tensor) and not value.dtype.is_int:
            raise ctx.unsupported(f"{ctx.op_type} needs integer inputs (int8, uint8, int32 or "
                                  f"int64), got {value.dtype.value}")
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    return (scalar_or_tensor(ctx, 0, like if isinstance(b, Tensor) else None),
            scalar_or_tensor(ctx, 1, like if isinstance(a, Tensor) else None))


@converter("BitwiseAnd", "BitwiseOr", "BitwiseXor")
def convert_bitwise_binary(ctx: NodeContext) -> list[Value]:
    a, b = _integer_inputs(ctx)
    return [broadcast([a, b], _BINARY[ctx.op_type], ctx.out())]


@converter("BitwiseNot")
def convert_bitwise_not(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    if not x.dtype.is_int:
        raise ctx.unsupported(f"BitwiseNot needs an integer input (int8, uint8, int32 or "
                              f"int64), got {x.dtype.value}")
    return [map_unary(x, te.bitwise_not, "bitwise_not", ctx.out())]


@converter("BitShift")
def convert_bitshift(ctx: NodeContext) -> list[Value]:
    direction = ctx.attr("direction")
    if direction not in _SHIFTS:
        raise ctx.unsupported(f"direction {direction!r} is not supported; it must be 'LEFT' "
                              "or 'RIGHT'")
    a, b = _integer_inputs(ctx)
    return [broadcast([a, b], _SHIFTS[direction], ctx.out())]
