"""The shape of the computes operators build: what later passes rely on (a convolution is one
sum of a product of two loads, softmax is five computes, names are readable and unique), and
precise dtype behaviour."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import product_factors
from tilecraft.te.expr import Load, Reduce, ReduceOp, Select
from tilecraft.te.visit import walk


def ph(*shape: int, dtype: str = "float32", name: str = "x") -> te.Tensor:
    return te.placeholder(shape, dtype, name=name)


def sum_of_loads(tensor: te.Tensor) -> list[Load]:
    body = tensor.body
    assert isinstance(body, Reduce) and body.op is ReduceOp.SUM
    factors = product_factors(body.body)
    assert all(isinstance(f, Load) for f in factors)
    return factors  # type: ignore[return-value]


@pytest.mark.parametrize("build, reduce_names", [
    (lambda: ops.conv1d(ph(1, 2, 9), ph(3, 2, 3, name="w"), padding=1, name="y"),
     ["rc", "rw"]),
    (lambda: ops.conv2d(ph(1, 2, 9, 9), ph(3, 2, 3, 3, name="w"), padding=1, name="y"),
     ["rc", "rh", "rw"]),
    (lambda: ops.conv2d(ph(1, 9, 9, 2), ph(3, 3, 2, 4, name="w"), padding=1, layout="NHWC",
                        name="y"), ["rh", "rw", "rc"]),
    (lambda: ops.conv3d(ph(1, 2, 5, 5, 5), ph(3, 2, 3, 3, 3, name="w"), padding=1, name="y"),
     ["rc", "rd", "rh", "rw"]),
    (lambda: ops.depthwise_conv2d(ph(1, 2, 9, 9), ph(2, 1, 3, 3, name="w"), padding=1,
                                  name="y"), ["rh", "rw"]),
    (lambda: ops.capsule_conv2d(ph(1, 2, 9, 9), ph(3, 2, 3, 3, 4, name="w"), padding=1,
                                name="y"), ["rc", "rh", "rw"]),
])
def test_padded_convolutions_are_a_pad_then_one_sum_of_two_loads(build, reduce_names) -> None:
    y = build()
    graph = tc.Graph.from_outputs([y])
    assert [t.name for t in graph.computes] == ["y_pad", "y"]
    assert isinstance(graph.tensor("y_pad").body, Select)
    loads = sum_of_loads(y)
    assert [load.tensor.name for load in loads] == ["y_pad", "w"]
    assert [axis.name for axis in y.reduce_axes] == reduce_names


def test_unpadded_convolution_reads_its_input_directly() -> None:
    y = ops.conv2d(ph(1, 2, 9, 9), ph(3, 2, 3, 3, name="w"), name="y")
    assert [t.name for t in tc.Graph.from_outputs([y]).computes] == ["y"]
    assert [load.tensor.name for load in sum_of_loads(y)] == ["x", "w"]


def test_matmul_family_is_one_sum_of_loads() -> None:
    A, B = ph(4, 5, name="A"), ph(5, 6, name="B")
    for y in (ops.matmul(A, B), ops.gemv(A, ph(5, name="v")),
              ops.batch_matmul(ph(2, 4, 5, name="P"), ph(2, 5, 6, name="Q")),
              ops.bilinear(ph(2, 3, name="p"), ph(2, 4, name="q"), ph(5, 3, 4, name="W"))):
        assert len(sum_of_loads(y)) in (2, 3)


def test_int8_products_accumulate_in_int32() -> None:
    A, B = ph(4, 5, dtype="int8", name="A"), ph(5, 6, dtype="int8", name="B")
    assert ops.matmul(A, B).dtype.value == "int32"
    assert ops.matmul(A, B, out_dtype="int8").dtype.value == "int8"
    half = ops.matmul(ph(4, 5, dtype="float16", name="A"), ph(5, 6, dtype="float16", name="B"))
    assert half.dtype.value == "float16"
    mixed = ops.matmul(ph(4, 5, dtype="float16", name="A"), ph(5, 6, dtype="float16", name="B"),
                       out_dtype="float32")
    assert mixed.dtype.value == "float32"
    assert ops.reduce_sum(ph(3, dtype="int8")).dtype.value == "int32"


def test_conv_transpose_is_one_guarded_sum() -> None:
    y = ops.conv_transpose2d(ph(1, 2, 5, 5), ph(2, 3, 3, 3, name="w"), stride=2, padding=1,
                             name="y")
    assert [t.name for t in tc.Graph.from_outputs([y]).computes] == ["y"]
    body = y.body
    assert isinstance(body, Reduce) and body.op is ReduceOp.SUM
    guarded, weight = product_factors(body.body)
    assert isinstance(guarded, Select) and isinstance(weight, Load)
    assert "%" in str(guarded.cond)


def test_softmax_is_its_five_primitives() -> None:
    y = ops.softmax(ph(3, 7), name="y")
    computes = tc.Graph.from_outputs([y]).computes
    assert [t.name for t in computes] == ["y_max", "y_sub", "y_exp", "y_sum", "y"]
    kinds = [t.body.op if isinstance(t.body, Reduce) else None for t in computes]
    assert kinds == [ReduceOp.MAX, None, None, ReduceOp.SUM, None]


def test_reductions_are_whole_compute_bodies() -> None:
    for y in (ops.mean(ph(3, 7)), ops.variance(ph(3, 7)), ops.avg_pool2d(ph(1, 1, 4, 4), 2),
              ops.layer_norm(ph(3, 7)), ops.log_softmax(ph(3, 7))):
        graph = tc.Graph.from_outputs([y])
        for tensor in graph.computes:
            nested = [n for n in walk(tensor.body) if isinstance(n, Reduce)]
            assert nested in ([], [tensor.body])


def test_default_names_are_unique_and_readable() -> None:
    x = ph(2, 3)
    a, b = ops.relu(x), ops.relu(x)
    assert a.name != b.name and a.name.startswith("relu_") and b.name.startswith("relu_")
    graph = tc.Graph.from_outputs([ops.add(a, b)])
    assert len(graph.computes) == 3
    named = ops.layer_norm(x, name="ln")
    names = [t.name for t in tc.Graph.from_outputs([named]).computes]
    assert names == ["ln_sum", "ln_mean", "ln_squares", "ln_rstd", "ln"]


def test_reshape_uses_floor_division_and_modulo() -> None:
    text = ops.reshape(ph(4, 6), (3, 8), name="r").statement()
    assert "//" in text and "%" in text


@pytest.mark.parametrize("mode", ["CRD", "DCR"])
def test_depth_to_space_inverts_space_to_depth(mode: str) -> None:
    x = ph(2, 3, 6, 9)
    y = ops.depth_to_space(ops.space_to_depth(x, 3, mode=mode), 3, mode=mode)
    data = np.random.default_rng(0).normal(size=x.shape).astype(np.float32)
    np.testing.assert_array_equal(tc.reference.run(y, x=data), data)


def test_half_elementwise_ops_keep_scalars_in_float32() -> None:
    x = ph(4, dtype="float16")
    data = np.array([1.0, 3.0, -7.0, 1000.0], np.float16)
    got = tc.reference.run(ops.mul(x, 0.1), x=data)
    expected = (data.astype(np.float32) * np.float32(0.1)).astype(np.float16)
    np.testing.assert_array_equal(got, expected)
    gelu = tc.reference.run(ops.gelu(x), x=data)
    assert gelu.dtype == np.float16


def test_scalars_on_either_side() -> None:
    x = ph(3)
    data = np.array([1.0, 2.0, 4.0], np.float32)
    got = tc.reference.run([ops.sub(2.0, x), ops.div(1.0, x), ops.maximum(1.5, x),
                            ops.sub(x, 2)], x=data)
    np.testing.assert_array_equal(got[0], 2.0 - data)
    np.testing.assert_array_equal(got[1], 1.0 / data)
    np.testing.assert_array_equal(got[2], np.maximum(1.5, data))
    np.testing.assert_array_equal(got[3], data - 2)


def test_max_pool_pads_with_minus_infinity_and_integer_minimum() -> None:
    y = ops.max_pool2d(ph(1, 1, 3, 3), 2, stride=1, padding=1, name="y")
    pad_fill = tc.Graph.from_outputs([y]).tensor("y_pad").body.false_value
    assert pad_fill.value == float("-inf")
    yi = ops.max_pool2d(ph(1, 1, 3, 3, dtype="int8"), 2, stride=1, padding=1, name="yi")
    assert tc.Graph.from_outputs([yi]).tensor("yi_pad").body.false_value.value == -128
    data = np.full((1, 1, 3, 3), -100, np.int8)
    assert (tc.reference.run(yi, x=data) == -100).all()


def test_small_network_composes() -> None:
    """conv -> batch_norm -> relu -> max_pool -> global avg pool -> dense -> softmax."""
    rng = np.random.default_rng(7)
    x, w = ph(2, 3, 9, 9), ph(4, 3, 3, 3, name="w")
    stats = [ph(4, name=n) for n in ("mean", "var", "gamma", "beta")]
    fc = ph(5, 4, name="fc")
    y = ops.conv2d(x, w, padding=1)
    y = ops.relu(ops.batch_norm(y, *stats))
    y = ops.global_avg_pool2d(ops.max_pool2d(y, 3, stride=2, padding=1))
    y = ops.softmax(ops.dense(ops.reshape(y, (2, 4)), fc), name="probs")
    arrays = {"x": rng.normal(size=(2, 3, 9, 9)), "w": rng.normal(size=(4, 3, 3, 3)),
              "mean": rng.normal(size=4), "var": rng.uniform(0.5, 1.5, 4),
              "gamma": rng.normal(size=4), "beta": rng.normal(size=4),
              "fc": rng.normal(size=(5, 4))}
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    got = tc.reference.run(y, **arrays)
    # numpy, step by step
    a = arrays
    xp = np.pad(a["x"].astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = sum(np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 9, s:s + 9], a["w"][:, :, r, s])
               for r in range(3) for s in range(3))
    c = (slice(None), None, None)
    bn = (conv - a["mean"][c]) / np.sqrt(a["var"][c] + 1e-5) * a["gamma"][c] + a["beta"][c]
    act = np.pad(np.maximum(bn, 0), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(act, (3, 3), axis=(2, 3))
    pooled = windows[:, :, ::2, ::2].max(axis=(-2, -1)).mean(axis=(2, 3))
    logits = pooled @ a["fc"].T.astype(np.float64)
    expected = np.exp(logits - logits.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
