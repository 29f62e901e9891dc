"""The split-K lowering of 1x1 convolutions on small maps (blocking/split_k.py): each thread
sums its own run of the input channels into a partial, a second kernel adds the partials
(through the fused epilogue where there is one); against the reference on awkward shapes."""

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
from tilecraft_x86_avx512.gemm_template import template_space
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.passes.contraction import as_contraction


def _split_kernels(exe) -> list:
    return [k for k in exe.kernels if k.name.endswith("_kpartial")]


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(shape).astype(np.float32)


# (input channels, output channels, height, width, threads): prime output channels and map
# sides (ragged strips and panels), one pixel row, a run of the reduction longer than the
# slice, three threads, MobileNet-V2's 14x14 projection
SHAPES = [(130, 37, 13, 11, 2), (192, 41, 7, 5, 2), (201, 17, 5, 3, 3), (576, 96, 14, 14, 2),
          (1024, 29, 1, 13, 2), (3000, 7, 3, 3, 2)]


@pytest.mark.parametrize("shape", SHAPES)
def test_plain_conv_matches_reference(shape):
    cin, cout, h, w, threads = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.constant(_weights((cout, cin, 1, 1)), name="w")
    exe = check_against_reference([ops.conv2d(x, wt, name="y")], threads)
    (partial,) = _split_kernels(exe)
    assert f"parallel({threads} runs of {cin // threads})" in partial.attrs["schedule"]
    assert [k.name for k in exe.kernels][-1] == "y"


@pytest.mark.parametrize("shape", [(130, 37, 13, 11, 2), (201, 17, 5, 3, 3),
                                   (576, 96, 14, 14, 2)])
def test_residual_and_relu6_epilogues_match_reference(shape):
    """The second kernel computes the fused consumer from the partials' sum."""
    cin, cout, h, w, threads = shape
    x = te.placeholder((1, cin, h, w), name="x")
    wt = te.constant(_weights((cout, cin, 1, 1)), name="w")
    e, r6 = conv_epilogues(ops.conv2d(x, wt, name="y"))
    exe = check_against_reference([e], threads, seed=1)
    assert _split_kernels(exe) and exe.kernels[-1].attrs["fused"] == ["y", "sum"]
    exe = check_against_reference([r6], threads, seed=2)
    assert _split_kernels(exe) and exe.kernels[-1].attrs["fused"] == ["y", "relu6"]


def test_where_it_applies():
    """Several threads, a small map, K a multiple of the threads and >= 3 M; not a large map
    (the depthwise before it splits rows), one thread, a matmul or few input channels."""
    def conv(cin: int, cout: int, side: int):
        x = te.placeholder((1, cin, side, side), name="x")
        w = te.placeholder((cout, cin, 1, 1), name="w")
        return as_contraction(ops.conv2d(x, w), broadcast_batch=True)

    assert split_k.prefers_split_k(conv(576, 96, 14), 2)
    assert split_k.prefers_split_k(conv(960, 320, 7), 2)
    assert not split_k.prefers_split_k(conv(576, 96, 14), 1)
    assert not split_k.prefers_split_k(conv(144, 24, 56), 2)    # row bands upstream
    assert not split_k.prefers_split_k(conv(577, 96, 14), 2)    # K not a multiple of 2
    assert not split_k.prefers_split_k(conv(256, 96, 14), 2)    # K < 3 M
    assert not split_k.prefers_split_k(conv(96, 16, 14), 2)     # runs shorter than MIN_RUN
    ffn = ops.matmul(te.placeholder((512, 3072), name="h"), te.placeholder((3072, 768),
                                                                          name="w2"))
    assert not split_k.prefers_split_k(as_contraction(ffn), 2)


def test_switch_off_keeps_the_row_split():
    """SPLIT_K = False: the same convolution through the template, same values."""
    x = te.placeholder((1, 576, 14, 14), name="x")
    wt = te.constant(_weights((96, 576, 1, 1)), name="w")
    graph = Graph.from_outputs([ops.conv2d(x, wt, name="y")])
    xs = np.random.default_rng(3).standard_normal((1, 576, 14, 14)).astype(np.float32)
    split = tc.compile(graph, target=X86Avx512Target(threads=2))
    original = split_k.SPLIT_K
    try:
        split_k.SPLIT_K = False
        plain = tc.compile(graph, target=X86Avx512Target(threads=2))
    finally:
        split_k.SPLIT_K = original
    assert _split_kernels(split) and not _split_kernels(plain)
    np.testing.assert_allclose(split(x=xs), plain(x=xs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(37, 1024, 29, 2), (5, 999, 70, 3), (48, 130, 17, 2)])
def test_forced_on_a_matmul_matches_reference(shape):
    """``SPLIT_K=1`` in a config: any batch-1 contraction with row-major operands and ``K`` a
    multiple of the threads, a matmul too (ragged rows and columns, a run shorter than KC)."""
    m, k, n, threads = shape
    a = te.placeholder((m, k), name="a")
    b = te.placeholder((k, n), name="b")
    target = ForcedTarget({"SPLIT_K": 1, "MI": 6, "NR": 32, "KC": 96}, "y", threads)
    exe = check_against_reference([ops.matmul(a, b, name="y")], threads, target=target)
    (partial,) = _split_kernels(exe)
    assert "MI=6 NR=32" in partial.attrs["schedule"]
    off = ForcedTarget({"SPLIT_K": 0}, "y", threads)
    assert not _split_kernels(check_against_reference([ops.matmul(a, b, name="y")], threads,
                                                      target=off))


def test_template_space_has_the_switch():
    """The tuner's space offers SPLIT_K where the path can lower the compute; each value
    compiles with the path exactly when on, and matches the reference."""
    x = te.placeholder((1, 192, 7, 7), name="x")
    y = ops.conv2d(x, te.constant(_weights((24, 192, 1, 1)), name="w"), name="y")
    space = template_space(y, 49152, 1 << 21, 2)
    assert "SPLIT_K" in space.space.names
    assert template_space(y, 49152, 1 << 21, 1) is None or \
        "SPLIT_K" not in template_space(y, 49152, 1 << 21, 1).space.names
    xs = np.random.default_rng(0).standard_normal((1, 192, 7, 7)).astype(np.float32)
    check_space_switch(space, y, xs, "SPLIT_K", _split_kernels)
