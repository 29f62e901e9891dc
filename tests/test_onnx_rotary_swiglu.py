"""RotaryEmbedding (opset 23) and SwiGLU (opset 28) on awkward float32 shapes (batch 1,
sequence 1, prime head counts, partial rotation), with position ids at run time, absent, or
known at import time: each model imported, run by tilecraft's numpy reference and compiled for
x86, against onnx's reference evaluator."""

import functools
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

sys.path.insert(0, str(Path(__file__).parent))
from onnx import TensorProto, helper  # noqa: E402
from onnx_single_node import check_against_evaluator as _check  # noqa: E402
from onnx_single_node import node_model  # noqa: E402
from onnx_single_node import value_info as _value  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import OnnxImportError  # noqa: E402

RNG = np.random.default_rng(23)


_model = functools.partial(node_model, opset=23)


def _rotary_model(x_shape, cache_shape, ids_shape=None, initializers=None, **attrs):
    """RotaryEmbedding of run-time x and caches (and ids, when ``ids_shape``); an input named
    in ``initializers`` is bound there instead."""
    initializers = initializers or {}
    names = ["x", "cos", "sin"] + (["ids"] if ids_shape is not None else [])
    node = helper.make_node("RotaryEmbedding", names, ["y"], **attrs)
    shapes = {"x": x_shape, "cos": cache_shape, "sin": cache_shape, "ids": ids_shape}
    inputs = [_value(n, shapes[n], TensorProto.INT64 if n == "ids" else TensorProto.FLOAT)
              for n in names if n not in initializers]
    return _model(node, inputs, [_value("y", None)], initializers)


def _caches(shape):
    return (RNG.uniform(-1, 1, shape).astype(np.float32),
            RNG.uniform(-1, 1, shape).astype(np.float32))


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("x_shape,attrs", [
    ((1, 3, 5, 6), {}),                                  # 4-d, full rotation, 3 heads
    ((2, 1, 1, 10), {"rotary_embedding_dim": 4}),         # one head, one token, partial
    ((1, 7, 1, 2), {}),                                  # 7 heads of 2 features
    ((2, 4, 21), {"num_heads": 3, "rotary_embedding_dim": 6}),  # 3-d, 3 heads of 7
    ((2, 4, 30), {"num_heads": 5}),                       # 3-d, 5 heads of 6, full rotation
    ((1, 1, 13), {"num_heads": 1, "rotary_embedding_dim": 12}),
])
def test_rotary_embedding_run_time_position_ids(interleaved, x_shape, attrs):
    batch, seq = x_shape[0], x_shape[2] if len(x_shape) == 4 else x_shape[1]
    head = x_shape[3] if len(x_shape) == 4 else x_shape[2] // attrs["num_heads"]
    half = attrs.get("rotary_embedding_dim", head) // 2
    positions = 11
    cos, sin = _caches((positions, half))
    ids = RNG.integers(0, positions, (batch, seq)).astype(np.int64)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    model = _rotary_model(x_shape, cos.shape, ids.shape, interleaved=interleaved, **attrs)
    _check(model, {"x": x, "cos": cos, "sin": sin, "ids": ids})


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("x_shape,cache_shape,attrs", [
    ((2, 3, 5, 8), (2, 5, 4), {}),
    ((1, 1, 1, 6), (1, 1, 2), {"rotary_embedding_dim": 4}),
    ((3, 2, 22), (3, 2, 5), {"num_heads": 2, "rotary_embedding_dim": 10}),
])
def test_rotary_embedding_without_position_ids(interleaved, x_shape, cache_shape, attrs):
    cos, sin = _caches(cache_shape)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    model = _rotary_model(x_shape, cache_shape, interleaved=interleaved, **attrs)
    _check(model, {"x": x, "cos": cos, "sin": sin})


@pytest.mark.parametrize("ids", [
    np.array([[4, 5, 6]]),            # an arange: indexed directly
    np.array([[3, 4, 5], [7, 8, 9]]),  # per-batch offsets: still affine
    np.array([[9, 0, 4], [2, 2, -1]]),  # no pattern (and a negative id, from the end)
])
@pytest.mark.parametrize("known_cache", [False, True])
def test_rotary_embedding_position_ids_known_at_import(ids, known_cache):
    positions, half = 13, 3
    cos, sin = _caches((positions, half))
    x = RNG.standard_normal((ids.shape[0], 2, ids.shape[1], 2 * half + 1)).astype(np.float32)
    bound = {"ids": ids.astype(np.int64)}
    if known_cache:
        bound.update(cos=cos, sin=sin)
    model = _rotary_model(x.shape, cos.shape, ids.shape, bound, rotary_embedding_dim=2 * half)
    feeds = {"x": x} if known_cache else {"x": x, "cos": cos, "sin": sin}
    graph = _check(model, feeds)
    assert "ids" not in {t.name for t in graph.inputs}
    if ids.min() >= 0 and not known_cache:  # an arange: the cache rows indexed directly
        assert "sum(" not in str(graph)


def test_rotary_embedding_caches_as_initializers_and_run_time_ids():
    """The usual exported model: the caches are weights, the position ids an input."""
    cos, sin = _caches((17, 5))
    x = RNG.standard_normal((1, 3, 33)).astype(np.float32)
    ids = np.array([[16, 0, 7]], np.int64)
    model = _rotary_model(x.shape, cos.shape, ids.shape, {"cos": cos, "sin": sin},
                          num_heads=3, rotary_embedding_dim=10, interleaved=1)
    _check(model, {"x": x, "ids": ids})


def test_rotary_embedding_broadcasts_ids_over_the_batch():
    cos, sin = _caches((9, 2))
    x = RNG.standard_normal((3, 2, 5, 4)).astype(np.float32)
    ids = np.array([[8, 1, 0, 3, 3]], np.int64)
    model = _rotary_model(x.shape, cos.shape, ids.shape)
    _check(model, {"x": x, "cos": cos, "sin": sin, "ids": ids})


@pytest.mark.parametrize("x_shape,attrs,culprit", [
    ((1, 2, 3, 8), {"rotary_embedding_dim": 5}, "rotary_embedding_dim 5"),
    ((1, 2, 3, 8), {"rotary_embedding_dim": 10}, "rotary_embedding_dim 10"),
    ((1, 3, 8), {}, "num_heads"),
    ((1, 3, 10), {"num_heads": 3}, "num_heads 3"),
])
def test_rotary_embedding_refuses_what_it_cannot_do(x_shape, attrs, culprit):
    model = _rotary_model(x_shape, (7, 2), (1, 3), **attrs)
    with pytest.raises(OnnxImportError, match=culprit):
        tc.from_onnx(model)


def test_rotary_embedding_refuses_a_cache_of_the_wrong_width():
    model = _rotary_model((1, 2, 3, 8), (7, 3), (1, 3))
    with pytest.raises(OnnxImportError, match="cos_cache"):
        tc.from_onnx(model)


def _swiglu_model(shape, **attrs):
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], **attrs)
    return _model(node, [_value("a", shape), _value("b", shape)], [_value("y", None)], opset=28)


@pytest.mark.parametrize("shape", [(1,), (3, 7, 11), (1, 1, 13)])
@pytest.mark.parametrize("alpha", [None, 0.5, 1.702, -2.0])
def test_swiglu(shape, alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    a = RNG.uniform(-6, 6, shape).astype(np.float32)
    b = RNG.standard_normal(shape).astype(np.float32)
    _check(_swiglu_model(shape, **attrs), {"a": a, "b": b})


def test_swiglu_refuses_inputs_of_different_shapes():
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"])
    model = _model(node, [_value("a", (2, 3)), _value("b", (1, 3))], [_value("y", None)],
                   opset=28)
    with pytest.raises(OnnxImportError, match="one shape"):
        tc.from_onnx(model)
