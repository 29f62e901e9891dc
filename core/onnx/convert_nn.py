"""ONNX neural-network operators: Gemm, MatMul, Conv, ConvTranspose, Softmax / LogSoftmax, the
pools and Einsum, each through :mod:`tilecraft.ops` (the normalizations:
:mod:`tilecraft.onnx.convert_norm`).

>>> # Conv(x, w, b) with pads [1, 1, 1, 1] becomes ops.conv2d(x, w, padding=((1, 1), (1, 1)))
>>> # followed by ops.bias_add(y, b, axis=1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tilecraft import ops, te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_math import broadcast
from tilecraft.onnx.values import Value
from tilecraft.ops.building import accumulation_dtype, named_compute
from tilecraft.ops.elementwise import axis_names, map_unary
from tilecraft.ops.pooling import pool_windows
from tilecraft.te.expr import ReduceOp, int_range
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


@dataclass(frozen=True)
class _PoolAxis:
    """One spatial axis of an ONNX pool. In the input padded by ``pads`` (the model's, or
    auto_pad's), output ``o`` reduces the taps ``o * stride + k * dilation`` for
    ``k < kernel``; ceil mode's last window may run ``extra`` past that padded input.

    >>> axis = _PoolAxis(extent=4, kernel=2, stride=2, dilation=2, pads=(0, 0), outputs=2)
    >>> axis.extra, axis.cells(1, real_only=True)  # output 1's taps 2 and 4: 4 is past the end
    (1, 1)
    """

    extent: int
    kernel: int
    stride: int
    dilation: int
    pads: tuple[int, int]
    outputs: int

    @property
    def span(self) -> int:
        return (self.kernel - 1) * self.dilation + 1

    @property
    def padded(self) -> int:
        return self.extent + self.pads[0] + self.pads[1]

    @property
    def extra(self) -> int:
        return max((self.outputs - 1) * self.stride + self.span - self.padded, 0)

    def counted(self, real_only: bool) -> tuple[int, int]:
        """The [low, high) range of padded positions a window's mean counts: the input's
        (``count_include_pad=0``) or the padded input's (never ceil mode's extra)."""
        return (self.pads[0], self.pads[0] + self.extent) if real_only else (0, self.padded)

    def cells(self, o: int, real_only: bool) -> int:
        """How many of output ``o``'s taps are counted (onnx's reference, enumerated)."""
        low, high = self.counted(real_only)
        return sum(low <= o * self.stride + k * self.dilation < high for k in range(self.kernel))

    def cells_expr(self, o: te.Expr, real_only: bool) -> te.Expr | int:
        """:meth:`cells` as an expression of the output index ``o`` (an int where every
        window counts all its taps)."""
        counts = [self.cells(i, real_only) for i in range(self.outputs)]
        if all(c == self.kernel for c in counts):
            return self.kernel
        low, high = self.counted(real_only)
        d, start = self.dilation, o * self.stride if self.stride != 1 else o

        def taps_below(bound: int) -> te.Expr:  # taps at positions < bound: ceil((bound-start)/d)
            ahead = bound - start + (d - 1)  # clamped to 0 and to kernel where that can bind
            if bound - (self.outputs - 1) * self.stride + d - 1 < 0:
                ahead = te.maximum(ahead, 0)
            taps = ahead // d if d != 1 else ahead
            return te.minimum(taps, self.kernel) if (bound + d - 1) // d > self.kernel else taps

        cells = taps_below(high) - taps_below(low) if low > 0 else taps_below(high)
        return te.maximum(cells, 0) if min(counts) == 0 else cells


def _pool_axes(ctx: NodeContext, x: Tensor) -> list[_PoolAxis]:
    """Each spatial axis's window, padding and output count, as onnx's reference computes
    them (``ceil_mode`` rounds the count up unless the last window would start past the input
    and its begin padding)."""
    kernel = [int(v) for v in ctx.attr("kernel_shape")]
    nd = len(kernel)
    if nd not in (1, 2, 3) or x.ndim != nd + 2:
        raise ctx.unsupported(f"a {nd}-d kernel_shape on a rank-{x.ndim} input (1-d to 3-d "
                              "pools, the input having 2 more dimensions than kernel_shape)")
    strides = [int(v) for v in ctx.attr("strides", [1] * nd)]
    dilations = [int(v) for v in ctx.attr("dilations", [1] * nd)]
    if min(kernel + strides + dilations) < 1:
        raise ctx.unsupported(f"kernel_shape {kernel}, strides {strides}, dilations "
                              f"{dilations} (all must be at least 1)")
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and max(dilations) > 1:
        # onnxruntime and onnx's reference size these pads by the undilated kernel, and
        # then disagree with each other and with the spec on the output's size
        raise ctx.unsupported(f"auto_pad={auto_pad} with dilations {dilations} (give "
                              "explicit pads, or auto_pad with dilations 1)")
    padding = spatial_padding(ctx, x.shape[2:], kernel, strides, dilations)
    if min(v for pair in padding for v in pair) < 0:
        raise ctx.unsupported(f"negative pads {padding} (pads must be at least 0)")
    ceil_mode = bool(int(ctx.attr("ceil_mode", 0)))
    axes = []
    for d, (extent, k, s, dil, pads) in enumerate(zip(x.shape[2:], kernel, strides, dilations,
                                                      padding)):
        axis = _PoolAxis(extent, k, s, dil, pads, 0)
        room = axis.padded - axis.span
        outputs = -(-room // s) + 1 if ceil_mode else room // s + 1
        if ceil_mode and (outputs - 1) * s >= extent + pads[0]:
            outputs -= 1  # the last window must start inside the input or its begin padding
        if outputs < 1:
            raise ctx.unsupported(f"a window {axis.span} wide (kernel {k}, dilation {dil}) on "
                                  f"spatial axis {d} of extent {extent} padded by {pads}: no "
                                  "output (the window must fit in the padded input)")
        axes.append(_PoolAxis(extent, k, s, dil, pads, outputs))
    return axes


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
    """MaxPool, AveragePool and LpPool over 1 to 3 spatial axes, with strides, dilations,
    pads / auto_pad and ceil_mode, as onnx's reference defines them: a ``pad`` compute (by the
    pads plus ceil mode's extra end) and a max or sum over the dilated windows; AveragePool
    divides each sum by its counted cells (``count_include_pad``: inside the pads too),
    LpPool takes ``sum^(1/p)`` of ``|x|^p`` (also where ceil mode clips a window, as
    onnxruntime does; onnx's reference scales those by kernel size / cells). Ceil mode's extra
    always goes at the end (onnx's reference AveragePool / LpPool moves half of an extra of 2
    or more to the begin, shifting every window; onnxruntime and its MaxPool do not).
    MaxPool's Indices output (:func:`_max_indices`) is supported; auto_pad SAME with
    dilations is not."""
    x = ctx.tensor(0)
    axes = _pool_axes(ctx, x)
    final = ctx.out()
    kernel = [a.kernel for a in axes]
    strides = [a.stride for a in axes]
    dilations = [a.dilation for a in axes]
    borders = [(0, 0), (0, 0), *((a.pads[0], a.pads[1] + a.extra) for a in axes)]
    if ctx.op_type == "MaxPool":
        fill: float | int = -math.inf if x.dtype.is_float else int_range(x.dtype)[0]
        source = _pool_padded(ctx, x, borders, fill, final)
        y = pool_windows(source, kernel, strides, dilations, ReduceOp.MAX, name=final)
        if len(ctx.node.output) > 1 and ctx.node.output[1]:
            return [y, _max_indices(ctx, x, y, axes, int(ctx.attr("storage_order", 0)))]
        return [y]
    if not x.dtype.is_float:
        raise ctx.unsupported(f"{ctx.op_type} on {x.dtype.value} (float types only)")
    root: Callable[[te.Expr], te.Expr] = lambda s: s  # noqa: E731
    if ctx.op_type == "LpPool":  # (sum of |x|^p over the window)^(1/p), as ONNX defines it
        # and onnxruntime computes it (onnx's reference scales a window clipped by ceil mode
        # by kernel size / cells, an artefact of computing it as an average)
        p = int(ctx.attr("p", 2))
        if p < 1 or p > 8:
            raise ctx.unsupported(f"p = {p} (1 <= p <= 8)")
        power, root = _lp_power(p)
        x = map_unary(x, power, "lp_power", ctx.state.unique(f"{ctx.node.output[0]}_power"))
    source = _pool_padded(ctx, x, borders, 0.0, final)
    total = pool_windows(source, kernel, strides, dilations, ReduceOp.SUM,
                         name=ctx.state.unique(f"{final}_sum"),
                         dtype=accumulation_dtype(x.dtype))
    real_only = ctx.op_type == "AveragePool" and not int(ctx.attr("count_include_pad", 0))

    def body(n: te.Expr, c: te.Expr, *out: te.Expr) -> te.Expr:
        per_axis = [axis.cells_expr(o, real_only) for axis, o in zip(axes, out)]
        cells: te.Expr | int = math.prod(count for count in per_axis if isinstance(count, int))
        for count in per_axis:
            if not isinstance(count, int):
                cells = count if isinstance(cells, int) and cells == 1 else cells * count
        value = total[(n, c, *out)]
        if ctx.op_type == "LpPool":  # the window's Lp norm, padding counting as zeros
            return root(value).astype(x.dtype)
        divisor = float(cells) if isinstance(cells, int) else cells.astype(total.dtype)
        return (value / divisor).astype(x.dtype)

    return [named_compute(total.shape, axis_names(total.ndim), body, final)]


def _max_indices(ctx: NodeContext, x: Tensor, y: Tensor, axes: Sequence[_PoolAxis],
                 storage_order: int) -> Tensor:
    """MaxPool's Indices: per window, the flat index into ``x`` (row-major with
    ``storage_order=0``, column-major over the spatial axes with 1, after ``n * C + c`` whole
    maps) of its first tap in row-major window order that holds the maximum ``y``, as onnx's
    reference picks it (a later equal value does not replace it); -1 for a window of padding
    only. Two computes: the first matching tap's number (a min over the window), then its
    position. int64 indices are held as int32, as tilecraft holds every int64.

    >>> # x[1, 1, 4], kernel 2, stride 2: first[0, 0, o] = min over t < 2 of
    >>> #   select(x[0, 0, 2o + t] == y[0, 0, o], t, 2); indices = 2o + first
    """
    if storage_order not in (0, 1):
        raise ctx.unsupported(f"storage_order {storage_order} (0 or 1)")
    spatial = x.shape[2:]
    kernels = [axis.kernel for axis in axes]
    count = math.prod(kernels)
    taps = [te.reduce_axis(k, f"t{d}") for d, k in enumerate(kernels)]
    name = ctx.out(1)

    def position(o: te.Expr, t: te.Expr, axis: _PoolAxis) -> te.Expr:
        return o * axis.stride - axis.pads[0] + t * axis.dilation

    def first_body(n: te.Expr, c: te.Expr, *out: te.Expr) -> te.Expr:
        places = [position(o, t, axis) for o, t, axis in zip(out, taps, axes)]
        inside = te.all_of(*(cond for p, extent in zip(places, spatial)
                             for cond in (p >= 0, p < extent)))
        clamped = [te.minimum(te.maximum(p, 0), extent - 1) for p, extent in zip(places, spatial)]
        number: te.Expr = taps[0]
        for t, k in zip(taps[1:], kernels[1:]):
            number = number * k + t
        hit = inside & te.eq(x[(n, c, *clamped)], y[(n, c, *out)])
        return te.min(te.select(hit, number, count), axis=taps)

    first = named_compute(y.shape, axis_names(y.ndim), first_body,
                          ctx.state.unique(f"{name}_first"))
    weights = [math.prod(spatial[d + 1:]) if storage_order == 0 else math.prod(spatial[:d])
               for d in range(len(spatial))]

    def index_body(n: te.Expr, c: te.Expr, *out: te.Expr) -> te.Expr:
        number = first[(n, c, *out)]
        offset: te.Expr = (n * x.shape[1] + c) * math.prod(spatial)
        for d, (o, axis, weight) in enumerate(zip(out, axes, weights)):
            t = number // math.prod(kernels[d + 1:]) % axis.kernel
            offset = offset + position(o, t, axis) * weight
        return te.select(te.eq(number, count), -1, offset)

    return named_compute(y.shape, axis_names(y.ndim), index_body, name)


def _pool_padded(ctx: NodeContext, x: Tensor, borders: Sequence[tuple[int, int]],
                 fill: float | int, final: str) -> Tensor:
    if not any(before or after for before, after in borders):
        return x
    return ops.pad(x, borders, value=fill, name=ctx.state.unique(f"{final}_pad"))


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
