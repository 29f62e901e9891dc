"""TensorScatter (opset 24, a KV-cache update) and AffineGrid (opset 20) on awkward float32
shapes (batch 1, update length 1, prime sizes, spatial size 1): each model imported, run by
tilecraft's numpy reference and compiled for x86, against onnx's reference evaluator."""

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
from tilecraft.onnx import ConstantRequired, OnnxImportError  # noqa: E402
from tilecraft.reference import run  # noqa: E402

RNG = np.random.default_rng(29)


_model = functools.partial(node_model, opset=24)


def _scatter_model(cache_shape, update_shape, with_indices=True, initializers=None, **attrs):
    initializers = initializers or {}
    names = ["cache", "update"] + (["at"] if with_indices else [])
    node = helper.make_node("TensorScatter", names, ["y"], **attrs)
    shapes = {"cache": cache_shape, "update": update_shape, "at": (cache_shape[0],)}
    inputs = [_value(n, shapes[n], TensorProto.INT64 if n == "at" else TensorProto.FLOAT)
              for n in names if n not in initializers]
    return _model(node, inputs, [_value("y", None)], initializers)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("cache_shape,length,axis", [
    ((2, 3, 7, 5), 2, None),   # [batch, heads, max_seq, head_size], the default axis -2
    ((1, 1, 7, 5), 1, -2),     # batch 1, one head, one token
    ((3, 11, 2), 11, 1),       # the whole cache rewritten
    ((2, 5, 13), 4, -1),       # the last axis
    ((3, 7), 3, 1),            # rank 2
])
def test_tensor_scatter_run_time_write_indices(mode, cache_shape, length, axis):
    attrs = {"mode": mode} | ({} if axis is None else {"axis": axis})
    dim = (-2 if axis is None else axis) % len(cache_shape)
    capacity = cache_shape[dim]
    update_shape = tuple(length if d == dim else n for d, n in enumerate(cache_shape))
    high = capacity if mode == "circular" else capacity - length + 1
    at = RNG.integers(0, high, cache_shape[0]).astype(np.int64)
    cache = RNG.standard_normal(cache_shape).astype(np.float32)
    update = RNG.standard_normal(update_shape).astype(np.float32)
    model = _scatter_model(cache_shape, update_shape, **attrs)
    _check(model, {"cache": cache, "update": update, "at": at})


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("at", [None, [3, 3, 3], [0, 3, 2], [1]])
def test_tensor_scatter_write_indices_known_at_import(mode, at):
    batch = 1 if at == [1] else 3
    cache_shape, update_shape = (batch, 2, 5, 3), (batch, 2, 2, 3)
    cache = RNG.standard_normal(cache_shape).astype(np.float32)
    update = RNG.standard_normal(update_shape).astype(np.float32)
    bound = {} if at is None else {"at": np.array(at, np.int64)}
    model = _scatter_model(cache_shape, update_shape, at is not None, bound, mode=mode)
    graph = _check(model, {"cache": cache, "update": update})
    assert len(graph.computes) == 1  # indexed directly: no comparisons


@pytest.mark.parametrize("known", [False, True])
def test_tensor_scatter_circular_wraps_around_the_cache(known):
    cache = RNG.standard_normal((2, 7, 3)).astype(np.float32)
    update = RNG.standard_normal((2, 4, 3)).astype(np.float32)
    at = np.array([5, 6], np.int64)  # writes 5, 6, 0, 1 and 6, 0, 1, 2
    model = _scatter_model(cache.shape, update.shape, True, {"at": at} if known else None,
                           mode="circular", axis=1)
    feeds = {"cache": cache, "update": update} | ({} if known else {"at": at})
    _check(model, feeds)
    got = run(tc.from_onnx(model), {k: v.astype(np.int32) if v.dtype == np.int64 else v
                                     for k, v in feeds.items()})
    np.testing.assert_array_equal(got[1, [6, 0, 1, 2]], update[1])
    np.testing.assert_array_equal(got[1, 3:6], cache[1, 3:6])


@pytest.mark.parametrize("attrs,culprit", [
    ({"axis": 0}, "axis 0"),
    ({"axis": 4}, "axis 4"),
    ({"mode": "wrap"}, "mode 'wrap'"),
])
def test_tensor_scatter_refuses_what_it_cannot_do(attrs, culprit):
    model = _scatter_model((2, 3, 5, 4), (2, 3, 5, 4), **attrs)
    with pytest.raises(OnnxImportError, match=culprit):
        tc.from_onnx(model)


def test_tensor_scatter_refuses_an_update_longer_than_the_cache():
    model = _scatter_model((2, 3, 4, 4), (2, 3, 5, 4))
    with pytest.raises(OnnxImportError, match="update"):
        tc.from_onnx(model)


@pytest.mark.parametrize("at", [[4], [-1]])
def test_tensor_scatter_refuses_known_linear_writes_past_the_cache(at):
    """ONNX requires each linear write to lie inside the cache; a known index that does not is
    refused at import (circular mode wraps it instead)."""
    model = _scatter_model((1, 2, 5, 3), (1, 2, 2, 3), True, {"at": np.array(at, np.int64)})
    with pytest.raises(OnnxImportError, match=rf"write_indices \[{at[0]}\].*\[0, 3\]"):
        tc.from_onnx(model)
    circular = _scatter_model((1, 2, 5, 3), (1, 2, 2, 3), True, {"at": np.array(at, np.int64)},
                              mode="circular")
    _check(circular, {"cache": RNG.standard_normal((1, 2, 5, 3)).astype(np.float32),
                      "update": RNG.standard_normal((1, 2, 2, 3)).astype(np.float32)})


def _affine_model(theta_shape, size, **attrs):
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"], **attrs)
    return _model(node, [_value("theta", theta_shape)], [_value("y", None)],
                  {"size": np.array(size, np.int64)}, opset=20)


# onnx's reference divides by size - 1 = 0 with align_corners (and gets the one corner, -1)
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")
@pytest.mark.parametrize("align", [None, 0, 1])
@pytest.mark.parametrize("size", [
    (2, 3, 5, 7), (1, 1, 1, 11), (3, 2, 13, 1), (1, 1, 1, 1),
    (2, 3, 3, 5, 7), (1, 1, 1, 2, 3), (1, 2, 5, 1, 1),
])
def test_affine_grid(align, size):
    dims = len(size) - 2
    attrs = {} if align is None else {"align_corners": align}
    theta = RNG.uniform(-2, 2, (size[0], dims, dims + 1)).astype(np.float32)
    _check(_affine_model(theta.shape, size, **attrs), {"theta": theta}, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("theta_shape,size,culprit", [
    ((1, 2, 3), (1, 3, 4), "size"),             # a 1-d grid
    ((1, 2, 3), (1, 3, 4, 5, 6), "theta"),       # a 2-d map for a 3-d grid
    ((1, 3, 3), (1, 3, 4, 5), "theta"),
])
def test_affine_grid_refuses_what_it_cannot_do(theta_shape, size, culprit):
    with pytest.raises(OnnxImportError, match=culprit):
        tc.from_onnx(_affine_model(theta_shape, size))


def test_affine_grid_needs_the_size_at_import_time():
    node = helper.make_node("AffineGrid", ["theta", "size"], ["y"])
    model = _model(node, [_value("theta", (1, 2, 3)), _value("size", (4,), TensorProto.INT64)],
                   [_value("y", None)], opset=20)
    with pytest.raises(ConstantRequired, match="size"):
        tc.from_onnx(model)
