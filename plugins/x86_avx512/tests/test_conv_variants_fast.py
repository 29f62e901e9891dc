"""Grouped and transposed convolutions on their fast x86 paths, natively, against the reference:
grouped ones as a batched contraction over the groups (micro-kernel template), transposed
ones as the contraction ``W^T x X`` plus the phase-by-phase col2im kernel."""

import numpy as np
import pytest
from template_forcing import ForcedTarget
from tilecraft_x86_avx512.conv_variants import lower_conv_variant, template_view
from tilecraft_x86_avx512.target import X86Avx512Target

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import LoweringError
from tilecraft.lower.options import LoweringOptions
from tilecraft.reference import run

RNG = np.random.default_rng(11)


def _check(y, target, expect_in_schedule):
    graph = tc.Graph.from_outputs([y])
    inputs = {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    exe = tc.compile(graph, target=target)
    schedules = " | ".join(k.schedule for k in exe.report.kernels)
    assert expect_in_schedule in schedules, schedules
    expected = run(graph, inputs)
    got = exe(**inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
    got_again = exe(**inputs)  # workspaces are reused between calls
    np.testing.assert_array_equal(got_again, got)


GROUPED = [  # x shape, w shape, kwargs, forced config
    ((1, 8, 9, 9), (12, 4, 3, 3), dict(groups=2, padding=1), {}),
    ((1, 6, 11, 7), (9, 2, 3, 3), dict(groups=3, stride=2), {"MI": 2, "NR": 16, "KC": 5}),
    ((1, 14, 13, 13), (21, 2, 3, 3), dict(groups=7, padding=2, dilation=2), {"NC": 2}),
    ((1, 5, 17, 17), (10, 1, 3, 3), dict(groups=5, padding=1), {"PACK_A": 1}),
    ((1, 64, 28, 28), (128, 16, 3, 3), dict(groups=4, padding=1), None),  # template by itself
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs, config", GROUPED)
def test_grouped_conv2d_runs_as_batched_contraction(x_shape, w_shape, kwargs, config):
    y = ops.conv2d(te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w"),
                   name="y", **kwargs)
    target = X86Avx512Target(threads=2) if config is None else ForcedTarget(config, "y")
    _check(y, target, "micro-kernel")


def test_grouped_conv1d_runs_as_batched_contraction():
    y = ops.conv1d(te.placeholder((1, 6, 37), name="x"), te.placeholder((9, 2, 3), name="w"),
                   groups=3, padding=1, name="y")
    _check(y, ForcedTarget({}, "y"), "micro-kernel")


TRANSPOSED = [  # builder, x shape, w shape, kwargs, forced config
    (ops.conv_transpose2d, (1, 128, 14, 14), (128, 64, 4, 4), dict(stride=2, padding=1), None),
    (ops.conv_transpose2d, (1, 5, 7, 6), (5, 3, 3, 3), dict(stride=2, padding=1,
                                                            output_padding=1), {}),
    (ops.conv_transpose2d, (1, 6, 5, 5), (6, 2, 4, 3), dict(stride=(3, 2), groups=3), {}),
    (ops.conv_transpose2d, (1, 3, 6, 6), (3, 4, 3, 3), dict(dilation=2, padding=1),
     {"MI": 3, "NR": 16, "KC": 2}),
    (ops.conv_transpose2d, (1, 4, 13, 1), (4, 1, 1, 1), dict(stride=2), {}),
    (ops.conv_transpose1d, (1, 7, 23), (7, 5, 4), dict(stride=2, padding=1), {}),
    (ops.conv_transpose3d, (1, 3, 3, 4, 4), (3, 2, 2, 3, 3), dict(stride=2, padding=1), {}),
]


@pytest.mark.parametrize("builder, x_shape, w_shape, kwargs, config", TRANSPOSED)
def test_transposed_conv_runs_as_gemm_plus_col2im(builder, x_shape, w_shape, kwargs, config):
    y = builder(te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w"),
                name="y", **kwargs)
    target = X86Avx512Target(threads=2) if config is None else ForcedTarget(config, "y")
    _check(y, target, "col2im by phase")


def test_template_view_and_errors():
    target = X86Avx512Target(threads=1)
    options = LoweringOptions.from_spec(target.spec)
    levels = (49152, 1 << 20, 1)
    x = te.placeholder((1, 128, 14, 14), name="x")
    y = ops.conv_transpose2d(x, te.placeholder((128, 64, 4, 4), name="w"), stride=2, name="y")
    assert template_view(y).name == "y_cols"
    g = ops.conv2d(te.placeholder((1, 8, 9, 9), name="x"), te.placeholder((8, 4, 3, 3), name="w"),
                   groups=2, name="g")
    assert template_view(g).shape == (1, 2, 4, 7, 7)
    assert target.template_space(y) is not None and target.template_space(g) is not None
    with pytest.raises(LoweringError, match="unknown micro-kernel template parameters"):
        lower_conv_variant(y, options, *levels, config={"MX": 4})
    with pytest.raises(LoweringError, match="unknown micro-kernel template parameters"):
        lower_conv_variant(g, options, *levels, config={"MX": 4})
    relu = ops.relu(x, name="r")
    assert lower_conv_variant(relu, options, *levels) is None
    with pytest.raises(LoweringError, match="compute r: the x86 micro-kernel template"):
        lower_conv_variant(relu, options, *levels, config={"MI": 4})
    # too small for the template and nothing forced: the default loop nest takes it
    tiny = ops.conv_transpose2d(te.placeholder((1, 2, 3, 3), name="x"),
                                te.placeholder((2, 2, 2, 2), name="w"), stride=2, name="t")
    assert lower_conv_variant(tiny, options, *levels) is None
