"""A 1x1 stride-1 convolution with few output channels, lowered transposed: the activation read
in place, the weights packed once.

The template (:mod:`.register_tiles`) lowers ``y[oc, p] = sum_c W[oc, c] * x[c, p]`` as
``C[m=oc, n=p]``: W read in place as rows, x packed into ``NR``-wide panels. Each packed
activation value then serves only ``M = oc`` rows; with few output channels (MobileNet-V2's
project convolutions: 24..320 of 96..960) the packing costs as much as the products. Here the
product is computed as ``C^T[m=p, n=oc] = sum_c x[c, p] * W^T[c, oc]``:

1. ``<C>_wpacked_pack`` packs ``W^T`` into panels ``[1, NB, K, NR]`` (zero-padded past
   ``oc``). It reads only W, so where W is a constant the Executable runs it once and keeps
   the result.
2. ``<C>`` runs, in parallel over blocks of ``MC`` pixels, for each panel of ``NR`` output
   channels and each strip of ``MI`` pixels: ``outer_product_f32_set`` with A = x viewed
   ``[K, P]`` read in place (row ``c`` of the strip at ``x + c * P + p0``), the whole
   reduction in one call, into a local ``MI x NR`` tile; the tile is then stored transposed
   into ``y[oc, p]`` (vectors along the pixels), through the elementwise epilogue when one is
   fused (:class:`~.epilogue.Epilogue` in its same-index mode: bias, residual add, ReLU6).
   Ragged pixels (``P % MI``) and channels (``oc % NR``) go through the micro-kernel's ``MV``
   and ``NC`` (masked vectors).

Which contractions take this path: :func:`prefers_transposed` (the ``TRANSPOSE`` template
parameter's default).

>>> from tilecraft import ops, te
>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.passes.contraction import as_contraction
>>> x = te.placeholder((1, 40, 7, 5), name="x")
>>> w = te.placeholder((24, 40, 1, 1), name="w")
>>> c = as_contraction(ops.conv2d(x, w, name="y"), broadcast_batch=True)
>>> kernels = lower_transposed(c, 6, 32, 12, LoweringOptions(vector_lanes=16))
>>> [k.name for k in kernels], [p.name for p in kernels[1].params]
(['y_wpacked_pack', 'y'], ['x', 'y_wpacked', 'y'])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    IfThenElse,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Stmt,
    Store,
)
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction
from tilecraft.te.expr import Expr, Var, const
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    contraction_kernel,
    nest,
    parallel_kind,
    vector_kind,
    without_unit_taps,
)
from tilecraft_x86_avx512.blocking.register_tiles import axis_groups_view, pack_operand
from tilecraft_x86_avx512.microkernels import (
    OUTER_PRODUCT_F32,
    OUTER_PRODUCT_F32_SET,
    register_blocking_candidates,
)

if TYPE_CHECKING:
    from tilecraft_x86_avx512.blocking.epilogue import Epilogue

#: the largest reduction taken in one micro-kernel call (the path has no ``KC`` slices)
MAX_K = 2048
#: output channels at most this fraction of the input channels take the path by default
MAX_OUT_IN_RATIO = 0.5
#: output channels at least this take the path by default
MIN_CHANNELS = 64
#: output channels times threads at most this take the path by default
MAX_CHANNEL_THREADS = 128
#: the widest register tile and the score kept by a tile leaving a ragged panel of channels
#: (:func:`transposed_tile`)
MAX_NR = 64
RAGGED_PANEL_FACTOR = 0.9


def activation_view(contraction: Contraction) -> Buffer | None:
    """The B operand (the activation) as a row-major ``[K, N]`` buffer (a batch-1 1x1
    stride-1 convolution's ``x[0, c, h, w]`` as ``[C, H*W]``), or ``None``: batched, or its
    dimensions are not the reduction then the columns, each in order (a 1x1 plane is a
    contraction whose rows are the one pixel: not this form)."""
    c = contraction
    batch, _, n_total, k_total = c.extents()
    if batch != 1 or not c.k_axes or not c.n_axes or k_total > MAX_K:
        return None
    kv, nv = Var("k"), Var("n")
    kept = (*c.k_axes, *c.n_axes)
    load = without_unit_taps(c.b, kept)   # x[n, c, h + rh, w + rw] read as x[n, c, h, w]
    found = axis_groups_view(load, [(c.batch_axes, const(0)), (c.k_axes, kv), (c.n_axes, nv)],
                             "param")
    if found is None:
        return None
    view, indices = found[0], found[1].indices
    if view.shape != (k_total, n_total) or indices[0] is not kv or indices[1] is not nv:
        return None
    return view


def prefers_transposed(contraction: Contraction, l2_bytes: int, threads: int = 1) -> bool:
    """Whether the transposed path is the default, where it measured faster (per kernel,
    MobileNet-V2 and ResNet-50 at 1 and 2 threads, Xeon family 6 model 167): the weights are a
    constant (packed once, not per call), the activation can be read in place
    (:func:`activation_view`) and fits in L2 (its rows are read a few pixels at a time, K
    streams the prefetcher cannot follow: ResNet's 56x56 layers, 256 x 3136 floats, ran
    1.1-1.6x slower), the output channels are at most :data:`MAX_OUT_IN_RATIO` of the input
    channels and the pixels, fill whole vectors (24 channels fill 1.5: MobileNet's 56x56
    projects ran 1.1-1.24x slower), are at least :data:`MIN_CHANNELS` and at most
    :data:`MAX_CHANNEL_THREADS` / ``threads``: 1 thread, 16-128 channels 0.6-0.95x, 256
    0.97-1.0x; 2 threads, 16-32 channels 0.7-1.0x, 64 0.94-1.1x, 96-256 1.01-1.11x (49 pixels
    with 160-512 channels: 1.04-1.18x at 1 thread) — against the template packing the
    activation. Against the template reading it in place (``PACK_B=0``), 16 and 32 channels
    lost, in MobileNet-V2 (Xeon family 6 model 167): the 16-channel project (112x112) 0.165 ms
    transposed, 0.129 in place at 1 thread, 0.089 and 0.073 at 2; the 32-channel ones (28x28)
    0.060-0.079 and 0.055-0.075 at 1 thread, 0.056-0.067 and 0.042-0.055 at 2. The 64- and
    96-channel ones stayed faster transposed (1 thread: 0.076 against 0.089, 0.172 against
    0.200).

    >>> import numpy as np
    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> x = te.placeholder((1, 192, 14, 14), name="x")
    >>> weights = lambda oc: te.constant(np.ones((oc, 192, 1, 1), np.float32))
    >>> conv = lambda w: as_contraction(ops.conv2d(x, w), broadcast_batch=True)
    >>> [prefers_transposed(conv(weights(oc)), 1 << 21) for oc in (64, 24, 32, 128)]
    [True, False, False, False]
    >>> prefers_transposed(conv(weights(64)), 1 << 21, threads=8)
    False
    >>> prefers_transposed(conv(te.placeholder((64, 192, 1, 1))), 1 << 21)
    False
    """
    _, channels, pixels, k_total = contraction.extents()
    return (contraction.a.tensor.is_constant and activation_view(contraction) is not None
            and channels <= MAX_OUT_IN_RATIO * k_total and channels % 16 == 0
            and channels >= MIN_CHANNELS
            and channels <= pixels and channels * threads <= MAX_CHANNEL_THREADS
            and 4 * k_total * pixels <= l2_bytes)


def transposed_tile(pixels: int, channels: int, k: int, registers: int = 30) -> tuple[int, int]:
    """``(MI, NR)``: Eq. 3.4's best register tile for ``pixels`` x ``channels``, discounted
    by the padding it wastes on both (the micro-kernel computes only the vectors holding
    channels of a ragged panel) and by :data:`RAGGED_PANEL_FACTOR` where the channels leave a
    ragged panel, ``NR`` at most :data:`MAX_NR`. 576 -> 96 channels, 14x14, 1 thread, Xeon
    family 6 model 167, against the template (1.00): 6x64 (a ragged 32-wide panel) 0.85,
    4x96 0.82, 8x48 0.74.

    >>> transposed_tile(12544, 16, 32), transposed_tile(784, 32, 192), transposed_tile(196, 96, 576)
    ((28, 16), (13, 32), (8, 48))
    """
    best, chosen = -1.0, (6, 64)
    mi_max = OUTER_PRODUCT_F32.parameters["MI"].maximum or registers
    for b in register_blocking_candidates(registers, ki=min(k, 256)):
        nr = b.ni * 16
        if nr not in OUTER_PRODUCT_F32.parameters["NR"].choices or b.mi > mi_max or \
                nr > min(MAX_NR, ceil_div(channels, 16) * 16):  # vectors past the channels idle
            continue
        m_use = pixels / (ceil_div(pixels, b.mi) * b.mi)
        n_use = channels / (channels // nr * nr + ceil_div(channels % nr, 16) * 16)
        score = b.intensity * m_use * n_use * (RAGGED_PANEL_FACTOR if channels % nr else 1.0)
        if score > best + 1e-9:
            best, chosen = score, (b.mi, nr)
    return chosen


def transposed_rows(pixels: int, mi: int, threads: int, k: int, l2_bytes: int) -> int:
    """``MC``: pixels per parallel block, a multiple of ``mi``, the block's ``K x MC`` slice of
    the activation in half of L2, the blocks in whole rounds of the threads.

    >>> transposed_rows(3136, 14, 2, 144, 1 << 21), transposed_rows(49, 6, 2, 960, 1 << 21)
    (1568, 30)
    """
    cap = max(mi, (l2_bytes // 2) // (4 * k) // mi * mi)
    blocks = ceil_div(pixels, cap)
    while blocks % threads and blocks < ceil_div(pixels, mi):
        blocks += 1
    return max(mi, ceil_div(ceil_div(pixels, blocks), mi) * mi)


def store_transposed(local: Buffer, out: Buffer, epilogue: Epilogue | None, n0: Expr, p0: Expr,
                     rows: int, cols: int, options: LoweringOptions,
                     by_channel: bool = False) -> Stmt:
    """The ``rows x cols`` tile ``local[0, row, col]`` (pixels by output channels) stored
    transposed at ``out[0, n0 + col, p0 + row]`` — one vector of the tile's pixels per output
    channel — through ``epilogue`` where there is one. ``by_channel``: the tile is held
    channels by pixels already, ``local[0, col, row]`` (a micro-kernel that stored it
    transposed), so each channel's vector is a contiguous load."""
    row, col = Var("trow"), Var("tcol")
    value = BufferLoad(local, (const(0), col, row) if by_channel else (const(0), row, col))
    store = Store(out, (const(0), n0 + col, p0 + row), value) if epilogue is None else \
        epilogue.store_value(const(0), n0 + col, p0 + row, value)
    lanes = max(1, options.lanes(local.dtype))
    return nest([(col, cols, LoopKind.SERIAL, 0), (row, rows, vector_kind(options), lanes)],
                store)


def ragged_tiles(tile: Callable[[int, int], Stmt], p0: Expr, pixels: int, mi: int, n0: Expr,
                 channels: int, nr: int) -> Stmt:
    """``tile(rows, cols)`` for the strip of ``mi`` pixels at ``p0`` and the panel of ``nr``
    channels at ``n0``: the whole tile, or where the strip passes ``pixels`` or the panel
    passes ``channels``, the tile of the ``pixels % mi`` / ``channels % nr`` left (static
    extents, chosen at run time)."""
    def by_cols(rows: int) -> Stmt:
        ragged = channels % nr
        return tile(rows, nr) if not ragged else \
            IfThenElse(n0 + nr <= channels, tile(rows, nr), tile(rows, ragged))

    ragged_rows = pixels % mi
    return by_cols(mi) if not ragged_rows else \
        IfThenElse(p0 + mi <= pixels, by_cols(mi), by_cols(ragged_rows))


def lower_transposed(contraction: Contraction, mi: int, nr: int, mc: int,
                     options: LoweringOptions, epilogue: Epilogue | None = None
                     ) -> list[Kernel] | None:
    """The pack-W kernel and the main kernel (module docstring), or ``None`` where the
    activation cannot be read in place or the epilogue re-indexes or casts ``C``."""
    c = contraction
    x_view = activation_view(c)
    if x_view is None or (epilogue is not None and epilogue.local is not None):
        return None
    tensor = c.tensor
    _, channels, pixels, k_total = c.extents()
    dtype = tensor.dtype
    level = options.param_level
    mc = max(mi, mc // mi * mi)
    x_in = Buffer(x_view.name, x_view.shape, x_view.dtype, level=level)
    pack = pack_operand(f"{tensor.name}_wpacked", c.a, tensor, c.batch_axes, c.m_axes,
                        c.k_axes, nr, k_total, options, role=f"pack W^T of {tensor.name}")
    packed = pack.params[-1]
    packed_in = Buffer(packed.name, packed.shape, dtype, level=packed.level)
    out = Buffer(tensor.name, (1, channels, pixels), dtype, level=level) if epilogue is None \
        else epilogue.out
    local = Buffer(f"{tensor.name}_ttile", (1, mi, nr), dtype,
                   level=options.register_level or level)
    t, jr, ir = Var("t"), Var("jr"), Var("ir")
    blocks, strips, panels = ceil_div(pixels, mc), mc // mi, ceil_div(channels, nr)
    p0 = t * mc + ir * mi
    n0 = jr * nr

    def tile(rows: int, cols: int) -> Stmt:
        operands = (Region(x_in, (const(0), p0), (k_total, rows)),
                    Region(packed_in, (const(0), jr, const(0), const(0)), (1, 1, k_total, cols)),
                    Region(local, (const(0), const(0), const(0)), (1, rows, cols)))
        call = MicroKernelCall(OUTER_PRODUCT_F32_SET.name, operands,
                               (("MI", mi), ("NR", nr), ("KI", k_total), ("MV", rows),
                                ("NC", cols)))
        return Seq((call, store_transposed(local, out, epilogue, n0, p0, rows, cols, options)))

    body = ragged_tiles(tile, p0, pixels, mi, n0, channels, nr)
    if pixels % mc or pixels % mi:
        body = IfThenElse(p0 < pixels, body)
    body = Allocate(local, body)
    body = nest([(t, blocks, parallel_kind(options, blocks), 0),
                 (jr, panels, LoopKind.SERIAL, 0), (ir, strips, LoopKind.SERIAL, 0)], body)
    schedule = (f"transposed 1x1: micro-kernel {OUTER_PRODUCT_F32_SET.name} MI={mi} NR={nr} "
                f"KC={k_total} MC={mc}, activation read in place, W^T packed: "
                f"parallel({blocks}) > panels({panels}) > strips({strips}), tiles stored "
                "transposed")
    params = [x_in, packed_in, out]
    finish = contraction_kernel if epilogue is None else epilogue.kernel
    return [pack, finish(tensor, params, body, OUTER_PRODUCT_F32_SET.name, schedule, options)]


__all__ = ["MAX_CHANNEL_THREADS", "MAX_K", "MAX_NR", "MAX_OUT_IN_RATIO", "MIN_CHANNELS",
           "RAGGED_PANEL_FACTOR", "activation_view", "lower_transposed", "lower_transposed_config",
           "prefers_transposed", "ragged_tiles", "store_transposed", "transposed_rows",
           "transposed_tile"]


def lower_transposed_config(contraction: Contraction, config: dict[str, int],
                            options: LoweringOptions, l2_bytes: int, threads: int,
                            epilogue: Epilogue | None = None) -> list[Kernel] | None:
    """:func:`lower_transposed` with ``config``'s ``MI``, ``NR``, ``MC`` where it names them
    (a tuner's point with ``TRANSPOSE=1``), else :func:`transposed_tile` and
    :func:`transposed_rows`."""
    _, channels, pixels, k_total = contraction.extents()
    mi, nr = transposed_tile(pixels, channels, k_total)
    mi, nr = int(config.get("MI", mi)), int(config.get("NR", nr))
    OUTER_PRODUCT_F32.resolve({"MI": mi, "NR": nr})
    mc = int(config.get("MC", transposed_rows(pixels, mi, threads, k_total, l2_bytes)))
    return lower_transposed(contraction, mi, nr, mc, options, epilogue)
