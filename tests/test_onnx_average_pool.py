"""AveragePool with ceil_mode against onnxruntime: the extra end window ceil mode adds is
divided by its cells inside the input and the model's pads (count_include_pad=1), or inside
the input only (=0), never by the kernel's area."""

import numpy as np
import pytest

import tilecraft as tc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _model(shape, kernel, strides, pads, ceil_mode, include_pad):
    from onnx import TensorProto, helper

    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=kernel, strides=strides,
                            pads=pads, ceil_mode=ceil_mode, count_include_pad=include_pad)
    graph = helper.make_graph([node], "pool",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize(("shape", "kernel", "strides", "pads"), [
    ((1, 1, 5, 5), (2, 2), (2, 2), (0, 0, 0, 0)),
    ((1, 2, 7, 6), (3, 3), (2, 2), (1, 1, 1, 1)),
    ((1, 1, 6, 6), (3, 3), (2, 2), (1, 0, 1, 0)),
    ((2, 3, 11, 1), (3, 1), (3, 1), (0, 0, 2, 0)),
    ((1, 2, 13), (4,), (3,), (1, 2)),
])
def test_ceil_mode_average_pool_matches_onnxruntime(shape, kernel, strides, pads, include_pad):
    model = _model(shape, kernel, strides, pads, 1, include_pad)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    got = tc.reference.run(tc.from_onnx(model), x=x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
