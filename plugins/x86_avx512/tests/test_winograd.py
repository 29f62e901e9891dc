"""Winograd F(4x4, 3x3) and F(2x2, 3x3) convolutions (blocking/winograd.py): the transform
matrices against a direct correlation, and whole convolutions, NCHW and NHWC, against the
reference on awkward shapes (maps not a multiple of the tile, prime channel counts, one row of
tiles), at 1 and 2 threads, with and without a fused epilogue; and which convolutions take the
path (and which algorithm) by default."""

from __future__ import annotations

import re

import numpy as np
import pytest
from template_forcing import check_against_reference, check_space_switch
from test_direct_nhwc import NhwcTarget
from tilecraft_x86_avx512.blocking import winograd
from tilecraft_x86_avx512.blocking.winograd import (
    AT,
    BT,
    F2,
    F4,
    G,
    WinogradShape,
    choose_algorithm,
    prefers_winograd,
    product_slice,
    transform_flops,
)
from tilecraft_x86_avx512.fusion import BlockingMachine
from tilecraft_x86_avx512.target import X86Avx512Target

from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.html_report import collect_rows
from tilecraft.passes.contraction import as_contraction
from tilecraft.pipeline import run_pipeline


def _winograd(exe) -> list:
    return [k for k in exe.kernels if "Winograd F(" in k.attrs.get("schedule", "")]


def _conv(cin: int, cout: int, h: int, w: int, seed: int = 3):
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.constant((np.random.default_rng(seed).standard_normal((cout, cin, 3, 3))
                      / np.sqrt(9 * cin)).astype(np.float32), name="w")
    return x, ops.conv2d(x, wt, padding=1, name="y")


@pytest.mark.parametrize("algorithm", [F4, F2], ids=["F4", "F2"])
def test_transforms_compute_a_correlation(algorithm):
    """A^T [(G g G^T) * (B^T d B)] A is the m x m valid correlation of an (m + 2)-square tile
    d with a 3x3 filter g."""
    rng = np.random.default_rng(0)
    m, span = algorithm.tile, algorithm.span
    bt, g_, at = algorithm.bt, algorithm.g, algorithm.at
    for _ in range(5):
        d, g = rng.standard_normal((span, span)), rng.standard_normal((3, 3))
        got = at @ ((g_ @ g @ g_.T) * (bt @ d @ bt.T)) @ at.T
        want = np.array([[np.sum(d[r:r + 3, s:s + 3] * g) for s in range(m)]
                         for r in range(m)])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert (AT.shape, BT.shape, G.shape) == ((4, 6), (6, 6), (6, 3))


#: (input channels, output channels, height, width): maps not a multiple of 4 (a ragged last
#: tile row and column), whole tiles, one row of tiles, a prime channel count, 3 channels, and
#: 128 channels (the products' reduction in slices, :func:`winograd.product_slice`)
SHAPES = [(16, 16, 13, 9), (17, 33, 8, 30), (3, 7, 17, 23), (20, 16, 4, 8), (16, 48, 2, 17),
          (128, 16, 9, 8)]


@pytest.fixture
def everywhere(monkeypatch):
    """The path taken by every 3x3 stride-1 convolution, however small."""
    monkeypatch.setattr(winograd, "MIN_TILES", 1)
    monkeypatch.setattr(winograd, "MIN_CHANNELS", 1)


@pytest.fixture(params=[F4, F2], ids=["F4", "F2"])
def algorithm(request, monkeypatch, everywhere):
    """Every 3x3 stride-1 convolution on the given algorithm."""
    monkeypatch.setattr(winograd, "choose_algorithm", lambda shape: request.param)
    return request.param


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_conv_matches_reference(shape, threads, layout, algorithm):
    _, y = _conv(*shape)
    target = X86Avx512Target(threads=threads, layouts={"conv2d": "NCHW"}) \
        if layout == "NCHW" else NhwcTarget(threads)
    exe = check_against_reference([y], threads, target=target)
    (kernel,) = _winograd(exe)
    assert layout in kernel.attrs["schedule"] and algorithm.name in kernel.attrs["schedule"]
    (product,) = [k for k in exe.kernels if k.name.endswith("_wino_m")]
    schedule = product.attrs["schedule"]
    nr, kc = (int(re.search(rf"{key}=(\d+)", schedule).group(1)) for key in ("NR", "KC"))
    l1_bytes = BlockingMachine.from_spec(target.spec, threads).l1_bytes
    assert kc == product_slice(shape[0], nr, l1_bytes)   # 128 channels: 64 on a 48 KB L1
    names = [k.name for k in exe.kernels]
    assert any(name.endswith("_wino_u") for name in names)   # the filter transform
    assert any(name.endswith("_wino_v") for name in names)   # the input transform


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_epilogue_matches_reference(threads, layout, algorithm):
    """Bias, residual and ReLU computed by the output transform, the conv never stored."""
    x, y = _conv(24, 32, 11, 10)
    bias = te.constant(np.linspace(-1, 1, 32, dtype=np.float32).reshape(1, 32, 1, 1),
                       name="bias")
    residual = te.placeholder((1, 32, 11, 10), name="r")
    e = ops.relu(ops.add(ops.add(y, bias), residual))
    target = X86Avx512Target(threads=threads, layouts={"conv2d": "NCHW"}) \
        if layout == "NCHW" else NhwcTarget(threads)
    exe = check_against_reference([e], threads, target=target)
    (kernel,) = _winograd(exe)
    if layout == "NCHW":   # NHWC: the consumers read the conv through the layout's transpose
        assert kernel.attrs["fused"] == ["y", e.name]


def test_filters_are_transformed_once(everywhere):
    """The filter transform reads only the constant weights: the Executable runs it when the
    kernels are installed, not per call."""
    _, y = _conv(16, 16, 12, 12)
    exe = check_against_reference([y], 1, target=X86Avx512Target(threads=1,
                                                                   layouts={"conv2d": "NCHW"}))
    x = np.random.default_rng(5).standard_normal((1, 16, 12, 12)).astype(np.float32)
    first = exe(x)
    np.testing.assert_array_equal(exe(x), first)
    runs = {k.name: len(k.run_seconds) for k in exe.report.kernels}
    assert runs["y_wino_u"] <= 1 and runs["y_wino_v"] >= 3


def test_default_takes_maps_of_many_tiles():
    """28x28 (49 4x4 tiles) of 64 channels takes F(4x4, 3x3), 14x14 (49 2x2 tiles) F(2x2,
    3x3); 7x7 (16 2x2 tiles), 8 channels, stride 2, 1x1 and non-constant weights take neither."""
    def contraction(cin, hw, k=3, stride=1, constant=True):
        x = te.placeholder((1, cin, hw, hw), name="x")
        w = te.constant(np.ones((64, cin, k, k), np.float32)) if constant else \
            te.placeholder((64, cin, k, k), name="w")
        return as_contraction(ops.conv2d(x, w, stride=stride, padding=k // 2),
                              broadcast_batch=True)

    assert prefers_winograd(contraction(64, 28)) and prefers_winograd(contraction(64, 14))
    assert not prefers_winograd(contraction(64, 7))
    shape = WinogradShape(64, 30, 30, 28, 28, 64, "NCHW")
    assert choose_algorithm(shape) is F4
    assert choose_algorithm(WinogradShape(64, 16, 16, 14, 14, 64, "NHWC")) is F2
    assert not prefers_winograd(contraction(8, 28))
    assert not prefers_winograd(contraction(64, 28, stride=2))
    assert not prefers_winograd(contraction(64, 28, k=1))
    assert not prefers_winograd(contraction(64, 28, constant=False))


def test_switch_off_restores_the_direct_path(monkeypatch):
    _, y = _conv(64, 64, 28, 28)
    target = X86Avx512Target(threads=1, layouts={"conv2d": "NCHW"})
    assert _winograd(check_against_reference([y], 1, target=target))
    monkeypatch.setattr(winograd, "WINOGRAD", False)
    assert not _winograd(check_against_reference([y], 1, target=target))


def test_report_credits_the_operations_each_kernel_does(everywhere):
    """The roofline's FLOPs: the 36 products' and the transforms', not the direct
    convolution's (which would put the output transform far above the ceiling)."""
    _, y = _conv(16, 32, 12, 12)
    state = run_pipeline(Graph.from_outputs([y]),
                         X86Avx512Target(threads=1, layouts={"conv2d": "NCHW"}))
    flops = {row.name: row.flops for row in collect_rows(state)}
    tiles = 3 * 3
    assert flops["y_wino_m"] == 2 * 36 * tiles * 16 * 32
    assert flops["y_wino_v"] == tiles * 16 * transform_flops(BT, BT)
    assert flops["y"] == tiles * 32 * transform_flops(AT, AT)


def test_search_space_has_a_winograd_choice():
    """The template's search space offers WINOGRAD for a 3x3 stride-1 convolution with constant
    weights (not for a stride-2 one); decoded points of both values compile, take the path
    exactly when it is on, and match the reference — small maps included, since a tuned
    choice is not bound by the default's thresholds."""
    from tilecraft_x86_avx512.gemm_template import template_space

    x, y = _conv(24, 32, 9, 11)
    space = template_space(y, 49152, 1 << 21, 2)
    strided = template_space(ops.conv2d(x, te.constant(np.ones((32, 24, 3, 3), np.float32)),
                                        stride=2, padding=1), 49152, 1 << 21, 2)
    rng = np.random.default_rng(1)
    assert "WINOGRAD" not in strided.decode(strided.space.random_point(rng))
    xs = rng.standard_normal((1, 24, 9, 11)).astype(np.float32)
    check_space_switch(space, y, xs, "WINOGRAD", _winograd)
