"""Pooling over NCHW tensors: max_pool2d, avg_pool2d, global_avg_pool2d (PyTorch defaults),
and pool_windows, the max or sum over dilated windows of an N-d input (1 to 3 spatial axes)
that they and ONNX's pools are built on.

Padding is a ``pad`` compute in front (``-inf`` for max pooling, the type's minimum for
integers; 0 for average pooling, which counts the padding: ``count_include_pad=True``).
Average pooling is a sum compute followed by a division compute.

>>> from tilecraft import te
>>> x = te.placeholder((1, 2, 7, 7), name="x")
>>> y = max_pool2d(x, 3, stride=2, padding=1, name="y")
>>> y.shape
(1, 2, 4, 4)
>>> print(y.statement())
y[n, c, h, w] = max(y_pad[n, c, ((h * 2) + rh), ((w * 2) + rw)], axis=[rh, rw])
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ShapeError
from tilecraft.ops.building import (
    accumulation_dtype,
    check_float,
    check_tensor,
    named_compute,
    normalize_tuple,
    output_name,
)
from tilecraft.ops.conv import conv_geometry, window_index
from tilecraft.ops.layout import pad
from tilecraft.ops.reduction import mean
from tilecraft.te.expr import ReduceOp, int_range
from tilecraft.te.tensor import Tensor

IntOrTuple = int | Sequence[int]


_SPATIAL_AXES = {1: ("w",), 2: ("h", "w"), 3: ("d", "h", "w")}


def pool_windows(x: Tensor, kernel: IntOrTuple, stride: IntOrTuple | None = None,
                 dilation: IntOrTuple = 1, reduce: ReduceOp = ReduceOp.MAX,
                 name: str | None = None, dtype: DType | None = None) -> Tensor:
    """The max (``reduce=ReduceOp.MAX``) or sum (``ReduceOp.SUM``) over each window of ``x``
    (N, C, *spatial with 1 to 3 spatial axes), which is not padded here: pad it first. On a
    spatial axis output ``o`` reduces the input positions ``o * stride + k * dilation`` for
    ``k < kernel``, so an axis of extent ``n`` gives ``(n - (kernel - 1) * dilation - 1) //
    stride + 1`` outputs. ``stride`` defaults to ``kernel``; ``dtype`` is the type the values
    are reduced in (``x``'s by default).

    >>> x = te.placeholder((1, 2, 11), name="x")
    >>> y = pool_windows(x, 3, stride=4, dilation=2, name="y")
    >>> y.shape
    (1, 2, 2)
    >>> print(y.statement())
    y[n, c, w] = max(x[n, c, ((w * 4) + (rw * 2))], axis=[rw])
    """
    op = "pool_windows"
    check_tensor(x, op, "x", (3, 4, 5))
    nd = x.ndim - 2
    kernels = normalize_tuple(kernel, nd, op, "kernel")
    strides = kernels if stride is None else normalize_tuple(stride, nd, op, "stride")
    if reduce not in (ReduceOp.MAX, ReduceOp.SUM):
        raise ShapeError(f"{op}: reduce={reduce!r} for {x.name} must be ReduceOp.MAX or "
                         "ReduceOp.SUM")
    geometry = conv_geometry(op, x, x.shape[2:], kernels, strides, 0, dilation)
    names = _SPATIAL_AXES[nd]
    taps = [te.reduce_axis(k, f"r{axis}") for k, axis in zip(kernels, names)]
    reducer = te.max if reduce is ReduceOp.MAX else te.sum
    value_dtype = dtype or x.dtype

    def body(n: te.Expr, c: te.Expr, *out: te.Expr) -> te.Expr:
        index = [window_index(o, s, tap, d)
                 for o, s, tap, d in zip(out, geometry.stride, taps, geometry.dilation)]
        return reducer(x[(n, c, *index)].astype(value_dtype), axis=taps)

    return named_compute((x.shape[0], x.shape[1], *geometry.out_spatial), ["n", "c", *names],
                         body, output_name(name, op))


def _pool2d(x: Tensor, kernel: IntOrTuple, stride: IntOrTuple | None, padding: IntOrTuple,
            op: str, reduce: ReduceOp, name: str, dtype: DType | None = None) -> Tensor:
    check_tensor(x, op, "x", 4)
    kernels = normalize_tuple(kernel, 2, op, "kernel")
    strides = kernels if stride is None else normalize_tuple(stride, 2, op, "stride")
    pads = normalize_tuple(padding, 2, op, "padding", minimum=0)
    for d in range(2):
        if 2 * pads[d] > kernels[d]:
            raise ShapeError(f"{op}: padding {pads[d]} is more than half the kernel "
                             f"({kernels[d]}) in spatial dimension {d}; PyTorch forbids it "
                             "(windows would see only padding)")
    geometry = conv_geometry(op, x, x.shape[2:], kernels, strides, pads, 1)
    if reduce is ReduceOp.MAX:
        fill: float | int = -math.inf if x.dtype.is_float else int_range(x.dtype)[0]
    else:
        fill = 0.0
    source = (pad(x, [(0, 0), (0, 0), *geometry.padding], value=fill, name=f"{name}_pad")
              if geometry.padded else x)
    return pool_windows(source, kernels, strides, 1, reduce, name, dtype)


def max_pool2d(x: Tensor, kernel: IntOrTuple, stride: IntOrTuple | None = None,
               padding: IntOrTuple = 0, name: str | None = None) -> Tensor:
    """Maximum over each window; ``stride`` defaults to ``kernel``."""
    final = output_name(name, "max_pool2d")
    return _pool2d(x, kernel, stride, padding, "max_pool2d", ReduceOp.MAX, final)


def avg_pool2d(x: Tensor, kernel: IntOrTuple, stride: IntOrTuple | None = None,
               padding: IntOrTuple = 0, name: str | None = None) -> Tensor:
    """Mean over each window, padding included in the count; ``stride`` defaults to ``kernel``."""
    check_tensor(x, "avg_pool2d", "x", 4)
    check_float(x, "avg_pool2d", "x")
    final = output_name(name, "avg_pool2d")
    kernels = normalize_tuple(kernel, 2, "avg_pool2d", "kernel")
    total = _pool2d(x, kernel, stride, padding, "avg_pool2d", ReduceOp.SUM, f"{final}_sum",
                    dtype=accumulation_dtype(x.dtype))
    count = float(kernels[0] * kernels[1])
    return named_compute(total.shape, ["n", "c", "h", "w"],
                         lambda *idx: (total[idx] / count).astype(x.dtype), final)


def global_avg_pool2d(x: Tensor, name: str | None = None) -> Tensor:
    """Mean over H and W, keeping them: (N, C, H, W) -> (N, C, 1, 1)."""
    check_tensor(x, "global_avg_pool2d", "x", 4)
    check_float(x, "global_avg_pool2d", "x")
    return mean(x, axes=(2, 3), keepdims=True, name=output_name(name, "global_avg_pool2d"))
