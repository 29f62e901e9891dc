"""Semantics of the reference interpreter: dtype rounding, integer wrap-around, floor division,
select clamping, every unary op, reductions, shared producers, input validation."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.errors import ExpressionError, GraphError, InputError
from tilecraft.reference import evaluator as evaluator_module
from tilecraft.reference import interpreter as interpreter_module

BF16 = ml_dtypes.bfloat16


def run1(fcompute, shape, *placeholders_and_arrays, name="out"):
    """Build one compute over the given (placeholder, array) pairs and run it."""
    tensors = [p for p, _ in placeholders_and_arrays]
    out = te.compute(shape, fcompute(*tensors), name=name)
    return tc.reference.run(out, **{p.name: a for p, a in placeholders_and_arrays})


# --- half precision: widen, compute in float32, round on store -------------------------------
@pytest.mark.parametrize("dtype, tiny", [("float16", 2.0 ** -11), ("bfloat16", 2.0 ** -8)])
def test_half_arithmetic_is_float32_and_rounds_once_on_store(dtype: str, tiny: float) -> None:
    np_dtype = DType(dtype).numpy
    A = te.placeholder((1,), dtype, name="A")
    B = te.placeholder((1,), dtype, name="B")
    a = np.array([1.0], np_dtype)
    b = np.array([tiny], np_dtype)
    # (1 + tiny) is not representable in the half type; in float32 it is, so - tiny gives 1.
    once = te.compute((1,), lambda i: (A[i] + B[i]) - B[i], name="once")
    assert tc.reference.run(once, A=a, B=b).tolist() == [1.0]
    # an explicit Cast to the half type rounds in the middle (ties to even: 1.0), so 1 - tiny
    twice = te.compute((1,), lambda i: te.Cast(DType(dtype), A[i] + B[i]) - B[i], name="twice")
    result = tc.reference.run(twice, A=a, B=b)
    assert result.dtype == np_dtype
    assert result.tolist() == [1.0 - tiny]


def test_store_rounds_float32_to_half_types() -> None:
    X = te.placeholder((5,), name="X")
    x = np.array([0.1, 1 / 3, 65519.0, 70000.0, -2.5e-8], np.float32)
    for dtype in ("float16", "bfloat16"):
        out = te.compute((5,), lambda i, dtype=dtype: X[i].astype(dtype), name="out")
        got = tc.reference.run(out, X=x)
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got, x.astype(DType(dtype).numpy))


def test_half_reduction_accumulates_in_float32() -> None:
    A = te.placeholder((4096,), "float16", name="A")
    r = te.reduce_axis(4096, "r")
    total = te.compute((1,), lambda i: te.sum(A[r], axis=r), name="total")
    # accumulating in float16 would stall at 2048
    assert tc.reference.run(total, A=np.ones(4096, np.float16)).tolist() == [4096.0]
    M = te.placeholder((64, 64), "bfloat16", name="M")
    k = te.reduce_axis(64, "k")
    prod = te.compute((64, 64), lambda i, j: te.sum(M[i, k] * M[k, j], axis=k), name="prod")
    m = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype(BF16)
    exact = m.astype(np.float64) @ m.astype(np.float64)
    got = tc.reference.run(prod, M=m)
    assert got.dtype == BF16
    np.testing.assert_array_equal(got, exact.astype(np.float32).astype(BF16))


def test_half_constants_are_values_of_their_type() -> None:
    A = te.placeholder((2,), name="A")
    out = te.compute((2,), lambda i: A[i] + te.const(0.1, "float16").astype("float32"),
                     name="out")
    got = tc.reference.run(out, A=np.zeros(2, np.float32))
    assert got.tolist() == [float(np.float16(0.1))] * 2


# --- integers --------------------------------------------------------------------------------
def test_integer_arithmetic_wraps_in_its_dtype() -> None:
    A = te.placeholder((4,), "int8", name="A")
    B = te.placeholder((4,), "int8", name="B")
    a = np.array([127, -128, 100, -1], np.int8)
    b = np.array([1, -1, 100, 127], np.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        add = run1(lambda A, B: lambda i: A[i] + B[i], (4,), (A, a), (B, b))
        mul = run1(lambda A, B: lambda i: A[i] * B[i], (4,), (A, a), (B, b))
        neg = run1(lambda A, B: lambda i: -A[i] + B[i] * 0, (4,), (A, a), (B, b))
        absolute = run1(lambda A, B: lambda i: abs(A[i]) + B[i] * 0, (4,), (A, a), (B, b))
    assert add.dtype == np.int8
    assert add.tolist() == [-128, 127, -56, 126]
    assert mul.tolist() == [127, -128, 16, -127]
    assert neg.tolist() == [-127, -128, -100, 1]
    assert absolute.tolist() == [127, -128, 100, 1]
    U = te.placeholder((2,), "uint8", name="U")
    u = np.array([3, 250], np.uint8)
    assert run1(lambda U: lambda i: U[i] - 5, (2,), (U, u)).tolist() == [254, 245]
    assert run1(lambda U: lambda i: U[i] + 10, (2,), (U, u)).tolist() == [13, 4]
    Big = te.placeholder((1,), "int32", name="Big")
    big = np.array([2 ** 31 - 1], np.int32)
    assert run1(lambda Big: lambda i: Big[i] + 1, (1,), (Big, big)).tolist() == [-(2 ** 31)]


def test_floor_division_and_modulo_follow_python() -> None:
    A = te.placeholder((6,), "int32", name="A")
    B = te.placeholder((6,), "int32", name="B")
    a = np.array([-7, 7, -7, 7, 0, -1], np.int32)
    b = np.array([2, -2, -2, 2, 3, 5], np.int32)
    quotient = run1(lambda A, B: lambda i: A[i] // B[i], (6,), (A, a), (B, b))
    remainder = run1(lambda A, B: lambda i: A[i] % B[i], (6,), (A, a), (B, b))
    assert quotient.tolist() == [x // y for x, y in zip(a.tolist(), b.tolist())]
    assert remainder.tolist() == [x % y for x, y in zip(a.tolist(), b.tolist())]
    # index arithmetic on iteration variables floors as well
    idx = te.compute((5,), lambda i: (i - 2) // 2 * 10 + (i - 2) % 3, name="idx")
    assert tc.reference.run(idx).tolist() == [(i - 2) // 2 * 10 + (i - 2) % 3 for i in range(5)]


def test_guarded_integer_division_by_zero_is_silent() -> None:
    A = te.placeholder((3,), "int32", name="A")
    B = te.placeholder((3,), "int32", name="B")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run1(lambda A, B: lambda i: te.select(te.ne(B[i], 0), A[i] // B[i], -1), (3,),
                   (A, np.array([7, 8, 9], np.int32)), (B, np.array([2, 0, -3], np.int32)))
    assert got.tolist() == [3, -1, -3]


# --- select and clamping ---------------------------------------------------------------------
def test_select_clamps_loads_in_the_branch_not_taken() -> None:
    A = te.placeholder((4,), name="A")
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    tail = te.compute((7,), lambda i: te.select(i < 4, A[i], -1.0), name="tail")
    head = te.compute((7,), lambda i: te.select(i >= 3, A[i - 3], -1.0), name="head")
    strided = te.compute(
        (9,), lambda i: te.select(te.all_of(i >= 1, te.eq((i - 1) % 2, 0), i < 8),
                                  A[te.maximum(te.minimum((i - 1) // 2, 3), 0)], 0.0),
        name="strided")
    t, h, s = tc.reference.run([tail, head, strided], A=a)
    assert t.tolist() == [1, 2, 3, 4, -1, -1, -1]
    assert h.tolist() == [-1, -1, -1, 1, 2, 3, 4]
    assert s.tolist() == [0, 1, 0, 2, 0, 3, 0, 4, 0]


def test_comparisons_and_logic() -> None:
    A = te.placeholder((5,), name="A")
    a = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)
    ops = {
        "lt": lambda x: x < 0.0, "le": lambda x: x <= 0.0, "gt": lambda x: x > 0.0,
        "ge": lambda x: x >= 0.0, "eq": lambda x: te.eq(x, 0.0), "ne": lambda x: te.ne(x, 0.0),
        "and": lambda x: (x > -2.0) & (x < 2.0), "or": lambda x: (x < -1.0) | (x > 1.0),
        "not": lambda x: ~(x > 0.0),
    }
    expected = {
        "lt": a < 0, "le": a <= 0, "gt": a > 0, "ge": a >= 0, "eq": a == 0, "ne": a != 0,
        "and": (a > -2) & (a < 2), "or": (a < -1) | (a > 1), "not": ~(a > 0),
    }
    outs = [te.compute((5,), lambda i, f=f: te.select(f(A[i]), 1, 0), name=n)
            for n, f in ops.items()]
    for name, got in zip(ops, tc.reference.run(outs, A=a)):
        assert got.tolist() == expected[name].astype(int).tolist(), name


# --- elementwise functions -------------------------------------------------------------------
UNARY_CASES = {
    "neg": (te.neg, np.negative, (-3, 3)),
    "abs": (te.abs, np.abs, (-3, 3)),
    "exp": (te.exp, np.exp, (-20, 20)),
    "log": (te.log, np.log, (1e-3, 50)),
    "sqrt": (te.sqrt, np.sqrt, (0, 50)),
    "tanh": (te.tanh, np.tanh, (-6, 6)),
    "erf": (te.erf, np.vectorize(math.erf), (-5, 5)),
    "sigmoid": (te.sigmoid, lambda v: 1 / (1 + np.exp(-v)), (-30, 30)),
}


@pytest.mark.parametrize("op", sorted(UNARY_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_every_unary_op(op: str, dtype: str) -> None:
    fn, reference, (low, high) = UNARY_CASES[op]
    x = np.random.default_rng(1).uniform(low, high, 301).astype(DType(dtype).numpy)
    X = te.placeholder((301,), dtype, name="X")
    got = run1(lambda X: lambda i: fn(X[i]), (301,), (X, x))
    with np.errstate(over="ignore"):
        expected = reference(x.astype(np.float64)).astype(np.float32).astype(x.dtype)
    assert got.dtype == x.dtype
    tol = 2e-6 if dtype == "float32" else 1e-3
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol,
                               atol=tol)


def test_integer_unary_ops() -> None:
    X = te.placeholder((4,), "int32", name="X")
    x = np.array([-5, 0, 7, -(2 ** 31)], np.int32)
    assert run1(lambda X: lambda i: -X[i], (4,), (X, x)).tolist() == [5, 0, -7, -(2 ** 31)]
    assert run1(lambda X: lambda i: abs(X[i]), (4,), (X, x)).tolist() == [5, 0, 7, -(2 ** 31)]


def test_erf_matches_math_erf_on_many_points() -> None:
    points = np.concatenate([np.linspace(-7, 7, 20001), np.logspace(-30, 0.9, 2000),
                             -np.logspace(-300, 0.7, 500), [0.0, 2.5, np.nextafter(2.5, 0), 6.0,
                                                            np.inf, -np.inf]])
    expected = np.array([math.erf(v) for v in points])
    got = tc.reference.erf(points)
    nonzero = expected != 0
    relative = np.abs(got[nonzero] - expected[nonzero]) / np.abs(expected[nonzero])
    assert relative.max() < 1e-13
    assert np.isnan(tc.reference.erf(np.array([np.nan])))[0]
    assert got[points == 0.0].tolist() == [0.0] * int((points == 0.0).sum())


def test_binary_max_min_div() -> None:
    A = te.placeholder((4,), name="A")
    B = te.placeholder((4,), name="B")
    a = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    b = np.array([0.5, 4.0, -1.0, 0.5], np.float32)
    mx, mn, dv = (run1(lambda A, B, f=f: lambda i: f(A[i], B[i]), (4,), (A, a), (B, b))
                  for f in (te.maximum, te.minimum, lambda x, y: x / y))
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))
    np.testing.assert_array_equal(dv, a / b)


# --- casts -----------------------------------------------------------------------------------
def test_casts() -> None:
    X = te.placeholder((7,), name="X")
    x = np.array([1e10, -1e10, 2.9, -2.9, np.nan, 127.5, -0.5], np.float32)
    to_i8 = run1(lambda X: lambda i: X[i].astype("int8"), (7,), (X, x))
    assert to_i8.tolist() == [127, -128, 2, -2, 0, 127, 0]
    to_u8 = run1(lambda X: lambda i: X[i].astype("uint8"), (7,), (X, x))
    assert to_u8.tolist() == [255, 0, 2, 0, 0, 127, 0]
    I = te.placeholder((3,), "int32", name="I")
    i32 = np.array([300, -1, 16777217], np.int32)
    assert run1(lambda I: lambda i: I[i].astype("int8"), (3,), (I, i32)).tolist() == [44, -1, 1]
    as_float = run1(lambda I: lambda i: I[i].astype("float32"), (3,), (I, i32))
    assert as_float.tolist() == [300.0, -1.0, 16777216.0]
    flags = run1(lambda I: lambda i: te.Cast(DType.INT32, I[i] > 0), (3,), (I, i32))
    assert flags.tolist() == [1, 0, 1]


# --- reductions ------------------------------------------------------------------------------
@pytest.fixture
def cube() -> tuple[te.Tensor, np.ndarray]:
    return te.placeholder((3, 4, 5), name="C"), np.random.default_rng(2).normal(
        size=(3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_reductions_over_axes(cube, op: str, axes: tuple[int, ...]) -> None:
    C, c = cube
    kept = [d for d in range(3) if d not in axes]
    reduce_axes = {d: te.reduce_axis(C.shape[d], f"r{d}") for d in axes}
    reducer = {"sum": te.sum, "max": te.max, "min": te.min}[op]

    def body(*idx):
        out_axes = dict(zip(kept, idx))
        source = tuple(reduce_axes.get(d, out_axes.get(d)) for d in range(3))
        return reducer(C[source] * 2.0, axis=list(reduce_axes.values()))

    shape = tuple(C.shape[d] for d in kept) or (1,)
    out = te.compute(shape, body if kept else (lambda i: body()), name="out")
    expected = {"sum": np.sum, "max": np.max, "min": np.min}[op](c.astype(np.float64) * 2,
                                                                  axis=axes)
    np.testing.assert_allclose(tc.reference.run(out, C=c), np.reshape(expected, shape),
                               rtol=1e-6, atol=1e-6)


def test_integer_reductions_wrap_and_use_integer_extremes() -> None:
    A = te.placeholder((4, 3), "int8", name="A")
    a = np.array([[100, -128, 5], [100, -128, 6], [100, 1, 7], [-1, 1, 8]], np.int8)
    r = te.reduce_axis(4, "r")
    total = te.compute((3,), lambda j: te.sum(A[r, j], axis=r), name="total")
    widened = te.compute((3,), lambda j: te.sum(A[r, j].astype("int32"), axis=r), name="wide")
    top = te.compute((3,), lambda j: te.max(A[r, j], axis=r), name="top")
    bottom = te.compute((3,), lambda j: te.min(A[r, j], axis=r), name="bottom")
    s, w, hi, lo = tc.reference.run([total, widened, top, bottom], A=a)
    assert s.dtype == np.int8 and s.tolist() == [43, 2, 26]  # 299 and -254 wrap in int8
    assert w.dtype == np.int32 and w.tolist() == [299, -254, 26]
    assert hi.tolist() == [100, 1, 8] and lo.tolist() == [-1, -128, 5]


def test_sum_of_body_independent_of_a_reduce_axis() -> None:
    A = te.placeholder((3,), name="A")
    r = te.reduce_axis(7, "r")
    s = te.reduce_axis(2, "s")
    out = te.compute((3, 2), lambda i, j: te.sum(A[i] * 0.5, axis=[r, s]), name="out")
    got = tc.reference.run(out, A=np.array([1.0, 2.0, -4.0], np.float32))
    np.testing.assert_array_equal(got, np.array([[7.0] * 2, [14.0] * 2, [-28.0] * 2]))
    const = te.compute((2,), lambda i: te.sum(te.const(1.5), axis=r), name="const")
    np.testing.assert_array_equal(tc.reference.run(const), [10.5, 10.5])


def test_einsum_path_handles_casts_and_mixed_integer_operands() -> None:
    A = te.placeholder((5, 64), "uint8", name="A")
    B = te.placeholder((64, 3), "int8", name="B")
    k = te.reduce_axis(64, "k")
    out = te.compute((5, 3), lambda i, j: te.sum(A[i, k].astype("int32")
                                                 * B[k, j].astype("int32"), axis=k), name="out")
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (5, 64)).astype(np.uint8)
    b = rng.integers(-128, 128, (64, 3)).astype(np.int8)
    got = tc.reference.run(out, A=a, B=b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_chunked_evaluation_matches_unchunked(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    A = te.placeholder((9, 13), name="A")
    B = te.placeholder((13, 11), name="B")
    k = te.reduce_axis(13, "k")
    outs = [
        te.compute((9, 11), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="mm"),
        te.compute((9, 11), lambda i, j: te.max(A[i, k] * B[k, j], axis=k), name="mx"),
        te.compute((9, 11), lambda i, j: te.min(A[i, k] + B[k, j], axis=k), name="mn"),
        te.compute((9, 11), lambda i, j: te.sum(te.exp(A[i, k] - B[k, j]), axis=k), name="ex"),
        te.compute((9, 11), lambda i, j: A[i, j] * B[j, i % 11], name="ew"),
    ]
    a = rng.normal(size=(9, 13)).astype(np.float32)
    b = rng.normal(size=(13, 11)).astype(np.float32)
    whole = tc.reference.run(outs, A=a, B=b)
    for limit in (40, 7, 1):  # 1 forces chunks of one element along every axis
        monkeypatch.setattr(evaluator_module, "CHUNK_ELEMENTS", limit)
        chunked = tc.reference.run(outs, A=a, B=b)
        for x, y in zip(whole, chunked):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def test_affine_loads_as_views_and_general_gathers() -> None:
    M = te.placeholder((5, 7), name="M")
    m = np.arange(35, dtype=np.float32).reshape(5, 7)
    flipped = te.compute((5, 7), lambda i, j: M[4 - i, 6 - j], name="flipped")
    diagonal = te.compute((5,), lambda i: M[i, i], name="diagonal")
    mixed = te.compute((3, 2), lambda i, j: M[i + j, 2 * i + j], name="mixed")
    const_row = te.compute((7,), lambda j: M[3, j], name="const_row")
    wrapped = te.compute((35,), lambda i: M[i // 7, i % 7], name="wrapped")
    sheared = te.compute((5, 3), lambda i, j: M[(i + j) % 5, (i * 3 + j) // 3], name="sheared")
    outs = tc.reference.run([flipped, diagonal, mixed, const_row, wrapped, sheared], M=m)
    np.testing.assert_array_equal(outs[0], m[::-1, ::-1])
    np.testing.assert_array_equal(outs[1], np.diag(m)[:5])
    np.testing.assert_array_equal(outs[2], [[m[i + j, 2 * i + j] for j in range(2)]
                                            for i in range(3)])
    np.testing.assert_array_equal(outs[3], m[3])
    np.testing.assert_array_equal(outs[4], m.reshape(-1))
    np.testing.assert_array_equal(outs[5], [[m[(i + j) % 5, (i * 3 + j) // 3] for j in range(3)]
                                            for i in range(5)])
    # a non-contiguous input array of the right shape is read correctly
    big = np.arange(70, dtype=np.float32).reshape(5, 14)
    np.testing.assert_array_equal(tc.reference.run(flipped, M=big[:, ::2]), big[::-1, -2::-2])


# --- graphs ----------------------------------------------------------------------------------
def test_shared_producers_are_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((4,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((4,), lambda i: B[i] - 1.0, name="D")
    E = te.compute((4,), lambda i: C[i] * D[i], name="E")
    calls: list[str] = []
    real = interpreter_module.evaluate

    def counting(tensor, env):
        calls.append(tensor.name)
        return real(tensor, env)

    monkeypatch.setattr(interpreter_module, "evaluate", counting)
    a = np.arange(4, dtype=np.float32)
    e, b = tc.reference.run([E, B], A=a)
    np.testing.assert_array_equal(e, (2 * a + 1) * (2 * a - 1))
    np.testing.assert_array_equal(b, 2 * a)
    assert sorted(calls) == ["B", "C", "D", "E"]


def test_program_forms_and_outputs() -> None:
    A = te.placeholder((2,), name="A")
    B = te.compute((2,), lambda i: A[i] + 1.0, name="B")
    a = np.array([1.0, 2.0], np.float32)
    graph = tc.Graph.from_outputs([B])
    for program in (B, [B], (B,), graph):
        np.testing.assert_array_equal(tc.reference.run(program, A=a), [2.0, 3.0])
    C = te.compute((2,), lambda i: B[i] * 10.0, name="C")
    c, b = tc.reference.run([C, B], A=a)  # in the order asked for
    assert c.tolist() == [20.0, 30.0] and b.tolist() == [2.0, 3.0]
    np.testing.assert_array_equal(tc.reference.run(graph, inputs={"A": a}), [2.0, 3.0])
    copy = tc.reference.run(A, A=a)
    copy[0] = 99.0
    assert a[0] == 1.0  # outputs never alias inputs
    identity = te.compute((2,), lambda i: A[i], name="identity")
    result = tc.reference.run(identity, A=a)
    result[:] = 0
    assert a.tolist() == [1.0, 2.0]
    with pytest.raises(GraphError, match="Graph, a Tensor or a list"):
        tc.reference.run("B", A=a)


def test_evaluate_one_compute_and_its_errors() -> None:
    A = te.placeholder((3,), name="A")
    B = te.compute((3,), lambda i: A[i] * A[i], name="B")
    got = tc.reference.evaluate(B, {A: np.array([1.0, 2.0, 3.0], np.float32)})
    np.testing.assert_array_equal(got, [1.0, 4.0, 9.0])
    with pytest.raises(InputError, match="B reads A.*float32\\[3\\]"):
        tc.reference.evaluate(B, {})
    with pytest.raises(InputError, match="A is float64"):
        tc.reference.evaluate(B, {A: np.zeros(3)})
    with pytest.raises(ExpressionError, match="placeholder"):
        tc.reference.evaluate(A, {})
    free = te.Var("n")
    C = te.compute((3,), lambda i: A[i] * 0.0 + free.astype("float32"), name="C")
    with pytest.raises(ExpressionError, match="free variable n"):
        tc.reference.evaluate(C, {A: np.zeros(3, np.float32)})


# --- input validation ------------------------------------------------------------------------
@pytest.fixture
def two_inputs() -> te.Tensor:
    A = te.placeholder((2, 3), name="A")
    H = te.placeholder((3,), "bfloat16", name="H")
    return te.compute((2, 3), lambda i, j: A[i, j] + H[j].astype("float32"), name="out")


def test_input_validation(two_inputs: te.Tensor) -> None:
    a = np.ones((2, 3), np.float32)
    h = np.ones(3, BF16)
    np.testing.assert_array_equal(tc.reference.run(two_inputs, A=a, H=h), np.full((2, 3), 2.0))
    with pytest.raises(InputError, match=r"input 'H' is missing; pass a bfloat16\[3\] array"):
        tc.reference.run(two_inputs, A=a)
    with pytest.raises(InputError, match=r"unexpected input\(s\) 'Z'.*inputs are: A, H"):
        tc.reference.run(two_inputs, A=a, H=h, Z=a)
    with pytest.raises(InputError, match=r"'A' has shape \(3, 2\), expected shape \(2, 3\) "
                                         r"\(dtype float32\)"):
        tc.reference.run(two_inputs, A=a.T.copy(), H=h)
    with pytest.raises(InputError, match=r"'A' has dtype float64, expected dtype float32 "
                                         r"\(shape \(2, 3\)\).*astype\(np.float32\)"):
        tc.reference.run(two_inputs, A=a.astype(np.float64), H=h)
    with pytest.raises(InputError, match=r"'H' has dtype float16, expected dtype bfloat16.*"
                                         r"ml_dtypes.bfloat16"):
        tc.reference.run(two_inputs, A=a, H=h.astype(np.float16))
    with pytest.raises(InputError, match="given twice"):
        tc.reference.run(two_inputs, inputs={"A": a, "H": h}, A=a)


# --- the big convolution -----------------------------------------------------------------------
def test_conv2d_64_channels_56x56_is_fast_and_right() -> None:
    """A ResNet-style 3x3 conv (batch 1, 64 -> 64 channels, 56x56, padding 1) through the
    reference interpreter: the pad compute gathers, the conv is one einsum over the squeezed
    (c, h, w, r, s) window and the weights. Measured here: ~15 ms for the reference run,
    ~25 ms for the numpy check below (2-core Zen 5)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(np.float32)
    X = te.placeholder(x.shape, name="X")
    W = te.placeholder(w.shape, name="W")
    got = tc.reference.run(tc.ops.conv2d(X, W, padding=1, name="Y"), X=x, W=w)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = sum(np.einsum("nchw,kc->nkhw", padded[:, :, r:r + 56, s:s + 56], w[:, :, r, s])
                   for r in range(3) for s in range(3))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-4)
