"""Packing a convolution's im2col panel by rows (``panel_copy``): where the output rows are much
wider than a panel only the vectors holding the panel's columns are visited; either walk must
give the numpy reference's result on awkward shapes (prime sizes, strides, panels straddling
rows, the image's last row), from one and two threads."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run
from tilecraft.target.registry import get_target

pytestmark = pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                                reason="x86_avx512 cannot execute on this machine")

CONFIGS = [None, {"NC": 1, "NR": 16, "MI": 14}, {"NC": 3, "NR": 32, "MI": 12}]


@pytest.mark.parametrize("channels,size,out_channels,kernel,stride,pad", [
    (3, 224, 8, 7, 2, 3),    # ResNet's stem geometry: 112-wide rows under 64-column panels
    (2, 131, 5, 3, 1, 1),    # 131-wide rows, prime everything
    (7, 113, 9, 3, 2, 1),    # 57-wide rows: the masked full-row walk
    (5, 23, 17, 3, 1, 1),    # panels straddling several short rows
])
def test_im2col_panels_match_the_reference(channels: int, size: int, out_channels: int,
                                           kernel: int, stride: int, pad: int) -> None:
    from tilecraft_x86_avx512.target import X86Avx512Target

    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((out_channels, channels, kernel, kernel)).astype(np.float32)
    y = ops.conv2d(te.placeholder(x.shape, name="x"), te.constant(w, name="w"),
                   stride=stride, padding=pad, name="y")
    graph = tc.Graph.from_outputs([y])
    expected = run(graph, {"x": x})
    for threads in (1, 2):
        for config in CONFIGS:
            class Configured(X86Avx512Target):
                def lower_compute(self, tensor, options, given=None, config=config):
                    return super().lower_compute(tensor, options,
                                                 config if tensor.name == "y" else given)

            exe = tc.compile(graph, target=Configured(threads=threads))
            assert "B packed per block" in exe.report.kernel("y").schedule
            np.testing.assert_allclose(exe(x), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("channels,size", [(64, 7), (37, 5)])
def test_one_panel_im2col_is_packed_in_pieces(channels: int, size: int) -> None:
    """A late convolution's im2col is one panel (49 or 25 pixels): its pack splits the rows
    (K = 9 x channels) into pieces for the threads, the last piece shorter where K is not a
    multiple, and the convolution still matches the reference on 1 and 2 threads."""
    from tilecraft_x86_avx512.target import X86Avx512Target

    rng = np.random.default_rng(channels)
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((11, channels, 3, 3)).astype(np.float32)
    y = ops.conv2d(te.placeholder(x.shape, name="x"), te.constant(w, name="w"), padding=1,
                   name="y")
    graph = tc.Graph.from_outputs([y])
    expected = run(graph, {"x": x})
    for threads in (1, 2):
        class GemmPath(X86Avx512Target):
            def lower_compute(self, tensor, options, given=None):
                forced = {"MI": 6, "NR": 64, "KC": 4096, "MC": 12, "DIRECT": 0}
                return super().lower_compute(tensor, options,
                                             forced if tensor.name == "y" else given)

        exe = tc.compile(graph, target=GemmPath(threads=threads))
        packs = [k for k in exe.kernels if k.name.endswith("_pack")]
        assert packs and all("pieces of" in k.attrs["schedule"] for k in packs), \
            [k.attrs["schedule"] for k in packs]
        np.testing.assert_allclose(exe(x), expected, rtol=1e-4, atol=1e-3)
