"""Lowering te computes to Kernel IR with the default schedule, run by the Kernel IR
interpreter and compared with numpy and the reference interpreter."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.graph import Graph
from tilecraft.kernel_ir.interpreter import run_kernels
from tilecraft.lower import LoweringOptions, lower_compute, lower_graph

RNG = np.random.default_rng(7)

OPTIONS = {
    "vec16-par": LoweringOptions(vector_lanes=16, cores=2),
    "vec8-serial": LoweringOptions(vector_lanes=8, parallel=False),
    "vec4-par4-unroll": LoweringOptions(vector_lanes={"float32": 4, "int32": 4, "int8": 4,
                                                      "float16": 4, "bfloat16": 4},
                                        cores=4, unroll_limit=4),
    "scalar": LoweringOptions(vectorize=False, parallel=False),
    "regs": LoweringOptions(param_level="DRAM", register_level="registers", register_bytes=64,
                            vector_lanes=16, cores=1),
}


def _random(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype in ("int8", "int32", "uint8"):
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -100), min(info.max, 100)
        return RNG.integers(lo, hi + 1, size=shape).astype(dtype)
    values = RNG.standard_normal(shape).astype(np.float32)
    return values.astype(DType.parse(dtype).numpy)


def _inputs(graph: Graph) -> dict[str, np.ndarray]:
    return {t.name: _random(t.shape, t.dtype.value) for t in graph.inputs}


def _run_lowered(graph: Graph, options: LoweringOptions,
                 inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    kernels = lower_graph(graph, options)
    assert [k.name for k in kernels] == [t.name for t in graph.computes]
    return run_kernels(kernels, inputs)


def _tolerance(dtype: DType) -> dict[str, float]:
    if dtype is DType.BFLOAT16:
        return {"rtol": 1.6e-2, "atol": 1.6e-2}
    if dtype is DType.FLOAT16:
        return {"rtol": 2e-3, "atol": 2e-3}
    if dtype.is_float:
        return {"rtol": 2e-5, "atol": 2e-5}
    return {"rtol": 0, "atol": 0}


# the computes ---------------------------------------------------------------------------------

def gemm(m: int = 17, n: int = 23, k: int = 5, dtype: str = "float32") -> list[te.Tensor]:
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis(k, name="k")
    return [te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")]


def gemm_int8() -> list[te.Tensor]:
    A = te.placeholder((9, 33), "int8", name="A")
    B = te.placeholder((33, 13), "int8", name="B")
    r = te.reduce_axis(33, name="k")
    return [te.compute((9, 13), lambda i, j: te.sum(
        A[i, r].astype("int32") * B[r, j].astype("int32"), axis=r), name="C")]


def dot_to_scalar() -> list[te.Tensor]:
    A = te.placeholder((1, 37), name="A")
    B = te.placeholder((37, 1), name="B")
    r = te.reduce_axis(37, name="k")
    return [te.compute((1, 1), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")]


def conv2d_padded() -> list[te.Tensor]:
    X = te.placeholder((2, 3, 6, 7), name="X")
    W = te.placeholder((4, 3, 3, 3), name="W")
    rc, ry, rx = te.reduce_axis(3, "rc"), te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")

    def body(n, f, y, x):
        yy, xx = y + ry - 1, x + rx - 1
        inside = (yy >= 0) & (yy < 6) & (xx >= 0) & (xx < 7)
        return te.sum(te.select(inside, X[n, rc, yy, xx], 0.0) * W[f, rc, ry, rx],
                      axis=[rc, ry, rx])

    return [te.compute((2, 4, 6, 7), body, name="Y")]


def softmax() -> list[te.Tensor]:
    X = te.placeholder((5, 19), name="X")
    r1, r2 = te.reduce_axis(19, "r1"), te.reduce_axis(19, "r2")
    M = te.compute((5,), lambda i: te.max(X[i, r1], axis=r1), name="M")
    D = te.compute((5, 19), lambda i, j: X[i, j] - M[i], name="D")
    E = te.compute((5, 19), lambda i, j: te.exp(D[i, j]), name="E")
    S = te.compute((5,), lambda i: te.sum(E[i, r2], axis=r2), name="S")
    return [te.compute((5, 19), lambda i, j: E[i, j] / S[i], name="P")]


def multi_axis_reductions() -> list[te.Tensor]:
    X = te.placeholder((3, 4, 5), name="X")
    a, b = te.reduce_axis(4, "a"), te.reduce_axis(5, "b")
    x, y, z = te.reduce_axis(3, "x"), te.reduce_axis(4, "y"), te.reduce_axis(5, "z")
    p, q = te.reduce_axis(3, "p"), te.reduce_axis(5, "q")
    S = te.compute((3,), lambda i: te.sum(X[i, a, b], axis=[a, b]), name="S")
    M = te.compute((1,), lambda i: te.max(X[x, y, z], axis=[x, y, z]), name="M")
    N = te.compute((4,), lambda j: te.min(X[p, j, q], axis=[p, q]), name="N")
    return [S, M, N]


def depth_to_space() -> list[te.Tensor]:
    X = te.placeholder((1, 8, 3, 5), name="X")
    return [te.compute((1, 2, 6, 10), lambda n, c, h, w: X[n, c * 4 + (h % 2) * 2 + w % 2,
                                                             h // 2, w // 2], name="Y")]


def half_gemm(dtype: str) -> Callable[[], list[te.Tensor]]:
    def build() -> list[te.Tensor]:
        return gemm(7, 19, 11, dtype)
    return build


def half_elementwise() -> list[te.Tensor]:
    A = te.placeholder((3, 21), "float16", name="A")
    B = te.placeholder((21,), "bfloat16", name="B")
    H = te.compute((3, 21), lambda i, j: A[i, j] * 3.3 + A[i, j].astype("float16"), name="H")
    return [te.compute((3, 21), lambda i, j: (H[i, j].astype("float32") + B[j].astype(
        "float32") * 0.1).astype("bfloat16"), name="G")]


def int8_wrap() -> list[te.Tensor]:
    A = te.placeholder((29,), "int8", name="A")
    return [te.compute((29,), lambda i: A[i] * A[i] + A[i], name="B"),
            te.compute((29,), lambda i: (A[i].astype("int32") * 3) // 7 + A[i].astype(
                "int32") % 5, name="Q")]


def elementwise_select() -> list[te.Tensor]:
    A = te.placeholder((6, 18), name="A")
    Bias = te.placeholder((18,), name="Bias")
    L = te.compute((6, 18), lambda i, j: te.select(A[i, j] > 0.0, A[i, j], A[i, j] * 0.1)
                   + Bias[j], name="L")
    G = te.compute((6, 18), lambda i, j: 0.5 * L[i, j] * (1.0 + te.erf(L[i, j] * 0.70710678))
                   + te.sigmoid(L[i, j]) - te.tanh(L[i, j]), name="G")
    F = te.compute((6, 18), lambda i, j: te.sqrt(abs(G[i, j]) + 1.0) + te.log(
        abs(G[i, j]) + 1.0) + te.exp(-abs(G[i, j])), name="F")
    return [F]


def shifted_pad() -> list[te.Tensor]:
    A = te.placeholder((7,), name="A")
    return [te.compute((11,), lambda i: te.select((i >= 2) & (i < 9), A[i - 2], -1.0), name="P")]


def casts() -> list[te.Tensor]:
    A = te.placeholder((13,), name="A")
    return [te.compute((13,), lambda i: (A[i] * 100.0).astype("int8").astype("int32") +
                       (A[i] * 1e6).astype("int32") % 11 - i, name="K")]


COMPUTES: dict[str, Callable[[], list[te.Tensor]]] = {
    "gemm_17x23x5": gemm,
    "gemm_int8_int32": gemm_int8,
    "dot_to_1x1": dot_to_scalar,
    "conv2d_pad": conv2d_padded,
    "softmax_5_primitives": softmax,
    "multi_axis_reductions": multi_axis_reductions,
    "depth_to_space": depth_to_space,
    "gemm_float16": half_gemm("float16"),
    "gemm_bfloat16": half_gemm("bfloat16"),
    "half_elementwise": half_elementwise,
    "int8_wrap": int8_wrap,
    "elementwise_select": elementwise_select,
    "shifted_pad": shifted_pad,
    "casts": casts,
}


@pytest.mark.parametrize("options_name", list(OPTIONS))
@pytest.mark.parametrize("compute_name", list(COMPUTES))
def test_lowered_kernels_match_reference(compute_name: str, options_name: str) -> None:
    outputs = COMPUTES[compute_name]()
    graph = Graph.from_outputs(outputs)
    inputs = _inputs(graph)
    got = _run_lowered(graph, OPTIONS[options_name], inputs)
    expected = tc.reference.run(graph, inputs=inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for tensor, want in zip(graph.outputs, expected):
        result = got[tensor.name]
        assert result.dtype == tensor.dtype.numpy
        np.testing.assert_allclose(result.astype(np.float64), want.astype(np.float64),
                                   err_msg=f"{compute_name}/{tensor.name}",
                                   **_tolerance(tensor.dtype))


def test_gemm_matches_numpy_directly() -> None:
    (C,) = gemm()
    a, b = _random((17, 5), "float32"), _random((5, 23), "float32")
    kernel = lower_compute(C, OPTIONS["vec16-par"])
    out = run_kernels([kernel], {"A": a, "B": b})["C"]
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_half_reduction_accumulates_in_float32() -> None:
    # 4096 ones: a float16 accumulator would stop at 2048; float32 accumulation gets 4096
    A = te.placeholder((2, 4096), "float16", name="A")
    r = te.reduce_axis(4096, name="r")
    S = te.compute((2,), lambda i: te.sum(A[i, r], axis=r), name="S")
    for options in OPTIONS.values():
        out = run_kernels([lower_compute(S, options)], {"A": np.ones((2, 4096), np.float16)})
        assert out["S"].tolist() == [4096.0, 4096.0]


def test_bfloat16_output_is_rounded_on_store() -> None:
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: (A[i] * 1.0).astype("bfloat16"), name="B")
    a = np.array([1.00390625, 1.01171875, 3.3, -2.2], np.float32)
    out = run_kernels([lower_compute(B, OPTIONS["vec16-par"])], {"A": a})["B"]
    assert out.dtype == ml_dtypes.bfloat16
    assert out.astype(np.float32).tolist() == a.astype(ml_dtypes.bfloat16).astype(
        np.float32).tolist()


def test_int8_accumulation_into_int32_is_exact() -> None:
    (C,) = gemm_int8()
    a = np.full((9, 33), 127, np.int8)
    b = np.full((33, 13), -128, np.int8)
    out = run_kernels([lower_compute(C, OPTIONS["vec4-par4-unroll"])], {"A": a, "B": b})["C"]
    assert (out == 127 * -128 * 33).all()


# random programs --------------------------------------------------------------------------------

@st.composite
def random_computes(draw):
    """A compute over a random shape: an elementwise tree of loads (plain, broadcast, shifted
    under a guard), optionally reduced over a random set of extra axes."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 9)) for _ in range(ndim))
    dtype = draw(st.sampled_from(["float32", "int32", "float16"]))
    reduce_extents = draw(st.lists(st.integers(1, 6), max_size=2))
    X = te.placeholder(shape + tuple(reduce_extents), dtype, name="X")
    Y = te.placeholder((shape[-1],), dtype, name="Y")
    axes = [te.reduce_axis(extent, name=f"r{n}") for n, extent in enumerate(reduce_extents)]
    shift = draw(st.integers(-2, 2))
    op = draw(st.sampled_from(["add", "mul", "max", "select"]))
    reduce_op = draw(st.sampled_from([te.sum, te.max, te.min]))

    def body(*idx):
        x = X[tuple(idx) + tuple(axes)]
        last = idx[-1] + shift
        y = te.select((last >= 0) & (last < shape[-1]), Y[last], Y[idx[-1]])
        value = {"add": lambda: x + y, "mul": lambda: x * y, "max": lambda: te.max(x, y),
                 "select": lambda: te.select(x > y, x, y - x)}[op]()
        return reduce_op(value, axis=axes) if axes else value

    return te.compute(shape, body, name="Z")


@settings(max_examples=40, deadline=None)
@given(random_computes(), st.sampled_from(list(OPTIONS)), st.integers(0, 2**31 - 1))
def test_random_computes_match_reference(Z: te.Tensor, options_name: str, seed: int) -> None:
    graph = Graph.from_outputs([Z])
    rng = np.random.default_rng(seed)
    inputs = {}
    for t in graph.inputs:
        values = rng.integers(-20, 21, size=t.shape) if t.dtype.is_int else \
            rng.standard_normal(t.shape)
        inputs[t.name] = values.astype(t.dtype.numpy)
    got = _run_lowered(graph, OPTIONS[options_name], inputs)["Z"]
    want = tc.reference.run(graph, inputs=inputs)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               **_tolerance(Z.dtype))


# the operator catalog ---------------------------------------------------------------------------

def _catalog_cases() -> list:
    try:
        from tilecraft.ops import catalog
    except ImportError:  # the operator library is optional for these tests
        return []
    return catalog.standard_set()


@pytest.mark.parametrize("case", _catalog_cases(), ids=lambda case: case.id)
def test_standard_operator_set_matches_reference(case) -> None:
    graph, arrays = case.build()
    want = tc.reference.run(graph, inputs=arrays)
    for options in (OPTIONS["vec16-par"], OPTIONS["scalar"]):
        got = run_kernels(lower_graph(graph, options), arrays)
        (output,) = graph.outputs
        np.testing.assert_allclose(got[output.name].astype(np.float64),
                                   want.astype(np.float64), rtol=case.rtol, atol=case.atol)
