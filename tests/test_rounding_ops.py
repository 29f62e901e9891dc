"""te's floor, ceil and round (halves to even) through every layer that sees a unary op: the
reference, the Kernel IR interpreter, x86 native code, the C dialects, bounds, semantics,
autodiff and the ONNX converters."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.autodiff import grad
from tilecraft.codegen.c_dialect import CDialect
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.reference import run
from tilecraft.target.semantics import Loop, Operand, build_program
from tilecraft.te.bounds import interval
from tilecraft.te.expr import UnaryOp

sys.path.insert(0, str(Path(__file__).parent))
from onnx_unary import unary_model  # noqa: E402

FUNCTIONS = [("F", te.floor, np.floor), ("C", te.ceil, np.ceil), ("R", te.round_even, np.rint)]
#: halves of both signs (round to even), signed zero, the largest exact integers, inf, nan
VALUES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 3.7, -3.7, 0.49999997, 8388607.5,
                   1e8, -1e8, np.inf, -np.inf, np.nan, 1e-40] + list(np.linspace(-5, 5, 24)),
                  np.float32)


def _graph() -> tuple[Graph, te.Tensor]:
    X = te.placeholder((VALUES.size,), name="X")
    return Graph.from_outputs([te.compute(X.shape, lambda i, f=f: f(X[i]), name=name)
                               for name, f, _ in FUNCTIONS]), X


def test_reference_interpreter_and_x86_agree_with_numpy():
    graph, _ = _graph()
    kernels = lower_graph(graph, LoweringOptions(vector_lanes=4))
    interpreted = run_kernels(kernels, {"X": VALUES})
    native = tc.compile(graph, target="x86_avx512")(VALUES)
    for (name, _, numpy_f), ref, got in zip(FUNCTIONS, run(graph, {"X": VALUES}), native):
        np.testing.assert_array_equal(ref, numpy_f(VALUES))
        np.testing.assert_array_equal(interpreted[name], numpy_f(VALUES))
        np.testing.assert_array_equal(got, numpy_f(VALUES))


def test_integer_operands_are_refused():
    with pytest.raises(tc.TilecraftError, match="floor"):
        te.floor(te.placeholder((3,), "int32", name="I")[0])


def test_c_dialects_name_the_c_functions():
    assert [CDialect.math[op] for op in (UnaryOp.FLOOR, UnaryOp.CEIL, UnaryOp.ROUND)] == \
        ["floorf", "ceilf", "rintf"]


def test_bounds_semantics_and_derivative():
    i = te.IterVar("i", 10, te.AxisKind.SPATIAL)
    assert interval(te.floor(i.astype("float32"))) == (0, 9)
    assert interval(te.ceil(-i.astype("float32"))) == (-9, 0)
    program = build_program("C[i] = round(A[i])", [Loop("i", 4, te.AxisKind.SPATIAL)],
                            [Operand("A", "src", "float32", (4,)),
                             Operand("C", "dst", "float32", (4,))])
    assert "round" in program.compute.statement()
    X = te.placeholder((5,), name="X")
    y = te.compute((5,), lambda k: te.floor(X[k]) * X[k], name="Y")
    (dx,) = grad(y, [X])
    x = np.array([0.5, 1.5, -2.25, 3.0, 7.9], np.float32)
    g = np.ones(5, np.float32)
    got = run(Graph.from_outputs([dx]), {"X": x, "grad_Y": g})
    np.testing.assert_allclose(got[0] if isinstance(got, list) else got, np.floor(x))


@pytest.mark.parametrize("op", ["Floor", "Ceil", "Round"])
def test_onnx_converters_match_the_reference_evaluator(op):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    model = unary_model(op, [7, 13])
    x = (np.random.default_rng(7).standard_normal((7, 13)) * 4).astype(np.float32)
    x.flat[:6] = [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = tc.compile(tc.from_onnx(model), target="x86_avx512")(x)
    np.testing.assert_array_equal(got, expected)
