"""ONNX losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its ``log_softmax`` over
the classes, then the same), with class weights, ``ignore_index`` and the three reductions.

te has no indirect loads, so the value at each target class is picked by a reduction over the
classes: ``sum over c of select(target == c, x[n, c, ...], 0)`` (``C`` comparisons a target;
a target outside ``[0, C)`` picks nothing, which only an ignored target may be).

>>> # NegativeLogLikelihoodLoss(x[N, C], t[N], reduction="mean") becomes
>>> # -sum over n of x[n, t[n]] / N
"""

from __future__ import annotations

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import compute_float, named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor


def _pick(source: Tensor, target: Tensor, name: str) -> Tensor:
    """``out[n, d...] = source[n, target[n, d...], d...]`` (0 where the target is no class)."""
    classes = source.shape[1]
    c = te.reduce_axis(classes, "c")

    def body(*idx: te.Expr) -> te.Expr:
        value = compute_float(source[(idx[0], c, *idx[1:])])
        return te.sum(te.select(te.eq(target[idx], c), value, 0.0), axis=[c])

    return named_compute(target.shape, axis_names(target.ndim), body, name)


def _class_weights(weight: Tensor | None, target: Tensor, ignore: int | None,
                   name: str) -> Tensor | None:
    """Each target's weight (its class's, 0 where ignored); ``None``: all 1, nothing ignored."""
    if weight is None and ignore is None:
        return None
    if weight is None:
        return named_compute(target.shape, axis_names(target.ndim), lambda *idx: te.select(
            te.eq(target[idx], ignore), 0.0, 1.0), name)
    c = te.reduce_axis(weight.shape[0], "c")

    def body(*idx: te.Expr) -> te.Expr:
        hit = te.eq(target[idx], c)
        if ignore is not None:
            hit = hit & te.ne(target[idx], ignore)
        return te.sum(te.select(hit, compute_float(weight[(c,)]), 0.0), axis=[c])

    return named_compute(target.shape, axis_names(target.ndim), body, name)


def negative_log_likelihood(ctx: NodeContext, source: Tensor, target: Tensor,
                            weight: Tensor | None, name: str) -> Tensor:
    """The loss of ``source`` (log-probabilities ``[N, C, d...]``) at ``target``
    (``[N, d...]``), reduced as the node's ``reduction`` says."""
    if source.ndim < 2 or tuple(target.shape) != (source.shape[0], *source.shape[2:]) \
            or target.dtype.is_float:
        raise ctx.unsupported(f"input {source.shape} and target {target.shape} "
                              f"({target.dtype.value}): target [N, d...] of integers for "
                              "input [N, C, d...]")
    ignore = ctx.attr("ignore_index")
    ignore = None if ignore is None else int(ignore)
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.unsupported(f"reduction {reduction!r}")
    picked = _pick(source, target, f"{name}_picked")
    weights = _class_weights(weight, target, ignore, f"{name}_weights")

    def loss(*idx: te.Expr) -> te.Expr:
        value = -picked[idx]
        return value * weights[idx] if weights is not None else value

    dtype = source.dtype
    if reduction == "none":
        return named_compute(target.shape, axis_names(target.ndim),
                             lambda *idx: te.as_expr(loss(*idx)).astype(dtype), name)
    each = named_compute(target.shape, axis_names(target.ndim), loss, f"{name}_each")
    total = ops.reduce_sum(each, keepdims=False, out_dtype=DType.FLOAT32,
                           name=f"{name}_total")
    if reduction == "sum":
        return named_compute(total.shape, axis_names(total.ndim),
                             lambda *idx: total[idx].astype(dtype), name)
    if weights is None:
        count = float(target.size)
        return named_compute(total.shape, axis_names(total.ndim),
                             lambda *idx: (total[idx] / count).astype(dtype), name)
    weight_sum = ops.reduce_sum(weights, keepdims=False, out_dtype=DType.FLOAT32,
                                name=f"{name}_weight_total")
    return named_compute(total.shape, axis_names(total.ndim),
                         lambda *idx: (total[idx] / weight_sum[idx]).astype(dtype), name)


@converter("NegativeLogLikelihoodLoss")
def convert_nll_loss(ctx: NodeContext) -> list[Value]:
    source, target = ctx.tensor(0), ctx.tensor(1)
    weight = ctx.tensor(2) if ctx.has(2) else None
    return [negative_log_likelihood(ctx, source, target, weight, ctx.out())]


@converter("SoftmaxCrossEntropyLoss")
def convert_softmax_cross_entropy(ctx: NodeContext) -> list[Value]:
    scores, labels = ctx.tensor(0), ctx.tensor(1)
    if not scores.dtype.is_float or scores.ndim < 2:
        raise ctx.unsupported(f"scores of shape {scores.shape} and dtype "
                              f"{scores.dtype.value} (float, [N, C, d...])")
    weight = ctx.tensor(2) if ctx.has(2) else None
    wants_log_prob = len(ctx.node.output) > 1 and bool(ctx.node.output[1])
    name = ctx.out()
    log_prob = ops.log_softmax(scores, axis=1,
                               name=ctx.out(1) if wants_log_prob else f"{name}_log_prob")
    loss = negative_log_likelihood(ctx, log_prob, labels, weight, name)
    return [loss, log_prob] if wants_log_prob else [loss]
