"""Convolution variants with their own index structure: depthwise and capsule convolution.

>>> from tilecraft import te
>>> x = te.placeholder((1, 4, 6, 6), name="x")
>>> w = te.placeholder((4, 2, 3, 3), name="w")
>>> y = depthwise_conv2d(x, w, name="y")
>>> y.shape
(1, 8, 4, 4)
>>> print(y.statement())
y[n, k, h, w] = sum(x[n, (k // 2), (h + rh), (w + rw)] * w[(k // 2), (k % 2), rh, rw],
    axis=[rh, rw])
"""

from __future__ import annotations

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ShapeError
from tilecraft.ops.building import check_tensor, named_compute, operand, output_name, product_dtype
from tilecraft.ops.conv import IntOrTuple, Padding, conv_geometry, window_index
from tilecraft.ops.layout import pad
from tilecraft.te.tensor import Tensor


def depthwise_conv2d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
                     dilation: IntOrTuple = 1, out_dtype: DType | str | None = None,
                     name: str | None = None) -> Tensor:
    """Depthwise 2-d convolution, NCHW: each input channel ``c`` gets ``mult`` filters.

    ``w`` is (C, mult, R, S), or PyTorch's (C*mult, 1, R, S) — the same data in memory. Output
    channel ``k = c*mult + m`` is ``sum_{r,s} x[n, c, h*sh + r*dh, w*sw + s*dw] * w[c, m, r, s]``.
    """
    op = "depthwise_conv2d"
    check_tensor(x, op, "x", 4)
    check_tensor(w, op, "w", 4)
    batch, channels, height, width = x.shape
    if w.shape[0] == channels:
        multiplier, torch_layout = w.shape[1], False
    elif w.shape[1] == 1 and w.shape[0] % channels == 0:
        multiplier, torch_layout = w.shape[0] // channels, True
    else:
        raise ShapeError(f"{op}: w ({w.name}) has shape {w.shape}; for x ({x.name}) with "
                         f"{channels} channels it must be ({channels}, multiplier, R, S) or "
                         f"({channels}*multiplier, 1, R, S)")
    kernel = w.shape[2:]
    geometry = conv_geometry(op, x, (height, width), kernel, stride, padding, dilation)
    dtype = product_dtype(op, x, w, out_dtype)
    final = output_name(name, op)
    source = (pad(x, [(0, 0), (0, 0), *geometry.padding], name=f"{final}_pad")
              if geometry.padded else x)
    rh = te.reduce_axis(kernel[0], "rh")
    rw = te.reduce_axis(kernel[1], "rw")
    (sh, sw), (dh, dw) = geometry.stride, geometry.dilation

    def body(n: te.Expr, k: te.Expr, h: te.Expr, w_: te.Expr) -> te.Expr:
        channel = k if multiplier == 1 else k // multiplier
        if torch_layout or multiplier == 1:  # (C*mult, 1, R, S): output channel k's filter
            weight = w[k, 0, rh, rw]
        else:
            weight = w[channel, k % multiplier, rh, rw]
        value = source[n, channel, window_index(h, sh, rh, dh), window_index(w_, sw, rw, dw)]
        return te.sum(operand(value, dtype) * operand(weight, dtype), axis=[rh, rw])

    return named_compute((batch, channels * multiplier, *geometry.out_spatial),
                         ["n", "k", "h", "w"], body, final)


def capsule_conv2d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
                   out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """Capsule convolution as AMOS defines it (thesis ch. 5 benchmarks):

    ``O[b, k, h, w, s] = sum_{c, rh, rw} I[b, c, h*st + rh, w*st + rw] * W[k, c, rh, rw, s]``

    x (B, C, H, W), w (K, C, RH, RW, S) -> (B, K, H_out, W_out, S); ``padding`` pads H and W.
    """
    op = "capsule_conv2d"
    check_tensor(x, op, "x", 4)
    check_tensor(w, op, "w", 5)
    batch, channels, height, width = x.shape
    out_channels, w_channels, kernel_h, kernel_w, capsules = w.shape
    if w_channels != channels:
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) has {w_channels} input channels "
                         f"but x ({x.name}) has {channels}; w must be (K, {channels}, RH, RW, S)")
    geometry = conv_geometry(op, x, (height, width), (kernel_h, kernel_w), stride, padding, 1)
    dtype = product_dtype(op, x, w, out_dtype)
    final = output_name(name, op)
    source = (pad(x, [(0, 0), (0, 0), *geometry.padding], name=f"{final}_pad")
              if geometry.padded else x)
    rc = te.reduce_axis(channels, "rc")
    rh = te.reduce_axis(kernel_h, "rh")
    rw = te.reduce_axis(kernel_w, "rw")
    sh, sw = geometry.stride

    def body(b: te.Expr, k: te.Expr, h: te.Expr, w_: te.Expr, s: te.Expr) -> te.Expr:
        value = source[b, rc, window_index(h, sh, rh, 1), window_index(w_, sw, rw, 1)]
        return te.sum(operand(value, dtype) * operand(w[k, rc, rh, rw, s], dtype),
                      axis=[rc, rh, rw])

    return named_compute((batch, out_channels, *geometry.out_spatial, capsules),
                         ["b", "k", "h", "w", "s"], body, final)


def batched_conv2d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
                   out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """2-d convolution where every sample has its own filters (AMOS's BCV):
    x (N, C, H, W), w (N, K, C, R, S) -> (N, K, H_out, W_out),
    ``y[n, k, h, w] = sum_{c, r, s} x[n, c, h*sh + r, w*sw + s] * w[n, k, c, r, s]``
    (one of the AMOS benchmark operators, thesis Table 5.3).

    >>> x = te.placeholder((2, 3, 6, 6), name="x")
    >>> w = te.placeholder((2, 4, 3, 3, 3), name="w")
    >>> print(batched_conv2d(x, w, name="y").statement())
    y[n, k, h, w] = sum(x[n, rc, (h + rh), (w + rw)] * w[n, k, rc, rh, rw], axis=[rc, rh, rw])
    """
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
