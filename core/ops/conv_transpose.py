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
from tilecraft.ops.building import (
    check_tensor,
    named_compute,
    normalize_tuple,
    operand,
    output_name,
    product_dtype,
)
from tilecraft.ops.conv import (
    KERNEL_NAMES,
    SPATIAL_NAMES,
    check_groups,
    window_index,
)
from tilecraft.ops.layout import pad
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


def conv_transpose2d_zero_insert(x: Tensor, w: Tensor, stride: IntOrTuple = 1,
                                 padding: IntOrTuple = 0, output_padding: IntOrTuple = 0,
                                 dilation: IntOrTuple = 1, out_dtype: DType | str | None = None,
                                 name: str | None = None) -> Tensor:
    """PyTorch's ``conv_transpose2d`` (groups=1) written as AMOS does: insert ``stride - 1``
    zeros between input pixels (``<name>_expand``), pad by ``dilation*(kernel-1) - padding``
    (plus ``output_padding`` after; ``<name>_pad``), then correlate with the flipped kernel::

        y[n, o, h, w] = sum_{c, r, s} x_pad[n, c, h + r*dh, w + s*dw] * w[c, o, R-1-r, S-1-s]

    x (N, C_in, H, W), w (C_in, C_out, R, S) -> (N, C_out, H_out, W_out). The kernel taps index
    the weights with a negative coefficient, so they never map onto an intrinsic loop.

    One of the AMOS benchmark operators (thesis Table 5.3).

    >>> x = te.placeholder((2, 3, 6, 6), name="x")
    >>> t = conv_transpose2d_zero_insert(x, te.placeholder((3, 5, 3, 3), name="wt"), stride=2,
    ...                                  padding=1, name="t")
    >>> print(t.statement())
    t[n, o, h, w] = sum(t_pad[n, rc, (h + rh), (w + rw)] * wt[rc, o, (2 - rh), (2 - rw)],
        axis=[rc, rh, rw])
    >>> t.shape
    (2, 5, 11, 11)
    """
    op = "conv_transpose2d_zero_insert"
    check_tensor(x, op, "x", 4)
    check_tensor(w, op, "w", 4)
    batch, channels, height, width = x.shape
    w_channels, out_channels, kernel_h, kernel_w = w.shape
    if w_channels != channels:
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) has {w_channels} input channels "
                         f"but x ({x.name}) has {channels}; weights are (C_in, C_out, R, S)")
    strides = normalize_tuple(stride, 2, op, "stride")
    pads = normalize_tuple(padding, 2, op, "padding", minimum=0)
    extra = normalize_tuple(output_padding, 2, op, "output_padding", minimum=0)
    dilations = normalize_tuple(dilation, 2, op, "dilation")
    kernel = (kernel_h, kernel_w)
    borders = []
    for d in range(2):
        if extra[d] >= max(strides[d], dilations[d]):
            raise ShapeError(f"{op}: output_padding {extra[d]} in spatial dimension {d} must be "
                             f"smaller than stride ({strides[d]}) or dilation ({dilations[d]})")
        border = dilations[d] * (kernel[d] - 1) - pads[d]
        if border < 0:
            raise ShapeError(f"{op}: padding {pads[d]} exceeds dilation*(kernel-1) = "
                             f"{dilations[d] * (kernel[d] - 1)} in spatial dimension {d}; the "
                             "zero-insertion form cannot crop, use ops.conv_transpose2d")
        borders.append((border, border + extra[d]))
    dtype = product_dtype(op, x, w, out_dtype)
    final = output_name(name, op)
    source = x
    if strides != (1, 1):
        sh, sw = strides
        source = named_compute(
            (batch, channels, (height - 1) * sh + 1, (width - 1) * sw + 1), ["n", "c", "h", "w"],
            lambda n, c, h, w_: te.select(te.all_of(te.eq(h % sh, 0), te.eq(w_ % sw, 0)),
                                          x[n, c, h // sh, w_ // sw], te.const(0, x.dtype)),
            f"{final}_expand")
    if any(b or a for b, a in borders):
        source = pad(source, [(0, 0), (0, 0), *borders], name=f"{final}_pad")
    out_h = source.shape[2] - dilations[0] * (kernel_h - 1)
    out_w = source.shape[3] - dilations[1] * (kernel_w - 1)
    rc = te.reduce_axis(channels, "rc")
    rh = te.reduce_axis(kernel_h, "rh")
    rw = te.reduce_axis(kernel_w, "rw")
    dh, dw = dilations

    def body(n: te.Expr, o: te.Expr, h: te.Expr, w_: te.Expr) -> te.Expr:
        value = source[n, rc, window_index(h, 1, rh, dh), window_index(w_, 1, rw, dw)]
        weight = w[rc, o, (kernel_h - 1) - rh, (kernel_w - 1) - rw]
        return te.sum(operand(value, dtype) * operand(weight, dtype), axis=[rc, rh, rw])

    return named_compute((batch, out_channels, out_h, out_w), ["n", "o", "h", "w"], body, final)
