"""The x86 schedule template for contractions (thesis §4.5 with §3.4's micro-kernel).

A compute that :func:`~tilecraft.passes.contraction.as_contraction` recognises (matmul, batch
matmul, dense, batch-1 convolutions through implicit im2col packing) is lowered to packing plus the
``outer_product_f32`` register-tile micro-kernel. The template's free parameters — what the
tuner searches — are ``MI`` and ``NR`` (the register tile, candidates from Eq. 3.4), ``KC`` (the
reduction slice, sized for L1) and ``MC`` (rows of A packed at once, sized for L2 and for an
even split across cores). ``PACK_A`` (default 0) says whether A is packed: where A is a
row-major matrix (a matmul's A, a convolution's weights) the ``outer_product_f32_rows`` variant
reads it in place, which measured faster on every shape tried (1.2x on 256^3, 1.1x on 2048^3,
1.7-3.3x on late convolution layers with 196 or 49 output pixels, where packing A — a strided
gather — cost more than the products). ``PACK_B`` (default :func:`reads_b_in_place`: B is not
a constant, is a row-major matrix, and C has few rows or B's panel fits in L1) says whether B
is packed; ``PACK_B=0`` reads it in place too. ``NC`` > 0 packs B inside the parallel loop, ``NC``
panels at a time (:mod:`~tilecraft_x86_avx512.blocking.block_packed`; with ``PACK_B=0`` it
reads those blocks in place), instead of all of B first into a workspace: the default for a
convolution's im2col operand with enough panels (1.45x on YOLO-v1's first layer, whose im2col
matrix is 29 MB; 5-20% on the 3x3 layers). Without a config, a 1x1 convolution with many
input channels on a small map (:func:`~tilecraft_x86_avx512.blocking.split_k.prefers_split_k`:
MobileNet-V2's projections, whose input the threads wrote split by channel) splits its
reduction across the threads and adds the partials
(:mod:`~tilecraft_x86_avx512.blocking.split_k`). ``TRANSPOSE``
(default :func:`~tilecraft_x86_avx512.blocking.transposed_conv1x1.prefers_transposed`: a 1x1
stride-1 convolution with constant weights and few output channels) computes ``C^T`` instead,
the activation read in place and the weights packed once
(:mod:`~tilecraft_x86_avx512.blocking.transposed_conv1x1`). ``DIRECT`` (default
:func:`~tilecraft_x86_avx512.blocking.direct_conv.prefers_direct`: a KxK convolution of stride 1
or 2 with constant weights) skips the im2col: the padded activation is read in place at each
tap's shift by the ``outer_product_f32_taps`` micro-kernels
(:mod:`~tilecraft_x86_avx512.blocking.direct_conv`). ``WINOGRAD`` (default
:func:`~tilecraft_x86_avx512.blocking.winograd.prefers_winograd`: a 3x3 convolution of stride 1
on a map of many tiles) runs F(4x4, 3x3), its 36 products on this template with its default
blocking (:mod:`~tilecraft_x86_avx512.blocking.winograd`).

Contractions of narrow types take the dot-product micro-kernels instead
(:mod:`~tilecraft_x86_avx512.blocking.dot_product`): uint8/int8 operands with an int32 result go to
``vnni_u8s8`` or ``vnni_s8u8`` (``vpdpbusd`` multiplies unsigned by signed bytes). When both
operands have the same signedness one of them is shifted by 128 and the result compensated:
B while it is packed anyway, when A is read in place (the compensation's row sums of A come
from the ``vnni_row_sums`` micro-kernel), otherwise A. bfloat16 operands go to ``dot_bf16``.
The blocking is the same model with the operand's element size; ``NC`` > 0 packs an int8
GEMM's B inside the main kernel, per block of panels (:func:`grouped_block_panels`).

>>> from tilecraft import ops, te
>>> from tilecraft.passes.contraction import as_contraction
>>> c = as_contraction(ops.matmul(te.placeholder((100, 64), name="A"),
...                               te.placeholder((64, 48), name="B")))
>>> default_config(c, l1_bytes=49152, l2_bytes=1048576, threads=2)
{'MI': 6, 'NR': 64, 'KC': 64, 'MC': 54, 'PACK_A': 0, 'PACK_B': 0, 'NC': 0}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tilecraft.dtypes import DType
from tilecraft.errors import LoweringError
from tilecraft.kernel_ir.nodes import Kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import (
    Contraction,
    DotProductContraction,
    as_contraction,
    as_dot_product_contraction,
)
from tilecraft.te.expr import IterVar, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512.blocking import split_k
from tilecraft_x86_avx512.blocking.amx_split import amx_split_applies, lower_amx_split
from tilecraft_x86_avx512.blocking.block_packed import lower_block_packed
from tilecraft_x86_avx512.blocking.direct_conv import (
    direct_geometry,
    lower_direct_config,
    prefers_direct,
)
from tilecraft_x86_avx512.blocking.direct_nhwc import (
    lower_direct_nhwc_config,
    nhwc_geometry,
    prefers_direct_nhwc,
)
from tilecraft_x86_avx512.blocking.dot_product import (
    lower_dot_product_contraction,
    reads_a_in_place,
)
from tilecraft_x86_avx512.blocking.register_tiles import (
    Blocking,
    b_row_view,
    lower_contraction,
)
from tilecraft_x86_avx512.blocking.transposed_conv1x1 import (
    activation_view,
    lower_transposed_config,
    prefers_transposed,
)
from tilecraft_x86_avx512.blocking.winograd import (
    lower_winograd,
    prefers_winograd,
    winograd_shape,
)
from tilecraft_x86_avx512.microkernels import (
    DOT_BF16,
    OUTER_PRODUCT_F32,
    OUTER_PRODUCT_F32_ROWS,
    VNNI_ROW_SUMS_S8,
    VNNI_ROW_SUMS_U8,
    VNNI_S8U8,
    VNNI_U8S8,
    register_blocking_candidates,
)

#: below this many flops the default loop nest is as good and compiles faster
MIN_FLOPS = 2 * 32 * 32 * 32
#: a product with fewer rows or columns than this is a matrix-vector product in disguise
MIN_SIDE = 4
CONFIG_KEYS = ("MI", "NR", "KC", "MC", "PACK_A", "PACK_B", "NC", "SPLIT_K", "TRANSPOSE",
               "DIRECT", "WINOGRAD")
#: zmm registers Eq. 3.4 leaves free: with all 32 in the tile's budget (4 x 96: 24 accumulators,
#: 6 B vectors, a broadcast) LLVM's scheduler loads the next k step's B vectors early and spills
#: an accumulator to the stack every step. 512x768x768 with constant B, 1 thread, Xeon
#: (Sapphire Rapids): 4 x 96 117 GFLOP/s, 6 x 64 (29 registers) 140-155
SPARE_REGISTERS = 2


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tile_candidates(contraction: Contraction, registers: int = 32,
                    count: int = 12) -> list[tuple[int, int]]:
    """``(MI, NR)`` register tiles, best first: Eq. 3.4's intensity discounted by the padding a
    tile wastes on this problem's M and N (on N, up to whole vectors: the micro-kernel computes
    only the vectors of a ragged panel's columns), with :data:`SPARE_REGISTERS` of the
    ``registers`` left to the scheduler."""
    _, m, n, k = contraction.extents()
    scored = []
    mi_max = OUTER_PRODUCT_F32.parameters["MI"].maximum or registers
    for b in register_blocking_candidates(registers - SPARE_REGISTERS, ki=min(k, 256)):
        nr = b.ni * 16
        if nr not in OUTER_PRODUCT_F32.parameters["NR"].choices or b.mi > mi_max:
            continue
        m_use = m / (_ceil_div(m, b.mi) * b.mi)
        # the ragged last panel computes only the vectors holding its columns
        n_use = n / (n // nr * nr + _ceil_div(n % nr, 16) * 16)
        scored.append((b.intensity * m_use * n_use, b.mi, nr))
    scored.sort(key=lambda s: (-s[0], -s[1] * s[2]))
    return [(mi, nr) for _, mi, nr in scored[:count]]


#: :func:`splits_rows`: at least this many rows of C, at most this many columns
ROW_SPLIT_MIN_ROWS = 96
ROW_SPLIT_MAX_COLUMNS = 784


def splits_rows(contraction: Contraction) -> bool:
    """Whether a contraction whose B is read in place (``PACK_B=0``) in blocks of ``NC``
    panels — blocks that then pack nothing and only split the columns among the threads — runs
    without them (``NC=0``: the threads split the rows of C, balanced by :func:`_balanced_rows`):
    C has at least :data:`ROW_SPLIT_MIN_ROWS` rows and at most :data:`ROW_SPLIT_MAX_COLUMNS`
    columns. A 28x28 map is 12.25 panels of 64: blocks of 7 gave one thread 448 columns and
    the other 336; split by rows, the threads also write the channels a channel-split
    depthwise kernel after the 1x1 convolution reads on the same thread. MobileNet-V2's 28x28
    expansions (192 rows), Xeon family 6 model 167, same process alternating: 2 threads
    3.865 -> 3.806 ms, 1 thread 6.571 -> 6.559. Larger maps lose (its 112x112 expansion,
    96 x 12544: 0.18 -> 0.42 ms at 2 threads, each thread streaming all of B).

    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> w = te.placeholder((192, 32, 1, 1), name="w")
    >>> [splits_rows(as_contraction(ops.conv2d(te.placeholder((1, 32, s, s), name="x"), w)))
    ...  for s in (28, 56)]
    [True, False]
    """
    _, m, n, _ = contraction.extents()
    return m >= ROW_SPLIT_MIN_ROWS and n <= ROW_SPLIT_MAX_COLUMNS


def default_config(contraction: Contraction, l1_bytes: int, l2_bytes: int,
                   threads: int) -> dict[str, int]:
    """The template's parameters without tuning: the best register tile, ``KC`` as long as a
    ``KC x NR`` panel of B fits an eighth of L2 (all of ``K`` when a whole panel fits half) —
    or, where B is packed per block of ``NC`` panels inside the kernel, as long as the block
    fits a quarter of L2 — and at least what half of L1 holds; ``MC`` so that the A block
    fits half of L2 and every core gets work, A read in place (``PACK_A=0``) where it can be,
    and B packed per block of ``NC`` panels where it is read through an im2col-like index
    (:func:`block_panels`) — unless B is read in place anyway and :func:`splits_rows` says the
    threads should split the rows of C rather than its columns.

    ``KC`` is sized for L2, not L1: each ``KC`` slice loads and stores every tile of C once,
    and C (an FFN's 512 x 3072) is far larger than L2, while the micro-kernel reads one
    ``NR``-wide row of the B panel per ``MI`` broadcasts, which L2 feeds easily. 512x768x3072,
    1 thread, Xeon (Sapphire Rapids, 2 MB L2): KC 64 (half of L1) 102 GFLOP/s, 768 142;
    ResNet-18's 3x3 convolutions of stage 4 (K = 4608) 3.4 -> 2.5 ms each. But ``KC`` is also
    at most what keeps the ``MI x KC`` strip of A (read in place) in half of L1: with all of an
    FFN's K = 3072 in one slice the strip (72 KB) and the panel both streamed from L2.
    Whole layers, 1 thread, Xeon family 6 model 167, A/B alternating in one process:
    transformer_large 132.4 -> 109.0 ms, transformer_base 65.3 -> 62.3, bert_base 67.7 -> 65.4
    (its FFN down projection, 512x768x3072: KC 3072 MC 78 -> KC 1024 MC 258).
    """
    tile = tile_candidates(contraction)[0]
    nc = block_panels(contraction, tile[1], threads)
    config = _config(contraction, l1_bytes, l2_bytes, threads, tile, nc)
    if nc and not config["PACK_B"] and splits_rows(contraction):
        rows = _config(contraction, l1_bytes, l2_bytes, threads, tile, 0)
        if not rows["PACK_B"]:
            return rows
    return config


def _config(contraction: Contraction, l1_bytes: int, l2_bytes: int, threads: int,
            tile: tuple[int, int], nc: int) -> dict[str, int]:
    """:func:`default_config` with the register tile ``(MI, NR)`` and ``NC`` given."""
    batch, m, _, k = contraction.extents()
    mi, nr = tile
    kc_l1 = max(16, min(k, (l1_bytes // 2) // (4 * nr) // 16 * 16 or 16))
    if nc:
        kc = max(kc_l1, min(k, (l2_bytes // 4) // (4 * nr * nc) // 16 * 16))
    else:
        kc = k if k * nr * 4 <= l2_bytes // 2 else \
            max(kc_l1, min(k, (l2_bytes // 8) // (4 * nr) // 16 * 16))
    kc = min(kc, OUTER_PRODUCT_F32.parameters["KI"].maximum or kc)  # the micro-kernel's bound
    # A is read in place (PACK_A=0): the strip of MI rows a micro-kernel call reads must stay
    # in half of L1 while the B panel streams from L2
    kc = min(kc, max(kc_l1, (l1_bytes // 2) // (4 * mi) // 16 * 16))
    mc = max(mi, (l2_bytes // 2) // (4 * kc) // mi * mi)
    rows_per_thread = _ceil_div(m * batch, threads) if batch < threads else m
    if not nc and CONSTANT_B_ONE_BLOCK and contraction.b.tensor.is_constant:
        mc = max(mc, constant_b_rows(rows_per_thread, mi, kc, l2_bytes))
    mc = min(mc, _ceil_div(rows_per_thread, mi) * mi)
    return {"MI": mi, "NR": nr, "KC": kc, "MC": _balanced_rows(m, batch, mc, mi, threads),
            "PACK_A": 0, "PACK_B": int(not reads_b_in_place(contraction, kc, nr, l1_bytes)),
            "NC": nc}


#: switch for :func:`reads_b_in_place` (kept for same-process A/B measurements)
B_IN_PLACE = True
#: at most this many rows of C read B in place whatever its panel's size (each packed value of
#: B would serve few rows: the packing costs more than the strided reads)
IN_PLACE_MAX_ROWS = 96


def reads_b_in_place(contraction: Contraction, kc: int, nr: int, l1_bytes: int) -> bool:
    """Whether the template reads B in place by default (``PACK_B=0``): B is not a constant
    (a constant is packed once, by a kernel the Executable runs at install time), is a
    row-major ``[batch?, K, N]`` view of its tensor (:func:`.register_tiles.b_row_view`), and
    C has at most :data:`IN_PLACE_MAX_ROWS` rows, or a ``KC x NR`` panel of B fits half of L1
    (read from B's rows once, then from L1 by every strip), or B is one panel wide (its rows
    are the panel's, contiguous: MobileNet-V2's 7x7 layers, 49 columns). Otherwise each strip
    streams the panel from L2 along B's strided rows instead of packed ones. 1 thread, Xeon family 6
    model 167, matmul with B an input, in place / packed: 24x144x3136 0.70, 32x512x512 0.71,
    96x576x196 0.87, 64x64x1024 0.88, 576x96x196 1.03, 256^3 1.10, 512^3 1.18, 128x128x4096
    1.20, 1024^3 2.85 (rows 4 KB apart: every row of the panel in the same L1 sets).

    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> mm = lambda m, k, n: as_contraction(ops.matmul(te.placeholder((m, k)),
    ...                                                te.placeholder((k, n))))
    >>> [reads_b_in_place(mm(*shape), 512, 64, 49152) for shape in
    ...  ((24, 144, 3136), (576, 96, 196), (320, 960, 49), (512, 512, 512))]
    [True, True, True, False]
    """
    if not B_IN_PLACE:
        return False
    _, m, n, k = contraction.extents()
    if m > IN_PLACE_MAX_ROWS and 4 * min(k, kc) * nr > l1_bytes // 2 and n > nr:
        return False
    return b_readable_in_place(contraction)


def b_readable_in_place(contraction: Contraction) -> bool:
    """Whether the template can read B in place at all (``PACK_B=0`` is a choice): B is not a
    constant and is a row-major ``[batch?, K, N]`` view of its tensor."""
    return not contraction.b.tensor.is_constant and \
        b_row_view(contraction, const(0), Var("k0"), Var("n0"), "param") is not None


#: switch for :func:`constant_b_rows` (kept for same-process A/B measurements)
CONSTANT_B_ONE_BLOCK = True
#: how many times L2 the A block of :func:`constant_b_rows` may span
CONSTANT_B_A_BLOCK_L2 = 2


def constant_b_rows(rows_per_thread: int, mi: int, kc: int, l2_bytes: int) -> int:
    """``MC`` where B is a constant (a layer's weights, packed once): each thread's rows in one
    block, so each thread streams the packed weights once per ``KC`` slice instead of once
    per block, while the ``MC x KC`` block of A (read in place, row strips the prefetcher
    follows) spans at most :data:`CONSTANT_B_A_BLOCK_L2` times L2. In a network the weights
    of a layer are not in any cache when it runs (a transformer layer's are 28-50 MB), so every
    block pays for them from memory; A, just written by the producer, is mostly in L2 and L3.
    BERT's FFN down projection (512 x 768 x 3072) after its up projection, 1 thread, Xeon
    family 6 model 167, same process alternating: 3 blocks of 174 rows 17.19 ms, one block of
    516 15.58 (isolated, weights warm in L3, the two are within 2%).

    >>> constant_b_rows(512, 6, 1024, 1 << 21), constant_b_rows(4096, 6, 1024, 1 << 21)
    (516, 1020)
    """
    cap = CONSTANT_B_A_BLOCK_L2 * l2_bytes // (4 * kc) // mi * mi
    return max(mi, min(_ceil_div(rows_per_thread, mi) * mi, cap))


#: how much larger than the L2-sized ``MC`` a block may grow to make one round fewer
#: (:func:`_balanced_rows`): BERT's FFN down projection, 512 x 768 x 3072 on 2 threads, ``MC``
#: 252 by L2: 4 blocks of 132 rows 277 GFLOP/s, 2 of 258 297 (Xeon family 6 model 167)
BLOCK_SLACK = 0.05


def _balanced_rows(m: int, batch: int, mc: int, mi: int, threads: int) -> int:
    """``MC`` at most ``mc`` whose blocks of rows (times ``batch``: the parallel loop's
    iterations) come in whole rounds of the threads while there are few of them, and are of
    about one size (no sliver of a last block): 512 rows in
    blocks of 252 were 3 blocks on 2 threads, one thread computing 504 rows and the other 8
    (ResNet-18's 7x7 stage and BERT's FFN down projection ran no faster on 2 threads than on 1);
    a round fewer where the blocks then outgrow ``mc`` by :data:`BLOCK_SLACK` at most (those
    512 rows: 2 blocks of 258, not 4 of 132).

    >>> _balanced_rows(512, 1, 252, 6, 2), _balanced_rows(512, 1, 84, 6, 2)
    (258, 66)
    >>> _balanced_rows(100, 1, 54, 6, 2), _balanced_rows(512, 1, 252, 6, 1)
    (54, 174)
    """
    blocks = _ceil_div(m, mc)
    if batch < 4 * threads:
        fewer = blocks - (batch * blocks) % threads if blocks > threads else 0
        while (batch * blocks) % threads and blocks < m:
            blocks += 1
        # a round of fewer, larger blocks where they outgrow ``mc`` by a few rows only
        if fewer and (batch * fewer) % threads == 0 \
                and _ceil_div(_ceil_div(m, fewer), mi) * mi <= mc * (1 + BLOCK_SLACK):
            blocks = fewer
    return max(mi, _ceil_div(_ceil_div(m, blocks), mi) * mi)


#: panels of B packed at once inside the parallel loop (a 64 x 80 slice is 20 KB: 8 of them
#: stay in L2 next to the A block), and the fewest panels per thread that make it pay
BLOCK_PANELS = 8
MIN_PANELS_PER_THREAD = 4


def block_panels(contraction: Contraction, nr: int, threads: int) -> int:
    """``NC`` for :func:`default_config`: 0 (B packed first, by its own kernel) unless B is read
    through computed indices (a convolution's ``x[c, oh + rh, ow + rw]``: its packing is an
    im2col as large as the output times the reduction) and has at least
    :data:`MIN_PANELS_PER_THREAD` panels per thread; then the panels per block, from
    :data:`BLOCK_PANELS` down to half of it, that load the busiest thread least (the parallel
    loop hands each thread a contiguous run of blocks, the last block may be short), the
    largest such. 49 panels (ResNet's 56x56 stage) on 2 threads: 7 blocks of 7 gave one thread
    28 panels and the other 21; 10 blocks of 5 give 25 and 24.

    >>> from tilecraft import ops, te
    >>> from tilecraft.passes.contraction import as_contraction
    >>> x = te.placeholder((1, 64, 56, 56), name="x")
    >>> w = te.placeholder((128, 64, 3, 3), name="w")
    >>> conv = as_contraction(ops.conv2d(x, w, padding=1))
    >>> [block_panels(conv, 64, threads) for threads in (1, 2, 3, 32)]
    [8, 5, 6, 0]
    """
    batch, _, n, _ = contraction.extents()
    panels = _ceil_div(n, nr)
    im2col = any(not isinstance(index, IterVar) for index in contraction.b.indices)
    if not im2col or panels < MIN_PANELS_PER_THREAD * threads:
        return 0

    def busiest(per_block: int) -> int:
        """Panels of the thread with the most (blocks of all images split in whole runs)."""
        blocks = _ceil_div(panels, per_block)
        runs = _ceil_div(batch * blocks, threads)
        return min(runs * per_block, batch * panels)

    sizes = range(BLOCK_PANELS, max(1, BLOCK_PANELS // 2) - 1, -1)
    return min(sizes, key=lambda size: (busiest(size), -size))


def grouped_default_config(grouped: DotProductContraction, l2_bytes: int,
                           threads: int) -> dict[str, int]:
    """The dot-product template's parameters without tuning. A step of ``vpdpbusd`` eats 4
    ``k`` per lane, so a ``KC x NR`` panel of B is 4x (bf16: 2x) smaller than in float32 for
    the same work; ``KC`` takes the whole ``k`` while the panel fits half of L2 (one slice: a
    tile is computed in registers and stored once, the panel streams from L2; slices of an
    eighth of L2 took 10% longer on ResNet-18's 7x7 layers, K = 2304 and 4608), else slices
    of an eighth of L2; ``MC`` rows of A (the block fits 5/8 of L2 less the panel) split
    evenly over the threads. (Half of L2 split 1024 rows of 1 KiB into 4 blocks on two
    threads, where one block per thread measured 1.5% faster.)

    >>> from tilecraft import ops, te
    >>> A = te.placeholder((1024, 1024), "uint8", name="A")
    >>> B = te.placeholder((1024, 1024), "int8", name="B")
    >>> g = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32"))
    >>> grouped_default_config(g, l2_bytes=1048576, threads=2)
    {'MI': 6, 'NR': 64, 'KC': 1024, 'MC': 516, 'NC': 8}
    """
    batch, m, n, k = grouped.contraction.extents()
    element = 4 // grouped.group
    mi, nr = _grouped_tile(grouped.contraction)
    kc = k if k * nr * element <= l2_bytes // 2 else \
        min(k, max(64, (l2_bytes // 8) // (element * nr) // 64 * 64))
    a_bytes = max(l2_bytes // 8, l2_bytes * 5 // 8 - kc * nr * element)
    mc = max(mi, a_bytes // (element * kc) // mi * mi)
    blocks = _ceil_div(m, mc)
    if batch < 4 * threads:   # whole rounds of blocks for every thread
        while (batch * blocks) % threads and blocks < m:
            blocks += 1
    mc = max(mi, _ceil_div(_ceil_div(m, blocks), mi) * mi)
    nc = grouped_block_panels(grouped, nr, kc, l2_bytes, threads)
    return {"MI": mi, "NR": nr, "KC": kc, "MC": mc, "NC": nc}


def grouped_block_panels(grouped: DotProductContraction, nr: int, kc: int, l2_bytes: int,
                         threads: int) -> int:
    """``NC`` for :func:`grouped_default_config`: B packed inside the main kernel, per block of
    ``NC`` panels (one kernel, each thread packing its own panels: 1.5-5% faster on int8 GEMMs
    of 512^3-2048^3 at two threads than packing B first by a kernel of its own, whose 2-thread
    scaling is poor and which costs a second call), for int8 with A read in place. The blocks
    hold all of ``k`` of their panels in at most half of L2, come in whole rounds of the
    threads (with batch), and may leave at most 1/8 of the last round idle; else 0 (B packed
    first: tall, narrow products with fewer panels than that).

    >>> from tilecraft import ops, te
    >>> A = te.placeholder((512, 512), "uint8", name="A")
    >>> B = te.placeholder((512, 100), "int8", name="B")
    >>> g = as_dot_product_contraction(ops.matmul(A, B, out_dtype="int32"))
    >>> [grouped_block_panels(g, nr, 512, 1048576, threads=2) for nr in (48, 64)]
    [0, 1]
    """
    batch, _, n, k = grouped.contraction.extents()
    if grouped.group != 4 or len(grouped.contraction.n_axes) > 1 or \
            not reads_a_in_place(grouped, kc, LoweringOptions()):
        return 0
    panels = _ceil_div(n, nr)
    cap = max(1, (l2_bytes // 2) // (_ceil_div(k, 4) * 4 * nr))
    per_block = min(cap, max(1, panels // threads))
    blocks = _ceil_div(panels, per_block)
    rounds = threads if batch < 4 * threads else 1
    while (batch * blocks) % rounds:
        blocks += 1
    per_block = _ceil_div(panels, blocks)
    blocks = _ceil_div(panels, per_block)
    if (batch * blocks) % rounds or blocks * per_block * 8 > panels * 9:
        return 0
    return per_block


#: a ragged last panel sends a whole column of tiles through the local edge tile: measured
#: ~3% on a 1024^3 int8 GEMM, more than the padding alone accounts for
RAGGED_PANEL_FACTOR = 0.97


def _grouped_tile(contraction: Contraction) -> tuple[int, int]:
    """The Eq. 3.4 tile of :func:`tile_candidates`, re-ranked with a ragged last panel
    (``N % NR != 0``) counted as :data:`RAGGED_PANEL_FACTOR` of its score."""
    _, m, n, k = contraction.extents()
    best, chosen = -1.0, tile_candidates(contraction)[0]
    # the tile must suit every dot-product micro-kernel (vnni_u8s8/s8u8, dot_bf16)
    mi_max = min(decl.parameters["MI"].maximum or 32 for decl in (VNNI_U8S8, VNNI_S8U8, DOT_BF16))
    for b in register_blocking_candidates(32, ki=min(k, 256)):
        nr = b.ni * 16
        if nr not in VNNI_U8S8.parameters["NR"].choices or b.mi > mi_max:
            continue
        score = (b.intensity * m / (_ceil_div(m, b.mi) * b.mi) * n / (_ceil_div(n, nr) * nr)
                 * (RAGGED_PANEL_FACTOR if n % nr else 1.0))
        if score > best + 1e-9:
            best, chosen = score, (b.mi, nr)
    return chosen


def lower_with_template(tensor: Tensor, options: LoweringOptions, l1_bytes: int, l2_bytes: int,
                        threads: int, config: Mapping[str, Any] | None = None
                        ) -> list[Kernel] | None:
    """The kernels of ``tensor`` under this template, or ``None`` when it does not apply (not a
    float32 contraction, or too small to pay for packing) and no ``config`` forces it."""
    # a batched convolution is a batch of GEMMs sharing the weights (A): A is read in place
    # for every image, B (its im2col) packed per image
    contraction = as_contraction(tensor, broadcast_batch=True)
    grouped = as_dot_product_contraction(tensor) if contraction is None else None
    if contraction is None and grouped is None:
        if config:
            raise LoweringError(f"compute {tensor.name}: the x86 micro-kernel template was "
                                "asked for, but the compute is not a float32 sum of products "
                                "C[batch, m, n] = sum A*B laid out [batch..., m..., n...] (nor "
                                "one of uint8/int8 operands into int32, or of bfloat16 "
                                "operands into float32 or bfloat16)")
        return None
    chosen_contraction = contraction if contraction is not None else grouped.contraction
    _, rows, cols, _ = chosen_contraction.extents()
    if config is None and (chosen_contraction.flops < MIN_FLOPS or min(rows, cols) < MIN_SIDE):
        return None  # too small, or matrix-vector: memory-bound, the default loop nest wins
    chosen = default_config(chosen_contraction, l1_bytes, l2_bytes, threads) if grouped is None \
        else grouped_default_config(grouped, l2_bytes, threads)
    unknown = sorted(set(config or {}) - set(CONFIG_KEYS))
    if unknown:
        raise LoweringError(f"compute {tensor.name}: unknown micro-kernel template parameters "
                            f"{unknown}; the template takes {', '.join(CONFIG_KEYS)}")
    if grouped is None and (config or {}).get("WINOGRAD", 0 if config else
                                              prefers_winograd(contraction)):
        # a 3x3 convolution of stride 1 with many tiles: F(4x4, 3x3) (blocking/winograd.py)
        winograd = lower_winograd(contraction, options, l1_bytes, l2_bytes, threads)
        if winograd is not None:
            return winograd
    if grouped is None and (config or {}).get("DIRECT", 0 if config else
                                              prefers_direct(contraction, l2_bytes)
                                              or prefers_direct_nhwc(contraction)):
        # a KxK convolution of stride 1 or 2: the padded activation read in place at each
        # tap's shift, W^T packed once (blocking/direct_conv.py); channels-last, window row
        # by window row (blocking/direct_nhwc.py)
        given = {k: int(v) for k, v in (config or {}).items()}
        direct = lower_direct_config(contraction, given, options, threads, l1_bytes=l1_bytes) \
            or lower_direct_nhwc_config(contraction, given, options, threads, l1_bytes=l1_bytes,
                                        l2_bytes=l2_bytes)
        if direct is not None:
            return direct
    if grouped is None and (config or {}).get("SPLIT_K", 0 if config else (
            split_k.SPLIT_K and split_k.prefers_split_k(contraction, threads))) \
            and split_k.splittable(contraction, threads):
        # the reduction split across the threads, partials added (blocking/split_k.py)
        tile = {**chosen, **{k: int(v) for k, v in (config or {}).items()}}
        return split_k.lower_split_k(contraction, options, threads, tile["MI"], tile["NR"],
                                     tile["KC"])
    if grouped is None and (config or {}).get("TRANSPOSE", 0 if config else
                                              prefers_transposed(contraction, l2_bytes, threads)):
        # a 1x1 convolution with few output channels: activation read in place, its own MI,
        # NR, MC unless the config names them (blocking/transposed_conv1x1.py)
        transposed = lower_transposed_config(contraction, {k: int(v) for k, v in
                                                           (config or {}).items()},
                                             options, l2_bytes, threads)
        if transposed is not None:
            return transposed
    if grouped is None and not config and amx_split_applies(contraction, options):
        # float32 products on AMX tiles through bfloat16 parts (blocking/amx_split.py)
        return lower_amx_split(contraction, options, l2_bytes, threads)
    chosen.update({k: int(v) for k, v in (config or {}).items()})
    blocking = Blocking.from_config(chosen)
    if grouped is not None:
        return lower_grouped(grouped, blocking, options, int(chosen.get("NC", 0)))
    OUTER_PRODUCT_F32.resolve({"MI": blocking.mi, "NR": blocking.nr})
    if chosen.get("NC", 0) > 0 and not blocking.pack_a:
        kernels = lower_block_packed(contraction, OUTER_PRODUCT_F32_ROWS.name, blocking,
                                     int(chosen["NC"]), options)
        if kernels is not None:
            return kernels
    return lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options,
                             rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name)


def grouped_micro_kernel(grouped: DotProductContraction,
                         a_in_place: bool = False) -> tuple[str, DType]:
    """The dot-product micro-kernel for ``grouped`` and the dtype it takes A in: ``vpdpbusd``
    wants the broadcast A and the vector B of opposite signedness. When both operands have the
    same signedness one of them is shifted by 128 (and compensated, see
    :mod:`~tilecraft_x86_avx512.blocking.dot_product`): B when A is read in place
    (``a_in_place``, see :func:`~tilecraft_x86_avx512.blocking.dot_product.reads_a_in_place`) —
    B is packed anyway, so A then needs no packing pass at all — else A, while it is packed.
    The dtype B is packed in is the micro-kernel's B operand dtype.

    >>> from tilecraft import ops, te
    >>> A = te.placeholder((64, 64), "int8", name="A")
    >>> B = te.placeholder((64, 64), "int8", name="B")
    >>> gc = as_dot_product_contraction(ops.matmul(A, B))
    >>> [(name, packed.value) for name, packed in (grouped_micro_kernel(gc),
    ...                                            grouped_micro_kernel(gc, a_in_place=True))]
    [('vnni_u8s8', 'uint8'), ('vnni_s8u8', 'int8')]
    """
    if grouped.group == 2:
        return DOT_BF16.name, grouped.a_dtype
    if a_in_place and grouped.a_dtype is grouped.b_dtype:
        name = VNNI_S8U8.name if grouped.a_dtype is DType.INT8 else VNNI_U8S8.name
        return name, grouped.a_dtype
    if grouped.b_dtype is DType.INT8:
        return VNNI_U8S8.name, DType.UINT8
    return VNNI_S8U8.name, DType.INT8


def lower_grouped(grouped: DotProductContraction, blocking: Blocking,
                  options: LoweringOptions, panels_per_block: int = 0) -> list[Kernel]:
    """The kernels of an int8 or bfloat16 contraction on its dot-product micro-kernel;
    ``panels_per_block`` > 0 packs B inside the main kernel, per block of that many panels
    (see :func:`~tilecraft_x86_avx512.blocking.dot_product.lower_dot_product_contraction`)."""
    in_place = reads_a_in_place(grouped, blocking.kc, options)
    name, packed_a = grouped_micro_kernel(grouped, a_in_place=in_place)
    decl = {d.name: d for d in (VNNI_U8S8, VNNI_S8U8, DOT_BF16)}[name]
    decl.resolve({"MI": blocking.mi, "NR": blocking.nr})
    packed_b = decl.operands[1].dtype
    row_sums = VNNI_ROW_SUMS_S8 if grouped.a_dtype is DType.INT8 else VNNI_ROW_SUMS_U8
    return lower_dot_product_contraction(grouped, name, blocking, options, packed_a=packed_a,
                                         packed_b=packed_b, row_sums_micro_kernel=row_sums.name,
                                         panels_per_block=panels_per_block)


__all__ = ["CONFIG_KEYS", "default_config", "grouped_block_panels", "grouped_default_config",
           "grouped_micro_kernel", "lower_grouped", "lower_with_template", "tile_candidates"]


def template_space(tensor: Tensor, l1_bytes: int, l2_bytes: int, threads: int):
    """The search space of this template's free parameters for ``tensor`` (``None`` when the
    template does not apply): the register tile among the best Eq. 3.4 candidates, ``KC``,
    ``MC`` as a number of register-tile strips, whether B is packed (``PACK_B``, where B
    is not a constant and can be read in place) and whether the threads split the reduction
    (``SPLIT_K``, where :func:`~tilecraft_x86_avx512.blocking.split_k.splittable`). Points
    decode to ``lower_compute`` configs.

    >>> from tilecraft import ops, te
    >>> C = ops.matmul(te.placeholder((256, 256), name="A"), te.placeholder((256, 256), name="B"))
    >>> space = template_space(C, 49152, 1 << 20, 2)
    >>> space.space.size, sorted(space.decode(space.space.random_point(__import__("numpy")
    ...     .random.default_rng(0))))
    (2240, ['KC', 'MC', 'MI', 'NR', 'PACK_B', 'SPLIT_K'])
    """
    from tilecraft.search import ChoiceSpace, Space
    from tilecraft.target.base import TemplateSpace

    contraction = as_contraction(tensor, broadcast_batch=True)
    if contraction is None:
        return None
    batch, m, _, k = contraction.extents()
    tiles = tile_candidates(contraction, count=8)
    kcs = sorted({min(kc, k) for kc in (32, 48, 64, 96, 128, 192, 256, 384, 512)})
    strips = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
    # the transposed 1x1 path (constant weights, activation read in place) as a choice too
    transposable = contraction.a.tensor.is_constant and activation_view(contraction) is not None
    # and the direct path of KxK convolutions of stride 1 or 2 (blocking/direct_conv.py)
    direct = (contraction.a.tensor.is_constant and direct_geometry(contraction) is not None) \
        or (contraction.b.tensor.is_constant and nhwc_geometry(contraction) is not None)
    # and Winograd F(4x4, 3x3) of 3x3 stride-1 ones (blocking/winograd.py)
    shape = winograd_shape(contraction)
    winograd = shape is not None and (contraction.a if shape.layout == "NCHW"
                                      else contraction.b).tensor.is_constant
    # and B read in place instead of packed (a B that is not a constant, rows contiguous)
    in_place = b_readable_in_place(contraction)
    # and the reduction split across the threads (blocking/split_k.py)
    splittable = split_k.splittable(contraction, threads)
    space = Space([("tile", ChoiceSpace(tiles)), ("KC", ChoiceSpace(kcs)),
                   ("strips", ChoiceSpace(strips)),
                   *([("SPLIT_K", ChoiceSpace((0, 1)))] if splittable else []),
                   *([("TRANSPOSE", ChoiceSpace((0, 1)))] if transposable else []),
                   *([("DIRECT", ChoiceSpace((0, 1)))] if direct else []),
                   *([("WINOGRAD", ChoiceSpace((0, 1)))] if winograd else []),
                   *([("PACK_B", ChoiceSpace((0, 1)))] if in_place else [])])

    def decode(point) -> dict[str, int]:
        values = space.values(point)
        mi, nr = values["tile"]
        if values.get("WINOGRAD"):  # its products take the template's default blocking
            return {"WINOGRAD": 1, **({"TRANSPOSE": 0} if transposable else {}),
                    **({"DIRECT": 0} if direct else {})}
        off = {"WINOGRAD": 0} if winograd else {}
        if values.get("DIRECT"):  # its own blocking: the tile only
            return {"MI": mi, "NR": nr, "DIRECT": 1, **off}
        off.update({"DIRECT": 0} if direct else {})
        if values.get("SPLIT_K"):  # every thread sums its run of K over all of C
            return {"MI": mi, "NR": nr, "KC": values["KC"], "SPLIT_K": 1,
                    **({"TRANSPOSE": 0} if transposable else {}), **off}
        off.update({"SPLIT_K": 0} if splittable else {})
        if values.get("TRANSPOSE"):  # MC counts pixels (the contraction's columns)
            pixels = contraction.extents()[2]
            return {"MI": mi, "NR": nr, "MC": min(values["strips"] * mi,
                                                  _ceil_div(pixels, mi) * mi), "TRANSPOSE": 1,
                    **off}
        rows = min(values["strips"] * mi, _ceil_div(m, mi) * mi)
        return {"MI": mi, "NR": nr, "KC": values["KC"], "MC": rows,
                **({"TRANSPOSE": 0} if transposable else {}),
                **({"PACK_B": values["PACK_B"]} if in_place else {}), **off}

    del batch, l1_bytes, l2_bytes
    return TemplateSpace(space, decode)
