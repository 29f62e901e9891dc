"""Each declared Tensor Core intrinsic's semantics (its te program, run by the reference
interpreter) against numpy: Dst += Src1 @ Src2 in the accumulator's type."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from tilecraft_nvidia_tc.target import load_target_spec

from tilecraft.target.intrinsic import IntrinsicDecl

SPEC = load_target_spec()


def random_operand(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]
                   ) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("intrinsic", SPEC.intrinsics, ids=lambda i: i.name)
def test_semantics_is_accumulating_matmul(intrinsic: IntrinsicDecl) -> None:
    compute = intrinsic.compute
    src1, src2, dst = compute.operands
    assert (src1.index, src2.index, dst.index) == (("i1", "r1"), ("r1", "i2"), ("i1", "i2"))
    assert compute.accumulates
    rng = np.random.default_rng(len(intrinsic.name))
    a = random_operand(rng, src1.dtype.numpy, src1.shape)
    b = random_operand(rng, src2.dtype.numpy, src2.shape)
    c = random_operand(rng, dst.dtype.numpy, dst.shape)
    if dst.dtype.value == "int32":
        c //= 4  # keep clear of int32 overflow: wrapping is not what this test checks
        expected = c + a.astype(np.int64) @ b.astype(np.int64)
    else:
        expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    got = c.copy()
    intrinsic.reference(a, b, got)
    if dst.dtype.value == "int32":
        np.testing.assert_array_equal(got, expected)
    elif dst.dtype.value == "float16":
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-3, atol=2e-2)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_bf16_inputs_are_exact_products_in_fp32() -> None:
    wmma = SPEC.intrinsic("wmma_m16n16k16_bf16_f32")
    a = np.full((16, 16), 1 + 2 ** -7, ml_dtypes.bfloat16)  # smallest step above 1 in bf16
    b = np.eye(16, dtype=ml_dtypes.bfloat16)
    c = np.zeros((16, 16), np.float32)
    wmma.reference(a, b, c)
    np.testing.assert_array_equal(c, np.full((16, 16), 1 + 2 ** -7, np.float32))


def test_fill_then_three_k_steps_make_a_gemm() -> None:
    """The accumulator filled with 0 in the fragment, then K=48 as three mma_sync steps."""
    wmma = SPEC.intrinsic("wmma_m32n8k16_f16_f32")
    assert wmma.memory.fills[0].instruction == "fill_fragment"
    rng = np.random.default_rng(3)
    a = rng.standard_normal((32, 48)).astype(np.float16)
    b = rng.standard_normal((48, 8)).astype(np.float16)
    acc = np.zeros((32, 8), np.float32)
    for k in range(0, 48, 16):
        wmma.reference(a[:, k:k + 16], b[k:k + 16, :], acc)
    np.testing.assert_allclose(acc, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5,
                               atol=1e-4)
