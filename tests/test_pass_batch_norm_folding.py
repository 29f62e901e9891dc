"""BatchNorm folded into the preceding conv: weights scaled, a bias added; values agree."""

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.passes import check_equivalent_interface
from tilecraft.passes.batch_norm_folding import fold_batch_norm


def _stats(rng, channels, prefix):
    return [te.constant(rng.random(channels) + 0.5, "float32", name=f"{prefix}_{n}")
            for n in ("mean", "var", "gamma", "beta")]


def _check(graph, after, rng, rtol=1e-4):
    check_equivalent_interface(graph, after, "fold_batch_norm")
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.inputs}
    np.testing.assert_allclose(tc.reference.run(after, inputs=inputs),
                               tc.reference.run(graph, inputs=inputs), rtol=rtol, atol=1e-4)


@pytest.mark.parametrize(("stride", "padding", "with_bias"), [(1, 0, False), (2, 1, True)])
def test_conv_batch_norm_becomes_conv_with_bias(stride, padding, with_bias):
    rng = np.random.default_rng(stride)
    x = te.placeholder((2, 3, 7, 5), name="x")
    w = te.constant(rng.standard_normal((5, 3, 3, 3)), "float32", name="w")
    y = ops.conv2d(x, w, stride=stride, padding=padding, name="conv")
    if with_bias:
        y = ops.bias_add(y, te.constant(rng.standard_normal(5), "float32", name="b"), name="cb")
    out = ops.relu(ops.batch_norm(y, *_stats(rng, 5, "bn"), name="bn"), name="out")
    graph = tc.Graph.from_outputs([out])
    after = fold_batch_norm(graph)
    assert [t.name for t in after.computes if t.reduce_axes] == ["conv"]
    assert "cb" not in [t.name for t in after.computes]
    assert sorted(t.name for t in after.constants) == ["bn_bias", "w_folded"]
    assert after.tensor("bn").inputs[0].name == "conv"
    _check(graph, after, rng)


def test_matmul_batch_norm_along_the_last_axis():
    rng = np.random.default_rng(7)
    X = te.placeholder((4, 6), name="X")
    W = te.constant(rng.standard_normal((6, 3)), "float32", name="W")
    Y = ops.batch_norm(ops.matmul(X, W, name="mm"), *_stats(rng, 3, "bn"), axis=1, name="bn")
    graph = tc.Graph.from_outputs([Y])
    after = fold_batch_norm(graph)
    assert "W_folded" in [t.name for t in after.constants]
    _check(graph, after, rng)


def test_left_alone_when_weights_are_inputs_or_the_conv_is_shared():
    rng = np.random.default_rng(3)
    x = te.placeholder((1, 2, 5, 5), name="x")
    w_in = te.placeholder((3, 2, 3, 3), name="w")
    bn = ops.batch_norm(ops.conv2d(x, w_in, name="conv"), *_stats(rng, 3, "a"), name="bn")
    graph = tc.Graph.from_outputs([bn])
    assert fold_batch_norm(graph) is graph
    w = te.constant(rng.standard_normal((3, 2, 3, 3)), "float32", name="wc")
    conv = ops.conv2d(x, w, name="conv2")
    shared = tc.Graph.from_outputs([ops.batch_norm(conv, *_stats(rng, 3, "b"), name="bn2"),
                                    ops.relu(conv, name="other")])
    assert fold_batch_norm(shared) is shared
    relu_bn = ops.batch_norm(ops.relu(ops.conv2d(x, w, name="conv3"), name="r"),
                             *_stats(rng, 3, "c"), name="bn3")
    graph = tc.Graph.from_outputs([relu_bn])
    assert fold_batch_norm(graph) is graph


def test_two_folded_convs_in_a_row_read_the_rebuilt_graph():
    """The second conv's replacement (built from the old graph) and its bias (reading that
    replacement, not in the graph) both relinked to the first fold's output: no stale copy of
    the first block (was GraphError "two different tensors are both named 'r1'")."""
    rng = np.random.default_rng(11)
    x = te.placeholder((1, 3, 7, 5), name="x")
    y = x
    for k, channels in enumerate((4, 3), start=1):
        w = te.constant(rng.standard_normal((channels, y.shape[1], 3, 3)), "float32",
                        name=f"w{k}")
        y = ops.conv2d(y, w, padding=1, name=f"c{k}")
        y = ops.relu(ops.batch_norm(y, *_stats(rng, channels, f"bn{k}"), name=f"bn{k}"),
                     name=f"r{k}")
    graph = tc.Graph.from_outputs([y])
    after = fold_batch_norm(graph)
    assert sorted(t.name for t in after.constants) == ["bn1_bias", "bn2_bias", "w1_folded",
                                                       "w2_folded"]
    assert after.tensor("c2_pad").inputs[0] is after.tensor("r1")
    _check(graph, after, rng)
