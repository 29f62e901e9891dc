"""A ``KH x KW`` convolution of stride 1 or 2 lowered directly: no im2col, the padded
activation read in place at each tap's shift, the weights packed once.

The template (:mod:`.register_tiles`) lowers ``y[oc, p] = sum_{c, kh, kw} W[oc, c, kh, kw] *
xp[c, oh*s + kh, ow*s + kw]`` as a GEMM whose B operand is the im2col matrix, packed per call
(``KH * KW`` copies of the activation) and, where the pixels are few (14x14 = 196, 7x7 = 49),
in ragged ``NR``-wide panels. Here the product is computed transposed, as
:mod:`.transposed_conv1x1` does for 1x1 convolutions, the window's taps inside the micro-kernel:

1. ``<C>_wpacked_pack`` packs ``W^T`` into panels ``[1, NB, C*KH*KW, NR]`` (the weights'
   own reduction order), zero-padded past ``oc``. It reads only W: where W is
   a constant the Executable runs it once and keeps the result.
2. ``<C>`` runs, in parallel over (panel of ``NR`` output channels, block of output rows),
   for each output row and each strip of ``MI`` pixels of that row, one call of
   ``outer_product_f32_taps`` (``_s2`` for stride 2) into a local ``MI x NR`` tile: A is
   the padded activation ``[C, Hp, Wp]`` read in place from the strip's top-left input
   pixel, B the panel
   ``[C, KH, KW, NR]``; for each input channel the micro-kernel runs every tap, broadcasting
   ``MI`` pixels (``s`` apart) of the tap's shifted input row against the tap's ``NR`` weights,
   the accumulators in registers for the whole reduction. The tile is then stored transposed
   into ``y[oc, oh*OW + ow]`` (vectors along the strip's pixels), through the elementwise
   epilogue when one is fused (bias, residual add, ReLU). Strips of at most 8 pixels use the
   ``_t`` micro-kernels, which transpose the tile in registers and leave it channels by
   pixels (:mod:`~tilecraft_x86_avx512.tile_transpose`), so the store reads each channel's
   pixels as one contiguous vector instead of gathering them 64 floats apart. The direct
   kernels' sum, same process A/B, Xeon family 6 model 167: ResNet-18 20.43 -> 20.08 ms
   (1 thread), 10.68 -> 10.29 (2 threads); ResNet-50 13.82 -> 13.06 (2 threads);
   MobileNet-V2's stem 0.247 -> 0.229 ms. Where the ``W^T`` panel streams from L2 anyway
   (:func:`stores_rows`), those tiles go side by side into a channels x row buffer and the row
   is stored once, through the epilogue, with whole vectors of its pixels (56 pixels: 4
   vectors a channel instead of 10 of 6 lanes). Same process A/B, the direct kernels' sum:
   ResNet-18 19.53 -> 19.02 ms (1 thread), 10.28 -> 9.90 (2); ResNet-50 22.51 -> 22.13 (1),
   11.76 -> 11.65 (2).

Strips never cross an output row, so no pixel of the padding is computed; a row's last strip
(``OW % MI`` pixels) and panel (``oc % NR`` channels) go through the micro-kernel's ``MV`` and
``NC``. Which convolutions take the path by default: :func:`prefers_direct`.

>>> import numpy as np
>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> x = te.placeholder((1, 8, 7, 5), name="x")
>>> w = te.constant(np.ones((32, 8, 3, 3), np.float32), name="w")
>>> c = as_contraction(ops.conv2d(x, w, padding=1, name="y"), broadcast_batch=True)
>>> g = direct_geometry(c)
>>> g.channels, g.height, g.width, g.out_height, g.out_width, len(g.taps), g.taps[4]
(8, 9, 7, 7, 5, 9, (1, 1))
>>> kernels = lower_direct(c, 6, 32, LoweringOptions(vector_lanes=16), threads=2)
>>> [k.name for k in kernels], [p.name for p in kernels[1].params]
(['y_wpacked_pack', 'y'], ['y_pad', 'y_wpacked', 'y'])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    IfThenElse,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Stmt,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction
from tilecraft.te.expr import Binary, BinaryOp, Expr, IterVar, Var, const
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    contraction_kernel,
    nest,
    parallel_kind,
)
from tilecraft_x86_avx512.blocking.register_tiles import pack_operand
from tilecraft_x86_avx512.blocking.transposed_conv1x1 import (
    ragged_tiles,
    store_transposed,
    transposed_tile,
)
from tilecraft_x86_avx512.microkernels import (
    OUTER_PRODUCT_F32_TAPS,
    TAPS_BY_STRIDE,
    TRANSPOSED_TAPS_BY_STRIDE,
)
from tilecraft_x86_avx512.tile_transpose import ROWS as TRANSPOSED_ROWS

if TYPE_CHECKING:
    from tilecraft_x86_avx512.blocking.epilogue import Epilogue

#: the most taps (``KH * KW``) the path unrolls into micro-kernel calls
MAX_TAPS = 49
#: whether strips of at most 8 pixels take the micro-kernel that transposes its tile in
#: registers (a switch for measuring against the transposing store)
TRANSPOSE_IN_REGISTERS = True
#: whether :func:`splits_rows` may hand the threads bands of rows (a switch for measuring)
ROWS_FIRST = True
#: whether the strips of a transposing micro-kernel leave their tiles side by side in a
#: channels x row buffer, stored (through the epilogue) once per output row with whole
#: vectors, rather than each tile stored on its own, ``MI`` lanes a vector (a switch for
#: measuring)
ROW_STORE = True
#: the fewest input channels (k steps of the micro-kernel's loop) the path takes by default: 3,
#: an RGB image (ResNet's 7x7 stride-2 stem, 1 thread, Xeon family 6 model 167: 2.26 -> 1.93
#: ms against the im2col template)
MIN_CHANNELS = 3
#: the narrowest output rows the path takes by default: a 7-pixel row is one strip of 7
#: pixels, and each strip streams the whole weight panel from L2 (ResNet-18's 7x7 stage, 1
#: thread, Xeon family 6 model 167: 1.16-1.19x slower than the im2col template)
MIN_OUT_WIDTH = 14


@dataclass(frozen=True)
class DirectGeometry:
    """A convolution's shapes: input ``channels``, the padded activation's ``height x
    width``, the output's ``out_height x out_width``, its taps ``(kh, kw)`` and its
    ``stride`` (the same along both axes)."""

    channels: int
    height: int
    width: int
    out_height: int
    out_width: int
    taps: tuple[tuple[int, int], ...]
    stride: int = 1


def shifted_index(index: Expr, spatial: IterVar) -> tuple[int, IterVar | None] | None:
    """``(s, window)`` where ``index`` is ``spatial * s + window`` (``s`` a constant, 1 when
    the product is just ``spatial``; ``window`` an axis; either order of the sum), or
    ``spatial * s`` / ``spatial`` alone (``window`` ``None``); else ``None``."""
    def scale(expr: Expr) -> int | None:
        if expr is spatial:
            return 1
        if isinstance(expr, Binary) and expr.op is BinaryOp.MUL:
            for var, factor in ((expr.a, expr.b), (expr.b, expr.a)):
                value = getattr(factor, "value", None)
                if var is spatial and isinstance(value, int) and value >= 1:
                    return value
        return None

    alone = scale(index)
    if alone is not None:
        return alone, None
    if isinstance(index, Binary) and index.op is BinaryOp.ADD:
        for scaled, added in ((index.a, index.b), (index.b, index.a)):
            factor = scale(scaled)
            if factor is not None and isinstance(added, IterVar):
                return factor, added
    return None


def _stride_of(index: Expr, spatial: IterVar, window: IterVar) -> int | None:
    """``s`` where ``index`` is ``spatial * s + window`` (:func:`shifted_index`), else
    ``None``."""
    found = shifted_index(index, spatial)
    return found[0] if found is not None and found[1] is window else None


def direct_geometry(contraction: Contraction) -> DirectGeometry | None:
    """The convolution's :class:`DirectGeometry` where it has the form this path computes — a
    batch-1 ``y[oc, oh, ow] = sum W[oc, c, kh, kw] * xp[0, c, oh*s + kh, ow*s + kw]`` (a
    stride ``s`` with a taps micro-kernel, the same along both axes, no dilation, the padding
    already in ``xp``, more than one output row and column and window row and column: an
    extent-1 axis leaves the contraction's axes) — else ``None``."""
    c = contraction
    batch, _, _, _ = c.extents()
    if batch != 1 or len(c.m_axes) != 1 or len(c.n_axes) != 2 or len(c.k_axes) != 3:
        return None
    channel, kh, kw = c.k_axes
    oh, ow = c.n_axes
    (oc,) = c.m_axes
    x, w = c.b, c.a
    if len(x.indices) != 4 or len(w.indices) != 4 or len(x.tensor.shape) != 4:
        return None
    first = x.indices[0]
    if not (isinstance(first, IterVar) and first.extent == 1 or
            getattr(first, "value", None) == 0):
        return None
    stride = _stride_of(x.indices[2], oh, kh)
    if x.indices[1] is not channel or stride not in TAPS_BY_STRIDE or \
            _stride_of(x.indices[3], ow, kw) != stride:
        return None
    if tuple(w.indices) != (oc, channel, kh, kw):
        return None
    _, channels, height, width = x.tensor.shape
    if height < (oh.extent - 1) * stride + kh.extent or \
            width < (ow.extent - 1) * stride + kw.extent:
        return None
    taps = tuple((r, s) for r in range(kh.extent) for s in range(kw.extent))
    return DirectGeometry(channels, height, width, oh.extent, ow.extent, taps, stride)


def prefers_direct(contraction: Contraction, l2_bytes: int) -> bool:
    """Whether the direct path is the default: the form :func:`direct_geometry` accepts with
    at least two taps (a 1x1 convolution has no im2col to spare) and at most
    :data:`MAX_TAPS`, constant weights (packed once, not per call), at least
    :data:`MIN_CHANNELS` input channels, output channels filling whole vectors, and the
    padded activation in L2 (a strip's rows are read a few pixels at a time), output rows of
    at least :data:`MIN_OUT_WIDTH` pixels.

    >>> import numpy as np
    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> x = te.placeholder((1, 64, 14, 14), name="x")
    >>> conv = lambda k, oc: as_contraction(ops.conv2d(
    ...     x, te.constant(np.ones((oc, 64, k, k), np.float32)), padding=k // 2),
    ...     broadcast_batch=True)
    >>> [prefers_direct(conv(k, oc), 1 << 21) for k, oc in ((3, 64), (1, 64), (3, 24))]
    [True, False, False]
    """
    geometry = direct_geometry(contraction)
    if geometry is None or not contraction.a.tensor.is_constant:
        return False
    _, channels_out, _, _ = contraction.extents()
    return (2 <= len(geometry.taps) <= MAX_TAPS and geometry.channels >= MIN_CHANNELS
            and geometry.out_width >= MIN_OUT_WIDTH and channels_out % 16 == 0
            and 4 * geometry.channels * geometry.height * geometry.width <= l2_bytes)


def direct_row_blocks(panels: int, rows: int, threads: int) -> int:
    """Blocks of output rows the parallel loop cuts each panel's rows into: the fewest whose
    ``panels x blocks`` work items come in whole rounds of the threads.

    >>> direct_row_blocks(1, 56, 2), direct_row_blocks(2, 28, 2), direct_row_blocks(8, 7, 2)
    (2, 1, 1)
    >>> direct_row_blocks(1, 7, 4), direct_row_blocks(1, 1, 2)
    (4, 1)
    """
    blocks = 1
    while (panels * blocks) % threads and blocks < rows:
        blocks += 1
    return blocks


def splits_rows(geometry: DirectGeometry, panels: int, nr: int, threads: int) -> bool:
    """Whether the threads share the output rows (each computing every panel of its band)
    rather than the panels (each reading the whole activation): where there are several
    panels and the padded activation is at least half the weights' size. Each thread then
    reads its band of the activation once for all panels, and all the weights. ResNet's
    3x3 layers, 2 threads, Xeon family 6 model 167, per kernel, same-process A/B: stage 2
    (128 channels, activation 0.46-1.7 MB against 0.59 MB of weights) 0.86-0.95 of the time
    split by panels; stage 3 (256 channels at 14x14: 0.26 MB against 2.4 MB) 1.05-1.20;
    ResNet-18's stride-2 128 -> 256 (0.46 MB against 1.2 MB) 1.06.

    >>> stage2 = DirectGeometry(128, 30, 30, 28, 28, tuple((r, q) for r in range(3)
    ...                                                      for q in range(3)), 1)
    >>> stage3 = DirectGeometry(256, 16, 16, 14, 14, stage2.taps, 1)
    >>> splits_rows(stage2, 2, 64, 2), splits_rows(stage3, 4, 64, 2), splits_rows(stage2, 2, 64, 1)
    (True, False, False)
    """
    if panels < 2 or threads < 2:
        return False
    activation = 4 * geometry.channels * geometry.height * geometry.width
    weights = 4 * geometry.channels * len(geometry.taps) * nr * panels
    return 2 * activation >= weights


def stores_rows(panel_bytes: int, l1_bytes: int | None) -> bool:
    """Whether a transposing micro-kernel's tiles go to a row buffer (:data:`ROW_STORE`):
    where the ``W^T`` panel is larger than L1 (``l1_bytes``; ``None``: unknown) and streams
    from L2 anyway. Where the panel fits L1 the row buffer would push it out: ResNet's 7x7
    stem (3 channels x 49 taps x 64, 37 KB; rows of 112 pixels, 28 KB), 1 thread, Xeon family
    6 model 167: 1.69 -> 1.89 ms. Its 3x3 convolutions (147-590 KB panels), same process
    A/B: 1.69 -> 1.56 ms with a residual epilogue, 1.54 -> 1.48 with a ReLU.

    >>> stores_rows(147456, 49152), stores_rows(37632, 49152)
    (True, False)
    """
    return ROW_STORE and (l1_bytes is None or panel_bytes > l1_bytes)


def lower_direct(contraction: Contraction, mi: int, nr: int, options: LoweringOptions,
                 threads: int = 1, epilogue: Epilogue | None = None,
                 l1_bytes: int | None = None) -> list[Kernel] | None:
    """The pack-W kernel and the main kernel (module docstring), or ``None`` where the
    convolution is not of the direct form or the epilogue re-indexes or casts ``C``.
    ``l1_bytes`` decides the row buffer (:func:`stores_rows`)."""
    c = contraction
    geometry = direct_geometry(c)
    if geometry is None or (epilogue is not None and epilogue.local is not None):
        return None
    tensor = c.tensor
    _, out_channels, pixels, k_total = c.extents()
    dtype = tensor.dtype
    level = options.param_level
    ic, hp, wp = geometry.channels, geometry.height, geometry.width
    stride = geometry.stride
    # up to 8 pixels a strip, the micro-kernel transposes its tile in registers (channels by
    # pixels, 8 pixels a row) and the store below reads each channel's pixels contiguously
    by_channel = mi <= TRANSPOSED_ROWS and TRANSPOSE_IN_REGISTERS
    micro_kernel = (TRANSPOSED_TAPS_BY_STRIDE if by_channel else TAPS_BY_STRIDE)[stride]
    oh_total, ow_total = geometry.out_height, geometry.out_width
    x_in = Buffer(c.b.tensor.name, (ic, hp, wp), c.b.tensor.dtype, level=level)
    _, kh, kw = c.k_axes
    kh_total, kw_total = kh.extent, kw.extent
    pack = pack_operand(f"{tensor.name}_wpacked", c.a, tensor, c.batch_axes, c.m_axes,
                        c.k_axes, nr, k_total, options, role=f"pack W^T of {tensor.name}")
    packed = pack.params[-1]
    assert packed.shape[2] == k_total, "one reduction slice: the taps' rows in order"
    packed_in = Buffer(packed.name, (1, packed.shape[1], ic, kh_total, kw_total, nr), dtype,
                       level=packed.level)
    out = Buffer(tensor.name, (1, out_channels, pixels), dtype, level=level) \
        if epilogue is None else epilogue.out
    strips = ceil_div(ow_total, mi)
    row_store = by_channel and stores_rows(4 * k_total * nr, l1_bytes)
    lanes = max(1, options.lanes(dtype))
    local_shape = (1, nr, ceil_div(strips * mi, lanes) * lanes) if row_store else \
        (1, nr, TRANSPOSED_ROWS) if by_channel else (1, mi, nr)
    local = Buffer(f"{tensor.name}_dtile", local_shape, dtype,
                   level=options.register_level or level)
    panels = ceil_div(out_channels, nr)
    rows_first = ROWS_FIRST and splits_rows(geometry, panels, nr, threads)
    blocks = max(direct_row_blocks(panels, oh_total, threads),
                 min(threads, oh_total) if rows_first else 1)
    block_rows = ceil_div(oh_total, blocks)
    t, oh, s = Var("t"), Var("oh"), Var("s")
    if rows_first:   # thread by thread a band of rows, every panel
        jr = t % panels
        out_row = (t // panels) * block_rows + oh
    else:
        jr = t // blocks
        out_row = (t % blocks) * block_rows + oh
    ow0 = s * mi
    n0 = jr * nr

    def tile(rows: int, cols: int) -> Stmt:
        span = (rows - 1) * stride + kw_total
        operands = (Region(x_in, (const(0), out_row * stride, ow0 * stride),
                           (ic, kh_total, span)),
                    Region(packed_in, (const(0), jr, *(const(0),) * 4),
                           (1, 1, ic, kh_total, kw_total, cols)),
                    Region(local, (const(0), const(0), ow0 if row_store else const(0)),
                           (1, cols, rows) if by_channel else (1, rows, cols)))
        call = MicroKernelCall(micro_kernel.name, operands,
                               (("MI", mi), ("NR", nr), ("KI", ic), ("MV", rows), ("NC", cols),
                                ("KH", kh_total), ("KW", kw_total), ("AW", span)))
        if row_store:   # the row's tiles side by side, stored below
            return call
        return Seq((call, store_transposed(local, out, epilogue, n0, out_row * ow_total + ow0,
                                           rows, cols, options, by_channel)))

    body: Stmt = nest([(s, strips, LoopKind.SERIAL, 0)],
                      ragged_tiles(tile, ow0, ow_total, mi, n0, out_channels, nr))
    if row_store:   # the output row, channel by channel, whole vectors of its pixels
        def row(cols: int) -> Stmt:
            return store_transposed(local, out, epilogue, n0, out_row * ow_total, ow_total,
                                    cols, options, by_channel=True)

        ragged = out_channels % nr
        body = Seq((body, row(nr) if not ragged else
                    IfThenElse(n0 + nr <= out_channels, row(nr), row(ragged))))
    if oh_total % block_rows:
        body = IfThenElse(out_row < oh_total, body)
    body = Allocate(local, nest([(oh, block_rows, LoopKind.SERIAL, 0)], body))
    body = nest([(t, panels * blocks, parallel_kind(options, panels * blocks), 0)], body)
    schedule = (f"direct {len(geometry.taps)}-tap convolution: micro-kernel "
                f"{micro_kernel.name} MI={mi} NR={nr} KI={ic}, padded activation "
                f"read in place, W^T packed: parallel({panels * blocks}: "
                + (f"{blocks} row blocks x {panels} panels" if rows_first else
                   f"{panels} panels x {blocks} row blocks")
                + f") > rows({block_rows}) > strips({strips}), "
                + ("tiles transposed in registers" if by_channel else "tiles stored transposed"))
    params = [x_in, packed_in, out]
    finish = contraction_kernel if epilogue is None else epilogue.kernel
    return [pack, finish(tensor, params, body, micro_kernel.name, schedule, options)]


def lower_direct_config(contraction: Contraction, config: dict[str, int],
                        options: LoweringOptions, threads: int,
                        epilogue: Epilogue | None = None,
                        l1_bytes: int | None = None) -> list[Kernel] | None:
    """:func:`lower_direct` with ``config``'s ``MI`` and ``NR`` where it names them, else
    :func:`~.transposed_conv1x1.transposed_tile` for a row's pixels and the output channels."""
    geometry = direct_geometry(contraction)
    if geometry is None:
        return None
    _, out_channels, _, _ = contraction.extents()
    mi, nr = transposed_tile(geometry.out_width, out_channels, geometry.channels)
    mi, nr = int(config.get("MI", mi)), int(config.get("NR", nr))
    OUTER_PRODUCT_F32_TAPS.resolve({"MI": mi, "NR": nr})
    return lower_direct(contraction, mi, nr, options, threads, epilogue, l1_bytes)


__all__ = ["MAX_TAPS", "MIN_CHANNELS", "MIN_OUT_WIDTH", "DirectGeometry", "direct_geometry",
           "direct_row_blocks", "lower_direct", "lower_direct_config", "prefers_direct",
           "shifted_index"]
