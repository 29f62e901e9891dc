"""ONNX Resize (and Upsample's modern form): nearest, linear and cubic, antialiasing, every
coordinate transformation but ``tf_crop_and_resize``, as one te compute over a few taps.

Resize is separable and linear per axis: along an axis of ``n`` values resized to ``m``, output
``h`` is ``sum_i R[h, i] * x[i]`` for an ``m x n`` matrix ``R`` that only the attributes and
the two sizes decide. ``R`` is computed here at import time by onnx's reference evaluator
itself (on the identity matrix), so every mode and rounding rule means exactly what ONNX
says. Each row's nonzero entries are a window of consecutive inputs starting at ``base[h]``,
at most ``T`` wide; the kernel reads ``x[clamp(base[h] + t)]`` for ``t < T`` with the weights
``W[h, t]`` (a small constant table) — ``base[h]`` written as ``(a * h + b) // c``, a closed
form the te index can hold (te has no indirect loads), found by :func:`affine_floor`.

>>> # Resize(x[1, 3, 5, 7], scales=[1, 1, 2, 2], mode="linear") becomes
>>> # y[n, c, h, w] = sum over s, t < 2 of Wh[h, s] * Ww[w, t] * x[n, c, ih(h) + s, iw(w) + t]
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from tilecraft import te
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value
from tilecraft.ops.building import compute_float, named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

#: at most this many taps in all are summed as one expression (more: a reduction over them)
MAX_SPELLED_TAPS = 16

#: attributes of Resize that shape the per-axis matrix (passed on to the evaluator)
_AXIS_ATTRIBUTES = ("mode", "coordinate_transformation_mode", "cubic_coeff_a",
                    "exclude_outside", "nearest_mode", "antialias")


def affine_floor(low: np.ndarray, high: np.ndarray | None = None) -> tuple[int, int, int] | None:
    """``(a, b, c)`` with ``low[h] <= (a * h + b) // c <= high[h]`` for every ``h`` (``c > 0``;
    ``high`` defaults to ``low``: an exact fit), the smallest ``c`` that works, or ``None`` when
    none up to ``4 * len(low)`` does.

    >>> affine_floor(np.array([0, 0, 1, 1, 2, 2]))
    (1, 0, 2)
    >>> affine_floor(np.array([0, 2, 3, 5, 7, 8]))  # 5/3 per step
    (5, 1, 3)
    >>> affine_floor(np.array([0, 3, 1])) is None
    True
    >>> affine_floor(np.array([-9, 0, 1, 2]), np.array([0, 0, 1, 9]))  # slack at the ends
    (1, -1, 1)
    """
    high = low if high is None else high
    h = np.arange(len(low), dtype=np.int64)
    low, high = low.astype(np.int64), high.astype(np.int64)
    # the slope from the rows without slack (a Resize's interior: whole windows), if any two
    exact = np.nonzero(low == high)[0]
    rows, anchors = (exact, low[exact]) if len(exact) >= 2 else (h, (low + high) // 2)
    for c in range(1, 4 * len(low) + 1):
        slope = (anchors[-1] - anchors[0]) * c / max(1, rows[-1] - rows[0])
        for a in sorted({math.floor(slope), math.ceil(slope), math.floor(slope) - 1,
                         math.ceil(slope) + 1}):
            first = int(np.max(c * low - a * h))
            last = int(np.min(c * (high + 1) - a * h)) - 1
            if first <= last:
                return a, max(first, min(last, 0)), c
    return None


def interpolation_matrix(extent: int, attrs: dict, scale: float | None,
                         size: int | None) -> np.ndarray:
    """``R`` (``m x extent``) of one axis, by onnx's reference evaluator on the identity."""
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    inputs = ["x", "", "scales" if size is None else "", "sizes" if size is not None else ""]
    node = helper.make_node("Resize", inputs, ["y"], axes=[1],
                            **{k: v for k, v in attrs.items() if k in _AXIS_ATTRIBUTES})
    initializers = [numpy_helper.from_array(np.array([scale], np.float32), "scales")
                    if size is None else numpy_helper.from_array(np.array([size], np.int64),
                                                                  "sizes")]
    graph = helper.make_graph([node], "axis", [helper.make_tensor_value_info(
        "x", TensorProto.DOUBLE, [extent, extent])], [helper.make_tensor_value_info(
            "y", TensorProto.DOUBLE, None)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (resized,) = ReferenceEvaluator(model).run(None, {"x": np.eye(extent)})
    return np.asarray(resized).T


class AxisTaps:
    """One resized axis: ``index(h, t)`` of tap ``t < taps`` and its weight table (``None``:
    nearest, one tap of weight 1)."""

    def __init__(self, matrix: np.ndarray, what: str) -> None:
        rows, extent = matrix.shape
        nonzero = matrix != 0
        any_row = nonzero.any(axis=1)
        first = np.where(any_row, nonzero.argmax(axis=1), 0)
        last = np.where(any_row, extent - 1 - nonzero[:, ::-1].argmax(axis=1), 0)
        self.extent, self.rows = extent, rows
        # windows clipped at the ends of the axis are narrower: their start may lie before
        # (or after) what the rows around them follow, as long as the window still covers them
        widest = int(np.max(last - first)) + 1
        for taps in range(widest, widest + 3):
            low = np.where(any_row, last - taps + 1, -taps)
            high = np.where(any_row, first, extent)
            fit = affine_floor(low, high)
            if fit is not None:
                break
        else:
            raise ValueError(f"{what}: the interpolation windows do not start at an affine "
                             "function of the output position")
        self.taps = taps
        self.a, self.b, self.c = fit
        start = (np.arange(rows) * self.a + self.b) // self.c
        weights = np.zeros((rows, taps))
        for t in range(taps):
            inside = (start + t >= 0) & (start + t < extent)
            weights[inside, t] = matrix[np.nonzero(inside)[0], (start + t)[inside]]
        unit = taps == 1 and np.all(weights == 1.0)
        self.weights = None if unit else weights.astype(np.float32)

    def index(self, h: te.Expr, t: te.Expr | int) -> te.Expr:
        start = (h * self.a + self.b) // self.c if (self.a, self.b, self.c) != (1, 0, 1) else h
        position = start + t if not (isinstance(t, int) and t == 0) else start
        return te.minimum(te.maximum(position, 0), self.extent - 1)


@converter("Resize")
def convert_resize(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    attrs = dict(ctx.attrs)
    if attrs.get("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize":
        raise ctx.unsupported("coordinate_transformation_mode 'tf_crop_and_resize' (its "
                              "extrapolated values are not a linear map of the input)")
    if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ctx.unsupported(f"keep_aspect_ratio_policy "
                              f"{attrs['keep_aspect_ratio_policy']!r} (only 'stretch')")
    if not x.dtype.is_float:
        raise ctx.unsupported(f"a {x.dtype.value} input (float only)")
    axes = [int(a) % x.ndim for a in attrs.get("axes", range(x.ndim))]
    scales = ctx.const(2, "scales").reshape(-1) if ctx.has(2) and \
        ctx.const(2, "scales").size else None
    sizes = ctx.const(3, "sizes").reshape(-1) if ctx.has(3) and \
        ctx.const(3, "sizes").size else None
    if (scales is None) == (sizes is None):
        raise ctx.unsupported("exactly one of scales and sizes must be given")
    if len(scales if scales is not None else sizes) != len(axes):
        raise ctx.unsupported(f"{len(axes)} axes but "
                              f"{len(scales if scales is not None else sizes)} scales or sizes")
    taps: dict[int, AxisTaps] = {}
    shape = list(x.shape)
    for position, d in enumerate(axes):
        scale = float(scales[position]) if scales is not None else None
        size = int(sizes[position]) if sizes is not None else None
        if scale == 1.0 or size == x.shape[d]:
            continue  # the identity along this axis
        try:
            matrix = interpolation_matrix(x.shape[d], attrs, scale, size)
            taps[d] = AxisTaps(matrix, f"{ctx.label}, axis {d}")
        except ValueError as err:
            raise ctx.unsupported(str(err)) from None
        shape[d] = taps[d].rows
    if any(e < 1 for e in shape):
        raise ctx.unsupported(f"an output of shape {tuple(shape)} (every extent at least 1)")
    name = ctx.out()
    tables = {d: te.constant(axis.weights, name=ctx.state.unique(f"{name}_weights{d}"))
              for d, axis in taps.items() if axis.weights is not None}
    # few taps in all (linear: 4 on two axes, cubic 16) are summed term by term: the compute
    # stays elementwise and vectorises along the last axis; wider windows (antialiased
    # downsampling) are a reduction over the taps
    spelled = math.prod(axis.taps for axis in taps.values()) <= MAX_SPELLED_TAPS
    reduce_axes = {} if spelled else {d: te.reduce_axis(axis.taps, f"t{d}")
                                      for d, axis in taps.items() if axis.taps > 1}

    def term(idx: tuple[te.Expr, ...], offsets: dict[int, te.Expr | int]) -> te.Expr:
        source = [taps[d].index(i, offsets.get(d, 0)) if d in taps else i
                  for d, i in enumerate(idx)]
        value = compute_float(x[tuple(source)])
        for d, table in tables.items():
            value = value * table[(idx[d], offsets.get(d, 0))]
        return value

    def body(*idx: te.Expr) -> te.Expr:
        if reduce_axes:
            value = te.sum(term(idx, dict(reduce_axes)), axis=list(reduce_axes.values()))
        else:
            value = None
            for offsets in itertools.product(*(range(taps[d].taps) for d in taps)):
                each = term(idx, dict(zip(taps, offsets)))
                value = each if value is None else value + each
        return te.as_expr(value).astype(x.dtype)

    result: Tensor = named_compute(tuple(shape), axis_names(x.ndim), body, name)
    return [result]
