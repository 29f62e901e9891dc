"""ONNX elementwise operators: arithmetic with broadcasting, activations, Clip, Where, Cast,
comparisons (0/1 as uint8: tilecraft has no boolean tensors) and identities.

>>> import tilecraft as tc
>>> # Add(x, b) with b a (3,) initializer becomes ops.add(x, b): y[i0, i1] = x[i0, i1] + b[i1]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value, tilecraft_dtype
from tilecraft.ops.building import (
    broadcast_index,
    broadcast_shape,
    compute_float,
    named_compute,
)
from tilecraft.ops.elementwise import axis_names, map_unary
from tilecraft.te.tensor import Tensor

Operand = Tensor | int | float


def scalar_or_tensor(ctx: NodeContext, index: int, like: Tensor | None) -> Operand:
    """Input ``index`` as a Python number where it is a known single value that does not widen
    the result (so it folds into the expression), else as a tensor."""
    value = ctx.value(index)
    if isinstance(value, np.ndarray) and value.size == 1 and like is not None \
            and value.ndim <= like.ndim:
        number = value.reshape(-1)[0].item()
        if isinstance(number, bool):
            number = int(number)
        return float(number) if like.dtype.is_float else int(number)
    return ctx.tensor(index)


def broadcast(values: Sequence[Operand], fn: Callable[..., te.Expr], name: str,
              dtype: DType | None = None) -> Tensor:
    """``out[idx] = fn(*(v[idx] broadcast))`` over tensors and Python numbers (numpy rules);
    half types are computed in float32 and the result cast to ``dtype`` (default: the first
    tensor's)."""
    tensors = [v for v in values if isinstance(v, Tensor)]
    shape: tuple[int, ...] = ()
    for t in tensors:
        shape = broadcast_shape(shape, t.shape, name)
    out_dtype = dtype or tensors[0].dtype

    def body(*axes: te.Expr) -> te.Expr:
        args = [compute_float(v[broadcast_index(v, axes)]) if isinstance(v, Tensor) else v
                for v in values]
        return te.as_expr(fn(*args)).astype(out_dtype)

    return named_compute(shape or (1,), axis_names(len(shape) or 1), body, name)


def _binary_inputs(ctx: NodeContext) -> tuple[Operand, Operand]:
    a, b = ctx.value(0), ctx.value(1)
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    return (scalar_or_tensor(ctx, 0, like if isinstance(b, Tensor) else None),
            scalar_or_tensor(ctx, 1, like if isinstance(a, Tensor) else None))


_BINARY = {"Add": ops.add, "Sub": ops.sub, "Mul": ops.mul}


@converter("Add", "Sub", "Mul", "Div")
def convert_arithmetic(ctx: NodeContext) -> list[Value]:
    a, b = _binary_inputs(ctx)
    if ctx.op_type == "Div":
        ref = a if isinstance(a, Tensor) else b
        assert isinstance(ref, Tensor)
        if not ref.dtype.is_float:  # ONNX integer division truncates
            return [broadcast([a, b], lambda x, y: _trunc_div(x, y), ctx.out())]
        return [ops.div(a, b, name=ctx.out())]
    return [_BINARY[ctx.op_type](a, b, name=ctx.out())]


def _trunc_div(x: te.Expr, y: te.Expr) -> te.Expr:
    # te's // floors; ONNX (C) integer division truncates toward zero
    q = x // y
    return te.select((q < 0) & te.ne(q * y, x), q + 1, q)


@converter("Pow")
def convert_pow(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"Pow of a {x.dtype.value} base is not supported (float only)")
    if ctx.is_const(1) and ctx.const(1, "exponent").size == 1:
        exponent = float(ctx.const(1, "exponent").reshape(-1)[0])
        if exponent == 0.5:
            return [map_unary(x, te.sqrt, "pow", ctx.out())]
        if exponent.is_integer() and abs(exponent) <= 8:
            def power(v: te.Expr) -> te.Expr:
                result: te.Expr = te.as_expr(1.0)
                for step in range(int(abs(exponent))):
                    result = v if step == 0 else result * v
                return 1.0 / result if exponent < 0 else result
            return [map_unary(x, power, "pow", ctx.out())]
    y = ctx.tensor(1)
    if y.dtype != x.dtype:
        y = ops.cast(y, x.dtype, name=ctx.state.unique(f"{ctx.node.output[0]}_exponent"))
    return [broadcast([x, y], _general_pow, ctx.out())]


def _general_pow(x: te.Expr, y: te.Expr) -> te.Expr:
    """numpy's ``x ** y`` for floats: ``|x| ** y`` through exp/log, negative for a negative
    base and an odd integer exponent, NaN for a negative base and a fractional one, 1 for
    ``y == 0``."""
    magnitude = te.exp(y * te.log(te.abs(x)))
    whole = y.astype(DType.INT32)
    integral = te.eq(whole.astype(DType.FLOAT32), y)
    odd = te.ne(whole % 2, 0)
    signed = te.select(x < 0.0, te.select(integral, te.select(odd, -magnitude, magnitude),
                                          math.nan), magnitude)
    return te.select(te.eq(y, 0.0), 1.0, signed)


_UNARY: dict[str, Callable[[te.Expr], te.Expr]] = {
    "Sqrt": te.sqrt, "Exp": te.exp, "Erf": te.erf, "Log": te.log, "Tanh": te.tanh,
    "Sigmoid": te.sigmoid, "Abs": te.abs, "Neg": te.neg,
    "Floor": te.floor, "Ceil": te.ceil, "Round": te.round_even,
    "Sin": te.sin, "Cos": te.cos, "Tan": te.tan, "Asin": te.asin, "Acos": te.acos,
    "Atan": te.atan, "Sinh": te.sinh, "Cosh": te.cosh, "Asinh": te.asinh, "Acosh": te.acosh,
    "Atanh": te.atanh,
    "Reciprocal": lambda v: 1.0 / v,
    "Softplus": lambda v: te.log(te.exp(v) + 1.0),
    "Softsign": lambda v: v / (te.abs(v) + 1.0),
}
_FLOAT_ONLY = {"Sqrt", "Exp", "Erf", "Log", "Tanh", "Sigmoid", "Floor", "Ceil", "Round",
               "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
               "Asinh", "Acosh", "Atanh",
               "Reciprocal", "Softplus",
               "Softsign", "Gelu", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish",
               "ThresholdedRelu", "Celu", "Mish", "Shrink", "Swish"}


def _softplus(v: te.Expr) -> te.Expr:
    """``log(1 + exp(v))`` as ``log1p(e)``, ``e = exp(v)``: ``log(u) * e / (u - 1)`` with
    ``u = 1 + e`` rounded, exact to a few ulp where ``log(1 + e)`` alone loses ``e``'s low bits
    (1.6e-5 relative at ``v = -4.9``); ``v`` itself past 20, where ``exp`` would overflow."""
    e = te.exp(te.minimum(v, 20.0))
    u = e + 1.0
    return te.select(v > 20.0, v, te.select(te.eq(u, 1.0), e, te.log(u) * (e / (u - 1.0))))


@converter(*_UNARY, "Relu", "Gelu", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish",
           "ThresholdedRelu", "Celu", "Mish", "Shrink", "Sign", "Swish")
def convert_unary(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    op = ctx.op_type
    if op in _FLOAT_ONLY and not x.dtype.is_float:
        raise ctx.unsupported(f"{op} of a {x.dtype.value} tensor (float only)")
    if op == "Relu":
        return [ops.relu(x, name=ctx.out())]
    if op == "Gelu":
        if ctx.attr("approximate", "none") == "tanh":
            root = math.sqrt(2.0 / math.pi)
            return [map_unary(x, lambda v: 0.5 * v * (1.0 + te.tanh(
                root * (v + 0.044715 * v * v * v))), "gelu", ctx.out())]
        return [ops.gelu(x, name=ctx.out())]
    if op == "LeakyRelu":
        return [ops.leaky_relu(x, float(ctx.attr("alpha", 0.01)), name=ctx.out())]
    if op == "Elu":
        alpha = float(ctx.attr("alpha", 1.0))
        return [map_unary(x, lambda v: te.select(v < 0.0, alpha * (te.exp(v) - 1.0), v),
                          "elu", ctx.out())]
    if op == "Selu":
        alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
        gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
        return [map_unary(x, lambda v: te.select(v <= 0.0, gamma * (alpha * te.exp(v) - alpha),
                                                 gamma * v), "selu", ctx.out())]
    if op in ("HardSigmoid", "HardSwish"):
        alpha = float(ctx.attr("alpha", 0.2 if op == "HardSigmoid" else 1.0 / 6.0))
        beta = float(ctx.attr("beta", 0.5))

        def hard(v: te.Expr) -> te.Expr:
            clipped = te.maximum(te.minimum(alpha * v + beta, 1.0), 0.0)
            return clipped * v if op == "HardSwish" else clipped

        return [map_unary(x, hard, op.lower(), ctx.out())]
    if op == "ThresholdedRelu":
        alpha = float(ctx.attr("alpha", 1.0))
        return [map_unary(x, lambda v: te.select(v > alpha, v, 0.0), "thresholded_relu",
                          ctx.out())]
    if op == "Celu":
        alpha = float(ctx.attr("alpha", 1.0))
        return [map_unary(x, lambda v: te.maximum(v, 0.0) + te.minimum(
            alpha * (te.exp(v / alpha) - 1.0), 0.0), "celu", ctx.out())]
    if op == "Swish":
        alpha = float(ctx.attr("alpha", 1.0))
        return [map_unary(x, lambda v: v * te.sigmoid(alpha * v), "swish", ctx.out())]
    if op == "Mish":
        return [map_unary(x, lambda v: v * te.tanh(_softplus(v)), "mish", ctx.out())]
    if op == "Shrink":
        bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
        return [map_unary(x, lambda v: te.select(v < -lambd, v + bias, te.select(
            v > lambd, v - bias, 0.0)), "shrink", ctx.out())]
    if op == "Sign":
        zero, one = (0.0, 1.0) if x.dtype.is_float else (0, 1)
        return [map_unary(x, lambda v: te.select(v > zero, one, te.select(
            v < zero, -one, v if x.dtype.is_float else zero)), "sign", ctx.out())]
    return [map_unary(x, _UNARY[op], op.lower(), ctx.out())]


@converter("PRelu")
def convert_prelu(ctx: NodeContext) -> list[Value]:
    """``x`` where positive, else ``slope * x`` (``slope`` broadcast to ``x``)."""
    x, slope = ctx.tensor(0), ctx.tensor(1)
    if not x.dtype.is_float or slope.dtype != x.dtype:
        raise ctx.unsupported(f"PRelu of {x.dtype.value} by {slope.dtype.value} (float only)")
    return [broadcast([x, slope], lambda v, s: te.select(v < 0.0, s * v, v), ctx.out())]


@converter("IsNaN", "IsInf")
def convert_float_class(ctx: NodeContext) -> list[Value]:
    """0/1 (uint8): NaN, or an infinity of the signs ``detect_negative`` / ``_positive`` say."""
    x = ctx.tensor(0)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{ctx.op_type} of a {x.dtype.value} tensor (float only)")
    signs = [sign for sign, attribute in ((-1.0, "detect_negative"), (1.0, "detect_positive"))
             if bool(int(ctx.attr(attribute, 1)))]

    def test(v: te.Expr) -> te.Expr:
        if ctx.op_type == "IsNaN":
            return te.ne(v, v)
        if not signs:  # neither infinity wanted: nothing is one
            return te.ne(v, v) & te.eq(v, v)
        hits = [te.eq(v, sign * math.inf) for sign in signs]
        return hits[0] | hits[1] if len(hits) == 2 else hits[0]

    return [broadcast([x], lambda v: te.select(test(v), 1, 0), ctx.out(), dtype=DType.UINT8)]


@converter("Identity", "Dropout")
def convert_identity(ctx: NodeContext) -> list[Value]:
    """Identity; Dropout at inference (training_mode must be off; the mask is all ones)."""
    if ctx.op_type == "Dropout":
        if ctx.has(2) and (not ctx.is_const(2) or bool(ctx.const(2, "training_mode"))):
            raise ctx.unsupported("Dropout in training mode (inference only)")
        if len(ctx.node.output) > 1 and ctx.node.output[1]:
            raise ctx.unsupported("Dropout's mask output (bool) is not supported")
    value = ctx.value(0)
    if isinstance(value, np.ndarray):
        return [value]
    return [map_unary(value, lambda v: v, "identity", ctx.out())]


@converter("Max", "Min", "Sum", "Mean")
def convert_variadic(ctx: NodeContext) -> list[Value]:
    tensors = [ctx.tensor(i) for i in range(len(ctx.inputs))]
    op = ctx.op_type
    pick = {"Max": te.maximum, "Min": te.minimum}.get(op, lambda a, b: a + b)

    def body(*values: te.Expr) -> te.Expr:
        result = values[0]
        for v in values[1:]:
            result = pick(result, v)
        return result / float(len(values)) if op == "Mean" else result

    return [broadcast(tensors, body, ctx.out())]


@converter("Clip")
def convert_clip(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    bounds = []
    for index, what in ((1, "min"), (2, "max")):
        if ctx.has(index):
            bound = ctx.const(index, what)
            bounds.append(bound.reshape(-1)[0].item())
        else:
            bounds.append(None)
    low, high = bounds
    cast = float if x.dtype.is_float else int

    def clip(v: te.Expr) -> te.Expr:
        if low is not None:
            v = te.maximum(v, cast(low))
        if high is not None:
            v = te.minimum(v, cast(high))
        return v

    return [map_unary(x, clip, "clip", ctx.out())]


_COMPARE = {"Equal": te.eq, "Greater": lambda a, b: a > b, "Less": lambda a, b: a < b,
            "GreaterOrEqual": lambda a, b: a >= b, "LessOrEqual": lambda a, b: a <= b}


@converter(*_COMPARE)
def convert_compare(ctx: NodeContext) -> list[Value]:
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.dtype != b.dtype:
        raise ctx.unsupported(f"inputs of different dtypes ({a.dtype.value}, {b.dtype.value})")
    compare = _COMPARE[ctx.op_type]
    return [broadcast([a, b], lambda x, y: te.select(compare(x, y), 1, 0), ctx.out(),
                      dtype=DType.UINT8)]


@converter("Not", "And", "Or", "Xor")
def convert_logical(ctx: NodeContext) -> list[Value]:
    """Boolean logic on 0/1 uint8 tensors."""
    tensors = [ctx.tensor(i) for i in range(len(ctx.inputs))]
    op = ctx.op_type

    def body(*v: te.Expr) -> te.Expr:
        if op == "Not":
            return te.select(te.eq(v[0], 0), 1, 0)
        left, right = te.ne(v[0], 0), te.ne(v[1], 0)
        result = {"And": left & right, "Or": left | right,
                  "Xor": te.ne(te.select(left, 1, 0), te.select(right, 1, 0))}[op]
        return te.select(result, 1, 0)

    return [broadcast(tensors, body, ctx.out(), dtype=DType.UINT8)]


@converter("Where")
def convert_where(ctx: NodeContext) -> list[Value]:
    condition = ctx.tensor(0)
    a, b = ctx.tensor(1), ctx.tensor(2)
    if a.dtype != b.dtype:
        raise ctx.unsupported(f"X and Y have different dtypes ({a.dtype.value}, "
                              f"{b.dtype.value})")
    return [broadcast([condition, a, b], lambda c, x, y: te.select(te.ne(c, 0), x, y),
                      ctx.out(), dtype=a.dtype)]


@converter("Cast")
def convert_cast(ctx: NodeContext) -> list[Value]:
    return [_cast(ctx, ctx.tensor(0), int(ctx.attr("to")))]


@converter("CastLike")
def convert_cast_like(ctx: NodeContext) -> list[Value]:
    """Cast to the element type of input 1, as onnx's shape inference types it (bool and uint8
    are both held as uint8, and casting to them differs); where it does not, the dtype input 1
    is held in, unless that is uint8 (then which one is unknown: refused)."""
    like = ctx.node.input[1]
    onnx_to = ctx.state.elem_types.get(like)
    if onnx_to is None:
        from onnx import TensorProto

        held = ctx.value(1)
        dtype = held.dtype if not isinstance(held, np.ndarray) else tilecraft_dtype(
            _onnx_elem(held.dtype), f"{ctx.label}'s input {like!r}")
        if dtype is DType.UINT8:
            raise ctx.unsupported(f"input {like!r} is uint8 or bool, and no ONNX type says which "
                                  "(give the model value_info for it, or use Cast)")
        onnx_to = {DType.FLOAT32: TensorProto.FLOAT, DType.FLOAT16: TensorProto.FLOAT16,
                   DType.BFLOAT16: TensorProto.BFLOAT16, DType.INT8: TensorProto.INT8,
                   DType.INT32: TensorProto.INT32}[dtype]
    return [_cast(ctx, ctx.tensor(0), onnx_to)]


def _onnx_elem(dtype: np.dtype) -> int:
    """The ONNX element type of a numpy dtype."""
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def _cast(ctx: NodeContext, x: Tensor, onnx_to: int) -> Tensor:
    """``x`` cast to ONNX element type ``onnx_to`` (to bool: 1 where non-zero, as uint8)."""
    target = tilecraft_dtype(onnx_to, f"{ctx.label}'s target type")
    from onnx import TensorProto

    if onnx_to == TensorProto.BOOL:
        return broadcast([x], lambda v: te.select(te.ne(v, 0), 1, 0), ctx.out(),
                         dtype=DType.UINT8)
    if target == x.dtype:
        return map_unary(x, lambda v: v, "cast", ctx.out())
    return ops.cast(x, target, name=ctx.out())


@converter("Mod")
def convert_mod(ctx: NodeContext) -> list[Value]:
    """Integer remainders (broadcast): with the divisor's sign (``fmod=0``, te's ``%``) or
    the dividend's (``fmod=1``, C's). Floating-point ``fmod`` needs a truncation te lacks."""
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.dtype.is_float or b.dtype != a.dtype:
        raise ctx.unsupported(f"Mod of {a.dtype.value} by {b.dtype.value} (integers of one "
                              "type; floating-point fmod is not supported)")
    if not int(ctx.attr("fmod", 0)):
        return [broadcast([a, b], lambda x, y: x % y, ctx.out())]

    def c_remainder(x: te.Expr, y: te.Expr) -> te.Expr:
        r = x % y   # the divisor's sign: moved to the dividend's where they differ
        return te.select(te.ne(r, 0) & te.ne(r < 0, x < 0), r - y, r)

    return [broadcast([a, b], c_remainder, ctx.out())]
