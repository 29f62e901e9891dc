"""The CPU strategy's row-reduction choice counts only the loads the reduction moves: batch
norm's gradient ``sum_{n,h,w} dy[n, c, h, w] * (x[n, c, h, w] - mean[c])`` is vectorised along
``w`` (contiguous), not along ``c`` (which would gather dy and x ``h * w`` apart) because
``mean[c]`` steps along ``c``."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.reference import run
from tilecraft.target.registry import get_target


def _bn_gamma_grad(n=3, c=5, h=4, w=19):
    dy = te.placeholder((n, c, h, w), name="dy")
    x = te.placeholder((n, c, h, w), name="x")
    mean = te.placeholder((c,), name="mean")
    rn, rh, rw = te.reduce_axis(n, "rn"), te.reduce_axis(h, "rh"), te.reduce_axis(w, "rw")
    return te.compute((c,), lambda i: te.sum(dy[rn, i, rh, rw] * (x[rn, i, rh, rw] - mean[i]),
                                             axis=[rn, rh, rw]), name="g")


def test_reduction_vectorised_along_the_streamed_contiguous_axis():
    kernel = lower_compute(_bn_gamma_grad(), LoweringOptions(vector_lanes=16))
    schedule = kernel.attrs["schedule"]
    assert "rh_rw: vector(76" in schedule and "i: vector" not in schedule, schedule  # h, w fused


def test_a_matmul_keeps_its_spatial_vector_axis():
    A = te.placeholder((6, 7), name="A")
    B = te.placeholder((7, 33), name="B")
    k = te.reduce_axis(7, "k")
    C = te.compute((6, 33), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    assert "j: vector(33" in lower_compute(C, LoweringOptions(vector_lanes=16)).attrs["schedule"]


@pytest.mark.skipif(not get_target("x86_avx512").available().execute,
                    reason="x86_avx512 cannot execute on this machine")
def test_streamed_row_reduction_matches_the_reference():
    graph = tc.Graph.from_outputs([_bn_gamma_grad()])
    rng = np.random.default_rng(4)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    exe = tc.compile(graph, target="x86_avx512")
    np.testing.assert_allclose(exe(**inputs), run(graph, inputs), rtol=1e-4, atol=1e-4)
