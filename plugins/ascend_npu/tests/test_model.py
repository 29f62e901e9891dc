"""The ascend_npu performance model against hand counts: stage cycles per block from the
spec, the double buffer's overlap, AI-core waves, and the bound it names."""

from __future__ import annotations

import math

import pytest
from tilecraft_ascend_npu.model import STAGES, estimate_kernel
from tilecraft_ascend_npu.target import AscendNpuTarget

import tilecraft as tc
from tilecraft import te
from tilecraft.dtypes import DType
from tilecraft.kernel_ir import (
    Allocate,
    Buffer,
    BufferLoad,
    Copy,
    For,
    IntrinsicCall,
    Kernel,
    LoopKind,
    Region,
    Seq,
    Store,
)
from tilecraft.ops import matmul
from tilecraft.te import Var, const


@pytest.fixture(scope="module")
def target() -> AscendNpuTarget:
    return AscendNpuTarget()


def _gemm_kernel(m: int, k: int, n: int) -> Kernel:
    a = te.placeholder((m, k), name="A", dtype="float16")
    b = te.placeholder((k, n), name="B", dtype="float16")
    (kernel,) = tc.compile(tc.Graph([matmul(a, b)]), target="ascend_npu").kernels
    return kernel


F = 16


def _operands_in_l1_kernel(blocks: int, n1s: int, k1s: int) -> Kernel:
    """Eq. 3.5 with each core's A panel (16 x 16 k1s) and all of B copied into L1 once, then
    n1s x k1s mads (each operand fractal moved L1 -> L0A / L0B), C drained per fractal."""
    a = Buffer("A", (blocks * k1s * F, F), DType.FLOAT16)
    b = Buffer("B", (k1s * n1s * F, F), DType.FLOAT16)
    c = Buffer("C", (blocks * n1s * F, F), DType.FLOAT32)
    a_l1 = Buffer("a_l1", (k1s * F, F), DType.FLOAT16, level="L1")
    b_l1 = Buffer("b_l1", b.shape, DType.FLOAT16, level="L1")
    a_l0 = Buffer("a_l0", (F, F), DType.FLOAT16, level="L0A")
    b_l0 = Buffer("b_l0", (F, F), DType.FLOAT16, level="L0B")
    c_l0 = Buffer("c_l0", (F, F), DType.FLOAT32, level="L0C")
    m1, n1, k1 = Var("m1"), Var("n1"), Var("k1")
    zero, frac = (const(0), const(0)), (F, F)
    k_step = Seq((
        Copy(Region(a_l0, zero, frac), Region(a_l1, (k1 * F, const(0)), frac)),
        Copy(Region(b_l0, zero, frac), Region(b_l1, ((k1 * n1s + n1) * F, const(0)), frac)),
        IntrinsicCall("mad_f16_f32", (Region(a_l0, zero, frac), Region(b_l0, zero, frac),
                                      Region(c_l0, zero, frac)))))
    tile = Allocate(c_l0, Allocate(a_l0, Allocate(b_l0, Seq((
        For(k1, const(k1s), LoopKind.SERIAL, k_step),
        Copy(Region(c, ((m1 * n1s + n1) * F, const(0)), frac), Region(c_l0, zero, frac)))))))
    body = For(m1, const(blocks), LoopKind.BOUND, Allocate(a_l1, Allocate(b_l1, Seq((
        Copy(Region(a_l1, zero, a_l1.shape), Region(a, (m1 * k1s * F, const(0)), a_l1.shape)),
        Copy(Region(b_l1, zero, b.shape), Region(b, zero, b.shape)),
        For(n1, const(n1s), LoopKind.SERIAL, tile))))), axis="block_idx")
    return Kernel("l1_gemm", (a, b, c), ("C",), body)


def test_available_estimates(target: AscendNpuTarget) -> None:
    availability = target.available()
    assert availability.estimate and "estimate" not in availability.reasons


@pytest.mark.parametrize(("m", "k", "n"), [(37, 45, 29), (1, 1, 1), (17, 16, 33)])
def test_gemm_stages_are_the_hand_count(target: AscendNpuTarget, m: int, k: int,
                                        n: int) -> None:
    """The core's NPU lowering: one 16x16 output tile per block, k in chunks of 16, each
    chunk's operand tiles copied GM -> L1 -> L0A / L0B, one mad per chunk, the tile drained
    L0C -> UB -> GM."""
    spec = target.spec
    cost = estimate_kernel(_gemm_kernel(m, k, n), spec)
    blocks, chunks = math.ceil(m / 16) * math.ceil(n / 16), math.ceil(k / 16)
    assert (cost.blocks, cost.tiles_per_block) == (blocks, chunks)
    assert cost.waves == math.ceil(blocks / 32)
    # GM bytes per cycle for each running core, at most what L1 takes in
    share = min(1200 / min(blocks, 32), 512)
    tm, tn, tk = min(m, 16), min(n, 16), min(k, 16)  # the lowering's tiles
    gm_bytes = chunks * (tm * tk + tk * tn) * 2 + tm * tn * 2
    assert cost.counts["gm_bytes"] == gm_bytes
    assert cost.stages["GM"] == pytest.approx(gm_bytes / share)
    assert cost.stages["cube"] == chunks  # one 16x16x16 fractal step per cycle
    assert cost.stages["L1"] == pytest.approx(chunks * (tm * tk + tk * tn) * 2 / 512)
    # L0C zero fill and Fixpipe of the fp32 tile
    assert cost.stages["L0C"] == pytest.approx(2 * tm * tn * 4 / 1024)
    stages = list(cost.stages.values())
    expected_block = sum(stages) / chunks + (chunks - 1) / chunks * max(stages)
    assert cost.block_cycles == pytest.approx(expected_block)
    assert cost.cycles == pytest.approx(cost.waves * expected_block + 500)
    # 1 KB of operands per 16x16x16 step starves the Cube; a 1x1x1 product still takes a
    # whole fractal step
    bound = "cube" if m * n * k == 1 else "GM"
    assert cost.bound == bound
    estimate = target.estimate(_gemm_kernel(m, k, n))
    assert estimate.seconds == pytest.approx(cost.cycles / 1e9)
    assert estimate.detail["bound_stage"] == STAGES.index(bound)


def test_more_blocks_than_cores_run_in_waves(target: AscendNpuTarget) -> None:
    small = estimate_kernel(_gemm_kernel(16 * 8, 32, 16 * 4), target.spec)   # 32 blocks
    large = estimate_kernel(_gemm_kernel(16 * 8, 32, 16 * 12), target.spec)  # 96 blocks
    assert (small.waves, large.waves) == (1, 3)
    assert large.block_cycles == pytest.approx(small.block_cycles)
    assert large.cycles - 500 == pytest.approx(3 * (small.cycles - 500))


def test_operands_kept_on_chip_make_the_cube_the_bound(target: AscendNpuTarget) -> None:
    """Eq. 3.5 with the operands copied into L1 once per core: 2 x 40 mads per block reuse
    them, so MTE1 feeding L0A / L0B (two fractals per mad at 512 bytes per cycle) bounds the
    block, not GM."""
    cost = estimate_kernel(_operands_in_l1_kernel(3, 2, 40), target.spec)
    assert cost.blocks == 3 and cost.counts["mads"] == 2 * 40
    assert cost.stages["cube"] == 80
    assert cost.stages["L1"] == pytest.approx(80 * 2 * 512 / 512)
    assert cost.bound == "L1"


def test_vector_work_is_counted_in_repeats(target: AscendNpuTarget) -> None:
    x, y = Buffer("x", (3, 1000), DType.FLOAT32), Buffer("y", (3, 1000), DType.FLOAT32)
    ub = Buffer("x_ub", (1000,), DType.FLOAT32, level="UB")
    b, i, r = Var("b"), Var("i"), Var("r")
    body = For(b, const(3), LoopKind.BOUND, Allocate(ub, For(r, const(7), LoopKind.SERIAL, Seq((
        For(i, const(1000), LoopKind.SERIAL, Store(ub, (i,), BufferLoad(x, (b, i)))),
        For(i, const(1000), LoopKind.VECTOR,
            Store(ub, (i,), BufferLoad(ub, (i,)) * BufferLoad(ub, (i,))), lanes=64),
        For(i, const(1000), LoopKind.SERIAL, Store(y, (b, i), BufferLoad(ub, (i,)))))))),
        axis="block_idx")
    cost = estimate_kernel(Kernel("sq", (x, y), ("y",), body), target.spec)
    assert cost.tiles_per_block == 7
    assert cost.stages["vector"] == 7 * math.ceil(4000 / 256)
    assert cost.stages["GM"] == pytest.approx(7 * 8000 / 400)
