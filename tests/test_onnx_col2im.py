"""ONNX Col2Im (tilecraft.onnx.convert_selection) on awkward shapes: 1, 2 and 3 spatial axes,
prime extents, strides, asymmetric pads, dilations; each model imported, run by tilecraft's
numpy reference and compiled for x86, against onnx's reference evaluator, and against an
im2col written here (col2im is im2col's adjoint)."""

import itertools
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import tilecraft as tc  # noqa: E402
from tilecraft.onnx import ConstantRequired, OnnxImportError  # noqa: E402
from tilecraft.reference import run  # noqa: E402
from tilecraft.target.registry import get_target  # noqa: E402

RNG = np.random.default_rng(29)
X86 = get_target("x86_avx512").available().execute


def _blocks(image, block, strides, pads, dilations):
    nd = len(image)
    return [(image[d] + pads[d] + pads[nd + d] - dilations[d] * (block[d] - 1) - 1)
            // strides[d] + 1 for d in range(nd)]


def _col2im_model(batch, channels, image, block, strides=None, pads=None, dilations=None,
                  shapes_known=True, elem=TensorProto.FLOAT):
    nd = len(image)
    strides, pads, dilations = strides or [1] * nd, pads or [0] * 2 * nd, dilations or [1] * nd
    length = math.prod(_blocks(image, block, strides, pads, dilations))
    shape = [batch, channels * math.prod(block), length]
    node = helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"],
                            strides=strides, pads=pads, dilations=dilations)
    inputs = [helper.make_tensor_value_info("x", elem, shape)]
    known = [numpy_helper.from_array(np.array(image, np.int64), "image_shape"),
             numpy_helper.from_array(np.array(block, np.int64), "block_shape")]
    if not shapes_known:
        inputs.append(helper.make_tensor_value_info("image_shape", TensorProto.INT64, [nd]))
        known = known[1:]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", elem,
                                                                                  None)], known)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), shape


def _im2col(image, block, strides, pads, dilations):
    """numpy im2col: ``[N, C, *spatial]`` to ``[N, C*prod(block), L]`` (PyTorch's unfold)."""
    nd = len(block)
    padded = np.pad(image, [(0, 0), (0, 0), *((pads[d], pads[nd + d]) for d in range(nd))])
    blocks = _blocks(image.shape[2:], block, strides, pads, dilations)
    n, c = image.shape[:2]
    cols = np.zeros((n, c, *block, *blocks), image.dtype)
    for taps in itertools.product(*(range(b) for b in block)):
        for positions in itertools.product(*(range(b) for b in blocks)):
            where = tuple(q * s + t * dl for q, s, t, dl in
                          zip(positions, strides, taps, dilations))
            cols[(slice(None), slice(None), *taps, *positions)] = \
                padded[(slice(None), slice(None), *where)]
    return cols.reshape(n, c * math.prod(block), math.prod(blocks))


def _check(model, x, compile_x86=True):
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    graph = tc.from_onnx(model)
    results = [run(graph, {"x": x})]
    if compile_x86 and X86:
        results.append(tc.compile(graph, target="x86_avx512")(x=x))
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    return graph


CASES = [  # batch, channels, image, block, strides, pads, dilations
    (1, 1, [5], [2], [1], [0, 0], [1]),
    (2, 3, [11], [3], [2], [1, 2], [2]),
    (1, 2, [5, 5], [2, 2], None, None, None),
    (2, 3, [7, 5], [2, 3], [2, 1], [1, 0, 0, 1], [1, 2]),
    (1, 1, [13, 7], [3, 1], [3, 2], [2, 1, 1, 0], [1, 1]),
    (3, 2, [5, 11], [1, 3], [1, 3], [0, 0, 0, 0], [1, 1]),
    (2, 1, [9, 6], [2, 2], [3, 3], [0, 0, 0, 0], [4, 1]),  # stride > kernel span: gaps
    (1, 2, [3, 5, 4], [1, 2, 3], None, None, None),
    (2, 1, [5, 4, 7], [2, 2, 2], [2, 1, 3], [1, 0, 1, 0, 1, 1], [1, 2, 1]),
]


@pytest.mark.parametrize("batch, channels, image, block, strides, pads, dilations", CASES)
def test_col2im_matches_onnx(batch, channels, image, block, strides, pads, dilations):
    model, shape = _col2im_model(batch, channels, image, block, strides, pads, dilations)
    x = RNG.standard_normal(shape).astype(np.float32)
    _check(model, x, compile_x86=len(image) != 1 or batch == 2)


@pytest.mark.parametrize("batch, channels, image, block, strides, pads, dilations", CASES)
def test_col2im_is_the_adjoint_of_im2col(batch, channels, image, block, strides, pads,
                                         dilations):
    """<col2im(cols), x> == <cols, im2col(x)>, and col2im(im2col(x)) is x times the number
    of blocks covering each pixel."""
    nd = len(image)
    strides, pads, dilations = strides or [1] * nd, pads or [0] * 2 * nd, dilations or [1] * nd
    model, shape = _col2im_model(batch, channels, image, block, strides, pads, dilations)
    graph = tc.from_onnx(model)
    cols = RNG.standard_normal(shape)
    x = RNG.standard_normal((batch, channels, *image))
    image_of_cols = run(graph, {"x": cols.astype(np.float32)}).astype(np.float64)
    np.testing.assert_allclose(np.vdot(image_of_cols, x),
                               np.vdot(cols, _im2col(x, block, strides, pads, dilations)),
                               rtol=1e-4)
    x = x.astype(np.float32)
    coverage = run(graph, {"x": _im2col(np.ones_like(x), block, strides, pads, dilations)})
    round_trip = run(graph, {"x": _im2col(x, block, strides, pads, dilations)})
    np.testing.assert_allclose(round_trip, x * coverage, rtol=1e-5, atol=1e-6)


def test_col2im_of_int32():
    model, shape = _col2im_model(2, 2, [5, 4], [2, 3], [1, 1], [0, 1, 1, 0], [2, 1],
                                 elem=TensorProto.INT32)
    _check(model, RNG.integers(-9, 9, shape).astype(np.int32))


def test_run_time_image_shape_is_refused():
    model, _ = _col2im_model(1, 1, [5], [2], shapes_known=False)
    with pytest.raises(ConstantRequired, match="image_shape"):
        tc.from_onnx(model)


def test_wrong_column_count_is_refused():
    model, shape = _col2im_model(1, 2, [5, 5], [2, 2])
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = shape[2] + 1
    with pytest.raises(OnnxImportError, match="columns"):
        tc.from_onnx(model)
