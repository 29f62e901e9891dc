"""Elementwise kernels: vector loops with remainders, every unary op, selects, masks, gathers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from x86_kernels import buffer, kernel, load, loop, seq, store, ulp_distance, vloop, zeros_for

from tilecraft.kernel_ir.nodes import IfThenElse
from tilecraft.te import Var, const, select
from tilecraft.te.expr import BinaryOp, CompareOp, Unary, UnaryOp, binary, compare

EXTENTS = (1, 7, 16, 17, 33, 1000)


def test_vector_loops_handle_every_remainder(run):
    params, stmts = [], []
    for n in EXTENTS:
        x, y = buffer(f"X{n}", (n,)), buffer(f"Y{n}", (n,))
        i = Var("i")
        params += [x, y]
        stmts.append(vloop(i, n, store(y, (i,), (load(x, i) - 1.0) * 3.0)))
    k = kernel("remainders", params, [f"Y{n}" for n in EXTENTS], *stmts)
    rng = np.random.default_rng(0)
    inputs = {f"X{n}": rng.standard_normal(n).astype(np.float32) for n in EXTENTS}
    out = run(k, zeros_for(k, **inputs))
    for n in EXTENTS:
        np.testing.assert_array_equal(out[f"Y{n}"], (inputs[f"X{n}"] - 1) * np.float32(3))


def test_fp_contraction_is_an_option(native):
    from tilecraft_x86_avx512.codegen import CodegenOptions
    from tilecraft_x86_avx512.target import X86Avx512Target

    n = 333
    x, y = buffer("X", (n,)), buffer("Y", (n,))
    i = Var("i")
    k = kernel("mul_sub", [x, y], ["Y"], vloop(i, n, store(y, (i,), load(x, i) * 3.1 - 1.0)))
    data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    exact = X86Avx512Target(CodegenOptions(fp_contract=False)).compile_kernel(k)
    fused = native.compile_kernel(k)
    separate, contracted = zeros_for(k, X=data), zeros_for(k, X=data)
    exact(separate)
    fused(contracted)
    expected = data * np.float32(3.1) - np.float32(1)
    np.testing.assert_array_equal(separate["Y"], expected)
    np.testing.assert_allclose(contracted["Y"], expected, rtol=1e-6, atol=1e-6)
    assert not np.array_equal(contracted["Y"], expected)  # one rounding instead of two


@pytest.mark.parametrize("lanes", [4, 8, 32])
def test_other_lane_counts(run, lanes):
    x, y = buffer("X", (45,)), buffer("Y", (45,))
    i = Var("i")
    k = kernel(f"lanes{lanes}", [x, y], ["Y"],
               vloop(i, 45, store(y, (i,), load(x, i) + 0.5), lanes=lanes))
    data = np.arange(45, dtype=np.float32)
    np.testing.assert_array_equal(run(k, zeros_for(k, X=data))["Y"], data + 0.5)


def test_dynamic_extent_masks_the_tail(run):
    rows, cols = 21, 40
    x, y = buffer("X", (rows, cols)), buffer("Y", (rows, cols))
    r, c = Var("r"), Var("c")
    # row r writes its first r + 1 columns: a dynamic extent, every remainder 0..15
    body = loop(r, rows, vloop(c, r + 1, store(y, (r, c), load(x, r, c) + r.astype("float32"))))
    k = kernel("triangle", [x, y], ["Y"], body)
    data = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    out = run(k, zeros_for(k, X=data))["Y"]
    expected = np.where(np.arange(cols)[None, :] <= np.arange(rows)[:, None],
                        data + np.arange(rows, dtype=np.float32)[:, None], 0)
    np.testing.assert_array_equal(out, expected)


# unary ops -----------------------------------------------------------------------------------
def _points() -> np.ndarray:
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 1e-45, -1e-45, 1e-40,
               1.1754944e-38, 88.0, 88.72, 88.73, 89.0, 100.0, -87.3, -88.0, -100.0, -103.9,
               -104.0, -105.0, 3.4e38, -3.4e38, 0.625, -0.625, 0.6249, 1.0, -1.0, 0.9999,
               1.0001, 2.5, -2.5, 4.0, 5.5, -6.0, 9.0, -9.5, 15.0, 1e-3, 1e-7, -1e-7]
    rng = np.random.default_rng(2)
    dense = np.linspace(-12.0, 12.0, 1201)
    wide = np.concatenate([rng.uniform(-110, 110, 400), 10.0 ** rng.uniform(-38, 38, 300),
                           -(10.0 ** rng.uniform(-38, 38, 100))])
    return np.concatenate([special, dense, wide]).astype(np.float32)


POINTS = _points()
UNARY = [UnaryOp.EXP, UnaryOp.LOG, UnaryOp.SQRT, UnaryOp.TANH, UnaryOp.ERF, UnaryOp.SIGMOID,
         UnaryOp.ABS, UnaryOp.NEG]


@pytest.fixture(scope="module")
def unary_results(run):
    """Every unary op over POINTS, through a vector loop (with a tail) and a serial loop."""
    n = len(POINTS)
    x = buffer("X", (n,))
    params, stmts, outputs = [x], [], []
    for op in UNARY:
        for mode in ("vec", "ser"):
            out = buffer(f"{op.value}_{mode}", (n,))
            params.append(out)
            outputs.append(out.name)
            i = Var("i")
            body = store(out, (i,), Unary(op, load(x, i)))
            stmts.append(vloop(i, n, body) if mode == "vec" else loop(i, n, body))
    k = kernel("unary_ops", params, outputs, *stmts)
    return run(k, zeros_for(k, X=POINTS))


def _reference(op: UnaryOp, x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if op is UnaryOp.EXP:
            return np.exp(wide)
        if op is UnaryOp.LOG:
            return np.log(wide)
        if op is UnaryOp.SQRT:
            return np.sqrt(wide)
        if op is UnaryOp.TANH:
            return np.tanh(wide)
        if op is UnaryOp.ERF:
            return np.array([math.erf(v) if not math.isnan(v) else math.nan for v in wide])
        if op is UnaryOp.SIGMOID:
            return 1.0 / (1.0 + np.exp(-wide))
        if op is UnaryOp.ABS:
            return np.abs(wide)
        return -wide


@pytest.mark.parametrize("op", UNARY, ids=lambda op: op.value)
def test_unary_op_matches_numpy(unary_results, op):
    got = unary_results[f"{op.value}_vec"]
    # vector, tail and scalar code run the same polynomial: bit-identical results
    np.testing.assert_array_equal(got.view(np.int32), unary_results[f"{op.value}_ser"]
                                  .view(np.int32))
    with np.errstate(all="ignore"):
        expected = _reference(op, POINTS).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(expected)), \
        POINTS[np.isnan(got) != np.isnan(expected)]
    finite = ~np.isnan(expected)
    if op in (UnaryOp.SQRT, UnaryOp.ABS, UnaryOp.NEG):
        np.testing.assert_array_equal(got, expected)
    elif op in (UnaryOp.EXP, UnaryOp.LOG):
        ulps = ulp_distance(got[finite], expected[finite])
        worst = int(np.argmax(ulps))
        assert ulps.max() <= 2, (POINTS[finite][worst], got[finite][worst])
    elif op is UnaryOp.ERF:
        np.testing.assert_allclose(got[finite], expected[finite], rtol=0, atol=1e-6)
        small = finite & (np.abs(POINTS) < 1)
        np.testing.assert_allclose(got[small], expected[small], rtol=4e-7, atol=1e-45)
    else:
        np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-6, atol=1e-7)
        # sigmoid(x < -88.7) is 0 like the reference's 1 / (1 + exp(-x)) in float32
        normal = finite & (np.abs(expected) > np.finfo(np.float32).tiny)
        ulps = ulp_distance(got[normal], expected[normal])
        assert ulps.max() <= 4, (POINTS[normal][np.argmax(ulps)], ulps.max())


def test_exp_and_log_edge_values(unary_results):
    def at(value: float) -> int:
        return int(np.flatnonzero(POINTS == np.float32(value))[0])

    exp, log = unary_results["exp_vec"], unary_results["log_vec"]
    assert exp[at(np.inf)] == np.inf and exp[at(-np.inf)] == 0.0
    assert exp[at(89.0)] == np.inf and exp[at(-105.0)] == 0.0
    assert exp[at(0.0)] == 1.0
    assert 0 < exp[at(-103.9)] < 1e-44  # a subnormal result
    assert log[at(0.0)] == -np.inf and log[at(np.inf)] == np.inf
    assert np.isnan(log[at(-1.0)]) and log[at(1.0)] == 0.0
    assert log[at(1e-45)] == np.float32(math.log(1.401298464324817e-45))


def test_erf_saturates_exactly(unary_results):
    """Past |x| = 4 erf is +-1 in float32: the tail form's argument is capped there (no
    subnormal exp(-x^2)), infinities included, NaN still NaN."""
    erf = unary_results["erf_vec"]
    big = ~np.isnan(POINTS) & (np.abs(POINTS) >= 4)
    np.testing.assert_array_equal(erf[big], np.sign(POINTS[big]))
    assert np.isnan(erf[np.isnan(POINTS)]).all()


# selects, conditions, gathers ---------------------------------------------------------------
def test_select_with_guarded_loads(run):
    n = 37
    x, left, right = buffer("X", (n,)), buffer("L", (n,)), buffer("R", (n,))
    i = Var("i")
    previous = select(i >= 1, load(x, select(i >= 1, i - 1, 0)), const(0.0))
    following = select(i + 1 < n, load(x, select(i + 1 < n, i + 1, n - 1)), const(-1.0))
    k = kernel("shifts", [x, left, right], ["L", "R"],
               vloop(i, n, seq(store(left, (i,), previous), store(right, (i,), following))))
    data = np.arange(1, n + 1, dtype=np.float32)
    out = run(k, zeros_for(k, X=data))
    np.testing.assert_array_equal(out["L"], np.concatenate([[0], data[:-1]]))
    np.testing.assert_array_equal(out["R"], np.concatenate([data[1:], [-1]]))


def test_lane_varying_if_then_else(run):
    n = 45
    x, y, z = buffer("X", (n,)), buffer("Y", (n,)), buffer("Z", (n,))
    i = Var("i")
    cond = compare(CompareOp.EQ, i % 3, const(0))
    branches = IfThenElse(cond, store(y, (i,), load(x, i) * 2.0),
                          seq(store(y, (i,), -load(x, i)), store(z, (i,), const(7.0))))
    # a condition that does not vary across lanes is an ordinary branch
    uniform = IfThenElse(compare(CompareOp.GT, load(x, 0), const(100.0)),
                         store(z, (i,), const(-5.0)))
    k = kernel("branches", [x, y, z], ["Y", "Z"], vloop(i, n, seq(branches, uniform)))
    data = np.arange(n, dtype=np.float32)
    out = run(k, zeros_for(k, X=data))
    third = np.arange(n) % 3 == 0
    np.testing.assert_array_equal(out["Y"], np.where(third, 2 * data, -data))
    np.testing.assert_array_equal(out["Z"], np.where(third, 0, 7))
    big = run(k, zeros_for(k, X=data + 200))
    np.testing.assert_array_equal(big["Z"], np.full(n, -5, np.float32))


def test_gathers_and_scatters(run):
    rows, cols = 19, 23
    x, t, d = buffer("X", (rows, cols)), buffer("T", (cols, rows)), buffer("D", (rows,))
    i, j, r = Var("i"), Var("j"), Var("r")
    transpose = loop(i, rows, vloop(j, cols, store(t, (j, i), load(x, i, j))))
    diagonal = vloop(r, rows, store(d, (r,), load(x, r, (r * 7) % cols)))
    k = kernel("strided", [x, t, d], ["T", "D"], transpose, diagonal)
    data = np.random.default_rng(3).standard_normal((rows, cols)).astype(np.float32)
    out = run(k, zeros_for(k, X=data))
    np.testing.assert_array_equal(out["T"], data.T)
    np.testing.assert_array_equal(out["D"], data[np.arange(rows), (np.arange(rows) * 7) % cols])


def test_float_binary_ops_and_comparisons(run):
    n = 50
    a, b = buffer("A", (n,)), buffer("B", (n,))
    names = ["add", "sub", "mul", "div", "max", "min", "cmp"]
    outs = [buffer(name, (n,)) for name in names]
    i = Var("i")
    va, vb = load(a, i), load(b, i)
    values = [va + vb, va - vb, va * vb, va / vb, binary(BinaryOp.MAX, va, vb),
              binary(BinaryOp.MIN, va, vb),
              select((va < vb) & ~compare(CompareOp.EQ, vb, 0.0) | (va >= 3.0), const(1.0),
                     const(0.0))]
    k = kernel("float_ops", [a, b, *outs], names,
               vloop(i, n, seq(*(store(o, (i,), v) for o, v in zip(outs, values)))))
    rng = np.random.default_rng(4)
    da = rng.standard_normal(n).astype(np.float32) * 4
    db = rng.standard_normal(n).astype(np.float32)
    db[:3] = 0.0
    out = run(k, zeros_for(k, A=da, B=db))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out["add"], da + db)
        np.testing.assert_array_equal(out["sub"], da - db)
        np.testing.assert_array_equal(out["mul"], da * db)
        np.testing.assert_array_equal(out["div"], da / db)
    np.testing.assert_array_equal(out["max"], np.maximum(da, db))
    np.testing.assert_array_equal(out["min"], np.minimum(da, db))
    np.testing.assert_array_equal(out["cmp"], ((da < db) & (db != 0) | (da >= 3)).astype(
        np.float32))
