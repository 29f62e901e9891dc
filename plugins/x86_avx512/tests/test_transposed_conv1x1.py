"""The transposed lowering of 1x1 stride-1 convolutions with few output channels
(blocking/transposed_conv1x1.py): activation read in place, W^T packed once, tiles stored
transposed (through the fused epilogue where there is one), against the reference on awkward
shapes at 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest
from template_forcing import (
    ForcedTarget,
    check_against_reference,
    check_space_switch,
    conv_epilogues,
)
from tilecraft_x86_avx512.blocking import split_k
from tilecraft_x86_avx512.blocking import transposed_conv1x1 as transposed
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import TilecraftError
from tilecraft.graph import Graph
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


def _transposed_kernels(exe) -> list:
    return [k for k in exe.kernels if "transposed 1x1" in k.attrs.get("schedule", "")]


# (in channels, out channels, height, width): primes, a 1x1 plane, channels not multiples of
# 16, ragged pixel strips and channel panels, more than one panel of channels, one pixel
# row or column; the small ones
# (below the template's size threshold) forced onto the path with TRANSPOSE=1
SHAPES = [(37, 17, 7, 5), (96, 24, 13, 11), (160, 41, 3, 3),
          (199, 97, 5, 7), (64, 3, 17, 1), (101, 7, 11, 13), (144, 24, 56, 56)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", SHAPES)
def test_plain_conv_matches_reference(shape, threads):
    cin, cout, h, w = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.placeholder((cout, cin, 1, 1), name="w")
    exe = check_against_reference([ops.conv2d(x, wt, name="y")], threads,
                                  target=ForcedTarget({"TRANSPOSE": 1}, "y", threads))
    assert len(_transposed_kernels(exe)) == 1


@pytest.mark.parametrize("threads", [1, 2])
def test_a_1x1_plane_falls_back_to_the_template(threads):
    """One pixel: the contraction's rows are that pixel (a matrix-vector product), not the
    output channels; even forced, the transposed form does not apply and the result is right."""
    x = te.placeholder((1, 53, 1, 1), name="x")
    wt = te.placeholder((23, 53, 1, 1), name="w")
    exe = check_against_reference([ops.conv2d(x, wt, name="y")], threads,
                                  target=ForcedTarget({"TRANSPOSE": 1}, "y", threads))
    assert not _transposed_kernels(exe)


@pytest.mark.parametrize("shape", [(197, 64, 13, 11), (192, 64, 28, 28), (384, 64, 14, 14),
                                   (131, 64, 7, 11)])
def test_default_takes_the_path_for_few_output_channels(shape, monkeypatch):
    """Constant weights (a network's): the path by default; the same weights as an input
    would be packed every call, so they stay on the template; fewer than MIN_CHANNELS output
    channels stay on the template too (which reads the activation in place). (Split-K, which
    takes the small maps with many input channels at 2 threads first, is off here.)"""
    monkeypatch.setattr(split_k, "SPLIT_K", False)
    cin, cout, h, w = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.constant(_weights((cout, cin, 1, 1)), name="w")
    exe = check_against_reference([ops.conv2d(x, wt, name="y")], 2)
    assert len(_transposed_kernels(exe)) == 1
    as_input = te.placeholder((cout, cin, 1, 1), name="w")
    exe = check_against_reference([ops.conv2d(x, as_input, name="y")], 2)
    assert not _transposed_kernels(exe)
    few = te.constant(_weights((32, cin, 1, 1)), name="w")
    exe = check_against_reference([ops.conv2d(x, few, name="y")], 2)
    assert not _transposed_kernels(exe)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", [(96, 24, 13, 11), (160, 41, 3, 3), (199, 97, 5, 7),
                                   (101, 7, 11, 13), (131, 16, 29, 1), (97, 32, 13, 11)])
def test_residual_and_relu6_epilogues_match_reference(shape, threads, monkeypatch):
    """Fused epilogues go through the default path: the path is made the default for every
    shape it can take, so ragged channel panels are covered too."""
    monkeypatch.setattr(transposed, "prefers_transposed",
                        lambda c, l2_bytes, threads: transposed.activation_view(c) is not None)
    monkeypatch.setattr(split_k, "SPLIT_K", False)
    cin, cout, h, w = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.placeholder((cout, cin, 1, 1), name="w")
    e, r6 = conv_epilogues(ops.conv2d(x, wt, name="y"))
    exe = check_against_reference([e], threads, seed=1)
    (kernel,) = _transposed_kernels(exe)
    assert kernel.attrs.get("fused") == ["y", "sum"]
    exe = check_against_reference([r6], threads, seed=2)
    assert _transposed_kernels(exe)[0].attrs.get("fused") == ["y", "relu6"]


def test_casting_epilogue_stays_on_the_template():
    """A consumer the transposed store cannot compute in its own buffer (a cast) takes the
    template's path, still right."""
    x = te.placeholder((1, 80, 7, 5), name="x")
    wt = te.placeholder((16, 80, 1, 1), name="w")
    y = ops.conv2d(x, wt, name="y")
    e = te.compute(y.shape, lambda n, k, i, j: te.cast("float16", y[n, k, i, j] * 0.5),
                   name="cast")
    graph = Graph.from_outputs([e])
    exe = tc.compile(graph, target=X86Avx512Target(threads=1))
    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((1, 80, 7, 5)).astype(np.float32),
              "w": rng.standard_normal((16, 80, 1, 1)).astype(np.float32)}
    got, want = exe(**arrays), run(graph, arrays)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=2e-3)
    assert not _transposed_kernels(exe)


def test_constant_weights_are_packed_once():
    weights = np.random.default_rng(3).standard_normal((64, 160, 1, 1)).astype(np.float32)
    x = te.placeholder((1, 160, 9, 8), name="x")
    y = ops.conv2d(x, te.constant(weights, name="w"), name="y")
    exe = tc.compile(y, target=X86Avx512Target(threads=2))
    assert set(exe._plan.precomputed) == {"y_wpacked"}
    rng = np.random.default_rng(4)
    for _ in range(2):
        xs = rng.standard_normal((1, 160, 9, 8)).astype(np.float32)
        want = run(Graph.from_outputs([y]), {"x": xs})
        np.testing.assert_allclose(exe(xs), want, rtol=2e-4, atol=2e-4)
    assert _transposed_kernels(exe)


def test_default_choice_and_config_switch():
    """Few output channels take the path by default; ``TRANSPOSE=0`` turns it off, ``1`` on
    (with the config's tile), and shapes it cannot read in place never take it."""
    x = te.placeholder((1, 96, 14, 14), name="x")
    few = as_contraction(ops.conv2d(te.placeholder((1, 192, 14, 14), name="x4"),
                                    te.constant(_weights((64, 192, 1, 1)), name="a")),
                         broadcast_batch=True)
    fewer = as_contraction(ops.conv2d(x, te.constant(_weights((32, 96, 1, 1)), name="f")),
                           broadcast_batch=True)
    ragged = as_contraction(ops.conv2d(x, te.constant(_weights((24, 96, 1, 1)), name="r")),
                            broadcast_batch=True)
    wide = as_contraction(ops.conv2d(te.placeholder((1, 256, 56, 56), name="x3"),
                                     te.constant(_weights((64, 256, 1, 1)), name="e")),
                          broadcast_batch=True)
    many = as_contraction(ops.conv2d(x, te.constant(_weights((96, 96, 1, 1)), name="b")),
                          broadcast_batch=True)
    strided = as_contraction(ops.conv2d(x, te.placeholder((24, 96, 1, 1), name="c"),
                                        stride=2), broadcast_batch=True)
    batched = as_contraction(ops.conv2d(te.placeholder((2, 96, 7, 7), name="x2"),
                                        te.placeholder((24, 96, 1, 1), name="d")),
                             broadcast_batch=True)
    l2 = 1 << 21
    assert transposed.prefers_transposed(few, l2)
    # too many output channels, too few, a ragged vector of them, an activation larger than
    # L2; the weights an input, not a constant
    assert not any(transposed.prefers_transposed(c, l2) for c in (many, fewer, ragged, wide))
    assert transposed.prefers_transposed(wide, 1 << 23)
    as_input = as_contraction(ops.conv2d(x, te.placeholder((32, 96, 1, 1), name="i")),
                              broadcast_batch=True)
    assert not transposed.prefers_transposed(as_input, l2)
    assert transposed.activation_view(strided) is None
    assert transposed.activation_view(batched) is None
    y = ops.conv2d(x, te.placeholder((24, 96, 1, 1), name="w"), name="y")
    off = tc.compile(y, target=ForcedTarget({"TRANSPOSE": 0}, "y", 1))
    on = tc.compile(y, target=ForcedTarget({"TRANSPOSE": 1, "MI": 8, "NR": 32, "MC": 40}, "y", 1))
    assert not _transposed_kernels(off)
    (kernel,) = _transposed_kernels(on)
    assert "MI=8 NR=32" in kernel.attrs["schedule"] and "MC=40" in kernel.attrs["schedule"]
    arrays = {"x": np.random.default_rng(5).standard_normal((1, 96, 14, 14)).astype(np.float32),
              "w": np.random.default_rng(6).standard_normal((24, 96, 1, 1)).astype(np.float32)}
    want = run(Graph.from_outputs([y]), arrays)
    for exe in (off, on):
        np.testing.assert_allclose(exe(**arrays), want, rtol=2e-4, atol=2e-4)


def test_unknown_tile_is_refused():
    x = te.placeholder((1, 32, 4, 4), name="x")
    y = ops.conv2d(x, te.placeholder((8, 32, 1, 1), name="w"), name="y")
    with pytest.raises(TilecraftError, match="NR = 24"):
        tc.compile(y, target=ForcedTarget({"TRANSPOSE": 1, "MI": 6, "NR": 24}, "y", 1))


def test_tuner_space_offers_the_path():
    """The template's search space has a TRANSPOSE choice for a 1x1 convolution with constant
    weights (none for a matmul of inputs); decoded points of both kinds compile and match."""
    from tilecraft_x86_avx512.gemm_template import template_space

    x = te.placeholder((1, 72, 9, 11), name="x")
    y = ops.conv2d(x, te.constant(_weights((40, 72, 1, 1)), name="w"), name="y")
    space = template_space(y, 49152, 1 << 21, 2)
    a, b = te.placeholder((64, 64), name="a"), te.placeholder((64, 64), name="b")
    plain = template_space(ops.matmul(a, b), 49152, 1 << 21, 2)
    assert "TRANSPOSE" not in plain.decode(plain.space.random_point(np.random.default_rng(0)))
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((1, 72, 9, 11)).astype(np.float32)
    check_space_switch(space, y, xs, "TRANSPOSE", _transposed_kernels)


def _outer_set(A, B, C, MV, NC, **params):
    """outer_product_f32_set's declared semantics: C[m, n] = sum_k A[k, m] * B[k, n]."""
    c = C.reshape(C.shape[-2:])
    c[:MV, :NC] = (A.reshape(A.shape[-2:]).T @ B.reshape(B.shape[-2:]))[:MV, :NC]


@pytest.mark.parametrize("tile", [(6, 32, 12), (5, 16, 5), (7, 48, 21)])
def test_kernels_in_the_interpreter(tile):
    """The Kernel IR itself, on the interpreter (every access bounds-checked): ragged strips of
    pixels, ragged panels of channels, blocks past the last pixel."""
    from tilecraft_x86_avx512.blocking.transposed_conv1x1 import lower_transposed

    from tilecraft.kernel_ir.interpreter import run_kernels
    from tilecraft.lower.options import LoweringOptions

    x = te.placeholder((1, 41, 7, 5), name="x")
    wt = te.placeholder((19, 41, 1, 1), name="w")
    y = ops.conv2d(x, wt, name="y")
    mi, nr, mc = tile
    kernels = lower_transposed(as_contraction(y, broadcast_batch=True), mi, nr, mc,
                               LoweringOptions(vector_lanes=16))
    rng = np.random.default_rng(8)
    inputs = {"x": rng.standard_normal((1, 41, 7, 5)).astype(np.float32),
              "w": rng.standard_normal((19, 41, 1, 1)).astype(np.float32)}
    out = run_kernels(kernels, {**inputs, "y": np.full((1, 19, 7, 5), np.nan, np.float32)},
                      semantics={"outer_product_f32_set": _outer_set})
    np.testing.assert_allclose(out["y"].reshape(1, 19, 7, 5), run(y, inputs), rtol=1e-5,
                               atol=1e-5)
