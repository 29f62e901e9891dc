"""Data-layout operators: pad (constant, edge, reflect and wrap), transpose, reshape,
depth_to_space, space_to_depth, concat.

All are single computes of loads with affine or floordiv/mod index arithmetic; pad and concat
guard their loads with ``select`` (pad's edge and reflect modes clamp or mirror the index).

>>> from tilecraft import te
>>> x = te.placeholder((2, 3), name="x")
>>> print(pad(x, [(0, 0), (1, 2)], name="p").statement())
p[i0, i1] = select(((i1 >= 1) && (i1 < 4)), x[i0, (i1 - 1)], 0.0)
>>> print(reshape(x, (3, 2), name="r").statement())
r[i0, i1] = x[(((i0 * 2) + i1) // 3), (((i0 * 2) + i1) % 3)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tilecraft import te
from tilecraft.errors import DTypeError, ShapeError
from tilecraft.ops.building import check_tensor, named_compute, normalize_axis, output_name
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

PadWidth = int | Sequence[int] | Sequence[Sequence[int]]


def _pad_pairs(x: Tensor, pad_width: PadWidth) -> tuple[tuple[int, int], ...]:
    if isinstance(pad_width, int) and not isinstance(pad_width, bool):
        pairs: list[object] = [(pad_width, pad_width)] * x.ndim
    else:
        pairs = list(pad_width)  # type: ignore[arg-type]
    if len(pairs) != x.ndim:
        raise ShapeError(f"pad: pad_width has {len(pairs)} entries but {x.name} has {x.ndim} "
                         f"dimensions {x.shape}; give one (before, after) pair per dimension")
    result = []
    for d, pair in enumerate(pairs):
        if isinstance(pair, int) and not isinstance(pair, bool):
            pair = (pair, pair)
        try:
            before, after = pair  # type: ignore[misc]
        except (TypeError, ValueError):
            raise ShapeError(f"pad: pad_width entry {d} ({pair!r}) must be a (before, after) "
                             "pair of ints") from None
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (before, after)):
            raise ShapeError(f"pad: pad_width entry {d} ({pair!r}) must hold ints")
        if before < 0 or after < 0:
            raise ShapeError(f"pad: pad_width entry {d} ({pair!r}) is negative; pad only grows "
                             "a tensor (slice it to crop)")
        result.append((before, after))
    return tuple(result)


#: how :func:`pad` fills the border: numpy's ``np.pad`` modes of the same names
PAD_MODES = ("constant", "edge", "reflect", "wrap")


def pad(x: Tensor, pad_width: PadWidth, value: float | int | te.Expr = 0.0,
        name: str | None = None, mode: str = "constant") -> Tensor:
    """``x`` with a border: ``pad_width`` holds one (before, after) per dimension, and ``mode``
    says what the border holds, as in ``np.pad``:

    - ``"constant"``: ``value`` (``-inf``/``inf`` allowed for float tensors; integer tensors
      need an integer value), or a scalar te expression, e.g. a load of a run-time zero
      point, converted to ``x``'s dtype;
    - ``"edge"``: the nearest element on that axis (the source index clamped into range);
    - ``"reflect"``: the mirror image about the edge element, which is not repeated; each
      pad must be smaller than the axis's extent (a :class:`ShapeError` otherwise);
    - ``"wrap"``: the elements from the other end (the source index modulo the extent), for
      pads of any size.

    ``value`` is only used by ``"constant"``. Along an axis of extent 4 padded by (2, 2):

    >>> # [a b c d] -> constant 0: [0 0 a b c d 0 0]      edge: [a a a b c d d d]
    >>> #              reflect:    [c b a b c d c b]      wrap: [c d a b c d a b]
    """
    check_tensor(x, "pad", "x")
    pairs = _pad_pairs(x, pad_width)
    if mode not in PAD_MODES:
        raise ShapeError(f"pad: mode {mode!r} for {x.name} is not one of {', '.join(PAD_MODES)}")
    shape = tuple(extent + b + a for extent, (b, a) in zip(x.shape, pairs))
    label = output_name(name, "pad")
    if mode == "constant":
        return _pad_constant(x, pairs, value, shape, label)
    if mode == "reflect":
        for d, (extent, (before, after)) in enumerate(zip(x.shape, pairs)):
            if max(before, after) >= extent:
                raise ShapeError(f"pad: reflect pads ({before}, {after}) on axis {d} of "
                                 f"{x.name} {x.shape} must be smaller than its extent "
                                 f"{extent} (at most {extent - 1}); use mode 'edge' or "
                                 "'wrap', or pad in several steps")
    source_index = {"edge": _edge_index, "reflect": _reflect_index, "wrap": _wrap_index}[mode]

    def body(*idx: te.Expr) -> te.Expr:
        return x[tuple(source_index(axis, extent, before, after) if before or after else axis
                       for axis, extent, (before, after) in zip(idx, x.shape, pairs))]

    return named_compute(shape, axis_names(x.ndim), body, label)


def _pad_constant(x: Tensor, pairs: Sequence[tuple[int, int]], value: float | int | te.Expr,
                  shape: tuple[int, ...], name: str) -> Tensor:
    if isinstance(value, te.Expr):
        fill = value if value.dtype == x.dtype else value.astype(x.dtype)
    elif x.dtype.is_float:
        fill = te.const(float(value), x.dtype)
    else:
        if isinstance(value, float) and not value.is_integer():
            raise DTypeError(f"pad: value {value} is not an integer but {x.name} is "
                             f"{x.dtype.value}; pass an integer fill value")
        fill = te.const(int(value), x.dtype)

    def body(*idx: te.Expr) -> te.Expr:
        conditions = []
        source = []
        for axis, extent, (before, after) in zip(idx, x.shape, pairs):
            if before:
                conditions.append(axis >= before)
            if after:
                conditions.append(axis < before + extent)
            source.append(axis - before if before else axis)
        load = x[tuple(source)]
        if not conditions:
            return load
        return te.select(te.all_of(*conditions), load, fill)

    return named_compute(shape, axis_names(x.ndim), body, name)


def _edge_index(axis: te.Expr, extent: int, before: int, after: int) -> te.Expr:
    """``clamp(axis - before, 0, extent - 1)``: the nearest element of the input."""
    index = axis - before if before else axis
    if before:
        index = te.maximum(index, 0)
    if after:
        index = te.minimum(index, extent - 1)
    return index


def _reflect_index(axis: te.Expr, extent: int, before: int, after: int) -> te.Expr:
    """``axis - before`` mirrored about ``0`` and ``extent - 1`` (pads below ``extent``, so
    one reflection at most): ``-1 -> 1`` and ``extent -> extent - 2``."""
    index = axis - before if before else axis
    if after:
        index = te.select(axis > before + extent - 1, (2 * extent - 2 + before) - axis, index)
    if before:
        index = te.select(axis < before, before - axis, index)
    return index


def _wrap_index(axis: te.Expr, extent: int, before: int, after: int) -> te.Expr:
    """``(axis - before) mod extent``, with a multiple of ``extent`` added so that the operand
    of ``%`` never goes negative (any pad size)."""
    if extent == 1:
        return te.const(0)
    shift = -before % extent
    return (axis + shift) % extent if shift else axis % extent


def transpose(x: Tensor, perm: Sequence[int] | None = None, name: str | None = None) -> Tensor:
    """numpy's ``transpose``: output dimension ``d`` is input dimension ``perm[d]``."""
    check_tensor(x, "transpose", "x")
    order = tuple(reversed(range(x.ndim))) if perm is None else tuple(perm)
    if sorted(order) != list(range(x.ndim)):
        raise ShapeError(f"transpose: perm={perm!r} is not a permutation of 0..{x.ndim - 1} for "
                         f"{x.name} with shape {x.shape}")
    shape = tuple(x.shape[p] for p in order)

    def body(*idx: te.Expr) -> te.Expr:
        source: list[te.Expr] = [idx[0]] * x.ndim
        for out_dim, in_dim in enumerate(order):
            source[in_dim] = idx[out_dim]
        return x[tuple(source)]

    return named_compute(shape, axis_names(x.ndim), body, output_name(name, "transpose"))


def _strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def _linear(terms: Sequence[tuple[te.Expr, int]]) -> te.Expr:
    """``sum(axis * coefficient)`` (``0`` for no terms), without unit coefficients."""
    parts = [axis * coefficient if coefficient != 1 else axis for axis, coefficient in terms]
    total: te.Expr = parts[0] if parts else te.const(0)
    for part in parts[1:]:
        total = total + part
    return total


def _source_index(terms: Sequence[tuple[te.Expr, int, int]], stride: int, extent: int,
                  wraps: bool) -> te.Expr:
    """The index ``(flat // stride) % extent`` (``% extent`` only when ``wraps``) into a
    reshape's input, where ``flat = sum(axis * out_stride)`` over ``terms`` of ``(axis,
    out_stride, axis extent)``, written without division where the terms allow: those whose
    ``out_stride`` is a multiple of ``stride`` give the quotient when the others sum to less
    than ``stride``, and those whose quotient coefficient is a multiple of ``extent`` drop out
    of the remainder when the rest stays below ``extent``. A reshape that splits or merges
    dimensions (``[512, 768] -> [512, 12, 64]``) so reads its input at affine indices, which
    the tile analysis, the packing of operands and vector loads need; other reshapes keep the
    division.

    >>> from tilecraft import te
    >>> i, h, d = te.reduce_axis(512, "i"), te.reduce_axis(12, "h"), te.reduce_axis(64, "d")
    >>> terms = [(i, 768, 512), (h, 64, 12), (d, 1, 64)]
    >>> str(_source_index(terms, 768, 512, False)), str(_source_index(terms, 1, 768, True))
    ('i', '((h * 64) + d)')
    """
    quotient = [(axis, out_stride // stride) for axis, out_stride, _ in terms
                if out_stride % stride == 0]
    rest_max = sum(out_stride * (size - 1) for _, out_stride, size in terms
                   if out_stride % stride)
    if rest_max >= stride:  # the division mixes terms: keep it
        flat = _linear([(axis, out_stride) for axis, out_stride, _ in terms])
        index = flat // stride if stride != 1 else flat
        return index % extent if wraps else index
    if not wraps:
        return _linear(quotient)
    sizes = {id(axis): size for axis, _, size in terms}
    kept = [(axis, c) for axis, c in quotient if c % extent]
    if sum(c * (sizes[id(axis)] - 1) for axis, c in kept) < extent:
        return _linear(kept)
    return _linear(quotient) % extent


def reshape(x: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
    """Row-major reshape (one entry may be -1): the input is read at ``(flat // stride) %
    extent`` per dimension, without the division where the shapes allow
    (:func:`_source_index`)."""
    check_tensor(x, "reshape", "x")
    target = [shape] if isinstance(shape, int) else list(shape)
    if any(not isinstance(e, int) or isinstance(e, bool) for e in target):
        raise ShapeError(f"reshape: shape {shape!r} must be a sequence of ints")
    if target.count(-1) > 1:
        raise ShapeError(f"reshape: shape {tuple(target)} has more than one -1; infer at most "
                         "one dimension")
    if any(e < 1 and e != -1 for e in target):
        raise ShapeError(f"reshape: shape {tuple(target)} has an extent below 1 (only -1 is "
                         "allowed, to infer one dimension)")
    if -1 in target:
        known = math.prod(e for e in target if e != -1)
        if x.size % known:
            raise ShapeError(f"reshape: cannot infer -1 in {tuple(target)} for {x.name} of "
                             f"{x.size} elements ({x.shape}): {x.size} is not divisible by "
                             f"{known}")
        target[target.index(-1)] = x.size // known
    if math.prod(target) != x.size:
        raise ShapeError(f"reshape: {x.name} has {x.size} elements ({x.shape}) but shape "
                         f"{tuple(target)} holds {math.prod(target)}; the sizes must match")
    out_strides = _strides(target)
    in_strides = _strides(x.shape)

    def body(*idx: te.Expr) -> te.Expr:
        terms = [(axis, stride, extent)
                 for axis, stride, extent in zip(idx, out_strides, target) if extent != 1]
        source: list[te.Expr | int] = []
        for d, (extent, stride) in enumerate(zip(x.shape, in_strides)):
            if extent == 1:
                source.append(0)
                continue
            source.append(_source_index(terms, stride, extent,
                                        wraps=d > 0 and math.prod(x.shape[:d]) > 1))
        return x[tuple(source)]

    return named_compute(tuple(target), axis_names(len(target)), body,
                         output_name(name, "reshape"))


def _check_block(x: Tensor, block: int, op: str, mode: str) -> None:
    check_tensor(x, op, "x", 4)
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ShapeError(f"{op}: block={block!r} must be a positive int")
    if mode not in ("CRD", "DCR"):
        raise ShapeError(f"{op}: mode={mode!r} must be 'CRD' (PyTorch pixel_shuffle order) or "
                         "'DCR' (ONNX/TensorFlow default order)")


def depth_to_space(x: Tensor, block: int, mode: str = "CRD", name: str | None = None) -> Tensor:
    """NCHW (N, C*r*r, H, W) -> (N, C, H*r, W*r).

    ``mode="CRD"`` (default) is PyTorch's ``pixel_shuffle``: input channel
    ``c*r*r + (h%r)*r + (w%r)``; ``"DCR"`` is ONNX's default: ``((h%r)*r + (w%r))*C + c``.
    """
    _check_block(x, block, "depth_to_space", mode)
    n, channels, height, width = x.shape
    r = block
    if channels % (r * r):
        raise ShapeError(f"depth_to_space: {x.name} has {channels} channels, not divisible by "
                         f"block*block = {r * r}; use a block that divides the channels")
    out_channels = channels // (r * r)

    def body(b: te.Expr, c: te.Expr, h: te.Expr, w: te.Expr) -> te.Expr:
        offset = (h % r) * r + (w % r)
        source_c = c * (r * r) + offset if mode == "CRD" else offset * out_channels + c
        return x[b, source_c, h // r, w // r]

    return named_compute((n, out_channels, height * r, width * r), ["n", "c", "h", "w"], body,
                         output_name(name, "depth_to_space"))


def space_to_depth(x: Tensor, block: int, mode: str = "CRD", name: str | None = None) -> Tensor:
    """NCHW (N, C, H, W) -> (N, C*r*r, H/r, W/r), the inverse of :func:`depth_to_space`.

    ``"CRD"`` is PyTorch's ``pixel_unshuffle``; ``"DCR"`` is ONNX's SpaceToDepth.
    """
    _check_block(x, block, "space_to_depth", mode)
    n, channels, height, width = x.shape
    r = block
    if height % r or width % r:
        raise ShapeError(f"space_to_depth: {x.name} is {height}x{width}, not divisible by "
                         f"block={r}; pad it first (ops.pad) or pick a block that divides both")

    def body(b: te.Expr, k: te.Expr, h: te.Expr, w: te.Expr) -> te.Expr:
        if mode == "CRD":
            c, offset = k // (r * r), k % (r * r)
        else:
            c, offset = k % channels, k // channels
        return x[b, c, h * r + offset // r, w * r + offset % r]

    return named_compute((n, channels * r * r, height // r, width // r), ["n", "c", "h", "w"],
                         body, output_name(name, "space_to_depth"))


def concat(tensors: Sequence[Tensor], axis: int = 0, name: str | None = None) -> Tensor:
    """numpy's ``concatenate`` along ``axis``: a chain of selects on that axis."""
    items = list(tensors)
    if not items:
        raise ShapeError("concat: needs at least one tensor")
    for position, tensor in enumerate(items):
        check_tensor(tensor, "concat", f"tensors[{position}]")
    first = items[0]
    dim = normalize_axis(axis, first.ndim, "concat")
    for position, tensor in enumerate(items[1:], start=1):
        if tensor.dtype != first.dtype:
            raise DTypeError(f"concat: tensors[{position}] ({tensor.name}) is "
                             f"{tensor.dtype.value} but tensors[0] ({first.name}) is "
                             f"{first.dtype.value}; cast them to one dtype")
        other = tuple(e for d, e in enumerate(tensor.shape) if d != dim)
        expected = tuple(e for d, e in enumerate(first.shape) if d != dim)
        if tensor.ndim != first.ndim or other != expected:
            raise ShapeError(f"concat: tensors[{position}] ({tensor.name}, shape {tensor.shape}) "
                             f"does not match tensors[0] ({first.name}, shape {first.shape}) "
                             f"outside axis {dim}")
    offsets = [0]
    for tensor in items:
        offsets.append(offsets[-1] + tensor.shape[dim])
    shape = tuple(offsets[-1] if d == dim else e for d, e in enumerate(first.shape))

    def body(*idx: te.Expr) -> te.Expr:
        def piece(position: int) -> te.Expr:
            local = idx[dim] - offsets[position] if offsets[position] else idx[dim]
            return items[position][idx[:dim] + (local,) + idx[dim + 1:]]

        result = piece(len(items) - 1)
        for position in range(len(items) - 2, -1, -1):
            result = te.select(idx[dim] < offsets[position + 1], piece(position), result)
        return result

    return named_compute(shape, axis_names(len(shape)), body, output_name(name, "concat"))
