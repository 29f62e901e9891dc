"""Defects the random-program fuzzer (tests/test_random_programs.py) found, each reduced to a
minimal program, compiled for the host and compared with the reference interpreter.

Each test names the defect; its docstring gives the symptom and the cause that was fixed.
"""

from __future__ import annotations

import numpy as np
import pytest

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.reference import run


@pytest.fixture(scope="module")
def native():
    from tilecraft.target.registry import get_target

    availability = get_target("x86_avx512").available()
    if not availability.execute:
        pytest.skip(f"x86_avx512 cannot execute here: {availability.explain()}")


def _check(outputs, inputs, exact=False, rtol=2e-5, atol=2e-5):
    graph = tc.Graph.from_outputs(outputs)
    exe = tc.compile(graph, target="x86_avx512")
    got, want = exe(**inputs), run(graph, inputs)
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return exe


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_guard_over_a_fused_loop_index_is_understood(native, dtype):
    """``E[i, j, k] = select(i + 2 < 7, X[select(i + 2 < 7, i + 2, 0), j, k], 0)``: the default
    schedule fuses ``i`` and ``j`` (``i = ij // 2``), and the kernel verifier then refused the
    kernel ("index 0 of X ... ranges over [0, 8]"): guard facts were only drawn from affine
    comparisons, and ``ij // 2 + 2 < 7`` is not affine. Fixed in te/bounds.py: a guard's
    non-affine integer operations are taken whole, as atoms the guard narrows."""
    X = te.placeholder((7, 2, 19), dtype, name="X")

    def body(i, j, k):
        inside = (i + 2 >= 0) & (i + 2 < 7)
        return te.select(inside, X[te.select(inside, i + 2, 0), j, k], te.const(0, dtype))

    E = te.compute((7, 2, 19), body, name="E")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((7, 2, 19)) * 20).astype(dtype)
    _check([E], {"X": x}, exact=True)


def test_guard_with_mod_of_a_fused_index(native):
    """The same through ``%``: a shift of the inner fused axis, ``(ij % 33) - 1 >= 0``."""
    X = te.placeholder((2, 33, 5), name="X")

    def body(i, j, k):
        inside = (j - 1 >= 0) & (j - 1 < 33)
        return te.select(inside, X[i, te.select(inside, j - 1, 0), k], 0.0)

    E = te.compute((2, 33, 5), body, name="E")
    x = np.random.default_rng(1).standard_normal((2, 33, 5)).astype(np.float32)
    _check([E], {"X": x}, exact=True)


def test_fused_gemm_chain_with_a_bias_between(native):
    """``T = A @ B; M = leaky(T + bias[l]); E = M @ D``: the chain fuses, and lowering it
    crashed with ``KeyError: Tensor('bias', ...)`` — the fused kernel declared the bias as a
    parameter but the memory-bound computes were lowered without any placeholder buffers.
    Fixed in the x86 plugin's blocking/contraction_chain.py: ``between_inputs`` makes the
    buffers once, for both."""
    A = te.placeholder((2, 131, 48), name="A")
    B = te.placeholder((2, 48, 41), name="B")
    bias = te.placeholder((41,), name="bias")
    D = te.placeholder((2, 41, 17), name="D")
    T = ops.batch_matmul(A, B, name="T")

    def middle(b, i, j):
        value = T[b, i, j] + bias[j]
        return te.select(value > 0.0, value, value * 0.01)

    E = ops.batch_matmul(te.compute(T.shape, middle, name="M"), D, name="E")
    rng = np.random.default_rng(2)
    inputs = {t.name: rng.standard_normal(t.shape).astype(np.float32) * 0.5
              for t in (A, B, bias, D)}
    exe = _check([E], inputs, rtol=1e-4, atol=1e-4)
    assert any(note.startswith("fused T -> M -> E") for note in exe.report.notes), \
        exe.report.notes


def test_int8_gemm_whose_best_tile_has_30_rows(native):
    """uint8 (59 x 93) @ int8 (93 x 16): compiling raised ``TargetError: micro-kernel
    vnni_u8s8: parameter MI = 30 is above the maximum 28`` — the dot-product template's tile
    search ranked register tiles up to 31 rows (one 16-column panel leaves 30 accumulators)
    without the micro-kernels' limit, as the float32 template once did. Fixed in the x86
    plugin's gemm_template.py (``_grouped_tile`` keeps tiles within every dot-product
    micro-kernel's MI maximum)."""
    A = te.placeholder((59, 93), "uint8", name="A")
    B = te.placeholder((93, 16), "int8", name="B")
    C = ops.matmul(A, B, out_dtype="int32", name="C")
    rng = np.random.default_rng(3)
    inputs = {"A": rng.integers(0, 256, (59, 93)).astype(np.uint8),
              "B": rng.integers(-128, 128, (93, 16)).astype(np.int8)}
    _check([C], inputs, exact=True)


def test_bf16_gemm_whose_best_tile_has_30_rows(native):
    """The same tile search for bfloat16 (``dot_bf16``)."""
    import ml_dtypes

    A = te.placeholder((59, 93), "bfloat16", name="A")
    B = te.placeholder((93, 16), "bfloat16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    rng = np.random.default_rng(4)
    inputs = {name: rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
              for name, shape in (("A", (59, 93)), ("B", (93, 16)))}
    _check([C], inputs, rtol=1e-4, atol=1e-4)
