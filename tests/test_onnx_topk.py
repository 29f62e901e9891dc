"""ONNX TopK (tilecraft.onnx.convert_selection) on awkward shapes: prime axis lengths, k = 1 and
k = n, ties (broken by the lower position first), negative axes, float32 and int32, NaN and
infinities; each model imported, run by tilecraft's numpy reference and compiled for x86,
against onnx's reference evaluator."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import ConstantRequired, OnnxImportError  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

RNG = np.random.default_rng(23)
X86 = get_target("x86_avx512").available().execute
ELEM = {np.float32: TensorProto.FLOAT, np.int32: TensorProto.INT32}


def _top_k_model(shape, dtype, k, opset=21, k_known=True, **attributes):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], **attributes)
    inputs = [helper.make_tensor_value_info("x", ELEM[dtype], shape)]
    initializers = [numpy_helper.from_array(np.array([k], np.int64), "k")]
    if not k_known:
        inputs.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
        initializers = []
    graph = helper.make_graph([node], "g", inputs, [
        helper.make_tensor_value_info("values", ELEM[dtype], None),
        helper.make_tensor_value_info("indices", TensorProto.INT64, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, x, compile_x86=True):
    """Values and indices equal to onnx's evaluator's, exactly (TopK copies, never adds)."""
    want = ReferenceEvaluator(model).run(None, {"x": x})
    graph = tc.from_onnx(model)
    results = [run(graph, {"x": x})]
    if compile_x86 and X86:
        results.append(tc.compile(graph, target="x86_avx512")(x=x))
    for values, indices in results:
        np.testing.assert_array_equal(values, want[0].astype(values.dtype))
        np.testing.assert_array_equal(indices, want[1])


def _data(shape, dtype, low=-50, high=50):
    if dtype is np.int32:
        return RNG.integers(low, high, shape).astype(np.int32)
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("shape, axis, k", [
    ((7,), 0, 1), ((7,), 0, 7), ((7,), -1, 3),
    ((3, 11), 1, 4), ((3, 11), 0, 3), ((1, 13), -1, 13),
    ((2, 5, 3), 1, 2), ((2, 5, 3), -2, 5), ((3, 2, 5), 0, 1),
])
@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_float32(shape, axis, k, largest):
    model = _top_k_model(shape, np.float32, k, axis=axis, largest=largest)
    _check(model, _data(shape, np.float32), compile_x86=shape in ((3, 11), (2, 5, 3)))


@pytest.mark.parametrize("shape, axis, k", [((11,), 0, 5), ((3, 7, 2), -2, 7), ((5, 3), 0, 1)])
@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_int32(shape, axis, k, largest):
    model = _top_k_model(shape, np.int32, k, axis=axis, largest=largest)
    _check(model, _data(shape, np.int32), compile_x86=axis == -2)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize("largest", [1, 0])
def test_ties_go_to_the_lower_position_first(dtype, largest):
    x = RNG.integers(0, 3, (4, 13)).astype(dtype)  # each line holds each value several times
    x[0] = 1  # a line of one value: the positions in order
    model = _top_k_model(x.shape, dtype, 9, axis=-1, largest=largest)
    _check(model, x)
    values, indices = run(tc.from_onnx(model), {"x": x})
    np.testing.assert_array_equal(indices[0], np.arange(9))


def test_unsorted_request_returns_the_sorted_order():
    """``sorted=0`` allows any order; the sorted one (what onnx's evaluator returns) comes."""
    x = _data((3, 11), np.float32)
    _check(_top_k_model(x.shape, np.float32, 6, axis=1, sorted=0), x, compile_x86=False)


@pytest.mark.parametrize("largest", [1, 0])
def test_nan_and_infinities_sort_as_numpy_does(largest):
    """NaN above every number (first when largest, last otherwise), equal NaNs by position."""
    x = np.array([[1.0, np.nan, -np.inf, 3.0, np.nan, np.inf, 3.0],
                  [np.nan, np.nan, np.nan, 0.0, -0.0, 2.0, np.inf]], np.float32)
    model = _top_k_model(x.shape, np.float32, 7, axis=1, largest=largest)
    _check(model, x)


def test_opset_11_top_k():
    x = _data((2, 7), np.float32)
    _check(_top_k_model(x.shape, np.float32, 3, opset=13, axis=-1, largest=0), x,
           compile_x86=False)


def test_values_alone():
    x = _data((3, 7), np.float32)
    model = _top_k_model(x.shape, np.float32, 2, axis=1)
    del model.graph.output[1]
    model.graph.node[0].output[1] = ""
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(run(tc.from_onnx(model), {"x": x}), want)


def test_run_time_k_is_refused():
    model = _top_k_model((3, 5), np.float32, 2, k_known=False)
    with pytest.raises(ConstantRequired, match="k"):
        tc.from_onnx(model)


@pytest.mark.parametrize("k", [0, 6])
def test_k_outside_the_axis_is_refused(k):
    with pytest.raises(OnnxImportError, match="1 <= k <= 5"):
        tc.from_onnx(_top_k_model((3, 5), np.float32, k))
