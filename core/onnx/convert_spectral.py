"""ONNX DFT (opsets 17 and 20) and STFT (opset 17) as products with constant cos / sin
matrices, so that a target's matmul template runs them.

A DFT of static length is linear in the real and imaginary parts of the signal: along the
transformed axis, ``n`` samples of ``c`` components (1: real, 2: real and imaginary) become
``m`` bins of ``p`` parts (2, or 1 for the real output of an inverse one-sided DFT) through one
real ``(n * c) x (m * p)`` matrix of cosines and sines, computed in float64 at import time and
stored as float32. ``dft_length`` (zero padding or truncation), ``onesided`` (the first
``length // 2 + 1`` bins) and the inverse one-sided DFT (numpy's ``irfft``: Hermitian input,
real output) only change that matrix. One compute gathers the signal into rows of ``n * c``
values (the transformed axis and the components; the other dimensions, in order, run over the
rows), ``ops.matmul`` multiplies them by the matrix, and one last compute puts the product
back in ONNX's layout, dividing by the length for an inverse DFT (after the sum, so that sums
that cancel to exactly zero stay zero).

STFT frames the signal with strided index arithmetic (frame ``f`` reads samples
``f * frame_step + k``), multiplies by the window (folded into the matrix when it is known at
import time) and takes the DFT of each frame the same way.

>>> # DFT(x[1, 10, 10, 1], axis=1) becomes, with W the 10 x 20 cos / sin matrix,
>>> # rows[i, k] = x[0, k, i, 0]; product = matmul(rows, W);
>>> # y[a, j, b, r] = product[b, j * 2 + r]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.onnx.context import NodeContext, converter
from tilecraft.onnx.values import Value, ints
from tilecraft.ops.building import named_compute
from tilecraft.ops.elementwise import axis_names
from tilecraft.te.tensor import Tensor

_FLOAT_TYPES = (DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16)
#: the largest DFT matrix made (float32 entries: 256 MiB); the matrix grows as the square of
#: the length, and longer transforms would need a fast (FFT) algorithm instead
MAX_MATRIX_ENTRIES = 1 << 26


def unit_circle(phase: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """``cos`` and ``sin`` of ``2 pi phase / length`` in float64, exact (0, 1 or -1) at the
    quarter turns, so that the sums that cancel mathematically (the imaginary part of a real
    signal's DC bin, say) come out as exactly zero.

    >>> cos, sin = unit_circle(np.array([0, 1, 2, 3]), 4)
    >>> cos.tolist(), sin.tolist()
    ([1.0, 0.0, -1.0, 0.0], [0.0, 1.0, 0.0, -1.0])
    """
    phase = np.asarray(phase, dtype=np.int64) % length
    angle = 2.0 * np.pi * phase / length
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * phase) % length == 0
    turn = (4 * phase // length) % 4
    cos = np.where(quarter, np.array([1.0, 0.0, -1.0, 0.0])[turn], cos)
    sin = np.where(quarter, np.array([0.0, 1.0, 0.0, -1.0])[turn], sin)
    return cos, sin


def dft_matrix(samples: int, components: int, length: int, inverse: bool = False,
               onesided: bool = False) -> np.ndarray:
    """The float64 matrix ``W[k, c, j, r]`` with ``y[j, r] = sum_kc W[k, c, j, r] * x[k, c]``:
    the DFT of ``length`` points of a signal of ``samples`` samples (zero padded or truncated
    to ``length``) of ``components`` parts (1: real, 2: real and imaginary), as onnx's
    reference computes it (``numpy.fft.fft`` / ``ifft`` / ``irfft`` with ``n=length``). The
    inverse DFTs are left unscaled: divide by ``length`` after the sum. Output parts ``r``: 2
    (real, imaginary), or 1 for the inverse one-sided DFT (``irfft``, a real signal).

    >>> dft_matrix(2, 1, 2)[:, 0, :, 0].tolist()  # real parts of [x0 + x1, x0 - x1]
    [[1.0, 1.0], [1.0, -1.0]]
    >>> dft_matrix(2, 1, 4, onesided=True).shape  # zero padded to 4, bins 0..2
    (2, 1, 3, 2)
    """
    if inverse and onesided:
        bins, parts = length, 1  # irfft: the first length // 2 + 1 input bins, real output
        used = min(samples, length // 2 + 1)
    else:
        bins, parts = (length // 2 + 1 if onesided else length), 2
        used = min(samples, length)
    matrix = np.zeros((samples, components, bins, parts))
    k = np.arange(used)[:, None]
    j = np.arange(bins)[None, :]
    cos, sin = unit_circle(k * j, length)
    if inverse and onesided:
        # a Hermitian spectrum: bin k also stands for bin length - k, except bin 0 and (for
        # an even length) bin length / 2, whose imaginary parts do not count (sin is 0 there)
        twice = np.where((k == 0) | (2 * k == length), 1.0, 2.0)
        matrix[:used, 0, :, 0] = twice * cos
        if components == 2:
            matrix[:used, 1, :, 0] = -twice * sin
        return matrix
    sign = 1.0 if inverse else -1.0  # exp(+-2 pi i k j / length)
    matrix[:used, 0, :, 0] = cos
    matrix[:used, 0, :, 1] = sign * sin
    if components == 2:
        matrix[:used, 1, :, 0] = -sign * sin
        matrix[:used, 1, :, 1] = cos
    return matrix


def _float_input(ctx: NodeContext, x: Tensor, what: str) -> None:
    if x.dtype not in _FLOAT_TYPES:
        raise ctx.unsupported(f"its {what} is {x.dtype.value}; DFT and STFT take float32, "
                              "float16 or bfloat16 signals")


def _components(ctx: NodeContext, x: Tensor) -> int:
    components = x.shape[-1]
    if components not in (1, 2):
        raise ctx.unsupported(f"the signal's last dimension is {components}; it must be 1 "
                              "(real) or 2 (real and imaginary)")
    return components


def _scalar(ctx: NodeContext, index: int, what: str) -> int:
    values = ints(ctx.const(index, what))
    if len(values) != 1:
        raise ctx.unsupported(f"its {what} holds {len(values)} values; it must be one integer")
    return values[0]


def _check_size(ctx: NodeContext, inputs: int, length: int) -> None:
    if inputs * 2 * length > MAX_MATRIX_ENTRIES:
        raise ctx.unsupported(f"a DFT of {length} points of {inputs} input values takes a "
                              f"{inputs} x {2 * length} matrix, over the {MAX_MATRIX_ENTRIES} "
                              "entries tilecraft builds; DFT lengths up to about 4096 (real) "
                              "are supported")


def _signal_rows(ctx: NodeContext, x: Tensor, axis: int, others: Sequence[int]) -> Tensor:
    """``x`` as rows of ``samples * components`` values: row ``i`` runs over the dimensions
    ``others`` (row-major), column ``k * components + c`` reads sample ``k`` of ``axis`` and
    component ``c``."""
    components = x.shape[-1]
    spread = [d for d in others if x.shape[d] > 1]
    count = math.prod(x.shape[d] for d in spread)

    def body(row: te.Expr, column: te.Expr) -> te.Expr:
        idx: list[te.Expr | int] = [0] * x.ndim
        inner = 1
        for position, d in enumerate(reversed(spread)):
            index = row // inner if inner > 1 else row
            idx[d] = index if position == len(spread) - 1 else index % x.shape[d]
            inner *= x.shape[d]
        idx[axis] = column // components if components > 1 else column
        idx[-1] = column % components if components > 1 else 0
        return x[tuple(idx)]

    return named_compute((count, x.shape[axis] * components), ["row", "column"], body,
                         ctx.state.unique(f"{ctx.node.output[0]}_rows"))


def _product_back(ctx: NodeContext, product: Tensor, shape: Sequence[int], rows: Sequence[int],
                  bins_dim: int, divisor: int, dtype: DType) -> Tensor:
    """``y`` of ``shape`` (ONNX's layout: bins at ``bins_dim``, parts last) from ``product``
    ``[rows, bins * parts]``: row ``sum_d idx[d] * stride_d`` over the dimensions ``rows``
    (row-major), column ``idx[bins_dim] * parts + idx[-1]``; divided by ``divisor`` (> 1: an
    inverse DFT) and cast to ``dtype``."""
    parts = shape[-1]
    strides = [math.prod(shape[d] for d in rows[i + 1:]) for i in range(len(rows))]

    def body(*idx: te.Expr) -> te.Expr:
        row: te.Expr | int = 0
        for d, stride in zip(rows, strides):
            if shape[d] > 1:
                term = idx[d] * stride if stride != 1 else idx[d]
                row = term if isinstance(row, int) else row + term
        column = idx[bins_dim] * parts + idx[-1] if parts > 1 else idx[bins_dim]
        value = product[row, column]
        if divisor != 1:
            value = value / float(divisor)
        return value.astype(dtype) if dtype != product.dtype else value

    return named_compute(tuple(shape), axis_names(len(shape)), body, ctx.out())


def _matrix_tensor(ctx: NodeContext, matrix: np.ndarray, what: str) -> Tensor:
    samples, components, bins, parts = matrix.shape
    flat = np.ascontiguousarray(matrix.reshape(samples * components, bins * parts),
                                dtype=np.float32)
    return ctx.state.constant_tensor(flat, f"{ctx.node.output[0]}_{what}")


@converter("DFT")
def convert_dft(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    _float_input(ctx, x, "input")
    rank = x.ndim
    if rank < 2:
        raise ctx.unsupported(f"its input has rank {rank}; it must be [batch..., n, 1 or 2]")
    components = _components(ctx, x)
    if ctx.version >= 20:
        axis = _scalar(ctx, 2, "axis") if ctx.has(2) else -2
    else:
        axis = int(ctx.attr("axis", 1))
    if not -rank <= axis < rank or axis % rank == rank - 1:
        raise ctx.unsupported(f"axis={axis} for an input of rank {rank}; it must name one of "
                              f"the signal's dimensions, in [{-rank}, -2] or [0, {rank - 2}]")
    axis %= rank
    inverse, onesided = bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0))
    samples = x.shape[axis]
    if ctx.has(1):
        length = _scalar(ctx, 1, "dft_length")
    else:
        length = 2 * (samples - 1) if inverse and onesided else samples
    if length < 1:
        raise ctx.unsupported(f"the DFT length is {length}; it must be at least 1 (an inverse "
                              "one-sided DFT of one bin needs dft_length)")
    _check_size(ctx, samples * components, length)
    matrix = dft_matrix(samples, components, length, inverse, onesided)
    bins, parts = matrix.shape[2:]

    others = [d for d in range(rank - 1) if d != axis]
    rows = _signal_rows(ctx, x, axis, others)
    product = ops.matmul(rows, _matrix_tensor(ctx, matrix, "dft_matrix"),
                         out_dtype=DType.FLOAT32,
                         name=ctx.state.unique(f"{ctx.node.output[0]}_product"))
    shape = [*x.shape[:-1], parts]
    shape[axis] = bins
    return [_product_back(ctx, product, shape, others, axis, length if inverse else 1,
                          x.dtype)]


@converter("STFT")
def convert_stft(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    _float_input(ctx, x, "signal")
    if x.ndim != 3:
        raise ctx.unsupported(f"its signal has shape {x.shape}; it must be [batch, length, 1 "
                              "or 2]")
    components = _components(ctx, x)
    batch, signal_length = x.shape[:2]
    step = _scalar(ctx, 1, "frame_step")
    if step < 1:
        raise ctx.unsupported(f"frame_step is {step}; it must be at least 1")
    window: Tensor | np.ndarray | None = None
    if ctx.has(2):
        window = ctx.value(2)
        if window.ndim != 1:
            raise ctx.unsupported(f"its window has shape {tuple(window.shape)}; it must be 1-d")
    if ctx.has(3):
        length = _scalar(ctx, 3, "frame_length")
    else:
        length = window.shape[0] if window is not None else signal_length
    window_size = window.shape[0] if window is not None else length
    if not 1 <= length <= signal_length:
        raise ctx.unsupported(f"the frame length (frame_length, else the window's length) is "
                              f"{length}; it must be in [1, {signal_length}] (the signal's "
                              "length)")
    frames = 1 + (signal_length - length) // step
    onesided = bool(ctx.attr("onesided", 1))  # STFT: one-sided by default
    # samples past the frame length are cut by the DFT; those before it lie inside the signal
    # (the last frame ends at (frames - 1) * step + length <= signal_length)
    _check_size(ctx, min(window_size, length) * components, length)
    used = min(window_size, length)
    matrix = dft_matrix(used, components, length, onesided=onesided)
    runtime_window: Tensor | None = None
    if isinstance(window, np.ndarray):
        matrix = matrix * window[:used].astype(np.float64)[:, None, None, None]
    elif window is not None:
        runtime_window = window
        if window.dtype != x.dtype:
            raise ctx.unsupported(f"its window is {window.dtype.value} but the signal is "
                                  f"{x.dtype.value}; they must have one dtype")

    def frame(b: te.Expr, f: te.Expr, k: te.Expr, c: te.Expr) -> te.Expr:
        sample = x[b, f * step + k if step != 1 else f + k, c]
        return sample * runtime_window[k] if runtime_window is not None else sample

    framed = named_compute((batch, frames, used, components), ["b", "f", "k", "c"], frame,
                           ctx.state.unique(f"{ctx.node.output[0]}_frames"))
    rows = ops.reshape(framed, (batch * frames, used * components),
                       name=ctx.state.unique(f"{ctx.node.output[0]}_rows"))
    product = ops.matmul(rows, _matrix_tensor(ctx, matrix, "dft_matrix"),
                         out_dtype=DType.FLOAT32,
                         name=ctx.state.unique(f"{ctx.node.output[0]}_product"))
    bins = matrix.shape[2]
    return [_product_back(ctx, product, (batch, frames, bins, 2), (0, 1), 2, 1, x.dtype)]
