"""The nvidia_tc spec: A100-like figures, the loop kinds and primitives a CUDA code generator
expresses, and intrinsics whose cost figures agree with the Tensor Core rates."""

from __future__ import annotations

import pytest
from tilecraft_nvidia_tc.target import NvidiaTcTarget, load_target_spec

from tilecraft.kernel_ir.nodes import LoopKind
from tilecraft.lower import LoweringOptions
from tilecraft.target.memory import MemoryKind
from tilecraft.target.spec import EvaluationMode, SchedulePrimitive, TargetSpec

SMS, CLOCK_HZ = 108, 1.41e9


@pytest.fixture(scope="module")
def spec() -> TargetSpec:
    return load_target_spec()


def test_memory_hierarchy_is_a100_like(spec: TargetSpec) -> None:
    assert spec.memory.names == ("global", "L2", "shared", "fragment")
    kinds = [level.kind for level in spec.memory.levels]
    assert kinds == [MemoryKind.DRAM, MemoryKind.CACHE, MemoryKind.SCRATCHPAD,
                     MemoryKind.REGISTERS]
    assert spec.memory.level("shared").size_bytes == 164 * 1024
    assert spec.memory.level("fragment").size_bytes == 16384 * 4
    assert spec.memory.level("L2").size_bytes == 40 * 1024 * 1024
    assert spec.memory.instances("shared") == SMS
    assert spec.memory.instances("fragment") == 4 * SMS
    # 1555 GB/s of HBM2 at the boost clock
    assert spec.memory.outermost.bandwidth_bytes_per_cycle * CLOCK_HZ == pytest.approx(
        1555e9, rel=0.01)


def test_compute_and_schedule_facts(spec: TargetSpec) -> None:
    assert spec.compute.cores == SMS and spec.compute.frequency_hz == CLOCK_HZ
    assert spec.compute.peak_flops("float32") == pytest.approx(19.5e12, rel=0.01)
    assert set(spec.loop_kinds) == {LoopKind.SERIAL, LoopKind.BOUND, LoopKind.UNROLLED,
                                    LoopKind.VECTOR}
    assert spec.offers(SchedulePrimitive.BIND) and not spec.offers(SchedulePrimitive.PARALLEL)
    threads = spec.threads
    assert threads.subgroup_size == 32 and threads.max_threads_per_block == 1024
    assert threads.axis("threadIdx.z").max_extent == 64
    assert threads.shared_bytes_per_block == 48 * 1024
    assert threads.max_shared_bytes_per_block == 163 * 1024
    assert spec.barrier_scopes == ("block", "warp")
    assert "warp_size" not in spec.fixed_decisions
    assert spec.evaluation is EvaluationMode.MEASURE
    options = LoweringOptions.from_spec(spec)
    assert options.param_level == "global" and options.register_level == "fragment"


def test_intrinsics_are_named_systematically(spec: TargetSpec) -> None:
    names = [intrinsic.name for intrinsic in spec.intrinsics]
    wmma = [f"wmma_m{m}n{n}k{k}_{types}" for m, n, k in ((16, 16, 16), (32, 8, 16), (8, 32, 16))
            for types in ("f16_f32", "f16_f16", "bf16_f32", "i8_i32")]
    mma = [f"mma_m16n8k16_{types}" for types in ("f16_f32", "f16_f16", "bf16_f32", "i8_i32")]
    assert names == wmma + mma
    for intrinsic in spec.intrinsics:
        shape = intrinsic.name.split("_")[1]
        m, rest = shape[1:].split("n")
        n, k = rest.split("k")
        assert [loop.extent for loop in intrinsic.compute.loops] == [int(m), int(n), int(k)]


@pytest.mark.parametrize("name", [n for n in ("wmma_m16n16k16_f16_f32", "wmma_m8n32k16_i8_i32",
                                              "mma_m16n8k16_bf16_f32")])
def test_memory_abstraction_names_the_companions(spec: TargetSpec, name: str) -> None:
    memory = spec.intrinsic(name).memory
    assert set(memory.levels) <= set(spec.memory.names)
    loads = {move.operand: move for move in memory.moves if move.to_level == "fragment"}
    assert loads["Src1"].from_level == "shared" and loads["Src2"].from_level == "shared"
    (store,) = [move for move in memory.moves if move.from_level == "fragment"]
    assert store.operand == "Dst" and store.to_level == "global"
    (fill,) = memory.fills
    assert fill.operand == "Dst" and fill.level == "fragment"
    if name.startswith("wmma"):
        assert loads["Src1"].instruction == "load_matrix_sync"
        assert loads["Dst"].instruction == "load_matrix_sync"
        assert store.instruction == "store_matrix_sync" and fill.instruction == "fill_fragment"
        assert loads["Src1"].address.alignment_bytes == 32
    else:
        assert loads["Src1"].instruction.startswith("ldmatrix")


def test_throughput_matches_the_tensor_core_rate(spec: TargetSpec) -> None:
    """A100: 312 dense fp16/bf16 TFLOPS, 624 int8 TOPS."""
    for intrinsic in spec.intrinsics:
        ops_per_second = (2 * intrinsic.compute.iterations * intrinsic.throughput_per_cycle
                          * SMS * CLOCK_HZ)
        expected = 624e12 if intrinsic.name.endswith("i8_i32") else 312e12
        assert ops_per_second == pytest.approx(expected, rel=0.01), intrinsic.name


def test_target_object() -> None:
    from tilecraft_nvidia_tc.tensor_core_space import evaluated_here

    target = NvidiaTcTarget()  # the file's spec, evaluated by the model where no GPU runs
    assert target.name == "nvidia_tc" and target.spec == evaluated_here(load_target_spec())
