"""The AVX-512 intrinsic declarations (intrinsics.yaml): their semantics against numpy and —
where this CPU has the instructions — against the instructions themselves, called through a
small LLVM IR function; and their memory abstraction."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest
from tilecraft_x86_avx512.host import read_cpuinfo
from tilecraft_x86_avx512.intrinsics import declared_intrinsics
from tilecraft_x86_avx512.target import X86Avx512Target

from tilecraft.dtypes import DType
from tilecraft.kernel_ir import Buffer, For, IntrinsicCall, Kernel, LoopKind, Region, Seq, Store
from tilecraft.target import check_kernel_supported
from tilecraft.te import Var, const

INTRINSICS = {intrinsic.name: intrinsic for intrinsic in declared_intrinsics()}
RNG = np.random.default_rng(512)

PROBES = """
declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)
declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <64 x i8>, <64 x i8>)
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>,
                                                        <32 x bfloat>)
define void @fma(ptr %dst, ptr %a, ptr %b) {
  %c = load <16 x float>, ptr %dst, align 4
  %x = load <16 x float>, ptr %a, align 4
  %y = load <16 x float>, ptr %b, align 4
  %r = call <16 x float> @llvm.fma.v16f32(<16 x float> %x, <16 x float> %y, <16 x float> %c)
  store <16 x float> %r, ptr %dst, align 4
  ret void
}
define void @vpdpbusd(ptr %dst, ptr %a, ptr %b) {
  %c = load <16 x i32>, ptr %dst, align 4
  %x = load <64 x i8>, ptr %a, align 1
  %y = load <64 x i8>, ptr %b, align 1
  %r = call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> %c, <64 x i8> %x, <64 x i8> %y)
  store <16 x i32> %r, ptr %dst, align 4
  ret void
}
define void @vdpbf16ps(ptr %dst, ptr %a, ptr %b) {
  %c = load <16 x float>, ptr %dst, align 4
  %x = load <32 x bfloat>, ptr %a, align 2
  %y = load <32 x bfloat>, ptr %b, align 2
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %c, <32 x bfloat> %x,
                                                            <32 x bfloat> %y)
  store <16 x float> %r, ptr %dst, align 4
  ret void
}
"""
REQUIRED_FLAGS = {"fma": "avx512f", "vpdpbusd": "avx512_vnni", "vdpbf16ps": "avx512_bf16"}
Probe = Callable[[np.ndarray, np.ndarray, np.ndarray], None]


@pytest.fixture(scope="module")
def probes() -> dict[str, Probe]:
    """name -> the instruction on (dst, a, b) arrays, in place; skips where absent."""
    from tilecraft_x86_avx512 import build

    if not X86Avx512Target().available().execute:
        pytest.skip("this machine cannot run AVX-512 code")
    module = build.jit_compile(PROBES, "the intrinsic probes")
    signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)

    def probe(name: str) -> Probe:
        function = signature(module.address(name))

        def call(dst: np.ndarray, a: np.ndarray, b: np.ndarray, _keep: object = module) -> None:
            function(dst.ctypes.data, a.ctypes.data, b.ctypes.data)

        return call

    return {name: probe(name) for name in REQUIRED_FLAGS}


def needs(flag_of: str) -> None:
    _, flags = read_cpuinfo()
    if REQUIRED_FLAGS[flag_of] not in flags:
        pytest.skip(f"this CPU has no {REQUIRED_FLAGS[flag_of]}")


def test_declarations() -> None:
    assert list(INTRINSICS) == ["fma_f32x16", "fma_f32x16_bcast", "vpdpbusd", "vdpbf16ps"]
    for intrinsic in INTRINSICS.values():
        assert set(intrinsic.memory.levels) == {"DRAM", "register"}
        assert intrinsic.compute.accumulates and intrinsic.compute.destination.shape == (16,)
        (fill,) = intrinsic.memory.fills
        assert fill.level == "register" and fill.value == 0
        # 16 lanes of 32 bits: one zmm register
        assert intrinsic.compute.destination.dtype.bits * 16 == 512
    vnni = INTRINSICS["vpdpbusd"].compute
    assert [(op.name, op.dtype, op.shape) for op in vnni.operands] == [
        ("Src1", DType.UINT8, (4,)), ("Src2", DType.INT8, (16, 4)), ("Dst", DType.INT32, (16,))]
    assert INTRINSICS["vpdpbusd"].memory.moves_of("Src1")[0].instruction == "vpbroadcastd"


def test_fma_semantics() -> None:
    a, b, c = (RNG.standard_normal(16).astype(np.float32) for _ in range(3))
    out = c.copy()
    INTRINSICS["fma_f32x16"].reference(a, b, out)
    np.testing.assert_array_equal(out, c + a * b)
    out = c.copy()
    INTRINSICS["fma_f32x16_bcast"].reference(a[:1], b, out)
    np.testing.assert_array_equal(out, c + a[0] * b)


def test_vpdpbusd_semantics_with_extreme_bytes() -> None:
    group = np.array([255, 0, 1, 255], np.uint8)
    lanes = RNG.integers(-128, 128, (16, 4), dtype=np.int8)
    lanes[0] = -128
    acc = RNG.integers(-(2 ** 20), 2 ** 20, 16, dtype=np.int32)
    expected = acc + lanes.astype(np.int32) @ group.astype(np.int32)
    lane0 = int(acc[0]) - 128 * (255 + 0 + 1 + 255)  # u8 255 is not -1: no sign extension
    INTRINSICS["vpdpbusd"].reference(group, lanes, acc)
    np.testing.assert_array_equal(acc, expected)
    assert acc[0] == lane0


def test_vdpbf16ps_semantics() -> None:
    pair = RNG.standard_normal(2).astype(ml_dtypes.bfloat16)
    lanes = RNG.standard_normal((16, 2)).astype(ml_dtypes.bfloat16)
    acc = RNG.standard_normal(16).astype(np.float32)
    expected = acc + lanes.astype(np.float32) @ pair.astype(np.float32)
    INTRINSICS["vdpbf16ps"].reference(pair, lanes, acc)
    np.testing.assert_allclose(acc, expected, rtol=1e-6, atol=1e-6)


def test_semantics_match_the_instructions(probes: dict[str, Probe]) -> None:
    """The declared (broadcast) semantics against the hardware given the broadcast group."""
    needs("fma")
    a, b, c = (RNG.standard_normal(16).astype(np.float32) for _ in range(3))
    hardware, declared = c.copy(), c.copy()
    probes["fma"](hardware, a, b)
    INTRINSICS["fma_f32x16"].reference(a, b, declared)
    np.testing.assert_allclose(declared, hardware, rtol=1e-6, atol=1e-6)  # fused vs not

    needs("vpdpbusd")
    group = RNG.integers(0, 256, 4, dtype=np.uint8)
    lanes = RNG.integers(-128, 128, (16, 4), dtype=np.int8)
    acc = RNG.integers(-(2 ** 30), 2 ** 30, 16, dtype=np.int32)
    hardware, declared = acc.copy(), acc.copy()
    probes["vpdpbusd"](hardware, np.tile(group, 16), np.ascontiguousarray(lanes))
    INTRINSICS["vpdpbusd"].reference(group, lanes, declared)
    np.testing.assert_array_equal(declared, hardware)

    needs("vdpbf16ps")
    pair = RNG.standard_normal(2).astype(ml_dtypes.bfloat16)
    lanes_bf16 = RNG.standard_normal((16, 2)).astype(ml_dtypes.bfloat16)
    acc32 = RNG.standard_normal(16).astype(np.float32)
    hardware, declared = acc32.copy(), acc32.copy()
    probes["vdpbf16ps"](hardware, np.tile(pair, 16), np.ascontiguousarray(lanes_bf16))
    INTRINSICS["vdpbf16ps"].reference(pair, lanes_bf16, declared)
    np.testing.assert_allclose(declared, hardware, rtol=1e-6, atol=1e-6)


def vnni_gemm_kernel(m: int, n: int, k: int) -> Kernel:
    """C[i, j] = sum_r A[i, r] * B[r, j] with A u8, B s8: B packed lane-major as Bp[j, r]
    (16 lanes x 4 bytes per call), A's 4-byte groups broadcast — the VNNI GEMM."""
    a = Buffer("A", (m * k,), DType.UINT8, level="DRAM")
    bp = Buffer("Bp", (n, k), DType.INT8, level="DRAM")
    c = Buffer("C", (m * n,), DType.INT32, level="DRAM")
    i, jb, kb, j = Var("i"), Var("jb"), Var("kb"), Var("j")
    zero = For(j, const(m * n), LoopKind.SERIAL, Store(c, (j,), const(0)))
    call = IntrinsicCall("vpdpbusd", (Region(a, (i * k + kb * 4,), (4,)),
                                      Region(bp, (jb * 16, kb * 4), (16, 4)),
                                      Region(c, (i * n + jb * 16,), (16,))))
    loops = For(i, const(m), LoopKind.SERIAL, For(jb, const(n // 16), LoopKind.SERIAL,
                                                  For(kb, const(k // 4), LoopKind.SERIAL, call)))
    return Kernel("vnni_gemm", (a, bp, c), ("C",), Seq((zero, loops)))


@pytest.mark.parametrize(("m", "n", "k"), [(3, 32, 28), (1, 16, 4)])
def test_emulated_vnni_gemm_matches_numpy(m: int, n: int, k: int) -> None:
    target = X86Avx512Target(cpu="icelake-server")  # declares vpdpbusd whatever this host has
    kernel = vnni_gemm_kernel(m, n, k)
    check_kernel_supported(kernel, target.spec)  # declared names, levels and shapes
    a = RNG.integers(0, 256, (m, k), dtype=np.uint8)
    b = RNG.integers(-128, 128, (k, n), dtype=np.int8)
    arrays = {"A": a.reshape(-1), "Bp": np.ascontiguousarray(b.T),
              "C": np.zeros(m * n, np.int32)}
    target.emulate(kernel, arrays)
    np.testing.assert_array_equal(arrays["C"].reshape(m, n),
                                  a.astype(np.int32) @ b.astype(np.int32))
