"""The nvidia_tc performance model against hand counts: an elementwise add is DRAM-bound at
the spec's bandwidth, the template's fp16 GEMM is compute-bound at the CUDA-core FMA rate,
Tensor Core calls run at the intrinsic's rate, bank conflicts and uncoalesced accesses cost
what they should, and the H100 variant is faster than the A100 in the expected ratios."""

from __future__ import annotations

import math

import pytest
from tilecraft_nvidia_tc.model import GpuMachine, estimate_kernel, profile_for
from tilecraft_nvidia_tc.model.hierarchy import predict

from tilecraft import ops, te
from tilecraft.dtypes import DType
from tilecraft.errors import TargetError
from tilecraft.kernel_ir import Buffer, BufferLoad, For, Kernel, LoopKind, Store
from tilecraft.kernel_ir.nodes import Allocate, IntrinsicCall, LaunchConfig, Region, Seq
from tilecraft.lower.compute import lower_compute
from tilecraft.lower.options import LoweringOptions
from tilecraft.target import get_target
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def a100():
    return get_target("nvidia_tc")


@pytest.fixture(scope="module")
def h100():
    return get_target("nvidia_tc:h100")


def _add(n: int, target):
    A = te.placeholder((n,), "float32", name="A")
    B = te.placeholder((n,), "float32", name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return lower_compute(C, LoweringOptions.from_spec(target.spec))


def _gemm(n: int, target, dtype: str = "float16"):
    A = te.placeholder((n, n), dtype, name="A")
    B = te.placeholder((n, n), dtype, name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    return target.lower_compute(C, LoweringOptions.from_spec(target.spec))[0]


@pytest.mark.parametrize("n", [1 << 24, 10_000_019])
def test_elementwise_add_is_dram_bound_at_the_spec_bandwidth(a100, n):
    kernel = _add(n, a100)
    estimate = estimate_kernel(kernel, a100.spec)
    spec = a100.spec
    bandwidth = spec.memory.levels[0].bandwidth_bytes_per_cycle * spec.compute.frequency_hz
    by_hand = 3 * 4 * n / bandwidth          # A and B read, C written once
    assert estimate.bound == "DRAM"
    assert estimate.seconds == pytest.approx(by_hand, rel=0.02)
    assert a100.estimate(kernel).detail["bound_DRAM"] == 1.0


def test_gemm_4096_fp16_is_compute_bound_at_the_cuda_core_rate(a100):
    kernel = _gemm(4096, a100)
    estimate = estimate_kernel(kernel, a100.spec)
    profile = profile_for(kernel, a100.spec)
    assert profile.instructions == {"float32": 4096 ** 3}       # one FMA per multiply-add
    assert profile.flops == 2 * 4096 ** 3
    # by hand: 64 FMA per clock per SM, 108 SMs, 1.41 GHz; whole waves of blocks
    machine = GpuMachine.from_spec(a100.spec)
    assert machine.fma_per_clock("float32") == 64
    ideal = 4096 ** 3 / (64 * 108) / 1.41e9                       # 7.05 ms
    per_sm = estimate.occupancy.blocks_per_core
    blocks_on_busiest = (profile.blocks // (108 * per_sm)) * per_sm \
        + math.ceil(profile.blocks % (108 * per_sm) / 108)
    by_hand = blocks_on_busiest * (4096 ** 3 / profile.blocks) / 64 / 1.41e9
    assert estimate.bound == "compute"
    assert estimate.seconds == pytest.approx(by_hand, rel=1e-9)
    assert ideal <= estimate.seconds <= 1.1 * ideal


def test_h100_is_faster_than_a100_in_the_expected_ratios(a100, h100):
    add_a = estimate_kernel(_add(1 << 24, a100), a100.spec)
    add_h = estimate_kernel(_add(1 << 24, h100), h100.spec)
    assert add_a.seconds / add_h.seconds == pytest.approx(3350 / 1555, rel=0.03)  # HBM3 / HBM2
    gemm_a = estimate_kernel(_gemm(4096, a100), a100.spec)
    gemm_h = estimate_kernel(_gemm(4096, h100), h100.spec)
    peak_ratio = (132 * 128 * 1.83) / (108 * 64 * 1.41)                          # 3.17x
    assert 2.0 < gemm_a.seconds / gemm_h.seconds <= peak_ratio * 1.01
    assert h100.spec.threads.architectures[0] == "sm_90"
    assert a100.spec.threads.architectures[0] == "sm_80"


def _tensor_core_kernel(calls_per_warp: int, blocks: int, warps: int) -> Kernel:
    """Each warp of each block issues ``calls_per_warp`` 16x16x16 fp16 WMMA calls on
    fragments (no memory traffic beyond a tiny output)."""
    a = Buffer("a", (16, 16), DType.FLOAT16, level="fragment")
    b = Buffer("b", (16, 16), DType.FLOAT16, level="fragment")
    c = Buffer("c", (16, 16), DType.FLOAT32, level="fragment")
    out = Buffer("out", (1,), DType.FLOAT32)
    block, thread, step = Var("block"), Var("thread"), Var("step")
    zero = (const(0), const(0))
    call = IntrinsicCall("wmma_m16n16k16_f16_f32", (
        Region(a, zero, (16, 16)), Region(b, zero, (16, 16)), Region(c, zero, (16, 16))))
    body = Allocate(a, Allocate(b, Allocate(c, Seq((
        For(step, const(calls_per_warp), LoopKind.SERIAL, call),)))))
    return Kernel("tc", (out,), ("out",), For(block, const(blocks), LoopKind.BOUND, For(
        thread, const(32 * warps), LoopKind.BOUND, body, axis="threadIdx.x"),
        axis="blockIdx.x"), launch=LaunchConfig((blocks,), (32 * warps,), 0))


def test_tensor_core_calls_run_at_the_intrinsic_rate(a100, h100):
    kernel = _tensor_core_kernel(calls_per_warp=1024, blocks=108 * 4, warps=4)
    profile = profile_for(kernel, a100.spec)
    assert profile.tensor_macs == 108 * 4 * 4 * 1024 * 16 ** 3
    a = estimate_kernel(kernel, a100.spec)
    # 0.25 issues per clock per SM (1024 fp16 FMA / 4096): each SM runs 16 warps x 1024 calls
    assert a.bound == "tensor core"
    assert a.cycles == pytest.approx(16 * 1024 / 0.25)
    h = estimate_kernel(kernel, h100.spec)  # twice the rate per clock; 132 SMs share the work
    assert h.bound == "tensor core"
    assert h.cycles == pytest.approx(math.ceil(432 / 132) * 4 * 1024 / 0.5)


def test_tensor_cores_of_idle_sub_partitions_do_not_count(a100):
    """One block per SM (108 blocks) of 1, 2 or 4 warps, each warp 1024 calls: a warp feeds
    its own sub-partition's Tensor Core, 1/16 issue per clock (the SM's 1/4 over 4), so every
    case takes 1024 x 16 = 16384 cycles. Before issue 12's model change the SM's whole rate
    counted: 1 warp 1024 / 0.25 = 4096 cycles, 2 warps 8192, 4 warps 16384."""
    for warps in (1, 2, 4):
        kernel = _tensor_core_kernel(calls_per_warp=1024, blocks=108, warps=warps)
        estimate = estimate_kernel(kernel, a100.spec)
        assert estimate.bound == "tensor core"
        assert estimate.cycles == pytest.approx(1024 * 16)


def _column_reader(stride: int) -> Kernel:
    """One warp reading ``s[t * stride]`` (shared) and ``g[t * stride]`` (global) 1024 times."""
    s = Buffer("s", (32 * stride,), DType.FLOAT32, level="shared")
    g = Buffer("g", (32 * stride,), DType.FLOAT32)
    out = Buffer("out", (32,), DType.FLOAT32)
    t, r = Var("t"), Var("r")
    body = Allocate(s, For(t, const(32), LoopKind.BOUND, For(r, const(1024), LoopKind.SERIAL,
        Store(out, (t,), BufferLoad(s, (t * stride,)) + BufferLoad(g, (t * stride,)))),
        axis="threadIdx.x"))
    return Kernel("cols", (g, out), ("out",), body, launch=LaunchConfig((1,), (32,), 0))


def test_bank_conflicts_and_uncoalesced_reads_cost_more(a100):
    dense, strided = (profile_for(_column_reader(k), a100.spec) for k in (1, 32))
    assert dense.shared_wavefronts == 1024 and strided.shared_wavefronts == 32 * 1024
    # 32 lanes x 4 bytes: 4 sectors; 32 apart: one sector each (plus the output's 4)
    assert dense.l2_bytes == 1024 * (4 + 4) * 32
    assert strided.l2_bytes == 1024 * (32 + 4) * 32


def test_the_compile_report_prints_predicted_time_and_bound(a100):
    import numpy as np

    import tilecraft as tc

    if not a100.available().build:
        pytest.skip(f"no CUDA build here: {a100.available().reasons.get('build')}")
    A = te.placeholder((37, 29), "float32", name="A")
    B = te.compute((37, 29), lambda i, j: A[i, j] * 2.0, name="B")
    exe = tc.compile(tc.Graph([B]) if hasattr(tc, "Graph") else B, target="nvidia_tc")
    text = str(exe.report)
    assert "model sm_80:" in text and "-bound" in text and "(build)" in text
    out = exe(A=np.ones((37, 29), np.float32))
    np.testing.assert_array_equal(out["B"] if isinstance(out, dict) else out, 2.0)


def test_a_block_no_sm_holds_is_an_error_naming_the_limit(a100):
    kernel = _add(1024, a100)
    profile = profile_for(kernel, a100.spec)
    with pytest.raises(TargetError, match=r"kernel .*: no sm_80 SM can hold.*shared"):
        predict(profile, GpuMachine.from_spec(a100.spec), registers=32,
                shared_bytes=200_000)


def test_variants_are_listed_and_unknown_ones_refused(a100):
    assert "h100" in a100.variants()
    with pytest.raises(TargetError, match="no variant 'b200'.*h100"):
        get_target("nvidia_tc:b200")
    assert a100.available().estimate and get_target("nvidia_tc:h100").available().estimate


def _wmma_gemm(n: int, target):
    from tilecraft_nvidia_tc.tensor_cores import lower_wmma_mapping

    from tilecraft.intrin import generate, match

    A = te.placeholder((n, n), "float16", name="A")
    B = te.placeholder((n, n), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    mma = target.spec.intrinsic("wmma_m16n16k16_f16_f32")
    [kernel] = lower_wmma_mapping(C, generate(C, mma, match(C, mma).mappings[0]),
                                  LoweringOptions.from_spec(target.spec))
    return kernel


def _wmma_wavefronts_per_block(n: int) -> int:
    """Shared wavefronts of one block of the default WMMA kernel (64x64x32 block tiles, 2x2
    warps of 2x2 16x16x16 fp16 fragments, 128 threads), counted by hand:

    - fragment loads: per warp and 16-wide k step 2 A + 2 B fragments of 512 bytes, each 4
      conflict-free wavefronts (once per warp, not per thread): 4 warps x n/16 x 16;
    - staging (cp.async, double-buffered): per 32-wide k slice A_s and B_s get 2048 halves
      each in 256 16-byte chunks, a warp's 32 chunks (512 bytes, rows 48 bytes apart) 4
      wavefronts: n/32 x 2 x 8 x 4;
    - epilogue: 16 store_matrix_sync of 16x16 fp32 (1024 bytes: 8 wavefronts) and 4096
      floats read back by 128 warp loads, each 2 panel rows of 16 floats 80 bytes apart
      (banks 0-15 and 20-35: banks 0-3 twice, 2 wavefronts)."""
    return 4 * (n // 16) * 16 + (n // 32) * 2 * 32 + 16 * 8 + 128 * 2


def test_wmma_fragments_are_counted_once_per_warp(a100):
    """A fragment is spread over a warp: 2 A + 2 B fp16 fragments (4 registers each) and 4
    fp32 accumulators (8 each) are 48 registers per thread besides the overhead, not the whole
    tiles in every thread; the Tensor Core issues are 4 mma_sync per warp and k step."""
    from tilecraft_nvidia_tc.model.profile import REGISTER_OVERHEAD

    profile = profile_for(_wmma_gemm(256, a100), a100.spec)
    assert profile.blocks == 16 and profile.threads_per_block == 128
    assert profile.registers_per_thread == 2 * 4 + 2 * 4 + 4 * 8 + REGISTER_OVERHEAD
    assert profile.tensor_issues == {"wmma_m16n16k16_f16_f32": 16 * 4 * (256 // 16) * 4}
    assert profile.tensor_macs == 256 ** 3
    assert profile.shared_wavefronts == 16 * _wmma_wavefronts_per_block(256)
    # a depth-2 pipeline: slice kt + 1 in flight while kt is multiplied, one round trip waited
    # for per step
    assert profile.global_rounds == 256 // 32
    assert profile.shared_bytes_per_block == 2 * (2 * 2 * 64 * 24 * 2) + 4 * 64 * 20 * 4


def test_wmma_gemm_256_is_latency_bound_at_one_round_trip_per_k_slice(a100):
    """256^3 fp16: 16 blocks, one per SM (3 fit: 96 registers x 128 threads, 44.5 KB shared).
    Per block: Tensor Cores 256 issues at 1/4 per clock = 1024 cycles (AMOS: 0.73 us),
    shared 1920 wavefronts at 1 per clock, and 8 pipeline steps each waiting one global round
    trip of the spec's DRAM latency: 8 x 470 = 3760 cycles = 2.67 us at 1.41 GHz."""
    estimate = estimate_kernel(_wmma_gemm(256, a100), a100.spec)
    machine = GpuMachine.from_spec(a100.spec)
    assert _wmma_wavefronts_per_block(256) == 1920
    assert estimate.bound == "latency"
    assert estimate.cycles == pytest.approx(8 * machine.global_latency_cycles)
    detail = estimate.detail()
    assert detail["tensor_core_seconds"] == pytest.approx(1024 / machine.frequency_hz)
    assert detail["shared_seconds"] == pytest.approx(1920 / machine.frequency_hz)
    assert 1e-6 < estimate.seconds < 5e-6


def test_wmma_gemm_1024_is_shared_bound(a100):
    """1024^3 fp16: 256 blocks, 3 per SM fit, so one wave with ceil(256 / 108) = 3 blocks on
    the busiest SM. Per block 6528 shared wavefronts (4096 fragment loads, 2048 cp.async
    chunk stores, 384 epilogue) against 1024 Tensor Core issues (4096 cycles) and 32 round
    trips (15040 cycles): 3 x 6528 = 19584 cycles = 13.9 us at 1.41 GHz, shared-bound
    (cuBLAS-class kernels take about 8 us; element-wise staging stores made it 18.2 us)."""
    estimate = estimate_kernel(_wmma_gemm(1024, a100), a100.spec)
    machine = GpuMachine.from_spec(a100.spec)
    assert _wmma_wavefronts_per_block(1024) == 6528
    assert estimate.bound == "shared"
    assert estimate.cycles == pytest.approx(3 * 6528 / machine.shared_wavefronts_per_clock)
    assert estimate.seconds == pytest.approx(13.9e-6, rel=0.01)


def test_the_build_line_of_a_wmma_kernel_predicts_microseconds(a100):
    """The compile report's model line for the 256^3 fp16 WMMA kernel uses the build's
    registers (no longer 1300-odd estimated per thread) and predicts microseconds, not the
    tens of microseconds of a per-thread count of the fragment loads."""
    import re

    import tilecraft as tc

    if not a100.available().build:
        pytest.skip(f"no CUDA build here: {a100.available().reasons.get('build')}")
    A = te.placeholder((256, 256), "float16", name="A")
    B = te.placeholder((256, 256), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    exe = tc.compile(C, target="nvidia_tc", tensorize={"C": "wmma_m16n16k16_f16_f32"})
    line = next(line for line in str(exe.report).splitlines() if "model sm_80:" in line)
    assert "(build)" in line
    value, unit = re.search(r"model sm_80: ([0-9.]+) (us|ms) predicted", line).groups()
    assert unit == "us" and 1.0 < float(value) < 10.0, line


def test_mma_sync_gathers_are_counted_lane_by_lane(a100):
    """The mma.sync kernel of a 1024^3 fp16 GEMM (64x64x32 block tiles, 2x2 warps of 2x4
    m16n8k16 tiles, 128 threads): lanes gather their registers with ldmatrix (8x8 matrices of
    16-byte rows), so the model counts the wavefronts of those accesses, bank conflicts
    included, and a Tensor Core issue per warp
    and m16n8k16 call. Per block, by hand:

    - fragment loads: per warp and 16-wide k step 2 A (ldmatrix.x4: 4 conflict-free 8x8
      matrices, rows of 24 halves) + 4 B (ldmatrix.x2.trans: 2) = 16 wavefronts:
      4 warps x 64 k steps x 16 = 4096;
    - staging: cp.async as for WMMA, A_s and B_s 32 wavefronts each per k slice: 32 x 64;
    - epilogue: 8 accumulators per warp scattered by 4 32-bit stores each 2-way conflicted
      (2q + (i & 1) with rows g apart: no row length avoids it) = 4 x 64; 4096 floats read
      back by 128 warp loads over 4 rows of 9 floats (2 wavefronts) = 256."""
    from tilecraft_nvidia_tc.codegen.mma_sync import padded_row, shared_wavefronts
    from tilecraft_nvidia_tc.tensor_cores import lower_tensor_core_mapping

    from tilecraft.intrin import generate, match

    assert [shared_wavefronts(use, b, padded_row(use, n, b)) for use, n, b in
            (("matrix_a", 16, 2), ("matrix_b", 16, 2), ("accumulator", 8, 4))] == [4, 2, 8]
    A = te.placeholder((1024, 1024), "float16", name="A")
    B = te.placeholder((1024, 1024), "float16", name="B")
    C = ops.matmul(A, B, out_dtype="float32", name="C")
    mma = a100.spec.intrinsic("mma_m16n8k16_f16_f32")
    [kernel] = lower_tensor_core_mapping(C, generate(C, mma, match(C, mma).mappings[0]),
                                         LoweringOptions.from_spec(a100.spec))
    profile = profile_for(kernel, a100.spec)
    assert profile.blocks == 256 and profile.threads_per_block == 128
    assert profile.tensor_issues == {"mma_m16n8k16_f16_f32": 256 * 4 * 64 * 8}
    assert profile.tensor_macs == 1024 ** 3
    assert profile.shared_wavefronts == 256 * (4096 + 2048 + 256 + 256)
    # B's panels hold two m16n8 tiles side by side (16 halves + 8 of padding), as WMMA's:
    # A_s and B_s 2 x 12 KB, C_s 8 panels x 64 rows x 9 floats
    assert profile.shared_bytes_per_block == 2 * 12288 + 8 * 64 * 9 * 4
    # A 2x4 outer product of m16n8 tiles: 2 x 4 + 4 x 2 + 8 x 4 registers of fragments
    from tilecraft_nvidia_tc.model.profile import REGISTER_OVERHEAD

    assert profile.registers_per_thread == 2 * 4 + 4 * 2 + 8 * 4 + REGISTER_OVERHEAD
