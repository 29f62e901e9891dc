"""The cheap per-call path of NativeKernel and Executable keeps every check: arrays the
fast test does not accept go through the detailed checks, which still accept ndarray subclasses
and still reject overlapping, read-only, wrongly typed or non-contiguous arrays."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_x86_avx512.runtime import data_address
from tilecraft_x86_avx512.target import X86Avx512Target
from x86_kernels import buffer, kernel, load, loop, store, vloop

import tilecraft as tc
from tilecraft import ops, te
from tilecraft.errors import InputError
from tilecraft.te import Var


@pytest.fixture(scope="module")
def add(native):
    a, b, c = buffer("A", (4, 5)), buffer("B", (4, 5)), buffer("C", (4, 5))
    i, j = Var("i"), Var("j")
    return native.compile_kernel(kernel("add", [a, b, c], ["C"], loop(i, 4, vloop(j, 5, store(
        c, (i, j), load(a, i, j) + load(b, i, j))))))


def test_data_address_matches_numpy():
    base = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    for array in (base, base[1], base[2, 3:], base[:, ::2], np.empty(0, np.int8), base.T):
        assert data_address(array) == array.ctypes.data


def test_overlap_is_checked_by_exact_byte_ranges(add):
    storage = np.arange(60, dtype=np.float32)
    b = np.ones((4, 5), np.float32)
    one_element_shared = {"A": storage[19:39].reshape(4, 5), "B": b,
                          "C": storage[0:20].reshape(4, 5)}
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps .*'A'"):
        add(one_element_shared)
    adjacent = {"A": storage[20:40].reshape(4, 5), "B": b, "C": storage[0:20].reshape(4, 5)}
    add(adjacent)
    np.testing.assert_array_equal(storage[:20], np.arange(20, 40, dtype=np.float32) + 1)
    with pytest.raises(InputError, match="'C', which the kernel writes, overlaps .*'B'"):
        add({"A": np.ones((4, 5), np.float32), "B": b, "C": b})


def test_slow_path_accepts_what_it_always_accepted(add):
    class Tagged(np.ndarray):
        pass

    a = np.full((4, 5), 3, np.float32).view(Tagged)
    c = np.zeros((4, 5), np.float32).view(Tagged)
    add({"A": a, "B": np.ones((4, 5), np.float32), "C": c})
    np.testing.assert_array_equal(np.asarray(c), np.full((4, 5), 4, np.float32))
    big_endian = np.ones((4, 5), ">f4")
    with pytest.raises(InputError, match="'B' must have dtype float32, got >f4"):
        add({"A": a, "B": big_endian, "C": c})
    add.run_range({"A": a, "B": np.ones((4, 5), np.float32), "C": c}, 0, 0)
    with pytest.raises(InputError, match="'C' is not C-contiguous"):
        add.run_range({"A": a, "B": a, "C": np.zeros((5, 4), np.float32).T}, 0, 0)


@pytest.fixture(scope="module")
def gemm(native):
    A = te.placeholder((33, 20), "uint8", name="A")
    B = te.placeholder((20, 17), "int8", name="B")
    return tc.compile(ops.matmul(A, B, out_dtype="int32", name="C"),
                      target=X86Avx512Target(threads=2))


def test_executable_repeated_calls_bind_each_input(gemm):
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (33, 20)).astype(np.uint8)
    b = rng.integers(-128, 128, (20, 17)).astype(np.int8)
    expected = a.astype(np.int32) @ b.astype(np.int32)
    first = gemm(a, b)
    second = gemm(B=b, A=a)
    assert first is not second  # fresh outputs every call
    np.testing.assert_array_equal(first, expected)
    np.testing.assert_array_equal(second, expected)
    a_strided = np.asfortranarray(a)  # not C-contiguous: copied, not rejected
    np.testing.assert_array_equal(gemm(a_strided, b), expected)
    b2 = rng.integers(-128, 128, (20, 17)).astype(np.int8)  # workspaces refilled per call
    np.testing.assert_array_equal(gemm(a, b2), a.astype(np.int32) @ b2.astype(np.int32))
    assert all(len(k.run_seconds) >= 4 for k in gemm.report.kernels)
    with pytest.raises(InputError, match="input 'B' has dtype uint8, expected int8"):
        gemm(a, b.view(np.uint8))
    with pytest.raises(InputError, match=r"input 'A' has shape \(20, 33\), expected \(33, 20\)"):
        gemm(a.T.copy(), b)
    with pytest.raises(InputError, match="unknown input"):
        gemm(A=a, C=b)
    with pytest.raises(InputError, match="missing input"):
        gemm(a)
    with pytest.raises(InputError, match="must be a numpy array"):
        gemm(a, b.tolist())
