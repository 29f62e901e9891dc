"""The ascend_npu target object: honest availability, and emulation of Kernel IR that moves
data along the copy path GM -> L1 -> L0A/L0B -> (Cube mad) -> L0C -> UB -> GM and runs
vector-unit repeats on the Unified Buffer."""

from __future__ import annotations

import numpy as np
import pytest
from tilecraft_ascend_npu.target import TARGET_NAME, AscendNpuTarget

from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError
from tilecraft.kernel_ir import (
    Allocate,
    Buffer,
    Copy,
    For,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Store,
)
from tilecraft.target import Capability, get_target
from tilecraft.te import Var, const

F = 16  # fractal size


@pytest.fixture(scope="module")
def target() -> AscendNpuTarget:
    return AscendNpuTarget()


def test_discovered_and_honest_about_what_it_cannot_do(target: AscendNpuTarget) -> None:
    assert isinstance(get_target(TARGET_NAME), AscendNpuTarget)
    availability = target.available()
    assert availability.capability is Capability.EMULATE
    assert availability.codegen and availability.emulate
    assert not availability.build and not availability.execute
    assert "no CANN / AscendC toolchain" in availability.reasons["build"]
    assert set(availability.reasons) == {"build", "execute"}
    assert availability.estimate
    kernel = Kernel("k", (), (), Seq(()))
    assert target.codegen(kernel).language == "ascendc"
    # an empty kernel costs the GM latency that starts any kernel, nothing more
    assert target.estimate(kernel).seconds == pytest.approx(500 / 1e9)


def cube_gemm_kernel(m1s: int, n1s: int, k1s: int, b_level: str = "L0B") -> Kernel:
    """Eq. 3.5 on fractal-blocked operands: A[m1, k1] and B[k1, n1] (each a 16x16 fractal,
    B's n2-major) stored as rows of fractals, C[m1, n1] likewise."""
    # the buffers are declared as rows of fractals, so relative to these shapes every layout
    # is zZ (blocks and their elements row-major); B's fractals hold [n2, k2], the Cube's
    # n-major right operand
    a = Buffer("A", (m1s * k1s * F, F), DType.FLOAT16, level="GM", layout="fractal_zZ")
    b = Buffer("B", (k1s * n1s * F, F), DType.FLOAT16, level="GM", layout="fractal_zZ")
    c = Buffer("C", (m1s * n1s * F, F), DType.FLOAT32, level="GM", layout="fractal_zZ")
    a_l1 = Buffer("a_l1", a.shape, DType.FLOAT16, level="L1")
    b_l1 = Buffer("b_l1", b.shape, DType.FLOAT16, level="L1")
    a_l0 = Buffer("a_l0", (F, F), DType.FLOAT16, level="L0A")
    b_l0 = Buffer("b_l0", (F, F), DType.FLOAT16, level=b_level)
    c_l0 = Buffer("c_l0", (F, F), DType.FLOAT32, level="L0C")
    c_ub = Buffer("c_ub", (F, F), DType.FLOAT32, level="UB")
    m1, n1, k1, i, j = Var("m1"), Var("n1"), Var("k1"), Var("i"), Var("j")
    zero = (const(0), const(0))
    frac = (F, F)
    init = For(i, const(F), LoopKind.SERIAL,
               For(j, const(F), LoopKind.SERIAL, Store(c_l0, (i, j), const(0.0))))
    k_step = Seq((
        Copy(Region(a_l0, zero, frac), Region(a_l1, ((m1 * k1s + k1) * F, const(0)), frac)),
        Copy(Region(b_l0, zero, frac), Region(b_l1, ((k1 * n1s + n1) * F, const(0)), frac)),
        IntrinsicCall("mad_f16_f32", (Region(a_l0, zero, frac), Region(b_l0, zero, frac),
                                      Region(c_l0, zero, frac)))))
    tile = Allocate(c_l0, Allocate(c_ub, Allocate(a_l0, Allocate(b_l0, Seq((
        init,
        For(k1, const(k1s), LoopKind.SERIAL, k_step),
        Copy(Region(c_ub, zero, frac), Region(c_l0, zero, frac)),
        Copy(Region(c, ((m1 * n1s + n1) * F, const(0)), frac), Region(c_ub, zero, frac))))))))
    body = Allocate(a_l1, Allocate(b_l1, Seq((
        Copy(Region(a_l1, zero, a.shape), Region(a, zero, a.shape)),
        Copy(Region(b_l1, zero, b.shape), Region(b, zero, b.shape)),
        For(m1, const(m1s), LoopKind.BOUND,
            For(n1, const(n1s), LoopKind.SERIAL, tile), axis="block_idx")))))
    return Kernel("cube_gemm", (a, b, c), ("C",), body)


@pytest.mark.parametrize(("m1s", "n1s", "k1s"), [(3, 2, 5), (1, 1, 1), (2, 3, 1)])
def test_emulated_cube_gemm_is_eq_3_5(target: AscendNpuTarget, m1s: int, n1s: int,
                                      k1s: int) -> None:
    rng = np.random.default_rng(5)
    a4 = rng.standard_normal((m1s, k1s, F, F)).astype(np.float16)
    b4 = rng.standard_normal((k1s, n1s, F, F)).astype(np.float16)
    arrays = {"A": a4.reshape(-1, F), "B": b4.reshape(-1, F),
              "C": np.zeros((m1s * n1s * F, F), np.float32)}
    target.emulate(cube_gemm_kernel(m1s, n1s, k1s), arrays)
    expected = np.einsum("mkac,knbc->mnab", a4.astype(np.float32), b4.astype(np.float32))
    np.testing.assert_allclose(arrays["C"].reshape(m1s, n1s, F, F), expected, rtol=1e-5,
                               atol=1e-4)


def vector_kernel(repeats: int, intrinsic: str, out_lanes: int = 128) -> Kernel:
    """One vector-unit repeat per 128 fp16 elements: GM -> UB, the intrinsic, UB -> GM."""
    x = Buffer("x", (repeats * 128,), DType.FLOAT16, level="GM")
    y = Buffer("y", (repeats * out_lanes,), DType.FLOAT16, level="GM")
    x_ub = Buffer("x_ub", (128,), DType.FLOAT16, level="UB")
    y_ub = Buffer("y_ub", (out_lanes,), DType.FLOAT16, level="UB")
    r = Var("r")
    start = (const(0),)
    body = Allocate(x_ub, Allocate(y_ub, For(r, const(repeats), LoopKind.SERIAL, Seq((
        Copy(Region(x_ub, start, (128,)), Region(x, (r * 128,), (128,))),
        IntrinsicCall(intrinsic, (Region(x_ub, start, (128,)),
                                  Region(y_ub, start, (out_lanes,)))),
        Copy(Region(y, (r * out_lanes,), (out_lanes,)), Region(y_ub, start, (out_lanes,))))))))
    return Kernel(intrinsic + "_kernel", (x, y), ("y",), body)


def test_emulated_relu_and_row_sums(target: AscendNpuTarget) -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal(7 * 128).astype(np.float16)  # 7 repeats: a prime count
    arrays = {"x": x, "y": np.zeros(7 * 128, np.float16)}
    target.emulate(vector_kernel(7, "vrelu_f16"), arrays)
    np.testing.assert_array_equal(arrays["y"], np.maximum(x, 0))
    arrays = {"x": x, "y": np.zeros(7, np.float16)}
    target.emulate(vector_kernel(7, "vcadd_f16", out_lanes=1), arrays)
    expected = x.reshape(7, 128).astype(np.float32).sum(axis=1).astype(np.float16)
    np.testing.assert_array_equal(arrays["y"], expected)


def test_emulation_rejects_what_the_target_does_not_declare(target: AscendNpuTarget) -> None:
    arrays = {"A": np.zeros((F, F), np.float16), "B": np.zeros((F, F), np.float16),
              "C": np.zeros((F, F), np.float32)}
    with pytest.raises(CodegenError, match="buffer b_l0 is in memory level 'L0', which this "
                                           "target does not have"):
        target.emulate(cube_gemm_kernel(1, 1, 1, b_level="L0"), arrays)
    with pytest.raises(CodegenError, match=r"call of intrinsic vcgadd_f16: operand 0 \(Src1\) "
                                           r"is a region of x_ub with extents \(128,\); the "
                                           r"intrinsic declares shape \(8, 16\)"):
        target.emulate(vector_kernel(1, "vcgadd_f16", out_lanes=8),
                       {"x": np.zeros(128, np.float16), "y": np.zeros(8, np.float16)})
