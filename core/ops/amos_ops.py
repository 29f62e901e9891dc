"""Operators of the AMOS benchmarks (thesis Table 5.3) that the rest of the library does not
spell the AMOS way: batched convolution (each sample its own weights), grouped fully
connected layer, and the transposed 2-d convolution as AMOS writes it (zero-insertion, padding,
then a correlation with the flipped kernel).

>>> from tilecraft import te
>>> x = te.placeholder((2, 3, 6, 6), name="x")
>>> w = te.placeholder((2, 4, 3, 3, 3), name="w")
>>> print(batched_conv2d(x, w, name="y").statement())
y[n, k, h, w] = sum(x[n, rc, (h + rh), (w + rw)] * w[n, k, rc, rh, rw], axis=[rc, rh, rw])
>>> t = conv_transpose2d_zero_insert(x, te.placeholder((3, 5, 3, 3), name="wt"), stride=2,
...                                  padding=1, name="t")
>>> print(t.statement())
t[n, o, h, w] = sum(t_pad[n, rc, (h + rh), (w + rw)] * wt[rc, o, (2 - rh), (2 - rw)],
    axis=[rc, rh, rw])
>>> t.shape
(2, 5, 11, 11)
"""

from __future__ import annotations

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
from tilecraft.ops.conv import IntOrTuple, Padding, conv_geometry, window_index
from tilecraft.ops.layout import pad
from tilecraft.te.tensor import Tensor


def batched_conv2d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
                   out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """2-d convolution where every sample has its own filters (AMOS's BCV):
    x (N, C, H, W), w (N, K, C, R, S) -> (N, K, H_out, W_out),
    ``y[n, k, h, w] = sum_{c, r, s} x[n, c, h*sh + r, w*sw + s] * w[n, k, c, r, s]``."""
    op = "batched_conv2d"
    check_tensor(x, op, "x", 4)
    check_tensor(w, op, "w", 5)
    batch, channels, height, width = x.shape
    w_batch, out_channels, w_channels, kernel_h, kernel_w = w.shape
    if (w_batch, w_channels) != (batch, channels):
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) must be (N, K, C, R, S) with "
                         f"N={batch} and C={channels} of x ({x.name}, shape {x.shape})")
    geometry = conv_geometry(op, x, (height, width), (kernel_h, kernel_w), stride, padding, 1)
    dtype = product_dtype(op, x, w, out_dtype)
    final = output_name(name, op)
    source = (pad(x, [(0, 0), (0, 0), *geometry.padding], name=f"{final}_pad")
              if geometry.padded else x)
    rc = te.reduce_axis(channels, "rc")
    rh = te.reduce_axis(kernel_h, "rh")
    rw = te.reduce_axis(kernel_w, "rw")
    sh, sw = geometry.stride

    def body(n: te.Expr, k: te.Expr, h: te.Expr, w_: te.Expr) -> te.Expr:
        value = source[n, rc, window_index(h, sh, rh, 1), window_index(w_, sw, rw, 1)]
        return te.sum(operand(value, dtype) * operand(w[n, k, rc, rh, rw], dtype),
                      axis=[rc, rh, rw])

    return named_compute((batch, out_channels, *geometry.out_spatial), ["n", "k", "h", "w"],
                         body, final)


def grouped_dense(x: Tensor, w: Tensor, out_dtype: DType | str | None = None,
                  name: str | None = None) -> Tensor:
    """Grouped fully connected layer (AMOS's GFC): x (N, G, C), w (G, K, C) -> (N, G, K),
    ``y[n, g, k] = sum_c x[n, g, c] * w[g, k, c]``."""
    op = "grouped_dense"
    check_tensor(x, op, "x", 3)
    check_tensor(w, op, "w", 3)
    batch, groups, channels = x.shape
    w_groups, out_features, w_channels = w.shape
    if (w_groups, w_channels) != (groups, channels):
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) must be (G, K, C) with "
                         f"G={groups} and C={channels} of x ({x.name}, shape {x.shape})")
    dtype = product_dtype(op, x, w, out_dtype)
    rc = te.reduce_axis(channels, "rc")
    return named_compute(
        (batch, groups, out_features), ["n", "g", "k"],
        lambda n, g, k: te.sum(operand(x[n, g, rc], dtype) * operand(w[g, k, rc], dtype),
                               axis=rc),
        output_name(name, op))


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
