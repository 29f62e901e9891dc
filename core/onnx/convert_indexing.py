"""ONNX operators that index by values: GatherElements, GatherND, ScatterElements,
ScatterND and ReverseSequence, with run-time indices (negative ones wrapped) or lengths.

te has no indirect loads, so each output element finds its source by comparing: a gather sums
``select(index == position, data[position], 0)`` over the positions the index can take; a
scatter looks, for each output element, for the update positions whose index names it (with
``reduction="none"`` the last such update wins, as ONNX's definition applies them in order).
The work is the output's size times the positions compared: meant for the index tensors
models carry (boxes, classes, cache slots), not for large gathers.

>>> # GatherElements(data[3, 4], indices[3, 2], axis=1) becomes
>>> # out[i, j] = sum over v < 4 of select(indices[i, j] == v, data[i, v], 0)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import numpy as np

from tilecraft import te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

_NEUTRAL = {"max": -math.inf, "min": math.inf}


def _wrapped(index: te.Expr, extent: int) -> te.Expr:
    return te.select(index < 0, index + extent, index)


def _reduction(ctx: NodeContext) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.unsupported(f"reduction {reduction!r} (none, add, mul, max and min)")
    return reduction


@converter("GatherElements")
def convert_gather_elements(ctx: NodeContext) -> list[Value]:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    axis = int(ctx.attr("axis", 0)) % data.ndim
    if indices.ndim != data.ndim or indices.dtype.is_float:
        raise ctx.unsupported(f"indices {indices.shape} ({indices.dtype.value}) for data "
                              f"{data.shape}: integers of the data's rank")
    extent = data.shape[axis]
    v = te.reduce_axis(extent, "v")
    zero = 0.0 if data.dtype.is_float else 0

    def body(*idx: te.Expr) -> te.Expr:
        source = tuple(v if d == axis else i for d, i in enumerate(idx))
        return te.sum(te.select(te.eq(_wrapped(indices[idx], extent), v), data[source], zero),
                      axis=[v])

    return [named_compute(indices.shape, axis_names(indices.ndim), body, ctx.out())]


@converter("GatherND")
def convert_gather_nd(ctx: NodeContext) -> list[Value]:
    data, indices = ctx.tensor(0), ctx.tensor(1)
    batch = int(ctx.attr("batch_dims", 0))
    depth = indices.shape[-1]
    if indices.dtype.is_float or batch + depth > data.ndim:
        raise ctx.unsupported(f"indices {indices.shape} for data {data.shape} with "
                              f"batch_dims {batch}")
    shape = (*indices.shape[:-1], *data.shape[batch + depth:])
    spots = [te.reduce_axis(data.shape[batch + k], f"v{k}") for k in range(depth)]
    zero = 0.0 if data.dtype.is_float else 0

    def body(*idx: te.Expr) -> te.Expr:
        prefix, rest = idx[:indices.ndim - 1], idx[indices.ndim - 1:]
        hit = None
        for k, spot in enumerate(spots):
            index = indices[(*prefix, k)]
            same = te.eq(_wrapped(index, data.shape[batch + k]), spot)
            hit = same if hit is None else hit & same
        value = data[(*prefix[:batch], *spots, *rest)]
        return te.sum(te.select(hit, value, zero), axis=spots)

    return [named_compute(shape or (1,), axis_names(len(shape) or 1),
                          body if shape else (lambda _: body()), ctx.out())]


@converter("ScatterElements")
def convert_scatter_elements(ctx: NodeContext) -> list[Value]:
    data, indices, updates = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    axis = int(ctx.attr("axis", 0)) % data.ndim
    if indices.shape != updates.shape or indices.ndim != data.ndim or indices.dtype.is_float:
        raise ctx.unsupported(f"indices {indices.shape} and updates {updates.shape} for data "
                              f"{data.shape}")
    extent = data.shape[axis]

    def at(idx: tuple[te.Expr, ...], positions: list[te.Expr]) -> tuple[te.Expr, ...]:
        """The update position on the output element's line (other coordinates clamped to
        the updates' extents: :func:`hit` masks what lies past them)."""
        return tuple(te.minimum(positions[0] if d == axis else i, n - 1)
                     for d, (i, n) in enumerate(zip(idx, indices.shape)))

    def hit(idx: tuple[te.Expr, ...], positions: list[te.Expr]) -> te.Expr:
        found = te.eq(_wrapped(indices[at(idx, positions)], extent), idx[axis])
        for d, (i, n) in enumerate(zip(idx, indices.shape)):
            if d != axis and n < data.shape[d]:
                found = found & (i < n)
        return found

    return [_scatter(ctx, data, updates, [indices.shape[axis]], hit, at)]


@converter("ScatterND")
def convert_scatter_nd(ctx: NodeContext) -> list[Value]:
    data, indices, updates = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    depth = indices.shape[-1]
    if indices.dtype.is_float or depth > data.ndim or \
            tuple(updates.shape) != (*indices.shape[:-1], *data.shape[depth:]):
        raise ctx.unsupported(f"indices {indices.shape} and updates {updates.shape} for data "
                              f"{data.shape}")

    def hit(idx: tuple[te.Expr, ...], positions: list[te.Expr]) -> te.Expr:
        found = None
        for k in range(depth):
            same = te.eq(_wrapped(indices[(*positions, k)], data.shape[k]), idx[k])
            found = same if found is None else found & same
        return found

    def at(idx: tuple[te.Expr, ...], positions: list[te.Expr]) -> tuple[te.Expr, ...]:
        return (*positions, *idx[depth:])

    return [_scatter(ctx, data, updates, list(indices.shape[:-1]), hit, at)]


Locate = Callable[[tuple[te.Expr, ...], list[te.Expr]], te.Expr]


def _scatter(ctx: NodeContext, data: Tensor, updates: Tensor, extents: list[int],
             hit: Locate, at: Callable[..., tuple[te.Expr, ...]]) -> Tensor:
    """``data`` with the updates applied: at each output element, over the update positions
    (``extents``) whose index names it (``hit``), the updates (read at ``at``) added or
    multiplied, or their maximum / minimum taken, or (``none``) the last one, found as the
    largest matching flat position."""
    reduction = _reduction(ctx)
    name = ctx.out()
    floating = data.dtype.is_float
    zero = 0.0 if floating else 0

    def fresh(tag: str) -> list:
        return [te.reduce_axis(n, f"{tag}{k}") for k, n in enumerate(extents)]

    shape, names = data.shape, axis_names(data.ndim)
    if reduction != "none":
        if reduction in ("max", "min") and not floating:
            raise ctx.unsupported(f"a {reduction} scatter of {data.dtype.value} (float only)")
        spots = fresh("u")
        neutral = zero if reduction == "add" else (1.0 if floating else 1) \
            if reduction == "mul" else _NEUTRAL[reduction]
        pick = {"add": te.sum, "mul": te.prod, "max": te.max, "min": te.min}[reduction]
        gathered = named_compute(shape, names, lambda *idx: pick(te.select(
            hit(idx, spots), updates[at(idx, spots)], neutral), axis=spots), f"{name}_updates")
        merge = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": te.maximum,
                 "min": te.minimum}[reduction]
        return named_compute(shape, names, lambda *idx: merge(data[idx], gathered[idx]), name)

    def flat(positions: list[te.Expr]) -> te.Expr:
        total = positions[0]
        for position, extent in zip(positions[1:], extents[1:]):
            total = total * extent + position
        return total

    spots = fresh("u")
    last = named_compute(shape, names, lambda *idx: te.max(
        te.select(hit(idx, spots), flat(spots), -1), axis=spots), f"{name}_last")
    picks = fresh("p")
    chosen = named_compute(shape, names, lambda *idx: te.sum(te.select(
        te.eq(last[idx], flat(picks)), updates[at(idx, picks)], zero), axis=picks),
        f"{name}_chosen")
    return named_compute(shape, names, lambda *idx: te.select(last[idx] < 0, data[idx],
                                                              chosen[idx]), name)


@converter("ReverseSequence")
def convert_reverse_sequence(ctx: NodeContext) -> list[Value]:
    """Each batch entry's first ``lens[b]`` time steps reversed, the rest kept:
    ``out[t, b] = x[lens[b] - 1 - t, b]`` where ``t < lens[b]``, else ``x[t, b]`` (time and
    batch axes 0 and 1 in either order, any trailing dimensions). Lengths above the time
    extent count as the whole sequence, as in onnx's reference; negative run-time lengths as 0
    (negative constant ones are refused).

    Lengths known at import time become index arithmetic (one ``select`` on the batch index
    per entry whose length differs from the most common one); run-time lengths a
    comparison-sum over the time positions.

    >>> # ReverseSequence(x[T, B], lens) with run-time lens becomes
    >>> # out[t, b] = sum over p < T of select(p == select(t < lens[b], lens[b] - 1 - t, t),
    >>> #                                      x[p, b], 0)
    """
    x = ctx.tensor(0)
    time_axis, batch_axis = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    if x.ndim < 2 or {time_axis, batch_axis} != {0, 1}:
        raise ctx.unsupported(f"time_axis {time_axis} and batch_axis {batch_axis} for an input "
                              f"of shape {x.shape} (the axes are 0 and 1, in either order)")
    steps, batch = x.shape[time_axis], x.shape[batch_axis]
    names = axis_names(x.ndim)

    def load(idx: tuple[te.Expr, ...], time: te.Expr) -> te.Expr:
        return x[tuple(time if d == time_axis else i for d, i in enumerate(idx))]

    if ctx.is_const(1):
        lengths = np.asarray(ctx.const(1, "sequence_lens")).reshape(-1)
        if lengths.shape != (batch,) or (lengths < 0).any():
            raise ctx.unsupported(f"sequence_lens {lengths.tolist()} for batch {batch} "
                                  "(one length >= 0 per batch entry)")
        known = [min(int(n), steps) for n in lengths]
        return [named_compute(x.shape, names, lambda *idx: load(idx, _reversed_time(
            idx[time_axis], idx[batch_axis], known, steps)), ctx.out())]

    lens = ctx.tensor(1)
    if lens.shape != (batch,) or lens.dtype.is_float:
        raise ctx.unsupported(f"sequence_lens of shape {lens.shape} ({lens.dtype.value}) for "
                              f"batch {batch} (integers, one per batch entry)")
    p = te.reduce_axis(steps, "p")
    zero = 0.0 if x.dtype.is_float else 0

    def body(*idx: te.Expr) -> te.Expr:
        t = idx[time_axis]
        length = te.minimum(te.maximum(lens[(idx[batch_axis],)], 0), steps)
        source = te.select(t < length, length - 1 - t, t)
        return te.sum(te.select(te.eq(source, p), load(idx, p), zero), axis=[p])

    return [named_compute(x.shape, names, body, ctx.out())]


def _reversed_time(t: te.Expr, b: te.Expr, lengths: list[int], steps: int) -> te.Expr:
    """The source time step of output step ``t`` of batch entry ``b``, for lengths known at
    import time (at most ``steps``): the most common length is the default, the others each
    one ``select`` on ``b`` (``b == 2 ? 4 - t : ...``); a length of 0 or 1 leaves its entry
    as it is, and the whole sequence needs no ``select`` on ``t``."""

    def source(length: int) -> te.Expr:
        if length <= 1:  # nothing to reverse
            return t
        if length == steps:
            return (length - 1) - t
        return te.select(t < length, (length - 1) - t, t)

    common = Counter(lengths).most_common(1)[0][0]
    index = source(common)
    for entry, length in enumerate(lengths):
        if length != common and max(length, common) > 1:
            index = te.select(te.eq(b, entry), source(length), index)
    return index
