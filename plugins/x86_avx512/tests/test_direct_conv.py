"""The direct lowering of KxK convolutions of stride 1 or 2 (blocking/direct_conv.py): the padded
activation read in place tap by tap by ``outer_product_f32_taps``, W^T packed once, tiles stored
transposed (through the fused epilogue where there is one), against the reference on awkward
shapes at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from template_forcing import ForcedTarget, check_against_reference, check_space_switch
from tilecraft_x86_avx512.blocking import direct_conv as direct
from tilecraft_x86_avx512.blocking import winograd
from tilecraft_x86_avx512.microkernels import (
    OUTER_PRODUCT_F32_TAPS,
    TAPS_BY_STRIDE,
    TRANSPOSED_TAPS_BY_STRIDE,
)
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run


@pytest.fixture(autouse=True)
def _direct_path_only(monkeypatch):
    """These tests are about the direct path: Winograd (blocking/winograd.py, which takes 3x3
    stride-1 convolutions of 48 tiles or more by default) off."""
    monkeypatch.setattr(winograd, "WINOGRAD", False)


def _weights(shape: tuple[int, ...], seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _direct_kernels(exe) -> list:
    return [k for k in exe.kernels if "direct" in k.attrs.get("schedule", "")]


# (in channels, out channels, height, width, window, padding): primes, channels not multiples
# of 16 (ragged panels), rows not multiples of the strip (ragged strips), one output pixel,
# one output row or column, 1xK and Kx1 windows, no padding, a 5x5 window
SHAPES = [(37, 17, 7, 5, (3, 3), 1), (23, 80, 9, 8, (5, 5), 2), (19, 97, 6, 9, (3, 3), 0),
          (17, 16, 1, 1, (3, 3), 1), (29, 33, 1, 13, (3, 3), 1), (13, 40, 11, 1, (3, 3), 1),
          (31, 64, 10, 11, (1, 3), (0, 1)), (16, 48, 12, 7, (3, 1), (1, 0)),
          (64, 64, 14, 14, (3, 3), 1)]
# the same with stride 2 (outputs of odd and even sizes; a 7x7 stem-like window on 3 channels)
STRIDED = [(37, 17, 13, 11, (3, 3), 1), (3, 64, 29, 31, (7, 7), 3), (19, 48, 9, 8, (3, 3), 0),
           (16, 80, 12, 17, (5, 5), 2)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(*s, 1) for s in SHAPES] + [(*s, 2) for s in STRIDED])
def test_plain_conv_matches_reference(shape, threads):
    cin, cout, h, w, (kh, kw), pad, stride = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.placeholder((cout, cin, kh, kw), name="w")
    y = ops.conv2d(x, wt, padding=pad, stride=stride, name="y")
    exe = check_against_reference([y], threads, target=ForcedTarget({"DIRECT": 1}, "y", threads))
    # an output of one row or column, a window of one row or column: a contraction over fewer
    # axes, the template's
    applies = direct.direct_geometry(as_contraction(y, broadcast_batch=True)) is not None
    assert applies == (min(h, w, kh, kw) > 1)
    if applies:
        (kernel,) = _direct_kernels(exe)
        # strips of at most 8 pixels: the micro-kernel stores its tile transposed
        mi = int(kernel.attrs["schedule"].split(" MI=")[1].split()[0])
        assert kernel.attrs["micro_kernel"] == (
            "outer_product_f32_taps" + ("" if stride == 1 else "_s2")
            + ("_t" if mi <= 8 else ""))


@pytest.mark.parametrize("config", [{"MI": 5, "NR": 32}, {"MI": 12, "NR": 16},
                                    {"MI": 3, "NR": 96}])
def test_config_tiles(config):
    x = te.placeholder((1, 21, 9, 13), name="x")
    wt = te.placeholder((50, 21, 3, 3), name="w")
    exe = check_against_reference([ops.conv2d(x, wt, padding=1, name="y")], 2,
                                  target=ForcedTarget({"DIRECT": 1, **config}, "y", 2))
    (kernel,) = _direct_kernels(exe)
    assert f"MI={config['MI']} NR={config['NR']}" in kernel.attrs["schedule"]


@pytest.mark.parametrize("form", ["strided", "dilated", "batched", "1x1", "uneven"])
def test_other_forms_fall_back_to_the_template(form):
    """Forced, a convolution the path cannot compute (stride 3, dilation, a batch, a 1x1
    window, strides unequal along the axes) takes the template's lowering, still right."""
    n = 2 if form == "batched" else 1
    x = te.placeholder((n, 24, 11, 9), name="x")
    k = 1 if form == "1x1" else 3
    wt = te.placeholder((32, 24, k, k), name="w")
    kwargs = {"stride": 3} if form == "strided" else {"dilation": 2} if form == "dilated" \
        else {"stride": (1, 2)} if form == "uneven" else {}
    y = ops.conv2d(x, wt, padding=k // 2, name="y", **kwargs)
    assert direct.direct_geometry(as_contraction(y, broadcast_batch=True)) is None
    exe = check_against_reference([y], 1, target=ForcedTarget({"DIRECT": 1}, "y", 1))
    assert not _direct_kernels(exe)


@pytest.mark.parametrize("row_store", [True, False])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(37, 48, 15, 14), (64, 64, 16, 16), (29, 97, 14, 17)])
def test_residual_and_relu_epilogues_match_reference(shape, threads, row_store, monkeypatch):
    """Fused epilogues go through the default path (made the default for every shape it can
    take, so ragged panels are covered too): bias, residual add, ReLU; through the row buffer
    (every shape here has a W^T panel larger than L1) and tile by tile."""
    monkeypatch.setattr(direct, "prefers_direct",
                        lambda c, l2_bytes: direct.direct_geometry(c) is not None)
    monkeypatch.setattr(direct, "ROW_STORE", row_store)
    cin, cout, h, w = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.constant(_weights((cout, cin, 3, 3)), name="w")
    bias = te.placeholder((cout,), name="bias")
    res = te.placeholder((1, cout, h, w), name="res")
    y = ops.conv2d(x, wt, padding=1, name="y")
    e = te.compute(y.shape, lambda n, k, i, j: te.max(y[n, k, i, j] + bias[k] + res[n, k, i, j],
                                                       0.0), name="sum")
    exe = check_against_reference([e], threads, seed=1)
    (kernel,) = _direct_kernels(exe)
    assert kernel.attrs.get("fused") == ["y", "sum"]


@pytest.mark.parametrize("stride", [1, 2])
def test_bands_of_rows_on_several_threads(stride, monkeypatch):
    """A large activation against few weights: each thread computes a band of rows (the last
    band short: 25 or 13 output rows on 2 threads) over every panel (64 and a ragged 16 of
    80 channels), with a fused bias and ReLU."""
    monkeypatch.setattr(direct, "prefers_direct",
                        lambda c, l2_bytes: direct.direct_geometry(c) is not None)
    x = te.placeholder((1, 24, 25, 23), name="x")
    wt = te.constant(_weights((80, 24, 3, 3)), name="w")
    bias = te.placeholder((80,), name="bias")
    y = ops.conv2d(x, wt, padding=1, stride=stride, name="y")
    e = te.compute(y.shape, lambda n, k, i, j: te.max(y[n, k, i, j] + bias[k], 0.0), name="e")
    exe = check_against_reference([e], 2, seed=3)
    (kernel,) = _direct_kernels(exe)
    assert "2 row blocks x 2 panels" in kernel.attrs["schedule"], kernel.attrs["schedule"]


def test_default_choice():
    """3x3 convolutions of stride 1 or 2 and the 7x7 stem with constant weights, whole vectors
    of output channels, rows of 14 pixels or more and an activation in L2 take the path by
    default."""
    def conv(cin, cout, size, k=3, constant=True, stride=1):
        x = te.placeholder((1, cin, size, size), name="x")
        w = te.constant(_weights((cout, cin, k, k)), name="w") if constant else \
            te.placeholder((cout, cin, k, k), name="w")
        return as_contraction(ops.conv2d(x, w, padding=k // 2, stride=stride),
                              broadcast_batch=True)

    l2 = 1 << 21
    assert all(direct.prefers_direct(conv(*args), l2)
               for args in ((64, 64, 56), (128, 128, 28), (256, 256, 14), (32, 16, 20, 5),
                            (64, 128, 56, 3, True, 2), (3, 64, 224, 7, True, 2)))
    assert not any(direct.prefers_direct(c, l2) for c in (
        conv(512, 512, 7), conv(64, 24, 56), conv(64, 64, 56, constant=False),
        conv(64, 64, 56, k=1), conv(2, 64, 56), conv(256, 256, 14, stride=2),
        conv(512, 64, 56)))    # 512 x 58 x 58 floats: more than L2
    y = ops.conv2d(te.placeholder((1, 32, 16, 16), name="x"),
                   te.constant(_weights((32, 32, 3, 3)), name="w"), padding=1, name="y")
    exe = check_against_reference([y], 2)
    assert len(_direct_kernels(exe)) == 1
    assert set(exe._plan.precomputed) == {"y_wpacked"}   # the weights packed once


def test_config_switch_off():
    x = te.placeholder((1, 32, 16, 16), name="x")
    y = ops.conv2d(x, te.constant(_weights((32, 32, 3, 3)), name="w"), padding=1, name="y")
    exe = check_against_reference([y], 1, target=ForcedTarget({"DIRECT": 0}, "y", 1))
    assert not _direct_kernels(exe)


def test_unknown_tile_is_refused():
    x = te.placeholder((1, 32, 8, 8), name="x")
    y = ops.conv2d(x, te.placeholder((16, 32, 3, 3), name="w"), padding=1, name="y")
    with pytest.raises(TilecraftError, match="NR"):
        tc.compile(y, target=ForcedTarget({"DIRECT": 1, "MI": 6, "NR": 24}, "y", 1))


@pytest.mark.parametrize("row_store", [True, False])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("tile", [(6, 32), (5, 16), (7, 48), (10, 16)])
def test_kernels_in_the_interpreter(tile, stride, row_store, monkeypatch):
    """The Kernel IR itself on the interpreter (every access bounds-checked), the micro-kernel
    emulated from its declared semantics: ragged strips, ragged panels, row blocks past the
    last row; strips of up to 8 pixels through the variant storing its tile transposed (into
    the row buffer, or stored tile by tile), 10 through the other."""
    from tilecraft.kernel_ir.interpreter import run_kernels
    from tilecraft.lower.options import LoweringOptions

    monkeypatch.setattr(direct, "ROW_STORE", row_store)

    x = te.placeholder((1, 11, 7, 9), name="x")
    wt = te.placeholder((19, 11, 3, 3), name="w")
    y = ops.conv2d(x, wt, padding=1, stride=stride, name="y")
    mi, nr = tile
    kernels = direct.lower_direct(as_contraction(y, broadcast_batch=True), mi, nr,
                                  LoweringOptions(vector_lanes=16), threads=4)
    decls = (TAPS_BY_STRIDE[stride], TRANSPOSED_TAPS_BY_STRIDE[stride])
    rng = np.random.default_rng(8)
    inputs = {"x": rng.standard_normal((1, 11, 7, 9)).astype(np.float32),
              "w": rng.standard_normal((19, 11, 3, 3)).astype(np.float32)}
    padded = np.pad(inputs["x"], ((0, 0), (0, 0), (1, 1), (1, 1)))
    shape = tuple(y.shape)
    out = run_kernels(kernels, {"y_pad": padded, "w": inputs["w"],
                                "y": np.full(shape, np.nan, np.float32)},
                      semantics={decl.name: decl.reference for decl in decls})
    assert kernels[1].attrs["micro_kernel"] == decls[mi <= 8].name
    from tilecraft.kernel_ir.nodes import Allocate
    from tilecraft.kernel_ir.visitor import walk_stmts

    (tile_buffer,) = [s.buffer for s in walk_stmts(kernels[1].body) if isinstance(s, Allocate)]
    # the row buffer: channels x the row's pixels, whole vectors (the others: 8 or MI wide)
    whole_row = tile_buffer.shape[1] == nr and tile_buffer.shape[2] >= shape[-1] \
        and tile_buffer.shape[2] % 16 == 0
    assert whole_row == (row_store and mi <= 8)
    np.testing.assert_allclose(out["y"].reshape(shape), run(y, inputs), rtol=1e-5, atol=1e-5)


def test_micro_kernel_renders_every_edge():
    """The template renders (and LLVM accepts, through a compiled convolution above) ragged
    rows, ragged columns and one-tap-row windows."""
    from tilecraft_x86_avx512.microkernels import render

    for params in ({"MI": 6, "NR": 64, "KI": 5, "MV": 2, "NC": 50, "KH": 3, "KW": 3, "AW": 4},
                   {"MI": 4, "NR": 16, "KI": 1, "MV": 4, "NC": 16, "KH": 1, "KW": 2, "AW": 5}):
        ir = render(OUTER_PRODUCT_F32_TAPS.name, params, "mk")
        assert ir.count("llvm.fma.v16f32") == params["MV"] * -(-params["NC"] // 16) * \
            params["KH"] * params["KW"]


def test_tuner_space_offers_the_path():
    """The template's search space has a DIRECT choice for a stride-1 3x3 convolution with
    constant weights (none for a 1x1 one); decoded points of both kinds compile and match."""
    from tilecraft_x86_avx512.gemm_template import template_space

    x = te.placeholder((1, 24, 9, 11), name="x")
    y = ops.conv2d(x, te.constant(_weights((32, 24, 3, 3)), name="w"), padding=1, name="y")
    space = template_space(y, 49152, 1 << 21, 2)
    pointwise = template_space(ops.conv2d(x, te.constant(_weights((32, 24, 1, 1)), name="v")),
                               49152, 1 << 21, 2)
    rng = np.random.default_rng(1)
    assert "DIRECT" not in pointwise.decode(pointwise.space.random_point(rng))
    xs = rng.standard_normal((1, 24, 9, 11)).astype(np.float32)
    check_space_switch(space, y, xs, "DIRECT", _direct_kernels)


def test_casting_epilogue_and_other_dtypes_stay_right():
    """A consumer the transposed store cannot compute in its own buffer (a cast) and a
    float16 convolution take other lowerings, still right."""
    x = te.placeholder((1, 24, 16, 16), name="x")
    y = ops.conv2d(x, te.constant(_weights((32, 24, 3, 3)), name="w"), padding=1, name="y")
    e = te.compute(y.shape, lambda n, k, i, j: te.cast("float16", y[n, k, i, j] * 0.5),
                   name="cast")
    graph = Graph.from_outputs([e])
    exe = tc.compile(graph, target=X86Avx512Target(threads=2))
    xs = np.random.default_rng(0).standard_normal((1, 24, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe(x=xs).astype(np.float32),
                               run(graph, {"x": xs}).astype(np.float32), rtol=2e-3, atol=2e-2)
    assert all(k.attrs.get("fused") != ["y", "cast"] for k in _direct_kernels(exe))
    x16 = te.placeholder((1, 16, 14, 14), "float16", name="x")
    w16 = te.constant(_weights((16, 16, 3, 3)).astype(np.float16), name="w")
    y16 = ops.conv2d(x16, w16, padding=1, name="y")
    graph16 = Graph.from_outputs([y16])
    exe16 = tc.compile(graph16, target=X86Avx512Target(threads=1))
    xs16 = np.random.default_rng(1).standard_normal((1, 16, 14, 14)).astype(np.float16)
    np.testing.assert_allclose(exe16(x=xs16).astype(np.float32),
                               run(graph16, {"x": xs16}).astype(np.float32), rtol=2e-2,
                               atol=5e-2)
    assert not _direct_kernels(exe16)   # the taps micro-kernels are float32
