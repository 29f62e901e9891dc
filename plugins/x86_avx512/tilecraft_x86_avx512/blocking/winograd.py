"""A 3x3 convolution of stride 1 by Winograd's minimal filtering, F(4x4, 3x3) or F(2x2, 3x3)
(Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016).

Each 4x4 block of output pixels of one output channel is ``A^T [sum_c (G g_c G^T) * (B^T
d_c B)] A``, with ``d_c`` the 6x6 input tile of channel ``c`` (overlapping its neighbours by
two pixels) and ``g_c`` the 3x3 filter: 36 products per tile and channel pair instead of the
direct convolution's 144, four times fewer multiply-adds. Summed over the channels, the
products are 36 independent matrix products, which the micro-kernel template runs. In NCHW
(tiles ``t = ty * TW + tx``, ``TW`` tiles a row):

1. ``<y>_wino_u`` — ``U[e, k, c] = (G g[k, c] G^T)[e]`` (``e = 6a + b``): reads only the
   constant weights, so the Executable runs it once and keeps ``U``;
2. ``<y>_wino_v`` — ``V[e, c, t] = (B^T d[c, t] B)[e]`` over the padded activation, written
   straight into the panel layout ``[36, panels, C, NR]`` the template's B operand takes
   (:func:`.register_tiles.pack_operand`), zero past the last tile, so the product needs no
   packing pass: parallel over the input channels, a vector of a row's tiles at a time (each
   tap read once, with stride 4, into a local block; then ``d B`` and ``B^T (d B)`` over whole
   vectors, see :func:`_staged`);
3. ``<y>_wino_m`` — ``M[e, k, t] = sum_c U[e, k, c] * V[e, c, t]``: a batch of 36 products on
   the template (:func:`.register_tiles.lower_contraction`, ``U`` read in place), its
   B-packing kernel dropped;
4. ``<y>`` — ``y[k, 4ty + r, 4tx + s] = (A^T M[:, k, t] A)[r, s]``: parallel over the output
   channels, each output pixel stored through the fused elementwise epilogue (bias, residual,
   ReLU) when there is one (a stride-4 store).

In NHWC the products are ``M[e, t, k] = sum_c V[e, t, c] * U[e, c, k]``: ``V`` (``[36, T, C]``)
is A, read in place; ``U`` (``[36, C, K]``) is B, packed by the template's own kernel — which
reads only ``U``, so it too runs once; both transforms vectorise over channels, every access
contiguous. The networks take this form (the layout pass makes ResNet channels-last).

The transforms add only additions and multiplications by small constants; in float32 the
result differs from the direct sum by a few units in the fifth significant digit on
unit-scale data (F(4x4, 3x3)'s points 0, +-1, +-2 keep the error small; F(6x6, 3x3) would not).
A map with fewer than :data:`MIN_TILES` 4x4 tiles (14x14: 16 tiles; in NCHW a quarter of an
``NR = 64`` panel) takes F(2x2, 3x3) where it has that many 2x2 tiles (14x14: 49): 16 products
instead of 36, 2.25 times fewer multiply-adds than the direct path, with ``U`` 1.8 times the
weights' size instead of 4 (ResNet's 256-channel 14x14 layers: ``U`` 4.2 MB against 9.4; F(4x4,
3x3) on them, NHWC, ResNet-18: 1 thread 1.6% faster, 2 threads 1.6% slower than direct). A 7x7
map (16 2x2 tiles) keeps the direct path: F(2x2, 3x3) there, ResNet-18 1 thread, 19.34 -> 23.25
ms (its ``U``, 16.8 MB a layer, streams from memory). Same process alternating, Xeon family 6
model 167 (:func:`prefers_winograd`, :func:`choose_algorithm`):

- F(4x4, 3x3) on 56x56 and 28x28 against direct: ResNet-18 25.61 -> 20.76 ms (1 thread),
  13.60 -> 11.14 (2); ResNet-50 57.62 -> 52.69 (1), 31.82 -> 30.06 (2);
- F(2x2, 3x3) on 14x14 added: ResNet-18 20.22 -> 18.89 (1), 11.41 -> 10.92 (2); ResNet-50
  52.48 -> 50.40 (1), 29.35 -> 28.10 (2).

>>> import numpy as np
>>> d, g = np.arange(6.0), np.array([1.0, -2.0, 0.5])
>>> bool(np.allclose(AT @ ((G @ g) * (BT @ d)), np.correlate(d, g, "valid")))
True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    IfThenElse,
    Kernel,
    LoopKind,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import Contraction, as_contraction
from tilecraft.te.expr import Expr, Var, const, select
from tilecraft.te.functions import minimum
from tilecraft.te.tensor import Tensor
from tilecraft_x86_avx512.blocking.building import (
    ceil_div,
    contraction_kernel,
    nest,
    parallel_kind,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.direct_conv import direct_geometry
from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction
from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32, OUTER_PRODUCT_F32_ROWS

if TYPE_CHECKING:
    from tilecraft_x86_avx512.blocking.epilogue import Epilogue

#: F(4, 3)'s input transform (interpolation points 0, 1, -1, 2, -2 and infinity)
BT = np.array([[4, 0, -5, 0, 1, 0],
               [0, -4, -4, 1, 1, 0],
               [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0],
               [0, 4, 0, -5, 0, 1]], dtype=np.float64)
#: its filter transform
G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]], dtype=np.float64)
#: its output transform
AT = np.array([[1, 1, 1, 1, 1, 0],
               [0, 1, -1, 2, -2, 0],
               [0, 1, 1, 4, 4, 0],
               [0, 1, -1, 8, -8, 1]], dtype=np.float64)
#: F(2, 3)'s input, filter and output transforms (points 0, 1, -1 and infinity)
BT2 = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
G2 = np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
              dtype=np.float64)
AT2 = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Minimal:
    """One minimal filtering algorithm F(m x m, 3x3): its transforms ``B^T`` (``bt``), ``G``
    and ``A^T`` (``at``); each tile has ``tile x tile`` outputs from ``span x span`` inputs."""

    name: str
    bt: np.ndarray
    g: np.ndarray
    at: np.ndarray

    @property
    def tile(self) -> int:
        return self.at.shape[0]

    @property
    def span(self) -> int:
        return self.bt.shape[0]


F4 = Minimal("F(4x4, 3x3)", BT, G, AT)
F2 = Minimal("F(2x2, 3x3)", BT2, G2, AT2)
#: whether 3x3 convolutions may take this path by default (a switch for measuring)
WINOGRAD = True
#: the fewest tiles (rows or columns of the products) the path takes by default: a 28x28 map
#: has 49 4x4 tiles, one ``NR = 64`` panel three-quarters full; 14x14 has 16 (and 49 2x2 ones)
MIN_TILES = 48
#: whether maps too small for F(4x4, 3x3)'s tiles may take F(2x2, 3x3) by default
SMALL_TILES = True
#: the fewest input channels the path takes by default (the transforms cost as much per
#: channel as a few of them of the products)
MIN_CHANNELS = 16


def combination(coefficients: np.ndarray, terms: list[Expr]) -> Expr:
    """``sum(coefficients[i] * terms[i])`` without the zero coefficients, a coefficient of 1
    or -1 without its multiplication.

    >>> A = te.placeholder((2,), name="A")
    >>> a, b = A[0], A[1]
    >>> print(combination(np.array([1.0, 0.0]), [a, b]), combination(np.array([-2.0, 1.0]), [a, b]))
    A[0] ((A[0] * -2.0) + A[1])
    """
    total: Expr | None = None
    for coefficient, term in zip(coefficients, terms):
        if coefficient == 0:
            continue
        if coefficient == -1 and total is not None:
            total = total - term
            continue
        scaled = term if coefficient == 1 else term * const(float(coefficient))
        total = scaled if total is None else total + scaled
    assert total is not None, "a transform row of zeros"
    return total


@dataclass(frozen=True)
class WinogradShape:
    """A 3x3 stride-1 convolution of one image: input ``channels``, the padded activation's
    ``height x width``, the output's ``out_height x out_width x out_channels``, its layout
    (``NCHW``: weights ``[K, C, 3, 3]``; ``NHWC``: ``[3, 3, C, K]``)."""

    channels: int
    height: int
    width: int
    out_height: int
    out_width: int
    out_channels: int
    layout: str
    algorithm: Minimal = F4

    @property
    def rows(self) -> int:
        return ceil_div(self.out_height, self.algorithm.tile)

    @property
    def cols(self) -> int:
        return ceil_div(self.out_width, self.algorithm.tile)

    @property
    def tiles(self) -> int:
        return self.rows * self.cols


def transform_flops(left: np.ndarray, right: np.ndarray) -> int:
    """Additions and multiplications of ``left X right^T`` as :func:`combination` writes it,
    rows first (a multiplication per coefficient other than 1 and -1).

    >>> transform_flops(BT, BT), transform_flops(AT, AT)
    (336, 200)
    """
    def ops(matrix: np.ndarray) -> int:
        nonzero = matrix != 0
        return int(np.sum(nonzero.sum(axis=1) - 1) + np.sum(nonzero & (np.abs(matrix) != 1)))

    return left.shape[1] * ops(right) + right.shape[0] * ops(left)


def winograd_shape(contraction: Contraction) -> WinogradShape | None:
    """The :class:`WinogradShape` of a batch-1 float32 3x3 convolution of stride 1 with its
    padding in the activation, NCHW (:func:`.direct_conv.direct_geometry`) or NHWC
    (:func:`.direct_nhwc.nhwc_geometry`); else ``None``."""
    from tilecraft_x86_avx512.blocking.direct_nhwc import nhwc_geometry

    if contraction.tensor.dtype.value != "float32":
        return None
    _, m_total, n_total, _ = contraction.extents()
    geometry = direct_geometry(contraction)
    if geometry is not None:
        if geometry.stride != 1 or len(geometry.taps) != 9 or max(geometry.taps) != (2, 2):
            return None
        return WinogradShape(geometry.channels, geometry.height, geometry.width,
                             geometry.out_height, geometry.out_width, m_total, "NCHW")
    nhwc = nhwc_geometry(contraction)
    if nhwc is None or nhwc.stride != 1 or (nhwc.kh, nhwc.kw) != (3, 3) or nhwc.images != 1:
        return None
    return WinogradShape(nhwc.channels, nhwc.height, nhwc.width, nhwc.out_height,
                         nhwc.out_width, n_total, "NHWC")


def _weights(contraction: Contraction, shape: WinogradShape) -> Tensor:
    return (contraction.a if shape.layout == "NCHW" else contraction.b).tensor


def prefers_winograd(contraction: Contraction) -> bool:
    """Whether the path is the default for ``contraction``: a 3x3 convolution of stride 1
    (:func:`winograd_shape`) with constant weights (transformed once), at least
    :data:`MIN_CHANNELS` input channels and :data:`MIN_TILES` tiles.

    >>> from tilecraft import ops
    >>> x = te.placeholder((1, 64, 28, 28), name="x")
    >>> conv = lambda k, stride: as_contraction(ops.conv2d(
    ...     x, te.constant(np.ones((64, 64, k, k), np.float32)), stride=stride,
    ...     padding=k // 2), broadcast_batch=True)
    >>> prefers_winograd(conv(3, 1)), prefers_winograd(conv(3, 2)), prefers_winograd(conv(1, 1))
    (True, False, False)
    """
    shape = winograd_shape(contraction)
    if not WINOGRAD or shape is None or not _weights(contraction, shape).is_constant:
        return False
    return shape.channels >= MIN_CHANNELS and choose_algorithm(shape) is not None


def choose_algorithm(shape: WinogradShape) -> Minimal | None:
    """F(4x4, 3x3) where the map has at least :data:`MIN_TILES` 4x4 tiles, else F(2x2, 3x3)
    where it has that many 2x2 tiles and :data:`SMALL_TILES` allows it, else ``None``.

    >>> shape = WinogradShape(256, 16, 16, 14, 14, 256, "NHWC")
    >>> [getattr(choose_algorithm(replace(shape, out_height=hw, out_width=hw)), "name", None)
    ...  for hw in (28, 14, 7)]
    ['F(4x4, 3x3)', 'F(2x2, 3x3)', None]
    """
    for algorithm in (F4, F2) if SMALL_TILES else (F4,):
        if replace(shape, algorithm=algorithm).tiles >= MIN_TILES:
            return algorithm
    return None


def lower_winograd(contraction: Contraction, options: LoweringOptions, l1_bytes: int,
                   l2_bytes: int, threads: int, epilogue: Epilogue | None = None
                   ) -> list[Kernel] | None:
    """The kernels of the module docstring, or ``None`` where ``contraction`` is not a 3x3
    convolution of stride 1 (:func:`winograd_shape`), the epilogue re-indexes or casts ``C``,
    or (NCHW) a row has more tiles than a panel has columns."""
    from tilecraft_x86_avx512.gemm_template import default_config

    shape = winograd_shape(contraction)
    if shape is None or (epilogue is not None and epilogue.local is not None):
        return None
    shape = replace(shape, algorithm=choose_algorithm(shape) or F4)
    alg = shape.algorithm
    name = contraction.tensor.name
    channels, out_channels, tiles = shape.channels, shape.out_channels, shape.tiles
    e_total = alg.span * alg.span
    rc = te.reduce_axis(channels, "rc")
    if shape.layout == "NCHW":   # M[e, k, t] = U[e, k, c] V[e, c, t]: V is B, packed here
        u = te.placeholder((e_total, out_channels, channels), name=f"{name}_wino_u")
        v = te.placeholder((e_total, channels, tiles), name=f"{name}_wino_v")
        product = te.compute((e_total, out_channels, tiles),
                             lambda e, k, t: te.sum(u[e, k, rc] * v[e, rc, t], axis=rc),
                             name=f"{name}_wino_m")
    else:                        # M[e, t, k] = V[e, t, c] U[e, c, k]: V is A, read in place
        u = te.placeholder((e_total, channels, out_channels), name=f"{name}_wino_u")
        v = te.placeholder((e_total, tiles, channels), name=f"{name}_wino_v")
        product = te.compute((e_total, tiles, out_channels),
                             lambda e, t, k: te.sum(v[e, t, rc] * u[e, rc, k], axis=rc),
                             name=f"{name}_wino_m")
    gemm = as_contraction(product)
    assert gemm is not None
    chosen = default_config(gemm, l1_bytes, l2_bytes, threads)
    chosen["KC"] = min(chosen["KC"], product_slice(channels, chosen["NR"], l1_bytes))
    chosen["PACK_B"] = 1   # NCHW: the input transform writes V packed; NHWC: U packed once
    blocking = Blocking.from_config(chosen)
    OUTER_PRODUCT_F32.resolve({"MI": blocking.mi, "NR": blocking.nr})
    pack, main = lower_contraction(gemm, OUTER_PRODUCT_F32.name, blocking, options,
                                   rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name)
    filters = _filter_kernel(contraction, shape, u.name, options)
    # the report's roofline: the operations each kernel does, not the direct convolution's
    main = replace(main, attrs={**main.attrs,
                                "flops": 2 * e_total * tiles * channels * out_channels})
    if shape.layout == "NHWC":   # U packed once, like any constant's pack
        inputs = _input_kernel(contraction, shape, Buffer(
            v.name, tuple(v.shape), v.dtype, level=options.param_level), options)
        return [filters, pack, inputs, main,
                _output_kernel(contraction, shape, product, options, epilogue)]
    packed = pack.params[-1]
    if shape.cols > blocking.nr or packed.shape[2] != channels \
            or v.name in {p.name for p in main.params}:
        return None   # a row of tiles over two panels / slices padded past C / V not packed
    return [filters, _input_kernel(contraction, shape, packed, options), main,
            _output_kernel(contraction, shape, product, options, epilogue)]


def product_slice(channels: int, nr: int, l1_bytes: int) -> int:
    """``KC`` of the products: the largest multiple of 16 dividing ``channels`` whose ``KC x
    NR`` panel of ``U`` fills at most half of L1 (all the channels when none does). The
    products have few rows (49 tiles: ten strips of 5), each strip streaming the whole panel;
    the template's default ``KC`` (sized for L2, for GEMMs of many rows) left a 64 KB panel
    streaming from L2 strip after strip: 105-107 GF/s on ResNet-50's 14x14 products. Capped
    at 64 (the rule's value on a 48 KB L1), same process alternating, Xeon family 6 model 167:
    ResNet-18 20.04 -> 19.40 ms (1 thread), 10.97 -> 10.92 (2); ResNet-50 53.71 -> 53.06
    (1), 30.47 -> 29.83 (2).

    >>> product_slice(256, 64, 49152), product_slice(128, 64, 49152), product_slice(17, 64, 49152)
    (64, 64, 17)
    """
    limit = (l1_bytes // 2) // (4 * nr)
    slices = [kc for kc in range(16, min(limit, channels) + 1, 16) if channels % kc == 0]
    return slices[-1] if slices else channels


def _filter_kernel(contraction: Contraction, shape: WinogradShape, u_name: str,
                   options: LoweringOptions) -> Kernel:
    """``U[span * a + b, ...] = sum_ij G[a, i] G[b, j] g[i, j]`` for every filter, once."""
    alg = shape.algorithm
    w_tensor = _weights(contraction, shape)
    channels, out_channels = shape.channels, shape.out_channels
    level = options.param_level
    w = Buffer(w_tensor.name, tuple(w_tensor.shape), w_tensor.dtype, level=level)
    k, c = Var("k"), Var("c")
    if shape.layout == "NCHW":
        u = Buffer(u_name, (alg.span * alg.span, out_channels, channels), w.dtype, level=level)
        taps = [BufferLoad(w, (k, c, const(i), const(j))) for i in range(3) for j in range(3)]
        loops = [(k, out_channels, parallel_kind(options, out_channels), 0),
                 (c, channels, LoopKind.SERIAL, 0)]

        def at(e: int) -> tuple[Expr, ...]:
            return (const(e), k, c)
    else:
        u = Buffer(u_name, (alg.span * alg.span, channels, out_channels), w.dtype, level=level)
        taps = [BufferLoad(w, (const(i), const(j), c, k)) for i in range(3) for j in range(3)]
        loops = [(c, channels, parallel_kind(options, channels), 0),
                 (k, out_channels, vector_kind(options), max(1, options.lanes(w.dtype)))]

        def at(e: int) -> tuple[Expr, ...]:
            return (const(e), c, k)
    stores = [Store(u, at(alg.span * a + b),
                    combination(np.outer(alg.g[a], alg.g[b]).ravel(), taps))
              for a in range(alg.span) for b in range(alg.span)]
    kernel = Kernel(u_name, (w, u), (u_name,), nest(loops, Seq(tuple(stores))), attrs={
        "compute": contraction.tensor.name, "role": f"Winograd filter transform of {w.name}",
        "schedule": f"G g G^T of {out_channels}x{channels} filters"})
    verify_kernel(kernel, options.spec)
    return kernel


def _staged(name: str, first: list[Expr], first_rows: int, second: np.ndarray,
            transform: np.ndarray, store: Callable[[int, int, Expr], Stmt], var: Var,
            extent: int, wide: int, options: LoweringOptions) -> tuple[Stmt, list[Buffer]]:
    """Two-sided transform ``L X R^T`` of ``first_rows x len(first) / first_rows`` values
    ``first`` (``X``, row-major), ``R = transform`` then ``L = second``, as vector loops over
    ``var``: ``first`` copied into a local block (a loop of ``extent``, the masked part), then
    over whole vectors (``wide``; the block's lanes past ``extent`` stay zero) ``X R^T`` into a
    second block and ``L (X R^T)``, each element handed to ``store(row, col, value)``. Whole
    vectors let the code generator keep the blocks' values in registers instead of re-reading
    them with masked loads. Returns the statement (blocks still to allocate) and the blocks."""
    lanes = max(1, options.lanes(DType.FLOAT32))
    level = options.register_level or options.param_level
    width = len(first) // first_rows
    vector = vector_kind(options)
    block_x = Buffer(f"{name}_x", (len(first), wide), DType.FLOAT32, level=level)
    block_xr = Buffer(f"{name}_xr", (first_rows * transform.shape[0], wide), DType.FLOAT32,
                      level=level)
    copies = [Store(block_x, (const(q), var), value) for q, value in enumerate(first)]
    right: list[Stmt] = [Store(block_xr, (const(transform.shape[0] * i + b), var), combination(
        transform[b], [BufferLoad(block_x, (const(width * i + j), var)) for j in range(width)]))
        for i in range(first_rows) for b in range(transform.shape[0])]
    for a in range(second.shape[0]):
        for b in range(transform.shape[0]):
            right.append(store(a, b, combination(second[a], [
                BufferLoad(block_xr, (const(transform.shape[0] * i + b), var))
                for i in range(first_rows)])))
    body = Seq((nest([(var, extent, vector, lanes)], Seq(tuple(copies))),
                nest([(var, wide, vector, lanes)], Seq(tuple(right)))))
    return body, [block_x, block_xr]


def _allocated(body: Stmt, blocks: list[Buffer], zeroed: bool) -> Stmt:
    for block in blocks:
        body = Allocate(block, body, zeroed=zeroed)
    return body


def _input_kernel(contraction: Contraction, shape: WinogradShape, v: Buffer,
                  options: LoweringOptions) -> Kernel:
    """``V = B^T d B`` per tile and input channel: NCHW into the product's packed B panels
    (``v``: ``[36, panels, C, NR]``), a vector of a row's tiles at a time (stride-4 taps);
    NHWC into ``v`` ``[36, T, C]``, a vector of channels at a time."""
    alg = shape.algorithm
    x_tensor = (contraction.b if shape.layout == "NCHW" else contraction.a).tensor
    height, width, channels = shape.height, shape.width, shape.channels
    rows, cols, tiles = shape.rows, shape.cols, shape.tiles
    dtype = x_tensor.dtype
    level = options.param_level
    lanes = max(1, options.lanes(dtype))
    name = contraction.tensor.name
    c, ty, tx = Var("c"), Var("ty"), Var("tx")

    def guarded(index: Callable[[Expr, Expr], tuple[Expr, ...]], i: int, j: int,
                buffer: Buffer) -> Expr:
        row, col = ty * alg.tile + i, tx * alg.tile + j
        row_out = (rows - 1) * alg.tile + i >= height     # the last tile row reads below the map
        col_out = (cols - 1) * alg.tile + j >= width
        load = BufferLoad(buffer, index(minimum(row, height - 1) if row_out else row,
                                        minimum(col, width - 1) if col_out else col))
        inside = [row < height] * row_out + [col < width] * col_out
        if not inside:
            return load
        return select(te.all_of(*inside) if len(inside) > 1 else inside[0], load,
                      const(0.0, dtype))

    if shape.layout == "NCHW":
        x = Buffer(x_tensor.name, (channels, height, width), dtype, level=level)
        _, panels, _, nr = v.shape
        wide = ceil_div(cols, lanes) * lanes
        t = ty * cols + tx
        start = (ty * cols) // nr

        def store(a: int, b: int, value: Expr) -> Stmt:
            e = const(alg.span * a + b)
            here: Stmt = Store(v, (e, start, c, t - start * nr), value)
            if cols > 1 and nr % cols:   # a row's tiles span two panels at most
                here = IfThenElse(t - start * nr < nr, here,
                                  Store(v, (e, start + 1, c, t - (start + 1) * nr), value))
            return here if wide == cols else IfThenElse(tx < cols, here)

        taps = [guarded(lambda r, q: (c, r, q), i, j, x)
                for i in range(alg.span) for j in range(alg.span)]
        stages, blocks = _staged(f"{name}_wino_d", taps, alg.span, alg.bt, alg.bt, store, tx,
                                 cols, wide,
                                 options)
        body: Stmt = _allocated(nest([(ty, rows, LoopKind.SERIAL, 0)], stages), blocks,
                                zeroed=wide > cols)
        padding = panels * nr - tiles
        if padding:   # the last panel's columns past the last tile: zero, for the products
            n = Var("n")
            zeros = [nest([(n, padding, vector_kind(options), lanes)],
                          Store(v, (const(e), const(panels - 1), c,
                                    n + (tiles - (panels - 1) * nr)), const(0.0, dtype)))
                     for e in range(alg.span * alg.span)]
            body = Seq((body, *zeros))
        body = nest([(c, channels, parallel_kind(options, channels), 0)], body)
        schedule = (f"B^T d B into {panels} panels of {channels}x{nr}: parallel({channels}) > "
                    f"tile rows({rows}) > vector({cols} tiles, stride-{alg.tile} taps)")
    else:
        x = Buffer(x_tensor.name, (height, width, channels), dtype, level=level)
        wide = ceil_div(channels, lanes) * lanes
        t = ty * cols + tx

        def store(a: int, b: int, value: Expr) -> Stmt:
            here = Store(v, (const(alg.span * a + b), t, c), value)
            return here if wide == channels else IfThenElse(c < channels, here)

        taps = [guarded(lambda r, q: (r, q, c), i, j, x)
                for i in range(alg.span) for j in range(alg.span)]
        stages, blocks = _staged(f"{name}_wino_d", taps, alg.span, alg.bt, alg.bt, store, c,
                                 channels,
                                 wide, options)
        body = nest([(ty, rows, parallel_kind(options, rows), 0),
                     (tx, cols, LoopKind.SERIAL, 0)],
                    _allocated(stages, blocks, zeroed=wide > channels))
        schedule = (f"B^T d B of {tiles} tiles: parallel({rows} tile rows) > tiles({cols}) > "
                    f"vector({channels} channels)")
    kernel = Kernel(f"{name}_wino_v", (x, v), (v.name,), body, attrs={
        "compute": name, "role": f"Winograd input transform of {x.name}",
        "schedule": schedule, "flops": tiles * channels * transform_flops(alg.bt, alg.bt)})
    verify_kernel(kernel, options.spec, check_bounds=False)  # guarded: see guarded()
    return kernel


def _output_kernel(contraction: Contraction, shape: WinogradShape, product: Tensor,
                   options: LoweringOptions, epilogue: Epilogue | None) -> Kernel:
    """``y = A^T M A`` per tile and output channel, through ``epilogue`` when there is one:
    NCHW a vector of a row's tiles at a time (stride-4 stores), NHWC of output channels."""
    alg = shape.algorithm
    tensor = contraction.tensor
    _, m_total, n_total, _ = contraction.extents()
    out_height, out_width, out_channels = shape.out_height, shape.out_width, shape.out_channels
    rows, cols = shape.rows, shape.cols
    dtype = tensor.dtype
    level = options.param_level
    lanes = max(1, options.lanes(dtype))
    m = Buffer(product.name, tuple(product.shape), dtype, level=level)
    out = Buffer(tensor.name, (1, m_total, n_total), dtype, level=level) \
        if epilogue is None else epilogue.out
    k, ty, tx = Var("k"), Var("ty"), Var("tx")
    t = ty * cols + tx
    nchw = shape.layout == "NCHW"
    var, extent = (tx, cols) if nchw else (k, out_channels)
    wide = ceil_div(extent, lanes) * lanes

    def store(r: int, s: int, value: Expr) -> Stmt:
        oh, ow = ty * alg.tile + r, tx * alg.tile + s
        pixel = oh * out_width + ow
        row, col = (k, pixel) if nchw else (pixel, k)
        here = Store(out, (const(0), row, col), value) if epilogue is None else \
            epilogue.store_value(const(0), row, col, value)
        inside = ([oh < out_height] if (rows - 1) * alg.tile + r >= out_height else []) \
            + ([ow < out_width] if (cols - 1) * alg.tile + s >= out_width else []) \
            + ([var < extent] if wide > extent else [])
        if inside:
            here = IfThenElse(te.all_of(*inside) if len(inside) > 1 else inside[0], here)
        return here

    products = [BufferLoad(m, (const(e), k, t) if nchw else (const(e), t, k))
                for e in range(alg.span * alg.span)]
    stages, blocks = _staged(f"{tensor.name}_wino_y", products, alg.span, alg.at, alg.at, store,
                             var,
                             extent, wide, options)
    body = _allocated(stages, blocks, zeroed=wide > extent)
    if nchw:
        body = nest([(k, out_channels, parallel_kind(options, out_channels), 0),
                     (ty, rows, LoopKind.SERIAL, 0)], body)
        where = (f"parallel({out_channels}) > tile rows({rows}) > vector({cols} tiles), "
                 f"stride-{alg.tile} stores")
    else:
        body = nest([(ty, rows, parallel_kind(options, rows), 0),
                     (tx, cols, LoopKind.SERIAL, 0)], body)
        where = f"parallel({rows} tile rows) > tiles({cols}) > vector({out_channels} channels)"
    schedule = (f"Winograd {alg.name}, {shape.tiles} tiles, {shape.layout}: products on "
                f"micro-kernel {OUTER_PRODUCT_F32_ROWS.name}; A^T M A: {where}")
    finish = contraction_kernel if epilogue is None else epilogue.kernel
    kernel = finish(tensor, [m, out], body, "none (transforms)", schedule, options)
    return replace(kernel, attrs={**kernel.attrs, "flops": shape.tiles * out_channels
                                  * transform_flops(alg.at, alg.at)})


__all__ = ["AT", "AT2", "BT", "BT2", "F2", "F4", "G", "G2", "MIN_CHANNELS", "MIN_TILES",
           "SMALL_TILES", "WINOGRAD", "Minimal", "WinogradShape", "choose_algorithm",
           "combination", "lower_winograd", "prefers_winograd", "product_slice",
           "transform_flops",
           "winograd_shape"]
