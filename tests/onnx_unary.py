"""A one-node ONNX model of a float32 unary operator, shared by the op tests (rounding,
trigonometric, inverse hyperbolic) that check a converter against onnx's reference evaluator."""

from __future__ import annotations

from typing import Any


def unary_model(op_type: str, shape: list[int], opset: int = 20) -> Any:
    """``y = op_type(x)`` with float32 ``x`` and ``y`` of ``shape``, checked by onnx."""
    import onnx
    from onnx import TensorProto, helper

    model = helper.make_model(helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]),
        opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model
