"""ONNX shape and data-movement operators (Reshape, Transpose, Concat, Split, Slice, Gather,
Flatten, Squeeze / Unsqueeze, Expand, Pad (every mode), DepthToSpace / SpaceToDepth, Shape), through
:mod:`tilecraft.ops` (the reductions: :mod:`tilecraft.onnx.convert_reduce`).

Shape-like inputs (a Reshape's shape, Slice's starts, the axes) must be known at import time.

>>> # Reshape(x[2, 6], shape=[0, -1, 2]) becomes ops.reshape(x, (2, 3, 2))
"""

from __future__ import annotations

import math

import numpy as np

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.convert_nn import expanded
from tilecraft.onnx.values import Value, ints
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.ops.layout import PAD_MODES
from tilecraft.te.tensor import Tensor


def _copy_or_reshape(ctx: NodeContext, x: Tensor, shape: tuple[int, ...]) -> Tensor:
    if tuple(x.shape) == shape:
        return ops.reshape(x, shape, name=ctx.out()) if shape else x
    return ops.reshape(x, shape or (1,), name=ctx.out())


@converter("Reshape")
def convert_reshape(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    wanted = ints(ctx.const(1, "shape"))
    allow_zero = bool(ctx.attr("allowzero", 0))
    shape = [x.shape[d] if v == 0 and not allow_zero else v for d, v in enumerate(wanted)]
    if -1 in shape:
        known = math.prod(v for v in shape if v != -1)
        shape[shape.index(-1)] = x.size // max(known, 1)
    if math.prod(shape) != x.size or any(v < 1 for v in shape):
        raise ctx.unsupported(f"cannot reshape {x.shape} to {wanted}")
    return [_copy_or_reshape(ctx, x, tuple(shape))]


@converter("Flatten")
def convert_flatten(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise ctx.unsupported(f"axis {axis} for a rank-{x.ndim} input (in [-{x.ndim}, {x.ndim}])")
    axis = axis + x.ndim if axis < 0 else axis   # counted from the back, as ONNX defines it
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return [_copy_or_reshape(ctx, x, shape)]


def axes_input(ctx: NodeContext, index: int, ndim: int) -> list[int] | None:
    """Axes from input ``index`` (newer opsets) or the ``axes`` attribute; None if absent."""
    if ctx.has(index):
        return [a % ndim for a in ints(ctx.const(index, "axes"))]
    if "axes" in ctx.attrs:
        return [int(a) % ndim for a in ctx.attrs["axes"]]
    return None


@converter("Squeeze")
def convert_squeeze(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axes = axes_input(ctx, 1, x.ndim)
    if axes is None:
        axes = [d for d, e in enumerate(x.shape) if e == 1]
    if any(x.shape[a] != 1 for a in axes):
        raise ctx.unsupported(f"squeezing axes {axes} of {x.shape}, not all of extent 1")
    shape = tuple(e for d, e in enumerate(x.shape) if d not in axes)
    return [_copy_or_reshape(ctx, x, shape)]


@converter("Unsqueeze")
def convert_unsqueeze(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    count = len(ints(ctx.const(1, "axes"))) if ctx.has(1) else len(ctx.attr("axes", []))
    axes = sorted(axes_input(ctx, 1, x.ndim + count) or [])
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [_copy_or_reshape(ctx, x, tuple(shape))]


@converter("Transpose")
def convert_transpose(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    perm = ctx.attr("perm")
    return [ops.transpose(x, None if perm is None else [int(p) for p in perm], name=ctx.out())]


@converter("Concat")
def convert_concat(ctx: NodeContext) -> list[Value]:
    tensors = [ctx.tensor(i) for i in range(len(ctx.inputs)) if ctx.has(i)]
    return [ops.concat(tensors, axis=int(ctx.attr("axis")), name=ctx.out())]


def _window(ctx: NodeContext, x: Tensor, starts: list[int], steps: list[int],
            shape: list[int], name: str) -> Tensor:
    """``out[idx] = x[start + idx * step]`` per dimension."""

    def body(*idx: te.Expr) -> te.Expr:
        source = []
        for i, start, step in zip(idx, starts, steps):
            term = i * step if step != 1 else i
            source.append(term + start if start else term)
        return x[tuple(source)]

    return named_compute(tuple(shape), axis_names(x.ndim), body, name)


@converter("Split")
def convert_split(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", 0)) % x.ndim
    outputs = len(ctx.node.output)
    if ctx.has(1):
        sizes = ints(ctx.const(1, "split"))
    elif "split" in ctx.attrs:
        sizes = [int(v) for v in ctx.attrs["split"]]
    else:
        parts = int(ctx.attr("num_outputs", outputs))
        chunk = -(-x.shape[axis] // parts)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(parts)]
    if sum(sizes) != x.shape[axis] or len(sizes) != outputs or min(sizes) < 1:
        raise ctx.unsupported(f"split sizes {sizes} of axis {axis} of {x.shape} into "
                              f"{outputs} outputs")
    results: list[Value] = []
    offset = 0
    for k, size in enumerate(sizes):
        starts = [offset if d == axis else 0 for d in range(x.ndim)]
        shape = [size if d == axis else e for d, e in enumerate(x.shape)]
        results.append(_window(ctx, x, starts, [1] * x.ndim, shape, ctx.out(k)))
        offset += size
    return results


@converter("Slice")
def convert_slice(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    starts_in = ints(ctx.const(1, "starts"))
    ends_in = ints(ctx.const(2, "ends"))
    axes = axes_input(ctx, 3, x.ndim) or list(range(len(starts_in)))
    steps_in = ints(ctx.const(4, "steps")) if ctx.has(4) else [1] * len(axes)
    starts, steps, shape = [0] * x.ndim, [1] * x.ndim, list(x.shape)
    for axis, start, end, step in zip(axes, starts_in, ends_in, steps_in):
        extent = x.shape[axis]
        if step == 0:
            raise ctx.unsupported("a step of 0")
        first, stop, _ = slice(start, end, step).indices(extent)
        count = len(range(first, stop, step))
        if count < 1:
            raise ctx.unsupported(f"an empty slice of axis {axis} (tensors are never empty)")
        starts[axis], steps[axis], shape[axis] = first, step, count
    return [_window(ctx, x, starts, steps, shape, ctx.out())]


@converter("Gather")
def convert_gather(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = int(ctx.attr("axis", 0)) % x.ndim
    indices = ctx.const(1, "indices")
    flat = [i % x.shape[axis] for i in ints(indices)]
    index_shape = list(indices.shape)
    shape = [*x.shape[:axis], *index_shape, *x.shape[axis + 1:]]
    strides = [flat[i + 1] - flat[i] for i in range(len(flat) - 1)]
    arithmetic = len(set(strides)) <= 1 and len(index_shape) <= 1
    if not arithmetic and len(flat) > 64:
        raise ctx.unsupported(f"{len(flat)} gathered indices that are not an arithmetic "
                              "progression (up to 64 are supported)")

    def body(*idx: te.Expr) -> te.Expr:
        before, middle = idx[:axis], idx[axis:axis + len(index_shape)]
        after = idx[axis + len(index_shape):]
        if not index_shape:
            return x[(*before, flat[0], *after)]
        if arithmetic:
            step = strides[0] if strides else 1
            position = middle[0] * step if step != 1 else middle[0]
            return x[(*before, position + flat[0] if flat[0] else position, *after)]
        linear: te.Expr | int = 0
        for d, i in enumerate(middle):
            linear = linear * index_shape[d] + i if d else i
        result = x[(*before, flat[-1], *after)]
        for position in range(len(flat) - 2, -1, -1):
            result = te.select(te.eq(linear, position), x[(*before, flat[position], *after)],
                               result)
        return result

    return [named_compute(tuple(shape) or (1,), axis_names(len(shape) or 1),
                          body if shape else (lambda _: body()), ctx.out())]


@converter("Expand")
def convert_expand(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    wanted = ints(ctx.const(1, "shape"))
    from tilecraft.ops.building import broadcast_shape

    shape = broadcast_shape(x.shape, tuple(wanted), ctx.label)
    out = expanded(ctx, x, shape, "expand")
    return [out if out is not x else _copy_or_reshape(ctx, x, tuple(shape))]


@converter("Pad")
def convert_pad(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    mode = ctx.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise ctx.unsupported(f"mode={mode!r} ({', '.join(PAD_MODES)} are supported)")
    flat = ints(ctx.const(1, "pads"))
    axes = axes_input(ctx, 3, x.ndim) or list(range(x.ndim))
    pairs = [(0, 0)] * x.ndim
    for k, axis in enumerate(axes):
        pairs[axis] = (flat[k], flat[k + len(axes)])
    if any(v < 0 for pair in pairs for v in pair):
        raise ctx.unsupported("negative pads (cropping)")
    value: float | int | te.Expr = 0
    if ctx.has(2) and not ctx.is_const(2):  # a run-time scalar: its one element
        fill = ctx.tensor(2)
        if fill.size != 1:
            raise ctx.unsupported(f"constant_value of shape {fill.shape} (one value)")
        value = fill[(0,) * fill.ndim]
    else:
        if ctx.has(2):
            value = np.asarray(ctx.const(2, "constant_value")).reshape(-1)[0].item()
        value = float(value) if x.dtype.is_float else int(value)
    if mode == "reflect":
        for axis, (before, after) in enumerate(pairs):
            if max(before, after) >= x.shape[axis]:
                raise ctx.unsupported(f"reflect pads ({before}, {after}) on axis {axis} of "
                                      f"extent {x.shape[axis]} (at most {x.shape[axis] - 1})")
    return [ops.pad(x, pairs, value=value, name=ctx.out(), mode=mode)]


@converter("DepthToSpace", "SpaceToDepth")
def convert_depth_space(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    block = int(ctx.attr("blocksize"))
    if ctx.op_type == "SpaceToDepth":  # its mode attribute came at opset 28 (DCR before)
        return [ops.space_to_depth(x, block, mode=ctx.attr("mode", "DCR"), name=ctx.out())]
    return [ops.depth_to_space(x, block, mode=ctx.attr("mode", "DCR"), name=ctx.out())]


@converter("Shape")
def convert_shape(ctx: NodeContext) -> list[Value]:
    value = ctx.value(0)
    shape = np.array(value.shape, dtype=np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return [shape[start:end]]


@converter("Size")
def convert_size(ctx: NodeContext) -> list[Value]:
    """The element count of the input's static shape (known at import time)."""
    return [np.array(ctx.value(0).size, dtype=np.int64)]


@converter("EyeLike")
def convert_eye_like(ctx: NodeContext) -> list[Value]:
    """Ones on diagonal ``k`` of a 2-d matrix of the input's shape, in ``dtype`` (default: the
    input's), known at import time."""
    value = ctx.value(0)
    if len(value.shape) != 2:
        raise ctx.unsupported(f"an input of shape {tuple(value.shape)} (2-d only)")
    from onnx.helper import tensor_dtype_to_np_dtype

    dtype = tensor_dtype_to_np_dtype(int(ctx.attr("dtype"))) if "dtype" in ctx.attrs else \
        (value.dtype if isinstance(value, np.ndarray) else value.dtype.numpy)
    return [np.eye(*value.shape, k=int(ctx.attr("k", 0)), dtype=dtype)]


@converter("Tile")
def convert_tile(ctx: NodeContext) -> list[Value]:
    """``out[i] = x[i % shape]`` over ``repeats`` (known at import time) copies per axis."""
    x = ctx.tensor(0)
    repeats = ints(ctx.const(1, "repeats"))
    if len(repeats) != x.ndim or any(r < 1 for r in repeats):
        raise ctx.unsupported(f"repeats {repeats} for a {x.ndim}-d input (one positive count "
                              "per axis)")
    shape = tuple(e * r for e, r in zip(x.shape, repeats))

    def body(*idx: te.Expr) -> te.Expr:
        return x[tuple(i % e if r > 1 else i for i, e, r in zip(idx, x.shape, repeats))]

    return [named_compute(shape, axis_names(x.ndim), body, ctx.out())]


@converter("Trilu")
def convert_trilu(ctx: NodeContext) -> list[Value]:
    """The upper (``upper=1``: ``j - i >= k``) or lower (``j - i <= k``) triangle of the last
    two axes, zero elsewhere; ``k`` (input 1) known at import time."""
    x = ctx.tensor(0)
    if x.ndim < 2:
        raise ctx.unsupported(f"a {x.ndim}-d input (at least 2-d)")
    k = ints(ctx.const(1, "k"))[0] if ctx.has(1) else 0
    upper = bool(int(ctx.attr("upper", 1)))
    zero = 0.0 if x.dtype.is_float else 0

    def body(*idx: te.Expr) -> te.Expr:
        offset = idx[-1] - idx[-2]
        keep = offset >= k if upper else offset <= k
        return te.select(keep, x[idx], zero)

    return [named_compute(x.shape, axis_names(x.ndim), body, ctx.out())]


@converter("CenterCropPad")
def convert_center_crop_pad(ctx: NodeContext) -> list[Value]:
    """Each of ``axes`` cropped or zero-padded to its size in ``shape`` (known at import
    time), centred: the extra start offset goes to the end, as ONNX's definition rounds."""
    x = ctx.tensor(0)
    wanted = ints(ctx.const(1, "shape"))
    axes = [int(a) % x.ndim for a in ctx.attr("axes", range(x.ndim))]
    if len(wanted) != len(axes) or any(n < 1 for n in wanted):
        raise ctx.unsupported(f"shape {wanted} for axes {axes} (one positive size each)")
    shape, shift = list(x.shape), [0] * x.ndim   # input index = output index + shift
    padded = {d for d, size in zip(axes, wanted) if size > x.shape[d]}
    for d, size in zip(axes, wanted):
        shift[d] = (x.shape[d] - size) // 2 if size < x.shape[d] else -((size - x.shape[d]) // 2)
        shape[d] = size
    zero = 0.0 if x.dtype.is_float else 0

    def body(*idx: te.Expr) -> te.Expr:
        source = [i + s if s else i for i, s in zip(idx, shift)]
        inside = None
        for d in sorted(padded):
            fits = (source[d] >= 0) & (source[d] < x.shape[d])
            inside = fits if inside is None else inside & fits
            source[d] = te.minimum(te.maximum(source[d], 0), x.shape[d] - 1)
        value = x[tuple(source)]
        return value if inside is None else te.select(inside, value, zero)

    return [named_compute(tuple(shape), axis_names(x.ndim), body, ctx.out())]


@converter("OneHot")
def convert_one_hot(ctx: NodeContext) -> list[Value]:
    """``values[1]`` where the (wrapped, if negative) index equals the position along the new
    ``axis`` of ``depth`` (known at import time), else ``values[0]``."""
    indices = ctx.tensor(0)
    depth = int(ctx.const(1, "depth").reshape(-1)[0])
    off, on = (v.item() for v in ctx.const(2, "values").reshape(-1)[:2])
    out_dtype = ctx.tensor(2).dtype
    axis = int(ctx.attr("axis", -1)) % (indices.ndim + 1)
    shape = (*indices.shape[:axis], depth, *indices.shape[axis:])

    def body(*idx: te.Expr) -> te.Expr:
        index = indices[tuple(i for d, i in enumerate(idx) if d != axis)]
        if indices.dtype.is_float:
            index = index.astype(DType.INT32)
        wrapped = te.select(index < 0, index + depth, index)
        return te.select(te.eq(wrapped, idx[axis]), on, off).astype(out_dtype)

    return [named_compute(shape, axis_names(len(shape)), body, ctx.out())]
