"""A strided convolution's data gradient (tilecraft.autodiff's scatter form) on x86: the gather
half runs on the phase-by-phase col2im kernel, natively, equal to the reference."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.autodiff import grad
from tilecraft.reference import run

RNG = np.random.default_rng(9)


@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((3, 5, 13, 13), (7, 5, 3, 3), dict(stride=2, padding=1)),
    ((1, 2, 11, 10), (3, 2, 3, 2), dict(stride=(2, 3), padding=(1, 0))),
    ((2, 4, 15, 15), (3, 4, 3, 3), dict(stride=2, padding=2, dilation=2)),
    ((2, 3, 19), (4, 3, 5), dict(stride=3, padding=1)),
])
def test_strided_conv_data_gradient_runs_col2im_by_phase(x_shape, w_shape, kwargs):
    x = te.placeholder(x_shape, name="x")
    conv = ops.conv2d if len(x_shape) == 4 else ops.conv1d
    y = conv(x, te.placeholder(w_shape, name="w"), name="y", **kwargs)
    graph = tc.Graph.from_outputs(grad(y, [x]))
    exe = tc.compile(graph, target="x86_avx512")
    assert any(k.schedule.startswith("col2im by phase") for k in exe.report.kernels), \
        [k.schedule for k in exe.report.kernels]
    inputs = {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    expected = run(graph, inputs)
    np.testing.assert_allclose(exe(**inputs), expected, rtol=1e-4,
                               atol=1e-4 * float(np.abs(expected).max()))
