"""float16 / bfloat16 / bool storage, and reductions (lane-wise partials, inner loops, masks)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from x86_kernels import buffer, kernel, load, loop, seq, store, vloop, zeros_for

from tilecraft.kernel_ir.nodes import IfThenElse
from tilecraft.te import Var, const, select
from tilecraft.te.expr import CompareOp, ReduceOp, compare

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_half_types_round_on_store(run):
    special = np.array([0.0, -0.0, 1.0, 65504.0, 60000.0, 6e-8, 1e-5, -2.5e-6, np.inf, np.nan,
                        3.0e38, 1e-39, 1.00390625, 1.0078125, 1.01171875], np.float32)
    data = np.concatenate([special, np.random.default_rng(6).standard_normal(50)
                           .astype(np.float32) * 100])
    n = len(data)
    h_in, h_out = buffer("H", (n,), "float16"), buffer("HO", (n,), "float16")
    b_in, b_out = buffer("B", (n,), "bfloat16"), buffer("BO", (n,), "bfloat16")
    f_in, to_h, to_b = buffer("F", (n,)), buffer("FH", (n,), "float16"), buffer(
        "FB", (n,), "bfloat16")
    widened = buffer("W", (n,))
    i = Var("i")
    body = seq(store(h_out, (i,), (load(h_in, i) + 0.1) * 1.5),
               store(b_out, (i,), (load(b_in, i) + 0.1) * 1.5),
               store(to_h, (i,), load(f_in, i)),
               store(to_b, (i,), load(f_in, i)),
               store(widened, (i,), load(b_in, i).astype("float32")
                     + load(h_in, i).astype("float32")))
    params = [h_in, h_out, b_in, b_out, f_in, to_h, to_b, widened]
    k = kernel("halves", params, ["HO", "BO", "FH", "FB", "W"], vloop(i, n, body))
    with np.errstate(all="ignore"):
        halves, bhalves = data.astype(np.float16), data.astype(BF16)
    out = run(k, zeros_for(k, H=halves, B=bhalves, F=data))
    with np.errstate(all="ignore"):
        # the constant 0.1 of a half-type expression is a value of that type
        tenth_h, tenth_b = np.float32(np.float16(0.1)), np.float32(BF16.type(0.1))
        expected_h = ((halves.astype(np.float32) + tenth_h) * np.float32(1.5)).astype(np.float16)
        expected_b = ((bhalves.astype(np.float32) + tenth_b) * np.float32(1.5)).astype(BF16)
    np.testing.assert_array_equal(out["HO"].view(np.uint16), expected_h.view(np.uint16))
    np.testing.assert_array_equal(out["BO"].view(np.uint16), expected_b.view(np.uint16))
    np.testing.assert_array_equal(out["FH"].view(np.uint16), halves.view(np.uint16))
    np.testing.assert_array_equal(out["FB"].view(np.uint16), bhalves.view(np.uint16))
    np.testing.assert_array_equal(out["W"], bhalves.astype(np.float32) + halves.astype(
        np.float32))


def test_accumulating_into_float16_rounds_every_step(run):
    n = 300
    x, s = buffer("X", (n,), "float16"), buffer("S", (1,), "float16")
    r = Var("r")
    k = kernel("half_sum", [x, s], ["S"], loop(r, n, store(s, (0,), load(x, r), ReduceOp.SUM)))
    data = (np.random.default_rng(7).random(n) * 3).astype(np.float16)
    total = np.float16(0)
    for value in data:
        total = np.float16(np.float32(total) + np.float32(value))
    np.testing.assert_array_equal(run(k, zeros_for(k, X=data))["S"], [total])


def test_bool_buffers(run):
    n = 40
    x, flag, y = buffer("X", (n,)), buffer("M", (n,), "bool"), buffer("Y", (n,))
    i = Var("i")
    k = kernel("bools", [x, flag, y], ["M", "Y"], vloop(i, n, seq(
        store(flag, (i,), compare(CompareOp.GT, load(x, i), const(0.0))),
        store(y, (i,), select(load(flag, i), const(1.0), const(2.0))))))
    data = np.random.default_rng(8).standard_normal(n).astype(np.float32)
    out = run(k, zeros_for(k, X=data))
    np.testing.assert_array_equal(out["M"], data > 0)
    np.testing.assert_array_equal(out["Y"], np.where(data > 0, 1.0, 2.0))


# reductions ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lane_reductions(run):
    """Vector loops accumulating into one location, several extents, ops and dtypes."""
    cases = [(n, dtype, op) for n in (5, 16, 37, 1000) for dtype in ("float32", "int32")
             for op in ReduceOp] + [(50, "uint8", ReduceOp.MAX), (50, "int8", ReduceOp.MIN),
                                    (70, "int8", ReduceOp.SUM)]
    params, stmts, data = [], [], {}
    rng = np.random.default_rng(9)
    for number, (n, dtype, op) in enumerate(cases):
        x, s = buffer(f"X{number}", (n,), dtype), buffer(f"S{number}", (1,), dtype)
        params += [x, s]
        i = Var("i")
        stmts.append(vloop(i, n, store(s, (0,), load(x, i), op)))
        if dtype == "float32" and op is ReduceOp.PROD:  # near -1: the product stays finite
            data[x.name] = -rng.uniform(0.995, 1.005, n).astype(np.float32)
        elif dtype == "float32":  # all negative: a wrong identity of max (0) would show
            data[x.name] = -rng.random(n).astype(np.float32) - 0.5
        else:
            info = np.iinfo(dtype)
            data[x.name] = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
        start = {ReduceOp.SUM: 3, ReduceOp.MAX: -1000, ReduceOp.MIN: 1000, ReduceOp.PROD: 3}[op]
        if dtype in ("int8", "uint8"):
            start = {ReduceOp.SUM: 3, ReduceOp.MAX: 0, ReduceOp.MIN: 50}[op]
        data[s.name] = np.array([start], dtype)
    k = kernel("lane_reductions", params, [p.name for p in params[1::2]], *stmts)
    return cases, data, run(k, zeros_for(k, **data))


def test_vector_reductions_into_one_location(lane_reductions):
    cases, data, out = lane_reductions
    for number, (_, dtype, op) in enumerate(cases):
        x, start = data[f"X{number}"], data[f"S{number}"][0]
        with np.errstate(all="ignore"):
            if op is ReduceOp.SUM:
                expected = start + x.sum(dtype=x.dtype)
            elif op is ReduceOp.PROD:  # integers wrap: exact in any order
                expected = start * x.prod(dtype=x.dtype)
            elif op is ReduceOp.MAX:
                expected = max(start, x.max())
            else:
                expected = min(start, x.min())
        got = out[f"S{number}"][0]
        if dtype == "float32" and op in (ReduceOp.SUM, ReduceOp.PROD):  # reassociated lanes
            assert got == pytest.approx(float(expected), rel=1e-5), (number, dtype, op)
        else:
            assert got == expected, (number, dtype, op)


def test_row_reductions_with_dynamic_extents(run):
    rows, cols = 20, 40
    x, s, m = buffer("X", (rows, cols)), buffer("S", (rows,)), buffer("M", (rows,))
    r, c = Var("r"), Var("c")
    body = loop(r, rows, seq(
        store(s, (r,), const(0.0)), store(m, (r,), const(float("-inf"))),
        vloop(c, r + 1, seq(store(s, (r,), load(x, r, c), ReduceOp.SUM),
                            store(m, (r,), load(x, r, c), ReduceOp.MAX)))))
    k = kernel("row_reduce", [x, s, m], ["S", "M"], body)
    data = np.random.default_rng(10).standard_normal((rows, cols)).astype(np.float32)
    out = run(k, zeros_for(k, X=data))
    for row in range(rows):
        assert out["S"][row] == pytest.approx(float(data[row, :row + 1].sum()), rel=1e-5,
                                              abs=1e-5)
        assert out["M"][row] == data[row, :row + 1].max()


def test_reductions_inside_inner_loops_and_under_masks(run):
    n, inner = 37, 6
    x, t, p = buffer("X", (inner, n)), buffer("T", (inner,)), buffer("P", (1,))
    v, q = Var("v"), Var("q")
    positive = IfThenElse(compare(CompareOp.GT, load(x, 0, v), const(0.0)),
                          store(p, (0,), load(x, 0, v), ReduceOp.SUM))
    # T[q] depends on the inner loop's variable: lanes are combined at each update
    body = vloop(v, n, seq(loop(q, inner, store(t, (q,), load(x, q, v), ReduceOp.SUM)),
                           positive))
    k = kernel("inner_reduce", [x, t, p], ["T", "P"], body)
    data = np.random.default_rng(11).standard_normal((inner, n)).astype(np.float32)
    out = run(k, zeros_for(k, X=data))
    np.testing.assert_allclose(out["T"], data.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert out["P"][0] == pytest.approx(float(data[0][data[0] > 0].sum()), rel=1e-5)


def test_accumulate_over_a_serial_reduce_loop(run):
    rows, depth = 45, 13
    a, c = buffer("A", (rows, depth)), buffer("C", (rows,), "int32")
    ai = buffer("AI", (rows, depth), "int32")
    i, k_ = Var("i"), Var("k")
    body = vloop(i, rows, seq(store(c, (i,), const(0, "int32")),
                              loop(k_, depth, store(c, (i,), load(ai, i, k_), ReduceOp.SUM))))
    k = kernel("serial_reduce", [a, ai, c], ["C"], body)
    data = np.random.default_rng(12).integers(-2**31, 2**31 - 1, (rows, depth)).astype(np.int32)
    out = run(k, zeros_for(k, AI=data))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out["C"], data.sum(axis=1, dtype=np.int32))


def test_long_reductions_keep_independent_partials(run):
    rows, cols = 6, 700
    x, s, m = buffer("X", (rows, cols)), buffer("S", (rows,)), buffer("M", (rows,), "int32")
    xi = buffer("XI", (rows, cols), "int32")
    r, c = Var("r"), Var("c")
    extent = r * 113 + 130  # dynamic: 130 .. 695, through every stage of the vector loop
    body = loop(r, rows, seq(
        store(s, (r,), const(0.0)), store(m, (r,), const(-(2**31), "int32")),
        vloop(c, extent, seq(store(s, (r,), load(x, r, c), ReduceOp.SUM),
                             store(m, (r,), load(xi, r, c), ReduceOp.MAX)))))
    k = kernel("long_reduce", [x, xi, s, m], ["S", "M"], body)
    rng = np.random.default_rng(28)
    data = rng.standard_normal((rows, cols)).astype(np.float32)
    ints = rng.integers(-10**6, 10**6, (rows, cols)).astype(np.int32)
    out = run(k, zeros_for(k, X=data, XI=ints))
    for row in range(rows):
        n = row * 113 + 130
        assert out["S"][row] == pytest.approx(float(data[row, :n].sum(dtype=np.float64)),
                                              rel=1e-4, abs=1e-4)
        assert out["M"][row] == ints[row, :n].max()
