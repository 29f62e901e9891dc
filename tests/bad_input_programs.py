"""Programs, arrays and numpy references of tests/test_bad_inputs.py.

Executables are compiled once per test session (``functools.cache``); every array maker draws
from :data:`RNG`, every IEEE case from a generator seeded by its shape, so a row's values do not
depend on which rows ran before it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

import tilecraft as tc
from tilecraft import ops, te

RNG = np.random.default_rng(10)


@cache
def scale_add() -> tc.Executable:
    """C[i, j] = A[i, j] * 2 + B[i, j] on (6, 40): an elementwise kernel with vector tails."""
    A = te.placeholder((6, 40), name="A")
    B = te.placeholder((6, 40), name="B")
    C = te.compute((6, 40), lambda i, j: A[i, j] * 2.0 + B[i, j], name="C")
    return tc.compile(C, target="x86_avx512")


@cache
def matmul() -> tc.Executable:
    """A (33, 20) @ (20, 47): the GEMM template path."""
    A = te.placeholder((33, 20), name="A")
    B = te.placeholder((20, 47), name="B")
    return tc.compile(ops.matmul(A, B, name="C"), target="x86_avx512")


@cache
def softmax(shape: tuple[int, ...], axis: int) -> tc.Executable:
    return tc.compile(ops.softmax(te.placeholder(shape, name="X"), axis=axis, name="Y"),
                      target="x86_avx512")


@cache
def layer_norm(shape: tuple[int, ...]) -> tc.Executable:
    return tc.compile(ops.layer_norm(te.placeholder(shape, name="X"), name="Y"),
                      target="x86_avx512")


@cache
def attention_row() -> tc.Executable:
    """softmax(Q @ K) @ V: the fused GEMM chain with softmax in the middle."""
    Q = te.placeholder((16, 32), name="Q")
    K = te.placeholder((32, 24), name="K")
    V = te.placeholder((24, 32), name="V")
    S = ops.matmul(Q, K, name="S")
    return tc.compile(ops.matmul(ops.softmax(S, name="P"), V, name="O"), target="x86_avx512")


def passed_through() -> tuple[np.ndarray, np.ndarray]:
    """A graph whose output is its input: the result must not be the caller's array."""
    A = te.placeholder((6, 40), name="A")
    B = te.compute((6, 40), lambda i, j: A[i, j] + 1.0, name="B")
    a = a6x40()
    kept = a.copy()
    out_a, out_b = tc.compile(tc.Graph.from_outputs([A, B]), target="x86_avx512")(a)
    assert out_a is not a and not np.shares_memory(out_a, a)
    out_a[...] = 0.0  # the caller's input is untouched
    return np.concatenate([a, out_b]), np.concatenate([kept, kept + 1])


def a6x40() -> np.ndarray:
    return RNG.standard_normal((6, 40)).astype(np.float32)


def scale_add_with(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return scale_add()(a, b), a.astype(np.float32) * 2 + b


def matmul_with(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return matmul()(a, b), np.asarray(a, np.float64) @ np.asarray(b, np.float64)


def strided(shape: tuple[int, ...], step: int = 2) -> np.ndarray:
    """A view of ``shape`` whose every dimension steps over ``step`` elements."""
    big = RNG.standard_normal(tuple(n * step for n in shape)).astype(np.float32)
    return big[tuple(slice(None, None, step) for _ in shape)]


def read_only(array: np.ndarray) -> np.ndarray:
    array = array.copy()
    array.flags.writeable = False
    return array


def misaligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``array`` that starts one byte past an aligned address."""
    raw = np.zeros(array.nbytes + 1, np.uint8)[1:]
    view = raw.view(array.dtype).reshape(array.shape)
    view[...] = array
    assert not view.flags.aligned
    return view


def specials(shape: tuple[int, int]) -> np.ndarray:
    """Rows of: a NaN; +inf; -inf; all -inf; huge values; a constant; NaN and inf mixed.

    The huge values (|x| < 5e35) square to inf, but no sum of up to 256 of them overflows in
    any order: near float32's limit a sum's overflow depends on the order of its terms, which
    neither numpy nor a vectorized kernel promises."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    patterns = [
        lambda row: row.__setitem__(3, np.nan),
        lambda row: row.__setitem__(1, np.inf),
        lambda row: row.__setitem__(slice(0, None, 5), -np.inf),
        lambda row: row.__setitem__(slice(None), -np.inf),
        lambda row: row.__setitem__(slice(None), row * np.float32(1e35)),
        lambda row: row.__setitem__(slice(None), np.float32(7.0)),
        lambda row: (row.__setitem__(0, np.inf), row.__setitem__(2, np.nan)),
    ]
    for index in range(shape[0]):
        patterns[index % len(patterns)](x[index])
    return x


def numpy_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        shifted = x - x.max(axis=axis, keepdims=True)
        e = np.exp(shifted)
        return e / e.sum(axis=axis, keepdims=True)


def numpy_layer_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    with np.errstate(all="ignore"):
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return ((x - mean) / np.sqrt(var + np.float32(eps))).astype(np.float32)


def softmax_case(shape: tuple[int, int], axis: int) -> tuple[np.ndarray, np.ndarray]:
    x = specials(shape if axis in (-1, 1) else shape[::-1])
    x = x if axis in (-1, 1) else np.ascontiguousarray(x.T)
    got = softmax(shape, axis)(x)
    reference = tc.reference.run(softmax(shape, axis).graph, X=x)
    assert_ieee_equal(reference, numpy_softmax(x, axis), 1e-5)
    return got, numpy_softmax(x, axis)


def layer_norm_case(shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    x = specials(shape)
    got = layer_norm(shape)(x)
    assert_ieee_equal(tc.reference.run(layer_norm(shape).graph, X=x), numpy_layer_norm(x), 1e-4)
    return got, numpy_layer_norm(x)


def attention_case() -> tuple[np.ndarray, np.ndarray]:
    q = RNG.standard_normal((16, 32)).astype(np.float32)
    k = RNG.standard_normal((32, 24)).astype(np.float32)
    v = RNG.standard_normal((24, 32)).astype(np.float32)
    q[2, 5] = np.nan      # row 2 of the scores is NaN
    q[7, 0] = np.inf      # row 7 holds +inf and -inf scores: NaN after the max shift
    k[:, 11] = -np.inf    # column 11: -inf scores in every row (row 7 aside)
    k[3, 11] = 0.0
    with np.errstate(all="ignore"):
        scores = q.astype(np.float64) @ k
        want = numpy_softmax(scores, -1) @ v
    return attention_row()(q, k, v), want


def specials_through(build: Callable[[te.Tensor], te.Tensor],
                     numpy_op: Callable[[np.ndarray], np.ndarray],
                     shape: tuple[int, ...] = (14, 37)) -> tuple[np.ndarray, np.ndarray]:
    """``build`` compiled and run on :func:`specials` (reshaped to ``shape``), against numpy
    and the reference interpreter."""
    x = specials((14, 37)).reshape(shape)
    output = build(te.placeholder(shape, name="X"))
    with np.errstate(all="ignore"):
        want = numpy_op(x)
    assert_ieee_equal(tc.reference.run(output, X=x), want, 1e-6)
    return tc.compile(output, target="x86_avx512")(x), want


def numpy_max_pool(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x[:, :, :h - h % 2, :w - w % 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


HUGE = 1 << 20  # an outer product of two 4 MiB vectors: a 4 TiB result


@cache
def outer_product() -> tc.Executable:
    X = te.placeholder((HUGE,), name="X")
    Y = te.compute((HUGE, HUGE), lambda i, j: X[i] * X[j], name="Y")
    return tc.compile(Y, target="x86_avx512")


@cache
def huge_identity() -> tc.Executable:
    """Y = X + 1 on (HUGE, HUGE): compiled, never called with a real 4 TiB array."""
    X = te.placeholder((HUGE, HUGE), name="X")
    return tc.compile(te.compute((HUGE, HUGE), lambda i, j: X[i, j] + 1.0, name="Y"),
                      target="x86_avx512")


def ones_huge() -> np.ndarray:
    return np.ones(HUGE, np.float32)


@cache
def int8_conv() -> te.Tensor:
    x = te.placeholder((1, 4, 6, 6), "uint8", name="x")
    w = te.placeholder((8, 4, 3, 3), "int8", name="w")
    return ops.conv2d(x, w, out_dtype="int32", name="y")


def assert_ieee_equal(got: np.ndarray, want: np.ndarray, tolerance: float) -> None:
    """Equal within ``tolerance``; NaN exactly where ``want`` has NaN, the same infinities."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN positions")
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want), err_msg="+inf positions")
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want), err_msg="-inf positions")
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite].astype(np.float64), want[finite].astype(np.float64),
                               rtol=tolerance, atol=tolerance)


@cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii") as handle:
            return frozenset(next((line.split(":", 1)[1].split() for line in handle
                                   if line.startswith("flags")), []))
    except OSError:
        return frozenset()
