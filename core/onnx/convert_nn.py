"""ONNX neural-network operators: Gemm, MatMul, Conv, ConvTranspose, Softmax / LogSoftmax, the
pools and Einsum, each through :mod:`tilecraft.ops` (the normalizations:
:mod:`tilecraft.onnx.convert_norm`).

>>> # Conv(x, w, b) with pads [1, 1, 1, 1] becomes ops.conv2d(x, w, padding=((1, 1), (1, 1)))
>>> # followed by ops.bias_add(y, b, axis=1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tilecraft import ops, te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_math import broadcast
from tilecraft.onnx.values import Value
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names, map_unary
from tilecraft.te.tensor import Tensor


def reshaped(ctx: NodeContext, x: Tensor, shape: Sequence[int], what: str) -> Tensor:
    """``x`` in ``shape`` (itself when it already has it)."""
    if tuple(x.shape) == tuple(shape):
        return x
    return ops.reshape(x, tuple(shape), name=ctx.state.unique(f"{ctx.node.output[0]}_{what}"))


def expanded(ctx: NodeContext, x: Tensor, shape: Sequence[int], what: str) -> Tensor:
    """``x`` broadcast to ``shape`` (numpy rules), as a copy where it differs."""
    if tuple(x.shape) == tuple(shape):
        return x
    target = tuple(shape)

    def body(*idx: te.Expr) -> te.Expr:
        offset = len(target) - x.ndim
        return x[tuple(0 if e == 1 else idx[offset + d] for d, e in enumerate(x.shape))]

    return named_compute(target, axis_names(len(target)), body,
                         ctx.state.unique(f"{ctx.node.output[0]}_{what}_full"))


@converter("MatMul")
def convert_matmul(ctx: NodeContext) -> list[Value]:
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.dtype != b.dtype:
        raise ctx.unsupported(f"inputs of different dtypes ({a.dtype.value}, {b.dtype.value})")
    return [matmul_nd(ctx, a, b, ctx.out())]


def matmul_nd(ctx: NodeContext, a: Tensor, b: Tensor, name: str) -> Tensor:
    """numpy's ``matmul`` (1-d operands promoted, batch dimensions broadcast) through
    ``ops.matmul`` / ``ops.batch_matmul`` and reshapes."""
    a_shape = (1, a.shape[0]) if a.ndim == 1 else a.shape
    b_shape = (b.shape[0], 1) if b.ndim == 1 else b.shape
    a2 = reshaped(ctx, a, a_shape, "lhs")
    b2 = reshaped(ctx, b, b_shape, "rhs")
    (m, k), (k2, n) = a_shape[-2:], b_shape[-2:]
    if k != k2:
        raise ctx.unsupported(f"inner dimensions differ: {a.shape} @ {b.shape}")
    batch = tuple(_broadcast_shapes(a_shape[:-2], b_shape[:-2], ctx))
    final_shape = [*batch, m, n]
    if a.ndim == 1:
        final_shape.pop(-2)
    if b.ndim == 1:
        final_shape.pop(-1)
    count = math.prod(batch)
    if math.prod(b_shape[:-2]) == 1:  # one right-hand matrix: fold A's batch into its rows
        rows = reshaped(ctx, a2, (count * m, k), "rows")
        product = ops.matmul(rows, reshaped(ctx, b2, (k, n), "matrix"),
                             name=name if (count * m, n) == tuple(final_shape) else
                             ctx.state.unique(f"{name}_product"))
    else:
        lhs = reshaped(ctx, expanded(ctx, a2, (*batch, m, k), "lhs_batch"), (count, m, k),
                       "lhs3")
        rhs = reshaped(ctx, expanded(ctx, b2, (*batch, k, n), "rhs_batch"), (count, k, n),
                       "rhs3")
        product = ops.batch_matmul(lhs, rhs, name=name if (count, m, n) == tuple(final_shape)
                                   else ctx.state.unique(f"{name}_product"))
    if tuple(product.shape) == tuple(final_shape):
        return product
    return ops.reshape(product, tuple(final_shape) or (1,), name=name)


def _broadcast_shapes(a: Sequence[int], b: Sequence[int], ctx: NodeContext) -> list[int]:
    from tilecraft.ops.building import broadcast_shape

    return list(broadcast_shape(tuple(a), tuple(b), ctx.label))


@converter("Gemm")
def convert_gemm(ctx: NodeContext) -> list[Value]:
    a, b = ctx.tensor(0), ctx.tensor(1)
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    has_c = ctx.has(2) and beta != 0.0
    plain = alpha == 1.0 and not has_c
    product = ops.matmul(a, b, transpose_a=bool(ctx.attr("transA", 0)),
                         transpose_b=bool(ctx.attr("transB", 0)),
                         name=ctx.out() if plain else ctx.state.unique(
                             f"{ctx.node.output[0]}_product"))
    if plain:
        return [product]
    if not has_c:
        return [ops.scale(product, alpha, name=ctx.out())]
    c = ctx.tensor(2)
    return [broadcast([product, c], lambda p, v: (p * alpha if alpha != 1.0 else p)
                      + (v * beta if beta != 1.0 else v), ctx.out())]


def spatial_padding(ctx: NodeContext, in_spatial: Sequence[int], kernel: Sequence[int],
                    strides: Sequence[int], dilations: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) per spatial dimension from ``pads`` or ``auto_pad``."""
    nd = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", "VALID"):
        pads = list(ctx.attr("pads", [0] * (2 * nd))) if auto_pad == "NOTSET" else [0] * 2 * nd
        return [(int(pads[d]), int(pads[d + nd])) for d in range(nd)]
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.unsupported(f"auto_pad={auto_pad!r}")
    result = []
    for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        result.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
    return result


_CONV = {1: ops.conv1d, 2: ops.conv2d, 3: ops.conv3d}
_CONV_T = {1: ops.conv_transpose1d, 2: ops.conv_transpose2d, 3: ops.conv_transpose3d}


@converter("Conv")
def convert_conv(ctx: NodeContext) -> list[Value]:
    x, w = ctx.tensor(0), ctx.tensor(1)
    nd = x.ndim - 2
    if nd not in _CONV:
        raise ctx.unsupported(f"{nd}-d convolution (1-d, 2-d and 3-d are supported)")
    kernel = w.shape[2:]
    strides = [int(v) for v in ctx.attr("strides", [1] * nd)]
    dilations = [int(v) for v in ctx.attr("dilations", [1] * nd)]
    padding = spatial_padding(ctx, x.shape[2:], kernel, strides, dilations)
    bias = ctx.has(2)
    y = _CONV[nd](x, w, stride=tuple(strides), padding=tuple(padding),
                  dilation=tuple(dilations), groups=int(ctx.attr("group", 1)),
                  name=ctx.state.unique(f"{ctx.node.output[0]}_conv") if bias else ctx.out())
    return [ops.bias_add(y, ctx.tensor(2), axis=1, name=ctx.out())] if bias else [y]


@converter("ConvTranspose")
def convert_conv_transpose(ctx: NodeContext) -> list[Value]:
    x, w = ctx.tensor(0), ctx.tensor(1)
    nd = x.ndim - 2
    if nd not in _CONV_T:
        raise ctx.unsupported(f"{nd}-d transposed convolution (1-d to 3-d are supported)")
    kernel = w.shape[2:]
    strides = [int(v) for v in ctx.attr("strides", [1] * nd)]
    dilations = [int(v) for v in ctx.attr("dilations", [1] * nd)]
    extra = [int(v) for v in ctx.attr("output_padding", [0] * nd)]
    groups = int(ctx.attr("group", 1))
    full = [(i - 1) * s + (k - 1) * d + 1 for i, s, k, d in
            zip(x.shape[2:], strides, kernel, dilations)]
    output_shape = ctx.attr("output_shape")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = ([int(v) for v in output_shape][-nd:] if output_shape is not None else
                  [i * s for i, s in zip(x.shape[2:], strides)])
        pads = []
        for d in range(nd):
            total = full[d] + extra[d] - wanted[d]
            if total < 0:  # the output extends past the full result: more output padding
                extra[d] -= total
                total = 0
            half = total // 2
            pads.append((half, total - half) if auto_pad == "SAME_UPPER"
                        else (total - half, half))
    elif auto_pad in ("NOTSET", "VALID"):
        flat = [int(v) for v in ctx.attr("pads", [0] * 2 * nd)] if auto_pad == "NOTSET" \
            else [0] * 2 * nd
        pads = [(flat[d], flat[d + nd]) for d in range(nd)]
    else:
        raise ctx.unsupported(f"auto_pad={auto_pad!r}")
    bias = ctx.has(2)
    final = ctx.out()
    symmetric = all(b == a for b, a in pads) and all(
        e < max(s, d) for e, s, d in zip(extra, strides, dilations))
    if symmetric:
        y = _CONV_T[nd](x, w, stride=tuple(strides), padding=tuple(b for b, _ in pads),
                        output_padding=tuple(extra), dilation=tuple(dilations), groups=groups,
                        name=ctx.state.unique(f"{final}_convt") if bias else final)
    else:  # the whole result, then the window ONNX asks for (zeros past its end)
        whole = _CONV_T[nd](x, w, stride=tuple(strides), dilation=tuple(dilations),
                            groups=groups, name=ctx.state.unique(f"{final}_whole"))
        out_spatial = [f + e - b - a for f, e, (b, a) in zip(full, extra, pads)]
        zero = te.const(0, whole.dtype)

        def crop(n: te.Expr, c: te.Expr, *spatial: te.Expr) -> te.Expr:
            source = [s + b if b else s for s, (b, _) in zip(spatial, pads)]
            inside = [s < f for s, f, e in zip(source, full, extra) if e]
            clamped = [te.minimum(s, f - 1) if e else s for s, f, e in zip(source, full, extra)]
            load = whole[(n, c, *clamped)]
            return te.select(te.all_of(*inside), load, zero) if inside else load

        y = named_compute((x.shape[0], whole.shape[1], *out_spatial), axis_names(nd + 2), crop,
                          ctx.state.unique(f"{final}_crop") if bias else final)
    return [ops.bias_add(y, ctx.tensor(2), axis=1, name=final)] if bias else [y]


@converter("Softmax", "LogSoftmax")
def convert_softmax(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    fn = ops.softmax if ctx.op_type == "Softmax" else ops.log_softmax
    return [fn(x, axis=int(ctx.attr("axis", -1)), name=ctx.out())]


def _pool_geometry(ctx: NodeContext, x: Tensor) -> tuple[list[int], list[int],
                                                        list[tuple[int, int]]]:
    kernel = [int(v) for v in ctx.attr("kernel_shape")]
    nd = len(kernel)
    strides = [int(v) for v in ctx.attr("strides", [1] * nd)]
    if any(int(d) != 1 for d in ctx.attr("dilations", [1] * nd)):
        raise ctx.unsupported("dilated pooling windows")
    padding = spatial_padding(ctx, x.shape[2:], kernel, strides, [1] * nd)
    if int(ctx.attr("ceil_mode", 0)):  # more padding at the end gives ceil's extra window
        for d, (size, k, s) in enumerate(zip(x.shape[2:], kernel, strides)):
            before, after = padding[d]
            span = size + before + after - k
            windows = -(-span // s) + 1
            if (windows - 1) * s >= size + before:
                windows -= 1  # a last window starting in the end padding is dropped (ONNX)
            padding[d] = (before, after + max((windows - 1) * s - span, 0))
    return kernel, strides, padding


def _as_2d(ctx: NodeContext, x: Tensor) -> Tensor:
    if x.ndim == 4:
        return x
    if x.ndim == 3:
        return reshaped(ctx, x, (x.shape[0], x.shape[1], 1, x.shape[2]), "as2d")
    raise ctx.unsupported(f"{x.ndim - 2}-d pooling (1-d and 2-d are supported)")


def _lp_power(p: int) -> tuple[Callable[[te.Expr], te.Expr], Callable[[te.Expr], te.Expr]]:
    """``|v|^p`` and ``s^(1/p)`` for LpPool's integer ``p`` (products and a square root where
    they are exact, ``exp`` / ``log`` otherwise)."""
    if p == 1:
        return te.abs, lambda s: s
    if p == 2:
        return (lambda v: v * v), te.sqrt

    def power(v: te.Expr) -> te.Expr:
        result = te.abs(v)
        for _ in range(p - 1):
            result = result * te.abs(v)
        return result

    return power, lambda s: te.exp(te.log(s) / float(p))


@converter("MaxPool", "AveragePool", "LpPool")
def convert_pool(ctx: NodeContext) -> list[Value]:
    if len([o for o in ctx.node.output if o]) > 1:
        raise ctx.unsupported("MaxPool's Indices output is not supported")
    x = ctx.tensor(0)
    kernel, strides, padding = _pool_geometry(ctx, x)
    if ctx.op_type == "LpPool":  # (sum of |x|^p over the window, zeros padded)^(1/p)
        p = int(ctx.attr("p", 2))
        if p < 1 or p > 8 or not x.dtype.is_float:
            raise ctx.unsupported(f"p = {p} on {x.dtype.value} (1 <= p <= 8, float)")
        power, root = _lp_power(p)
        x = map_unary(x, power, "lp_power", ctx.state.unique(f"{ctx.node.output[0]}_power"))
    # the model's own pads (ceil mode's extra end padding is no part of a window's count)
    explicit = spatial_padding(ctx, x.shape[2:], kernel, strides, [1] * len(kernel))
    source = _as_2d(ctx, x)
    if x.ndim == 3:
        kernel, strides, padding = [1, *kernel], [1, *strides], [(0, 0), *padding]
        explicit = [(0, 0), *explicit]
    final = ctx.out()
    pooled_name = final if x.ndim == 4 else ctx.state.unique(f"{final}_2d")
    if any(padding[d][0] or padding[d][1] for d in range(2)):
        fill = -math.inf if x.dtype.is_float else 0
        if ctx.op_type in ("AveragePool", "LpPool"):
            fill = 0.0
        source = ops.pad(source, [(0, 0), (0, 0), *padding], value=fill,
                         name=ctx.state.unique(f"{final}_pad"))
    if ctx.op_type == "MaxPool":
        y = ops.max_pool2d(source, tuple(kernel), tuple(strides), name=pooled_name)
    elif ctx.op_type == "LpPool":
        window = float(math.prod(kernel))
        mean = ops.avg_pool2d(source, tuple(kernel), tuple(strides),
                              name=ctx.state.unique(f"{final}_mean"))
        y = map_unary(mean, lambda s: root(s * window), "lp_root", pooled_name)
    else:
        include_pad = bool(int(ctx.attr("count_include_pad", 0)))
        padded = any(b or a for b, a in padding)
        if not padded or include_pad and not int(ctx.attr("ceil_mode", 0)):
            y = ops.avg_pool2d(source, tuple(kernel), tuple(strides), name=pooled_name)
        else:
            y = _average_real_elements(ctx, x.shape[2:] if x.ndim == 4 else (1, x.shape[2]),
                                       source, kernel, strides, padding, explicit,
                                       include_pad, pooled_name)
    if x.ndim == 3:
        return [ops.reshape(y, (y.shape[0], y.shape[1], y.shape[3]), name=final)]
    return [y]


def _average_real_elements(ctx: NodeContext, in_spatial: Sequence[int], padded: Tensor,
                           kernel: Sequence[int], strides: Sequence[int],
                           padding: Sequence[tuple[int, int]],
                           explicit: Sequence[tuple[int, int]], include_pad: bool,
                           name: str) -> Tensor:
    """The mean over each window's elements that are not padding (ONNX's
    ``count_include_pad=0``), or that are inside the model's own pads (``=1`` with ceil mode:
    ``padding`` also holds ceil mode's extra end padding, ``explicit`` only the model's pads,
    and onnxruntime divides by the window clipped to those)."""
    window_mean = ops.avg_pool2d(padded, tuple(kernel), tuple(strides),
                                 name=ctx.state.unique(f"{name}_mean"))
    area = float(kernel[0] * kernel[1])
    explicit = [(int(before), int(after)) for before, after in explicit]
    starts = [int(before) for before, _ in padding]

    def count(o: te.Expr, d: int) -> te.Expr:
        start = o * strides[d] - starts[d]
        low = 0 if not include_pad else -explicit[d][0]
        high = in_spatial[d] if not include_pad else in_spatial[d] + explicit[d][1]
        return te.minimum(start + kernel[d], high) - te.maximum(start, low)

    def body(n: te.Expr, c: te.Expr, h: te.Expr, w: te.Expr) -> te.Expr:
        cells = (count(h, 0) * count(w, 1)).astype(window_mean.dtype)
        return window_mean[n, c, h, w] * area / cells

    return named_compute(window_mean.shape, ["n", "c", "h", "w"], body, name)


@converter("GlobalAveragePool", "GlobalMaxPool")
def convert_global_pool(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axes = tuple(range(2, x.ndim))
    if ctx.op_type == "GlobalMaxPool":
        return [ops.reduce_max(x, axes=axes, keepdims=True, name=ctx.out())]
    if x.ndim == 4:
        return [ops.global_avg_pool2d(x, name=ctx.out())]
    return [ops.mean(x, axes=axes, keepdims=True, name=ctx.out())]


@converter("Einsum")
def convert_einsum(ctx: NodeContext) -> list[Value]:
    """``ops.einsum`` with the node's equation; what it refuses names this node."""
    from tilecraft.errors import ShapeError

    equation = ctx.attr("equation")
    if isinstance(equation, bytes):
        equation = equation.decode()
    tensors = [ctx.tensor(index) for index in range(len(ctx.node.input))]
    try:
        return [ops.einsum(str(equation), *tensors, name=ctx.out())]
    except ShapeError as err:
        raise ctx.unsupported(str(err)) from err
