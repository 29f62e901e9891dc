"""The core's convolution rewrites (:mod:`tilecraft.passes.group_split`,
:mod:`tilecraft.passes.transposed_conv`): grouped convolutions split into a batched contraction,
transposed convolutions recognised and rewritten as a contraction plus a col2im gather — every
rewritten form against the reference (te level)."""

import numpy as np
import pytest

from tilecraft import ops, te
from tilecraft.graph import Graph
from tilecraft.passes.contraction import as_contraction
from tilecraft.passes.group_split import group_divisor, split_grouped_axis
from tilecraft.passes.transposed_conv import as_transposed_conv, transposed_as_gemm
from tilecraft.reference import run

RNG = np.random.default_rng(7)


def _inputs(tensors):
    return {t.name: RNG.standard_normal(t.shape).astype(np.float32) for t in tensors}


def _values(y):
    """Every tensor of ``y``'s graph by name (inputs and intermediates) and the inputs."""
    graph = Graph.from_outputs([y])
    inputs = _inputs(graph.inputs)
    computes = list(graph.computes)
    results = run(computes, inputs=inputs)
    results = results if isinstance(results, tuple) else (results,)
    return {**inputs, **{t.name: v for t, v in zip(computes, results)}}, inputs


def _run_split(split, values):
    """The split compute on the original arrays, read through its views (same memory)."""
    feeds = {t.name: values[t.name].reshape(t.shape)
             for t in Graph.from_outputs([split]).inputs}
    return run(split, **feeds)


GROUPED = [  # (x shape, w shape, kwargs)
    ((1, 6, 7, 7), (4, 3, 3, 3), dict(groups=2, padding=1)),
    ((2, 6, 9, 5), (9, 2, 3, 1), dict(groups=3, stride=2)),
    ((1, 7, 5, 5), (14, 1, 3, 3), dict(groups=7, padding=1, dilation=2)),
    ((1, 4, 6, 6), (4, 1, 1, 1), dict(groups=4)),
    ((1, 10, 8, 8), (5, 2, 3, 3), dict(groups=5, padding=(0, 1))),
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs", GROUPED)
def test_grouped_conv2d_split_matches_reference(x_shape, w_shape, kwargs):
    y = ops.conv2d(te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w"),
                   name="y", **kwargs)
    split = split_grouped_axis(y)
    groups = kwargs["groups"]
    assert split is not None and split.name == y.name and split.size == y.size
    assert split.shape[1:3] == (groups, w_shape[0] // groups)
    values, _ = _values(y)
    got = _run_split(split, values)
    np.testing.assert_allclose(got.reshape(y.shape), values["y"], rtol=1e-5, atol=1e-5)
    # batch 1 and kk a real axis: a batched contraction over the groups (with batch > 1 the
    # output is [n, g, ...]: n indexes only x, so it is not [batch, m, n], as without groups)
    if x_shape[0] == 1 and w_shape[0] // groups > 1:
        contraction = as_contraction(split)
        assert contraction is not None and [a.name for a in contraction.batch_axes] == ["g"]
        assert contraction.a.tensor.shape[:2] == (groups, w_shape[0] // groups)


def test_grouped_conv1d_conv3d_and_depthwise_multiplier_split():
    cases = [
        ops.conv1d(te.placeholder((1, 6, 11), name="x"), te.placeholder((9, 2, 3), name="w"),
                   groups=3, padding=1, name="y"),
        ops.conv3d(te.placeholder((1, 4, 3, 5, 5), name="x"),
                   te.placeholder((6, 2, 2, 3, 3), name="w"), groups=2, name="y"),
        ops.depthwise_conv2d(te.placeholder((1, 3, 6, 6), name="x"),
                             te.placeholder((3, 2, 3, 3), name="w"), padding=1, name="y"),
    ]
    for y in cases:
        split = split_grouped_axis(y)
        assert split is not None
        values, _ = _values(y)
        np.testing.assert_allclose(_run_split(split, values).reshape(y.shape), values["y"],
                                   rtol=1e-5, atol=1e-5)


def test_ungrouped_computes_are_not_split():
    x = te.placeholder((1, 4, 6, 6), name="x")
    assert split_grouped_axis(ops.conv2d(x, te.placeholder((8, 4, 3, 3), name="w"))) is None
    assert split_grouped_axis(x) is None
    # depthwise with multiplier 1 reads channel k directly: nothing to split
    assert split_grouped_axis(ops.depthwise_conv2d(
        x, te.placeholder((4, 1, 3, 3), name="w"))) is None
    # k // 3 with k of extent 7: 3 does not divide 7
    a = te.placeholder((3, 5), name="a")
    odd = te.compute((7, 5), lambda k, j: a[k // 3, j], name="odd")
    assert group_divisor(odd, odd.axes[0]) is None and split_grouped_axis(odd) is None
    # two different divisors of one axis: ambiguous, left alone
    b = te.placeholder((6, 6), name="b")
    two = te.compute((12,), lambda k: b[k // 2, k // 3 % 6], name="two")
    assert split_grouped_axis(two) is None


def test_split_keeps_operands_used_two_ways_unviewed():
    """A tensor read both as ``g*c + r`` and otherwise keeps its own shape (no view)."""
    a = te.placeholder((6, 4), name="a")
    r = te.reduce_axis(3, "r")
    y = te.compute((4, 4), lambda k, j: te.sum(a[(k // 2) * 3 + r, j] * a[k, j], axis=r),
                   name="y")
    split = split_grouped_axis(y)
    assert split is not None and [t.shape for t in split.inputs] == [(6, 4)]
    inputs = _inputs([a])
    np.testing.assert_allclose(run(split, **inputs).reshape(4, 4), run(y, **inputs),
                               rtol=1e-5)


TRANSPOSED = [  # (nd, x shape, w shape, kwargs)
    (2, (1, 4, 5, 5), (4, 3, 4, 4), dict(stride=2, padding=1)),
    (2, (2, 3, 4, 3), (3, 2, 3, 3), dict(stride=1)),
    (2, (1, 4, 3, 5), (4, 1, 3, 2), dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                         groups=2)),
    (2, (1, 3, 4, 4), (3, 5, 3, 3), dict(stride=2, dilation=2, padding=2)),
    (2, (1, 2, 3, 3), (2, 2, 1, 1), dict(stride=3)),  # taps miss some outputs entirely
    (1, (1, 5, 7), (5, 3, 5), dict(stride=2, padding=2, output_padding=1)),
    (3, (1, 2, 2, 3, 3), (2, 2, 2, 3, 2), dict(stride=2, padding=(0, 1, 0))),
]
BUILDERS = {1: ops.conv_transpose1d, 2: ops.conv_transpose2d, 3: ops.conv_transpose3d}


@pytest.mark.parametrize("nd, x_shape, w_shape, kwargs", TRANSPOSED)
def test_transposed_conv_as_gemm_matches_reference(nd, x_shape, w_shape, kwargs):
    y = BUILDERS[nd](te.placeholder(x_shape, name="x"), te.placeholder(w_shape, name="w"),
                     name="y", **kwargs)
    conv = as_transposed_conv(y)
    assert conv is not None and conv.groups == kwargs.get("groups", 1)
    values, inputs = _values(y)
    cols, gather = transposed_as_gemm(conv)
    contraction = as_contraction(cols)
    assert contraction is not None and contraction.flops == conv.flops
    cols_value = run(cols, **{t.name: inputs[t.name].reshape(t.shape) for t in cols.inputs})
    np.testing.assert_allclose(run(gather, y_cols=cols_value), values["y"], rtol=1e-5,
                               atol=1e-5)


def test_only_transposed_convolutions_are_recognised():
    x = te.placeholder((1, 4, 5, 5), name="x")
    w = te.placeholder((4, 4, 3, 3), name="w")
    assert as_transposed_conv(ops.conv2d(x, w, padding=1)) is None
    assert as_transposed_conv(x) is None
    half = ops.conv_transpose2d(te.placeholder((1, 4, 5, 5), "float16", name="xh"),
                                te.placeholder((4, 4, 3, 3), "float16", name="wh"), stride=2)
    assert as_transposed_conv(half) is None
    # the same guarded gather with a condition changed (``<=``) is not a transposed convolution
    h_axis = te.reduce_axis(3, "rh")

    def body(n, o, h):
        t = h + 1 - h_axis
        cond = te.all_of(t >= 0, t <= 10)
        return te.sum(te.select(cond, x[n, o, 0, te.maximum(te.minimum(t // 2, 4), 0)], 0.0)
                      * w[o, o, 0, h_axis], axis=h_axis)

    assert as_transposed_conv(te.compute((1, 4, 9), body, name="fake")) is None
