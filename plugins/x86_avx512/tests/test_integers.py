"""Integer arithmetic (wrap-around, floor division and modulo with negatives, by zero), casts."""

from __future__ import annotations

import numpy as np
import pytest
from x86_kernels import buffer, kernel, load, loop, seq, store, vloop, zeros_for

from tilecraft.dtypes import DType
from tilecraft.reference.numerics import cast_values
from tilecraft.te import Var, const
from tilecraft.te.expr import BinaryOp, Cast, UnaryOp, binary, unary

OPS = {"add": BinaryOp.ADD, "sub": BinaryOp.SUB, "mul": BinaryOp.MUL,
       "floordiv": BinaryOp.FLOORDIV, "mod": BinaryOp.MOD, "max": BinaryOp.MAX,
       "min": BinaryOp.MIN}


def _operands(dtype: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    edges = np.array([info.min, info.max, 0, 1, -1, 7, -7, 13, -13, info.min, info.max, 100],
                     dtype=np.int64)
    divisors = np.array([-1, -1, 0, 3, 3, -2, 2, -5, 5, 1, 0, -100], dtype=np.int64)
    a = np.concatenate([edges, rng.integers(info.min, info.max, n - len(edges),
                                            endpoint=True)])
    b = np.concatenate([divisors, rng.integers(info.min, info.max, n - len(divisors),
                                               endpoint=True)])
    return a.astype(dtype), b.astype(dtype)


@pytest.fixture(scope="module", params=["int8", "uint8", "int32"])
def int_results(request, run):
    dtype, n = request.param, 77
    a, b = buffer("A", (n,), dtype), buffer("B", (n,), dtype)
    params, stmts, outputs = [a, b], [], []
    for mode in ("vec", "ser"):
        i = Var("i")
        body = []
        for name, op in OPS.items():
            out = buffer(f"{name}_{mode}", (n,), dtype)
            params.append(out)
            outputs.append(out.name)
            body.append(store(out, (i,), binary(op, load(a, i), load(b, i))))
        if dtype != "uint8":
            out = buffer(f"neg_{mode}", (n,), dtype)
            params.append(out)
            body.append(store(out, (i,), unary(UnaryOp.NEG, load(a, i))))
        out = buffer(f"abs_{mode}", (n,), dtype)
        params.append(out)
        body.append(store(out, (i,), unary(UnaryOp.ABS, load(a, i))))
        stmts.append((vloop if mode == "vec" else loop)(i, n, seq(*body)))
    k = kernel(f"int_ops_{dtype}", params, outputs, *stmts)
    da, db = _operands(dtype, n)
    return dtype, da, db, run(k, zeros_for(k, A=da, B=db))


def _expected(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply,
                "floordiv": np.floor_divide, "mod": np.mod, "max": np.maximum,
                "min": np.minimum}[name](a, b)


@pytest.mark.parametrize("name", [*OPS, "neg", "abs"])
def test_integer_ops_match_numpy(int_results, name):
    dtype, a, b, out = int_results
    if name == "neg" and dtype == "uint8":
        pytest.skip("uint8 has no negation")
    if name in ("neg", "abs"):
        with np.errstate(all="ignore"):
            expected = -a if name == "neg" else np.abs(a)
    else:
        expected = _expected(name, a, b)
    np.testing.assert_array_equal(out[f"{name}_vec"], expected)
    np.testing.assert_array_equal(out[f"{name}_ser"], expected)


def test_floor_semantics_in_indices(run):
    n = 29
    x, y, z = buffer("X", (n,)), buffer("Y", (n,)), buffer("Z", (n,))
    i = Var("i")
    # (i - 10) % n wraps negative offsets around; (i - 10) // 3 floors towards -inf
    wrapped = store(y, (i,), load(x, (i - 10) % n))
    floored = store(z, (i,), load(x, (i - 10) // 3 + 4))
    k = kernel("floor_index", [x, y, z], ["Y", "Z"], vloop(i, n, seq(wrapped, floored)))
    data = np.arange(n, dtype=np.float32) * 10
    out = run(k, zeros_for(k, X=data))
    idx = np.arange(n)
    np.testing.assert_array_equal(out["Y"], data[(idx - 10) % n])
    np.testing.assert_array_equal(out["Z"], data[(idx - 10) // 3 + 4])


def test_integer_results_do_not_depend_on_index_width(run):
    # int32 values wrap even though index arithmetic runs in 64 bits
    n = 20
    y = buffer("Y", (n,), "int32")
    i = Var("i")
    big = const(2**30, "int32")
    k = kernel("wrap_index_values", [y], ["Y"], vloop(i, n, store(y, (i,), i * big + i)))
    out = run(k, zeros_for(k))["Y"]
    expected = (np.arange(n, dtype=np.int64) * 2**30 + np.arange(n)).astype(np.int32)
    np.testing.assert_array_equal(out, expected)


CASTS = [("float32", "int8"), ("float32", "uint8"), ("float32", "int32"), ("int32", "int8"),
         ("int32", "uint8"), ("uint8", "int32"), ("int8", "int32"), ("int8", "uint8"),
         ("int32", "float32"), ("uint8", "float32"), ("int8", "float32"), ("float32", "bool"),
         ("int32", "bool"), ("float32", "float16"), ("float32", "bfloat16")]


def test_casts_follow_the_reference_semantics(run):
    floats = np.array([0.0, -0.0, 1.5, -1.5, 2.7, -2.7, 127.9, 128.0, -128.9, -129.0, 255.5,
                       256.0, 300.0, -5.0, 1e10, -1e10, np.nan, np.inf, -np.inf, 65504.0,
                       70000.0, 1e-8, 3.14159, 2.0**31, -(2.0**31), 1.00390625, 1.01171875],
                      np.float32)
    n = len(floats)
    ints = (np.arange(n, dtype=np.int64) * 104729 - 700000).astype(np.int32)
    ints[:6] = [0, 255, 256, -1, -128, 2**31 - 1]
    sources = {"float32": floats, "int32": ints, "uint8": (ints % 256).astype(np.uint8),
               "int8": (ints % 256 - 128).astype(np.int8)}
    inputs = {name: buffer(f"in_{name}", (n,), name) for name in sources}
    params, stores, expected = list(inputs.values()), [], {}
    i = Var("i")
    for source, target_name in CASTS:
        # half-type results are stored as float32 (the cast's rounding is what is checked)
        stored_as = "float32" if target_name in ("float16", "bfloat16") else target_name
        stored_as = "int8" if target_name == "bool" else stored_as
        out = buffer(f"{source}_to_{target_name}", (n,), stored_as)
        params.append(out)
        value = Cast(DType.parse(target_name), load(inputs[source], i))
        value = Cast(DType.parse(stored_as), value) if stored_as != target_name else value
        stores.append(store(out, (i,), value))
        result = cast_values(sources[source].astype(DType.parse(source).compute_numpy),
                             DType.parse(source), DType.parse(target_name))
        expected[out.name] = cast_values(result, DType.parse(target_name),
                                         DType.parse(stored_as))
    k = kernel("casts", params, [p.name for p in params[4:]], vloop(i, n, seq(*stores)))
    out = run(k, zeros_for(k, **{f"in_{name}": data for name, data in sources.items()}))
    for name, values in expected.items():
        np.testing.assert_array_equal(out[name], values, err_msg=name)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32"])
def test_integer_comparisons_respect_signedness(run, dtype):
    from tilecraft.te.expr import CompareOp, compare

    a_data, b_data = _operands(dtype, 40)
    a, b = buffer("A", (40,), dtype), buffer("B", (40,), dtype)
    predicates = list(CompareOp)
    outs = [buffer(f"c{k}", (40,), "int8") for k in range(len(predicates))]
    i = Var("i")
    body = seq(*(store(out, (i,), Cast(DType.INT8, compare(op, load(a, i), load(b, i))))
                 for out, op in zip(outs, predicates)))
    k = kernel(f"compare_{dtype}", [a, b, *outs], [o.name for o in outs], vloop(i, 40, body))
    out = run(k, zeros_for(k, A=a_data, B=b_data))
    reference = {CompareOp.LT: np.less, CompareOp.LE: np.less_equal,
                 CompareOp.GT: np.greater, CompareOp.GE: np.greater_equal,
                 CompareOp.EQ: np.equal, CompareOp.NE: np.not_equal}
    for number, op in enumerate(predicates):
        np.testing.assert_array_equal(out[f"c{number}"], reference[op](a_data, b_data),
                                      err_msg=op.value)
