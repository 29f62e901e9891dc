"""Convolutions: conv1d / conv2d / conv3d (NCW, NCHW, NCDHW with OI... weights; conv2d also
NHWC with HWIO weights), with stride, padding, dilation and groups (PyTorch conventions).

Padding is a separate ``pad`` compute (``<name>_pad``) in front of the convolution, as in
thesis Eq. 2.4, so the convolution itself is always a single sum of a product of two loads
over (c, r, s, ...)::

    y[n, k, h, w] = sum(x_pad[n, c, h*sh + r*dh, w*sw + s*dw] * w[k, c, r, s], axis=[rc, rh, rw])

With ``groups > 1`` the input channel is ``(k // (K/groups)) * (C/groups) + rc``.

>>> from tilecraft import te
>>> x = te.placeholder((1, 3, 8, 8), name="x")
>>> w = te.placeholder((4, 3, 3, 3), name="w")
>>> y = conv2d(x, w, stride=2, padding=1, name="y")
>>> print(y.statement())
y[n, k, h, w] = sum(y_pad[n, rc, ((h * 2) + rh), ((w * 2) + rw)] * w[k, rc, rh, rw],
    axis=[rc, rh, rw])
>>> y.shape
(1, 4, 4, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ShapeError
from tilecraft.ops.building import (
    check_tensor,
    named_compute,
    normalize_padding,
    normalize_tuple,
    operand,
    output_name,
    product_dtype,
)
from tilecraft.ops.layout import pad
from tilecraft.te.tensor import Tensor

IntOrTuple = int | Sequence[int]
Padding = int | Sequence[int] | Sequence[Sequence[int]]

#: names of the spatial output axes and kernel reduce axes for 1, 2 and 3 spatial dimensions
SPATIAL_NAMES = {1: ["w"], 2: ["h", "w"], 3: ["d", "h", "w"]}
KERNEL_NAMES = {1: ["rw"], 2: ["rh", "rw"], 3: ["rd", "rh", "rw"]}


@dataclass(frozen=True)
class ConvGeometry:
    """Checked convolution parameters and the output's spatial extents."""

    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    out_spatial: tuple[int, ...]

    @property
    def padded(self) -> bool:
        return any(b or a for b, a in self.padding)


def window_index(out: te.Expr, stride: int, tap: te.Expr, dilation: int) -> te.Expr:
    """``out * stride + tap * dilation`` without multiplications by one."""
    left = out * stride if stride != 1 else out
    right = tap * dilation if dilation != 1 else tap
    return left + right


def conv_geometry(op: str, x: Tensor, in_spatial: Sequence[int], kernel: Sequence[int],
                  stride: IntOrTuple, padding: Padding, dilation: IntOrTuple) -> ConvGeometry:
    """Normalise stride/padding/dilation and compute the output size (floor mode)."""
    nd = len(kernel)
    strides = normalize_tuple(stride, nd, op, "stride")
    dilations = normalize_tuple(dilation, nd, op, "dilation")
    pads = normalize_padding(padding, nd, op)
    out = []
    for d in range(nd):
        padded = in_spatial[d] + pads[d][0] + pads[d][1]
        effective = dilations[d] * (kernel[d] - 1) + 1
        if effective > padded:
            raise ShapeError(f"{op}: the kernel (extent {kernel[d]}, dilation {dilations[d]}, so "
                             f"{effective} wide) is larger than the padded input ({padded} = "
                             f"{in_spatial[d]} + padding {pads[d]}) of {x.name} in spatial "
                             f"dimension {d}; use a smaller kernel or more padding")
        out.append((padded - effective) // strides[d] + 1)
    return ConvGeometry(strides, dilations, pads, tuple(out))


def check_groups(op: str, groups: int, in_channels: int, out_channels: int) -> None:
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ShapeError(f"{op}: groups={groups!r} must be a positive int")
    if in_channels % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {in_channels} input "
                         "channels; pick groups that divides both channel counts")
    if out_channels % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {out_channels} output "
                         "channels; pick groups that divides both channel counts")


def _conv_nd(x: Tensor, w: Tensor, nd: int, stride: IntOrTuple, padding: Padding,
             dilation: IntOrTuple, groups: int, out_dtype: DType | str | None, op: str,
             name: str | None) -> Tensor:
    check_tensor(x, op, "x", nd + 2)
    check_tensor(w, op, "w", nd + 2)
    batch, channels, *in_spatial = x.shape
    out_channels, group_channels, *kernel = w.shape
    check_groups(op, groups, channels, out_channels)
    if group_channels != channels // groups:
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}) has {group_channels} input "
                         f"channels but x ({x.name}, shape {x.shape}) has {channels} channels "
                         f"and groups={groups}, so w needs {channels // groups}; weights are "
                         "(out_channels, in_channels/groups, *kernel)")
    geometry = conv_geometry(op, x, in_spatial, kernel, stride, padding, dilation)
    dtype = product_dtype(op, x, w, out_dtype)
    final = output_name(name, op)
    source = (pad(x, [(0, 0), (0, 0), *geometry.padding], name=f"{final}_pad")
              if geometry.padded else x)
    rc = te.reduce_axis(group_channels, "rc")
    taps = [te.reduce_axis(extent, tap_name)
            for extent, tap_name in zip(kernel, KERNEL_NAMES[nd])]
    out_per_group = out_channels // groups

    def body(n: te.Expr, k: te.Expr, *out: te.Expr) -> te.Expr:
        channel = rc if groups == 1 else (k // out_per_group) * group_channels + rc
        spatial = [window_index(o, s, t, d)
                   for o, s, t, d in zip(out, geometry.stride, taps, geometry.dilation)]
        product = (operand(source[(n, channel, *spatial)], dtype)
                   * operand(w[(k, rc, *taps)], dtype))
        return te.sum(product, axis=[rc, *taps])

    return named_compute((batch, out_channels, *geometry.out_spatial),
                         ["n", "k", *SPATIAL_NAMES[nd]], body, final)


def conv1d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
           dilation: IntOrTuple = 1, groups: int = 1, out_dtype: DType | str | None = None,
           name: str | None = None) -> Tensor:
    """1-d convolution: x (N, C, W), w (K, C/groups, S) -> (N, K, W_out)."""
    return _conv_nd(x, w, 1, stride, padding, dilation, groups, out_dtype, "conv1d", name)


def conv2d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
           dilation: IntOrTuple = 1, groups: int = 1, layout: str = "NCHW",
           out_dtype: DType | str | None = None, name: str | None = None) -> Tensor:
    """2-d convolution.

    ``layout="NCHW"``: x (N, C, H, W), w (K, C/groups, R, S) -> (N, K, H_out, W_out).
    ``layout="NHWC"``: x (N, H, W, C), w (R, S, C/groups, K) (HWIO) -> (N, H_out, W_out, K).
    ``padding`` is an int, (pad_h, pad_w) or ((top, bottom), (left, right)).
    """
    if layout == "NCHW":
        return _conv_nd(x, w, 2, stride, padding, dilation, groups, out_dtype, "conv2d", name)
    if layout == "NHWC":
        return _conv2d_nhwc(x, w, stride, padding, dilation, groups, out_dtype, name)
    raise ShapeError(f"conv2d: layout={layout!r} is not supported; use 'NCHW' (weights OIHW) "
                     "or 'NHWC' (weights HWIO)")


def conv3d(x: Tensor, w: Tensor, stride: IntOrTuple = 1, padding: Padding = 0,
           dilation: IntOrTuple = 1, groups: int = 1, out_dtype: DType | str | None = None,
           name: str | None = None) -> Tensor:
    """3-d convolution: x (N, C, D, H, W), w (K, C/groups, T, R, S) -> (N, K, D', H', W')."""
    return _conv_nd(x, w, 3, stride, padding, dilation, groups, out_dtype, "conv3d", name)


def _conv2d_nhwc(x: Tensor, w: Tensor, stride: IntOrTuple, padding: Padding,
                 dilation: IntOrTuple, groups: int, out_dtype: DType | str | None,
                 name: str | None) -> Tensor:
    op = "conv2d"
    check_tensor(x, op, "x", 4)
    check_tensor(w, op, "w", 4)
    batch, height, width, channels = x.shape
    kernel_h, kernel_w, group_channels, out_channels = w.shape
    check_groups(op, groups, channels, out_channels)
    if group_channels != channels // groups:
        raise ShapeError(f"{op}: w ({w.name}, shape {w.shape}, HWIO) has {group_channels} input "
                         f"channels but x ({x.name}, NHWC {x.shape}) has {channels} channels and "
                         f"groups={groups}, so w needs {channels // groups}")
    geometry = conv_geometry(op, x, (height, width), (kernel_h, kernel_w), stride, padding,
                             dilation)
    dtype = product_dtype(op, x, w, out_dtype)
    final = output_name(name, op)
    source = (pad(x, [(0, 0), *geometry.padding, (0, 0)], name=f"{final}_pad")
              if geometry.padded else x)
    rh = te.reduce_axis(kernel_h, "rh")
    rw = te.reduce_axis(kernel_w, "rw")
    rc = te.reduce_axis(group_channels, "rc")
    out_per_group = out_channels // groups
    (sh, sw), (dh, dw) = geometry.stride, geometry.dilation

    def body(n: te.Expr, h: te.Expr, w_: te.Expr, k: te.Expr) -> te.Expr:
        channel = rc if groups == 1 else (k // out_per_group) * group_channels + rc
        product = (operand(source[n, window_index(h, sh, rh, dh), window_index(w_, sw, rw, dw),
                                  channel], dtype)
                   * operand(w[rh, rw, rc, k], dtype))
        return te.sum(product, axis=[rh, rw, rc])

    return named_compute((batch, *geometry.out_spatial, out_channels), ["n", "h", "w", "k"],
                         body, final)
