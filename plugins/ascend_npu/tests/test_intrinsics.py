"""Each declared Ascend intrinsic's semantics (its te program, run by the reference
interpreter) against numpy."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from tilecraft_ascend_npu.target import load_target_spec

SPEC = load_target_spec()
RNG = np.random.default_rng(11)


def f32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32)


ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "vadd": lambda a, b: f32(a) + f32(b), "vsub": lambda a, b: f32(a) - f32(b),
    "vmul": lambda a, b: f32(a) * f32(b), "vmax": lambda a, b: np.maximum(a, b),
    "vmin": lambda a, b: np.minimum(a, b), "vexp": lambda a: np.exp(f32(a)),
    "vln": lambda a: np.log(f32(a)), "vabs": lambda a: np.abs(a),
    "vrelu": lambda a: np.maximum(a, 0),
}
ELEMENTWISE_NAMES = [i.name for i in SPEC.intrinsics if i.name.split("_")[0] in ELEMENTWISE]


@pytest.mark.parametrize("name", ELEMENTWISE_NAMES)
def test_elementwise_vector_ops(name: str) -> None:
    intrinsic = SPEC.intrinsic(name)
    *sources, dst = intrinsic.compute.operands
    dtype = dst.dtype.numpy
    inputs = [RNG.standard_normal(op.shape).astype(dtype) for op in sources]
    if name.startswith("vln"):
        inputs = [np.abs(x) + dtype.type(0.5) for x in inputs]
    out = np.zeros(dst.shape, dtype)
    intrinsic.reference(*inputs, out)
    expected = ELEMENTWISE[name.split("_")[0]](*inputs).astype(dtype)  # rounded on store
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=0)


def test_conversions() -> None:
    x = RNG.standard_normal(64).astype(np.float32) * 1000
    half = np.zeros(64, np.float16)
    SPEC.intrinsic("vconv_f322f16").reference(x, half)
    np.testing.assert_array_equal(half, x.astype(np.float16))
    back = np.zeros(64, np.float32)
    SPEC.intrinsic("vconv_f162f32").reference(half, back)
    np.testing.assert_array_equal(back, half.astype(np.float32))


@pytest.mark.parametrize(("name", "reduce"), [("vcadd_f16", np.sum), ("vcmax_f16", np.max),
                                              ("vcmin_f16", np.min)])
def test_repeat_reductions(name: str, reduce: Callable[..., np.ndarray]) -> None:
    x = RNG.standard_normal(128).astype(np.float16)
    out = np.zeros(1, np.float16)
    SPEC.intrinsic(name).reference(x, out)
    expected = reduce(x.astype(np.float32)).astype(np.float16)  # one rounding, at the end
    np.testing.assert_array_equal(out, [expected])


@pytest.mark.parametrize(("name", "reduce"), [("vcgadd_f16", np.sum), ("vcgmax_f16", np.max)])
def test_block_reductions(name: str, reduce: Callable[..., np.ndarray]) -> None:
    x = RNG.standard_normal((8, 16)).astype(np.float16)
    out = np.zeros(8, np.float16)
    SPEC.intrinsic(name).reference(x, out)
    np.testing.assert_array_equal(out, reduce(x.astype(np.float32), axis=1).astype(np.float16))


def test_mad_is_one_fractal_step_of_eq_3_5() -> None:
    """C[m1, n1, m2, n2] += A[m1, k1, m2, k2] * B[k1, n1, n2, k2], one (m1, n1, k1) at a time."""
    m1s, n1s, k1s = 3, 2, 5
    a = RNG.standard_normal((m1s, k1s, 16, 16)).astype(np.float16)
    b = RNG.standard_normal((k1s, n1s, 16, 16)).astype(np.float16)
    c = RNG.standard_normal((m1s, n1s, 16, 16)).astype(np.float32)
    expected = c + np.einsum("mkac,knbc->mnab", f32(a), f32(b))
    mad = SPEC.intrinsic("mad_f16_f32")
    for m1 in range(m1s):
        for n1 in range(n1s):
            for k1 in range(k1s):
                mad.reference(a[m1, k1], b[k1, n1], c[m1, n1])
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4)


def test_int8_mad() -> None:
    a = RNG.integers(-128, 128, (16, 32), dtype=np.int8)
    b = RNG.integers(-128, 128, (16, 32), dtype=np.int8)
    c = RNG.integers(-1000, 1000, (16, 16), dtype=np.int32)
    expected = c + a.astype(np.int32) @ b.astype(np.int32).T
    SPEC.intrinsic("mad_s8_s32").reference(a, b, c)
    np.testing.assert_array_equal(c, expected)
