"""The direct lowering of channels-last convolutions (blocking/direct_nhwc.py): the
``outer_product_f32_taps_nhwc`` micro-kernels against their declared semantics, and whole
convolutions rewritten to NHWC by the layout pass against the reference on awkward shapes, at
1 and 2 threads, with fused epilogues."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from template_forcing import check_against_reference
from tilecraft_x86_avx512 import build
from tilecraft_x86_avx512.blocking import direct_nhwc, winograd
from tilecraft_x86_avx512.blocking.direct_nhwc import nhwc_geometry
from tilecraft_x86_avx512.microkernels import (
    NHWC_TAPS_ACC_BY_STRIDE,
    NHWC_TAPS_BY_STRIDE,
    render,
)
from tilecraft_x86_avx512.target import X86Avx512Target

from tilecraft import ops, te
from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.passes.contraction import as_contraction
from tilecraft.passes.layout import choose_layout


@pytest.fixture(autouse=True)
def _direct_path_only(monkeypatch):
    """These tests are about the direct path: Winograd (blocking/winograd.py, which takes 3x3
    stride-1 convolutions of 48 tiles or more by default) off."""
    monkeypatch.setattr(winograd, "WINOGRAD", False)


def NhwcTarget(threads: int) -> X86Avx512Target:   # noqa: N802 (reads as the target class)
    """The x86 target preferring channels-last convolutions."""
    target = X86Avx512Target(threads=threads, layouts={"conv2d": "NHWC"})
    target.spec = target.spec.model_copy(update={"layout_min_convolutions": 1,
                                                  "layout_min_pixels": 0})
    return target


def _direct(exe) -> list:
    return [k for k in exe.kernels if "direct NHWC" in k.attrs.get("schedule", "")]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("mi, nr, mv, nc, ki, kh, kw", [
    (6, 64, 6, 64, 16, 3, 3), (6, 64, 4, 50, 7, 3, 3), (5, 32, 5, 17, 3, 7, 7),
    (1, 16, 1, 16, 1, 1, 1), (8, 48, 3, 33, 5, 1, 3), (4, 16, 4, 16, 9, 2, 1)])
def test_micro_kernel_matches_its_declared_semantics(accumulate, stride, mi, nr, mv, nc, ki,
                                                     kh, kw):
    """A read as [KH, pixels, KI] with a row stride, B as [KH, KW, KI, NR] with a padded
    panel: C's first MV rows and NC columns written (added to, by the _acc variants), nothing
    else."""
    decl = (NHWC_TAPS_ACC_BY_STRIDE if accumulate else NHWC_TAPS_BY_STRIDE)[stride]
    span = (mv - 1) * stride + kw
    params = {"MI": mi, "NR": nr, "KI": ki, "MV": mv, "NC": nc, "KH": kh, "KW": kw, "AW": span}
    text = render(decl.name, params, "mk").replace("alwaysinline nounwind", "nounwind") \
        .replace("define internal", "define")
    text += ("\ndeclare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, "
             "<16 x float>)\ndeclare void @llvm.masked.store.v16f32.p0(<16 x float>, ptr, "
             "<16 x i1>)\ndeclare <16 x float> @llvm.masked.load.v16f32.p0(ptr, <16 x i1>, "
             "<16 x float>)\n")
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, ptr, i64, i64, i64, ptr, i64, i64, i64, i64, ptr, i64, i64)(
        build.jit_compile(text).address("mk"))
    rng = np.random.default_rng(mi * nr + ki)
    width = span + 3                               # image rows wider than the strip reads
    a = rng.standard_normal((kh, width, ki)).astype(np.float32)
    b = rng.standard_normal((kh, kw, ki, nr)).astype(np.float32)
    c = np.full((mi + 2, nr + 5), 7.0, np.float32)  # C's rows longer than NR
    c[:mv, :nc] = rng.standard_normal((mv, nc))
    want = c.copy()
    fn(a.ctypes.data, width * ki, ki, 1, b.ctypes.data, kw * ki * nr, ki * nr, nr, 1,
       c.ctypes.data, nr + 5, 1)
    decl.reference(a[:, :span], b[..., :nc], want[:mv, :nc], **params)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    assert (c[mv:] == 7).all() and (c[:, nc:] == 7).all()


# (in channels, out channels, height, width, window, padding, stride): primes, channels not
# multiples of 16 (ragged panels), rows not multiples of the strip (ragged strips), one output
# column, 1xK and Kx1 windows, no padding, a 7x7 stem-like window on 3 channels, a 1x1
# projection of stride 2
SHAPES = [(37, 17, 7, 5, (3, 3), 1, 1), (23, 80, 9, 8, (5, 5), 2, 1),
          (19, 97, 6, 9, (3, 3), 0, 1), (29, 33, 2, 13, (3, 3), 1, 1),
          (31, 64, 10, 11, (1, 3), (0, 1), 1), (16, 48, 12, 7, (3, 1), (1, 0), 1),
          (37, 17, 13, 11, (3, 3), 1, 2), (3, 64, 29, 31, (7, 7), 3, 2),
          (19, 48, 9, 8, (3, 3), 0, 2), (40, 96, 13, 14, (1, 1), 0, 2)]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_conv_in_nhwc_matches_reference(shape, threads, split, monkeypatch):
    """Whole windows, and windows cut into rows (one call each, added up)."""
    monkeypatch.setattr(direct_nhwc, "splits_window", lambda g, mi, nr, l2: split)
    monkeypatch.setattr(direct_nhwc, "piece_channels", lambda c, nr, l1: max(1, c // 3 + 1))
    cin, cout, h, w, (kh, kw), pad, stride = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.constant(np.random.default_rng(3).standard_normal((cout, cin, kh, kw))
                     .astype(np.float32), name="w")
    y = ops.conv2d(x, wt, padding=pad, stride=stride, name="y")
    exe = check_against_reference([y], threads, target=NhwcTarget(threads=threads))
    # every shape here has more than one output row and column: the path takes it whenever
    # the output channels fill whole vectors (the default), else the template's im2col does
    (kernel,) = _direct(exe) or [None]
    assert (kernel is not None) == (cout % 16 == 0)
    if kernel is not None:
        assert kernel.attrs["micro_kernel"] == NHWC_TAPS_BY_STRIDE[stride].name
        assert ("window pieces" in kernel.attrs["schedule"]) == split


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("batch, shape", [(2, SHAPES[0]), (3, SHAPES[6]), (2, SHAPES[9])])
def test_batched_conv_in_nhwc_matches_reference(batch, shape, split, monkeypatch):
    """A batch of images: the parallel loop runs over (image, panel, block of rows)."""
    monkeypatch.setattr(direct_nhwc, "splits_window", lambda g, mi, nr, l2: split)
    cin, cout, h, w, (kh, kw), pad, stride = shape
    x = te.placeholder((batch, cin, h, w), name="x")
    wt = te.constant(np.random.default_rng(6).standard_normal((cout, cin, kh, kw))
                     .astype(np.float32), name="w")
    bias = te.constant(np.random.default_rng(7).standard_normal(cout).astype(np.float32),
                       name="bias")
    y = ops.conv2d(x, wt, padding=pad, stride=stride, name="y")
    e = te.compute(y.shape, lambda n, k, i, j: te.max(y[n, k, i, j] + bias[k], 0.0), name="e")
    exe = check_against_reference([e], 2, target=NhwcTarget(threads=2))
    (kernel,) = _direct(exe) or [None]
    assert (kernel is not None) == (cout % 16 == 0)
    if kernel is not None:
        assert f"{batch} images" in kernel.attrs["schedule"]


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_residual_and_relu_epilogue_is_fused(threads, split, monkeypatch):
    """A conv, a bias, a residual add and a ReLU, read by the next convolution (so the sum
    stays channels-last; a graph output is transposed back): one kernel writes the sum, its
    epilogue on each tile (ragged strips and panels included), or over the block once every
    window row is in."""
    monkeypatch.setattr(direct_nhwc, "splits_window", lambda g, mi, nr, l2: split)
    monkeypatch.setattr(direct_nhwc, "piece_channels", lambda c, nr, l1: 16)
    x = te.placeholder((1, 37, 15, 13), name="x")
    wt = te.constant(np.random.default_rng(4).standard_normal((80, 37, 3, 3))
                     .astype(np.float32), name="w")
    bias = te.placeholder((80,), name="bias")
    res = te.placeholder((1, 80, 15, 13), name="res")
    y = ops.conv2d(x, wt, padding=1, name="y")
    e = te.compute(y.shape, lambda n, k, i, j: te.max(y[n, k, i, j] + bias[k] + res[n, k, i, j],
                                                       0.0), name="sum")
    w2 = te.constant(np.random.default_rng(5).standard_normal((16, 80, 1, 1))
                     .astype(np.float32), name="w2")
    out = ops.conv2d(e, w2, name="out")
    exe = check_against_reference([out], threads, seed=1, target=NhwcTarget(threads=threads))
    (kernel,) = _direct(exe)
    conv, epilogue = kernel.attrs.get("fused")
    assert conv == "y_nhwc" and epilogue.startswith("sum_nhwc")


class Spec:
    preferred_layouts = {"conv2d": "NHWC"}


@pytest.mark.parametrize("form", ["1x1", "dilated", "strided3", "uneven"])
def test_other_forms_are_not_this_path(form):
    """A 1x1 stride-1 convolution (a plain GEMM read in place), dilation, stride 3, strides
    unequal along the axes: no geometry."""
    x = te.placeholder((1, 24, 11, 9), name="x")
    k = 1 if form == "1x1" else 3
    wt = te.placeholder((32, 24, k, k), name="w")
    kwargs = {"stride": 3} if form == "strided3" else {"dilation": 2} if form == "dilated" \
        else {"stride": (1, 2)} if form == "uneven" else {}
    y = ops.conv2d(x, wt, padding=k // 2, name="y", **kwargs)
    graph = choose_layout(Graph.from_outputs([y]), Spec())
    contraction = as_contraction(graph.tensor("y_nhwc"), broadcast_batch=True)
    assert contraction is not None and nhwc_geometry(contraction) is None


def test_the_target_takes_layouts_and_refuses_unknown_ones():
    target = X86Avx512Target(threads=1, layouts={"conv2d": "NCHW"})
    assert target.spec.preferred_layouts == {"conv2d": "NCHW"}
    assert X86Avx512Target(threads=1).spec.preferred_layouts == {"conv2d": "NHWC",
                                                                 "grouped_conv2d": "NCHW"}
    with pytest.raises(TilecraftError, match="conv2d and grouped_conv2d the layout NCHW or NHWC"):
        X86Avx512Target(threads=1, layouts={"conv2d": "CHWN"})
    with pytest.raises(TilecraftError, match="'matmul'"):
        X86Avx512Target(threads=1, layouts={"matmul": "NHWC"})
