"""te's bitwise operators (and, or, xor, not, left and right shift) through the reference, the
Kernel IR interpreter, x86 native code, the C dialects (compiled with gcc under UBSan: no
undefined shift), the other code generators, index ranges, autodiff (refused) and the ONNX
converters (BitwiseAnd / Or / Xor / Not, BitShift).

The expected values come from :func:`_shift_oracle`, Python integers written from ONNX's rule
(an amount outside ``[0, bits)`` gives 0 to the left and the sign to the right), which
:func:`test_oracle_is_onnx_reference` checks against onnx's own reference evaluator."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.codegen.c_dialect import CDialect
from tilecraft.codegen.c_expressions import CExprPrinter, Names
from tilecraft.errors import AutodiffError, DTypeError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.lower import LoweringOptions, lower_graph
from tilecraft.reference import run
from tilecraft.target import get_target
from tilecraft.te.bounds import interval

DTYPES = ["int8", "uint8", "int32"]

BinaryFunction = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _shift_oracle(a: np.ndarray, amount: np.ndarray, left: bool) -> np.ndarray:
    """ONNX BitShift element by element in Python integers, wrapped to ``a``'s dtype."""
    info = np.iinfo(a.dtype)
    bits = info.bits
    a, amount = np.broadcast_arrays(a, amount)
    results = []
    for x, s in zip(a.ravel().tolist(), amount.ravel().tolist()):
        if 0 <= s < bits:
            value = (x << s if left else x >> s) & ((1 << bits) - 1)   # >>: arithmetic
            results.append(value - (1 << bits) if value > info.max else value)
        else:
            results.append(0 if left or x >= 0 else -1)
    return np.array(results, dtype=a.dtype).reshape(a.shape)


#: name -> (te function, expected values)
BINARY: dict[str, tuple[Callable[[te.Expr, te.Expr], te.Expr], BinaryFunction]] = {
    "and": (te.bitwise_and, np.bitwise_and),
    "or": (te.bitwise_or, np.bitwise_or),
    "xor": (te.bitwise_xor, np.bitwise_xor),
    "shl": (te.left_shift, lambda a, b: _shift_oracle(a, b, left=True)),
    "shr": (te.right_shift, lambda a, b: _shift_oracle(a, b, left=False)),
}


def _values(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random values over the whole range, the extremes, 0 and -1 first."""
    info = np.iinfo(dtype)
    edges = [info.min, info.max, 0, 1, -1 if info.min < 0 else 128, info.min + 1]
    size = int(np.prod(shape))
    random = rng.integers(info.min, info.max, size, endpoint=True)
    return np.concatenate([edges, random])[:size].astype(dtype).reshape(shape)


def _amounts(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Shift amounts: 0, 1, bits - 1, bits, more than bits and (signed) negative ones."""
    info = np.iinfo(dtype)
    bits = info.bits
    special = [0, 1, bits - 1, bits, bits + 1, 3, min(2 * bits, info.max), info.max]
    if info.min < 0:
        special += [-1, -bits, info.min, -(bits - 1)]
    size = int(np.prod(shape))
    chosen = np.concatenate([special, rng.choice(special, size)])[:size]
    return chosen.astype(dtype).reshape(shape)


def _bitwise_graph(dtype: str, a_shape: tuple[int, ...],
                   b_shape: tuple[int, ...]) -> tuple[Graph, list[str]]:
    """Outputs ``Y_<op>[idx] = op(A[idx], B[idx broadcast])`` for every binary op and
    ``Y_not = ~A``; numpy broadcasting of ``B`` against ``A``."""
    shape = np.broadcast_shapes(a_shape, b_shape)
    A = te.placeholder(a_shape, dtype, name="A")
    B = te.placeholder(b_shape, dtype, name="B")

    def load(tensor: te.Tensor, axes: tuple[te.Expr, ...]) -> te.Expr:
        own = axes[len(axes) - tensor.ndim:]
        return tensor[tuple(0 if n == 1 else axis for n, axis in zip(tensor.shape, own))]

    outputs, names = [], []
    for name, (function, _) in BINARY.items():
        outputs.append(te.compute(shape, lambda *i, f=function: f(load(A, i), load(B, i)),
                                  name=f"Y_{name}"))
        names.append(name)
    outputs.append(te.compute(shape, lambda *i: te.bitwise_not(load(A, i)), name="Y_not"))
    return Graph.from_outputs(outputs), names + ["not"]


def _expected(a: np.ndarray, b: np.ndarray, names: list[str]) -> list[np.ndarray]:
    return [np.invert(np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape)))
            if name == "not" else BINARY[name][1](a, b) for name in names]


#: (A's shape, B's shape): one element, a prime count, rows against a row, two broadcast sides
SHAPES = [((1,), (1,)), ((37,), (37,)), ((5, 19), (19,)), ((3, 1, 7), (4, 1))]
SHAPE_IDS = ["1", "37", "5x19-19", "3x1x7-4x1"]


def _inputs(dtype: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...],
            seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return _values(dtype, a_shape, rng), _amounts(dtype, b_shape, rng)


def test_oracle_is_onnx_reference():
    """The oracle is onnx's BitShift (opset 18 reference) on int8, uint8, int32 and int64."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    types = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
             "int32": TensorProto.INT32, "int64": TensorProto.INT64}
    rng = np.random.default_rng(0)
    for dtype, elem in types.items():
        a, b = _values(dtype, (300,), rng), _amounts(dtype, (300,), rng)
        for direction in ("LEFT", "RIGHT"):
            node = helper.make_node("BitShift", ["x", "y"], ["z"], direction=direction)
            graph = helper.make_graph(
                [node], "g", [helper.make_tensor_value_info(n, elem, [300]) for n in "xy"],
                [helper.make_tensor_value_info("z", elem, [300])])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
            want = ReferenceEvaluator(model).run(None, {"x": a, "y": b})[0]
            np.testing.assert_array_equal(_shift_oracle(a, b, direction == "LEFT"), want,
                                          err_msg=f"{dtype} {direction}")


@pytest.mark.parametrize("shapes", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reference_and_interpreter(dtype, shapes):
    a, b = _inputs(dtype, *shapes, seed=len(shapes[0]))
    graph, names = _bitwise_graph(dtype, *shapes)
    want = _expected(a, b, names)
    for name, got, expected in zip(names, run(graph, {"A": a, "B": b}), want):
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got, expected, err_msg=f"reference {name}")
    interpreted = run_kernels(lower_graph(graph, LoweringOptions(vector_lanes=4)),
                              {"A": a, "B": b})
    for name, expected in zip(names, want):
        np.testing.assert_array_equal(interpreted[f"Y_{name}"], expected,
                                      err_msg=f"interpreter {name}")


@pytest.mark.parametrize("shapes", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_x86_agrees_with_numpy(dtype, shapes):
    a, b = _inputs(dtype, *shapes, seed=7 + len(shapes[1]))
    graph, names = _bitwise_graph(dtype, *shapes)
    got = tc.compile(graph, target="x86_avx512")(A=a, B=b)
    for name, result, expected in zip(names, got, _expected(a, b, names)):
        assert result.dtype == expected.dtype, name
        np.testing.assert_array_equal(result, expected, err_msg=f"x86 {dtype} {name}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_x86_constant_shift_amounts(dtype):
    """Amounts known at compile time, in range and out of it (0, bits - 1, bits, -1)."""
    bits = np.iinfo(dtype).bits
    constants = [0, bits - 1, bits, 2 * bits] + ([-1, -bits] if dtype != "uint8" else [])
    A = te.placeholder((37,), dtype, name="A")
    outputs = []
    for k, amount in enumerate(constants):
        outputs.append(te.compute((37,), lambda i, s=amount: te.left_shift(A[i], s),
                                  name=f"L{k}"))
        outputs.append(te.compute((37,), lambda i, s=amount: te.right_shift(A[i], s),
                                  name=f"R{k}"))
    a = _values(dtype, (37,), np.random.default_rng(11))
    got = tc.compile(Graph.from_outputs(outputs), target="x86_avx512")(a)
    for k, amount in enumerate(constants):
        shift = np.array(amount, dtype)
        np.testing.assert_array_equal(got[2 * k], _shift_oracle(a, shift, True),
                                      err_msg=f"{dtype} << {amount}")
        np.testing.assert_array_equal(got[2 * k + 1], _shift_oracle(a, shift, False),
                                      err_msg=f"{dtype} >> {amount}")


def test_constant_folding_follows_the_same_rules():
    fold = [
        (te.left_shift(te.const(64, "int8"), te.const(1, "int8")), -128),
        (te.left_shift(te.const(3, "int32"), te.const(32, "int32")), 0),
        (te.right_shift(te.const(-16, "int8"), te.const(-3, "int8")), -1),
        (te.right_shift(te.const(200, "uint8"), te.const(9, "uint8")), 0),
        (te.right_shift(te.const(200, "uint8"), te.const(3, "uint8")), 25),
        (te.bitwise_not(te.const(5, "uint8")), 250),
        (te.bitwise_xor(te.const(-1, "int8"), te.const(15, "int8")), -16),
    ]
    for expr, value in fold:
        folded = simplify(expr)
        assert isinstance(folded, te.Const) and folded.value == value, str(expr)


def test_bitwise_indices_have_ranges_and_run_on_x86():
    """``i >> 1``, ``i & 31`` and ``i << 1`` as load indices: their ranges prove the loads in
    bounds, and x86 computes them (shifts in i32, not the i64 of addresses)."""
    i = te.reduce_axis(76, name="i")
    assert interval(te.right_shift(i, 1)) == (0, 37)
    assert interval(te.bitwise_and(i - 40, 31)) == (0, 31)
    assert interval(te.left_shift(i, 30)) is None   # may wrap
    A = te.placeholder((38,), name="A")
    outputs = [te.compute((38,), lambda i: A[te.bitwise_and(i, 31)], name="LOW"),
               te.compute((75,), lambda i: A[te.right_shift(i, 1)], name="REP"),
               te.compute((19,), lambda i: A[te.left_shift(i, 1)], name="EVEN")]
    a = np.arange(38, dtype=np.float32) * 1.5
    want = [a[np.arange(38) & 31], a[np.arange(75) >> 1], a[np.arange(19) << 1]]
    graph = Graph.from_outputs(outputs)
    for got, expected in zip(tc.compile(graph, target="x86_avx512")(a), want):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip(run(graph, {"A": a}), want):
        np.testing.assert_array_equal(got, expected)


def test_c_dialect_prints_the_operators():
    a, b = te.Var("a"), te.Var("b")
    printer = CExprPrinter("k", Names(), CDialect(), {})
    text = printer.expr(te.bitwise_xor(te.bitwise_or(te.bitwise_and(a, b), b),
                                       te.bitwise_not(a)))
    assert text == "(((a & b) | b) ^ (~a))"
    assert printer.expr(te.left_shift(a, b)) == \
        "(((unsigned)b < 32u) ? ((int)((unsigned)a << b)) : 0)"
    assert printer.expr(te.right_shift(a, b)) == "(a >> (((unsigned)b < 32u) ? b : 31))"


def _c_program(dtype: str, a: np.ndarray, b: np.ndarray) -> str:
    """A C program printing every op of te on every pair of ``a`` and ``b``, each result an
    expression of the C dialect."""
    x, y = te.Var("x", te.cast(dtype, 0).dtype), te.Var("y", te.cast(dtype, 0).dtype)
    printer = CExprPrinter("k", Names(), CDialect(), {})
    lines = [printer.expr(function(x, y)) for function, _ in BINARY.values()]
    lines.append(printer.expr(te.bitwise_not(x)))
    prints = "\n".join(f'            printf("%d\\n", (int)({line}));' for line in lines)
    return f"""#include <stdio.h>
static const int A[] = {{{", ".join(map(str, a.tolist()))}}};
static const int B[] = {{{", ".join(map(str, b.tolist()))}}};
int main(void) {{
    for (unsigned i = 0; i < sizeof A / sizeof A[0]; ++i) {{
        for (unsigned j = 0; j < sizeof B / sizeof B[0]; ++j) {{
            int x = A[i], y = B[j];
{prints}
        }}
    }}
    return 0;
}}
"""


@pytest.mark.parametrize("dtype", DTYPES)
def test_c_expressions_are_defined_and_right(dtype, tmp_path: Path):
    """gcc with UBSan (no recovery): C's undefined shifts (negative values, amounts of the
    width or more) never happen, and the values are the oracle's."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    rng = np.random.default_rng(5)
    a = _values(dtype, (24,), rng)
    b = np.unique(np.concatenate([_amounts(dtype, (16,), rng), _values(dtype, (8,), rng)]))
    b = b.astype(dtype)
    (tmp_path / "bits.c").write_text(_c_program(dtype, a, b))
    subprocess.run(["gcc", "-std=c11", "-O1", "-fsanitize=undefined",
                    "-fno-sanitize-recover=all", "-o", "bits", "bits.c"], cwd=tmp_path,
                   check=True, capture_output=True, text=True)
    result = subprocess.run(["./bits"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and not result.stderr, result.stderr
    got = np.array(result.stdout.split(), dtype=np.int64).reshape(a.size, b.size, -1)
    pairs_a, pairs_b = np.meshgrid(a, b, indexing="ij")
    expected = [function(pairs_a, pairs_b) for _, function in BINARY.values()]
    expected.append(np.invert(pairs_a))
    for k, name in enumerate([*BINARY, "not"]):
        np.testing.assert_array_equal(got[..., k], expected[k].astype(np.int64),
                                      err_msg=f"C {dtype} {name}")


@pytest.mark.parametrize("target", ["mali", "nvidia_tc", "fpga_hls", "ascend_npu"])
def test_other_code_generators(target):
    """OpenCL (PoCL where installed), CUDA, HLS C++ and AscendC: their source has the
    operators and runs (or emulates) to the oracle's values."""
    try:
        chosen = get_target(target)
    except tc.TilecraftError:
        pytest.skip(f"the {target} plugin is not installed")
    shapes = ((5, 19), (19,))
    for dtype in DTYPES:
        a, b = _inputs(dtype, *shapes, seed=3)
        graph, names = _bitwise_graph(dtype, *shapes)
        exe = tc.compile(graph, target=chosen)
        text = "\n".join(source.text for source in exe.sources.values())
        assert "<<" in text and ">>" in text and "~" in text and "^" in text
        for name, got, expected in zip(names, exe(A=a, B=b), _expected(a, b, names)):
            np.testing.assert_array_equal(got, expected, err_msg=f"{target} {dtype} {name}")


def test_float_and_bool_operands_are_refused():
    X = te.placeholder((3,), "float32", name="X")
    for function, _ in BINARY.values():
        with pytest.raises(DTypeError, match="integer operands"):
            function(X[0], X[1])
    with pytest.raises(DTypeError, match="integer operand"):
        te.bitwise_not(X[0])
    with pytest.raises(DTypeError, match="integer operand"):
        te.bitwise_not(X[0] < X[1])
    with pytest.raises(DTypeError, match="conditions"):
        te.bitwise_and(X[0] < X[1], X[1] < X[2])


def test_autodiff_refuses_bitwise_operations():
    X = te.placeholder((5,), name="X")
    Y = te.compute((5,), lambda i: te.bitwise_and(X[i].astype("int32"), 3).astype("float32")
                   * X[i], name="Y")
    from tilecraft.autodiff import grad

    with pytest.raises(AutodiffError, match="bitwise operation '&'.*not differentiable"):
        grad(Y, [X])


# ONNX ----------------------------------------------------------------------------------------
def _onnx_model(op: str, elem: int, shapes: list[list[int]], out_shape: list[int],
                initializers: list | None = None, **attrs: object):
    from onnx import helper

    names = ["x", "y"][:len(shapes)]
    node = helper.make_node(op, names, ["z"], **attrs)
    inputs = [helper.make_tensor_value_info(n, elem, s) for n, s in zip(names, shapes)
              if not any(init.name == n for init in initializers or [])]
    graph = helper.make_graph([node], "g", inputs,
                              [helper.make_tensor_value_info("z", elem, out_shape)],
                              initializer=initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


ONNX_TYPES = {"int8": 3, "uint8": 2, "int32": 6, "int64": 7}   # TensorProto element types


@pytest.mark.parametrize("dtype", sorted(ONNX_TYPES))
def test_onnx_operators_through_the_backend(dtype):
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    from tilecraft.onnx_backend import TilecraftBackend

    rng = np.random.default_rng(9)
    narrow = "int32" if dtype == "int64" else dtype   # int64 models run in int32
    x = _values(narrow, (3, 1, 7), rng).astype(dtype)
    y = _amounts(narrow, (4, 1), rng).astype(dtype)
    cases = [("BitwiseAnd", {}), ("BitwiseOr", {}), ("BitwiseXor", {}),
             ("BitShift", {"direction": "LEFT"}), ("BitShift", {"direction": "RIGHT"})]
    for op, attrs in cases:
        if dtype == "int64" and attrs.get("direction") == "LEFT":
            continue   # int64 results beyond int32's range: see test_onnx_int64_left_shift
        model = _onnx_model(op, ONNX_TYPES[dtype], [[3, 1, 7], [4, 1]], [3, 4, 7], **attrs)
        want = ReferenceEvaluator(model).run(None, {"x": x, "y": y})[0]
        (got,) = TilecraftBackend.run_model(model, [x, y], target="x86_avx512")
        assert got.dtype == want.dtype, op
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {attrs} {dtype}")
    model = _onnx_model("BitwiseNot", ONNX_TYPES[dtype], [[3, 1, 7]], [3, 1, 7])
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    (got,) = TilecraftBackend.run_model(model, [x], target="x86_avx512")
    np.testing.assert_array_equal(got, want, err_msg=f"BitwiseNot {dtype}")


def test_onnx_int64_left_shift_is_exact_within_int32():
    pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    from tilecraft.onnx_backend import TilecraftBackend

    x = np.array([1, -3, 1000, -(1 << 20), 7, 5], np.int64)
    y = np.array([0, 5, 20, 10, 64, -1], np.int64)   # 64 and -1: out of range, 0
    model = _onnx_model("BitShift", ONNX_TYPES["int64"], [[6], [6]], [6], direction="LEFT")
    want = ReferenceEvaluator(model).run(None, {"x": x, "y": y})[0]
    (got,) = TilecraftBackend.run_model(model, [x, y], target="x86_avx512")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_onnx_bitshift_by_an_initializer(direction):
    """A scalar amount folds into the expression; a per-column one is a constant tensor."""
    pytest.importorskip("onnx")
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    from tilecraft.onnx_backend import TilecraftBackend

    x = _values("int8", (5, 11), np.random.default_rng(2))
    for amount in (np.array(3, np.int8), np.arange(-2, 9, dtype=np.int8)):
        init = numpy_helper.from_array(amount, "y")
        model = _onnx_model("BitShift", ONNX_TYPES["int8"], [[5, 11], list(amount.shape)],
                            [5, 11], initializers=[init], direction=direction)
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
        (got,) = TilecraftBackend.run_model(model, [x], target="x86_avx512")
        np.testing.assert_array_equal(got, want, err_msg=f"{direction} by {amount}")


def test_onnx_refusals_name_the_reason():
    pytest.importorskip("onnx")
    from tilecraft.onnx import from_onnx

    model = _onnx_model("BitShift", ONNX_TYPES["int32"], [[4], [4]], [4], direction="UP")
    with pytest.raises(tc.TilecraftError, match="direction 'UP'.*'LEFT' or 'RIGHT'"):
        from_onnx(model)
    model = _onnx_model("BitwiseAnd", 1, [[4], [4]], [4])   # float inputs: not in ONNX's T
    with pytest.raises(tc.TilecraftError, match="BitwiseAnd needs integer inputs"):
        from_onnx(model)
