"""te computes lowered by tilecraft.lower for this target's spec, compiled and compared with the
reference interpreter (the core's tests run the whole operator catalog the same way)."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.codegen.analysis import walk_stmts

import tilecraft as tc
from tilecraft import te
from tilecraft.kernel_ir.nodes import For, LoopKind
from tilecraft.lower import LoweringOptions, lower_compute
from tilecraft.schedule import Schedule, create_schedule


@pytest.fixture(scope="module")
def options(target):
    return LoweringOptions.from_spec(target.spec)


def _check(native, tensor, options, inputs, schedule: Schedule | None = None, rtol=1e-5,
           atol=1e-5):
    if schedule is None:
        kern = lower_compute(tensor, options)
    else:
        (kern,) = schedule.lower(options, computes=[tensor.name])
    source = native.codegen(kern)
    assert not source.meta["notes"], source.meta["notes"]  # every vector loop vectorised
    arrays = {name: np.array(value, copy=True) for name, value in inputs.items()}
    arrays[tensor.name] = np.zeros(tensor.shape, tensor.dtype.numpy)
    native.load(native.build(source))(arrays)
    expected = tc.reference.run(tensor, **inputs)
    if np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(arrays[tensor.name], expected)
    else:
        np.testing.assert_allclose(arrays[tensor.name].astype(np.float64),
                                   expected.astype(np.float64), rtol=rtol, atol=atol)
    return kern


def test_lowered_gemm_with_odd_sizes(native, options):
    m, k, n = 33, 29, 17
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis(k, name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    rng = np.random.default_rng(21)
    inputs = {"A": rng.standard_normal((m, k)).astype(np.float32),
              "B": rng.standard_normal((k, n)).astype(np.float32)}
    kern = _check(native, C, options, inputs, rtol=1e-4, atol=1e-4)
    kinds = [s.kind for s in walk_stmts(kern.body) if isinstance(s, For)]
    assert kinds[0] is LoopKind.PARALLEL and LoopKind.VECTOR in kinds
    # the reduce axis vectorised instead: lane-wise partial sums into C[i, j]
    vector_k = create_schedule(C, options)
    (i, _), (k,) = vector_k[C].axes, vector_k[C].reduce_axes
    vector_k[C].parallel(i)
    vector_k[C].vectorize(k, lanes=16)
    _check(native, C, options, inputs, vector_k, rtol=1e-4, atol=1e-4)


def test_lowered_reductions_and_activations(native, options):
    rows, cols = 7, 45
    X = te.placeholder((rows, cols), name="X")
    r = te.reduce_axis(cols, name="r")
    M = te.compute((rows,), lambda i: te.max(X[i, r], axis=r), name="M")
    G = te.compute((rows, cols), lambda i, j: X[i, j] * 0.5 * (1.0 + te.erf(X[i, j] * 0.7071)),
                   name="G")
    data = {"X": np.random.default_rng(22).standard_normal((rows, cols)).astype(np.float32)}
    _check(native, M, options, data)
    _check(native, G, options, data, rtol=1e-5, atol=2e-6)


def test_lowered_half_precision_and_int8(native, options):
    n = 50
    H = te.placeholder((3, n), "float16", name="H")
    r = te.reduce_axis(n, name="r")
    S = te.compute((3,), lambda i: te.sum(H[i, r], axis=r), name="S")
    halves = {"H": np.random.default_rng(23).random((3, n)).astype(np.float16)}
    _check(native, S, options, halves, rtol=2e-3, atol=2e-3)
    Q = te.placeholder((4, 37), "int8", name="Q")
    W = te.compute((4, 37), lambda i, j: Q[i, j] * 3 + Q[i, (j + 1) % 37] // 2, name="W")
    ints = {"Q": np.random.default_rng(24).integers(-128, 128, (4, 37)).astype(np.int8)}
    _check(native, W, options, ints)


def test_compiled_graph_through_tilecraft_compile(native):
    from tilecraft import ops

    X = te.placeholder((6, 19), name="X")
    Y = ops.softmax(ops.relu(X), axis=1)
    exe = tc.compile(tc.Graph.from_outputs([Y]), target=native)
    data = np.random.default_rng(25).standard_normal((6, 19)).astype(np.float32)
    np.testing.assert_allclose(exe(X=data), tc.reference.run(Y, X=data), rtol=1e-5, atol=1e-6)
