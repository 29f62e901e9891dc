"""te's trigonometric and hyperbolic functions (sin, cos, tan, asin, acos, atan, sinh, cosh)
through the reference, the Kernel IR interpreter, x86 native code (libm, lane by lane), the C
dialects, autodiff and the ONNX converters."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.c_dialect import CDialect
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.reference import run
from tilecraft.te.expr import TRIGONOMETRIC_UNARY

sys.path.insert(0, str(Path(__file__).parent))
from autodiff_checks import check_unary_derivative  # noqa: E402
from onnx_unary import unary_model  # noqa: E402

#: (te function, numpy function, inputs inside its domain: 37 values, a prime count)
FUNCTIONS = {
    "sin": (te.sin, np.sin, np.linspace(-40.0, 40.0, 37)),
    "cos": (te.cos, np.cos, np.linspace(-40.0, 40.0, 37)),
    "tan": (te.tan, np.tan, np.linspace(-1.5, 1.5, 37)),
    "asin": (te.asin, np.arcsin, np.linspace(-1.0, 1.0, 37)),
    "acos": (te.acos, np.arccos, np.linspace(-1.0, 1.0, 37)),
    "atan": (te.atan, np.arctan, np.linspace(-1e4, 1e4, 37)),
    "sinh": (te.sinh, np.sinh, np.linspace(-20.0, 20.0, 37)),
    "cosh": (te.cosh, np.cosh, np.linspace(-20.0, 20.0, 37)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_reference_interpreter_and_x86_agree_with_numpy(name):
    function, numpy_f, values = FUNCTIONS[name]
    x = values.astype(np.float32)
    X = te.placeholder((x.size,), name="X")
    graph = Graph.from_outputs([te.compute(X.shape, lambda i: function(X[i]), name="Y")])
    want = numpy_f(x)
    np.testing.assert_allclose(run(graph, {"X": x}), want, rtol=1e-6, atol=1e-7)
    interpreted = run_kernels(lower_graph(graph, LoweringOptions(vector_lanes=4)), {"X": x})
    np.testing.assert_allclose(interpreted["Y"], want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tc.compile(graph, target="x86_avx512")(x), want,
                               rtol=2e-6, atol=1e-6)


def test_outside_the_domain_is_nan():
    X = te.placeholder((3,), name="X")
    graph = Graph.from_outputs([te.compute((3,), lambda i: te.asin(X[i]), name="A"),
                                te.compute((3,), lambda i: te.acos(X[i]), name="B")])
    x = np.array([1.5, -2.0, 0.5], np.float32)
    for got in tc.compile(graph, target="x86_avx512")(x):
        assert np.isnan(got[:2]).all() and np.isfinite(got[2])


def test_c_dialect_names():
    assert {CDialect.math[op] for op in TRIGONOMETRIC_UNARY} == {
        "sinf", "cosf", "tanf", "asinf", "acosf", "atanf", "sinhf", "coshf"}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_derivatives_match_finite_differences(name):
    function, numpy_f, values = FUNCTIONS[name]
    x = np.linspace(values.min(), values.max(), 11)[1:-1] * 0.9   # inside the domain
    check_unary_derivative(function, numpy_f, x)


@pytest.mark.parametrize("op", ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh"])
def test_onnx_converters_match_the_reference_evaluator(op):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    model = unary_model(op, [5, 7])
    x = np.random.default_rng(5).uniform(-0.99, 0.99, (5, 7)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = tc.compile(tc.from_onnx(model), target="x86_avx512")(x)
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7)
