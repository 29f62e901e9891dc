"""One-node ONNX models and their check against onnx's reference evaluator, shared by the
converter tests of the newer operators (RotaryEmbedding, SwiGLU, TensorScatter, AffineGrid):
the model imported, run by tilecraft's numpy reference and, where the x86 target runs here,
compiled for it."""

from __future__ import annotations

from typing import Any

import numpy as np


def node_model(node: Any, inputs: list[Any], outputs: list[Any],
               initializers: dict[str, np.ndarray] | None = None, opset: int = 21) -> Any:
    """A model of ``node`` with the given value infos and initializers, at ``opset``."""
    from onnx import helper, numpy_helper

    graph = helper.make_graph([node], "g", inputs, outputs, [
        numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def value_info(name: str, shape: list[Any], elem: int | None = None) -> Any:
    """A tensor value info (float32 unless ``elem`` says otherwise)."""
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT if elem is None else elem,
                                         shape)


def check_against_evaluator(model: Any, feeds: dict[str, np.ndarray], rtol: float = 1e-5,
                            atol: float = 1e-6) -> Any:
    """tilecraft's reference and its x86 build against onnx's evaluator (int64 inputs are
    passed to tilecraft as the int32 it holds them in, bool ones as uint8, and only those the
    graph reads); the model's one output is ``y`` and keeps that name. Returns the imported
    graph."""
    from onnx.reference import ReferenceEvaluator

    import tilecraft as tc
    from tilecraft.reference import run
    from tilecraft.target.registry import get_target

    want = ReferenceEvaluator(model).run(None, feeds)
    feeds = {k: v.astype(np.int32) if v.dtype == np.int64 else
             v.astype(np.uint8) if v.dtype == np.bool_ else v for k, v in feeds.items()}
    graph = tc.from_onnx(model)
    assert [t.name for t in graph.outputs] == ["y"]  # the ONNX output's name is kept
    # an input whose values nothing reads (CastLike's second) is no input of the graph
    feeds = {t.name: feeds[t.name] for t in graph.inputs}
    runs = [run(graph, feeds)]
    if get_target("x86_avx512").available().execute:
        runs.append(tc.compile(graph, target="x86_avx512")(**feeds))
    for got in runs:
        for each, wanted in zip(got if isinstance(got, tuple) else (got,), want):
            np.testing.assert_allclose(each, wanted.astype(each.dtype), rtol=rtol, atol=atol)
    return graph
