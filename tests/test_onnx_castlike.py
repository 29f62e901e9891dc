"""ONNX CastLike: the target type is input 1's ONNX element type as onnx's shape inference
types it, so a bool target (held as uint8, like a uint8 one) casts to 0 / 1; where nothing
types input 1 and it is held as uint8, the import refuses rather than guess."""

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

sys.path.insert(0, str(Path(__file__).parent))
from onnx import TensorProto, helper  # noqa: E402
from onnx_single_node import check_against_evaluator, node_model, value_info  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import OnnxImportError  # noqa: E402

RNG = np.random.default_rng(41)


@pytest.mark.parametrize(("like_type", "numpy_type"), [
    (TensorProto.INT32, np.int32), (TensorProto.FLOAT16, np.float16),
    (TensorProto.BOOL, np.bool_), (TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8)])
def test_cast_like_takes_the_type_of_its_second_input(like_type, numpy_type):
    x = (RNG.standard_normal((3, 7)) * 4).astype(np.float32)
    x[0, :3] = 0.0
    if like_type in (TensorProto.UINT8, TensorProto.INT8):
        x = np.abs(x)  # in range: float to an 8-bit type saturates differently in numpy
    like = np.zeros((2,), numpy_type)
    model = node_model(helper.make_node("CastLike", ["x", "like"], ["y"]),
                       [value_info("x", [3, 7]), value_info("like", [2], like_type)],
                       [value_info("y", None, like_type)], opset=21)
    graph = check_against_evaluator(model, {"x": x, "like": like})
    if like_type == TensorProto.BOOL:  # 1 where non-zero, not the value truncated
        got = tc.reference.run(graph, x=x)
        np.testing.assert_array_equal(got, (x != 0).astype(np.uint8))


def test_an_untyped_uint8_target_is_refused():
    """A CastLike whose second input only an upstream node computes, with no value_info and
    no type shape inference can give: bool and uint8 cannot be told apart."""
    model = node_model(helper.make_node("CastLike", ["x", "like"], ["y"]),
                       [value_info("x", [3]), value_info("like", [2], TensorProto.UINT8)],
                       [value_info("y", None, TensorProto.UINT8)], opset=21)
    from tilecraft.onnx import loader

    original = loader.elem_types
    loader.elem_types = lambda model: {}
    try:
        with pytest.raises(OnnxImportError, match="uint8 or bool"):
            tc.from_onnx(model)
    finally:
        loader.elem_types = original
