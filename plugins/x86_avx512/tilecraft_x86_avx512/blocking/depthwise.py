"""A depthwise convolution (NCHW, one input channel per output channel) as one x86 kernel.

``y[n, k, h, w] = sum_{r, s} P[n, k, sh*h + dh*r + oh, sw*w + dw*s + ow] * W(k, r, s)`` is no
contraction the micro-kernel template runs (its only reduction is the ``R x S`` window), and
the core's loop nest runs it scalar (a stride-2 window is a gather per element). Here the
kernel runs in parallel over ``(n, k)`` — or, on several threads and a large map, over bands
of output rows (:func:`row_chunks`: each thread then reads and writes the rows its 1x1
neighbours, split by pixels, write and read on that thread); for each block of ``ROW_BLOCK``
output rows a vector
loop along the output width (16 lanes, a masked tail) computes the rows' outputs with the
whole window unrolled into one expression per row, so the accumulators live in registers and
each tap is one vector load (for stride 2 a wide masked load and a shuffle), shared by the
rows of the block whose windows overlap, and one FMA.

When ``P`` is the convolution's ``pad`` compute (:func:`as_pad`: ``select(box, value, fill)``
with the box a conjunction of bounds on the two spatial axes) and the kernel is lowered with
it (:func:`fuse_depthwise_pads`: the pad is read by the convolution alone), the pad is not
materialised: each padded input row the windows reach is computed once into a local copy of
the plane (up to ``PLANE_BYTES``) or into a ring of the ``dh*(R-1) + 1 + sh*(ROW_BLOCK-1)``
rows a block reads (slot ``row % size``), the pad's ``value`` evaluated only on the row's
in-box column segment — no select, no out-of-range load — and ``fill`` elsewhere; a local
row is stored split by column phase (``[j % sw, j // sw]``), so that a stride-``sw`` window
reads contiguous vectors (the strided loads happen once per input element, in the fill,
instead of once per tap). ``value``
is whatever the graph passes left there (MobileNet's ``relu6(expand + bias)`` of the layer
before): it is computed once per input element, not once per tap. Without a pad (or with one
that other computes read too) the windows read the input directly.

With an ``epilogue`` (:mod:`.depthwise_epilogue`: the elementwise computes after the
convolution — MobileNet's ``relu6(conv + bias)`` — that :func:`fuse_depthwise_pads` finds)
each row's window sum goes through the epilogue's expression in registers and the kernel
stores the epilogue's tensor: the convolution's output is never written.

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> y = ops.depthwise_conv2d(te.placeholder((1, 3, 9, 9), name="x"),
...                          te.placeholder((3, 1, 3, 3), name="w"), stride=2, name="y")
>>> kernel = lower_depthwise(as_depthwise(y), LoweringOptions(vector_lanes=16))
>>> print(kernel.attrs["schedule"])
depthwise 3x3/2: parallel(3 channels) > rows(4, 2 at a time) > vector(w=4, lanes=16) x window
>>> print(*str(kernel).splitlines()[:4], sep=chr(10))
kernel y(x: float32[1, 3, 9, 9], w: float32[3, 1, 3, 3], y: float32[1, 3, 4, 4]) -> (y):
  for t in parallel(3):
    for hb in serial(2):
      for wv in vector(4, lanes=16):
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tilecraft.cost.loop_nest import outer_bandwidth, roofline_seconds
from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.target.base import FusedGroup, LoweringEstimate
from tilecraft.target.spec import TargetSpec
from tilecraft.te.bounds import affine, facts_from_condition, tighten
from tilecraft.te.expr import (
    Binary,
    BinaryOp,
    Compare,
    Const,
    Expr,
    IterVar,
    Load,
    Logical,
    LogicalOp,
    Reduce,
    ReduceOp,
    Select,
    Var,
    const,
)
from tilecraft.te.tensor import ComputeOp, Tensor
from tilecraft.te.visit import loads_in, substitute, vars_in
from tilecraft_x86_avx512.blocking.building import (
    kernel_expr,
    parallel_kind,
    unique_params,
    unit_axes,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.depthwise_epilogue import DepthwiseEpilogue, depthwise_epilogue

__all__ = ["Depthwise", "Pad", "as_depthwise", "as_pad", "depthwise_estimate",
           "fuse_depthwise_pads", "lower_depthwise", "row_chunks"]

#: the strategy :func:`depthwise_estimate` names (the mapping stage's report)
STRATEGY = "x86 depthwise kernel"


@dataclass(frozen=True)
class Window:
    """One spatial dimension of the window: input index ``stride * out + dilation * tap +
    offset`` for ``out < outputs``, ``tap < taps``; ``tap_axis`` is ``None`` for one tap."""

    out_axis: IterVar
    tap_axis: IterVar | None
    stride: int
    dilation: int
    offset: int

    @property
    def outputs(self) -> int:
        return self.out_axis.extent

    @property
    def taps(self) -> int:
        return self.tap_axis.extent if self.tap_axis is not None else 1

    @property
    def span(self) -> int:
        """Input positions from the first tap of an output to its last (inclusive)."""
        return self.dilation * (self.taps - 1) + 1

    @property
    def reach(self) -> int:
        """Input positions the whole dimension reads, from ``offset`` on."""
        return self.stride * (self.outputs - 1) + self.span


@dataclass(frozen=True)
class Pad:
    """A ``pad`` compute ``P[i0, i1, i2, i3] = select(box, value, fill)``: ``box`` is
    ``rows[0] <= i2 <= rows[1]`` and ``cols[0] <= i3 <= cols[1]`` (either side may be absent:
    the full extent)."""

    tensor: Tensor
    value: Expr
    fill: Const
    rows: tuple[int, int]
    cols: tuple[int, int]


@dataclass(frozen=True)
class Depthwise:
    """A depthwise convolution ``tensor[n, k, h, w] = sum source * weight`` recognised by
    :func:`as_depthwise`: ``source`` the input load (at channel ``k``, its spatial indices the
    windows ``rows`` and ``cols``), ``weight`` the other factor (a function of ``k`` and the
    taps)."""

    tensor: Tensor
    source: Load
    weight: Expr
    rows: Window
    cols: Window

    @property
    def label(self) -> str:
        r, s = self.rows, self.cols
        stride = f"{r.stride}" if r.stride == s.stride else f"({r.stride},{s.stride})"
        return f"{r.taps}x{s.taps}/{stride}"


def _window(index: Expr, out_axis: IterVar, taps: Sequence[IterVar],
            units: set[IterVar]) -> Window | None:
    """``index`` as ``stride * out_axis + dilation * tap + offset`` (``tap`` one of ``taps``,
    extent-1 axes ``units`` read as 0), or ``None``."""
    form = affine(index)
    if form is None:
        return None
    terms = {var: coef for var, coef in form.terms().items() if var not in units}
    stride = terms.pop(out_axis, 0)
    if out_axis.extent > 1 and stride < 1:
        return None
    used = [axis for axis in taps if axis in terms]
    if len(used) > 1:
        return None
    tap = used[0] if used else None
    dilation = terms.pop(tap, 1) if tap is not None else 1
    if terms or dilation < 1 or form.constant < 0:
        return None
    return Window(out_axis, tap, max(stride, 1), dilation, form.constant)


def as_depthwise(tensor: Tensor) -> Depthwise | None:
    """``tensor`` as a float32 depthwise convolution (see :class:`Depthwise`), or ``None``:
    a sum over at most two window axes (and extent-1 axes) of the product of a 4-d input load
    — channel index the output channel ``k`` itself, last two indices the windows — and a
    weight reading neither ``n`` nor the output position. With several filters per channel
    (``k // multiplier``) a grouped convolution's group split leaves the template a
    contraction of ``multiplier`` rows: that stays the template's.

    >>> from tilecraft import ops, te
    >>> x = te.placeholder((2, 5, 8, 8), name="x")
    >>> dw = as_depthwise(ops.depthwise_conv2d(x, te.placeholder((5, 1, 3, 3), name="w"),
    ...                                        padding=1, dilation=2, name="y"))
    >>> dw.source.tensor.name, dw.label, dw.rows.dilation, dw.cols.offset
    ('y_pad', '3x3/1', 2, 0)
    >>> as_depthwise(ops.conv2d(x, te.placeholder((5, 1, 3, 3), name="w"), groups=5)).label
    '3x3/1'
    >>> as_depthwise(ops.conv2d(x, te.placeholder((10, 1, 3, 3), name="w"), groups=5)) is None
    True
    """
    if not isinstance(tensor.op, ComputeOp) or tensor.ndim != 4 \
            or tensor.dtype is not DType.FLOAT32:
        return None
    body = tensor.op.body
    if not (isinstance(body, Reduce) and body.op is ReduceOp.SUM
            and isinstance(body.body, Binary) and body.body.op is BinaryOp.MUL):
        return None
    units = set(unit_axes(tensor))
    n, k, h, w = tensor.axes
    taps = [axis for axis in body.axes if axis not in units]
    if len(taps) > 2:
        return None
    for source, weight in ((body.body.a, body.body.b), (body.body.b, body.body.a)):
        if not (isinstance(source, Load) and source.tensor.ndim == 4
                and source.tensor.dtype is DType.FLOAT32 and weight.dtype is DType.FLOAT32):
            continue
        zero = {axis: const(0) for axis in units}
        batch_index, channel = (simplify(substitute(i, zero)) for i in source.indices[:2])
        if channel != zero.get(k, k) or not set(vars_in(batch_index)) <= {n}:
            continue
        rows = _window(source.indices[2], h, taps, units)
        cols = _window(source.indices[3], w, taps, units)
        if rows is None or cols is None or (rows.tap_axis is not None
                                            and rows.tap_axis == cols.tap_axis):
            continue
        used = {a for a in (rows.tap_axis, cols.tap_axis) if a is not None}
        if used != set(taps) or not set(vars_in(weight)) - units <= {k, *taps}:
            continue
        return Depthwise(tensor, source, weight, rows, cols)
    return None


def _conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, Logical) and cond.op is LogicalOp.AND:
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def as_pad(tensor: Tensor) -> Pad | None:
    """``tensor`` as a pad of its two last axes (see :class:`Pad`), or ``None``.

    >>> from tilecraft import ops, te
    >>> pad = as_pad(ops.pad(te.placeholder((1, 2, 4, 5), name="x"),
    ...                      [(0, 0), (0, 0), (1, 2), (0, 1)], name="p"))
    >>> pad.rows, pad.cols, pad.fill.value
    ((1, 4), (0, 4), 0.0)
    """
    if not isinstance(tensor.op, ComputeOp) or tensor.ndim != 4 or tensor.reduce_axes:
        return None
    body = tensor.op.body
    if not (isinstance(body, Select) and isinstance(body.false_value, Const)):
        return None
    spatial = tensor.axes[2:]
    facts = []
    for leaf in _conjuncts(body.cond):
        found = facts_from_condition(leaf) if isinstance(leaf, Compare) else []
        if not found or any(len(f.coefs) != 1 or f.coefs[0][0] not in spatial for f in found):
            return None
        facts.extend(found)
    box = tighten({axis: (0, axis.extent - 1) for axis in spatial}, facts)
    rows, cols = (box[axis] for axis in spatial)
    return Pad(tensor, body.true_value, body.false_value, rows, cols)


def _segment(lo: int, hi: int, extent: int) -> tuple[int, int]:
    """``[lo, hi]`` (inclusive) as a half-open ``[a, b)`` inside ``[0, extent)``."""
    a = min(max(lo, 0), extent)
    return a, min(max(hi + 1, a), extent)


#: the largest padded input plane (bytes) read from a local copy of the whole plane rather
#: than from a ring of rows
PLANE_BYTES = 16384

#: output rows computed together (sharing the loads of the input rows their windows share)
ROW_BLOCK = 2

#: how a tap reads its input: ``read(h, r, s)`` for output row ``h``, tap ``(r, s)``
TapReader = Callable[[Expr, int, int], Expr]
#: ``output_rows(rows, read)``: the statement computing those output rows
RowsEmitter = Callable[..., Stmt]


def lower_depthwise(conv: Depthwise, options: LoweringOptions,
                    pad: Pad | None = None, plane_bytes: int = PLANE_BYTES,
                    epilogue: DepthwiseEpilogue | None = None, threads: int = 1) -> Kernel:
    """The kernel computing ``conv.tensor`` (see the module docstring); with ``pad`` (the
    compute ``conv.source`` reads, :func:`as_pad`) the pad is read through its expression
    instead of as a tensor: into a copy of the whole padded plane where it takes at most
    ``plane_bytes``, else into a ring of rows. With ``epilogue`` the kernel computes and
    stores ``epilogue.tensor`` instead, from the window sums in registers. For ``threads``
    threads the parallel loop runs over the channels, or over :func:`row_chunks` bands of
    output rows (every channel of a band on one thread; the ring primed at each band's first
    row) where that gives more than one."""
    tensor, source = conv.tensor, conv.source
    level = options.param_level
    batch, channels, out_h, out_w = tensor.shape
    rows, cols = conv.rows, conv.cols
    units = unit_axes(tensor)
    buffers: dict[Tensor, Buffer] = {}

    def buffer_of(t: Tensor) -> Buffer:
        return buffers.setdefault(t, Buffer(t.name, t.shape, t.dtype, level=level))

    t, wv = Var("t"), Var("wv")
    n = t // channels if batch > 1 else const(0)
    k = t % channels if batch > 1 else t
    lead = dict(zip(tensor.axes[:2], (n, k)))
    lead_index = [kernel_expr(i, lead, buffers, extra_zero=units) for i in source.indices[:2]]
    for load in loads_in(pad.value if pad is not None else source):
        buffer_of(load.tensor)
    for load in loads_in(conv.weight):
        buffer_of(load.tensor)
    for operand in epilogue.operands if epilogue is not None else ():
        buffer_of(operand)
    stored = epilogue.tensor if epilogue is not None else tensor
    out = Buffer(stored.name, stored.shape, stored.dtype, level=level)
    lanes = max(1, options.lanes(tensor.dtype))

    def output_rows(hs: Sequence[Expr], read: TapReader, origin: Expr | None = None) -> Stmt:
        """Output rows ``origin + h`` for ``h`` in ``hs`` (``origin``: 0 by default) in one
        vector loop along the width, tap ``(r, s)`` of row ``h`` reading ``read(h, r, s)``:
        each row's whole window as one sum (row by row, each a chain of FMAs); the rows of a
        block share their loads of the input rows in common."""
        stores = []
        for local_h in hs:
            h = _shifted(origin, local_h)
            total: Expr | None = None
            for r in range(rows.taps):
                line: Expr | None = None
                for s in range(cols.taps):
                    taps = {a: const(v) for a, v in ((rows.tap_axis, r), (cols.tap_axis, s))
                            if a is not None}
                    term = read(local_h, r, s) * kernel_expr(conv.weight, {**lead, **taps},
                                                             buffers, extra_zero=units)
                    line = term if line is None else line + term
                total = line if total is None else total + line
            assert total is not None
            if epilogue is not None:
                total = epilogue.value(total, dict(zip(stored.axes, (n, k, h, wv))), buffers)
            stores.append(Store(out, (n, k, h, wv), total))
        return For(wv, const(out_w), vector_kind(options),
                   stores[0] if len(stores) == 1 else Seq(tuple(stores)), lanes=lanes)

    def all_rows(read: TapReader, origin: Expr | None = None, count: int = out_h) -> Stmt:
        """Output rows ``origin + h`` (``origin``: 0 by default) for ``h < count``,
        ``ROW_BLOCK`` at a time (the last ones alone); ``read`` takes ``h``."""
        hb = Var("hb")
        blocks = count // ROW_BLOCK
        parts: list[Stmt] = []
        if blocks:
            parts.append(For(hb, const(blocks), LoopKind.SERIAL, output_rows(
                [hb * ROW_BLOCK + i if i else hb * ROW_BLOCK for i in range(ROW_BLOCK)]
                if ROW_BLOCK > 1 else [hb], read, origin)))
        parts += [output_rows([const(h)], read, origin) for h in range(blocks * ROW_BLOCK, count)]
        return parts[0] if len(parts) == 1 else Seq(tuple(parts))

    outer = batch * channels
    band, bands = row_chunks(out_h, threads)
    c = Var("c")
    band_reach = rows.stride * (band - 1) + rows.span  # padded rows a band reads
    plane = pad is not None and band_reach * cols.reach * tensor.dtype.bytes <= plane_bytes
    local: Buffer | None = None

    def rows_body(origin: Expr, count: int) -> Stmt:
        """Output rows ``origin`` to ``origin + count`` of channel ``t``."""
        nonlocal local
        if pad is None:
            x = buffer_of(source.tensor)
            return all_rows(lambda h, r, s: BufferLoad(
                x, (*lead_index, rows.stride * _shifted(origin, h) + rows.dilation * r
                    + rows.offset,
                    cols.stride * wv + cols.dilation * s + cols.offset)), origin, count)
        if plane:
            local, body = _plane_body(conv, pad, buffers, lead_index, all_rows, wv, options,
                                      origin, count, band_reach, local)
        else:
            local, body = _ring_body(conv, pad, buffers, lead_index, output_rows, wv, options,
                                     origin, count, local)
        return body

    if bands == 1:
        loop: Stmt = For(t, const(outer), parallel_kind(options, outer),
                         rows_body(const(0), out_h))
        split = f"parallel({outer} channels) > rows({out_h}, {ROW_BLOCK} at a time)"
    else:
        last = out_h - band * (bands - 1)
        body = For(t, const(outer), LoopKind.SERIAL, rows_body(c * band, band))
        if last != band:  # (the last band's rows start at c * band too: its stores depend on
            # the parallel variable, as the code generator's check of a parallel loop wants)
            body = IfThenElse(c < bands - 1, body, For(
                t, const(outer), LoopKind.SERIAL, rows_body(c * band, last)))
        loop = For(c, const(bands), parallel_kind(options, bands), body)
        split = (f"parallel({bands} bands of {band} rows) > channels({outer}) > "
                 f"rows({band}, {ROW_BLOCK} at a time)")
    how = ""
    if pad is not None:
        how = (f", pad {pad.tensor.name} read inline into a "
               f"{'plane' if plane else f'{rows.span}-row ring'}")
    if local is not None:  # one per thread, zeroed once: a zero fill stays where written
        loop = Allocate(local, loop)
    if epilogue is not None:
        how += f", epilogue {' -> '.join(t.name for t in epilogue.chain)} before the store"
    attrs = {"compute": stored.name, "statement": stored.statement(),
             "schedule": f"depthwise {conv.label}: {split} > "
                         f"vector(w={out_w}, lanes={lanes}) x window{how}"}
    if epilogue is not None:
        attrs["fused"] = [tensor.name, *(t.name for t in epilogue.chain)]
    kernel = Kernel(stored.name, tuple(unique_params([*buffers.values(), out])), (stored.name,),
                    loop, attrs=attrs)
    # the ring's slots are kept in range by the modulo and the pad's value is read only on
    # its box, which the verifier's interval analysis does not see; the interpreter checks
    verify_kernel(kernel, options.spec, check_bounds=False)
    return kernel


#: the fewest output rows a band of :func:`row_chunks` has. A banded kernel alone runs slower
#: than the channel split (144 channels of 56x56 on 2 threads: 0.12-0.14 ms against 0.095-0.11:
#: each channel's plane is read and written in halves), which the threads' shared activations
#: pay back only on large maps. MobileNet-V2 at 2 threads, same process alternating, Xeon
#: family 6 model 167: bands from 28 rows (its 112x112 and 56x56 depthwise layers) 3.645 ->
#: 3.579 ms against none; from 56 rows 3.595, from 14 rows (its 28x28 layers too) 3.647
MIN_BAND_ROWS = 28


def row_chunks(out_h: int, threads: int) -> tuple[int, int]:
    """``(rows, bands)``: the parallel loop of :func:`lower_depthwise` runs over ``bands``
    bands of ``rows`` output rows (a multiple of ``ROW_BLOCK``; the last band may be shorter)
    rather than over the channels when ``threads`` > 1 and each thread gets a band of at least
    :data:`MIN_BAND_ROWS` rows, else ``(out_h, 1)``. In a band every channel's rows are the
    ones the threads of a pixel-split neighbour (a 1x1 convolution's column blocks) write and
    read, so that the threads do not exchange the activations between kernels.

    >>> row_chunks(112, 2), row_chunks(56, 2), row_chunks(14, 2)
    ((56, 2), (28, 2), (14, 1))
    >>> row_chunks(112, 1)
    (112, 1)
    """
    if threads < 2:
        return out_h, 1
    rows = -(-out_h // threads)
    rows = -(-rows // ROW_BLOCK) * ROW_BLOCK
    if rows < MIN_BAND_ROWS:
        return out_h, 1
    return rows, -(-out_h // rows)


def _plane_body(conv: Depthwise, pad: Pad, buffers: Mapping[Tensor, Buffer],
                lead_index: Sequence[Expr], all_rows: Callable[..., Stmt], wv: Var,
                options: LoweringOptions, origin: Expr, count: int, band_reach: int,
                plane: Buffer | None = None) -> tuple[Buffer, Stmt]:
    """The padded rows that output rows ``origin`` to ``origin + count`` read (the whole plane
    for all the rows), row by row into a local buffer of ``band_reach`` rows (a new one unless
    ``plane`` is given), then those output rows from it: the buffer and the statement."""
    rows, cols = conv.rows, conv.cols
    if plane is None:
        plane = Buffer(f"{conv.tensor.name}_plane", (band_reach, *_phases(cols)),
                       conv.tensor.dtype, level=options.param_level)
    reach = rows.stride * (count - 1) + rows.span
    i = Var("i")
    fill = For(i, const(reach), LoopKind.SERIAL, _padded_row(
        pad, plane, buffers, lead_index, _shifted(rows.stride * origin, i + rows.offset), i,
        cols.offset, options))
    compute = all_rows(lambda h, r, s: BufferLoad(plane, (
        rows.stride * h + rows.dilation * r, *_column(cols, wv, s))), origin, count)
    return plane, Seq((fill, compute))


def _ring_body(conv: Depthwise, pad: Pad, buffers: Mapping[Tensor, Buffer],
               lead_index: Sequence[Expr], output_rows: RowsEmitter, wv: Var,
               options: LoweringOptions, origin: Expr, out_h: int,
               ring: Buffer | None = None) -> tuple[Buffer, Stmt]:
    """Output rows ``origin`` to ``origin + out_h``, ``ROW_BLOCK`` at a time, each block after
    the padded rows it adds to a ring of the ``size`` rows a block reads (slot ``row % size``,
    rows counted from the first one ``origin`` reads: the ring is primed there); the block
    loop is unrolled until the slots repeat, so that every slot is a constant: the ring (a new
    one unless ``ring`` is given) and the statement."""
    rows, cols = conv.rows, conv.cols
    stride, offset, block = rows.stride, rows.offset, ROW_BLOCK
    size = rows.span + stride * (block - 1)
    if ring is None:
        ring = Buffer(f"{conv.tensor.name}_rows", (size, *_phases(cols)), conv.tensor.dtype,
                      level=options.param_level)
    fresh = min(stride * block, size)  # padded rows each block adds
    unroll = size // math.gcd(stride * block, size)  # blocks until the slots repeat
    first_row = stride * origin  # the padded row (less the offset) the first window reads

    def padded(row: Expr, padded_row: int) -> Stmt:
        return _padded_row(pad, ring, buffers, lead_index, _shifted(first_row, row),
                           const(padded_row % size), cols.offset, options)

    def step(first: Expr, v: int, count: int) -> Stmt:
        # output rows first + i, first = block * (unroll * q + v): stride * block * unroll * q
        # is a multiple of size, so the slots are those of first = block * v
        base = stride * block * v + offset
        added = [padded(stride * first + offset + size - fresh + j, base + size - fresh + j)
                 for j in range(fresh)]
        hs = [first + i if i else first for i in range(count)]
        slots = {h: i for i, h in enumerate(hs)}
        return Seq((*added, output_rows(hs, lambda h, r, s: BufferLoad(ring, (
            const((base + stride * slots[h] + rows.dilation * r) % size),
            *_column(cols, wv, s))), origin)))

    q = Var("q")
    parts = [padded(const(offset + j), offset + j) for j in range(size - fresh)]
    looped = out_h // block // unroll  # rounds of unrolled whole blocks
    if looped:
        parts.append(For(q, const(looped), LoopKind.SERIAL, Seq(tuple(
            step(q * (block * unroll) + block * v if v else q * (block * unroll), v, block)
            for v in range(unroll)))))
    for v in range(looped * unroll, -(-out_h // block)):  # the last blocks, the last one short
        parts.append(step(const(block * v), v, min(block, out_h - block * v)))
    return ring, Seq(tuple(parts))


def _shifted(origin: Expr | None, row: Expr) -> Expr:
    """``origin + row``, or ``row`` where ``origin`` is ``None`` or 0."""
    origin = None if origin is None else simplify(origin)
    if origin is None or (isinstance(origin, Const) and origin.value == 0):
        return row
    return simplify(origin + row)


def _phases(cols: Window) -> tuple[int, int]:
    """A local row's shape: the columns the windows reach split by phase (column ``j`` at
    ``[j % stride, j // stride]``), so that a strided window reads contiguous columns."""
    return cols.stride, -(-cols.reach // cols.stride)


def _column(cols: Window, wv: Var, tap: int) -> tuple[Expr, Expr]:
    """Where tap ``tap`` of output column ``wv`` is in a local row (:func:`_phases`): column
    ``stride*wv + dilation*tap`` is phase ``dilation*tap % stride``, ``wv + dilation*tap //
    stride`` in it."""
    shift = cols.dilation * tap
    return const(shift % cols.stride), wv + shift // cols.stride if shift >= cols.stride else wv


def _padded_row(pad: Pad, dest: Buffer, buffers: Mapping[Tensor, Buffer],
                lead_index: Sequence[Expr], row: Expr, slot: Expr, col_offset: int,
                options: LoweringOptions) -> Stmt:
    """Padded row ``row`` of ``pad`` (at the batch and channel ``lead_index``) into
    ``dest[slot]`` (``[phase, q]``: column ``j = phases * q + phase`` holds the pad's column
    ``j + col_offset``): ``value`` on the box's column segment, ``fill`` on rows outside the
    box. The columns outside the box hold ``fill`` too: written here unless it is 0 (local
    buffers start zeroed)."""
    _, phases, width = dest.shape
    lanes = max(1, options.lanes(dest.dtype))
    j = Var("j")
    a, b = _segment(pad.cols[0] - col_offset, pad.cols[1] - col_offset, phases * width)
    borders: list[Stmt] = []
    inside: list[Stmt] = []
    outside: list[Stmt] = []
    for phase in range(phases):

        def fill(start: int, stop: int, phase: int = phase) -> list[Stmt]:
            if stop <= start:
                return []
            return [For(j, const(stop - start), vector_kind(options),
                        Store(dest, (slot, const(phase), j + start), pad.fill), lanes=lanes)]

        lo, hi = -(-(a - phase) // phases), -(-(b - phase) // phases)  # a <= phases*q+phase < b
        if pad.fill.value != 0:
            borders += fill(0, lo) + fill(hi, width)
        if hi <= lo:
            continue
        column = (j + lo) * phases + (phase + col_offset) if phases > 1 else \
            j + (lo + phase + col_offset)
        values = dict(zip(pad.tensor.axes, (*lead_index, row, column)))
        inside.append(For(j, const(hi - lo), vector_kind(options), Store(
            dest, (slot, const(phase), j + lo), kernel_expr(pad.value, values, buffers)),
            lanes=lanes))
        outside += fill(lo, hi)
    if not inside:
        return Seq(tuple(borders))
    in_box = (row >= pad.rows[0]) & (row <= pad.rows[1])
    return Seq((*borders, IfThenElse(in_box, Seq(tuple(inside)), Seq(tuple(outside)))))


def fuse_depthwise_pads(graph: Graph, options: LoweringOptions,
                        taken: set[str], threads: int = 1) -> list[FusedGroup]:
    """Each depthwise convolution of ``graph`` (:func:`as_depthwise`) not in ``taken`` with
    the pad compute (:func:`as_pad`) it reads where nothing else reads it (neither in
    ``taken`` nor a graph output) — the kernel reads the pad inline: the pad has no kernel of
    its own — and with the elementwise computes after it that the kernel computes before the
    store (:func:`.depthwise_epilogue.depthwise_epilogue`) as one kernel; a note for each
    convolution whose reader does not fuse, with the reason. ``threads``: see
    :func:`lower_depthwise`."""
    groups = []
    notes: list[str] = []
    outputs = set(graph.outputs)
    for tensor in graph.computes:
        conv = as_depthwise(tensor) if tensor.name not in taken else None
        if conv is None:
            continue
        producer = conv.source.tensor
        pad = as_pad(producer) if producer.name not in taken else None
        if pad is not None and (producer in outputs or graph.consumers(producer) != [tensor]):
            pad = None
        epilogue = depthwise_epilogue(tensor, graph, taken, notes)
        if pad is None and epilogue is None:
            continue
        kernel = lower_depthwise(conv, options, pad, epilogue=epilogue, threads=threads)
        names = ((producer.name,) if pad is not None else ()) + (tensor.name,) + \
            (tuple(t.name for t in epilogue.chain) if epilogue is not None else ())
        groups.append(FusedGroup(names, (kernel,), (
            f"fused {' -> '.join(names)} into one kernel: {kernel.attrs['schedule']}",)))
    if notes:
        groups.append(FusedGroup((), (), tuple(notes)))
    return groups


def depthwise_estimate(conv: Depthwise, spec: TargetSpec, threads: int) -> LoweringEstimate:
    """The predicted time of :func:`lower_depthwise`'s kernel for ``conv`` on ``spec`` with
    ``threads`` threads: per output vector, one FMA per tap at the spec's float32 peak unless
    its vector loads (``stride`` vectors per tap) take longer at the L1 bandwidth, on the
    lanes the output width fills, with the channels spread over the threads; against the
    input, output and weights moved once through the outermost memory level.

    >>> from tilecraft import ops, te
    >>> from tilecraft_x86_avx512.target import X86Avx512Target
    >>> y = ops.depthwise_conv2d(te.placeholder((1, 32, 112, 112), name="x"),
    ...                          te.placeholder((32, 1, 3, 3), name="w"), padding=1)
    >>> estimate = depthwise_estimate(as_depthwise(y), X86Avx512Target(cpu="znver4").spec, 1)
    >>> estimate.strategy, round(estimate.seconds * 1e6), estimate.basis.split(": ")[-1]
    ('x86 depthwise kernel', 94, 'compute-bound')
    """
    tensor = conv.tensor
    batch, channels, out_h, out_w = tensor.shape
    units = spec.compute
    lanes = max(1, units.lanes(tensor.dtype))
    flops = 2 * tensor.size * conv.rows.taps * conv.cols.taps
    per_fma = 2 * lanes / (units.flops_per_core(tensor.dtype) / units.frequency_hz)
    per_load = conv.cols.stride * lanes * tensor.dtype.bytes / \
        spec.memory.level("L1").bandwidth_bytes_per_cycle
    filled = out_w / (-(-out_w // lanes) * lanes)
    cores = min(threads, units.cores)
    outer = batch * channels
    balance = outer / (-(-outer // cores) * cores)
    efficiency = per_fma / max(per_fma, per_load) * filled * balance
    rate = cores * units.flops_per_core(tensor.dtype) * efficiency
    source = conv.source.tensor
    inputs = source.inputs if not source.is_placeholder and as_pad(source) else [source]
    moved = sum(t.size * t.dtype.bytes for t in inputs) + tensor.size * tensor.dtype.bytes
    bandwidth, level = outer_bandwidth(spec)
    seconds, bound = roofline_seconds(flops, rate, moved, bandwidth)
    basis = (f"{flops} operations at {efficiency:.0%} of the float32 peak of {cores} core(s) "
             f"({rate / 1e9:.3g} GFLOP/s: loads per FMA, {filled:.0%} of the lanes, channels "
             f"over threads {balance:.0%}) vs {moved} bytes at {bandwidth / 1e9:.3g} GB/s "
             f"({level}): {bound}")
    return LoweringEstimate(STRATEGY, seconds, basis)
