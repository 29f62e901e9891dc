"""Transposed convolutions (PyTorch semantics and weight layout), in gather form.

x (N, C_in, *in), w (C_in, C_out/groups, *kernel) -> (N, C_out, *out) with
``out = (in - 1)*stride - 2*padding + dilation*(kernel - 1) + output_padding + 1``.
Each output element gathers the inputs that the forward convolution would scatter to it::

    t = y + padding - r*dilation          (per spatial dimension)
    y_out[n, o, y] = sum_{c, r} (t % stride == 0 && 0 <= t < in*stride)
                                  ? x[n, g*Cg + c, t // stride] * w[g*Cg + c, o - g*Og, r] : 0

The guarded load's index is clamped into the input (``max(min(t // stride, in - 1), 0)``) so it
is in bounds on every lane; the guard discards the value where the clamp changed it.

>>> from tilecraft import te
>>> x = te.placeholder((1, 2, 5), name="x")
>>> w = te.placeholder((2, 3, 3), name="w")
>>> conv_transpose1d(x, w, stride=2, padding=1, output_padding=1).shape
(1, 3, 10)
"""

from __future__ import annotations

from collections.abc import Sequence

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ShapeError
from tilecraft.ops._util import (
    check_tensor,
    named_compute,
    normalize_tuple,
    operand,
    output_name,
    product_dtype,
)
from tilecraft.ops.conv import KERNEL_NAMES, SPATIAL_NAMES, check_groups
from tilecraft.te.tensor import Tensor

IntOrTuple = int | Sequence[int]


def _conv_transpose_nd(x: Tensor, w: Tensor, nd: int, stride: IntOrTuple, padding: IntOrTuple,
                       output_padding: IntOrTuple, dilation: IntOrTuple, groups: int,
                       out_dtype: DType | str | None, op: str, name: str | None) -> Tensor:
    check_tensor(x, op, "x", nd + 2)
    check_tensor(w, op, "w", nd + 2)
    batch, in_channels, *in_spatial = x.shape
    w_in, out_per_group, *kernel = w.shape
    if w_in != in_channels:
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) has {w_in} input channels but x "
                         f"({x.name}, shape {x.shape}) has {in_channels}; weights are "
                         "(in_channels, out_channels/groups, *kernel)")
    check_groups(op, groups, in_channels, out_per_group * groups)
    strides = normalize_tuple(stride, nd, op, "stride")
    dilations = normalize_tuple(dilation, nd, op, "dilation")
    pads = normalize_tuple(padding, nd, op, "padding", minimum=0)
    extra = normalize_tuple(output_padding, nd, op, "output_padding", minimum=0)
    out_spatial = []
    for d in range(nd):
        if extra[d] >= max(strides[d], dilations[d]):
            raise ShapeError(f"{op}: output_padding {extra[d]} in spatial dimension {d} must be "
                             f"smaller than stride ({strides[d]}) or dilation ({dilations[d]})")
        size = ((in_spatial[d] - 1) * strides[d] - 2 * pads[d] + dilations[d] * (kernel[d] - 1)
                + extra[d] + 1)
        if size < 1:
            raise ShapeError(f"{op}: padding {pads[d]} is too large in spatial dimension {d}: "
                             f"the output would have extent {size}; reduce the padding")
        out_spatial.append(size)
    dtype = product_dtype(op, x, w, out_dtype)
    in_per_group = in_channels // groups
    rc = te.reduce_axis(in_per_group, "rc")
    taps = [te.reduce_axis(extent, tap_name)
            for extent, tap_name in zip(kernel, KERNEL_NAMES[nd])]
    zero = te.const(0, dtype)

    def body(n: te.Expr, o: te.Expr, *out: te.Expr) -> te.Expr:
        conditions = []
        source = []
        for d, (y, tap) in enumerate(zip(out, taps)):
            offset = y + pads[d] if pads[d] else y
            t = offset - (tap * dilations[d] if dilations[d] != 1 else tap)
            conditions += [t >= 0, t < in_spatial[d] * strides[d]]
            if strides[d] == 1:
                source.append(t)
            else:
                conditions.append(te.eq(t % strides[d], 0))
                source.append(te.maximum(te.minimum(t // strides[d], in_spatial[d] - 1), 0))
        if groups == 1:
            channel, out_channel = rc, o
        else:
            channel = (o // out_per_group) * in_per_group + rc
            out_channel = o % out_per_group
        value = te.select(te.all_of(*conditions), operand(x[(n, channel, *source)], dtype),
                          zero)
        return te.sum(value * operand(w[(channel, out_channel, *taps)], dtype),
                      axis=[rc, *taps])

    return named_compute((batch, out_per_group * groups, *out_spatial),
                         ["n", "o", *SPATIAL_NAMES[nd]], body, output_name(name, op))


def conv_transpose1d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                     output_padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
                     out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """PyTorch ``conv_transpose1d``: x (N, C_in, W), w (C_in, C_out/groups, S)."""
    return _conv_transpose_nd(x, w, 1, stride, padding, output_padding, dilation, groups,
                              out_dtype, "conv_transpose1d", name)


def conv_transpose2d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                     output_padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
                     out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """PyTorch ``conv_transpose2d``: x (N, C_in, H, W), w (C_in, C_out/groups, R, S)."""
    return _conv_transpose_nd(x, w, 2, stride, padding, output_padding, dilation, groups,
                              out_dtype, "conv_transpose2d", name)


def conv_transpose3d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                     output_padding: IntOrTuple = 0, dilation: IntOrTuple = 1, groups: int = 1,
                     out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """PyTorch ``conv_transpose3d``: x (N, C_in, D, H, W), w (C_in, C_out/groups, T, R, S)."""
    return _conv_transpose_nd(x, w, 3, stride, padding, output_padding, dilation, groups,
                              out_dtype, "conv_transpose3d", name)
