"""Convolution chains (thesis Table 3.6): ``conv2d -> [relu] -> 1x1 conv2d`` in NCHW, float16,
seen as the GEMM chain the fused kernel computes — the first convolution an implicit GEMM
(rows: the ``batch x out_h x out_w`` output pixels, columns: ``channels x kernel_h x
kernel_w``, the image gathered im2col-wise while staging, zero in the padding), the 1x1
convolution a GEMM over the first one's output channels.

>>> from tilecraft import ops, te
>>> x = te.placeholder((1, 4, 9, 9), name="x", dtype="float16")
>>> w = te.placeholder((6, 4, 3, 3), name="w", dtype="float16")
>>> v = te.placeholder((5, 6, 1, 1), name="v", dtype="float16")
>>> y = ops.conv2d(ops.relu(ops.conv2d(x, w, stride=2, padding=1, name="C"), name="R"), v,
...                name="E")
>>> chain = match_conv_chain(y)
>>> chain.names, (chain.m, chain.k, chain.l, chain.n), chain.conv.stride, chain.conv.pad
(('C_pad', 'C', 'R', 'E'), (25, 36, 6, 5), 2, 1)
"""

from __future__ import annotations

from tilecraft.dtypes import DType
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    IterVar,
    Load,
    Reduce,
    ReduceOp,
    Select,
    Var,
)
from tilecraft.te.tensor import Tensor
from tilecraft_nvidia_tc.fusion.chain import ConvGeometry, FusedChain, relu_input

__all__ = ["match_conv_chain"]


def _strip(expr: Expr) -> Expr:
    while isinstance(expr, Cast):
        expr = expr.x
    return expr


_OPS = {BinaryOp.ADD: lambda a, b: a + b, BinaryOp.SUB: lambda a, b: a - b,
        BinaryOp.MUL: lambda a, b: a * b}


def _at(expr: Expr, **values: int) -> int | None:
    """The integer ``expr`` with the named loop variables set (others 0), or None when it is
    not sums and products of variables and integer constants."""
    expr = _strip(expr)
    if isinstance(expr, Const):
        return int(expr.value) if float(expr.value).is_integer() else None
    if isinstance(expr, (IterVar, Var)):
        return values.get(expr.name, 0)
    if isinstance(expr, Binary) and expr.op in _OPS:
        a, b = _at(expr.a, **values), _at(expr.b, **values)
        return None if a is None or b is None else _OPS[expr.op](a, b)
    return None


def _conv(tensor: Tensor) -> tuple[Load, Load, tuple] | None:
    """``(image load, weight load, (n, k, h, w, rc, rh, rw))`` when ``tensor`` is a float16
    NCHW convolution ``sum image[n, rc, ., .] * weight[k, rc, rh, rw]``."""
    body, axes = getattr(tensor.op, "body", None), tuple(getattr(tensor.op, "axes", ()))
    if not isinstance(body, Reduce) or body.op is not ReduceOp.SUM or len(body.axes) != 3 \
            or len(axes) != 4 or tensor.dtype is not DType.FLOAT16:
        return None
    product = _strip(body.body)
    if not isinstance(product, Binary) or product.op is not BinaryOp.MUL:
        return None
    rc, rh, rw = body.axes
    n, k, h, w = axes
    for image, weight in ((product.a, product.b), (product.b, product.a)):
        image, weight = _strip(image), _strip(weight)
        if isinstance(image, Load) and isinstance(weight, Load) \
                and tuple(weight.indices) == (k, rc, rh, rw) and image.tensor.ndim == 4 \
                and tuple(image.indices[:2]) == (n, rc) \
                and DType.FLOAT16 is image.tensor.dtype is weight.tensor.dtype:
            return image, weight, (n, k, h, w, rc, rh, rw)
    return None


def _window(image: Load, axes: tuple) -> tuple[int, int] | None:
    """``(stride, offset)`` of ``image[., ., h * s + rh + o, w * s + rw + o]``, else None."""
    _, _, h, w, _, rh, rw = axes
    found = []
    for index, out, red in ((image.indices[2], h, rh), (image.indices[3], w, rw)):
        base = _at(index)
        step = None if base is None else (_at(index, **{out.name: 1}) or 0) - base
        dilation = None if base is None else (_at(index, **{red.name: 1}) or 0) - base
        if base is None or step is None or step < 1 or dilation != 1:
            return None
        found.append((step, base))
    return found[0] if found[0] == found[1] else None


def _pad_source(tensor: Tensor) -> tuple[Tensor, int] | None:
    """``(x, p)`` when ``tensor`` is ``ops.pad``'s zero padding of ``x`` by ``p`` on both sides
    of its last two axes (a select of ``x[i0, i1, i2 - p, i3 - p]`` and 0), else None."""
    body = getattr(tensor.op, "body", None)
    if not isinstance(body, Select) or not isinstance(_strip(body.false_value), Const) \
            or _strip(body.false_value).value != 0:
        return None
    load = _strip(body.true_value)
    if not isinstance(load, Load) or load.tensor.ndim != 4:
        return None
    axes = tuple(tensor.op.axes)
    if tuple(load.indices[:2]) != axes[:2]:
        return None
    offsets = [_at(load.indices[i]) for i in (2, 3)]
    steps = [(_at(load.indices[i], **{axes[i].name: 1}) or 0) - (offsets[i - 2] or 0)
             for i in (2, 3)]
    if None in offsets or steps != [1, 1] or offsets[0] != offsets[1] or offsets[0] > 0:
        return None
    pad = -int(offsets[0])
    x = load.tensor
    if tensor.shape != (*x.shape[:2], x.shape[2] + 2 * pad, x.shape[3] + 2 * pad):
        return None
    return x, pad


def match_conv_chain(e: Tensor) -> FusedChain | None:
    """The chain ``conv2d -> [relu] -> 1x1 conv2d`` ending in ``e`` (module docstring), or
    None."""
    second = _conv(e)
    if second is None:
        return None
    image, weight2, axes2 = second
    if weight2.tensor.shape[2:] != (1, 1) or _window(image, axes2) != (1, 0) \
            or image.tensor.shape[2:] != e.shape[2:]:
        return None
    middle = image.tensor
    computes: list[Tensor] = []
    below = relu_input(middle)
    if below is not None:
        computes, middle = [middle], below
    first = _conv(middle)
    if first is None:
        return None
    image1, weight1, axes1 = first
    window = _window(image1, axes1)
    if window is None or window[1] != 0:
        return None
    stride = window[0]
    source, pad = image1.tensor, 0
    padded = _pad_source(source) if not source.is_placeholder else None
    if padded is not None:
        computes.insert(0, middle)
        computes.insert(0, source)
        source, pad = padded
    else:
        computes.insert(0, middle)
    n, c, hh, ww = source.shape
    kh, kw = weight1.tensor.shape[2:]
    geometry = ConvGeometry(n, c, hh, ww, kh, kw, stride, pad, middle.shape[2], middle.shape[3])
    if weight1.tensor.shape[1] != c or weight2.tensor.shape[1] != middle.shape[1]:
        return None
    return FusedChain(source, weight1.tensor, weight2.tensor, e, (*computes, e),
                      relu=below is not None, conv=geometry)
