"""A channels-last (NHWC) convolution of stride 1 or 2 lowered directly: the padded activation
read in place, window row by window row, the weights packed once.

After :mod:`tilecraft.passes.layout` a convolution reads
``y[n, oh, ow, oc] = sum_{kh, kw, c} xp[n, oh*s + kh, ow*s + kw, c] * W[kh, kw, c, oc]``. Its
rows (the output pixels ``oh, ow``) are not a row-major view of ``xp`` (the padding columns sit
between two output rows; with stride 2 every other pixel is skipped), so the template would
pack an im2col copy of A. But along one output row, for one window row ``kh``, the values the
``MI`` pixels of a strip need are ``MI`` rows of ``KW * C`` contiguous floats, ``s * C`` apart:
a row-major GEMM operand read in place. Here

1. ``<C>_wpacked_pack`` packs ``W`` into panels ``[1, NB, KH*KW*C, NR]`` (the reduction in
   the activation's own ``kh, kw, c`` order), zero-padded past ``oc``. It reads only W: where
   W is a constant the Executable runs it once and keeps the result.
2. ``<C>`` runs, in parallel over (image, panel of ``NR`` output channels, block of output
   rows), for each output row and each strip of ``MI`` pixels of that row, one call of
   ``outer_product_f32_taps_nhwc`` (``_s2`` for stride 2): for each window row, a ``KW * C``
   step loop broadcasting the strip's pixels against the panel's rows, the accumulators in
   registers for the whole window; the tile is stored straight into ``y[oh*OW + ow, oc]``
   (its rows are the strip's pixels, contiguous channels), then the fused elementwise
   epilogue (bias, residual add, ReLU) rewrites it while it is in L1. Where one panel's
   weights would not stay in cache across the strips (:func:`splits_window`: ResNet's 7x7
   stage), the window is cut into pieces of one tap and :func:`piece_channels` channels, each
   run over every strip of the block (the ``_acc`` variants adding to C), and the epilogue
   runs over the block after the last piece.

A 1x1 convolution of stride 2 (ResNet's projection shortcuts) takes the path too: its rows are
every other pixel, no view the template reads in place. Strips never cross an output row; a
row's last strip (``OW % MI`` pixels) and the last panel (``oc % NR`` channels) go through the
micro-kernel's ``MV`` and ``NC``. Which convolutions take the path by default:
:func:`prefers_direct_nhwc`.

>>> import numpy as np
>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> from tilecraft.passes.layout import choose_layout
>>> class Spec:
...     preferred_layouts = {"conv2d": "NHWC"}
>>> x = te.placeholder((1, 8, 9, 7), name="x")
>>> w = te.constant(np.ones((32, 8, 3, 3), np.float32), name="w")
>>> graph = choose_layout(Graph.from_outputs([ops.conv2d(x, w, padding=1, name="y")]), Spec())
>>> c = as_contraction(graph.tensor("y_nhwc"), broadcast_batch=True)
>>> g = nhwc_geometry(c)
>>> g.channels, g.height, g.width, g.out_height, g.out_width, g.kh, g.kw, g.stride
(8, 11, 9, 9, 7, 3, 3, 1)
>>> kernels = lower_direct_nhwc(c, 6, 32, LoweringOptions(vector_lanes=16), threads=2)
>>> [k.name for k in kernels], [p.name for p in kernels[1].params]
(['y_nhwc_wpacked_pack', 'y_nhwc'], ['y_pad_nhwc', 'y_nhwc_wpacked', 'y_nhwc'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import (
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
from tilecraft.te.expr import Expr, IterVar, Var, const
from tilecraft.te.functions import all_of, eq
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    contraction_kernel,
    nest,
    parallel_kind,
)
from tilecraft_x86_avx512.blocking.direct_conv import direct_row_blocks, shifted_index
from tilecraft_x86_avx512.blocking.register_tiles import pack_operand
from tilecraft_x86_avx512.blocking.transposed_conv1x1 import ragged_tiles
from tilecraft_x86_avx512.microkernels import NHWC_TAPS_ACC_BY_STRIDE, NHWC_TAPS_BY_STRIDE

if TYPE_CHECKING:
    from tilecraft_x86_avx512.blocking.epilogue import Epilogue

#: the register tile: ``MI`` pixels by ``NR`` output channels (the 6x64 of the GEMMs)
DEFAULT_MI = 6
DEFAULT_NR = 64
#: whether :func:`splits_window` may cut a window into pieces (a switch for measuring)
SPLIT_WINDOW = True


@dataclass(frozen=True)
class NhwcGeometry:
    """A channels-last convolution's shapes: input ``channels``, the padded activation's
    ``height x width``, the output's ``out_height x out_width``, the window ``kh x kw``, the
    ``stride`` (the same along both axes) and the reduction axes in the activation's order
    (window row, window column, channel; the window's extent-1 axes left out), and the
    ``images`` of the batch (the contraction's outermost rows)."""

    channels: int
    height: int
    width: int
    out_height: int
    out_width: int
    kh: int
    kw: int
    stride: int
    k_order: tuple[IterVar, ...]
    images: int = 1


def nhwc_geometry(contraction: Contraction) -> NhwcGeometry | None:
    """The convolution's :class:`NhwcGeometry` where it has the form this path computes — a
    ``y[n, oh, ow, oc] = sum xp[n, oh*s + kh, ow*s + kw, c] * W[kh, kw, c, oc]``, constant
    or not, stride 1 or 2 along both axes, no dilation, the padding already in ``xp``, more
    than one output row and column, and a window of more than one tap or a stride of 2 (a 1x1
    stride-1 convolution is a plain GEMM the template reads in place) — else ``None``."""
    c = contraction
    batch, _, _, _ = c.extents()
    if batch != 1 or len(c.m_axes) not in (2, 3) or len(c.n_axes) != 1:
        return None
    image_axis = c.m_axes[0] if len(c.m_axes) == 3 else None   # a batch: rows (n, oh, ow)
    oh, ow = c.m_axes[-2:]
    (oc,) = c.n_axes
    x, w = c.a, c.b
    if len(x.indices) != 4 or len(w.indices) != 4 or len(x.tensor.shape) != 4:
        return None
    first = x.indices[0]   # the image: the batch's axis, or 0 / an extent-1 axis for one image
    if image_axis is not None and first is not image_axis:
        return None
    if image_axis is None and not (isinstance(first, IterVar) and first.extent == 1 or
                                   getattr(first, "value", None) == 0):
        return None
    rows, cols = shifted_index(x.indices[1], oh), shifted_index(x.indices[2], ow)
    channel = x.indices[3]
    if rows is None or cols is None or rows[0] != cols[0] or rows[0] not in NHWC_TAPS_BY_STRIDE \
            or not isinstance(channel, IterVar) or channel not in c.k_axes:
        return None
    stride, kh, kw = rows[0], rows[1], cols[1]
    k_axes = set(c.k_axes)
    for window in (kh, kw):   # an extent-1 window axis is no reduction axis of the contraction
        if window is not None and window not in k_axes and window.extent != 1:
            return None
    window_axes = [a for a in (kh, kw) if a is not None and a in k_axes]
    if len(c.k_axes) != len(window_axes) + 1:
        return None
    for index, expected in zip(w.indices, (kh, kw, channel, oc)):
        if index is expected:
            continue
        unit = expected is None or (expected not in k_axes and expected.extent == 1)
        if unit and (getattr(index, "value", None) == 0 or
                     isinstance(index, IterVar) and index.extent == 1):
            continue
        return None
    kh_total = kh.extent if kh is not None else 1
    kw_total = kw.extent if kw is not None else 1
    if kh_total * kw_total == 1 and stride == 1:
        return None
    _, height, width, channels = x.tensor.shape
    if height < (oh.extent - 1) * stride + kh_total or \
            width < (ow.extent - 1) * stride + kw_total:
        return None
    return NhwcGeometry(channels, height, width, oh.extent, ow.extent, kh_total, kw_total,
                        stride, (*window_axes, channel),
                        image_axis.extent if image_axis is not None else 1)


def prefers_direct_nhwc(contraction: Contraction) -> bool:
    """Whether the path is the default: the form :func:`nhwc_geometry` accepts with constant
    weights (packed once, not per call) and output channels filling whole vectors."""
    geometry = nhwc_geometry(contraction)
    if geometry is None or not contraction.b.tensor.is_constant:
        return False
    _, _, channels_out, _ = contraction.extents()
    return channels_out % 16 == 0


def splits_window(geometry: NhwcGeometry, mi: int, nr: int, l2_bytes: int | None) -> bool:
    """Whether the window is cut into pieces (:data:`SPLIT_WINDOW`, :func:`piece_channels`):
    where the weights of one panel, ``KH * KW * C * NR`` floats, exceed half of L2
    (``l2_bytes``; ``None``: unknown), or where an output row holds fewer than two whole
    strips of ``mi`` pixels. Every strip streams the whole window's panel (ResNet's 7x7
    stage: 1.2 MB for each strip, of 6 pixels and of 1); cut into pieces, each piece's
    weights serve every strip of the block in turn from L1. Per kernel, 1 thread, Xeon
    family 6 model 167: 512 -> 512 at 7x7 2.03 -> 1.67 ms, the stride-2 256 -> 512 and
    1024 -> 2048 into 7x7 0.97 -> 0.81 and 1.65 -> 1.56; at 14x14 and 28x28 (3 and 5 strips
    a row) 1-2% slower.

    >>> g = NhwcGeometry(512, 9, 9, 7, 7, 3, 3, 1, ())
    >>> splits_window(g, 6, 64, 1 << 21), splits_window(g, 6, 64, None)
    (True, True)
    >>> wide = NhwcGeometry(256, 16, 16, 14, 14, 3, 3, 1, ())
    >>> splits_window(wide, 6, 64, 1 << 21), splits_window(wide, 6, 64, 1 << 19)
    (False, True)
    """
    panel = 4 * geometry.kh * geometry.kw * geometry.channels * nr
    return SPLIT_WINDOW and (geometry.out_width < 2 * mi or
                             (l2_bytes is not None and 2 * panel > l2_bytes))


def piece_channels(channels: int, nr: int, l1_bytes: int | None) -> int:
    """The input channels of one piece of a split window (one tap): as many as keep the
    piece's ``channels x NR`` weights in half of L1 (at least 16), in equal blocks.

    >>> piece_channels(512, 64, 49152), piece_channels(1024, 64, 32768)
    (86, 64)
    >>> piece_channels(40, 64, None)
    40
    """
    if l1_bytes is None:
        return channels
    most = max(16, (l1_bytes // 2) // (4 * nr) // 16 * 16)
    return ceil_div(channels, ceil_div(channels, most))


def lower_direct_nhwc(contraction: Contraction, mi: int, nr: int, options: LoweringOptions,
                      threads: int = 1, epilogue: Epilogue | None = None,
                      l1_bytes: int | None = None, l2_bytes: int | None = None
                      ) -> list[Kernel] | None:
    """The pack-W kernel and the main kernel (module docstring), or ``None`` where the
    convolution is not of this form or the epilogue re-indexes or casts ``C``. ``l2_bytes``
    decides whether the window is cut into pieces (:func:`splits_window`), ``l1_bytes`` their
    channels (:func:`piece_channels`)."""
    c = contraction
    geometry = nhwc_geometry(c)
    if geometry is None or (epilogue is not None and epilogue.local is not None):
        return None
    tensor = c.tensor
    _, pixels, out_channels, k_total = c.extents()
    images = geometry.images
    dtype = tensor.dtype
    level = options.param_level
    ic, hp, wp, stride = geometry.channels, geometry.height, geometry.width, geometry.stride
    kh_total, kw_total = geometry.kh, geometry.kw
    oh_total, ow_total = geometry.out_height, geometry.out_width
    micro_kernel = NHWC_TAPS_BY_STRIDE[stride]
    split = splits_window(geometry, mi, nr, l2_bytes)
    x_in = Buffer(c.a.tensor.name, (images, hp, wp, ic), c.a.tensor.dtype, level=level)
    pack = pack_operand(f"{tensor.name}_wpacked", c.b, tensor, c.batch_axes, c.n_axes,
                        geometry.k_order, nr, k_total, options,
                        role=f"pack W of {tensor.name}")
    packed = pack.params[-1]
    assert packed.shape[2] == k_total, "one reduction slice: the window's rows in order"
    packed_in = Buffer(packed.name, (1, packed.shape[1], kh_total, kw_total, ic, nr), dtype,
                       level=packed.level)
    out = Buffer(tensor.name, (1, pixels, out_channels), dtype, level=level) \
        if epilogue is None else epilogue.out
    panels = ceil_div(out_channels, nr)
    blocks = direct_row_blocks(images * panels, oh_total, threads)
    block_rows = ceil_div(oh_total, blocks)
    items = images * panels * blocks
    t, oh, s = Var("t"), Var("oh"), Var("s")
    image = t // (panels * blocks) if images > 1 else const(0)
    jr = t // blocks % panels if images > 1 else t // blocks
    out_row = (t % blocks) * block_rows + oh
    ow0 = s * mi
    n0 = jr * nr

    p0 = (image * oh_total + out_row) * ow_total + ow0 if images > 1 else \
        out_row * ow_total + ow0

    def call(rows: int, cols: int, name: str, tap: tuple[Expr, Expr], window: tuple[int, int],
             c0: Expr, channels: int) -> Stmt:
        """The micro-kernel on the ``window`` (rows, columns) of taps from ``tap`` and the
        ``channels`` input channels from ``c0``."""
        span = (rows - 1) * stride + window[1]
        operands = (Region(x_in, (image, out_row * stride + tap[0], ow0 * stride + tap[1], c0),
                           (1, window[0], span, channels)),
                    Region(packed_in, (const(0), jr, tap[0], tap[1], c0, const(0)),
                           (1, 1, window[0], window[1], channels, cols)),
                    Region(out, (const(0), p0, n0), (1, rows, cols)))
        return MicroKernelCall(name, operands,
                               (("MI", mi), ("NR", nr), ("KI", channels), ("MV", rows),
                                ("NC", cols), ("KH", window[0]), ("KW", window[1]),
                                ("AW", span)))

    # a split window: pieces of one tap and `kc` channels, the first written, the rest added
    r, q, cb = Var("r"), Var("q"), Var("cb")
    kc = piece_channels(ic, nr, l1_bytes)
    kc_blocks = ceil_div(ic, kc)
    kc_last = ic - (kc_blocks - 1) * kc

    def piece(rows: int, cols: int, channels: int) -> Stmt:
        args = ((r, q), (1, 1), cb * kc, channels)
        return IfThenElse(all_of(eq(r, 0), eq(q, 0), eq(cb, 0)),
                          call(rows, cols, micro_kernel.name, *args),
                          call(rows, cols, NHWC_TAPS_ACC_BY_STRIDE[stride].name, *args))

    def tile(rows: int, cols: int) -> Stmt:
        if split:
            return piece(rows, cols, kc) if kc_last == kc else \
                IfThenElse(cb < kc_blocks - 1, piece(rows, cols, kc),
                           piece(rows, cols, kc_last))
        whole = call(rows, cols, micro_kernel.name, (const(0), const(0)), (kh_total, kw_total),
                     const(0), ic)
        if epilogue is None:
            return whole
        return Seq((whole, epilogue.tile(const(0), p0, n0, rows, cols, options)))

    def over_block(per_tile: Callable[[int, int], Stmt]) -> Stmt:
        body = nest([(s, strips, LoopKind.SERIAL, 0)],
                    ragged_tiles(per_tile, ow0, ow_total, mi, n0, out_channels, nr))
        if oh_total % block_rows:
            body = IfThenElse(out_row < oh_total, body)
        return nest([(oh, block_rows, LoopKind.SERIAL, 0)], body)

    strips = ceil_div(ow_total, mi)
    body = over_block(tile)
    if split:
        body = nest([(r, kh_total, LoopKind.SERIAL, 0), (q, kw_total, LoopKind.SERIAL, 0),
                     (cb, kc_blocks, LoopKind.SERIAL, 0)], body)
        if epilogue is not None:   # once every piece is in
            body = Seq((body, over_block(lambda rows, cols: epilogue.tile(
                const(0), p0, n0, rows, cols, options))))
    body = nest([(t, items, parallel_kind(options, items), 0)], body)
    schedule = (f"direct NHWC {kh_total}x{kw_total} convolution (stride {stride}): "
                f"micro-kernel {micro_kernel.name} MI={mi} NR={nr} KI={ic}, padded activation "
                f"read in place, W packed: parallel({items}: "
                + (f"{images} images x " if images > 1 else "")
                + f"{panels} panels x {blocks} row blocks) > "
                + (f"window pieces({kh_total * kw_total} taps x {kc_blocks} x {kc} channels) > "
                   if split else "")
                + f"rows({block_rows}) > strips({strips})")
    params = [x_in, packed_in, out]
    if epilogue is not None:
        return [pack, epilogue.kernel(tensor, params, body, micro_kernel.name, schedule,
                                      options)]
    return [pack, contraction_kernel(tensor, params, body, micro_kernel.name, schedule, options)]


def lower_direct_nhwc_config(contraction: Contraction, config: dict[str, int],
                             options: LoweringOptions, threads: int,
                             epilogue: Epilogue | None = None, l1_bytes: int | None = None,
                             l2_bytes: int | None = None) -> list[Kernel] | None:
    """:func:`lower_direct_nhwc` with ``config``'s ``MI`` and ``NR`` where it names them, else
    the 6 x 64 tile (``NR`` narrowed to the output channels where they are fewer)."""
    if nhwc_geometry(contraction) is None:
        return None
    _, _, out_channels, _ = contraction.extents()
    nr = min(DEFAULT_NR, ceil_div(out_channels, 16) * 16)
    mi, nr = int(config.get("MI", DEFAULT_MI)), int(config.get("NR", nr))
    NHWC_TAPS_BY_STRIDE[1].resolve({"MI": mi, "NR": nr})
    return lower_direct_nhwc(contraction, mi, nr, options, threads, epilogue, l1_bytes,
                             l2_bytes)


__all__ = ["NhwcGeometry", "lower_direct_nhwc", "lower_direct_nhwc_config", "nhwc_geometry",
           "piece_channels", "prefers_direct_nhwc", "splits_window"]
