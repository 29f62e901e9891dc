"""ONNX operators that select or place elements by position: TopK (k known at import time) and
Col2Im (image and block shapes known at import time).

te has no sort and no indirect loads, so both are built from comparisons.

**TopK** ranks every element on its line along ``axis``: ``rank[i]`` counts the positions ``j``
that come before ``i`` in the wanted order (a larger value first for ``largest``, a smaller one
otherwise; equal values by the lower position first, as ONNX's definition and onnx's reference
order them), one sum of ``select``\\ s per element. Output slot ``s`` then takes the element whose
rank is ``s`` (another comparison-sum over the axis) for the values, and its position for the
indices. That is ``n * n`` comparisons on a line of ``n``: meant for the short axes of
classifier heads and beam search, not for sorting large tensors. The result is exact (the
values are copied, never combined). NaN is ordered as onnx's reference (numpy) orders it: above
every number, so NaNs come first with ``largest`` and last otherwise, equal NaNs by position.
``sorted=0`` lets any order be returned; the sorted order is returned anyway.

>>> # TopK(x[2, 4], k=2, axis=1) becomes
>>> # rank[i, p] = sum over j < 4 of select(x[i, j] before x[i, p], 1, 0)
>>> # values[i, s] = sum over j < 4 of select(rank[i, j] == s, x[i, j], 0)
>>> # indices[i, s] = sum over j < 4 of select(rank[i, j] == s, j, 0)

**Col2Im** is the inverse of im2col: the input ``[N, C * prod(block), L]`` holds one column of
``prod(block)`` entries per block position (``L`` of them), and each image pixel sums the column
entries that cover it. With static shapes the covering entries are index arithmetic: per block
offset ``t`` on a spatial axis, pixel ``y`` is covered by block position
``(y + pad_begin - t * dilation) / stride`` when that division is exact and in range. The input
is first laid out as ``cols[c, t..., n, q...]`` (a copy), then each pixel sums over the block
offsets: the form :mod:`tilecraft.passes.col2im_gather` recognises, so a target can run it
phase by phase. Any number of spatial axes.

>>> # Col2Im(x[1, 4, 4], image_shape=[3, 3], block_shape=[2, 2]) becomes
>>> # cols[c, t0, t1, n, q0, q1] = x[n, c*4 + t0*2 + t1, q0*2 + q1]
>>> # y[n, c, h, w] = sum over t0, t1 < 2 of
>>> #     select(0 <= h - t0 < 2 and 0 <= w - t1 < 2, cols[c, t0, t1, n, h - t0, w - t1], 0)
"""

from __future__ import annotations

import math

from tilecraft import te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value, ints
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor


def _ahead(a: te.Expr, b: te.Expr, floating: bool) -> te.Expr:
    """``a`` sorts above ``b`` in numpy's ascending order (NaN above every number)."""
    if not floating:
        return a > b
    return (a > b) | (te.ne(a, a) & te.eq(b, b))


@converter("TopK")
def convert_top_k(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    k_value = ints(ctx.const(1, "k (the output's extent along the axis)"))
    axis_attr = int(ctx.attr("axis", -1))
    if not -x.ndim <= axis_attr < x.ndim:
        raise ctx.unsupported(f"axis {axis_attr} for a rank-{x.ndim} input")
    axis = axis_attr % x.ndim
    n = x.shape[axis]
    if len(k_value) != 1 or not 1 <= k_value[0] <= n:
        raise ctx.unsupported(f"k = {k_value} for an axis of extent {n} (one k, 1 <= k <= {n}; "
                              "tilecraft tensors cannot be empty)")
    k = k_value[0]
    largest = bool(int(ctx.attr("largest", 1)))
    floating = x.dtype.is_float
    wants_indices = len(ctx.node.output) > 1 and bool(ctx.node.output[1])
    values_name = ctx.out(0)
    indices_name = ctx.out(1) if wants_indices else None
    names = axis_names(x.ndim)
    j = te.reduce_axis(n, "j")

    def at(idx: tuple[te.Expr, ...], position: te.Expr) -> tuple[te.Expr, ...]:
        return tuple(position if d == axis else i for d, i in enumerate(idx))

    def before(idx: tuple[te.Expr, ...]) -> te.Expr:
        """Position ``j`` comes before position ``idx[axis]`` on the line of ``idx``."""
        mine, other, p = x[idx], x[at(idx, j)], idx[axis]
        # j's value strictly ahead of p's in the wanted order, and the other way round
        j_ahead = _ahead(other, mine, floating) if largest else _ahead(mine, other, floating)
        p_ahead = _ahead(mine, other, floating) if largest else _ahead(other, mine, floating)
        # an earlier j comes first unless strictly behind (ties: the lower position first)
        return ((j < p) & ~p_ahead) | ((j > p) & j_ahead)

    rank = named_compute(x.shape, names, lambda *idx: te.sum(te.select(before(idx), 1, 0),
                                                             axis=[j]), f"{values_name}_rank")
    shape = tuple(k if d == axis else e for d, e in enumerate(x.shape))
    zero = 0.0 if floating else 0

    def pick(positions: bool, name: str) -> Tensor:
        """Slot ``s`` of each line: the element ranked ``s``, or (``positions``) where it is."""
        j_pick = te.reduce_axis(n, "j")

        def body(*idx: te.Expr) -> te.Expr:
            hit = te.eq(rank[at(idx, j_pick)], idx[axis])
            if positions:
                return te.sum(te.select(hit, j_pick, 0), axis=[j_pick])
            return te.sum(te.select(hit, x[at(idx, j_pick)], zero), axis=[j_pick])

        return named_compute(shape, names, body, name)

    outputs: list[Value] = [pick(False, values_name)]
    if indices_name is not None:
        outputs.append(pick(True, indices_name))
    return outputs


@converter("Col2Im")
def convert_col2im(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    image = ints(ctx.const(1, "image_shape"))
    block = ints(ctx.const(2, "block_shape"))
    nd = len(image)
    if x.ndim != 3 or len(block) != nd or nd < 1:
        raise ctx.unsupported(f"input {x.shape} with image_shape {image} and block_shape "
                              f"{block}: a [N, C*prod(block), L] input and one image and one "
                              "block extent per spatial axis")
    dilations = [int(v) for v in ctx.attr("dilations", [1] * nd)]
    strides = [int(v) for v in ctx.attr("strides", [1] * nd)]
    pads = [int(v) for v in ctx.attr("pads", [0] * 2 * nd)]
    if len(dilations) != nd or len(strides) != nd or len(pads) != 2 * nd \
            or min(dilations + strides) < 1 or min(pads) < 0 or min(image + block) < 1:
        raise ctx.unsupported(f"dilations {dilations}, strides {strides}, pads {pads} for "
                              f"{nd} spatial axes (positive dilations and strides, "
                              "non-negative pads, one per axis and two pads per axis)")
    blocks = [(image[d] + pads[d] + pads[nd + d] - dilations[d] * (block[d] - 1) - 1)
              // strides[d] + 1 for d in range(nd)]
    batch, planes, length = x.shape
    kernel = math.prod(block)
    if min(blocks) < 1 or planes % kernel or length != math.prod(blocks):
        raise ctx.unsupported(f"input {x.shape} for image_shape {image}, block_shape {block}, "
                              f"dilations {dilations}, strides {strides}, pads {pads}: it "
                              f"needs C*{kernel} rows and {math.prod(blocks)} columns "
                              f"(block positions {blocks})")
    channels = planes // kernel
    name = ctx.out()

    def flat(indices: list[te.Expr], extents: list[int]) -> te.Expr:
        total = indices[0]
        for index, extent in zip(indices[1:], extents[1:]):
            total = total * extent + index
        return total

    def layout(c: te.Expr, *rest: te.Expr) -> te.Expr:
        taps, n, positions = list(rest[:nd]), rest[nd], list(rest[nd + 1:])
        return x[n, c * kernel + flat(taps, block), flat(positions, blocks)]

    cols = named_compute((channels, *block, batch, *blocks),
                         ["c", *(f"t{d}" for d in range(nd)), "n",
                          *(f"q{d}" for d in range(nd))], layout, f"{name}_cols")
    taps = [te.reduce_axis(block[d], f"t{d}") for d in range(nd)]

    def gather(n: te.Expr, c: te.Expr, *pixel: te.Expr) -> te.Expr:
        covered, positions = None, []
        for d in range(nd):
            shifted = pixel[d] + pads[d] - taps[d] * dilations[d]
            position = shifted // strides[d] if strides[d] > 1 else shifted
            fits = (position >= 0) & (position < blocks[d])  # shifted >= 0 exactly then
            if strides[d] > 1:
                fits = fits & te.eq(shifted % strides[d], 0)
            covered = fits if covered is None else covered & fits
            positions.append(position)
        return te.sum(te.select(covered, cols[(c, *taps, n, *positions)], 0.0 if
                                x.dtype.is_float else 0), axis=taps)

    return [named_compute((batch, channels, *image),
                          ["n", "c", *(f"y{d}" for d in range(nd))], gather, name)]
