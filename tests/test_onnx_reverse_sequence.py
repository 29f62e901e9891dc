"""ONNX ReverseSequence: time and batch axes in either order, a 3-d input, lengths of 0, 1 and
the whole sequence, lengths given at run time (a comparison-sum over the time steps) and known
at import time (index arithmetic), in float32 and int32: imported, run by tilecraft's reference
and compiled for x86, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402
from tilecraft.te.expr import Reduce  # noqa: E402

X86 = get_target("x86_avx512").available().execute
RNG = np.random.default_rng(5)
ELEM = {"float32": TensorProto.FLOAT, "int32": TensorProto.INT32}


def _model(shape, time_axis, batch_axis, dtype, lengths=None):
    """ReverseSequence of ``x``; ``lengths`` given: an initializer, else a graph input."""
    batch = shape[batch_axis]
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=time_axis,
                            batch_axis=batch_axis)
    inputs = [helper.make_tensor_value_info("x", ELEM[dtype], shape)]
    initializers = []
    if lengths is None:
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT64, (batch,)))
    else:
        initializers.append(numpy_helper.from_array(np.array(lengths, np.int64), "lens"))
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("y", ELEM[dtype], None)],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _data(shape, dtype):
    if dtype == "int32":
        return RNG.integers(-100, 100, shape).astype(np.int32)
    return RNG.standard_normal(shape).astype(np.float32)


def _check(shape, time_axis, batch_axis, dtype, lengths, constant):
    model = _model(shape, time_axis, batch_axis, dtype, lengths if constant else None)
    data = _data(shape, dtype)
    feeds = {"x": data} if constant else {"x": data, "lens": np.array(lengths, np.int64)}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    if not constant:  # tilecraft computes int64 graph inputs as int32
        feeds["lens"] = feeds["lens"].astype(np.int32)
    graph = tc.from_onnx(model)
    is_sum = isinstance(graph.outputs[0].op.body, Reduce)
    assert is_sum != constant  # known lengths need no comparison-sum
    np.testing.assert_array_equal(run(graph, feeds), want)
    if X86:
        np.testing.assert_array_equal(tc.compile(graph, target="x86_avx512")(**feeds), want)


#: (shape, time_axis, batch_axis, lengths): lengths 1 and the whole sequence, 0, repeats
CASES = [
    ((5, 4), 0, 1, [5, 1, 3, 5]),
    ((4, 5), 1, 0, [1, 5, 2, 5]),
    ((7, 3, 2), 0, 1, [7, 1, 4]),            # a trailing dimension
    ((3, 7, 2), 1, 0, [0, 7, 6]),            # a length of 0 keeps its entry
    ((1, 3), 0, 1, [1, 1, 0]),               # one time step: nothing moves
    ((6, 1, 5), 0, 1, [6]),                  # one batch entry
    ((13, 2), 0, 1, [2, 2]),                 # every entry the same length
]
CASE_IDS = [f"{'x'.join(map(str, s))}-t{t}b{b}-{''.join(map(str, n))}" for s, t, b, n in CASES]


@pytest.mark.parametrize("constant", [False, True], ids=["runtime-lens", "constant-lens"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,time_axis,batch_axis,lengths", CASES, ids=CASE_IDS)
def test_reverse_sequence(shape, time_axis, batch_axis, lengths, dtype, constant):
    _check(shape, time_axis, batch_axis, dtype, lengths, constant)


def test_lengths_past_the_sequence_reverse_all_of_it():
    """onnx's reference treats a length above the time extent as the whole sequence."""
    _check((4, 3), 0, 1, "float32", [9, 4, 2], constant=False)
    _check((4, 3), 0, 1, "float32", [9, 4, 2], constant=True)


def test_constant_lengths_are_index_arithmetic():
    graph = tc.from_onnx(_model((5, 3), 0, 1, "float32", [5, 2, 5]))
    statement = graph.outputs[0].statement()
    assert "sum" not in statement and "lens" not in statement, statement
    assert "(i1 == 1)" in statement, statement   # the one entry that differs from the rest


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 0), (2, 1), (1, 2)])
def test_axes_other_than_0_and_1_are_unsupported(time_axis, batch_axis):
    model = _model((3, 3, 3), time_axis, batch_axis, "float32", [1, 2, 3])
    with pytest.raises(tc.TilecraftError, match="time_axis.*batch_axis"):
        tc.from_onnx(model)


def test_negative_constant_lengths_are_unsupported():
    with pytest.raises(tc.TilecraftError, match="sequence_lens"):
        tc.from_onnx(_model((3, 2), 0, 1, "float32", [-1, 2]))
