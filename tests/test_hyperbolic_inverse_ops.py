"""te's inverse hyperbolic functions (asinh, acosh, atanh) through the reference, the Kernel IR
interpreter, x86 native code (libm's asinhf / acoshf / atanhf lane by lane, JIT-compiled and in
an exported library), the C dialects and OpenCL, semantics, autodiff and the ONNX converters.

Small arguments matter: the textbook formulas cancel in float32 (``log(x + sqrt(x*x + 1))`` is
1e-3 off ``asinh(1e-5)`` relatively), libm's functions do not."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.c_dialect import CDialect
from tilecraft.codegen.c_expressions import CExprPrinter, Names
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.reference import run
from tilecraft.target import get_target
from tilecraft.target.semantics import Loop, Operand, build_program
from tilecraft.te.expr import INVERSE_HYPERBOLIC_UNARY

sys.path.insert(0, str(Path(__file__).parent))
from autodiff_checks import check_unary_derivative  # noqa: E402
from onnx_unary import unary_model  # noqa: E402

NumpyFunction = Callable[[np.ndarray], np.ndarray]

#: name -> (te function, numpy function)
FUNCTIONS: dict[str, tuple[Callable[[te.Expr], te.Expr], NumpyFunction]] = {
    "asinh": (te.asinh, np.arcsinh),
    "acosh": (te.acosh, np.arccosh),
    "atanh": (te.atanh, np.arctanh),
}
#: |x| from 1e-5 to 1e-3, both signs: where the log / sqrt formulas lose digits
SMALL = np.concatenate([np.geomspace(1e-5, 1e-3, 19), -np.geomspace(1e-5, 1e-3, 18)])
#: the relative error the tests allow native code (a few float32 ulp)
RTOL = 1e-6


def _domain_values(name: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` float32 arguments inside ``name``'s domain: small magnitudes and the edges
    (acosh from 1, atanh out to +-0.999) first, then random ones."""
    edges = {
        "asinh": np.concatenate([SMALL, [0.0, 1.0, -1.0, 50.0, -1e4, 3e37]]),
        "acosh": np.array([1.0, 1.0 + 1e-6, 1.0 + 1e-3, 1.5, 10.0, 1e4, 3e37]),
        "atanh": np.concatenate([SMALL, [0.0, 0.999, -0.999, 0.5, -0.9]]),
    }[name]
    random = {
        "asinh": lambda n: rng.uniform(-20.0, 20.0, n),
        "acosh": lambda n: 1.0 + rng.exponential(3.0, n),
        "atanh": lambda n: rng.uniform(-0.999, 0.999, n),
    }[name]
    values = np.concatenate([edges, random(max(0, count - edges.size))])[:count]
    return values.astype(np.float32)


def _elementwise_graph(shape: tuple[int, ...], names: list[str]) -> Graph:
    """One output ``Y_<name>`` per function of ``names``, each of its own input ``X_<name>``
    of ``shape`` (not plain ``asinh``: an exported kernel of that name would shadow libm's)."""
    outputs = []
    for name in names:
        function = FUNCTIONS[name][0]
        X = te.placeholder(shape, name=f"X_{name}")
        outputs.append(te.compute(shape, lambda *i, X=X, f=function: f(X[i]), name=f"Y_{name}"))
    return Graph.from_outputs(outputs)


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) / want.astype(np.float64) - 1.0)))


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_reference_and_interpreter_agree_with_numpy(name):
    _, numpy_f = FUNCTIONS[name]
    x = _domain_values(name, 37, np.random.default_rng(1))
    graph = _elementwise_graph((37,), [name])
    want = numpy_f(x)
    np.testing.assert_allclose(run(graph, {f"X_{name}": x}), want, rtol=RTOL, atol=0)
    interpreted = run_kernels(lower_graph(graph, LoweringOptions(vector_lanes=4)),
                              {f"X_{name}": x})
    np.testing.assert_allclose(interpreted[f"Y_{name}"], want, rtol=RTOL, atol=0)


#: a single element (scalar code), a prime count (vector loop and tail), rows with a tail each
SHAPES = [(1,), (37,), (5, 19)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "x".join(map(str, shape)))
def test_x86_agrees_with_numpy_on_awkward_shapes(shape):
    names = sorted(FUNCTIONS)
    graph = _elementwise_graph(shape, names)
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    size = int(np.prod(shape))
    inputs = {f"X_{name}": _domain_values(name, size, rng).reshape(shape) for name in names}
    got = tc.compile(graph, target="x86_avx512")(**inputs)
    for name, result in zip(names, got):
        np.testing.assert_allclose(result, FUNCTIONS[name][1](inputs[f"X_{name}"]),
                                   rtol=RTOL, atol=0, err_msg=name)


@pytest.mark.parametrize("name", ["asinh", "atanh"])
def test_x86_is_accurate_for_small_arguments(name):
    """Where the textbook formula is 1e-4 .. 1e-3 off in float32, libm stays within ~1e-6."""
    x = SMALL.astype(np.float32)
    graph = _elementwise_graph(x.shape, [name])
    got = tc.compile(graph, target="x86_avx512")(x)
    want = FUNCTIONS[name][1](x.astype(np.float64))
    assert _relative_error(got, want) < RTOL
    one = np.float32(1.0)
    formula = (np.log(x + np.sqrt(x * x + one)) if name == "asinh"
               else np.float32(0.5) * np.log((one + x) / (one - x)))
    assert _relative_error(formula, want) > 1e-4   # the inputs do tell the two apart


def test_domain_edges_and_nan_outside_match_numpy():
    """acosh: 0 at 1, nan below; atanh: +-inf at +-1, nan beyond; nan and inf propagate."""
    acosh_x = np.array([1.0, 0.5, 0.0, -1.0, 0.9999999, np.inf, np.nan], np.float32)
    atanh_x = np.array([2.0, -2.0, 1.0, -1.0, 0.999, -0.999, 0.9999999, np.nan], np.float32)
    asinh_x = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-30, -1e-38], np.float32)
    cases = [("acosh", acosh_x), ("atanh", atanh_x), ("asinh", asinh_x)]
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, x in cases:
            graph = _elementwise_graph(x.shape, [name])
            want = FUNCTIONS[name][1](x)
            np.testing.assert_array_equal(run(graph, {f"X_{name}": x}), want, err_msg=name)
            got = tc.compile(graph, target="x86_avx512")(x)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=0, err_msg=name)
            signed = ~np.isnan(want)   # zeros and infinities keep their sign; a nan's is moot
            np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]),
                                          err_msg=name)


def test_exported_library_calls_libm(tmp_path: Path):
    """The library carries its libm dependency: a C program linked without -lm runs it, and
    tilecraft loads it back; both match the JIT-compiled kernel."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    x = _domain_values("asinh", 37, np.random.default_rng(3))
    graph = _elementwise_graph(x.shape, ["asinh"])
    target = get_target("x86_avx512")
    exe = tc.compile(graph, target=target)
    target.export([(c.kernel, c.source) for c in exe.compiled], graph, tmp_path, "prog")
    x.tofile(tmp_path / "X.bin")
    (tmp_path / "main.c").write_text(_ASINH_MAIN)
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", "main", "main.c", "-L.",
                    "-lprog", "-Wl,-rpath,$ORIGIN"], cwd=tmp_path, check=True,
                   capture_output=True, text=True)   # no -lm: libprog.so needs libm itself
    result = subprocess.run(["./main"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, (result.returncode, result.stderr)
    from_c = np.fromfile(tmp_path / "Y.bin", dtype=np.float32)
    arrays = {"X_asinh": x, "Y_asinh": np.zeros_like(x)}
    target.load_shared_library(tmp_path / "libprog.so")["Y_asinh"](arrays)
    np.testing.assert_array_equal(from_c, exe(x))
    np.testing.assert_array_equal(arrays["Y_asinh"], exe(x))
    np.testing.assert_allclose(from_c, np.arcsinh(x), rtol=RTOL, atol=0)


_ASINH_MAIN = r"""
#include <stdio.h>
#include "prog.h"
int main(void) {
    static float X[37], Y[37];
    FILE *f = fopen("X.bin", "rb");
    if (!f || fread(X, 4, 37, f) != 37) { return 3; }
    fclose(f);
    if (prog_run(X, Y) != 0) { return 4; }
    f = fopen("Y.bin", "wb");
    fwrite(Y, 4, 37, f);
    fclose(f);
    return 0;
}
"""


def test_integer_operands_are_refused():
    with pytest.raises(tc.TilecraftError, match="asinh"):
        te.asinh(te.placeholder((3,), "int32", name="I")[0])


def test_c_dialect_and_opencl_names():
    assert {CDialect.math[op] for op in INVERSE_HYPERBOLIC_UNARY} == {"asinhf", "acoshf",
                                                                      "atanhf"}
    i = te.Var("i")
    printed = CExprPrinter("k", Names(), CDialect(), {i: (0, 9)}).expr(
        te.atanh(te.acosh(te.asinh(i.astype("float32")))))
    assert printed.startswith("atanhf(acoshf(asinhf(")


def test_opencl_source_calls_the_builtins_and_runs():
    """Mali's OpenCL C names OpenCL's built-ins (it runs on PoCL where installed, else on the
    Kernel IR interpreter)."""
    pytest.importorskip("tilecraft_mali")
    names = sorted(FUNCTIONS)
    graph = _elementwise_graph((37,), names)
    exe = tc.compile(graph, target=get_target("mali"))
    text = "\n".join(source.text for source in exe.sources.values())
    for name in names:
        assert f"{name}(" in text and f"{name}f(" not in text
    rng = np.random.default_rng(4)
    inputs = {f"X_{name}": _domain_values(name, 37, rng) for name in names}
    for name, got in zip(names, exe(**inputs)):
        np.testing.assert_allclose(got, FUNCTIONS[name][1](inputs[f"X_{name}"]), rtol=1e-5,
                                   atol=0, err_msg=name)


def test_semantics_parses_the_functions():
    for name in FUNCTIONS:
        program = build_program(f"C[i] = {name}(A[i])", [Loop("i", 4, te.AxisKind.SPATIAL)],
                                [Operand("A", "src", "float32", (4,)),
                                 Operand("C", "dst", "float32", (4,))])
        assert f"{name}(" in program.compute.statement()


#: points inside each domain, away from its edges, for the finite differences
GRADIENT_POINTS = {
    "asinh": np.linspace(-5.0, 5.0, 9),
    "acosh": np.linspace(1.5, 10.0, 9),
    "atanh": np.linspace(-0.9, 0.9, 9),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_derivatives_match_finite_differences(name):
    function, numpy_f = FUNCTIONS[name]
    check_unary_derivative(function, numpy_f, GRADIENT_POINTS[name])


#: ONNX op -> (numpy function, inputs inside its domain)
ONNX_OPS = {
    "Asinh": (np.arcsinh, lambda rng: rng.uniform(-10.0, 10.0, (5, 7))),
    "Acosh": (np.arccosh, lambda rng: 1.0 + rng.exponential(3.0, (5, 7))),
    "Atanh": (np.arctanh, lambda rng: rng.uniform(-0.99, 0.99, (5, 7))),
}


@pytest.mark.parametrize("op", sorted(ONNX_OPS))
def test_onnx_ops_through_the_backend(op):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    from tilecraft.onnx_backend import TilecraftBackend

    model = unary_model(op, [5, 7])
    numpy_f, make_inputs = ONNX_OPS[op]
    x = make_inputs(np.random.default_rng(5)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    (got,) = TilecraftBackend.run_model(model, [x], target="x86_avx512")
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=0)
    np.testing.assert_allclose(got, numpy_f(x), rtol=RTOL, atol=0)
