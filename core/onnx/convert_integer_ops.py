"""ONNX integer and quantized-linear products, as onnxruntime's quantization tools write them:
MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.

The product-sum runs on the uint8 / int8 operands themselves (``ops.matmul`` / ``ops.conv*d``
with an int32 result: the form targets map onto their int8 dot-product instructions), and
the zero points are taken out around it, exactly in wrapping int32 arithmetic::

    sum_k (a - za)(b - zb) = sum_k a*b - zb * sum_k a - za * (sum_k b - K*zb)

A convolution's input is padded with its zero point, so padded taps add nothing. Known zero
points are folded: a constant weight minus its zero point that still fits a byte type becomes
the weight (no correction term), and the column sums of known weights are computed at import
time. A zero point that varies along the summed axis (what numpy broadcasting gives a
``(K,)`` zero point of A) is subtracted from its operand first (an int32 product).

QLinearMatMul / QLinearConv requantize the int32 result as onnx's reference does,
``saturate(round_half_even(C * (a_scale * b_scale / y_scale)) + y_zero_point)``, the
multiplier computed in the scales' own type (float32, float16 or bfloat16, rounded after each
step) and the product in float32 (the reference multiplies in float64; the two differ only where
``C * multiplier`` lies within float32's rounding error of a half: onnxruntime also multiplies
in float32).

>>> # MatMulInteger([[3, 5]], [[2], [1]], a_zero_point=1): (3-1)*2 + (5-1)*1 = 8
>>> #   = (3*2 + 5*1) - 1 * ((2 + 1) - 2*0) = 11 - 3
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_nn import expanded, reshaped, spatial_padding
from tilecraft.onnx.convert_quantize import RANGES, quantized
from tilecraft.onnx.values import Value
from tilecraft.ops.building import broadcast_shape, named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

INT32 = DType.INT32
FLOAT32 = DType.FLOAT32
#: the operand types of the integer products
BYTE_TYPES = (DType.UINT8, DType.INT8)
#: numpy's range of each byte type, in the order a folded weight prefers them (int8 first:
#: unsigned activations times signed weights is the usual int8 product, the quantizers' default
#: and the operand pair of the common dot-product instructions)
_BYTE_RANGES = ((DType.INT8, -128, 127), (DType.UINT8, 0, 255))
_CONV = {1: ops.conv1d, 2: ops.conv2d, 3: ops.conv3d}

Index = Sequence[te.Expr | int]
#: what turns the int32 result at an output index into the node's output element
Finish = Callable[[te.Expr, tuple[te.Expr, ...]], te.Expr]


def broadcast_load(tensor: Tensor, index: Index, shape: Sequence[int]) -> te.Expr:
    """``tensor``'s element at ``index`` of ``shape``, ``tensor`` broadcast into ``shape``
    numpy's way (dimensions aligned on the right, extents of 1 repeated): a ``(3, 1)`` tensor
    in shape ``(2, 3, 4)`` is read at ``[i1, 0]`` for index ``(i0, i1, i2)``."""
    offset = len(shape) - tensor.ndim
    return tensor[tuple(0 if extent == 1 else index[offset + d]
                        for d, extent in enumerate(tensor.shape))]


def _fits(shape: Sequence[int], into: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts into ``into`` without enlarging it."""
    try:
        return tuple(np.broadcast_shapes(tuple(shape), tuple(into))) == tuple(into)
    except ValueError:
        return False


def _wrapped(values: np.ndarray) -> np.ndarray:
    """int64 values as int32 with two's-complement wrap-around (what int32 arithmetic gives)."""
    return np.asarray(values, np.int64).astype(np.int32)


@dataclass(frozen=True)
class ZeroPoint:
    """A zero point: one known value (``value`` an int), or a tensor to load from (``value`` a
    Tensor: a known array, then also in ``known``, or a run-time input). ``shape`` is its ONNX
    shape, aligned on the right with the operand's as numpy broadcasts it."""

    value: int | Tensor
    shape: tuple[int, ...]
    known: np.ndarray | None

    def load(self, index: Index, shape: Sequence[int]) -> te.Expr:
        """The int32 zero point of the operand element at ``index`` of ``shape``."""
        if isinstance(self.value, int):
            return te.const(self.value, INT32)
        return broadcast_load(self.value, index, shape).astype(INT32)

    def varies_along(self, axis: int) -> bool:
        """Whether it has more than one value along operand axis ``axis`` (negative)."""
        return len(self.shape) >= -axis and self.shape[axis] > 1


def zero_point(ctx: NodeContext, index: int, operand_shape: Sequence[int], what: str,
               dtypes: Sequence[DType] = BYTE_TYPES) -> ZeroPoint | None:
    """Input ``index`` as a zero point of an operand of ``operand_shape``; None when it is
    omitted or known to be all zeros."""
    if not ctx.has(index):
        return None
    name = ctx.node.input[index]
    if ctx.is_const(index):
        array = ctx.const(index, what)
        shape = tuple(array.shape)
        if array.size and (array == array.flat[0]).all():
            known = int(array.flat[0])
            return None if known == 0 else ZeroPoint(known, shape, array.astype(np.int64))
        tensor = ctx.tensor(index)
        known_array: np.ndarray | None = array.astype(np.int64)
    else:
        tensor = ctx.tensor(index)
        shape, known_array = tuple(tensor.shape), None
    if tensor.dtype not in dtypes:
        raise ctx.unsupported(f"{what} {name!r} of dtype {tensor.dtype.value} (expected "
                              f"{' or '.join(d.value for d in dtypes)})")
    if not _fits(shape, operand_shape):
        raise ctx.unsupported(f"{what} {name!r} of shape {shape} does not broadcast into its "
                              f"operand's shape {tuple(operand_shape)}")
    return ZeroPoint(tensor, shape, known_array)


def _known_full(zp: ZeroPoint, shape: Sequence[int]) -> np.ndarray:
    """A known zero point broadcast to ``shape`` (int64)."""
    assert zp.known is not None
    return np.broadcast_to(zp.known.reshape(zp.shape), tuple(shape))


def _minus_zero_point(ctx: NodeContext, x: Tensor, zp: ZeroPoint, what: str) -> Tensor:
    """``int32(x) - zp`` element by element (a zero point that varies along the summed axis)."""
    return named_compute(x.shape, axis_names(x.ndim),
                         lambda *idx: x[idx].astype(INT32) - zp.load(idx, x.shape),
                         ctx.state.unique(f"{ctx.node.output[0]}_{what}"))


def _as_byte_constant(ctx: NodeContext, values: np.ndarray, what: str
                      ) -> tuple[Tensor, np.ndarray] | None:
    """Known integer ``values`` as an int8 (else uint8) constant tensor, when they fit one."""
    if values.size == 0:
        return None
    low, high = int(values.min()), int(values.max())
    for dtype, lowest, highest in _BYTE_RANGES:
        if lowest <= low and high <= highest:
            array = values.astype(dtype.numpy)
            return (ctx.state.constant_tensor(array, f"{ctx.node.output[0]}_{what}"),
                    array.astype(np.int64))
    return None


def _check_operand(ctx: NodeContext, x: Tensor, what: str) -> None:
    if x.dtype not in BYTE_TYPES:
        raise ctx.unsupported(f"{what} of dtype {x.dtype.value} (uint8 or int8)")


# ---- matrix products --------------------------------------------------------------------------


def _batch_offset(batch_index: Sequence[te.Expr], batch: Sequence[int]) -> te.Expr | int:
    """The row-major position of ``batch_index`` among the ``batch`` matrices."""
    offset: te.Expr | None = None
    for index, extent in zip(batch_index, batch):
        offset = index if offset is None else offset * extent + index
    return 0 if offset is None else offset


def _one_matrix(b2: Tensor) -> bool:
    return math.prod(b2.shape[:-2]) == 1


def _product_shape(a2: Tensor, b2: Tensor, batch: Sequence[int]) -> tuple[int, ...]:
    """The shape :func:`_integer_product` gives its product."""
    m, n, count = a2.shape[-2], b2.shape[-1], math.prod(batch)
    return (count * m, n) if _one_matrix(b2) else (count, m, n)


def _integer_product(ctx: NodeContext, a2: Tensor, b2: Tensor, batch: Sequence[int], name: str
                     ) -> tuple[Tensor, Callable[[Sequence[te.Expr], te.Expr, te.Expr], te.Expr]]:
    """The int32 ``a2 @ b2`` (at least 2-d, batch dimensions broadcast to ``batch``) through
    ``ops.matmul`` (one right-hand matrix: A's batch folded into its rows) or
    ``ops.batch_matmul``, and its element at (batch index, i, j)."""
    (m, k), n = a2.shape[-2:], b2.shape[-1]
    count = math.prod(batch)
    if _one_matrix(b2):
        rows = reshaped(ctx, a2, (count * m, k), "rows")
        product = ops.matmul(rows, reshaped(ctx, b2, (k, n), "matrix"), out_dtype=INT32,
                             name=name)
        return product, lambda b, i, j: product[_batch_offset(b, batch) * m + i
                                                 if batch else i, j]
    a_count = math.prod(a2.shape[:-2])
    lhs = reshaped(ctx, a2 if a_count == 1 else expanded(ctx, a2, (*batch, m, k), "lhs_batch"),
                   (1 if a_count == 1 else count, m, k), "lhs3")
    rhs = reshaped(ctx, expanded(ctx, b2, (*batch, k, n), "rhs_batch"), (count, k, n), "rhs3")
    product = ops.batch_matmul(lhs, rhs, out_dtype=INT32, name=name)
    return product, lambda b, i, j: product[_batch_offset(b, batch), i, j]


def integer_matmul(ctx: NodeContext, a: Tensor, b: Tensor, a_zero: ZeroPoint | None,
                   b_zero: ZeroPoint | None, b_known: np.ndarray | None,
                   finish: Finish | None, name: str) -> Tensor:
    """numpy's ``matmul((a - a_zero), (b - b_zero))`` in int32 (1-d operands promoted, batch
    dimensions broadcast), each element passed through ``finish`` (with its output index)
    when given. ``b_known`` is ``b``'s value when known at import time."""
    k = a.shape[-1]
    if (b.shape[0] if b.ndim == 1 else b.shape[-2]) != k:
        raise ctx.unsupported(f"inner dimensions differ: {a.shape} @ {b.shape}")
    if a_zero is not None and a_zero.varies_along(-1):
        a, a_zero = _minus_zero_point(ctx, a, a_zero, "a_shifted"), None
    b_sum_axis = -1 if b.ndim == 1 else -2
    if b_zero is not None and b_known is not None and b_zero.known is not None:
        shifted = b_known.astype(np.int64) - _known_full(b_zero, b.shape)
        folded = _as_byte_constant(ctx, shifted, "b_shifted")
        if folded is not None:  # the weight minus its zero point is the weight
            (b, b_known), b_zero = folded, None
        elif b_zero.varies_along(b_sum_axis):
            b_known = _wrapped(shifted)
            b = ctx.state.constant_tensor(b_known, f"{name}_b_shifted")
            b_zero = None
    if b_zero is not None and b_zero.varies_along(b_sum_axis):
        b, b_zero, b_known = _minus_zero_point(ctx, b, b_zero, "b_shifted"), None, None
    a2 = reshaped(ctx, a, (1, k), "lhs") if a.ndim == 1 else a
    b2 = reshaped(ctx, b, (k, 1), "rhs") if b.ndim == 1 else b
    m, n = a2.shape[-2], b2.shape[-1]
    batch = tuple(broadcast_shape(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]), ctx.label))
    final_shape = (*batch, *([m] if a.ndim > 1 else []), *([n] if b.ndim > 1 else []))
    plain = a_zero is None and b_zero is None and finish is None
    if plain and _product_shape(a2, b2, batch) == final_shape:
        return _integer_product(ctx, a2, b2, batch, name)[0]
    product, product_at = _integer_product(ctx, a2, b2, batch,
                                           ctx.state.unique(f"{name}_product"))
    row_sums = _row_sums(ctx, a2, name) if b_zero is not None else None
    col_sums = _col_sums(ctx, b2, b_zero, b_known, name) if a_zero is not None else None
    # the column sums still hold b's zero point unless they were computed at import time
    col_zero = b_zero if col_sums is not None and not col_sums.is_constant else None
    a_shape, b_shape = (*batch, m, k), (*batch, k, n)

    def body(*index: te.Expr) -> te.Expr:
        batch_index = index[:len(batch)]
        i = index[len(batch)] if a.ndim > 1 else 0
        j = index[-1] if b.ndim > 1 else 0
        value = product_at(batch_index, i, j)
        if b_zero is not None:
            assert row_sums is not None
            value = value - b_zero.load((*batch_index, 0, j), b_shape) * broadcast_load(
                row_sums, (*batch_index, i), (*batch, m))
        if a_zero is not None:
            assert col_sums is not None
            column = broadcast_load(col_sums, (*batch_index, j), (*batch, n))
            if col_zero is not None:
                column = column - col_zero.load((*batch_index, 0, j), b_shape) * k
            value = value - a_zero.load((*batch_index, i, 0), a_shape) * column
        return finish(value, index) if finish is not None else value

    return named_compute(final_shape, axis_names(len(final_shape)), body, name)


def _row_sums(ctx: NodeContext, a2: Tensor, name: str) -> Tensor:
    """``sum_k a2[..., i, k]`` in int32 (what B's zero point multiplies)."""
    k = te.reduce_axis(a2.shape[-1], "k")
    return named_compute(a2.shape[:-1], axis_names(a2.ndim - 1),
                         lambda *idx: te.sum(a2[(*idx, k)].astype(INT32), axis=k),
                         ctx.state.unique(f"{name}_row_sums"))


def _col_sums(ctx: NodeContext, b2: Tensor, b_zero: ZeroPoint | None,
              b_known: np.ndarray | None, name: str) -> Tensor:
    """``sum_k (b2[..., k, j] - b_zero)`` in int32 (what A's zero point multiplies) when ``b``
    and its zero point are known (computed now); else ``sum_k b2[..., k, j]`` (the caller
    subtracts ``K * b_zero``)."""
    k = b2.shape[-2]
    if b_known is not None and (b_zero is None or b_zero.known is not None):
        values = b_known.astype(np.int64).reshape(b2.shape)
        if b_zero is not None:
            values = values - _known_full(b_zero, b2.shape)
        return ctx.state.constant_tensor(_wrapped(values.sum(axis=-2)), f"{name}_col_sums")
    axis = te.reduce_axis(k, "k")
    return named_compute((*b2.shape[:-2], b2.shape[-1]), axis_names(b2.ndim - 1),
                         lambda *idx: te.sum(b2[(*idx[:-1], axis, idx[-1])].astype(INT32),
                                             axis=axis),
                         ctx.state.unique(f"{name}_col_sums"))


@converter("MatMulInteger")
def convert_matmul_integer(ctx: NodeContext) -> list[Value]:
    a, b = ctx.tensor(0), ctx.tensor(1)
    _check_operand(ctx, a, "A")
    _check_operand(ctx, b, "B")
    a_zero = zero_point(ctx, 2, a.shape, "a_zero_point", (a.dtype,))
    b_zero = zero_point(ctx, 3, b.shape, "b_zero_point", (b.dtype,))
    b_known = ctx.const(1, "B") if ctx.is_const(1) else None
    return [integer_matmul(ctx, a, b, a_zero, b_zero, b_known, None, ctx.out())]


# ---- requantization -----------------------------------------------------------------------------


Loader = Callable[[Tensor, tuple[te.Expr, ...]], te.Expr]


def _scale_dtype(ctx: NodeContext, indices: Sequence[int]) -> DType:
    dtypes = {ctx.tensor(i).dtype for i in indices}
    if len(dtypes) != 1 or not next(iter(dtypes)).is_float:
        raise ctx.unsupported(f"scales of dtypes {sorted(d.value for d in dtypes)} (one float "
                              "type: float32, float16 or bfloat16)")
    return dtypes.pop()


def multiplier(ctx: NodeContext, indices: tuple[int, int, int], known_shape: Callable[
        [list[np.ndarray]], list[np.ndarray]], load: Loader) -> Callable[
        [tuple[te.Expr, ...]], te.Expr]:
    """``scale0 * scale1 / scale2`` (inputs ``indices``) at an output index, as float32: the
    product and the quotient each rounded to the scales' type, as numpy computes them. Known
    scales are combined now (``known_shape`` arranges their arrays for broadcasting); the
    others are loaded with ``load``."""
    dtype = _scale_dtype(ctx, indices)
    if all(ctx.is_const(i) for i in indices):
        first, second, third = known_shape([ctx.const(i, "scale") for i in indices])
        values = (first * second / third).astype(np.float32)
        if values.size and (values == values.flat[0]).all():
            single = te.const(float(values.flat[0]), FLOAT32)
            return lambda index: single
        tensor = ctx.state.constant_tensor(values, f"{ctx.node.output[0]}_multiplier")
        return lambda index: load(tensor, index)
    tensors = [ctx.tensor(i) for i in indices]

    def rounded(value: te.Expr) -> te.Expr:
        return value if dtype is FLOAT32 else value.astype(dtype).astype(FLOAT32)

    def at(index: tuple[te.Expr, ...]) -> te.Expr:
        first, second, third = (load(t, index).astype(FLOAT32) for t in tensors)
        return rounded(rounded(first * second) / third)

    return at


def requantize(scale_at: Callable[[tuple[te.Expr, ...]], te.Expr], y_zero: ZeroPoint | None,
               zero_shape: Callable[[tuple[te.Expr, ...]], tuple[Index, Sequence[int]]],
               dtype: DType) -> Finish:
    """``saturate(round_half_even(value * scale) + y_zero)`` to ``dtype`` (the reference's
    ``clip(rint(C * scale + y_zero_point))``)."""

    def finish(value: te.Expr, index: tuple[te.Expr, ...]) -> te.Expr:
        scaled = value.astype(FLOAT32) * scale_at(index)
        if y_zero is not None:
            scaled = scaled + y_zero.load(*zero_shape(index)).astype(FLOAT32)
        return quantized(te.round_even(scaled), dtype)

    return finish


def _output_dtype(ctx: NodeContext, zero_index: int, operand: Tensor) -> DType:
    """The quantized output's type: the output zero point's, else the first operand's."""
    dtype = ctx.tensor(zero_index).dtype if ctx.has(zero_index) else operand.dtype
    if dtype not in RANGES:
        raise ctx.unsupported(f"an output of dtype {dtype.value} (uint8 or int8)")
    return dtype


@converter("QLinearMatMul")
def convert_qlinear_matmul(ctx: NodeContext) -> list[Value]:
    a, b = ctx.tensor(0), ctx.tensor(3)
    _check_operand(ctx, a, "a")
    _check_operand(ctx, b, "b")
    a_zero = zero_point(ctx, 2, a.shape, "a_zero_point", (a.dtype,))
    b_zero = zero_point(ctx, 5, b.shape, "b_zero_point", (b.dtype,))
    dtype = _output_dtype(ctx, 7, a)
    lead = tuple(broadcast_shape(tuple(a.shape[:-2]), tuple(b.shape[:-2]), ctx.label))
    out_shape = (*lead, *([a.shape[-2]] if a.ndim > 1 else []),
                 *([b.shape[-1]] if b.ndim > 1 else []))
    for index in (1, 4, 6, 7):
        if ctx.has(index) and not _fits(_onnx_shape(ctx, index), out_shape):
            raise ctx.unsupported(f"input {ctx.node.input[index]!r} of shape "
                                  f"{_onnx_shape(ctx, index)} does not broadcast into the "
                                  f"output's shape {out_shape}")
    y_zero = zero_point(ctx, 7, out_shape, "y_zero_point", (dtype,))

    def load(tensor: Tensor, index: tuple[te.Expr, ...]) -> te.Expr:
        return broadcast_load(tensor, index, out_shape)

    scale_at = multiplier(ctx, (1, 4, 6), lambda arrays: arrays, load)
    finish = requantize(scale_at, y_zero, lambda index: (index, out_shape), dtype)
    b_known = ctx.const(3, "b") if ctx.is_const(3) else None
    return [integer_matmul(ctx, a, b, a_zero, b_zero, b_known, finish, ctx.out())]


def _onnx_shape(ctx: NodeContext, index: int) -> tuple[int, ...]:
    """Input ``index``'s shape as ONNX gives it (a known 0-d value keeps shape ())."""
    return tuple(ctx.const(index, "value").shape) if ctx.is_const(index) \
        else tuple(ctx.tensor(index).shape)


# ---- convolutions ------------------------------------------------------------------------------


def _padded_with(ctx: NodeContext, x: Tensor, padding: Sequence[tuple[int, int]],
                 fill: ZeroPoint, name: str) -> Tensor:
    """``x`` (N, C, *spatial) with ``padding`` around its spatial axes holding ``fill``."""
    pairs = [(0, 0), (0, 0), *padding]
    value = fill.value if isinstance(fill.value, int) else \
        fill.value[(0,) * fill.value.ndim]   # a run-time zero point: its one element
    return ops.pad(x, pairs, value=value, name=ctx.state.unique(f"{name}_pad"))


@dataclass(frozen=True)
class ConvSetting:
    """A convolution's attributes, read as Conv's converter reads them."""

    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    groups: int


def conv_setting(ctx: NodeContext, x: Tensor, w: Tensor) -> ConvSetting:
    nd = x.ndim - 2
    if nd not in _CONV or w.ndim != x.ndim:
        raise ctx.unsupported(f"input {x.shape} and weight {w.shape}: 1-d, 2-d and 3-d "
                              "convolutions are supported")
    kernel = tuple(w.shape[2:])
    declared = ctx.attr("kernel_shape")
    if declared is not None and tuple(int(v) for v in declared) != kernel:
        raise ctx.unsupported(f"kernel_shape {list(declared)} differs from the weight's "
                              f"{list(kernel)}")
    strides = tuple(int(v) for v in ctx.attr("strides", [1] * nd))
    dilations = tuple(int(v) for v in ctx.attr("dilations", [1] * nd))
    padding = spatial_padding(ctx, x.shape[2:], kernel, strides, dilations)
    return ConvSetting(strides, dilations, tuple(padding), int(ctx.attr("group", 1)))


def integer_conv(ctx: NodeContext, x: Tensor, w: Tensor, x_zero: ZeroPoint | None,
                 w_zero: ZeroPoint | None, w_known: np.ndarray | None,
                 bias: Tensor | np.ndarray | None, finish: Finish | None, name: str) -> Tensor:
    """``conv(x - x_zero, w - w_zero) (+ bias)`` in int32, x padded with its zero point, each
    element passed through ``finish`` when given. ``x_zero`` is one value; ``w_zero`` one, or
    one per output channel; ``w_known`` is ``w``'s value when known at import time; ``bias``
    (int32, one value or one per output channel) is an array when known."""
    setting = conv_setting(ctx, x, w)
    out_channels, group_channels, *kernel = w.shape
    groups = setting.groups
    if groups < 1 or x.shape[1] != group_channels * groups or out_channels % groups:
        raise ctx.unsupported(f"group={groups} with input {x.shape} and weight {w.shape}")
    if w_zero is not None and w_known is not None and w_zero.known is not None:
        per_channel = _known_full(w_zero, (out_channels,)).reshape(
            (out_channels,) + (1,) * (w.ndim - 1))
        folded = _as_byte_constant(ctx, w_known.astype(np.int64) - per_channel, "w_shifted")
        if folded is not None:  # the weight minus its zero point is the weight
            (w, w_known), w_zero = folded, None
    padding: tuple[tuple[int, int], ...] = setting.padding
    source = x
    if x_zero is not None and any(b or a for b, a in padding):
        source = _padded_with(ctx, x, padding, x_zero, name)
        padding = tuple((0, 0) for _ in padding)
    conv = _CONV[x.ndim - 2]

    def convolve(weight: Tensor, count: int, what: str) -> Tensor:
        return conv(source, weight, stride=setting.stride, padding=padding,
                    dilation=setting.dilation, groups=count, out_dtype=INT32,
                    name=ctx.state.unique(f"{name}_{what}"))

    if w_zero is None and x_zero is None and bias is None and finish is None:
        return conv(source, w, stride=setting.stride, padding=padding,
                    dilation=setting.dilation, groups=groups, out_dtype=INT32, name=name)
    product = convolve(w, groups, "conv")
    window_sums = None
    if w_zero is not None:  # sum of each window's inputs, per group: a convolution with ones
        ones = ctx.state.constant_tensor(np.ones((groups, group_channels, *kernel), np.int8),
                                         f"{name}_ones")
        window_sums = convolve(ones, groups, "window_sums")
    per_group = out_channels // groups
    channel_shape = (out_channels,)
    constant = _channel_constant(ctx, w, w_known, x_zero, w_zero, bias, name)

    def body(n: te.Expr, k: te.Expr, *spatial: te.Expr) -> te.Expr:
        value = product[(n, k, *spatial)]
        if w_zero is not None:
            assert window_sums is not None
            group = k // per_group if groups > 1 else 0
            value = value - w_zero.load((k,), channel_shape) * window_sums[(n, group, *spatial)]
        if constant is not None:
            value = value + constant(k)
        return finish(value, (n, k, *spatial)) if finish is not None else value

    return named_compute(product.shape, axis_names(product.ndim), body, name)


def _channel_constant(ctx: NodeContext, w: Tensor, w_known: np.ndarray | None,
                      x_zero: ZeroPoint | None, w_zero: ZeroPoint | None,
                      bias: Tensor | np.ndarray | None, name: str
                      ) -> Callable[[te.Expr], te.Expr] | None:
    """What each output channel ``k`` adds: ``bias[k] - x_zero * sum(w[k] - w_zero[k])``,
    folded into one known array where its parts are known."""
    out_channels = w.shape[0]
    taps = math.prod(w.shape[1:])
    channel_shape = (out_channels,)
    weight_sums: Callable[[te.Expr], te.Expr] | None = None
    known_part = np.zeros(out_channels, np.int64)
    if x_zero is not None:
        if w_known is not None and (w_zero is None or w_zero.known is not None):
            sums = w_known.astype(np.int64).reshape(out_channels, -1).sum(axis=1)
            if w_zero is not None:
                sums = sums - taps * _known_full(w_zero, channel_shape)
            if isinstance(x_zero.value, int):
                known_part -= x_zero.value * sums
            else:
                tensor = ctx.state.constant_tensor(_wrapped(sums), f"{name}_weight_sums")
                weight_sums = lambda k: tensor[(k,)]  # noqa: E731
        else:
            axes = [te.reduce_axis(extent, f"r{d}") for d, extent in enumerate(w.shape[1:])]

            sums_tensor = named_compute(
                channel_shape, ["k"],
                lambda k: te.sum(w[(k, *axes)].astype(INT32), axis=axes),
                ctx.state.unique(f"{name}_weight_sums"))

            def weight_sums(k: te.Expr) -> te.Expr:
                total = sums_tensor[(k,)]
                return total - w_zero.load((k,), channel_shape) * taps if w_zero else total
    bias_at: Callable[[te.Expr], te.Expr] | None = None
    if isinstance(bias, np.ndarray):
        values = bias.astype(np.int64).reshape(-1)
        known_part += values if values.size > 1 else values[0]
    elif bias is not None:
        bias_tensor = bias
        bias_at = lambda k: _channel_load(bias_tensor, (0, k))  # noqa: E731
    known = (_wrapped(known_part) if known_part.any() else None)
    known_at: Callable[[te.Expr], te.Expr] | None = None
    if known is not None:
        if (known == known[0]).all():
            single = te.const(int(known[0]), INT32)
            known_at = lambda k: single  # noqa: E731
        else:
            tensor_known = ctx.state.constant_tensor(known, f"{name}_channel_terms")
            known_at = lambda k: tensor_known[(k,)]  # noqa: E731
    parts = [p for p in (known_at, bias_at) if p is not None]
    if not parts and weight_sums is None:
        return None

    def at(k: te.Expr) -> te.Expr:
        value: te.Expr | None = None
        for part in parts:
            value = part(k) if value is None else value + part(k)
        if weight_sums is not None:
            assert x_zero is not None
            term = x_zero.load((0,), (1,)) * weight_sums(k)
            value = -term if value is None else value - term
        assert value is not None
        return value

    return at


def _check_per_tensor(ctx: NodeContext, index: int, what: str) -> None:
    if ctx.has(index) and math.prod(_onnx_shape(ctx, index)) != 1:
        raise ctx.unsupported(f"{what} {ctx.node.input[index]!r} of shape "
                              f"{_onnx_shape(ctx, index)} (one value per tensor only)")


def _check_per_channel(ctx: NodeContext, index: int, what: str, channels: int) -> None:
    shape = _onnx_shape(ctx, index) if ctx.has(index) else ()
    if math.prod(shape) != 1 and shape != (channels,):
        raise ctx.unsupported(f"{what} {ctx.node.input[index]!r} of shape {shape} (one value, "
                              f"or one per output channel: ({channels},))")


def _channel_load(tensor: Tensor, index: tuple[te.Expr, ...]) -> te.Expr:
    """A per-tensor or per-output-channel value at output index (n, k, ...)."""
    return tensor[(0,) * tensor.ndim] if tensor.size == 1 else tensor[(index[1],)]


@converter("ConvInteger")
def convert_conv_integer(ctx: NodeContext) -> list[Value]:
    x, w = ctx.tensor(0), ctx.tensor(1)
    _check_operand(ctx, x, "x")
    _check_operand(ctx, w, "w")
    _check_per_tensor(ctx, 2, "x_zero_point")
    _check_per_channel(ctx, 3, "w_zero_point", w.shape[0])
    x_zero = zero_point(ctx, 2, (1,), "x_zero_point", (x.dtype,))
    w_zero = zero_point(ctx, 3, (w.shape[0],), "w_zero_point", (w.dtype,))
    w_known = ctx.const(1, "w") if ctx.is_const(1) else None
    return [integer_conv(ctx, x, w, x_zero, w_zero, w_known, None, None, ctx.out())]


@converter("QLinearConv")
def convert_qlinear_conv(ctx: NodeContext) -> list[Value]:
    x, w = ctx.tensor(0), ctx.tensor(3)
    _check_operand(ctx, x, "x")
    _check_operand(ctx, w, "w")
    channels = w.shape[0]
    for index, what in ((1, "x_scale"), (2, "x_zero_point"), (6, "y_scale"),
                        (7, "y_zero_point")):
        _check_per_tensor(ctx, index, what)
    _check_per_channel(ctx, 4, "w_scale", channels)
    _check_per_channel(ctx, 5, "w_zero_point", channels)
    dtype = _output_dtype(ctx, 7, x)
    x_zero = zero_point(ctx, 2, (1,), "x_zero_point", (x.dtype,))
    w_zero = zero_point(ctx, 5, (channels,), "w_zero_point", (w.dtype,))
    y_zero = zero_point(ctx, 7, (1,), "y_zero_point", (dtype,))
    bias: Tensor | np.ndarray | None = None
    if ctx.has(8):
        dtype_of_bias = ctx.tensor(8).dtype
        if dtype_of_bias is not INT32 or math.prod(_onnx_shape(ctx, 8)) not in (1, channels):
            raise ctx.unsupported(f"bias {ctx.node.input[8]!r} of dtype {dtype_of_bias.value} "
                                  f"and shape {_onnx_shape(ctx, 8)} (int32, one value per "
                                  "output channel)")
        bias = ctx.const(8, "B") if ctx.is_const(8) else ctx.tensor(8)

    def per_channel(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return [array.reshape(-1) for array in arrays]

    scale_at = multiplier(ctx, (1, 4, 6), per_channel, _channel_load)
    finish = requantize(scale_at, y_zero, lambda index: ((0,), (1,)), dtype)
    w_known = ctx.const(3, "w") if ctx.is_const(3) else None
    return [integer_conv(ctx, x, w, x_zero, w_zero, w_known, bias, finish, ctx.out())]
