"""The product reduction (``te.prod``, ``ops.reduce_prod``, ONNX ReduceProd): the reference, the
Kernel IR interpreter, x86 native code and the C-like generators against ``np.prod`` on awkward
shapes (primes, size-1 axes, several axes, zeros and negative values), its identity, its
derivative against finite differences, and ReduceProd against onnx's reference evaluator."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.codegen.c_expressions import combine
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.reference import run
from tilecraft.target.registry import get_target
from tilecraft.target.semantics import Loop, Operand, build_program
from tilecraft.te.expr import Reduce, ReduceOp

sys.path.insert(0, str(Path(__file__).parent))
from autodiff_checks import check_finite_differences  # noqa: E402

X86 = get_target("x86_avx512").available().execute

#: (input shape, reduced axes): primes, size-1 axes, several axes, every axis
CASES = [
    ((7, 13), (1,)),
    ((7, 13), (0,)),
    ((1, 5, 1), (0, 2)),
    ((3, 1, 11), (1,)),
    ((5, 3, 7), (0, 2)),
    ((4, 6, 5), (0, 1, 2)),
    ((2, 37), (1,)),
]
CASE_IDS = [f"{'x'.join(map(str, shape))}-axes{''.join(map(str, axes))}"
            for shape, axes in CASES]


def _float_data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values in [0.5, 1.5] (products stay finite), a zero in the first row and a negated
    last row."""
    data = np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(np.float32)
    flat = data.reshape(-1, shape[-1])
    if flat.size > 1:
        flat[0, flat.shape[1] // 2] = 0.0
        flat[-1] *= -1.0
    return data


def _graph(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool = False,
           dtype: str = "float32") -> Graph:
    x = te.placeholder(shape, dtype, name="X")
    return Graph.from_outputs([ops.reduce_prod(x, axes=axes, keepdims=keepdims, name="P")])


def test_te_prod_builds_a_product_reduction_with_identity_one():
    A = te.placeholder((4, 8), name="A")
    r = te.reduce_axis(8, name="r")
    P = te.compute((4,), lambda i: te.prod(A[i, r], axis=r), name="P")
    body = P.op.body
    assert isinstance(body, Reduce) and body.op is ReduceOp.PROD
    assert body.identity() == 1.0
    assert Reduce(ReduceOp.PROD, te.const(3), body.axes).identity() == 1
    assert P.statement() == "P[i] = prod(A[i, r], axis=[r])"


def test_te_prod_refuses_a_spatial_axis():
    A = te.placeholder((4,), name="A")
    with pytest.raises(tc.TilecraftError, match="prod"):
        te.compute((4,), lambda i: te.prod(A[i], axis=i))


@pytest.mark.parametrize("shape,axes", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reference_and_interpreter_agree_with_numpy(shape, axes, keepdims):
    x = _float_data(shape)
    want = np.prod(x, axis=axes, keepdims=keepdims)
    graph = _graph(shape, axes, keepdims)
    np.testing.assert_allclose(run(graph, {"X": x}), want, rtol=1e-5, atol=1e-6)
    interpreted = run_kernels(lower_graph(graph, LoweringOptions(vector_lanes=4)), {"X": x})
    np.testing.assert_allclose(interpreted["P"], want, rtol=1e-5, atol=1e-6)


def test_a_body_constant_along_the_reduce_axis_is_raised_to_its_extent():
    A = te.placeholder((5,), name="A")
    r = te.reduce_axis(3, name="r")
    P = te.compute((5,), lambda i: te.prod(A[i], axis=r), name="P")
    a = np.array([0.5, -1.5, 2.0, 0.0, 1.25], np.float32)
    graph = Graph.from_outputs([P])
    np.testing.assert_allclose(run(graph, {"A": a}), a ** 3, rtol=1e-6)
    interpreted = run_kernels(lower_graph(graph, LoweringOptions(vector_lanes=4)), {"A": a})
    np.testing.assert_allclose(interpreted["P"], a ** 3, rtol=1e-6)


def test_integer_products_wrap_like_numpy_int32():
    x = np.random.default_rng(2).integers(-3, 4, (5, 23)).astype(np.int32)
    x[1] = 3  # 3**23 wraps in int32
    want = np.prod(x, axis=1, dtype=np.int32)
    graph = _graph(x.shape, (1,), dtype="int32")
    np.testing.assert_array_equal(run(graph, {"X": x}), want)
    interpreted = run_kernels(lower_graph(graph, LoweringOptions(vector_lanes=4)), {"X": x})
    np.testing.assert_array_equal(interpreted["P"], want)
    if X86:
        np.testing.assert_array_equal(tc.compile(graph, target="x86_avx512")(x), want)


@pytest.mark.skipif(not X86, reason="x86 native code cannot run here")
@pytest.mark.parametrize("shape,axes", CASES, ids=CASE_IDS)
def test_x86_agrees_with_numpy(shape, axes):
    x = _float_data(shape, seed=1)
    got = tc.compile(_graph(shape, axes), target="x86_avx512")(x)
    np.testing.assert_allclose(got, np.prod(x, axis=axes), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not X86, reason="x86 native code cannot run here")
def test_x86_vector_reduction_multiplies_lanes_from_one():
    from tilecraft_x86_avx512.codegen.types import float_literal, identity

    from tilecraft.dtypes import DType

    assert identity(ReduceOp.PROD, DType.FLOAT32) == float_literal(1.0)
    assert identity(ReduceOp.PROD, DType.INT32) == "1"
    exe = tc.compile(_graph((3, 64), (1,)), target="x86_avx512")
    text = "\n".join(c.source.text for c in exe.compiled)
    assert f"llvm.vector.reduce.fmul.v16f32\"(float {float_literal(1.0)}," in text


def test_intrinsic_semantics_reduce_with_prod():
    program = build_program("C[i] = prod(A[i, r])", [Loop("i", 4, te.AxisKind.SPATIAL),
                                                     Loop("r", 3, te.AxisKind.REDUCE)],
                            [Operand("A", "src", "float32", (4, 3)),
                             Operand("C", "dst", "float32", (4,))])
    assert program.compute.statement() == "C[i] = prod(A[i, r], axis=[r])"


def test_c_dialect_multiplies():
    assert combine(ReduceOp.PROD, "acc", "x") == "(acc * x)"


@pytest.mark.parametrize("target", ["mali", "nvidia_tc", "ascend_npu", "fpga_hls"])
def test_c_like_generators_multiply_and_agree_with_numpy(target):
    """Each C-like generator's source multiplies into the accumulator (from 1); the kernels
    run wherever the target emulates them."""
    pytest.importorskip(f"tilecraft_{target}")
    x = _float_data((7, 13), seed=3)
    exe = tc.compile(_graph((7, 13), (1,)), target=get_target(target))
    text = "\n".join(source.text for source in exe.sources.values())
    assert " * " in text
    np.testing.assert_allclose(exe(x), np.prod(x, axis=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("zeros", [0, 1, 2], ids=["no-zero", "one-zero", "two-zeros"])
def test_derivative_is_the_product_of_the_others(zeros):
    """d/dx_i prod_j x_j = prod_{j != i} x_j, exact where factors are zero (a single zero
    leaves its own element the only non-zero gradient of the row)."""
    X = te.placeholder((3, 7), name="X")
    P = ops.reduce_prod(X, axes=(1,), name="P")
    x = np.random.default_rng(4).uniform(0.5, 1.5, (3, 7))
    x[1, 2:2 + zeros] = 0.0
    x[2] *= -1.0
    check_finite_differences(P, [X], {"X": x}, elements=8)


def test_derivative_over_several_axes_of_a_product_body():
    X = te.placeholder((3, 4, 5), name="X")
    W = te.placeholder((4,), name="W")
    r, s = te.reduce_axis(4, name="r"), te.reduce_axis(5, name="s")
    P = te.compute((3,), lambda i: te.prod(X[i, r, s] * W[r], axis=[r, s]), name="P")
    rng = np.random.default_rng(5)
    x, w = rng.uniform(0.5, 1.5, (3, 4, 5)), rng.uniform(0.8, 1.2, (4,))
    x[0, 1, 3] = 0.0
    check_finite_differences(P, [X, W], {"X": x, "W": w}, elements=6)


# ONNX ReduceProd ---------------------------------------------------------------------------

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402


def _onnx_model(x: np.ndarray, opset: int, axes: tuple[int, ...] | None, **attrs: int):
    """A one-node ReduceProd model: ``axes`` an input from opset 18, an attribute before."""
    inputs, initializers = ["x"], []
    if axes is not None and opset >= 18:
        inputs.append("axes")
        initializers.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    elif axes is not None:
        attrs["axes"] = list(axes)
    node = helper.make_node("ReduceProd", inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, x.shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [13, 18, 21])
@pytest.mark.parametrize("axes,attrs", [
    ((1,), {"keepdims": 1}),
    ((0, 2), {"keepdims": 0}),
    ((-1,), {}),
    (None, {"keepdims": 0}),  # no axes: every axis
    (None, {"noop_with_empty_axes": 1}),  # no axes and noop: the input itself
], ids=["axis1-keep", "axes02-drop", "last-default", "all-axes", "noop"])
def test_onnx_reduce_prod_matches_the_reference_evaluator(opset, axes, attrs):
    if opset < 18 and "noop_with_empty_axes" in attrs:
        pytest.skip("noop_with_empty_axes is an attribute from opset 18")
    x = _float_data((3, 5, 7), seed=6)
    model = _onnx_model(x, opset, axes, **attrs)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    graph = tc.from_onnx(model)
    np.testing.assert_allclose(run(graph, {"x": x}), want, rtol=1e-5, atol=1e-6)
    if X86:
        np.testing.assert_allclose(tc.compile(graph, target="x86_avx512")(x), want,
                                   rtol=1e-5, atol=1e-6)
