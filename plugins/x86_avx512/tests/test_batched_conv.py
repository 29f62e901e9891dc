"""Batched convolutions (batch > 1, NCHW) on the micro-kernel template, natively, against the
reference: a batch of GEMMs sharing the weights (``as_contraction(broadcast_batch=True)``), the
weights read in place for every image, not the default loop nest (issue 18: a batch-32 3x3
conv took ~200 ms as a loop nest, 32x the batch-1 conv's 0.1 ms on the template)."""

import numpy as np
import pytest
from template_forcing import ForcedTarget
from tilecraft_x86_avx512.gemm_template import template_space
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes.contraction import as_contraction
from tilecraft.reference import run

RNG = np.random.default_rng(5)


CASES = [  # x shape, w shape, kwargs, forced template config (None: chosen by itself)
    ((4, 32, 16, 16), (64, 32, 3, 3), dict(stride=2, padding=1), None),
    ((3, 7, 11, 11), (13, 7, 3, 3), dict(stride=2, padding=1), {"MI": 5, "NR": 16, "KC": 20}),
    ((5, 3, 9, 13), (17, 3, 3, 3), dict(padding=1), {"NC": 2}),          # B packed per block
    ((2, 11, 7, 7), (5, 11, 1, 1), {}, {"PACK_A": 1, "MI": 2, "NR": 16}),  # A packed
    ((6, 4, 10, 10), (9, 4, 3, 3), dict(padding=2, dilation=2), {"KC": 7}),
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, config", CASES)
def test_batched_conv2d_runs_on_the_template(x_shape, w_shape, kwargs, config):
    y = ops.conv2d(te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w"),
                   name="y", **kwargs)
    graph = tc.Graph.from_outputs([y])
    target = X86Avx512Target(threads=2) if config is None else ForcedTarget(config, "y")
    exe = tc.compile(graph, target=target)
    schedule = exe.report.kernel("y").schedule
    assert schedule.startswith("micro-kernel"), schedule
    inputs = {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    expected = run(graph, inputs)
    got = exe(**inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
    np.testing.assert_array_equal(exe(**inputs), got)  # workspaces reused between calls


def test_batched_conv_is_a_broadcast_contraction_only_when_asked():
    x = te.placeholder((8, 16, 12, 12), name="x")
    y = ops.conv2d(x, te.placeholder((24, 16, 3, 3), name="w"), padding=1)
    assert as_contraction(y) is None   # other targets keep batch axes on both operands
    c = as_contraction(y, broadcast_batch=True)
    assert c.extents() == (8, 24, 144, 144) and not c.a_batched
    assert template_space(y, 49152, 1 << 20, 2) is not None
    # a batch matmul is unchanged: its batch axis indexes both operands
    bm = ops.batch_matmul(te.placeholder((3, 5, 7), name="a"), te.placeholder((3, 7, 6), name="b"))
    assert as_contraction(bm, broadcast_batch=True) == as_contraction(bm)
    assert as_contraction(bm).a_batched


WEIGHT_GRADIENTS = [  # batch, in channels, out channels, output side, stride, forced config
    (4, 3, 8, 16, 1, None),                    # K_inner 256: KC 256 (or a divisor) in place
    (3, 5, 7, 7, 2, {"KC": 20}),               # K_inner 49: no divisor in [16, 20] -> packed A
    (5, 2, 6, 6, 1, {"KC": 20, "MI": 3}),      # K_inner 36: KC 18, A read in place
    (2, 4, 9, 5, 1, {"KC": 64, "PACK_A": 1}),  # A packed when asked
]


@pytest.mark.parametrize("batch, cin, cout, side, stride, config", WEIGHT_GRADIENTS)
def test_weight_gradient_reads_dy_in_place(batch, cin, cout, side, stride, config):
    """``gw[k, c, r, s] = sum_{n,h,w} dy[n, k, h, w] * x[n, c, s*h + r, s*w + q]``: A (dy) has
    the batch, a reduction axis, outside its rows; slices of KC dividing h*w read it in place."""
    size = (side - 1) * stride + 3
    dy = te.placeholder((batch, cout, side, side), name="dy")
    x = te.placeholder((batch, cin, size, size), name="x")
    n, h, w = te.reduce_axis(batch, "n"), te.reduce_axis(side, "h"), te.reduce_axis(side, "w")
    y = te.compute((cout, cin, 3, 3), lambda k, c, r, s: te.sum(
        dy[n, k, h, w] * x[n, c, h * stride + r, w * stride + s], axis=[n, h, w]), name="y")
    graph = tc.Graph.from_outputs([y])
    exe = tc.compile(graph, target=X86Avx512Target(threads=2) if config is None
                     else ForcedTarget(config, "y"))
    schedule = exe.report.kernel("y").schedule
    in_place = config is None or (config.get("PACK_A") != 1 and side * side % 18 == 0)
    assert ("A read in place" in schedule) == in_place, schedule
    inputs = {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    expected = run(graph, inputs)
    np.testing.assert_allclose(exe(**inputs), expected, rtol=1e-4,
                               atol=1e-4 * float(np.abs(expected).max()))


def test_long_reduction_slices_stay_within_the_micro_kernel_maximum():
    """A dense layer on flattened features (the small CNN's 32 x 16384 @ 16384 x 10): a whole
    K panel fits L2, but KC stays within the micro-kernel's KI maximum (4096)."""
    x = te.placeholder((32, 16384), name="x")
    w = te.placeholder((10, 16384), name="w")
    y = ops.dense(x, w, name="y")
    graph = tc.Graph.from_outputs([y])
    exe = tc.compile(graph, target="x86_avx512")
    inputs = {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    expected = run(graph, inputs)
    np.testing.assert_allclose(exe(**inputs), expected, rtol=1e-4,
                               atol=1e-4 * float(np.abs(expected).max()))
