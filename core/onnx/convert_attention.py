"""ONNX Attention (opsets 23-25): scaled dot-product attention over 3-d (heads folded into the
hidden axis) or 4-d inputs, with grouped-query heads, a past key / value cache and its present
outputs, boolean or additive masks (shorter than the keys: padded), causal masking aligned to
the cache, ``nonpad_kv_seqlen``, sliding windows, softcap and the ``qk_matmul_output`` modes.

Built from te computes, following the operator's definition step for step: scores ``s Q
K^T`` (the operator writes ``(Q sqrt(s)) (K sqrt(s))^T``: the same up to rounding, and a plain
product the templates recognise), softcap, plus the mask's additive bias, a softmax whose rows
with no key to attend (their bias all ``-inf``) are zero, then the product with V.

>>> # Attention(Q[2, 4, 9, 8], K[2, 2, 9, 8], V[2, 2, 9, 8], is_causal=1): query heads 2h and
>>> # 2h + 1 read key / value head h; y[b, h, i] sums over keys j <= i only
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import compute_float, named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

Access = Callable[[te.Expr, te.Expr, te.Expr, te.Expr], te.Expr]
NEG_INF = -math.inf


def _heads_view(x: Tensor, heads: int) -> tuple[Access, tuple[int, int, int, int]]:
    """``x`` as ``[batch, heads, sequence, head size]``: itself (4-d) or its hidden axis split
    into heads (3-d, ``[batch, sequence, heads * head size]``)."""
    if x.ndim == 4:
        return (lambda b, h, i, d: x[b, h, i, d]), tuple(x.shape)  # type: ignore[return-value]
    size = x.shape[2] // heads
    return ((lambda b, h, i, d: x[b, i, h * size + d]),
            (x.shape[0], heads, x.shape[1], size))


class _Cache:
    """A key or value input with its past: ``full(b, h, j, d)`` over the past then the new
    positions, and the present output built from it on request."""

    def __init__(self, current: Tensor, heads: int, past: Tensor | None,
                 name: str) -> None:
        self.access, shape = _heads_view(current, heads)
        self.past = past
        self.before = past.shape[2] if past is not None else 0
        self.shape = (shape[0], shape[1], self.before + shape[2], shape[3])
        self.name = name

    def full(self, b: te.Expr, h: te.Expr, j: te.Expr, d: te.Expr) -> te.Expr:
        if self.past is None:
            return self.access(b, h, j, d)
        past, before = self.past, self.before
        new = self.access(b, h, te.maximum(j - before, 0), d)
        return te.select(j < before, past[b, h, te.minimum(j, before - 1), d], new)

    def present(self) -> Tensor:
        return named_compute(self.shape, axis_names(4), self.full, self.name)


@converter("Attention")
def convert_attention(ctx: NodeContext) -> list[Value]:
    q_in, k_in, v_in = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    if q_in.ndim not in (3, 4) or not (q_in.ndim == k_in.ndim == v_in.ndim) \
            or not q_in.dtype.is_float:
        raise ctx.unsupported(f"Q, K, V of shapes {q_in.shape}, {k_in.shape}, {v_in.shape} "
                              f"and dtype {q_in.dtype.value} (3-d or 4-d, float)")
    q_heads = int(ctx.attr("q_num_heads", 0)) or (q_in.shape[1] if q_in.ndim == 4 else 0)
    kv_heads = int(ctx.attr("kv_num_heads", 0)) or (k_in.shape[1] if k_in.ndim == 4 else 0)
    if not q_heads or not kv_heads or q_heads % kv_heads:
        raise ctx.unsupported(f"{q_heads} query heads over {kv_heads} key / value heads "
                              "(3-d inputs need q_num_heads and kv_num_heads; the query "
                              "heads a multiple of the others)")
    query, (batch, _, q_len, q_size) = _heads_view(q_in, q_heads)
    past_key = ctx.tensor(4) if ctx.has(4) else None
    past_value = ctx.tensor(5) if ctx.has(5) else None
    if (past_key is None) != (past_value is None):
        raise ctx.unsupported("past_key and past_value must be given together")
    outputs = list(ctx.node.output) + [""] * (4 - len(ctx.node.output))
    keys = _Cache(k_in, kv_heads, past_key,
                  ctx.out(1) if outputs[1] else ctx.state.unique(f"{outputs[0]}_keys"))
    values = _Cache(v_in, kv_heads, past_value,
                    ctx.out(2) if outputs[2] else ctx.state.unique(f"{outputs[0]}_values"))
    kv_len, v_size = keys.shape[2], values.shape[3]
    group = q_heads // kv_heads
    scale = ctx.attr("scale")
    factor = float(np.float32(1.0 / math.sqrt(q_size) if scale is None else float(scale)))
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    name = ctx.state.unique(f"{outputs[0]}_attention")
    bias = _bias(ctx, batch, q_heads, q_len, kv_len, past_key is not None)

    reduce_d = te.reduce_axis(q_size, "d")

    def dot(b: te.Expr, h: te.Expr, i: te.Expr, j: te.Expr) -> te.Expr:
        key = keys.full(b, h // group if group > 1 else h, j, reduce_d)
        return te.sum(compute_float(query(b, h, i, reduce_d)) * compute_float(key),
                      axis=[reduce_d])

    # the plain product Q K^T, then the scale: a contraction the targets' templates (and the
    # x86 fused attention chain) recognise; the operator scales Q and K by sqrt(s) each,
    # which differs from this only in rounding
    product_qk = named_compute((batch, q_heads, q_len, kv_len), axis_names(4), dot,
                               f"{name}_qk")
    scores = named_compute(product_qk.shape, axis_names(4),
                           lambda *idx: product_qk[idx] * factor, f"{name}_scores")
    if softcap > 0:
        raw = scores
        scores = named_compute(raw.shape, axis_names(4), lambda *idx: softcap * te.tanh(
            raw[idx] / softcap), f"{name}_softcap")
    capped = scores
    logits = capped if bias is None else named_compute(
        capped.shape, axis_names(4), lambda *idx: capped[idx] + bias(*idx), f"{name}_logits")
    probabilities = _guarded_softmax(logits, bias, name)

    reduce_j = te.reduce_axis(kv_len, "j")

    def product(b: te.Expr, h: te.Expr, i: te.Expr, d: te.Expr) -> te.Expr:
        return te.sum(probabilities[b, h, i, reduce_j] * compute_float(
            values.full(b, h // group if group > 1 else h, reduce_j, d)), axis=[reduce_j])

    y_name = ctx.out(0)
    half = q_in.dtype != DType.FLOAT32  # a reduction is a whole compute: cast after it
    mixed = ctx.state.unique(f"{outputs[0]}_float32") if half else y_name
    if q_in.ndim == 4:
        y = named_compute((batch, q_heads, q_len, v_size), axis_names(4), product, mixed)
    else:  # the product per head (a contraction), then back to [batch, sequence, heads * size]
        heads_y = named_compute((batch, q_heads, q_len, v_size), axis_names(4), product,
                                f"{name}_heads")
        y = named_compute((batch, q_len, q_heads * v_size), axis_names(3),
                          lambda b, i, c: heads_y[b, c // v_size, i, c % v_size], mixed)
    if half:
        wide = y
        y = named_compute(wide.shape, axis_names(wide.ndim),
                          lambda *idx: wide[idx].astype(q_in.dtype), y_name)
    results: list[Value] = [y]
    for position, wanted in enumerate(outputs[1:4], start=1):
        if position >= len(ctx.node.output):
            break
        if not wanted:
            results.append(y)  # an output left out: its place kept, never read
        elif position == 1:
            results.append(keys.present())
        elif position == 2:
            results.append(values.present())
        else:
            mode = int(ctx.attr("qk_matmul_output_mode", 0))
            chosen = {0: capped, 1: capped, 2: logits, 3: probabilities}.get(mode)
            if chosen is None:
                raise ctx.unsupported(f"qk_matmul_output_mode {mode}")
            results.append(named_compute(
                chosen.shape, axis_names(4),
                lambda *idx, chosen=chosen: te.as_expr(chosen[idx]).astype(q_in.dtype),
                ctx.out(3)))
    return results


Bias = Callable[..., te.Expr]


def _bias(ctx: NodeContext, batch: int, heads: int, q_len: int, kv_len: int,
          cached: bool) -> Bias | None:
    """The additive bias ``(b, h, i, j) -> 0 or -inf (or a mask's value)``: the mask (padded
    past its last column: masked), causal masking aligned to the keys before this block,
    ``nonpad_kv_seqlen``, the sliding window; ``None`` when nothing masks."""
    mask = ctx.tensor(3) if ctx.has(3) else None
    lengths = ctx.tensor(6) if ctx.has(6) else None
    causal = bool(int(ctx.attr("is_causal", 0)))
    left = int(ctx.attr("left_window_size", -1))
    right = int(ctx.attr("right_window_size", -1))
    if mask is None and lengths is None and not causal and left < 0 and right < 0:
        return None
    before = ctx.tensor(4).shape[2] if cached else 0

    def offset(b: te.Expr) -> te.Expr | int:
        # keys preceding this block of queries: the cache's, or nonpad_kv_seqlen[b] - q_len
        if lengths is not None and not cached:
            return lengths[(b,) if lengths.ndim == 1 else (b, 0)].astype(DType.INT32) - q_len
        return before

    def bias(b: te.Expr, h: te.Expr, i: te.Expr, j: te.Expr) -> te.Expr:
        value: te.Expr = te.as_expr(0.0)
        if mask is not None:
            width = mask.shape[-1]
            full = (b, h, i, j)[4 - mask.ndim:]
            index = tuple(0 if e == 1 else axis for axis, e in zip(full, mask.shape))
            index = (*index[:-1], te.minimum(j, width - 1) if width < kv_len else index[-1])
            entry = mask[index]
            term = te.select(te.ne(entry, 0), 0.0, NEG_INF) if not mask.dtype.is_float \
                else compute_float(entry)
            value = te.select(j < width, term, NEG_INF) if width < kv_len else term
        allowed: list[te.Expr] = []
        if causal or left >= 0 or right >= 0:
            shift = i + offset(b) - j   # (query position) - (key position)
            if causal:
                allowed.append(shift >= 0)
            if left >= 0:
                allowed.append(shift <= left)
            if right >= 0:
                allowed.append(-shift <= right)
        if lengths is not None:
            allowed.append(j < lengths[(b,) if lengths.ndim == 1 else (b, 0)]
                           .astype(DType.INT32))
        for condition in allowed:
            value = te.select(condition, value, NEG_INF)
        return value

    return bias


def _guarded_softmax(logits: Tensor, bias: Bias | None, name: str) -> Tensor:
    """Softmax over the last axis, a row with nothing to attend (its bias all ``-inf``, or
    every logit ``-inf``) all zero instead of NaN."""
    shape = logits.shape
    rows = shape[:-1]
    j = te.reduce_axis(shape[-1], "j")
    top = named_compute(rows, axis_names(3),
                        lambda b, h, i: te.max(logits[b, h, i, j], axis=[j]), f"{name}_max")

    def shifted(b: te.Expr, h: te.Expr, i: te.Expr, k: te.Expr) -> te.Expr:
        peak = top[b, h, i]
        return te.exp(logits[b, h, i, k] - te.select(te.eq(peak, NEG_INF), 0.0, peak))

    exps = named_compute(shape, axis_names(4), shifted, f"{name}_exp")
    j2 = te.reduce_axis(shape[-1], "j")
    total = named_compute(rows, axis_names(3),
                          lambda b, h, i: te.sum(exps[b, h, i, j2], axis=[j2]), f"{name}_sum")
    masked: Tensor | None = None
    if bias is not None:
        j3 = te.reduce_axis(shape[-1], "j")
        masked = named_compute(rows, axis_names(3), lambda b, h, i: te.max(
            bias(b, h, i, j3), axis=[j3]), f"{name}_bias_max")

    def normalized(b: te.Expr, h: te.Expr, i: te.Expr, k: te.Expr) -> te.Expr:
        sum_ = total[b, h, i]
        value = exps[b, h, i, k] / te.select(te.eq(sum_, 0.0), 1.0, sum_)
        if masked is not None:
            value = te.select(te.eq(masked[b, h, i], NEG_INF), 0.0, value)
        return value

    return named_compute(shape, axis_names(4), normalized, f"{name}_probabilities")
