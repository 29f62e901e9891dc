"""The nvidia_tc target object: honest availability, no code generation yet, emulation of
Kernel IR whose intrinsic calls run the declared WMMA semantics, and load-time rejection of a
broken declaration file."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from tilecraft_nvidia_tc.target import INTRINSIC_FILES, TARGET_NAME, NvidiaTcTarget

import tilecraft as tc
from tilecraft.dtypes import DType
from tilecraft.errors import CodegenError, PluginError
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
from tilecraft.target import Capability, TargetSpec, get_target
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def target() -> NvidiaTcTarget:
    return NvidiaTcTarget()


def test_discovered_through_its_entry_point() -> None:
    assert isinstance(get_target(TARGET_NAME), NvidiaTcTarget)


def test_availability_says_what_is_missing(target: NvidiaTcTarget) -> None:
    availability = target.available()
    assert availability.capability in (Capability.EMULATE, Capability.EXECUTE)
    assert availability.emulate
    if not availability.codegen:
        assert not availability.execute
        assert "not implemented yet" in availability.reasons["codegen"]
        assert "later issue" in availability.explain()


def test_codegen_gives_cuda_and_refuses_what_it_cannot_express(
        target: NvidiaTcTarget) -> None:
    a = tc.te.placeholder((4,), "float32", name="a")
    b = tc.te.compute((4,), lambda i: a[i] * 2.0, name="b")
    exe = tc.compile(b, target=target)
    (source,) = exe.sources.values()
    assert (source.language, source.meta["entry"]) == ("cuda", "b")
    kernel = Kernel("k", (), (), For(Var("p"), const(2), LoopKind.PARALLEL, Seq(())))
    with pytest.raises(CodegenError, match="kernel k: the CUDA code generator cannot express "
                                           "a parallel loop"):
        target.codegen(kernel)


def wmma_gemm_kernel(m: int, n: int, k: int, intrinsic: str = "wmma_m16n16k16_f16_f32",
                     tile: tuple[int, int, int] = (16, 16, 16),
                     level: str = "fragment") -> Kernel:
    """C[m, n] = A[m, k] @ B[k, n]: one block per output tile, K in steps of the tile's k;
    A and B tiles staged in shared memory, the accumulator in a fragment."""
    tm, tn, tk = tile
    a = Buffer("A", (m, k), DType.FLOAT16, level="global")
    b = Buffer("B", (k, n), DType.FLOAT16, level="global")
    c = Buffer("C", (m, n), DType.FLOAT32, level="global")
    a_tile = Buffer("a_tile", (tm, tk), DType.FLOAT16, level="shared")
    b_tile = Buffer("b_tile", (tk, tn), DType.FLOAT16, level="shared")
    acc = Buffer("acc", (tm, tn), DType.FLOAT32, level=level)
    bm, bn, kk, i, j = Var("bm"), Var("bn"), Var("kk"), Var("i"), Var("j")
    zero = (const(0), const(0))
    fill = For(i, const(tm), LoopKind.SERIAL,
               For(j, const(tn), LoopKind.SERIAL, Store(acc, (i, j), const(0.0))))
    step = Seq((
        Copy(Region(a_tile, zero, (tm, tk)), Region(a, (bm * tm, kk * tk), (tm, tk))),
        Copy(Region(b_tile, zero, (tk, tn)), Region(b, (kk * tk, bn * tn), (tk, tn))),
        IntrinsicCall(intrinsic, (Region(a_tile, zero, (tm, tk)),
                                  Region(b_tile, zero, (tk, tn)),
                                  Region(acc, zero, (tm, tn))))))
    block = Allocate(acc, Allocate(a_tile, Allocate(b_tile, Seq((
        fill,
        For(kk, const(k // tk), LoopKind.SERIAL, step),
        Copy(Region(c, (bm * tm, bn * tn), (tm, tn)), Region(acc, zero, (tm, tn))))))))
    body = For(bm, const(m // tm), LoopKind.BOUND,
               For(bn, const(n // tn), LoopKind.BOUND, block, axis="blockIdx.x"),
               axis="blockIdx.y")
    return Kernel("wmma_gemm", (a, b, c), ("C",), body)


@pytest.mark.parametrize(("shape", "intrinsic", "tile"), [
    ((32, 48, 64), "wmma_m16n16k16_f16_f32", (16, 16, 16)),
    ((64, 16, 16), "wmma_m32n8k16_f16_f32", (32, 8, 16)),
    ((16, 32, 48), "mma_m16n8k16_f16_f32", (16, 8, 16)),
])
def test_emulated_wmma_gemm_matches_numpy(target: NvidiaTcTarget, shape: tuple[int, int, int],
                                          intrinsic: str, tile: tuple[int, int, int]) -> None:
    m, n, k = shape
    rng = np.random.default_rng(0)
    arrays = {"A": rng.standard_normal((m, k)).astype(np.float16),
              "B": rng.standard_normal((k, n)).astype(np.float16),
              "C": np.zeros((m, n), np.float32)}
    target.emulate(wmma_gemm_kernel(m, n, k, intrinsic, tile), arrays)
    expected = arrays["A"].astype(np.float32) @ arrays["B"].astype(np.float32)
    np.testing.assert_allclose(arrays["C"], expected, rtol=1e-5, atol=1e-4)


def test_emulation_rejects_what_the_target_does_not_declare(target: NvidiaTcTarget) -> None:
    arrays = {"A": np.zeros((16, 16), np.float16), "B": np.zeros((16, 16), np.float16),
              "C": np.zeros((16, 16), np.float32)}
    with pytest.raises(CodegenError, match="buffer acc is in memory level 'registers', which "
                                           "this target does not have"):
        target.emulate(wmma_gemm_kernel(16, 16, 16, level="registers"), arrays)
    with pytest.raises(CodegenError, match=r"call of intrinsic wmma_m32n8k16_f16_f32: operand "
                                           r"0 \(Src1\) is a region of a_tile with extents "
                                           r"\(16, 16\); the intrinsic declares shape "
                                           r"\(32, 16\)"):
        target.emulate(wmma_gemm_kernel(16, 16, 16, "wmma_m32n8k16_f16_f32"), arrays)


def test_a_broken_declaration_file_is_rejected_naming_plugin_intrinsic_and_field(
        tmp_path: Path) -> None:
    package = files("tilecraft_nvidia_tc")
    text = (package / "intrinsics" / INTRINSIC_FILES[0]).read_text()
    broken = tmp_path / "wmma.yaml"
    broken.write_text(text.replace("from_level: shared", "from_level: smem", 1))
    with pytest.raises(PluginError) as info:
        TargetSpec.from_yaml(package / "spec.yaml", plugin=TARGET_NAME,
                             intrinsic_files=[broken])
    message = str(info.value)
    assert message.startswith(f"invalid intrinsic declarations of plugin 'nvidia_tc' in "
                              f"{broken}:")
    assert "intrinsics[0] (wmma_m16n16k16_f16_f32).memory.moves[0].from_level (line " in message
    assert "'smem' is not a memory level of target nvidia_tc; the levels are global, L2, " \
           "shared, fragment" in message
