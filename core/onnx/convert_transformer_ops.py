"""Newer ONNX operators of transformer and vision models: RotaryEmbedding (opset 23), SwiGLU
(opset 28), TensorScatter (opset 24, a KV-cache update) and AffineGrid (opset 20).

Each follows onnx's reference implementation (``onnx/reference/ops/op_<name>.py``). Values
read at positions held in a run-time tensor (RotaryEmbedding's ``position_ids``,
TensorScatter's ``write_indices``) are found by comparing, as te has no indirect loads (see
:mod:`tilecraft.onnx.convert_indexing`); positions known at import time are indexed directly.

>>> # RotaryEmbedding(x[1, 2, 3, 8], cos[50, 4], sin[50, 4], position_ids[1, 3] at run time):
>>> # cos_rows[b, s, j] = sum over v < 50 of select(position_ids[b, s] == v, cos[v, j], 0)
>>> # y[b, n, s, d] = x[b, n, s, d] * cos_rows[b, s, d] - x[b, n, s, d + 4] * sin_rows[b, s, d]
>>> #                 (d < 4; the second half adds, with d - 4)
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

import numpy as np

from tilecraft import ops, te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names, map_unary
from tilecraft.te.expr import ExprLike
from tilecraft.te.tensor import Tensor

Index = tuple[te.Expr, ...]


def _wrapped(index: te.Expr, extent: int) -> te.Expr:
    """A negative index counted from the end (numpy's meaning of ``cache[-1]``)."""
    return te.select(index < 0, index + extent, index)


def _clamped(index: ExprLike, extent: int) -> te.Expr:
    """``index`` held inside ``[0, extent)``: the operand of a select's branch that is not
    taken must still be a load in bounds."""
    return te.maximum(te.minimum(index, extent - 1), 0)


# --- RotaryEmbedding -------------------------------------------------------------------------


@converter("RotaryEmbedding")
def convert_rotary_embedding(ctx: NodeContext) -> list[Value]:
    """The rotation of pairs of ``x``'s features by the angles whose cosines and sines the
    caches hold: halves (``x[d]`` with ``x[d + R/2]``) or, ``interleaved``, neighbours
    (``x[2j]`` with ``x[2j + 1]``), over the first ``rotary_embedding_dim`` (R) features of
    each head; the other features pass through."""
    x = ctx.tensor(0)
    if not x.dtype.is_float or x.ndim not in (3, 4):
        raise ctx.unsupported(f"input {x.shape} ({x.dtype.value}): a float tensor [batch, seq, "
                              "hidden] or [batch, heads, seq, head_size]")
    batch = x.shape[0]
    if x.ndim == 4:
        seq, head_size = x.shape[2], x.shape[3]
    else:
        seq, hidden = x.shape[1], x.shape[2]
        heads = int(ctx.attr("num_heads", 0))
        if heads <= 0 or hidden % heads:
            raise ctx.unsupported(f"a 3-d input of hidden size {hidden} with num_heads {heads}: "
                                  "num_heads must be given and divide the hidden size")
        head_size = hidden // heads
    rotary = int(ctx.attr("rotary_embedding_dim", 0)) or head_size
    if rotary % 2 or rotary > head_size:
        raise ctx.unsupported(f"rotary_embedding_dim {rotary} for head size {head_size}: an even "
                              "number no larger than the head size")
    interleaved = bool(ctx.attr("interleaved", 0))
    half = rotary // 2
    out = ctx.out()
    cos, sin = (_cache_rows(ctx, k, batch, seq, half, out) for k in (1, 2))

    def body(*idx: te.Expr) -> te.Expr:
        if x.ndim == 4:
            b, s, d = idx[0], idx[2], idx[3]
        else:
            b, s = idx[0], idx[1]
            d = idx[2] % head_size if head_size < x.shape[2] else idx[2]

        def at(offset: int) -> Index:
            """The element of the same head ``offset`` features on (clamped in bounds)."""
            last = idx[-1]
            return (*idx[:-1], _clamped(last + offset, x.shape[-1]))

        if interleaved:
            j = _clamped(d // 2, half)
            first = te.eq(d % 2, 0)
            partner_first, partner_second = at(1), at(-1)
        else:
            first = d < half
            j = te.select(first, _clamped(d, half), _clamped(d - half, half))
            partner_first, partner_second = at(half), at(-half)
        cosine, sine = cos[b, s, j], sin[b, s, j]
        real = x[idx] * cosine - x[partner_first] * sine
        imag = sine * x[partner_second] + cosine * x[idx]
        rotated = te.select(first, real, imag)
        return rotated if rotary == head_size else te.select(d < rotary, rotated, x[idx])

    return [named_compute(x.shape, axis_names(x.ndim), body, out)]


def _cache_rows(ctx: NodeContext, index: int, batch: int, seq: int, half: int,
                out: str) -> Tensor:
    """The cos (``index`` 1) or sin (2) cache rows of each token, as ``[batch, seq, R/2]``:
    the cache itself without position_ids, else its rows at the position ids (gathered at
    import time, indexed directly, or found by comparing)."""
    what = "cos_cache" if index == 1 else "sin_cache"
    if not ctx.has(3):
        cache = ctx.tensor(index)
        if cache.ndim != 3 or cache.shape[0] not in (1, batch) or \
                cache.shape[1] not in (1, seq) or cache.shape[2] != half:
            raise ctx.unsupported(f"{what} {cache.shape} without position_ids: it must be "
                                  f"[batch, seq, rotary_embedding_dim / 2] = "
                                  f"[{batch}, {seq}, {half}]")
        if cache.shape == (batch, seq, half):
            return cache
        return named_compute((batch, seq, half), ["b", "s", "j"], lambda b, s, j: cache[
            0 if cache.shape[0] == 1 else b, 0 if cache.shape[1] == 1 else s, j],
            ctx.state.unique(f"{out}_{what}"))
    shape = ctx.value(index).shape
    if len(shape) != 2 or shape[1] != half:
        raise ctx.unsupported(f"{what} {tuple(shape)} with position_ids: it must be "
                              f"[max_position, rotary_embedding_dim / 2 = {half}]")
    positions = shape[0]
    ids_shape = tuple(ctx.value(3).shape)
    if len(ids_shape) != 2 or ids_shape[0] not in (1, batch) or ids_shape[1] not in (1, seq):
        raise ctx.unsupported(f"position_ids {ids_shape}: it must be [batch, seq] = "
                              f"[{batch}, {seq}]")
    name = ctx.state.unique(f"{out}_{what}_rows")

    def id_index(b: te.Expr, s: te.Expr) -> Index:
        return (0 if ids_shape[0] == 1 else b, 0 if ids_shape[1] == 1 else s)

    if ctx.is_const(3):
        ids = ctx.const(3, "position_ids").astype(np.int64)
        if ids.size and (ids.min() < -positions or ids.max() >= positions):
            raise ctx.unsupported(f"position_ids from {ids.min()} to {ids.max()} for a "
                                  f"{what} of {positions} positions: they must lie in "
                                  f"[0, {positions})")
        ids = np.where(ids < 0, ids + positions, ids)
        if ctx.is_const(index):
            rows = ctx.const(index, what)[ids]
            rows = np.broadcast_to(rows, (batch, seq, half))
            return te.constant(np.ascontiguousarray(rows), name=name)
        cache = ctx.tensor(index)
        position = _affine_positions(ids)
        if position is not None:
            return named_compute((batch, seq, half), ["b", "s", "j"], lambda b, s, j: cache[
                position(*id_index(b, s)), j], name)
        ids_tensor = te.constant(ids.astype(np.int32), name=ctx.state.unique(f"{out}_position_ids"))
        low, high = int(ids.min()), int(ids.max())
        v = te.reduce_axis(high - low + 1, "v")
        return named_compute((batch, seq, half), ["b", "s", "j"], lambda b, s, j: te.sum(
            te.select(te.eq(ids_tensor[id_index(b, s)], v + low), cache[v + low, j], 0.0),
            axis=[v]), name)
    cache, ids_tensor = ctx.tensor(index), ctx.tensor(3)
    if ids_tensor.dtype.is_float:
        raise ctx.unsupported(f"position_ids of {ids_tensor.dtype.value}: integers")
    v = te.reduce_axis(positions, "v")
    return named_compute((batch, seq, half), ["b", "s", "j"], lambda b, s, j: te.sum(
        te.select(te.eq(_wrapped(ids_tensor[id_index(b, s)], positions), v), cache[v, j], 0.0),
        axis=[v]), name)


def _affine_positions(ids: np.ndarray) -> Callable[[ExprLike, ExprLike], te.Expr] | None:
    """``(b, s) -> ids[b, s]`` as arithmetic when the known ids are ``start + b*db + s*ds``
    (the usual ``arange`` of a prompt or decode step); None when they are not."""
    start = int(ids[0, 0])
    step_b = int(ids[1, 0] - ids[0, 0]) if ids.shape[0] > 1 else 0
    step_s = int(ids[0, 1] - ids[0, 0]) if ids.shape[1] > 1 else 0
    grid_b, grid_s = np.indices(ids.shape)
    if not np.array_equal(ids, start + grid_b * step_b + grid_s * step_s):
        return None

    def position(b: ExprLike, s: ExprLike) -> te.Expr:
        return te.as_expr(start) + te.as_expr(b) * step_b + te.as_expr(s) * step_s

    return position


# --- SwiGLU ----------------------------------------------------------------------------------


@converter("SwiGLU")
def convert_swiglu(ctx: NodeContext) -> list[Value]:
    """``a * sigmoid(alpha * a) * b`` of two tensors of one shape (no broadcasting)."""
    a, b = ctx.tensor(0), ctx.tensor(1)
    if a.shape != b.shape or a.dtype != b.dtype or not a.dtype.is_float:
        raise ctx.unsupported(f"inputs {a.shape} ({a.dtype.value}) and {b.shape} "
                              f"({b.dtype.value}): float tensors of one shape and dtype")
    alpha = float(ctx.attr("alpha", 1.0))
    out = ctx.out()
    gate = map_unary(a, lambda v: v * te.sigmoid(alpha * v), "swish",
                     ctx.state.unique(f"{out}_gate"))
    return [ops.mul(gate, b, name=out)]


# --- TensorScatter ---------------------------------------------------------------------------


@converter("TensorScatter")
def convert_tensor_scatter(ctx: NodeContext) -> list[Value]:
    """``past_cache`` with ``update`` written along ``axis`` from each batch's write index
    (0 without ``write_indices``); ``mode="circular"`` wraps the positions around the
    cache's length.

    >>> # linear, write_indices w at run time, update of length L on the axis:
    >>> # out[b, .., p, ..] = update[b, .., p - w[b], ..] where 0 <= p - w[b] < L,
    >>> #                     else past_cache[b, .., p, ..]
    """
    past, update = ctx.tensor(0), ctx.tensor(1)
    mode = ctx.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise ctx.unsupported(f"mode {mode!r} (linear and circular)")
    rank = past.ndim
    axis = int(ctx.attr("axis", -2))
    if not -rank <= axis < rank or axis % rank == 0:
        raise ctx.unsupported(f"axis {axis} of a rank-{rank} cache: an axis after the batch "
                              "axis 0")
    axis %= rank
    same = all(p == u for d, (p, u) in enumerate(zip(past.shape, update.shape)) if d != axis)
    if update.ndim != rank or not same or update.shape[axis] > past.shape[axis] \
            or update.dtype != past.dtype:
        raise ctx.unsupported(f"update {update.shape} for cache {past.shape} on axis {axis}: "
                              "the cache's shape and dtype, no longer on the axis")
    capacity, length = past.shape[axis], update.shape[axis]
    circular = mode == "circular"

    def shift_of(p: te.Expr, start: ExprLike) -> te.Expr:
        """The update position written at cache position ``p``."""
        return (p - start) % capacity if circular else p - start

    def written(shift: te.Expr) -> te.Expr:
        return shift < length if circular else (shift >= 0) & (shift < length)

    names, out = axis_names(rank), ctx.out()
    start = _known_starts(ctx, past.shape[0])
    if start is not None and not circular and ctx.has(2):
        # ONNX requires 0 <= write_indices[b] and write_indices[b] + length <= capacity in
        # linear mode (onnx's reference raises or wraps outside it); a run-time index outside
        # it writes nothing of the update's part past the cache
        outside = [int(v) for v in ctx.const(2, "write_indices").reshape(-1)
                   if not 0 <= int(v) <= capacity - length]
        if outside:
            raise ctx.unsupported(f"write_indices {outside} with an update of {length} into a "
                                  f"cache of {capacity} on axis {axis} in linear mode (each "
                                  f"must lie in [0, {capacity - length}]; use circular mode "
                                  "to wrap)")
    if start is not None:
        def direct(*idx: te.Expr) -> te.Expr:
            shift = shift_of(idx[axis], start(idx[0]))
            source = (*idx[:axis], _clamped(shift, length), *idx[axis + 1:])
            return te.select(written(shift), update[source], past[idx])

        return [named_compute(past.shape, names, direct, out)]
    starts = ctx.tensor(2)
    if starts.dtype.is_float or starts.shape != (past.shape[0],):
        raise ctx.unsupported(f"write_indices {starts.shape} ({starts.dtype.value}): integers "
                              f"of shape [batch] = [{past.shape[0]}]")
    u = te.reduce_axis(length, "u")
    zero = 0.0 if past.dtype.is_float else 0
    chosen = named_compute(past.shape, names, lambda *idx: te.sum(te.select(
        te.eq(shift_of(idx[axis], starts[idx[0]]), u), update[(*idx[:axis], u, *idx[axis + 1:])],
        zero), axis=[u]), ctx.state.unique(f"{out}_update"))
    return [named_compute(past.shape, names, lambda *idx: te.select(
        written(shift_of(idx[axis], starts[idx[0]])), chosen[idx], past[idx]), out)]


def _known_starts(ctx: NodeContext, batch: int) -> Callable[[te.Expr], ExprLike] | None:
    """``b -> write_indices[b]`` as arithmetic when they are absent (all 0) or known at import
    time (a chain of selects over the batch when they differ); None at run time."""
    if not ctx.has(2):
        return lambda b: 0
    if not ctx.is_const(2):
        return None
    starts = [int(v) for v in ctx.const(2, "write_indices").reshape(-1)]
    if len(starts) != batch:
        raise ctx.unsupported(f"write_indices of {len(starts)} values for a batch of {batch}")
    if len(set(starts)) == 1:
        return lambda b: starts[0]

    def start(b: te.Expr) -> te.Expr:
        return reduce(lambda rest, k: te.select(te.eq(b, k), starts[k], rest),
                      range(len(starts) - 1), te.as_expr(starts[-1]))

    return start


# --- AffineGrid ------------------------------------------------------------------------------


@converter("AffineGrid")
def convert_affine_grid(ctx: NodeContext) -> list[Value]:
    """The sampling grid of affine maps ``theta`` ([N, 2, 3] or [N, 3, 4]) over an output of
    ``size`` ([N, C, H, W] or [N, C, D, H, W], known at import time): at each output
    position the map applied to its normalized coordinates ``(x, y[, z], 1)`` in [-1, 1].

    >>> # 2-d: grid[n, h, w, k] = theta[n, k, 0] * x(w) + theta[n, k, 1] * y(h) + theta[n, k, 2]
    >>> # x(w) = -1 + (2w + 1) / W, or with align_corners -1 + 2w / (W - 1)
    """
    theta = ctx.tensor(0)
    size = [int(v) for v in ctx.const(1, "size").reshape(-1)]
    align = bool(ctx.attr("align_corners", 0))
    spatial = size[2:]
    dims = len(spatial)
    if dims not in (2, 3) or any(n < 1 for n in size):
        raise ctx.unsupported(f"size {size}: [N, C, H, W] or [N, C, D, H, W] of positive sizes")
    if theta.ndim != 3 or theta.shape[1:] != (dims, dims + 1) or not theta.dtype.is_float:
        raise ctx.unsupported(f"theta {theta.shape} ({theta.dtype.value}) for size {size}: "
                              f"a float tensor [N, {dims}, {dims + 1}]")

    def coordinate(index: te.Expr, extent: int) -> te.Expr:
        position = te.cast(theta.dtype, index)
        if align and extent == 1:
            return te.const(-1.0, theta.dtype)  # onnx's reference: the one corner, -1
        if align:
            return position * (2.0 / (extent - 1)) - 1.0
        return position * (2.0 / extent) + (1.0 / extent - 1.0)

    def body(*idx: te.Expr) -> te.Expr:
        n, k, where = idx[0], idx[-1], idx[1:-1]
        # the homogeneous coordinates run x, y[, z]: the last spatial axis first
        total = theta[n, k, dims]
        for column, (index, extent) in enumerate(zip(reversed(where), reversed(spatial))):
            total = total + theta[n, k, column] * coordinate(index, extent)
        return total

    shape = (theta.shape[0], *spatial, dims)  # N as theta's, like onnx's reference
    return [named_compute(shape, axis_names(len(shape)), body, ctx.out())]
