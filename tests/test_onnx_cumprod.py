"""ONNX CumProd (opset 26) and CumSum, which share one converter: models in float32 and int32 with
every exclusive / reverse combination, on prime and size-1 axes, imported, run by tilecraft's
reference and compiled for x86, against onnx's reference evaluator (onnx's own CumProd node
tests are mostly float64, which tilecraft has no dtype for)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

X86 = get_target("x86_avx512").available().execute
RNG = np.random.default_rng(26)
ELEM = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32}
FLAGS = [(0, 0), (1, 0), (0, 1), (1, 1)]
FLAG_IDS = ["plain", "exclusive", "reverse", "reverse-exclusive"]


def _model(op, shape, axis, dtype, exclusive, reverse, opset=26):
    node = helper.make_node(op, ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", ELEM[dtype], shape)],
        [helper.make_tensor_value_info("y", ELEM[dtype], None)],
        [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _data(shape, dtype):
    """Products that stay in range: floats near 1 in magnitude with signs and a zero, small
    integers (-2..2) with zeros, so that int32 running products of 13 stay below 2^31."""
    if dtype == "int32":
        return RNG.integers(-2, 3, shape).astype(np.int32)
    data = RNG.uniform(0.6, 1.4, shape).astype(np.float32)
    data *= np.where(RNG.random(shape) < 0.3, -1.0, 1.0).astype(np.float32)
    data.reshape(-1)[data.size // 2] = 0.0
    return data


def _check(model, data, dtype):
    want = ReferenceEvaluator(model).run(None, {"x": data})[0]
    graph = tc.from_onnx(model)
    got = run(graph, x=data)
    assert got.dtype == np.dtype(dtype)
    check = np.testing.assert_array_equal if dtype == "int32" else \
        (lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6))
    check(got, want)
    if X86:
        check(tc.compile(graph, target="x86_avx512")(data), want)


@pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,axis", [((13,), 0), ((3, 7), 1), ((5, 1, 3), 0), ((2, 11, 1), -2),
                                        ((4, 1), 1)])
def test_cumprod(shape, axis, dtype, exclusive, reverse):
    model = _model("CumProd", shape, axis, dtype, exclusive, reverse)
    _check(model, _data(shape, dtype), dtype)


@pytest.mark.parametrize("exclusive,reverse", FLAGS, ids=FLAG_IDS)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_cumsum_through_the_shared_helper(dtype, exclusive, reverse):
    model = _model("CumSum", (3, 7), 0, dtype, exclusive, reverse, opset=21)
    _check(model, _data((3, 7), dtype), dtype)


def test_cumprod_statement_masks_with_one():
    model = _model("CumProd", (5,), 0, "float32", 1, 0)
    graph = tc.from_onnx(model)
    statement = graph.outputs[0].statement()
    assert "prod(select((r < i0), x[r], 1.0)" in statement, statement


def test_cumprod_needs_its_axis_at_import_time():
    node = helper.make_node("CumProd", ["x", "axis"], ["y"])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3,)),
                      helper.make_tensor_value_info("axis", TensorProto.INT64, ())],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    with pytest.raises(tc.TilecraftError, match="axis"):
        tc.from_onnx(model)
