"""ONNX normalizations: BatchNormalization (inference), LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization and LRN,
through :mod:`tilecraft.ops` (statistics by :func:`~tilecraft.ops.layer_norm`,
:func:`~tilecraft.ops.mean` and :func:`~tilecraft.ops.variance`, two passes: no
``E[x^2] - E[x]^2`` cancellation).

>>> # InstanceNormalization(x[N, C, H, W], scale, B) becomes layer_norm over (H, W), then
>>> # y[n, c, h, w] = normalized[n, c, h, w] * scale[c] + B[c]
"""

from __future__ import annotations

import math

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_nn import expanded, reshaped
from tilecraft.onnx.values import Value
from tilecraft.ops.building import compute_float, named_compute
from tilecraft.ops.elementwise import axis_names, map_unary
from tilecraft.ops.reduction import reduce_compute
from tilecraft.te.expr import ReduceOp
from tilecraft.te.tensor import Tensor


@converter("BatchNormalization")
def convert_batch_norm(ctx: NodeContext) -> list[Value]:
    if int(ctx.attr("training_mode", 0)) or len([o for o in ctx.node.output if o]) > 1:
        raise ctx.unsupported("training mode / running-statistics outputs (inference only)")
    x = ctx.tensor(0)
    return [ops.batch_norm(x, ctx.tensor(3), ctx.tensor(4), ctx.tensor(1), ctx.tensor(2),
                           eps=float(ctx.attr("epsilon", 1e-5)), axis=1, name=ctx.out())]


@converter("LayerNormalization")
def convert_layer_norm(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", -1)) % x.ndim
    eps = float(ctx.attr("epsilon", 1e-5))
    normalized = x.shape[axis:]
    params = []
    for index, what in ((1, "scale"), (2, "bias")):
        if not ctx.has(index):
            params.append(None)
            continue
        param = ctx.tensor(index)
        params.append(reshaped(ctx, expanded(ctx, param, normalized, what), normalized, what))
    axes = tuple(range(axis, x.ndim))
    results: list[Value] = [ops.layer_norm(x, params[0], params[1], axes=axes, eps=eps,
                                           name=ctx.out())]
    wanted = list(ctx.node.output[1:])
    if any(wanted):  # the Mean and InvStdDev outputs (statistics kept over the axes)
        results.append(ops.mean(x, axes=axes, keepdims=True, name=ctx.out(1)))
    if len(wanted) > 1 and wanted[1]:
        var = ops.variance(x, axes=axes, keepdims=True,
                           name=ctx.state.unique(f"{ctx.node.output[2]}_var"))
        results.append(map_unary(var, lambda v: 1.0 / te.sqrt(v + eps), "rstd", ctx.out(2)))
    return results


def _channel_affine(x: Tensor, scale: Tensor, bias: Tensor, group: int, name: str) -> Tensor:
    """``y[n, c, ...] = x[n, c, ...] * scale[c // group] + bias[c // group]``."""
    def body(*idx: te.Expr) -> te.Expr:
        which = idx[1] // group if group > 1 else idx[1]
        value = compute_float(x[idx]) * compute_float(scale[(which,)]) + \
            compute_float(bias[(which,)])
        return value.astype(x.dtype)

    return named_compute(x.shape, axis_names(x.ndim), body, name)


def _vector(ctx: NodeContext, index: int, extent: int, what: str) -> Tensor:
    """Input ``index``, one value per channel or group, as a 1-d tensor of ``extent``."""
    value = ctx.tensor(index)
    if value.size != extent:
        raise ctx.unsupported(f"its {what} has {value.size} values, expected {extent}")
    return reshaped(ctx, value, (extent,), what)


@converter("InstanceNormalization")
def convert_instance_norm(ctx: NodeContext) -> list[Value]:
    """Statistics over the spatial axes of each image and channel, then a per-channel scale
    and bias."""
    x = ctx.tensor(0)
    if x.ndim < 3 or not x.dtype.is_float:
        raise ctx.unsupported(f"an input of shape {x.shape} and dtype {x.dtype.value} "
                              "(float, with at least one spatial axis)")
    name = ctx.out()
    normalized = ops.layer_norm(x, axes=tuple(range(2, x.ndim)),
                                eps=float(ctx.attr("epsilon", 1e-5)), name=f"{name}_normalized")
    channels = x.shape[1]
    return [_channel_affine(normalized, _vector(ctx, 1, channels, "scale"),
                            _vector(ctx, 2, channels, "bias"), 1, name)]


@converter("GroupNormalization")
def convert_group_norm(ctx: NodeContext) -> list[Value]:
    """Statistics over each group of ``C / num_groups`` channels and the spatial axes; the
    scale and bias are per channel (opset 21) or per group (opset 18)."""
    x = ctx.tensor(0)
    groups = int(ctx.attr("num_groups"))
    if x.ndim < 2 or not x.dtype.is_float or groups < 1 or x.shape[1] % groups:
        raise ctx.unsupported(f"{groups} groups of an input of shape {x.shape} and dtype "
                              f"{x.dtype.value} (float, channels a multiple of the groups)")
    name = ctx.out()
    per_group = x.shape[1] // groups
    grouped = reshaped(ctx, x, (x.shape[0], groups, x.size // (x.shape[0] * groups)),
                       "grouped")
    normalized = ops.layer_norm(grouped, axes=(2,), eps=float(ctx.attr("epsilon", 1e-5)),
                                name=f"{name}_normalized")
    normalized = reshaped(ctx, normalized, x.shape, "ungrouped")
    extent, group = (x.shape[1], 1) if ctx.version >= 21 else (groups, per_group)
    return [_channel_affine(normalized, _vector(ctx, 1, extent, "scale"),
                            _vector(ctx, 2, extent, "bias"), group, name)]


@converter("LpNormalization")
def convert_lp_norm(ctx: NodeContext) -> list[Value]:
    """``x / ||x||_p`` along ``axis``, p 1 or 2; 0 where the norm is 0 (ONNX's definition,
    not 0 / 0)."""
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", -1)) % x.ndim
    p = int(ctx.attr("p", 2))
    if p not in (1, 2) or not x.dtype.is_float:
        raise ctx.unsupported(f"p = {p} on {x.dtype.value} (p 1 or 2, float)")
    name = ctx.out()

    def magnitude(source: tuple[te.Expr, ...]) -> te.Expr:
        value = compute_float(x[source])
        return te.abs(value) if p == 1 else value * value

    total = reduce_compute(x, (axis,), True, ReduceOp.SUM, x.dtype, f"{name}_norm",
                           body=magnitude)

    def body(*idx: te.Expr) -> te.Expr:
        norm = total[tuple(0 if d == axis else i for d, i in enumerate(idx))]
        zero = te.const(0.0, x.dtype)
        return te.select(te.eq(norm, zero), zero, x[idx] / (norm if p == 1 else te.sqrt(norm)))

    return [named_compute(x.shape, axis_names(x.ndim), body, name)]


#: MeanVarianceNormalization's epsilon (its ONNX function body adds it to the deviation)
MVN_EPSILON = 1e-9


@converter("MeanVarianceNormalization")
def convert_mvn(ctx: NodeContext) -> list[Value]:
    """``(x - mean) / (sqrt(variance) + 1e-9)`` over ``axes`` (default 0, 2, 3)."""
    x = ctx.tensor(0)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"a {x.dtype.value} input (float only)")
    axes = tuple(sorted({int(a) % x.ndim for a in ctx.attr("axes", [0, 2, 3])}))
    name = ctx.out()
    average = ops.mean(x, axes=axes, keepdims=True, name=f"{name}_mean")
    spread = ops.variance(x, axes=axes, keepdims=True, name=f"{name}_variance")

    def body(*idx: te.Expr) -> te.Expr:
        stat = tuple(0 if d in axes else i for d, i in enumerate(idx))
        return (x[idx] - average[stat]) / (te.sqrt(spread[stat]) + MVN_EPSILON)

    return [named_compute(x.shape, axis_names(x.ndim), body, name)]


@converter("LRN")
def convert_lrn(ctx: NodeContext) -> list[Value]:
    """``x / (bias + alpha / size * sum of x^2 over the size channels around c) ^ beta``
    (``floor((size - 1) / 2)`` below ``c``, ``ceil`` above, clipped to the channels)."""
    x = ctx.tensor(0)
    if x.ndim < 3 or not x.dtype.is_float:
        raise ctx.unsupported(f"an input of shape {x.shape} and dtype {x.dtype.value} "
                              "(float, N x C x spatial)")
    size = int(ctx.attr("size"))
    alpha, beta = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    below, channels, name = (size - 1) // 2, x.shape[1], ctx.out()
    window = te.reduce_axis(size, "r")

    def squares(*idx: te.Expr) -> te.Expr:
        channel = idx[1] - below + window
        inside = (channel >= 0) & (channel < channels)
        clamped = te.minimum(te.maximum(channel, 0), channels - 1)
        value = compute_float(x[(idx[0], clamped, *idx[2:])])
        return te.sum(te.select(inside, value * value, 0.0), axis=[window])

    total = named_compute(x.shape, axis_names(x.ndim), squares, f"{name}_squares")

    def body(*idx: te.Expr) -> te.Expr:
        base = bias + (alpha / size) * total[idx]
        return x[idx] / te.exp(beta * te.log(base))

    return [named_compute(x.shape, axis_names(x.ndim), body, name)]


@converter("RMSNormalization")
def convert_rms_norm(ctx: NodeContext) -> list[Value]:
    """``x / sqrt(mean(x^2) + epsilon) * scale`` with the mean over the axes from ``axis`` on
    (float32 statistics whatever ``stash_type``)."""
    x = ctx.tensor(0)
    if not x.dtype.is_float:
        raise ctx.unsupported(f"a {x.dtype.value} input (float only)")
    axis = int(ctx.attr("axis", -1)) % x.ndim
    eps = float(ctx.attr("epsilon", 1e-5))
    normalized = x.shape[axis:]
    scale = reshaped(ctx, expanded(ctx, ctx.tensor(1), normalized, "scale"), normalized,
                     "scale")
    axes = tuple(range(axis, x.ndim))
    name = ctx.out()
    squares = reduce_compute(x, axes, True, ReduceOp.SUM, DType.FLOAT32, f"{name}_squares",
                             body=lambda source: compute_float(x[source]) * compute_float(
                                 x[source]))
    count = float(math.prod(normalized))

    def body(*idx: te.Expr) -> te.Expr:
        stat = tuple(0 if d >= axis else i for d, i in enumerate(idx))
        value = compute_float(x[idx]) / te.sqrt(squares[stat] / count + eps)
        return (value * compute_float(scale[tuple(idx[axis:])])).astype(x.dtype)

    return [named_compute(x.shape, axis_names(x.ndim), body, name)]
