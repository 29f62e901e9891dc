"""``ops.pad``'s modes (constant, edge, reflect, wrap) against ``np.pad`` on awkward shapes
(prime extents, size-1 axes, pads on some axes only, wraps longer than the axis), in float32
and int32, through tilecraft's reference and an x86 build; reflect pads that reach past the
edge element are refused; and ONNX Pad in each mode against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.autodiff import grad
from tilecraft.graph import Graph
from tilecraft.reference import run
from tilecraft.target.registry import get_target

X86 = get_target("x86_avx512").available().execute
RNG = np.random.default_rng(23)

#: (input shape, pad widths) legal in every mode (reflect needs pads below the extent)
CASES = [
    ((7,), [(3, 5)]),
    ((5, 11), [(2, 0), (0, 7)]),          # before on one axis, after on the other
    ((3, 13), [(0, 0), (4, 4)]),          # the first axis untouched
    ((2, 3, 5), [(1, 1), (0, 2), (4, 3)]),
    ((13, 2), [(12, 1), (1, 0)]),         # the largest reflect pad, extent - 1
]
#: shapes with a size-1 axis, for the modes that allow padding it (edge, wrap, constant)
SIZE_ONE_CASES = [
    ((1, 7), [(2, 3), (1, 1)]),
    ((5, 1, 3), [(0, 0), (4, 0), (1, 2)]),
    ((1,), [(3, 2)]),
]
#: wrap pads longer than the axis: numpy (and so onnx's reference) keep going round
LONG_WRAP_CASES = [
    ((3,), [(7, 5)]),
    ((2, 5), [(5, 4), (11, 0)]),
]


def _data(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "int32":
        return RNG.integers(-1000, 1000, shape).astype(np.int32)
    return RNG.standard_normal(shape).astype(np.float32)


def _check(shape, pad_width, mode, dtype, value=0):
    x = te.placeholder(shape, dtype, name="x")
    graph = Graph.from_outputs([ops.pad(x, pad_width, value=value, mode=mode, name="y")])
    data = _data(shape, dtype)
    if mode == "constant":
        want = np.pad(data, pad_width, mode=mode, constant_values=value)
    else:
        want = np.pad(data, pad_width, mode=mode)
    got = run(graph, x=data)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if X86:
        np.testing.assert_array_equal(tc.compile(graph, target="x86_avx512")(data), want)


def _ids(cases):
    return ["x".join(map(str, shape)) + "-" + "".join(f"{b}{a}" for b, a in pads)
            for shape, pads in cases]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
@pytest.mark.parametrize("shape,pad_width", CASES, ids=_ids(CASES))
def test_modes_match_numpy(shape, pad_width, mode, dtype):
    _check(shape, pad_width, mode, dtype, value=3)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("mode", ["constant", "edge", "wrap"])
@pytest.mark.parametrize("shape,pad_width", SIZE_ONE_CASES, ids=_ids(SIZE_ONE_CASES))
def test_size_one_axes(shape, pad_width, mode, dtype):
    _check(shape, pad_width, mode, dtype)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,pad_width", LONG_WRAP_CASES, ids=_ids(LONG_WRAP_CASES))
def test_wrap_pads_longer_than_the_axis(shape, pad_width, dtype):
    _check(shape, pad_width, "wrap", dtype)


def test_no_pad_at_all_is_a_copy_in_every_mode():
    for mode in ("edge", "reflect", "wrap"):
        _check((3, 1), [(0, 0), (0, 0)], mode, "float32")


def test_index_arithmetic_of_each_mode():
    x = te.placeholder((4,), name="x")
    assert ops.pad(x, [(2, 1)], mode="edge", name="e").statement() == \
        "e[i0] = x[min(max((i0 - 2), 0), 3)]"
    assert ops.pad(x, [(2, 0)], mode="wrap", name="w").statement() == "w[i0] = x[((i0 + 2) % 4)]"
    reflect = ops.pad(x, [(2, 2)], mode="reflect", name="r").statement()
    assert "select" in reflect and "%" not in reflect


@pytest.mark.parametrize("shape,pad_width,axis,limit", [
    ((4, 6), [(0, 0), (6, 0)], 1, 5),     # a pad equal to the extent
    ((4, 6), [(1, 4), (0, 0)], 0, 3),     # the after pad
    ((1, 6), [(1, 0), (0, 0)], 0, 0),     # a size-1 axis has nothing to mirror
])
def test_reflect_pads_must_be_smaller_than_the_extent(shape, pad_width, axis, limit):
    x = te.placeholder(shape, name="x")
    with pytest.raises(tc.errors.ShapeError, match=f"axis {axis}.*at most {limit}"):
        ops.pad(x, pad_width, mode="reflect")


def test_unknown_mode_is_refused():
    x = te.placeholder((3,), name="x")
    with pytest.raises(tc.errors.ShapeError, match="symmetric.*constant, edge, reflect, wrap"):
        ops.pad(x, 1, mode="symmetric")


@pytest.mark.parametrize("mode", ["constant", "wrap"])
def test_gradient_sums_the_copies(mode):
    """The gradient of a pad adds up the output elements each input element fills."""
    x = te.placeholder((5,), name="x")
    (dx,) = grad(ops.pad(x, [(2, 7)], mode=mode, name="y"), [x])
    upstream = np.arange(14, dtype=np.float32)
    jacobian = np.stack([np.pad(row, (2, 7), mode=mode) for row in np.eye(5, dtype=np.float32)])
    np.testing.assert_allclose(run(dx, grad_y=upstream), jacobian @ upstream)


@pytest.mark.parametrize("mode", ["edge", "reflect"])
def test_gradient_of_clamped_or_mirrored_indices_is_refused(mode):
    """Their index arithmetic (min / max, select) is outside what autodiff solves: an error
    naming the compute, never a wrong gradient."""
    x = te.placeholder((5,), name="x")
    with pytest.raises(tc.errors.AutodiffError, match="compute y"):
        grad(ops.pad(x, [(2, 3)], mode=mode, name="y"), [x])


onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _pad_model(shape, pads, mode, elem, axes=None):
    inputs = ["x", "pads", "", "axes"] if axes is not None else ["x", "pads"]
    initializers = [numpy_helper.from_array(np.array(pads, np.int64), "pads")]
    if axes is not None:
        initializers.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    graph = helper.make_graph(
        [helper.make_node("Pad", inputs, ["y"], mode=mode)], "g",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("shape,pads,axes", [
    ((5, 7), [1, 2, 3, 4], None),
    ((2, 3, 11), [4, 0, 10, 1], [-1, 0]),   # some axes only, one negative
])
def test_onnx_pad_modes(shape, pads, axes, mode, dtype):
    elem = TensorProto.FLOAT if dtype == "float32" else TensorProto.INT32
    model = _pad_model(shape, pads, mode, elem, axes)
    data = _data(shape, dtype)
    want = ReferenceEvaluator(model).run(None, {"x": data})[0]
    graph = tc.from_onnx(model)
    np.testing.assert_array_equal(run(graph, x=data), want)
    if X86:
        np.testing.assert_array_equal(tc.compile(graph, target="x86_avx512")(data), want)


def test_onnx_reflect_pads_too_large_are_unsupported():
    model = _pad_model((3, 4), [0, 4, 0, 0], "reflect", TensorProto.FLOAT)
    with pytest.raises(tc.TilecraftError, match="reflect pads.*axis 1.*at most 3"):
        tc.from_onnx(model)


def test_onnx_pad_with_a_run_time_constant_value():
    """constant_value as a graph input (what ONNX's expanded Attention function writes): its
    one element fills the border, read when the kernel runs."""
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "fill"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 5)),
         helper.make_tensor_value_info("fill", TensorProto.FLOAT, ())],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1, 0, 2, 3], np.int64), "pads")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    data = _data((3, 5), "float32")
    for fill in (-np.inf, 2.5):
        feeds = {"x": data, "fill": np.array(fill, np.float32)}
        want = ReferenceEvaluator(model).run(None, feeds)[0]
        imported = tc.from_onnx(model)
        ours = {"x": data, "fill": np.array([fill], np.float32)}  # a scalar held as one element
        np.testing.assert_array_equal(run(imported, **ours), want)
        if X86:
            np.testing.assert_array_equal(tc.compile(imported, target="x86_avx512")(**ours), want)
